// Tree policies on synthetic draft distributions (no model): DySpec against a
// literal Algorithm 1 / Algorithm 2, value order, the sampling-without-
// replacement law and losslessness under the Sequoia verifier; OPT-Tree and
// SpecExec against brute force; budgets, depth, ties, pairings, parameters.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <set>
#include <vector>

#include "src/speculative/speculate.h"
#include "src/speculative/tree_policy.h"
#include "src/speculative/verify.h"
#include "src/util/error.h"

namespace redwood::spec {
namespace {

using Path = std::vector<int32_t>;  // tokens below the root

uint64_t mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A synthetic draft: a distribution over V tokens for every path, from a hash
// of the path (peaked: logits scaled by `sharp`). Optional override per path.
struct Synth {
  int V = 8;
  uint64_t salt = 1;
  double sharp = 3.0;
  std::function<bool(const Path&, std::vector<float>&)> special;
  std::vector<float> dist(const Path& p) const {
    std::vector<float> q(static_cast<size_t>(V));
    if (special && special(p, q)) return q;
    uint64_t h = mix(salt ^ mix(p.size()));
    for (int32_t x : p) h = mix(h ^ (static_cast<uint64_t>(x) + 1) * 0x2545f4914f6cdd1dull);
    std::vector<double> w(static_cast<size_t>(V));
    for (int t = 0; t < V; ++t) {
      const double u = static_cast<double>(mix(h ^ static_cast<uint64_t>(t)) >> 11) * 0x1.0p-53;
      w[static_cast<size_t>(t)] = std::exp(sharp * u * u * 2);
    }
    const double s = std::accumulate(w.begin(), w.end(), 0.0);
    for (int t = 0; t < V; ++t) q[static_cast<size_t>(t)] = static_cast<float>(w[static_cast<size_t>(t)] / s);
    return q;
  }
  // Probabilities as the policies use them: float entries normalised in double.
  std::vector<double> law(const Path& p) const {
    const auto q = dist(p);
    double s = 0;
    for (float x : q) s += x;
    std::vector<double> d(q.size());
    for (size_t i = 0; i < q.size(); ++i) d[i] = q[i] / s;
    return d;
  }
};

Path path_of(const DraftTree& t, int32_t u) {
  Path p;
  for (; u > 0; u = t.parent[static_cast<size_t>(u)]) p.push_back(t.token[static_cast<size_t>(u)]);
  std::reverse(p.begin(), p.end());
  return p;
}

struct Grown {
  std::vector<int32_t> keep;
  int passes = 0;
  int forwarded = 0;
};

// One step's tree, with `s` standing for the draft.
Grown run_policy(TreePolicy& pol, DraftTree& t, const Synth& s, Rng& rng, bool retain = true) {
  t.reset(/*root_token=*/0, retain);
  t.begin_batch();
  {
    const auto q = s.dist({});
    t.set_dist(0) = q;
  }
  Grown r;
  r.keep = grow_tree(
      pol, t,
      [&](std::span<const int32_t> nodes) {
        for (int32_t u : nodes) {
          EXPECT_TRUE(t.expanded(t.parent[static_cast<size_t>(u)])) << "parent of " << u << " not expanded";
          t.set_dist(u) = s.dist(path_of(t, u));
          r.forwarded++;
        }
      },
      rng, &r.passes);
  return r;
}

// Path probability of a node under the synthetic draft.
double path_prob(const DraftTree& t, const Synth& s, int32_t u) {
  double v = 1;
  const Path p = path_of(t, u);
  for (size_t i = 0; i < p.size(); ++i)
    v *= s.law(Path(p.begin(), p.begin() + static_cast<long>(i)))[static_cast<size_t>(p[i])];
  return v;
}

// DySpec's value of node u when it was created: pp(parent) * (1 - earlier siblings' mass).
double creation_value(const DraftTree& t, const Synth& s, int32_t u) {
  const int32_t par = t.parent[static_cast<size_t>(u)];
  const auto d = s.law(path_of(t, par));
  double removed = 0;
  for (int32_t c : t.children[static_cast<size_t>(par)]) {
    if (c == u) break;
    removed += d[static_cast<size_t>(t.token[static_cast<size_t>(c)])];
  }
  return path_prob(t, s, par) * (1 - removed);
}

void expect_valid_tree(const DraftTree& t, const std::vector<int32_t>& keep, int budget) {
  ASSERT_FALSE(keep.empty());
  EXPECT_EQ(keep[0], 0);
  EXPECT_LE(static_cast<int>(keep.size()), budget);
  std::set<int32_t> in(keep.begin(), keep.end());
  for (int32_t u : keep) {
    if (u == 0) continue;
    EXPECT_TRUE(in.count(t.parent[static_cast<size_t>(u)])) << "node " << u << " kept without its parent";
  }
  EXPECT_TRUE(std::is_sorted(keep.begin(), keep.end()));
  for (int u = 0; u < t.size(); ++u) {  // siblings are distinct tokens
    std::set<int32_t> toks;
    for (int32_t c : t.children[static_cast<size_t>(u)])
      EXPECT_TRUE(toks.insert(t.token[static_cast<size_t>(c)]).second);
  }
}

std::set<Path> paths(const DraftTree& t, const std::vector<int32_t>& keep) {
  std::set<Path> out;
  for (int32_t u : keep) out.insert(path_of(t, u));
  return out;
}

// ---- DySpec ---------------------------------------------------------------------

// Algorithm 1 as printed (T = 0: y = argmax of the residual, lowest id on
// ties): a heap of (residual copy, value, position), one draft call per node.
std::vector<std::pair<Path, double>> dyspec_alg1_greedy(const Synth& s, int budget) {
  struct E {
    std::vector<double> R;
    double v;
    Path pos;
    int64_t seq;
  };
  auto less = [](const E& a, const E& b) { return a.v < b.v || (a.v == b.v && a.seq > b.seq); };
  std::vector<E> H;
  int64_t seq = 0;
  H.push_back({s.law({}), 1.0, {}, seq++});
  std::vector<std::pair<Path, double>> tree = {{{}, 1.0}};
  while (static_cast<int>(tree.size()) < budget && !H.empty()) {
    std::pop_heap(H.begin(), H.end(), less);
    E e = H.back();
    H.pop_back();
    int32_t y = 0;
    for (size_t i = 1; i < e.R.size(); ++i)
      if (e.R[i] > e.R[static_cast<size_t>(y)]) y = static_cast<int32_t>(i);
    Path node = e.pos;
    node.push_back(y);
    tree.push_back({node, e.v});
    const double ry = e.R[static_cast<size_t>(y)];
    const double v0 = e.v * ry, v1 = e.v * (1 - ry);
    e.R[static_cast<size_t>(y)] = 0;
    const double rs = std::accumulate(e.R.begin(), e.R.end(), 0.0);
    if (rs > 0) {
      for (double& x : e.R) x /= rs;
      H.push_back({e.R, v1, e.pos, seq++});
      std::push_heap(H.begin(), H.end(), less);
    }
    H.push_back({s.law(node), v0, node, seq++});
    std::push_heap(H.begin(), H.end(), less);
  }
  return tree;
}

TEST(DySpec, HeapGreedyIsAlgorithm1) {
  for (uint64_t salt : {1, 2, 3}) {
    Synth s;
    s.V = 10;
    s.salt = salt;
    for (int budget : {1, 2, 5, 17, 40}) {
      const auto want = dyspec_alg1_greedy(s, budget);
      auto pol = make_dyspec_policy(budget, /*depth=*/64, /*threshold=*/0, /*greedy=*/true);
      DraftTree t;
      Rng rng(7);
      const Grown r = run_policy(*pol, t, s, rng);
      expect_valid_tree(t, r.keep, budget);
      ASSERT_EQ(t.size(), static_cast<int>(want.size())) << "budget " << budget;
      for (int u = 1; u < t.size(); ++u) {
        EXPECT_EQ(path_of(t, u), want[static_cast<size_t>(u)].first) << "node " << u << " budget " << budget;
        EXPECT_NEAR(creation_value(t, s, u), want[static_cast<size_t>(u)].second, 1e-12);
      }
      // Batching: far fewer draft passes than nodes once the tree is big.
      if (budget >= 17) {
        EXPECT_LT(r.passes, t.size() / 2) << "budget " << budget;
      }
    }
  }
}

TEST(DySpec, HeapSamplingPopsByValueAndBatchingChangesNothing) {
  for (uint64_t seed = 0; seed < 30; ++seed) {
    Synth s;
    s.V = 12;
    s.salt = seed + 100;
    s.sharp = 2.0;
    const int budget = 33, depth = 6;
    auto batched = make_dyspec_policy(budget, depth, 0, /*greedy=*/false, /*lookahead=*/true);
    auto single = make_dyspec_policy(budget, depth, 0, /*greedy=*/false, /*lookahead=*/false);
    DraftTree a, b;
    Rng ra(seed), rb(seed);
    const Grown x = run_policy(*batched, a, s, ra);
    const Grown y = run_policy(*single, b, s, rb);
    expect_valid_tree(a, x.keep, budget);
    ASSERT_EQ(a.token, b.token) << "seed " << seed;
    ASSERT_EQ(a.parent, b.parent) << "seed " << seed;
    EXPECT_EQ(a.size(), budget);
    EXPECT_LT(x.passes, y.passes);
    EXPECT_LE(x.forwarded, budget);
    int max_depth = 0;
    for (int u = 1; u < a.size(); ++u) {
      max_depth = std::max(max_depth, a.depth[static_cast<size_t>(u)]);
      EXPECT_GT(path_prob(a, s, u), 0);
      // The popped value never increases: the heap picks the max-value pending sample.
      if (u > 1) {
        EXPECT_LE(creation_value(a, s, u), creation_value(a, s, u - 1) * (1 + 1e-12)) << "seed " << seed;
      }
    }
    EXPECT_LE(max_depth, depth - 1);
  }
}

// The siblings' law is sampling without replacement (what the Sequoia verifier
// corrects for): the first two children of the root, ordered, have probability
// d_a * d_b / (1 - d_a). Chi-square over all ordered pairs; the mass 0.8 on one
// token sends the second draw through the exact residual scan.
TEST(DySpec, SiblingsAreSampledWithoutReplacement) {
  const std::vector<float> q = {0.8f, 0.1f, 0.07f, 0.03f};
  Synth s;
  s.V = 4;
  s.special = [&](const Path&, std::vector<float>& out) {
    out = q;
    return true;
  };
  auto pol = make_dyspec_policy(/*budget=*/3, /*depth=*/2, 0, false);
  std::map<std::pair<int, int>, int> count;
  const int trials = 40000;
  Rng rng(12345);
  for (int i = 0; i < trials; ++i) {
    DraftTree t;
    run_policy(*pol, t, s, rng);
    ASSERT_EQ(t.size(), 3);
    count[{t.token[1], t.token[2]}]++;
  }
  double chi2 = 0;
  int cells = 0;
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b) {
      if (a == b) {
        EXPECT_EQ((count[{a, b}]), 0);
        continue;
      }
      const double e = trials * q[a] * q[b] / (1 - q[a]);
      chi2 += (count[{a, b}] - e) * (count[{a, b}] - e) / e;
      ++cells;
    }
  EXPECT_LT(chi2, 40.0) << "11 degrees of freedom";  // p ~ 3e-5
  EXPECT_EQ(cells, 12);
}

// Losslessness end to end: DySpec trees (stopping rule on draft values)
// verified by the Sequoia verifier emit a first token distributed as the
// target's root distribution.
TEST(DySpec, SequoiaVerifiedTreesAreLossless) {
  Synth draft, target;
  draft.V = target.V = 5;
  draft.salt = 11;
  target.salt = 12;
  draft.sharp = 2;
  target.sharp = 2.5;
  const auto p = target.law({});
  for (double threshold : {0.0, 0.05}) {
    auto pol = make_dyspec_policy(/*budget=*/7, /*depth=*/4, threshold, false);
    std::vector<int> count(5, 0);
    const int trials = 30000;
    Rng rng(99);
    for (int i = 0; i < trials; ++i) {
      DraftTree t;
      run_policy(*pol, t, draft, rng);
      std::vector<int32_t> vpar, vtok;
      for (int u = 1; u < t.size(); ++u) {
        vpar.push_back(t.parent[static_cast<size_t>(u)] - 1);
        vtok.push_back(t.token[static_cast<size_t>(u)]);
      }
      std::vector<float> tbuf, dbuf;
      DistFn tf = [&](int32_t u) -> std::span<const float> {
        tbuf = target.dist(path_of(t, u + 1));
        return tbuf;
      };
      DistFn df = [&](int32_t u) -> std::span<const float> { return t.dist(u + 1); };
      const VerifyResult vr = verify_tree(Verifier::kSequoia, TreeView{vpar, vtok}, tf, df, rng);
      const int32_t first = vr.accepted.empty() ? vr.bonus : vtok[static_cast<size_t>(vr.accepted[0])];
      count[static_cast<size_t>(first)]++;
    }
    double chi2 = 0;
    for (int x = 0; x < 5; ++x) {
      const double e = trials * p[static_cast<size_t>(x)];
      chi2 += (count[static_cast<size_t>(x)] - e) * (count[static_cast<size_t>(x)] - e) / e;
    }
    EXPECT_LT(chi2, 25.0) << "4 degrees of freedom, threshold " << threshold;
  }
}

// Algorithm 2 at T = 0 without a cap: layer by layer, each node draws children
// (in descending order) while its value > t.
std::set<Path> dyspec_alg2_greedy(const Synth& s, double th, int depth) {
  std::set<Path> tree = {{}};
  std::vector<std::pair<Path, double>> leaf = {{{}, 1.0}};
  while (!leaf.empty()) {
    std::vector<std::pair<Path, double>> next;
    for (auto [node, v] : leaf) {
      if (static_cast<int>(node.size()) + 1 >= depth) continue;
      auto d = s.law(node);
      while (v > th) {
        int32_t y = 0;
        for (size_t i = 1; i < d.size(); ++i)
          if (d[i] > d[static_cast<size_t>(y)]) y = static_cast<int32_t>(i);
        if (!(d[static_cast<size_t>(y)] > 0)) break;
        Path c = node;
        c.push_back(y);
        tree.insert(c);
        next.push_back({c, v * d[static_cast<size_t>(y)]});
        v *= 1 - d[static_cast<size_t>(y)];
        d[static_cast<size_t>(y)] = 0;
        const double sum = std::accumulate(d.begin(), d.end(), 0.0);
        for (double& x : d) x /= sum;
      }
    }
    leaf = std::move(next);
  }
  return tree;
}

TEST(DySpec, ThresholdVariantIsAlgorithm2AndRespectsTheCap) {
  for (uint64_t salt : {5, 6, 7}) {
    Synth s;
    s.V = 9;
    s.salt = salt;
    for (double th : {0.3, 0.1, 0.03}) {
      const int depth = 6;
      const auto want = dyspec_alg2_greedy(s, th, depth);
      {
        auto pol = make_dyspec_policy(/*budget=*/8192, depth, th, /*greedy=*/true);
        DraftTree t;
        Rng rng(1);
        const Grown r = run_policy(*pol, t, s, rng, /*retain=*/false);
        expect_valid_tree(t, r.keep, 8192);
        EXPECT_EQ(paths(t, r.keep), want) << "threshold " << th;
        EXPECT_LE(r.passes, depth - 2);  // one pass per layer
        for (int u = 1; u < t.size(); ++u) EXPECT_GT(creation_value(t, s, u), th);
        // Every node stopped drawing exactly when its value fell to <= t.
        for (int u = 0; u < t.size(); ++u) {
          if (t.depth[static_cast<size_t>(u)] + 1 >= depth) continue;
          double removed = 0;
          const auto d = s.law(path_of(t, u));
          for (int32_t c : t.children[static_cast<size_t>(u)])
            removed += d[static_cast<size_t>(t.token[static_cast<size_t>(c)])];
          EXPECT_LE(path_prob(t, s, u) * (1 - removed), th * (1 + 1e-12)) << "node " << u;
        }
      }
      // With a cap: exactly the cap, a subset of the uncapped tree.
      const int cap = std::max(2, static_cast<int>(want.size()) / 2);
      auto pol = make_dyspec_policy(cap, depth, th, /*greedy=*/true);
      DraftTree t;
      Rng rng(1);
      const Grown r = run_policy(*pol, t, s, rng);
      expect_valid_tree(t, r.keep, cap);
      EXPECT_EQ(t.size(), std::min<int>(cap, static_cast<int>(want.size())));
      for (const Path& p : paths(t, r.keep)) EXPECT_TRUE(want.count(p));
    }
  }
}

TEST(DySpec, DepthLimitAndTinyBudgets) {
  Synth s;
  s.V = 6;
  for (int depth : {1, 2, 3}) {
    auto pol = make_dyspec_policy(50, depth, 0, true);
    DraftTree t;
    Rng rng(3);
    const Grown r = run_policy(*pol, t, s, rng);
    expect_valid_tree(t, r.keep, 50);
    for (int u = 0; u < t.size(); ++u) EXPECT_LT(t.depth[static_cast<size_t>(u)], depth);
    if (depth == 1) {
      EXPECT_EQ(t.size(), 1);
    } else if (depth == 2) {
      EXPECT_EQ(t.size(), 7);  // all 6 root children, then nothing can grow
    }
  }
}

// ---- OPT-Tree -------------------------------------------------------------------

// All paths below the root up to depth - 1 tokens, each with its p^.
void enumerate(const Synth& s, Path p, double v, int depth, int width, bool log_prob,
               std::vector<std::pair<Path, double>>& out) {
  if (static_cast<int>(p.size()) + 1 >= depth) return;
  const auto d = s.law(p);
  std::vector<int32_t> idx(d.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(),
                   [&](int32_t a, int32_t b) { return d[static_cast<size_t>(a)] > d[static_cast<size_t>(b)]; });
  for (int r = 0; r < width && r < static_cast<int>(idx.size()); ++r) {
    const int32_t y = idx[static_cast<size_t>(r)];
    if (!(d[static_cast<size_t>(y)] > 0)) break;
    Path c = p;
    c.push_back(y);
    const double cv = log_prob ? v + std::log(d[static_cast<size_t>(y)]) : v * d[static_cast<size_t>(y)];
    out.push_back({c, cv});
    enumerate(s, c, cv, depth, width, log_prob, out);
  }
}

// The n best (value desc, then shorter path first: parent-first).
std::set<Path> brute_best(std::vector<std::pair<Path, double>> all, int n) {
  std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first.size() < b.first.size();
  });
  std::set<Path> out = {{}};
  for (int i = 0; i < n && i < static_cast<int>(all.size()); ++i) out.insert(all[static_cast<size_t>(i)].first);
  return out;
}

TEST(OptTree, SelectionEqualsBruteForce) {
  for (uint64_t salt : {21, 22, 23, 24}) {
    Synth s;
    s.V = 5;
    s.salt = salt;
    for (int depth : {2, 3, 5}) {
      std::vector<std::pair<Path, double>> all;
      enumerate(s, {}, 1.0, depth, 1 << 20, false, all);
      for (int budget : {1, 2, 4, 9, 20, 40}) {
        auto pol = make_opt_tree_policy(budget, depth, /*delta=*/0);
        DraftTree t;
        Rng rng(1);
        const Grown r = run_policy(*pol, t, s, rng, /*retain=*/false);
        expect_valid_tree(t, r.keep, budget);
        EXPECT_EQ(paths(t, r.keep), brute_best(all, budget - 1)) << "depth " << depth << " budget " << budget;
        EXPECT_LE(r.forwarded, (budget - 1) * std::max(0, depth - 2));
        EXPECT_LE(r.passes, std::max(0, depth - 2));
      }
    }
  }
}

TEST(OptTree, DeltaStopsGrowthAndTiesStayParentFirst) {
  Synth s;
  s.V = 6;
  s.salt = 31;
  {  // delta >= 1: the first layer's gain (<= 1) never passes: root children only
    auto pol = make_opt_tree_policy(10, 8, 1.0);
    DraftTree t;
    Rng rng(1);
    const Grown r = run_policy(*pol, t, s, rng);
    EXPECT_EQ(r.passes, 0);
    EXPECT_EQ(static_cast<int>(r.keep.size()), 7);
    for (int u = 1; u < t.size(); ++u) EXPECT_EQ(t.depth[static_cast<size_t>(u)], 1);
  }
  // A node whose draft is one-hot (probability exactly 1) gives its child the
  // same p^: every selection must still contain the parents.
  s.special = [](const Path& p, std::vector<float>& out) {
    if (p.empty() || p.back() != 0) return false;
    std::fill(out.begin(), out.end(), 0.0f);
    out[0] = 1.0f;
    return true;
  };
  for (int depth : {3, 6}) {
    std::vector<std::pair<Path, double>> all;
    enumerate(s, {}, 1.0, depth, 1 << 20, false, all);
    for (int budget : {2, 3, 5, 8, 13}) {
      auto pol = make_opt_tree_policy(budget, depth, 0.0);
      DraftTree t;
      Rng rng(1);
      const Grown r = run_policy(*pol, t, s, rng);
      expect_valid_tree(t, r.keep, budget);
      EXPECT_EQ(paths(t, r.keep), brute_best(all, budget - 1)) << "depth " << depth << " budget " << budget;
    }
  }
}

// ---- SpecExec -------------------------------------------------------------------

TEST(SpecExec, TopBudgetByCumulativeLogProbEqualsBruteForce) {
  for (uint64_t salt : {41, 42, 43}) {
    Synth s;
    s.V = 7;
    s.salt = salt;
    for (int width : {1, 2, 3}) {
      for (int depth : {2, 4, 6}) {
        std::vector<std::pair<Path, double>> all;
        enumerate(s, {}, 0.0, depth, width, true, all);
        for (int budget : {1, 3, 8, 16, 31}) {
          auto pol = make_specexec_policy(budget, depth, width);
          DraftTree t;
          Rng rng(1);
          const Grown r = run_policy(*pol, t, s, rng, /*retain=*/false);
          expect_valid_tree(t, r.keep, budget);
          EXPECT_EQ(paths(t, r.keep), brute_best(all, budget - 1))
              << "width " << width << " depth " << depth << " budget " << budget;
          EXPECT_LE(r.passes, std::max(0, depth - 2));
          EXPECT_LE(r.forwarded, (budget - 1) * std::max(0, depth - 2));
          for (int u = 1; u < t.size(); ++u)
            EXPECT_LE(static_cast<int>(t.children[static_cast<size_t>(u)].size()), width);
        }
      }
    }
  }
}

TEST(SpecExec, EarlyStopWhenNothingCanEnter) {
  // One dominant token everywhere: with budget 4 the chain of depth 3 is
  // the top-3, after which no candidate beats the weakest kept node.
  Synth s;
  s.V = 4;
  s.special = [](const Path&, std::vector<float>& out) {
    out = {0.97f, 0.01f, 0.01f, 0.01f};
    return true;
  };
  auto pol = make_specexec_policy(/*budget=*/4, /*depth=*/30, /*width=*/2);
  DraftTree t;
  Rng rng(1);
  const Grown r = run_policy(*pol, t, s, rng);
  EXPECT_EQ(paths(t, r.keep), (std::set<Path>{{}, {0}, {0, 0}, {0, 0, 0}}));
  EXPECT_LE(r.passes, 4);  // stops long before depth 30
}

// ---- static shapes, pairings, parameters ----------------------------------------

TEST(StaticPolicy, BuildsTheShapeWithTopKChildren) {
  Synth s;
  s.V = 8;
  const StaticTree shape = make_tree_shape("kary:3x2", 0, 0, "");
  auto pol = make_static_policy(shape, Verifier::kGreedy);
  DraftTree t;
  Rng rng(1);
  const Grown r = run_policy(*pol, t, s, rng, false);
  ASSERT_EQ(t.size(), shape.size());
  EXPECT_EQ(r.passes, 1);  // root's children in the first call, their children after one pass
  for (int u = 1; u < t.size(); ++u) {
    const int32_t par = t.parent[static_cast<size_t>(u)];
    const auto d = s.law(path_of(t, par));
    const auto& sib = t.children[static_cast<size_t>(par)];
    const int rank = static_cast<int>(std::find(sib.begin(), sib.end(), u) - sib.begin());
    // rank-th most likely token
    int better = 0;
    for (double x : d) better += x > d[static_cast<size_t>(t.token[static_cast<size_t>(u)])];
    EXPECT_EQ(better, rank);
  }
}

TEST(Pairing, VerifiersAllowedPerTree) {
  EXPECT_EQ(check_pairing(TreeKind::kDySpec, Verifier::kSequoia), "");
  EXPECT_EQ(check_pairing(TreeKind::kDySpec, Verifier::kGreedy), "");
  EXPECT_NE(check_pairing(TreeKind::kDySpec, Verifier::kSpecInfer), "");
  EXPECT_NE(check_pairing(TreeKind::kDySpec, Verifier::kTargetSample), "");
  for (TreeKind k : {TreeKind::kOptTree, TreeKind::kSpecExec}) {
    EXPECT_EQ(check_pairing(k, Verifier::kTargetSample), "");
    EXPECT_EQ(check_pairing(k, Verifier::kGreedy), "");
    EXPECT_NE(check_pairing(k, Verifier::kSequoia), "");
    EXPECT_NE(check_pairing(k, Verifier::kSpecTr), "");
  }
  for (Verifier v : {Verifier::kGreedy, Verifier::kSpecInfer, Verifier::kSequoia, Verifier::kTargetSample,
                     Verifier::kSpecTr, Verifier::kMultiDraftIS})
    EXPECT_EQ(check_pairing(TreeKind::kStatic, v), "");
  const std::string e = check_pairing(TreeKind::kOptTree, Verifier::kSequoia);
  EXPECT_NE(e.find("target-sample or greedy"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos);
}

TEST(Pairing, MakeSpecConfigDefaultsAndErrors) {
  SamplingParams greedy, hot;
  hot.temperature = 0.7f;
  TreeOptions o;
  o.tree = "dyspec";
  EXPECT_EQ(make_spec_config(o, greedy).verifier, Verifier::kGreedy);
  EXPECT_EQ(make_spec_config(o, hot).verifier, Verifier::kSequoia);
  EXPECT_EQ(make_spec_config(o, hot).max_tree_nodes(), 64);
  o.tree = "opt-tree";
  EXPECT_EQ(make_spec_config(o, hot).verifier, Verifier::kTargetSample);
  o.tree = "specexec";
  o.width = 3;
  EXPECT_EQ(make_spec_config(o, hot).tree.width, 3);
  o.tree = "sequoia";
  o.width.reset();
  o.budget = 9;
  EXPECT_EQ(make_spec_config(o, hot).verifier, Verifier::kSequoia);
  auto throws = [](TreeOptions t, const SamplingParams& sp, const std::string& needle) {
    try {
      make_spec_config(t, sp);
      ADD_FAILURE() << "no error for " << t.tree << " (" << needle << ")";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  TreeOptions b;
  b.tree = "specexec";
  b.width = 0;
  throws(b, greedy, "--width");
  b.tree = "dyspec";
  b.width.reset();
  b.threshold = 1.0;
  throws(b, greedy, "--threshold");
  b.threshold = -0.1;
  throws(b, greedy, "--threshold");
  b.threshold.reset();
  b.budget = 0;
  throws(b, greedy, "--budget");
  b.budget = 10;
  b.depth = 0;
  throws(b, greedy, "--depth");
  b.depth = 4;
  b.delta = 0.2;
  throws(b, greedy, "--delta is only for --tree opt-tree");
  b.delta.reset();
  b.tree = "opt-tree";
  b.delta = -1;
  throws(b, greedy, "--delta");
  b.delta.reset();
  b.threshold = 0.1;
  throws(b, greedy, "--threshold is only for --tree dyspec");
  b.threshold.reset();
  b.verifier = "sequoia";
  throws(b, hot, "target-sample or greedy");
  b.verifier = "greedy";
  throws(b, hot, "--temperature 0");
  b.verifier = "target-sample";
  throws(b, greedy, "--temperature > 0");
  b.verifier = "";
  b.tree = "dyspec";
  b.verifier = "specinfer";
  throws(b, hot, "sequoia or greedy");
  b.verifier = "";
  b.tree = "bogus";
  throws(b, hot, "specexec");
  b.tree = "chain:3";
  b.width = 2;
  throws(b, hot, "--width is only for --tree specexec");
}

}  // namespace
}  // namespace redwood::spec
