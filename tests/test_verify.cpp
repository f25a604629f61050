// Tree verification: exact losslessness (analytic enumeration of every draft
// outcome, through the same NodeVerifier steps verify_tree runs), Monte Carlo
// losslessness with chi-square tests (and negative controls that must fail),
// Sequoia's optimal-transport and cover properties, the greedy verifier, and
// the child-sampling schemes.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "src/speculative/sequoia_dp.h"
#include "src/speculative/verify.h"
#include "src/util/error.h"
#include "tests/util/spec_testing.h"

namespace redwood::spec {
namespace {

// Toy models, laws and chi-square from tests/util/spec_testing.h.
using testutil::add_prefixed;
using testutil::chi_square_p;
using testutil::constant_model;
using testutil::Ctx;
using testutil::draw;
using testutil::gamma_q;
using testutil::kAlpha;
using testutil::kSamplesPerSeed;
using testutil::kSeeds;
using testutil::Law;
using testutil::logit_model;
using testutil::max_abs_diff;
using testutil::Toy;
using testutil::unit;

// ---- trees --------------------------------------------------------------------------

StaticTree tree_from_parents(std::vector<int32_t> parent) {
  StaticTree t;
  t.parent = std::move(parent);
  t.depth.assign(t.parent.size(), 0);
  t.rank.assign(t.parent.size(), 0);
  std::vector<int32_t> n(t.parent.size(), 0);
  for (size_t i = 1; i < t.parent.size(); ++i) {
    t.depth[i] = t.depth[static_cast<size_t>(t.parent[i])] + 1;
    t.rank[i] = n[static_cast<size_t>(t.parent[i])]++;
  }
  return t;
}

StaticTree kary(int width, int levels) {  // levels drafted below the root
  return tree_from_parents(testutil::full_tree(width, levels).parent);
}

std::vector<std::vector<int32_t>> children_of(const StaticTree& t) {
  std::vector<std::vector<int32_t>> kids(static_cast<size_t>(t.size()));
  for (int i = 1; i < t.size(); ++i) kids[static_cast<size_t>(t.parent[i])].push_back(i);
  return kids;
}

// ---- exact enumeration ----------------------------------------------------------------

// Every way of drawing k children from q under `sampling`, with its probability
// (computed independently of sample_children, except for the deterministic
// greedy top-k).
void for_each_draw(Verifier sampling, std::span<const float> q, int k,
                   const std::function<void(const std::vector<int32_t>&, double)>& f) {
  const int V = static_cast<int>(q.size());
  double s = 0;
  for (float x : q) s += x;
  std::vector<double> qn(q.size());
  for (size_t i = 0; i < q.size(); ++i) qn[i] = q[i] / s;
  if (sampling == Verifier::kGreedy) {
    Rng unused(0);
    f(sample_children(Verifier::kGreedy, q, k, unused), 1.0);
    return;
  }
  std::vector<int32_t> tup;
  if (sampling == Verifier::kSpecInfer) {
    std::function<void(double)> rec = [&](double pr) {
      if (static_cast<int>(tup.size()) == k) return f(tup, pr);
      for (int x = 0; x < V; ++x) {
        if (qn[static_cast<size_t>(x)] == 0) continue;
        tup.push_back(x);
        rec(pr * qn[static_cast<size_t>(x)]);
        tup.pop_back();
      }
    };
    rec(1.0);
    return;
  }
  // Sampling without replacement; once no positive token is left, uniform over
  // the remaining ones.
  const int kk = std::min(k, V);
  std::vector<char> used(static_cast<size_t>(V), 0);
  std::function<void(double)> rec = [&](double pr) {
    if (static_cast<int>(tup.size()) == kk) return f(tup, pr);
    double rem = 0;
    for (int t = 0; t < V; ++t)
      if (!used[static_cast<size_t>(t)]) rem += qn[static_cast<size_t>(t)];
    for (int x = 0; x < V; ++x) {
      if (used[static_cast<size_t>(x)]) continue;
      const double step = rem > 0 ? qn[static_cast<size_t>(x)] / rem : 1.0 / (V - static_cast<double>(tup.size()));
      if (step == 0) continue;
      used[static_cast<size_t>(x)] = 1;
      tup.push_back(x);
      rec(pr * step);
      tup.pop_back();
      used[static_cast<size_t>(x)] = 0;
    }
  };
  rec(1.0);
}

// Law of the first m emitted tokens of one speculative iteration on `tree`,
// completed by the target's own conditionals when the iteration emits fewer
// than m tokens (the next iterations, lossless by the same argument).
class Enumerator {
 public:
  Enumerator(Verifier verifier, Verifier sampling, const StaticTree& tree, Toy& P, Toy& Q)
      : v_(verifier), s_(sampling), kids_(children_of(tree)), P_(P), Q_(Q) {}

  Law target_law(const Ctx& c, int m) { return testutil::target_law(P_, c, m); }

  Law node_law(int32_t u, const Ctx& c, int m) {
    if (m == 0) return {{{}, 1.0}};
    auto key = std::make_tuple(u, c, m);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    const auto& kids = kids_[static_cast<size_t>(u)];
    const auto& p = P_.dist(c);
    const auto& q = Q_.dist(c);
    Law out;
    auto visit = [&](const std::vector<int32_t>& tup, double pr) {
      NodeVerifier nv;  // fresh: the per-node step verify_tree runs
      nv.begin(v_, p, q);
      double rej = 1;
      for (size_t i = 0; i < tup.size() && rej > 0; ++i) {
        const double a = nv.accept_probability(tup[i]);
        if (a > 0) {
          Ctx c2 = c;
          c2.push_back(tup[i]);
          add_prefixed(out, pr * rej * a, tup[i], node_law(kids[i], c2, m - 1));
        }
        rej *= 1 - a;
        nv.reject(tup[i]);
      }
      if (rej > 0) {
        const auto r = nv.residual();
        const double total = std::accumulate(r.begin(), r.end(), 0.0);
        for (int t = 0; t < static_cast<int>(r.size()); ++t) {
          if (r[static_cast<size_t>(t)] <= 0) continue;
          Ctx c2 = c;
          c2.push_back(t);
          add_prefixed(out, pr * rej * r[static_cast<size_t>(t)] / total, t, target_law(c2, m - 1));
        }
      }
    };
    if (kids.empty())
      visit({}, 1.0);
    else
      for_each_draw(s_, q, static_cast<int>(kids.size()), visit);
    return memo_[key] = out;
  }

 private:
  Verifier v_, s_;
  std::vector<std::vector<int32_t>> kids_;
  Toy& P_;
  Toy& Q_;
  std::map<std::tuple<int32_t, Ctx, int>, Law> memo_;
};

double total_mass(const Law& a) {
  double s = 0;
  for (const auto& kv : a) s += kv.second;
  return s;
}

struct Shape {
  const char* name;
  StaticTree tree;
};

std::vector<Shape> exact_shapes() {
  return {
      {"chain3", kary(1, 3)},
      {"binary2", kary(2, 2)},
      {"ternary2", kary(3, 2)},
      {"star3", kary(3, 1)},
      {"irregular", tree_from_parents({-1, 0, 1, 2, 1, 0, 5, 0})},
      {"sequoia_dp", sequoia_tree({0.55, 0.25, 0.1}, 12, 4)},
  };
}

TEST(VerifyExact, LosslessOnToyModels) {
  int checked = 0;
  for (const Shape& sh : exact_shapes())
    for (int V : {3, 5})
      for (double temp : {0.6, 1.0})
        for (Verifier v : {Verifier::kSpecInfer, Verifier::kSequoia}) {
          SCOPED_TRACE(std::string(sh.name) + " V=" + std::to_string(V) + " T=" + std::to_string(temp) + " " +
                       verifier_name(v));
          Toy P = logit_model(V, 11, 1.0, temp, 0.2);
          Toy Q = logit_model(V, 12, 1.5, temp, 0.25);
          const int m = std::min(sh.tree.max_depth(), 4);  // every drafted level + the leaf bonus
          Enumerator e(v, v, sh.tree, P, Q);
          const Law got = e.node_law(0, {}, m);
          const Law want = e.target_law({}, m);
          EXPECT_LE(max_abs_diff(got, want), 1e-12);
          EXPECT_NEAR(total_mass(got), 1.0, 1e-12);
          // The first token alone, and the first two.
          for (int mm = 1; mm <= std::min(m, 2); ++mm) {
            Enumerator e2(v, v, sh.tree, P, Q);
            EXPECT_LE(max_abs_diff(e2.node_law(0, {}, mm), e2.target_law({}, mm)), 1e-12);
          }
          ++checked;
        }
  EXPECT_EQ(checked, 6 * 2 * 2 * 2);
}

// One node, fixed distributions: the edge cases of section C.
TEST(VerifyExact, LosslessEdgeCases) {
  const std::vector<std::pair<std::vector<double>, std::vector<double>>> pq = {
      {{0.2, 0.3, 0.5}, {0.2, 0.3, 0.5}},             // p = q
      {{0.5, 0.5, 0.0, 0.0}, {0.0, 0.0, 0.3, 0.7}},   // disjoint supports
      {{0.1, 0.2, 0.3, 0.4}, {0.7, 0.3, 0.0, 0.0}},   // q = 0 where p > 0 (k > |supp q|)
      {{0.0, 0.0, 0.6, 0.4}, {0.25, 0.25, 0.25, 0.25}},  // p = 0 where q > 0
      {{1.0, 0.0}, {0.5, 0.5}},                       // the SpecInfer counterexample
      {{0.25, 0.25, 0.25, 0.25}, {0.7, 0.1, 0.1, 0.1}},
      {{0.4, 0.4, 0.2}, {0.4, 0.4, 0.2}},             // ties
      {{0.3, 0.0, 0.7}, {1.0, 0.0, 0.0}},             // one-hot draft
      {{1e-30, 1.0, 0.0}, {1.0, 1e-30, 0.0}},         // near-degenerate
  };
  for (const auto& [pw, qw] : pq)
    for (int k = 1; k <= 4; ++k)
      for (Verifier v : {Verifier::kSpecInfer, Verifier::kSequoia}) {
        SCOPED_TRACE("k=" + std::to_string(k) + " " + verifier_name(v) + " p0=" + std::to_string(pw[0]));
        Toy P = constant_model(pw), Q = constant_model(qw);
        const StaticTree t = kary(k, 1);
        for (int m : {1, 2}) {
          Enumerator e(v, v, t, P, Q);
          EXPECT_LE(max_abs_diff(e.node_law(0, {}, m), e.target_law({}, m)), 1e-12);
        }
      }
}

// The naive per-child rule and SpecInfer's loop over SWOR children are NOT
// lossless (the exact enumeration sees it; the Monte Carlo test below must too).
TEST(VerifyExact, WrongCombinationIsDetected) {
  Toy P = constant_model({0.1, 0.2, 0.3, 0.4}), Q = constant_model({0.4, 0.3, 0.2, 0.1});
  Enumerator e(Verifier::kSpecInfer, Verifier::kSequoia, kary(3, 1), P, Q);
  EXPECT_GT(max_abs_diff(e.node_law(0, {}, 1), e.target_law({}, 1)), 0.05);
}

// ---- acceptance properties (exact) ----------------------------------------------------

// P(some child of the root is accepted) with k children drawn by `sampling`.
double exact_acceptance(Verifier v, Verifier sampling, const std::vector<float>& p, const std::vector<float>& q, int k) {
  double acc = 0;
  for_each_draw(sampling, q, k, [&](const std::vector<int32_t>& tup, double pr) {
    NodeVerifier nv;
    nv.begin(v, p, q);
    double rej = 1;
    for (int32_t x : tup) {
      rej *= 1 - nv.accept_probability(x);
      nv.reject(x);
    }
    acc += pr * (1 - rej);
  });
  return acc;
}

std::vector<float> fvec(std::initializer_list<double> x) {
  std::vector<float> out;
  for (double v : x) out.push_back(static_cast<float>(v));
  return out;
}

TEST(VerifyProperties, OptimalTransportK1) {
  for (int trial = 0; trial < 20; ++trial) {
    const int V = 2 + trial % 5;
    std::vector<float> p(static_cast<size_t>(V)), q(static_cast<size_t>(V));
    double sp = 0, sq = 0;
    for (int t = 0; t < V; ++t) {
      sp += p[static_cast<size_t>(t)] = static_cast<float>(unit(100 + trial, {}, t) * (t % 3 == 2 ? 0 : 1));
      sq += q[static_cast<size_t>(t)] = static_cast<float>(unit(200 + trial, {}, t));
    }
    if (sp == 0) p[0] = 1, sp = 1;
    double tv = 0;
    for (int t = 0; t < V; ++t) tv += std::abs(p[static_cast<size_t>(t)] / sp - q[static_cast<size_t>(t)] / sq);
    for (Verifier v : {Verifier::kSpecInfer, Verifier::kSequoia})
      EXPECT_NEAR(exact_acceptance(v, v, p, q, 1), 1 - tv / 2, 1e-12);
  }
}

TEST(VerifyProperties, Cover) {
  // supp(Q) = {0, 1, 2} covers supp(P) = {0, 2}; k = 3 children accept surely.
  const auto p = fvec({0.3, 0.0, 0.7, 0.0, 0.0});
  const auto q = fvec({0.1, 0.6, 0.3, 0.0, 0.0});
  EXPECT_NEAR(exact_acceptance(Verifier::kSequoia, Verifier::kSequoia, p, q, 3), 1.0, 1e-12);
  EXPECT_LT(exact_acceptance(Verifier::kSpecInfer, Verifier::kSpecInfer, p, q, 3), 0.99);
  // k = V: acceptance 1 whatever the draft, even one missing P's support (the
  // zero-probability tokens come last, uniformly).
  const auto p2 = fvec({0.1, 0.2, 0.3, 0.4});
  const auto q2 = fvec({0.7, 0.3, 0.0, 0.0});
  EXPECT_NEAR(exact_acceptance(Verifier::kSequoia, Verifier::kSequoia, p2, q2, 4), 1.0, 1e-12);
}

TEST(VerifyProperties, PaperCounterexamples) {
  // Q = [.5, .5], P = [1, 0], k = 2: SpecInfer rejects both with prob 25%.
  const auto p = fvec({1.0, 0.0}), q = fvec({0.5, 0.5});
  EXPECT_NEAR(exact_acceptance(Verifier::kSpecInfer, Verifier::kSpecInfer, p, q, 2), 0.75, 1e-15);
  EXPECT_NEAR(exact_acceptance(Verifier::kSequoia, Verifier::kSequoia, p, q, 2), 1.0, 1e-15);
  // P = Q = [.6, .4]: top-1 drafting accepts only when the target's sample is
  // the top draft token (0.6); Sequoia with one sampled child accepts surely.
  const auto p2 = fvec({0.6, 0.4});
  Rng rng(1);
  const auto top1 = sample_children(Verifier::kGreedy, p2, 1, rng);
  ASSERT_EQ(top1, std::vector<int32_t>{0});
  EXPECT_NEAR(p2[static_cast<size_t>(top1[0])], 0.6, 1e-7);
  EXPECT_NEAR(exact_acceptance(Verifier::kSequoia, Verifier::kSequoia, p2, p2, 1), 1.0, 1e-15);
}

// ---- Monte Carlo ------------------------------------------------------------------------

TEST(Stats, GammaQ) {
  EXPECT_NEAR(gamma_q(1.5, 21.108 / 2), 1e-4, 2e-7);   // chi2(3): 21.108 is the 1e-4 quantile
  EXPECT_NEAR(gamma_q(7.5, 44.263 / 2), 1e-4, 2e-7);   // chi2(15)
  EXPECT_NEAR(gamma_q(1.0, 2.0), std::exp(-2.0), 1e-14);
}

// One speculative iteration end to end: draft the tree (children by
// `sampling`), verify_tree, complete to m tokens from the target.
std::vector<int32_t> one_iteration(Verifier v, Verifier sampling, const StaticTree& shape,
                                   const std::vector<std::vector<int32_t>>& kids, Toy& P, Toy& Q, int m, Rng& rng) {
  const int n = shape.size();
  std::vector<Ctx> ctx(static_cast<size_t>(n));
  std::vector<int32_t> token(static_cast<size_t>(n), -1);
  for (int u = 0; u < n; ++u) {
    if (u > 0) {
      ctx[static_cast<size_t>(u)] = ctx[static_cast<size_t>(shape.parent[u])];
      ctx[static_cast<size_t>(u)].push_back(token[static_cast<size_t>(u)]);
    }
    const auto& ks = kids[static_cast<size_t>(u)];
    if (ks.empty()) continue;
    const auto drawn = sample_children(sampling, Q.dist(ctx[static_cast<size_t>(u)]), static_cast<int>(ks.size()), rng);
    for (size_t j = 0; j < ks.size(); ++j) token[static_cast<size_t>(ks[j])] = drawn[j];
  }
  std::vector<int32_t> vparent(static_cast<size_t>(n - 1)), vtoken(static_cast<size_t>(n - 1));
  for (int i = 1; i < n; ++i) {
    vparent[static_cast<size_t>(i - 1)] = shape.parent[i] - 1;
    vtoken[static_cast<size_t>(i - 1)] = token[static_cast<size_t>(i)];
  }
  const TreeView view{vparent, vtoken};
  DistFn target = [&](int32_t u) -> std::span<const float> { return P.dist(ctx[static_cast<size_t>(u + 1)]); };
  // Like the runtime: no draft distribution at leaves (verify_tree must not ask).
  DistFn draft = [&](int32_t u) -> std::span<const float> {
    if (kids[static_cast<size_t>(u + 1)].empty()) return {};
    return Q.dist(ctx[static_cast<size_t>(u + 1)]);
  };
  const VerifyResult r = verify_tree(v, view, target, draft, rng);
  std::vector<int32_t> out;
  for (int32_t a : r.accepted) out.push_back(vtoken[static_cast<size_t>(a)]);
  out.push_back(r.bonus);
  Ctx c;
  while (static_cast<int>(out.size()) < m) {
    c = out;
    out.push_back(draw(P.dist(c), rng));
  }
  out.resize(static_cast<size_t>(m));
  return out;
}

// The deliberately wrong verifier: each SWOR child tested with min(1, p/q)
// independently, no residual updates; all rejected -> norm(max(p - q, 0)).
int32_t naive_first_token(std::span<const float> p, std::span<const float> q, int k, Rng& rng) {
  const auto kids = sample_children(Verifier::kSequoia, q, k, rng);
  for (int32_t x : kids)
    if (rng.uniform() * q[static_cast<size_t>(x)] < p[static_cast<size_t>(x)]) return x;
  std::vector<float> res(p.size());
  for (size_t t = 0; t < p.size(); ++t) res[t] = std::max(p[t] - q[t], 0.0f);
  return draw(res, rng);
}

struct McConfig {
  std::string name;
  Verifier v, sampling;
  bool naive = false;
  StaticTree shape;
  std::function<Toy()> P, Q;
  int m = 1;
};

// Returns the p-values (one per seed).
std::vector<double> run_mc(const McConfig& c) {
  Toy P = c.P(), Q = c.Q();
  const auto kids = children_of(c.shape);
  Enumerator e(c.v, c.sampling, c.shape, P, Q);
  const Law want = e.target_law({}, c.m);
  std::vector<double> pv;
  for (uint64_t seed : kSeeds) {
    Rng rng(seed * 7919 + 17);
    std::map<std::vector<int32_t>, long> counts;
    for (long i = 0; i < kSamplesPerSeed; ++i) {
      if (c.naive)
        ++counts[{naive_first_token(P.dist({}), Q.dist({}), static_cast<int>(kids[0].size()), rng)}];
      else
        ++counts[one_iteration(c.v, c.sampling, c.shape, kids, P, Q, c.m, rng)];
    }
    int dof = 0;
    pv.push_back(chi_square_p(counts, want, kSamplesPerSeed, &dof));
    std::printf("[ chi2 ] %-34s seed %llu: dof %d p = %.4g\n", c.name.c_str(), static_cast<unsigned long long>(seed),
                dof, pv.back());
  }
  return pv;
}

std::vector<McConfig> lossless_configs() {
  auto fixedP = [] { return constant_model({0.1, 0.2, 0.3, 0.4}); };
  auto fixedQ = [] { return constant_model({0.4, 0.3, 0.2, 0.1}); };
  std::vector<McConfig> out;
  for (Verifier v : {Verifier::kSequoia, Verifier::kSpecInfer}) {
    const std::string n = verifier_name(v);
    out.push_back({n + " star3 fixed P/Q", v, v, false, kary(3, 1), fixedP, fixedQ, 1});
    out.push_back({n + " star3 toy T=1.0", v, v, false, kary(3, 1), [] { return logit_model(4, 11, 1.0, 1.0, 0.2); },
                   [] { return logit_model(4, 12, 1.5, 1.0, 0.25); }, 1});
    out.push_back({n + " binary2 toy T=0.6 first 2", v, v, false, kary(2, 2),
                   [] { return logit_model(4, 11, 1.0, 0.6, 0.2); }, [] { return logit_model(4, 12, 1.5, 0.6, 0.25); },
                   2});
  }
  return out;
}

TEST(VerifyMonteCarlo, LosslessChiSquare) {
  for (const McConfig& c : lossless_configs())
    for (double p : run_mc(c)) EXPECT_GT(p, kAlpha) << c.name;
}

TEST(VerifyMonteCarlo, WrongVerifiersFail) {
  auto fixedP = [] { return constant_model({0.1, 0.2, 0.3, 0.4}); };
  auto fixedQ = [] { return constant_model({0.4, 0.3, 0.2, 0.1}); };
  const std::vector<McConfig> bad = {
      {"naive per-child min(1,p/q)", Verifier::kSequoia, Verifier::kSequoia, true, kary(3, 1), fixedP, fixedQ, 1},
      {"specinfer loop on SWOR children", Verifier::kSpecInfer, Verifier::kSequoia, false, kary(3, 1), fixedP, fixedQ,
       1},
  };
  for (const McConfig& c : bad)
    for (double p : run_mc(c)) EXPECT_LT(p, kAlpha) << c.name;
}

// ---- greedy ---------------------------------------------------------------------------------

TEST(VerifyGreedy, LongestPrefixMatchingTargetArgmax) {
  // Random trees, random (non one-hot, sometimes tied) target distributions.
  Rng rng(42);
  const int V = 4;
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + static_cast<int>(rng.uniform() * 12);
    std::vector<int32_t> parent(static_cast<size_t>(n)), token(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      parent[static_cast<size_t>(i)] = static_cast<int32_t>(rng.uniform() * (i + 1)) - 1;  // -1 .. i-1
      token[static_cast<size_t>(i)] = static_cast<int32_t>(rng.uniform() * V);
    }
    std::vector<std::vector<float>> dist(static_cast<size_t>(n) + 1);
    for (auto& d : dist) {
      d.resize(V);
      for (auto& x : d) x = static_cast<float>(1 + static_cast<int>(rng.uniform() * 4));  // ties likely
    }
    DistFn target = [&](int32_t u) -> std::span<const float> { return dist[static_cast<size_t>(u + 1)]; };
    DistFn draft = [&](int32_t) -> std::span<const float> {
      ADD_FAILURE() << "greedy must not ask for the draft";
      return dist[0];
    };
    const VerifyResult r = verify_tree(Verifier::kGreedy, TreeView{parent, token}, target, draft, rng);
    // Reference: from the root, follow the first child (in order) whose token is
    // the argmax (lowest id on ties) of the target at its parent.
    std::vector<int32_t> want;
    int32_t u = -1, bonus = -1;
    for (;;) {
      const auto& d = dist[static_cast<size_t>(u + 1)];
      const int32_t a = static_cast<int32_t>(std::max_element(d.begin(), d.end()) - d.begin());
      int32_t next = -1;
      for (int i = 0; i < n && next < 0; ++i)
        if (parent[static_cast<size_t>(i)] == u && token[static_cast<size_t>(i)] == a) next = i;
      if (next < 0) {
        bonus = a;
        break;
      }
      want.push_back(next);
      u = next;
    }
    EXPECT_EQ(r.accepted, want);
    EXPECT_EQ(r.bonus, bonus);
  }
}

TEST(VerifyGreedy, HandWorkedExample) {
  // root -> {0: tok 2, 1: tok 1}; 1 -> {2: tok 0, 3: tok 3}; 3 -> {4: tok 1}
  const std::vector<int32_t> parent = {-1, -1, 1, 1, 3}, token = {2, 1, 0, 3, 1};
  std::map<int32_t, std::vector<float>> d = {
      {-1, {0.1f, 0.5f, 0.4f, 0.0f}},  // argmax 1 -> node 1
      {1, {0.3f, 0.1f, 0.1f, 0.5f}},   // argmax 3 -> node 3
      {3, {0.2f, 0.2f, 0.6f, 0.0f}},   // argmax 2: node 4 (tok 1) rejected, bonus 2
      {0, {1, 0, 0, 0}}, {2, {1, 0, 0, 0}}, {4, {1, 0, 0, 0}}};
  DistFn f = [&](int32_t u) -> std::span<const float> { return d.at(u); };
  Rng rng(0);
  const VerifyResult r = verify_tree(Verifier::kGreedy, TreeView{parent, token}, f, f, rng);
  EXPECT_EQ(r.accepted, (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(r.bonus, 2);
  // Leaf reached: bonus = argmax at the leaf.
  d[3] = {0.2f, 0.7f, 0.1f, 0.0f};
  d[4] = {0.0f, 0.2f, 0.2f, 0.6f};
  const VerifyResult r2 = verify_tree(Verifier::kGreedy, TreeView{parent, token}, f, f, rng);
  EXPECT_EQ(r2.accepted, (std::vector<int32_t>{1, 3, 4}));
  EXPECT_EQ(r2.bonus, 3);
  // Empty tree: the bonus alone.
  const VerifyResult r3 = verify_tree(Verifier::kGreedy, TreeView{{}, {}}, f, f, rng);
  EXPECT_TRUE(r3.accepted.empty());
  EXPECT_EQ(r3.bonus, 1);
}

// ---- child sampling -------------------------------------------------------------------------

TEST(SampleChildren, GreedyTopKWithTies) {
  Rng rng(3);
  const auto q = fvec({0.1, 0.3, 0.3, 0.0, 0.3});
  EXPECT_EQ(sample_children(Verifier::kGreedy, q, 2, rng), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(sample_children(Verifier::kGreedy, q, 5, rng), (std::vector<int32_t>{1, 2, 4, 0, 3}));
  EXPECT_EQ(sample_children(Verifier::kGreedy, q, 9, rng).size(), 5u);
  EXPECT_TRUE(sample_children(Verifier::kGreedy, q, 0, rng).empty());
  std::vector<float> wide(300);
  for (size_t i = 0; i < wide.size(); ++i) wide[i] = static_cast<float>((i * 37) % 101);
  const auto top = sample_children(Verifier::kGreedy, wide, 100, rng);  // the partial-sort path
  ASSERT_EQ(top.size(), 100u);
  for (size_t i = 1; i < top.size(); ++i)
    EXPECT_TRUE(wide[static_cast<size_t>(top[i - 1])] > wide[static_cast<size_t>(top[i])] ||
                (wide[static_cast<size_t>(top[i - 1])] == wide[static_cast<size_t>(top[i])] && top[i - 1] < top[i]));
}

TEST(SampleChildren, LawsMatch) {
  // Ordered k-tuples against the exact laws (SWOR incl. the uniform zero tail;
  // i.i.d. for SpecInfer).
  const auto q = fvec({0.5, 0.3, 0.2, 0.0, 0.0});
  struct C {
    Verifier v;
    int k;
  };
  for (const C c : {C{Verifier::kSequoia, 2}, C{Verifier::kSequoia, 4}, C{Verifier::kSequoia, 5},
                    C{Verifier::kSpecInfer, 2}}) {
    Law law;
    for_each_draw(c.v, q, c.k, [&](const std::vector<int32_t>& t, double pr) { law[t] += pr; });
    Rng rng(99 + c.k);
    std::map<std::vector<int32_t>, long> counts;
    const long N = 200000;
    for (long i = 0; i < N; ++i) ++counts[sample_children(c.v, q, c.k, rng)];
    int dof = 0;
    const double p = chi_square_p(counts, law, N, &dof);
    std::printf("[ chi2 ] sample_children %s k=%d: dof %d p = %.4g\n", verifier_name(c.v), c.k, dof, p);
    EXPECT_GT(p, kAlpha);
  }
}

TEST(SampleChildren, SworDistinctAndFullCoverage) {
  Rng rng(5);
  std::vector<float> q(1000, 0.0f);
  q[7] = 0.999f;
  q[3] = 0.001f;
  for (int rep = 0; rep < 50; ++rep) {
    auto c = sample_children(Verifier::kSequoia, q, 1000, rng);
    ASSERT_EQ(c.size(), 1000u);
    std::vector<int32_t> sorted = c;
    std::sort(sorted.begin(), sorted.end());
    for (int i = 0; i < 1000; ++i) ASSERT_EQ(sorted[static_cast<size_t>(i)], i);
    EXPECT_TRUE((c[0] == 7 && c[1] == 3) || (c[0] == 3 && c[1] == 7));  // positives first
  }
}

TEST(SampleChildren, InvalidInput) {
  Rng rng(1);
  const auto q = fvec({0.5, 0.5});
  EXPECT_THROW(sample_children(Verifier::kSequoia, q, -1, rng), Error);
  EXPECT_THROW(sample_children(Verifier::kSequoia, {}, 1, rng), Error);
  EXPECT_THROW(sample_children(Verifier::kSpecInfer, fvec({0.0, 0.0}), 1, rng), Error);
  EXPECT_THROW(sample_children(Verifier::kSequoia, fvec({0.5, -0.1}), 1, rng), Error);
  EXPECT_THROW(sample_children(Verifier::kSequoia, fvec({0.5, std::nan("")}), 1, rng), Error);
  EXPECT_EQ(parse_verifier("sequoia"), Verifier::kSequoia);
  EXPECT_EQ(parse_verifier("specinfer"), Verifier::kSpecInfer);
  EXPECT_EQ(parse_verifier("greedy"), Verifier::kGreedy);
  EXPECT_STREQ(verifier_name(Verifier::kSpecInfer), "specinfer");
  EXPECT_THROW(parse_verifier("Sequoia"), Error);
}

// ---- verify_tree input validation and determinism ------------------------------------------

TEST(VerifyTree, RejectsBadInput) {
  std::vector<float> p = fvec({0.5, 0.5}), bad3 = fvec({0.3, 0.3, 0.4}), zero = fvec({0.0, 0.0});
  DistFn ok = [&](int32_t) -> std::span<const float> { return p; };
  DistFn three = [&](int32_t) -> std::span<const float> { return bad3; };
  DistFn zf = [&](int32_t) -> std::span<const float> { return zero; };
  Rng rng(1);
  const std::vector<int32_t> par = {-1, 0}, tok = {0, 1};
  EXPECT_NO_THROW(verify_tree(Verifier::kSequoia, {par, tok}, ok, ok, rng));
  const std::vector<int32_t> par_short = {-1};
  EXPECT_THROW(verify_tree(Verifier::kSequoia, {par_short, tok}, ok, ok, rng), Error);
  const std::vector<int32_t> par_fwd = {1, -1};
  EXPECT_THROW(verify_tree(Verifier::kSequoia, {par_fwd, tok}, ok, ok, rng), Error);
  const std::vector<int32_t> tok_big = {0, 2}, tok_neg = {0, -1};
  const std::vector<int32_t> star = {-1, -1};
  EXPECT_THROW(verify_tree(Verifier::kSequoia, {star, tok_big}, ok, ok, rng), Error);
  EXPECT_THROW(verify_tree(Verifier::kGreedy, {star, tok_neg}, ok, ok, rng), Error);
  EXPECT_THROW(verify_tree(Verifier::kSequoia, {par, tok}, ok, three, rng), Error);
  EXPECT_THROW(verify_tree(Verifier::kSpecInfer, {par, tok}, zf, ok, rng), Error);
  // The path-class verifiers validate the same way.
  for (Verifier v : {Verifier::kTargetSample, Verifier::kSpecTr, Verifier::kMultiDraftIS}) {
    SCOPED_TRACE(verifier_name(v));
    EXPECT_NO_THROW(verify_tree(v, {par, tok}, ok, ok, rng));
    EXPECT_NO_THROW(verify_tree(v, {star, tok}, ok, ok, rng));
    EXPECT_THROW(verify_tree(v, {par_short, tok}, ok, ok, rng), Error);
    EXPECT_THROW(verify_tree(v, {par_fwd, tok}, ok, ok, rng), Error);
    EXPECT_THROW(verify_tree(v, {star, tok_big}, ok, ok, rng), Error);
    EXPECT_THROW(verify_tree(v, {star, tok_neg}, ok, ok, rng), Error);
    EXPECT_THROW(verify_tree(v, {par, tok}, zf, ok, rng), Error);
    if (v != Verifier::kTargetSample) {  // target-sample never reads the draft
      EXPECT_THROW(verify_tree(v, {star, tok}, ok, three, rng), Error);
      EXPECT_THROW(verify_tree(v, {star, tok}, ok, zf, rng), Error);
    }
  }
  EXPECT_EQ(parse_verifier("target-sample"), Verifier::kTargetSample);
  EXPECT_EQ(parse_verifier("spectr"), Verifier::kSpecTr);
  EXPECT_EQ(parse_verifier("multidraft-is"), Verifier::kMultiDraftIS);
}

TEST(VerifyTree, DeterministicGivenSeed) {
  Toy P = logit_model(5, 11, 1.0, 1.0, 0.2), Q = logit_model(5, 12, 1.5, 1.0, 0.25);
  const StaticTree shape = sequoia_tree({0.55, 0.25, 0.1}, 20, 5);
  const auto kids = children_of(shape);
  for (Verifier v : {Verifier::kSpecInfer, Verifier::kSequoia, Verifier::kTargetSample, Verifier::kSpecTr,
                    Verifier::kMultiDraftIS}) {
    Rng a(77), b(77);
    for (int i = 0; i < 200; ++i)
      EXPECT_EQ(one_iteration(v, v, shape, kids, P, Q, 3, a), one_iteration(v, v, shape, kids, P, Q, 3, b));
  }
}

// A runtime-sized smoke test: 128k vocabulary, a 64-node Sequoia tree.
TEST(VerifyTree, LargeVocabularyCost) {
  const int V = 128 * 1024;
  const StaticTree shape = sequoia_tree(default_acceptance(8), 64, 8);
  const int n = shape.size() - 1;
  std::vector<std::vector<float>> P(static_cast<size_t>(shape.size())), Q(static_cast<size_t>(shape.size()));
  Rng g(9);
  for (size_t u = 0; u < P.size(); ++u) {
    P[u].resize(V);
    Q[u].resize(V);
    double sp = 0, sq = 0;
    for (int t = 0; t < V; ++t) {  // heavy-tailed, a few hundred dominant tokens
      const double base = std::exp(-8.0 * g.uniform());
      sp += P[u][static_cast<size_t>(t)] = static_cast<float>(base * (0.5 + g.uniform()));
      sq += Q[u][static_cast<size_t>(t)] = static_cast<float>(base * (0.5 + g.uniform()));
    }
    for (int t = 0; t < V; ++t) {
      P[u][static_cast<size_t>(t)] = static_cast<float>(P[u][static_cast<size_t>(t)] / sp);
      Q[u][static_cast<size_t>(t)] = static_cast<float>(Q[u][static_cast<size_t>(t)] / sq);
    }
  }
  const auto kids = children_of(shape);
  std::vector<int32_t> parent(static_cast<size_t>(n)), token(static_cast<size_t>(n));
  for (int i = 1; i <= n; ++i) parent[static_cast<size_t>(i - 1)] = shape.parent[i] - 1;
  DistFn target = [&](int32_t u) -> std::span<const float> { return P[static_cast<size_t>(u + 1)]; };
  DistFn draft = [&](int32_t u) -> std::span<const float> { return Q[static_cast<size_t>(u + 1)]; };
  Rng rng(10);
  using clk = std::chrono::steady_clock;
  double t_sample = 0, t_verify = 0;
  long accepted = 0;
  const int reps = 10;
  for (int rep = 0; rep < reps; ++rep) {
    auto t0 = clk::now();
    for (int u = 0; u < shape.size(); ++u) {
      const auto& ks = kids[static_cast<size_t>(u)];
      if (ks.empty()) continue;
      const auto c = sample_children(Verifier::kSequoia, Q[static_cast<size_t>(u)], static_cast<int>(ks.size()), rng);
      for (size_t j = 0; j < ks.size(); ++j) token[static_cast<size_t>(ks[j] - 1)] = c[j];
    }
    auto t1 = clk::now();
    const VerifyResult r = verify_tree(Verifier::kSequoia, TreeView{parent, token}, target, draft, rng);
    auto t2 = clk::now();
    t_sample += std::chrono::duration<double, std::milli>(t1 - t0).count();
    t_verify += std::chrono::duration<double, std::milli>(t2 - t1).count();
    accepted += static_cast<long>(r.accepted.size());
    ASSERT_GE(r.bonus, 0);
    ASSERT_LT(r.bonus, V);
  }
  std::printf("[ cost ] V=128k, %d-node tree: sample_children (all nodes) %.2f ms, verify_tree %.2f ms per step; "
              "mean accepted %.2f\n",
              shape.size(), t_sample / reps, t_verify / reps, static_cast<double>(accepted) / reps);
}

// The path-class verifiers at a runtime-sized vocabulary: 4 sequences of 6
// (SpecTr's sequence level) and a 4-ary root with binary children below.
TEST(VerifyTree, LargeVocabularyCostMultiDraft) {
  const int V = 128 * 1024;
  Rng g(11);
  auto make = [&](double noise) {
    std::vector<float> d(V);
    double s = 0;
    for (int t = 0; t < V; ++t) s += d[static_cast<size_t>(t)] = static_cast<float>(std::exp(-8.0 * g.uniform()) * (1 + noise * g.uniform()));
    for (auto& x : d) x = static_cast<float>(x / s);
    return d;
  };
  // One target/draft pair per depth (the verifiers only need consistency per context).
  std::vector<std::vector<float>> P, Q;
  for (int d = 0; d < 8; ++d) {
    P.push_back(make(0.5));
    Q.push_back(make(0.5));
  }
  struct S {
    const char* name;
    std::vector<int32_t> parent;  // verify_tree parents (-1 = root)
  };
  std::vector<S> shapes(2);
  shapes[0].name = "4 seqs x 6";
  for (int b = 0; b < 4; ++b)
    for (int l = 0; l < 6; ++l)
      shapes[0].parent.push_back(l == 0 ? -1 : static_cast<int32_t>(shapes[0].parent.size()) - 1);
  shapes[1].name = "4 x 2 x 2 tree";
  for (int a = 0; a < 4; ++a) {
    const int32_t u = static_cast<int32_t>(shapes[1].parent.size());
    shapes[1].parent.push_back(-1);
    for (int b = 0; b < 2; ++b) {
      const int32_t w = static_cast<int32_t>(shapes[1].parent.size());
      shapes[1].parent.push_back(u);
      shapes[1].parent.push_back(w);
      shapes[1].parent.push_back(w);
    }
  }
  for (const S& sh : shapes) {
    const int n = static_cast<int>(sh.parent.size());
    std::vector<int32_t> depth(static_cast<size_t>(n)), token(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i)
      depth[static_cast<size_t>(i)] = sh.parent[static_cast<size_t>(i)] < 0 ? 0 : depth[static_cast<size_t>(sh.parent[static_cast<size_t>(i)])] + 1;
    DistFn target = [&](int32_t u) -> std::span<const float> {
      return P[static_cast<size_t>(u < 0 ? 0 : depth[static_cast<size_t>(u)] + 1)];
    };
    DistFn draft = [&](int32_t u) -> std::span<const float> {
      return Q[static_cast<size_t>(u < 0 ? 0 : depth[static_cast<size_t>(u)] + 1)];
    };
    for (Verifier v : {Verifier::kTargetSample, Verifier::kSpecTr, Verifier::kMultiDraftIS}) {
      Rng rng(12);
      using clk = std::chrono::steady_clock;
      double t_verify = 0;
      long accepted = 0;
      const int reps = 5;
      for (int rep = 0; rep < reps; ++rep) {
        for (int i = 0; i < n; ++i) {  // every node's token i.i.d. from the draft at its depth
          const auto c = sample_children(v, Q[static_cast<size_t>(depth[static_cast<size_t>(i)])], 1, rng);
          token[static_cast<size_t>(i)] = c[0];
        }
        auto t0 = clk::now();
        const VerifyResult r = verify_tree(v, TreeView{sh.parent, token}, target, draft, rng);
        t_verify += std::chrono::duration<double, std::milli>(clk::now() - t0).count();
        accepted += static_cast<long>(r.accepted.size());
        ASSERT_GE(r.bonus, 0);
        ASSERT_LT(r.bonus, V);
        for (size_t j = 0; j < r.accepted.size(); ++j)  // a real root-to-node path
          ASSERT_EQ(sh.parent[static_cast<size_t>(r.accepted[j])], j == 0 ? -1 : r.accepted[j - 1]);
      }
      std::printf("[ cost ] V=128k, %s, %s: verify_tree %.2f ms per step; mean accepted %.2f\n", sh.name,
                  verifier_name(v), t_verify / reps, static_cast<double>(accepted) / reps);
    }
  }
}

}  // namespace
}  // namespace redwood::spec
