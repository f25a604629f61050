// Test helpers for the tree verifiers (test_verify, and the multi-draft ones:
// target-sample, SpecTr, multi-draft IS): toy autoregressive models, exact
// enumeration of the path-class walk that verify_tree runs, max-flow optimum of
// the multi-draft coupling, chi-square, Monte Carlo through verify_tree.
// Convention as in src/spec: p = TARGET, q = DRAFT. Test-only code (gtest).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <numeric>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "src/speculative/verify.h"

namespace redwood::testutil {

using Ctx = std::vector<int32_t>;
using Law = std::map<std::vector<int32_t>, double>;

inline uint64_t mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
inline double unit(uint64_t salt, const Ctx& c, int t) {
  uint64_t h = mix(salt ^ mix(c.size()));
  for (int32_t x : c) h = mix(h ^ (static_cast<uint64_t>(x) + 1) * 0x2545f4914f6cdd1dull);
  return static_cast<double>(mix(h ^ static_cast<uint64_t>(t)) >> 11) * 0x1.0p-53;
}

// An autoregressive toy: dist(ctx) as floats (as the runtime hands them over).
class Toy {
 public:
  using Fn = std::function<std::vector<double>(const Ctx&)>;  // non-negative weights
  Toy(int V, Fn f) : V_(V), f_(std::move(f)) {}
  int vocab() const { return V_; }
  const std::vector<float>& dist(const Ctx& c) {
    auto it = cache_.find(c);
    if (it != cache_.end()) return it->second;
    const std::vector<double> w = f_(c);
    const double s = std::accumulate(w.begin(), w.end(), 0.0);
    std::vector<float> p(w.size());
    for (size_t i = 0; i < w.size(); ++i) p[i] = static_cast<float>(w[i] / s);
    return cache_[c] = std::move(p);
  }
  // The law the verifier must reproduce: the float entries normalised in double.
  const std::vector<double>& law(const Ctx& c) {
    auto it = law_.find(c);
    if (it != law_.end()) return it->second;
    const auto& p = dist(c);
    double s = 0;
    for (float x : p) s += x;
    std::vector<double> out(p.size());
    for (size_t i = 0; i < p.size(); ++i) out[i] = p[i] / s;
    return law_[c] = std::move(out);
  }

 private:
  int V_;
  Fn f_;
  std::map<Ctx, std::vector<float>> cache_;
  std::map<Ctx, std::vector<double>> law_;
};

// Correlated target/draft logits, temperature, random zero masks (both "p > 0
// where q = 0" and "q > 0 where p = 0" occur).
inline Toy logit_model(int V, uint64_t salt, double noise, double temperature, double mask_rate) {
  return Toy(V, [=](const Ctx& c) {
    std::vector<double> logit(static_cast<size_t>(V)), w(static_cast<size_t>(V));
    for (int t = 0; t < V; ++t)
      logit[static_cast<size_t>(t)] = 1.5 * (2 * unit(1, c, t) - 1) + noise * (2 * unit(salt, c, t) - 1);
    const int best = static_cast<int>(std::max_element(logit.begin(), logit.end()) - logit.begin());
    for (int t = 0; t < V; ++t) {
      const bool masked = t != best && unit(salt + 1000, c, t) < mask_rate;
      w[static_cast<size_t>(t)] = masked ? 0.0 : std::exp(logit[static_cast<size_t>(t)] / temperature);
    }
    return w;
  });
}

inline Toy constant_model(std::vector<double> w) {
  const int V = static_cast<int>(w.size());
  return Toy(V, [w](const Ctx&) { return w; });
}

// ---- single-position distributions --------------------------------------------------

inline std::vector<double> norm(std::vector<double> x) {
  double s = 0;
  for (double v : x) s += v;
  for (double& v : x) v /= s;
  return x;
}

// A random distribution over V tokens, each zero with probability ~zero_rate
// (never all zero).
inline std::vector<double> random_dist(uint64_t salt, int V, double zero_rate) {
  std::vector<double> x(static_cast<size_t>(V));
  for (int t = 0; t < V; ++t) x[static_cast<size_t>(t)] = unit(salt + 7, {}, t) < zero_rate ? 0.0 : unit(salt, {}, t);
  if (std::accumulate(x.begin(), x.end(), 0.0) == 0) x[0] = 1;
  return norm(x);
}

// Edge cases for one position (entries are weights: normalise with norm()).
struct PQ {
  const char* name;
  std::vector<double> p, q;  // target, draft
};
inline std::vector<PQ> edge_cases() {
  return {
      {"p = q", {0.2, 0.3, 0.5}, {0.2, 0.3, 0.5}},
      {"disjoint supports", {0.5, 0.5, 0.0, 0.0}, {0.0, 0.0, 0.3, 0.7}},
      {"zeros in target", {0.0, 0.0, 0.6, 0.4}, {0.25, 0.25, 0.25, 0.25}},
      {"draft zero where target > 0", {0.1, 0.2, 0.3, 0.4}, {0.7, 0.3, 0.0, 0.0}},
      {"Ber counterexample", {0.5, 0.5}, {1.0, 0.0}},
      {"ties", {0.4, 0.4, 0.2}, {0.4, 0.4, 0.2}},
      {"ties 2", {0.25, 0.25, 0.25, 0.25}, {0.4, 0.4, 0.1, 0.1}},
      {"one-hot draft (X1 = X2 always)", {0.3, 0.0, 0.7}, {1.0, 0.0, 0.0}},
      {"one-hot target", {0.0, 1.0, 0.0}, {0.3, 0.3, 0.4}},
      {"near-degenerate", {1e-30, 1.0 - 1e-30, 0.0}, {1.0 - 1e-30, 1e-30, 0.0}},
      {"notes A5", {0.2, 0.3, 0.5}, {0.7, 0.2, 0.1}},
      {"notes B2", {1.0 / 3, 0.2, 1 - 1.0 / 3 - 0.2}, {1.0 / 3, 1.0 / 3, 1.0 / 3}},
  };
}

// ---- shapes: parent[0] = -1 is the root (the committed context) ----------------------

struct Shape {
  std::vector<int32_t> parent;
  std::vector<std::vector<int32_t>> kids;
  int size() const { return static_cast<int>(parent.size()); }
};
inline Shape shape_from_parents(std::vector<int32_t> parent) {
  Shape s;
  s.parent = std::move(parent);
  s.kids.resize(s.parent.size());
  for (size_t i = 1; i < s.parent.size(); ++i)
    s.kids[static_cast<size_t>(s.parent[i])].push_back(static_cast<int32_t>(i));
  return s;
}
// K chains of L tokens below the root, depth-first (speculate's "kary:KxL").
inline Shape chains(int K, int L) {
  std::vector<int32_t> parent{-1};
  for (int b = 0; b < K; ++b) {
    int32_t prev = 0;
    for (int l = 0; l < L; ++l) {
      parent.push_back(prev);
      prev = static_cast<int32_t>(parent.size() - 1);
    }
  }
  return shape_from_parents(parent);
}
// Full w-ary tree with `levels` drafted levels.
inline Shape full_tree(int w, int levels) {
  std::vector<int32_t> parent{-1};
  std::function<void(int32_t, int)> grow = [&](int32_t u, int left) {
    if (left == 0) return;
    for (int j = 0; j < w; ++j) {
      parent.push_back(u);
      grow(static_cast<int32_t>(parent.size() - 1), left - 1);
    }
  };
  grow(0, levels);
  return shape_from_parents(parent);
}
// The shapes of the exact path-class tests: chains, sequences, trees.
inline std::vector<std::pair<std::string, Shape>> class_shapes() {
  return {
      {"chain3", chains(1, 3)},
      {"star3", chains(3, 1)},
      {"2 seqs x 2", chains(2, 2)},
      {"3 seqs x 2", chains(3, 2)},
      {"2 seqs x 3", chains(2, 3)},
      {"binary2", full_tree(2, 2)},
      {"irregular", shape_from_parents({-1, 0, 1, 2, 1, 0, 5, 0, 7, 7})},
  };
}

// ---- laws --------------------------------------------------------------------------

inline void add_prefixed(Law& out, double w, int32_t first, const Law& rest) {
  if (w == 0) return;
  for (const auto& [seq, pr] : rest) {
    std::vector<int32_t> s{first};
    s.insert(s.end(), seq.begin(), seq.end());
    out[s] += w * pr;
  }
}
// Law of the next m tokens drawn from P's own conditionals after context c.
inline Law target_law(Toy& P, const Ctx& c, int m) {
  if (m == 0) return {{{}, 1.0}};
  Law out;
  const auto p = P.law(c);
  for (int t = 0; t < P.vocab(); ++t) {
    if (p[static_cast<size_t>(t)] == 0) continue;
    Ctx c2 = c;
    c2.push_back(t);
    add_prefixed(out, p[static_cast<size_t>(t)], t, target_law(P, c2, m - 1));
  }
  return out;
}
inline double max_abs_diff(const Law& a, const Law& b) {
  double d = 0;
  for (const auto& [k, v] : a) d = std::max(d, std::abs(v - (b.count(k) ? b.at(k) : 0.0)));
  for (const auto& [k, v] : b) d = std::max(d, std::abs(v - (a.count(k) ? a.at(k) : 0.0)));
  return d;
}
inline double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

// Every ordered k-tuple of i.i.d. draws from q with its probability.
inline void for_each_tuple(const std::vector<double>& q, int k,
                           const std::function<void(const std::vector<int32_t>&, double)>& f) {
  std::vector<int32_t> tup;
  std::function<void(double)> rec = [&](double pr) {
    if (static_cast<int>(tup.size()) == k) return f(tup, pr);
    for (int x = 0; x < static_cast<int>(q.size()); ++x) {
      if (q[static_cast<size_t>(x)] == 0) continue;
      tup.push_back(x);
      rec(pr * q[static_cast<size_t>(x)]);
      tup.pop_back();
    }
  };
  rec(1.0);
}

// The law of the output token at one position given target p, draft q and the
// drafts there (in order): the exact arithmetic of one verifier step.
using NodeLawFn = std::function<std::vector<double>(const std::vector<double>& p, const std::vector<double>& q,
                                                    const std::vector<int32_t>& drafts)>;

// P(Y in drafts) at a single position, averaged over the i.i.d. drafts.
inline double hit_probability(const NodeLawFn& f, const std::vector<double>& p, const std::vector<double>& q, int k) {
  double hit = 0;
  for_each_tuple(q, k, [&](const std::vector<int32_t>& tup, double pr) {
    const auto law = f(p, q, tup);
    std::vector<char> in(p.size(), 0);
    for (int32_t x : tup) in[static_cast<size_t>(x)] = 1;
    for (size_t y = 0; y < law.size(); ++y)
      if (in[y]) hit += pr * law[y];
  });
  return hit;
}

// Exact law of one position averaged over k i.i.d. drafts.
inline std::vector<double> averaged_law(const NodeLawFn& f, const std::vector<double>& p, const std::vector<double>& q,
                                        int k) {
  std::vector<double> out(p.size(), 0.0);
  for_each_tuple(q, k, [&](const std::vector<int32_t>& t, double pr) {
    const auto law = f(p, q, t);
    for (size_t y = 0; y < p.size(); ++y) out[y] += pr * law[y];
  });
  return out;
}

// Exact law of the first m emitted tokens of one iteration of the path-class
// walk (verify_tree for target-sample / SpecTr / multi-draft IS) on `shape`
// with children drawn i.i.d. from Q, completed by the target's own conditionals
// when fewer than m tokens are emitted.
class ClassEnumerator {
 public:
  ClassEnumerator(const Shape& shape, Toy& P, Toy& Q, NodeLawFn f) : shape_(shape), P_(P), Q_(Q), f_(std::move(f)) {}

  Law target_law(const Ctx& c, int m) { return testutil::target_law(P_, c, m); }
  Law law(int m) { return class_law({0}, {}, m); }

  Law class_law(const std::vector<int32_t>& cls, const Ctx& c, int m) {
    if (m == 0) return {{{}, 1.0}};
    auto key = std::make_tuple(cls, c, m);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    std::vector<int32_t> slots;
    for (int32_t u : cls)
      for (int32_t ch : shape_.kids[static_cast<size_t>(u)]) slots.push_back(ch);
    std::sort(slots.begin(), slots.end());
    Law out;
    if (slots.empty()) {
      out = target_law(c, m);
    } else {
      const auto p = P_.law(c);
      const auto q = Q_.law(c);
      for_each_tuple(q, static_cast<int>(slots.size()), [&](const std::vector<int32_t>& tup, double pr) {
        const auto y_law = f_(p, q, tup);
        for (int y = 0; y < static_cast<int>(y_law.size()); ++y) {
          if (!(y_law[static_cast<size_t>(y)] > 0)) continue;
          std::vector<int32_t> next;
          for (size_t i = 0; i < tup.size(); ++i)
            if (tup[i] == y) next.push_back(slots[i]);
          Ctx c2 = c;
          c2.push_back(y);
          add_prefixed(out, pr * y_law[static_cast<size_t>(y)], y,
                       next.empty() ? target_law(c2, m - 1) : class_law(next, c2, m - 1));
        }
      });
    }
    return memo_[key] = out;
  }

 private:
  const Shape& shape_;
  Toy& P_;
  Toy& Q_;
  NodeLawFn f_;
  std::map<std::tuple<std::vector<int32_t>, Ctx, int>, Law> memo_;
};

// The exact law of the first m = 1..3 tokens of the path-class walk with node
// law f equals the target's on every class_shapes() shape with toy models
// (V = 4, 5; T = 0.6, 1.0), and the first 3 on 2 sequences of 2 with V = 8.
// Returns the number of (shape, V, T) cases checked.
inline int expect_class_laws_equal_target(const NodeLawFn& f) {
  int checked = 0;
  for (const auto& [name, shape] : class_shapes())
    for (int V : {4, 5})
      for (double temp : {0.6, 1.0}) {
        SCOPED_TRACE(name + " V=" + std::to_string(V) + " T=" + std::to_string(temp));
        Toy P = logit_model(V, 11, 1.0, temp, 0.2), Q = logit_model(V, 12, 1.5, temp, 0.25);
        for (int m = 1; m <= 3; ++m) {
          ClassEnumerator e(shape, P, Q, f);
          EXPECT_LE(max_abs_diff(e.law(m), e.target_law({}, m)), 1e-12) << "m=" << m;
        }
        ++checked;
      }
  // A larger vocabulary on the sequence shape (V = 8, 2 sequences of 2).
  Toy P = logit_model(8, 21, 1.0, 1.0, 0.2), Q = logit_model(8, 22, 1.5, 1.0, 0.25);
  const Shape seq = chains(2, 2);
  ClassEnumerator e(seq, P, Q, f);
  EXPECT_LE(max_abs_diff(e.law(3), e.target_law({}, 3)), 1e-12);
  return checked;
}

// ---- optimal multi-draft acceptance (exact) ------------------------------------------

// alpha_k = max P(Y in {X_1..X_k}) over couplings of X_i i.i.d. q (draft) with
// Y ~ p (target): the optimal-transport LP with membership cost. Its value is
// the max flow source -> k-tuple (capacity prod q) -> member token (infinite)
// -> sink (capacity p); solved exactly (up to rounding) by Edmonds-Karp.
inline double optimal_acceptance(const std::vector<double>& p, const std::vector<double>& q, int k) {
  std::vector<std::vector<int32_t>> tuples;
  std::vector<double> mass;
  for_each_tuple(q, k, [&](const std::vector<int32_t>& t, double pr) {
    tuples.push_back(t);
    mass.push_back(pr);
  });
  const size_t T = tuples.size(), V = p.size(), N = T + V + 2, src = T + V, snk = T + V + 1;
  std::vector<double> cap(N * N, 0.0);
  auto C = [&](size_t a, size_t b) -> double& { return cap[a * N + b]; };
  for (size_t i = 0; i < T; ++i) {
    C(src, i) = mass[i];
    for (int32_t x : tuples[i]) C(i, T + static_cast<size_t>(x)) = 1e300;
  }
  for (size_t y = 0; y < V; ++y) C(T + y, snk) = p[y];
  double flow = 0;
  for (;;) {
    std::vector<size_t> prev(N, N);
    std::vector<size_t> queue{src};
    prev[src] = src;
    for (size_t h = 0; h < queue.size() && prev[snk] == N; ++h)
      for (size_t b = 0; b < N; ++b)
        if (prev[b] == N && C(queue[h], b) > 1e-18) {
          prev[b] = queue[h];
          queue.push_back(b);
        }
    if (prev[snk] == N) break;
    double aug = 1e300;
    for (size_t b = snk; b != src; b = prev[b]) aug = std::min(aug, C(prev[b], b));
    for (size_t b = snk; b != src; b = prev[b]) {
      C(prev[b], b) -= aug;
      C(b, prev[b]) += aug;
    }
    flow += aug;
  }
  return flow;
}

// ---- chi-square --------------------------------------------------------------------------

// Regularised upper incomplete gamma Q(a, x) (series / continued fraction).
inline double gamma_q(double a, double x) {
  if (x <= 0) return 1.0;
  const double lg = std::lgamma(a);
  if (x < a + 1) {
    double sum = 1.0 / a, term = sum;
    for (int n = 1; n < 1000; ++n) {
      term *= x / (a + n);
      sum += term;
      if (std::abs(term) < std::abs(sum) * 1e-15) break;
    }
    return 1.0 - sum * std::exp(-x + a * std::log(x) - lg);
  }
  const double tiny = 1e-300;
  double b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
  for (int i = 1; i < 1000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::abs(d) < tiny) d = tiny;
    c = b + an / c;
    if (std::abs(c) < tiny) c = tiny;
    d = 1 / d;
    const double del = d * c;
    h *= del;
    if (std::abs(del - 1) < 1e-15) break;
  }
  return std::exp(-x + a * std::log(x) - lg) * h;
}

// Pearson chi-square p-value of counts against a law (a count in a cell of zero
// expected mass gives p = 0).
inline double chi_square_p(const std::map<std::vector<int32_t>, long>& counts, const Law& law, long n,
                           int* dof_out = nullptr) {
  double chi = 0;
  int cells = 0;
  for (const auto& [k, c] : counts)
    if (!law.count(k) || law.at(k) <= 0) return 0.0;
  for (const auto& [k, pr] : law) {
    if (pr <= 0) continue;
    const double e = pr * static_cast<double>(n);
    const double o = counts.count(k) ? static_cast<double>(counts.at(k)) : 0.0;
    chi += (o - e) * (o - e) / e;
    ++cells;
  }
  if (dof_out) *dof_out = cells - 1;
  return gamma_q((cells - 1) / 2.0, chi / 2);
}

inline int32_t draw(std::span<const float> p, Rng& rng) {
  double s = 0;
  for (float x : p) s += x;
  const double u = rng.uniform() * s;
  double cum = 0;
  int32_t last = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] <= 0) continue;
    cum += p[i];
    last = static_cast<int32_t>(i);
    if (u < cum) break;
  }
  return last;
}

// One speculative iteration end to end through verify_tree: children of every
// shape node drawn i.i.d. from Q (sample_children), verified with v, completed
// to m tokens from the target. *hit = whether the first token was accepted
// (a root child). Checks that the accepted ids form a root-to-node path
// spelling the emitted tokens (returns an empty vector if not).
inline std::vector<int32_t> one_iteration(spec::Verifier v, const Shape& shape, Toy& P, Toy& Q, int m, Rng& rng,
                                          bool* hit = nullptr, const spec::VerifyOptions& options = {}) {
  const int n = shape.size();
  std::vector<Ctx> ctx(static_cast<size_t>(n));
  std::vector<int32_t> token(static_cast<size_t>(n), -1);
  for (int u = 0; u < n; ++u) {
    if (u > 0) {
      ctx[static_cast<size_t>(u)] = ctx[static_cast<size_t>(shape.parent[static_cast<size_t>(u)])];
      ctx[static_cast<size_t>(u)].push_back(token[static_cast<size_t>(u)]);
    }
    const auto& ks = shape.kids[static_cast<size_t>(u)];
    if (ks.empty()) continue;
    const auto drawn = spec::sample_children(spec::Verifier::kSpecTr, Q.dist(ctx[static_cast<size_t>(u)]),
                                             static_cast<int>(ks.size()), rng);
    for (size_t j = 0; j < ks.size(); ++j) token[static_cast<size_t>(ks[j])] = drawn[j];
  }
  std::vector<int32_t> vparent(static_cast<size_t>(n - 1)), vtoken(static_cast<size_t>(n - 1));
  for (int i = 1; i < n; ++i) {
    vparent[static_cast<size_t>(i - 1)] = shape.parent[static_cast<size_t>(i)] - 1;
    vtoken[static_cast<size_t>(i - 1)] = token[static_cast<size_t>(i)];
  }
  const spec::TreeView view{vparent, vtoken};
  spec::DistFn target = [&](int32_t u) -> std::span<const float> { return P.dist(ctx[static_cast<size_t>(u + 1)]); };
  spec::DistFn draft = [&](int32_t u) -> std::span<const float> {
    if (shape.kids[static_cast<size_t>(u + 1)].empty()) return {};  // like the runtime: none at leaves
    return Q.dist(ctx[static_cast<size_t>(u + 1)]);
  };
  const spec::VerifyResult r = spec::verify_tree(v, view, target, draft, rng, options);
  std::vector<int32_t> out;
  int32_t prev = -1;
  for (int32_t a : r.accepted) {
    if (vparent[static_cast<size_t>(a)] != prev) return {};
    prev = a;
    out.push_back(vtoken[static_cast<size_t>(a)]);
  }
  if (hit) *hit = !r.accepted.empty();
  out.push_back(r.bonus);
  while (static_cast<int>(out.size()) < m) {
    const Ctx c = out;
    out.push_back(draw(P.dist(c), rng));
  }
  out.resize(static_cast<size_t>(m));
  return out;
}

// ---- Monte Carlo through verify_tree ---------------------------------------------------

inline constexpr long kSamplesPerSeed = 250000;  // x 4 seeds = 10^6 per configuration
inline constexpr double kAlpha = 1e-4;
inline constexpr uint64_t kSeeds[] = {1, 2, 3, 4};

// kSamplesPerSeed iterations of one_iteration(v) per seed (Rng(seed * seed_mul
// + seed_add)), tallied against the exact law of the first m tokens of the
// path-class walk with node law f. Returns the chi-square p-values (one per
// seed); checks that every output spells a tree path and that the hit rate
// (first token is a root draft) is within 3 sigma of the exact value.
inline std::vector<double> run_class_mc(const std::string& name, spec::Verifier v, const Shape& shape, Toy& P, Toy& Q,
                                        int m, const NodeLawFn& f, const spec::VerifyOptions& options = {},
                                        uint64_t seed_mul = 7919, uint64_t seed_add = 17) {
  ClassEnumerator e(shape, P, Q, f);
  const Law want = e.target_law({}, m);
  const double hit_exact = hit_probability(f, P.law({}), Q.law({}), static_cast<int>(shape.kids[0].size()));
  std::vector<double> pv;
  long hits = 0, total = 0;
  for (uint64_t seed : kSeeds) {
    Rng rng(seed * seed_mul + seed_add);
    std::map<std::vector<int32_t>, long> counts;
    for (long i = 0; i < kSamplesPerSeed; ++i) {
      bool hit = false;
      const auto out = one_iteration(v, shape, P, Q, m, rng, &hit, options);
      EXPECT_EQ(out.size(), static_cast<size_t>(m)) << "accepted ids are not a tree path";
      ++counts[out];
      hits += hit;
    }
    total += kSamplesPerSeed;
    int dof = 0;
    pv.push_back(chi_square_p(counts, want, kSamplesPerSeed, &dof));
    std::printf("[ chi2 ] %-36s seed %llu: dof %d p = %.4g\n", name.c_str(), static_cast<unsigned long long>(seed), dof,
                pv.back());
  }
  const double rate = static_cast<double>(hits) / static_cast<double>(total);
  const double sigma = std::sqrt(hit_exact * (1 - hit_exact) / static_cast<double>(total));
  std::printf("[ acc  ] %-36s first token accepted %.5f, exact %.5f (3 sigma = %.5f)\n", name.c_str(), rate, hit_exact,
              3 * sigma);
  EXPECT_LE(std::abs(rate - hit_exact), 3 * sigma + 1e-12) << name;
  return pv;
}

}  // namespace redwood::testutil
