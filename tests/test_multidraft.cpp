// Multi-draft speculative sampling with importance-weighted selection
// (src/speculative/multidraft.h): the small LP, the O(V log V) induced law pI against
// brute-force enumeration, the exact output law (single node, trees and K
// sequences through the path-class walk), the K = 2 optimum (notes B2, Theorem
// 2) against the exact optimal coupling, Monte Carlo chi-square through
// verify_tree, and a wrong pI as a negative control.
// NAMING: p = TARGET, q = DRAFT here; shared/papers/NOTES-spectr-multidraft.md
// uses p for the draft and q for the target, so its vectors are swapped below.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "src/speculative/multidraft.h"
#include "src/speculative/speculate.h"
#include "src/speculative/spectr.h"
#include "src/speculative/verify.h"
#include "src/util/error.h"
#include "tests/util/spec_testing.h"

namespace redwood::spec {
namespace {

using namespace testutil;  // toy models, shapes, exact laws, chi-square (tests/util/spec_testing.h)

// Law of the selected token Y_I given the drafts (composing the stage rules).
std::vector<double> selection_law(const MultiDraftNode& n, const std::vector<int32_t>& drafts, size_t V) {
  std::vector<double> cur(V, 0.0);
  cur[static_cast<size_t>(drafts[0])] = 1;
  for (int j = 0; j < n.stages(); ++j) {
    std::vector<double> nxt(V, 0.0);
    const int32_t x = drafts[static_cast<size_t>(j) + 1];
    for (size_t y = 0; y < V; ++y) {
      if (cur[y] == 0) continue;
      const double pf = n.stage(j).pick_first(static_cast<int32_t>(y), x);
      nxt[y] += cur[y] * pf;
      nxt[static_cast<size_t>(x)] += cur[y] * (1 - pf);
    }
    cur = nxt;
  }
  return cur;
}

int g_lp_size = kDefaultIsLpSize;

// Output law of the two-step scheme for given drafts (the MultiDraftNode arithmetic).
std::vector<double> md_law(const std::vector<double>& p, const std::vector<double>& q,
                           const std::vector<int32_t>& drafts) {
  MultiDraftNode n;
  n.begin(p, q, static_cast<int>(drafts.size()), g_lp_size);
  const auto sel = selection_law(n, drafts, p.size());
  std::vector<double> law(p.size(), 0.0);
  double rej = 0;
  for (size_t y = 0; y < p.size(); ++y) {
    if (sel[y] == 0) continue;
    const double a = n.accept_probability(static_cast<int32_t>(y));
    law[y] += sel[y] * a;
    rej += sel[y] * (1 - a);
  }
  const auto r = n.residual();
  for (size_t y = 0; y < p.size(); ++y) law[y] += rej * r[y];
  return law;
}

// Negative control: the same selection, but tested as if Y_I were a plain draft
// sample (pI taken to be q) -- invalid for K >= 2.
std::vector<double> wrong_pi_law(const std::vector<double>& p, const std::vector<double>& q,
                                 const std::vector<int32_t>& drafts) {
  MultiDraftNode n;
  n.begin(p, q, static_cast<int>(drafts.size()));
  const auto sel = selection_law(n, drafts, p.size());
  std::vector<double> law(p.size(), 0.0), res(p.size());
  double rej = 0, s = 0;
  for (size_t y = 0; y < p.size(); ++y) {
    const double a = q[y] > 0 ? std::min(1.0, p[y] / q[y]) : 0.0;
    law[y] += sel[y] * a;
    rej += sel[y] * (1 - a);
    s += res[y] = std::max(p[y] - q[y], 0.0);
  }
  for (size_t y = 0; y < p.size(); ++y) law[y] += rej * (s > 0 ? res[y] / s : p[y]);
  return law;
}

// ---- the LP ------------------------------------------------------------------------------

TEST(MultiDraftLp, TextbookProblems) {
  // max 3x + 5y: x <= 4, 2y <= 12, 3x + 2y <= 18 -> 36 at (2, 6).
  LpSolution s = lp_maximize({{1, 0}, {0, 2}, {3, 2}}, {4, 12, 18}, {3, 5});
  EXPECT_NEAR(s.value, 36, 1e-12);
  EXPECT_NEAR(s.x[0], 2, 1e-12);
  EXPECT_NEAR(s.x[1], 6, 1e-12);
  // Degenerate (several constraints tight at the optimum, zero rhs).
  s = lp_maximize({{1, 1}, {1, -1}, {-1, 1}, {1, 0}}, {2, 0, 0, 1}, {1, 1});
  EXPECT_NEAR(s.value, 2, 1e-12);
  // Beale's cycling example (cycles under the largest-coefficient rule, not under Bland's).
  s = lp_maximize({{0.25, -8, -1, 9}, {0.5, -12, -0.5, 3}, {0, 0, 1, 0}}, {0, 0, 1}, {0.75, -20, 0.5, -6});
  EXPECT_NEAR(s.value, 1.25, 1e-12);
  EXPECT_THROW(lp_maximize({{1, -1}}, {1}, {1, 0.5}), Error);  // unbounded
  EXPECT_THROW(lp_maximize({{1, 0}}, {-1}, {1, 1}), Error);    // origin infeasible
}

// The LP's weights are optimal among all weight choices on Omega1 (grid search).
TEST(MultiDraftLp, PairWeightsOptimalOnGrid) {
  for (int trial = 0; trial < 8; ++trial) {
    const int V = 3 + trial % 3;
    const auto p = random_dist(40 + trial, V, 0.0), a = random_dist(50 + trial, V, 0.0);
    const auto b = trial % 2 ? random_dist(60 + trial, V, 0.0) : a;
    PairRule r;
    r.build(p, a, b, 3);
    const auto ord = r.order();
    // Brute force over w01, w02, w12 in steps of 1/40 with the same fixed Omega2 part.
    const auto pI = r.induced();
    double fixed01 = 0;  // pI mass of Omega1 tokens that does not depend on the weights
    std::vector<double> base(3);
    std::vector<size_t> x(3);
    for (int i = 0; i < 3; ++i) x[static_cast<size_t>(i)] = static_cast<size_t>(ord[static_cast<size_t>(i)]);
    auto m = [&](int i, int j) {
      return a[x[static_cast<size_t>(i)]] * b[x[static_cast<size_t>(j)]] +
             a[x[static_cast<size_t>(j)]] * b[x[static_cast<size_t>(i)]];
    };
    for (int i = 0; i < 3; ++i) {
      double cur = pI[x[static_cast<size_t>(i)]];
      // Remove the weight-dependent part as used by the rule.
      for (int j = 0; j < 3; ++j)
        if (j != i)
          cur -= m(i, j) * r.pick_first(static_cast<int32_t>(x[static_cast<size_t>(i)]),
                                        static_cast<int32_t>(x[static_cast<size_t>(j)]));
      base[static_cast<size_t>(i)] = cur;
      fixed01 += cur;
    }
    double best = 0;
    const int G = 40;
    for (int g0 = 0; g0 <= G; ++g0)
      for (int g1 = 0; g1 <= G; ++g1)
        for (int g2 = 0; g2 <= G; ++g2) {
          const double w01 = g0 / double(G), w02 = g1 / double(G), w12 = g2 / double(G);
          const double v0 = base[0] + m(0, 1) * w01 + m(0, 2) * w02;
          const double v1 = base[1] + m(0, 1) * (1 - w01) + m(1, 2) * w12;
          const double v2 = base[2] + m(0, 2) * (1 - w02) + m(1, 2) * (1 - w12);
          const double val = std::min(p[x[0]], v0) + std::min(p[x[1]], v1) + std::min(p[x[2]], v2);
          best = std::max(best, val);
        }
    EXPECT_GE(r.lp_value(), best - 1e-12) << "trial " << trial;
    double used = 0;
    for (int i = 0; i < 3; ++i) used += std::min(p[x[static_cast<size_t>(i)]], pI[x[static_cast<size_t>(i)]]);
    EXPECT_NEAR(used, r.lp_value(), 1e-15);
    (void)fixed01;
  }
}

// ---- induced law ---------------------------------------------------------------------------

TEST(MultiDraftInduced, PairFormulaEqualsBruteForce) {
  int checked = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const int V = 3 + trial % 4;
    const auto p = random_dist(100 + trial, V, 0.2), a = random_dist(200 + trial, V, 0.2);
    const auto b = trial % 3 == 0 ? a : random_dist(300 + trial, V, 0.2);  // identical and non-identical drafts
    for (int s : {0, 2, 3, 4, V}) {
      PairRule r;
      r.build(p, a, b, s);
      std::vector<double> brute(static_cast<size_t>(V), 0.0);
      for (int x = 0; x < V; ++x)
        for (int y = 0; y < V; ++y) {
          const double pr = a[static_cast<size_t>(x)] * b[static_cast<size_t>(y)];
          const double pf = r.pick_first(x, y);
          EXPECT_NEAR(pf + r.pick_first(y, x), x == y ? 2.0 : 1.0, 1e-15);
          brute[static_cast<size_t>(x)] += pr * pf;
          brute[static_cast<size_t>(y)] += pr * (1 - pf);
        }
      const auto pI = r.induced();
      EXPECT_LE(testutil::max_abs_diff(std::vector<double>(pI.begin(), pI.end()), brute), 1e-15);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 300);
}

TEST(MultiDraftInduced, StagedEqualsBruteForce) {
  for (int trial = 0; trial < 20; ++trial) {
    const int V = 3 + trial % 3;
    const auto p = random_dist(500 + trial, V, 0.2), q = random_dist(600 + trial, V, 0.2);
    for (int k = 1; k <= 4; ++k) {
      MultiDraftNode n;
      n.begin(p, q, k);
      std::vector<double> brute(static_cast<size_t>(V), 0.0);
      testutil::for_each_tuple(q, k, [&](const std::vector<int32_t>& t, double pr) {
        const auto sel = selection_law(n, t, static_cast<size_t>(V));
        for (int y = 0; y < V; ++y) brute[static_cast<size_t>(y)] += pr * sel[static_cast<size_t>(y)];
      });
      const auto pI = n.induced();
      EXPECT_LE(testutil::max_abs_diff(std::vector<double>(pI.begin(), pI.end()), brute), 1e-14) << k;
      double acc = 0;
      for (int y = 0; y < V; ++y) acc += std::min(p[static_cast<size_t>(y)], pI[static_cast<size_t>(y)]);
      EXPECT_NEAR(n.acceptance(), acc, 1e-15);
    }
  }
}

// ---- exact output law -------------------------------------------------------------------------

TEST(MultiDraftExact, SingleNodeLawEqualsTarget) {
  int checked = 0;
  auto run = [&](const std::string& name, const std::vector<double>& p, const std::vector<double>& q) {
    for (int s : {0, 2, kDefaultIsLpSize})
      for (int k = 1; k <= 4; ++k) {
        SCOPED_TRACE(name + " k=" + std::to_string(k) + " s=" + std::to_string(s));
        g_lp_size = s;
        EXPECT_LE(testutil::max_abs_diff(averaged_law(md_law, p, q, k), p), 1e-12);
        ++checked;
      }
    g_lp_size = kDefaultIsLpSize;
  };
  for (const PQ& c : edge_cases()) run(c.name, norm(c.p), norm(c.q));
  for (int trial = 0; trial < 24; ++trial) {
    const int V = 3 + trial % 3;
    run("random " + std::to_string(trial), random_dist(10 + trial, V, 0.2), random_dist(90 + trial, V, 0.2));
  }
  EXPECT_EQ(checked, 3 * 4 * (12 + 24));
}

TEST(MultiDraftExact, WrongInducedLawIsDetected) {
  const std::vector<double> p = {0.1, 0.2, 0.3, 0.4}, q = {0.4, 0.3, 0.2, 0.1};
  EXPECT_GT(testutil::max_abs_diff(averaged_law(wrong_pi_law, p, q, 2), p), 0.02);
  EXPECT_LE(testutil::max_abs_diff(averaged_law(wrong_pi_law, p, q, 1), p), 1e-12);  // K = 1: pI is q
}

TEST(MultiDraftExact, TreeAndSequenceLawEqualsTarget) {
  EXPECT_EQ(expect_class_laws_equal_target(md_law), 7 * 2 * 2);
}

// ---- Theorem 2 (two identical drafts) --------------------------------------------------------

// min over prefixes of tokens sorted by increasing p/q (target/draft) of
// p(S) + 1 - q(S)^K (tokens with q = 0 last; the empty set gives 1).
double prefix_bound(const std::vector<double>& p, const std::vector<double>& q, int K) {
  std::vector<int> ord(p.size());
  std::iota(ord.begin(), ord.end(), 0);
  auto ratio = [&](int x) {
    return q[static_cast<size_t>(x)] > 0 ? p[static_cast<size_t>(x)] / q[static_cast<size_t>(x)] : 1e300;
  };
  std::sort(ord.begin(), ord.end(), [&](int a, int b) { return ratio(a) < ratio(b); });
  double best = 1, ps = 0, qs = 0;
  for (int x : ord) {
    ps += p[static_cast<size_t>(x)];
    qs += q[static_cast<size_t>(x)];
    best = std::min(best, ps + 1 - std::pow(qs, K));
  }
  return best;
}
double subset_bound(const std::vector<double>& p, const std::vector<double>& q, int K, bool* all_ok = nullptr) {
  const int V = static_cast<int>(p.size());
  double best = 1;
  if (all_ok) *all_ok = true;
  for (int S = 1; S < (1 << V); ++S) {
    double ps = 0, qs = 0;
    for (int x = 0; x < V; ++x)
      if (S >> x & 1) ps += p[static_cast<size_t>(x)], qs += q[static_cast<size_t>(x)];
    best = std::min(best, ps + 1 - std::pow(qs, K));
    if (all_ok && ps < std::pow(qs, K) - 1e-12) *all_ok = false;
  }
  return best;
}

TEST(MultiDraftTheorem2, OptimumEqualsLpAndFullIsAttainsIt) {
  int ones = 0;
  double worst_is = 1;
  for (int trial = 0; trial < 150; ++trial) {
    const int V = 2 + trial % 4;
    const auto q = random_dist(900 + trial, V, 0.15);
    // Half the cases: a target close to the draft (optimum often exactly 1).
    auto p = random_dist(950 + trial, V, 0.15);
    if (trial % 2) {
      for (int x = 0; x < V; ++x)
        p[static_cast<size_t>(x)] = 0.8 * q[static_cast<size_t>(x)] + 0.2 * p[static_cast<size_t>(x)];
      p = norm(p);
    }
    const double opt = testutil::optimal_acceptance(p, q, 2);
    bool cond = false;
    EXPECT_NEAR(prefix_bound(p, q, 2), opt, 1e-12) << "trial " << trial;
    EXPECT_NEAR(subset_bound(p, q, 2, &cond), opt, 1e-12);
    EXPECT_EQ(cond, opt > 1 - 1e-12) << "trial " << trial << " opt " << opt;
    ones += opt > 1 - 1e-12;
    if (V <= 4) {  // exponent K for K = 3
      EXPECT_NEAR(prefix_bound(p, q, 3), testutil::optimal_acceptance(p, q, 3), 1e-12);
    }
    // The IS rule with Omega1 = everything (s = V) is the optimal selection for K = 2.
    MultiDraftNode n;
    n.begin(p, q, 2, V);
    EXPECT_NEAR(n.acceptance(), opt, 1e-9) << "trial " << trial;
    MultiDraftNode n4;
    n4.begin(p, q, 2);
    worst_is = std::min(worst_is, n4.acceptance() / opt);
  }
  std::printf(
      "[ md ] Theorem 2: %d of 150 random cases have optimum 1; default IS (s=%d) worst ratio to optimum %.4f\n", ones,
      kDefaultIsLpSize, worst_is);
  EXPECT_GT(ones, 10);
}

TEST(MultiDraftTheorem2, NotesExample) {
  // Notes B2: draft uniform on 3, target (1/3, .2, .4667): optimum 1, k-Seq .9449, SpecInfer .9111.
  const std::vector<double> q(3, 1.0 / 3), p = {1.0 / 3, 0.2, 1 - 1.0 / 3 - 0.2};
  EXPECT_NEAR(testutil::optimal_acceptance(p, q, 2), 1.0, 1e-12);
  EXPECT_NEAR(prefix_bound(p, q, 2), 1.0, 1e-12);
  MultiDraftNode n;
  n.begin(p, q, 2, 3);
  SpecTrNode st;
  st.begin(p, q, 2);
  // SpecInfer (multi-round rejection, i.i.d. drafts) by enumeration.
  double si = 0;
  std::vector<float> pf(p.begin(), p.end()), qf(q.begin(), q.end());
  testutil::for_each_tuple(q, 2, [&](const std::vector<int32_t>& t, double pr) {
    NodeVerifier nv;
    nv.begin(Verifier::kSpecInfer, pf, qf);
    double rej = 1;
    for (int32_t x : t) {
      rej *= 1 - nv.accept_probability(x);
      nv.reject(x);
    }
    si += pr * (1 - rej);
  });
  std::printf("[ md ] notes B2 example: IS %.6f (optimum 1), k-Seq %.6f (notes .9449), SpecInfer %.6f (notes .9111)\n",
              n.acceptance(), st.acceptance(), si);
  EXPECT_NEAR(n.acceptance(), 1.0, 1e-12);
  EXPECT_NEAR(st.acceptance(), 0.9449, 1e-4);
  EXPECT_NEAR(si, 0.9111, 1e-4);
}

// ---- Monte Carlo through verify_tree ------------------------------------------------------------

TEST(MultiDraftMonteCarlo, LosslessChiSquare) {
  struct Cfg {
    std::string name;
    Shape shape;
    std::function<Toy()> P, Q;
    int m;
  };
  const std::vector<Cfg> cfgs = {
      {"md-is star2 notes A5", testutil::chains(2, 1),
       [] {
         return testutil::constant_model({0.2, 0.3, 0.5});
       },
       [] {
         return testutil::constant_model({0.7, 0.2, 0.1});
       },
       1},
      {"md-is star4 toy", testutil::chains(4, 1), [] { return testutil::logit_model(5, 11, 1.0, 1.0, 0.2); },
       [] { return testutil::logit_model(5, 12, 1.5, 1.0, 0.25); }, 1},
      {"md-is 3 seqs x 2 toy, first 2", testutil::chains(3, 2),
       [] { return testutil::logit_model(4, 11, 1.0, 0.6, 0.2); },
       [] { return testutil::logit_model(4, 12, 1.5, 0.6, 0.25); }, 2},
  };
  for (const Cfg& c : cfgs) {
    Toy P = c.P(), Q = c.Q();
    for (double pv : testutil::run_class_mc(c.name, Verifier::kMultiDraftIS, c.shape, P, Q, c.m, md_law))
      EXPECT_GT(pv, kAlpha) << c.name;
  }
}

TEST(MultiDraftMonteCarlo, NodeAcceptanceMatchesFormulaAndWrongPiFails) {
  const std::vector<double> p = {0.1, 0.2, 0.3, 0.4}, q = {0.4, 0.3, 0.2, 0.1};
  const std::vector<float> qf(q.begin(), q.end());
  Law want;
  for (int y = 0; y < 4; ++y) want[{y}] = p[static_cast<size_t>(y)];
  for (int k : {2, 3}) {
    MultiDraftNode n;
    n.begin(p, q, k);
    Rng rng(200 + k);
    const long N = 1000000;
    long acc = 0;
    std::map<std::vector<int32_t>, long> good, bad;
    for (long i = 0; i < N; ++i) {
      const auto d = sample_children(Verifier::kMultiDraftIS, qf, k, rng);
      const int32_t y = n.select(d, rng);
      const double u = rng.uniform();
      const bool ok = n.accepts(y, u);
      acc += ok;
      ++good[{ok ? y : n.sample_residual(rng.uniform())}];
      // Wrong: the selected token tested against q instead of pI.
      if (u * q[static_cast<size_t>(y)] < p[static_cast<size_t>(y)]) {
        ++bad[{y}];
      } else {
        std::vector<float> res(4);
        for (size_t t = 0; t < 4; ++t) res[t] = static_cast<float>(std::max(p[t] - q[t], 0.0));
        ++bad[{testutil::draw(res, rng)}];
      }
    }
    const double rate = static_cast<double>(acc) / N, a = n.acceptance();
    const double sigma = std::sqrt(a * (1 - a) / N);
    const double pg = testutil::chi_square_p(good, want, N), pb = testutil::chi_square_p(bad, want, N);
    std::printf(
        "[ acc  ] md-is node k=%d: empirical %.5f, formula %.5f (3 sigma %.5f); chi2 p = %.4g, wrong pI p = %.4g\n", k,
        rate, a, 3 * sigma, pg, pb);
    EXPECT_LE(std::abs(rate - a), 3 * sigma);
    EXPECT_GT(pg, kAlpha);
    EXPECT_LT(pb, kAlpha);
  }
}

// ---- alphabet truncation (Omega0) ----------------------------------------------------------

int g_alphabet = 0;
bool g_no_coin = false;  // negative control: keep the truncated result always

// Output law of MultiDraftNode::output with truncation to g_alphabet tokens,
// composed from the node's reduced-alphabet arithmetic: kept with probability
// p(Omega0) -> the two-step scheme on Omega0 + "other" (drafts outside Omega0
// become "other"), mapped back; not kept -> p restricted to the outside.
std::vector<double> truncated_law(const std::vector<double>& p, const std::vector<double>& q,
                                  const std::vector<int32_t>& drafts) {
  MultiDraftNode n;
  n.begin(p, q, static_cast<int>(drafts.size()), g_lp_size, g_alphabet);
  if (!n.truncated()) return md_law(p, q, drafts);
  const auto om = n.omega0();
  const size_t M = om.size();
  std::vector<int32_t> red(p.size(), static_cast<int32_t>(M));
  for (size_t i = 0; i < M; ++i) red[static_cast<size_t>(om[i])] = static_cast<int32_t>(i);
  std::vector<int32_t> rd;
  for (int32_t x : drafts) rd.push_back(red[static_cast<size_t>(x)]);
  const auto sel = selection_law(n, rd, M + 1);
  std::vector<double> rlaw(M + 1, 0.0);
  double rej = 0;
  for (size_t y = 0; y <= M; ++y) {
    if (sel[y] == 0) continue;
    const double a = n.accept_probability(static_cast<int32_t>(y));
    rlaw[y] += sel[y] * a;
    rej += sel[y] * (1 - a);
  }
  const auto r = n.residual();
  for (size_t y = 0; y <= M; ++y) rlaw[y] += rej * r[y];
  EXPECT_LE(rlaw[M], 1e-15) << "the 'other' symbol is never output";
  std::vector<double> law(p.size(), 0.0);
  if (g_no_coin) {
    for (size_t i = 0; i < M; ++i) law[static_cast<size_t>(om[i])] = rlaw[i];
    return law;
  }
  for (size_t i = 0; i < M; ++i) law[static_cast<size_t>(om[i])] = n.kept_mass() * rlaw[i];
  for (size_t x = 0; x < p.size(); ++x)
    if (red[x] == static_cast<int32_t>(M)) law[x] += p[x];  // (1 - p(Omega0)) x p(x) / (1 - p(Omega0))
  return law;
}

TEST(MultiDraftTruncation, Omega0IsTheMostLikelyTargetTokens) {
  const std::vector<double> p = {0.1, 0.3, 0.05, 0.3, 0.25}, q = norm({1, 1, 1, 1, 1});
  MultiDraftNode n;
  n.begin(p, q, 2, kDefaultIsLpSize, 3);
  ASSERT_TRUE(n.truncated());
  EXPECT_EQ(std::vector<int32_t>(n.omega0().begin(), n.omega0().end()), (std::vector<int32_t>{1, 3, 4}));
  EXPECT_NEAR(n.kept_mass(), 0.85, 1e-15);
  n.begin(p, q, 2, kDefaultIsLpSize, 5);  // M >= V: no truncation
  EXPECT_FALSE(n.truncated());
  EXPECT_EQ(n.kept_mass(), 1.0);
  EXPECT_THROW(n.begin(p, q, 2, kDefaultIsLpSize, -1), Error);
}

TEST(MultiDraftTruncation, LawEqualsTargetExactly) {
  int checked = 0;
  auto run = [&](const std::string& name, const std::vector<double>& p, const std::vector<double>& q) {
    for (int M = 1; M < static_cast<int>(p.size()); ++M)
      for (int k = 1; k <= 3; ++k) {
        SCOPED_TRACE(name + " M=" + std::to_string(M) + " k=" + std::to_string(k));
        g_alphabet = M;
        EXPECT_LE(testutil::max_abs_diff(averaged_law(truncated_law, p, q, k), p), 1e-12);
        ++checked;
      }
    g_alphabet = 0;
  };
  for (const PQ& c : edge_cases()) run(c.name, norm(c.p), norm(c.q));
  for (int trial = 0; trial < 12; ++trial) {
    const int V = 3 + trial % 3;
    run("random " + std::to_string(trial), random_dist(40 + trial, V, 0.2), random_dist(140 + trial, V, 0.2));
  }
  EXPECT_GT(checked, 100);
  // Negative control: without the p(Omega0) coin the law is off by the outside mass.
  g_alphabet = 3;
  g_no_coin = true;
  const std::vector<double> p = {0.1, 0.3, 0.05, 0.3, 0.25}, q = norm({1, 2, 3, 4, 5});
  EXPECT_GT(testutil::max_abs_diff(averaged_law(truncated_law, p, q, 2), p), 0.04);
  g_no_coin = false;
  g_alphabet = 0;
}

TEST(MultiDraftTruncation, TreeLawEqualsTarget) {
  for (const auto& [name, shape] : std::vector<std::pair<std::string, Shape>>{
           {"3 seqs x 2", testutil::chains(3, 2)}, {"binary2", testutil::full_tree(2, 2)}}) {
    Toy P = testutil::logit_model(5, 31, 1.0, 0.8, 0.2), Q = testutil::logit_model(5, 32, 1.5, 0.8, 0.25);
    for (int M : {1, 2, 4}) {
      SCOPED_TRACE(name + " M=" + std::to_string(M));
      g_alphabet = M;
      ClassEnumerator e(shape, P, Q, truncated_law);
      EXPECT_LE(testutil::max_abs_diff(e.law(3), e.target_law({}, 3)), 1e-12);
    }
    g_alphabet = 0;
  }
}

// The code path the runtime takes (MultiDraftNode::output through verify_tree),
// sampled: chi-square against the target law, and the hit rate against the
// exact formula; acceptance() = p(Omega0) x the reduced problem's.
TEST(MultiDraftTruncation, VerifyTreeSamplesTheTargetLaw) {
  Toy P = testutil::logit_model(6, 41, 1.0, 1.0, 0.1), Q = testutil::logit_model(6, 42, 1.5, 1.0, 0.1);
  const Shape shape = testutil::chains(3, 1);
  const int M = 3;
  MultiDraftNode n;
  n.begin(P.law({}), Q.law({}), 3, kDefaultIsLpSize, M);
  std::printf("[ acc  ] md-is truncated to %d of 6: p(Omega0) %.4f, acceptance %.5f\n", M, n.kept_mass(),
              n.acceptance());
  EXPECT_LT(n.kept_mass(), 1.0);
  g_alphabet = M;  // for the exact law (truncated_law); the sampled path takes VerifyOptions{M}
  for (double pv : testutil::run_class_mc("md-is truncated", Verifier::kMultiDraftIS, shape, P, Q, 1, truncated_law,
                                          VerifyOptions{M}, 104729, 3))
    EXPECT_GT(pv, kAlpha);
  g_alphabet = 0;
}

TEST(MultiDraftTruncation, OptionIsOnlyForMultiDraftIs) {
  SamplingParams sp;
  sp.temperature = 0.6f;
  TreeOptions o;
  o.tree = "kary:2x2";
  o.verifier = "multidraft-is";
  o.is_alphabet = 8;
  EXPECT_EQ(make_spec_config(o, sp).verify_options.is_alphabet, 8);
  o.verifier = "spectr";
  EXPECT_THROW((void)make_spec_config(o, sp), Error);
  o.verifier = "multidraft-is";
  o.is_alphabet = 0;
  EXPECT_THROW((void)make_spec_config(o, sp), Error);
}

}  // namespace
}  // namespace redwood::spec
