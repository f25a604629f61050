// OPT-Tree: deterministic top-k children scored by the path probability
// p^(node) = product of the draft probabilities along its path (root 1). The
// expected acceptance length of a tree is (for a draft matching the target)
// E(T) = sum of p^ over its nodes, and for any n the n largest p^ of a tree
// form a rooted subtree (p^ never grows from parent to child) — so the tree is
// grown layer by layer and the final tree is just "the n best nodes":
//   T = root; layer = the n largest p^(u) q_u(y) over the root's children
//   while depth < max and E_sub(T, n) - E > delta:
//     E = E_sub(T, n); one batched draft pass over the last layer;
//     layer = the n largest p^(u) q_u(y) over all its nodes u and tokens y
//   final = the n nodes of T with the largest p^ (plus the root)
// with n = budget - 1 drafted nodes and E_sub(T, n) the sum of the n largest
// p^. Ties go parent-first (lower id): a draft probability of exactly 1 gives a
// child its parent's p^, and the selection must stay connected.
// Only last-layer nodes among the current n best are run through the draft:
// the children of any other node have p^ at most their parent's, which is
// already beaten by n nodes (ties lose to the earlier id), so they could enter
// neither E_sub nor the final tree — the result is unchanged, the draft pass
// smaller.
#include <algorithm>
#include <cmath>

#include "src/spec/tree_policy.h"
#include "src/util/error.h"

namespace redwood::spec {

namespace {

// Sum of a distribution (probs() normalises, up to float rounding) with the
// checks the verifiers apply.
double checked_total(std::span<const float> q) {
  double tot = 0;
  for (const float x : q) {
    if (!(x >= 0.0f) || !std::isfinite(x)) throw Error("draft distribution has a negative or non-finite entry");
    tot += x;
  }
  if (!(tot > 0)) throw Error("draft distribution sums to zero");
  return tot;
}

class OptTreePolicy : public TreePolicy {
 public:
  OptTreePolicy(int budget, int depth, double delta) : n_(budget - 1), levels_(depth), delta_(delta) {
    if (budget < 1) throw Error("opt-tree: budget must be >= 1");
    if (depth < 1) throw Error("opt-tree: depth must be >= 1");
    if (!(delta >= 0) || !std::isfinite(delta)) throw Error("opt-tree: delta must be finite and >= 0");
  }
  void begin_step() override {
    pp_ = {1.0};
    e_ = 0;
  }
  std::vector<int32_t> grow(DraftTree& t, std::span<const int32_t> expanded, Rng& rng) override {
    if (n_ < 1 || levels_ < 2 || expanded.empty()) return {};
    struct Cand {
      double v;
      int32_t pos, rank, tok;
    };
    std::vector<Cand> cand;
    for (size_t i = 0; i < expanded.size(); ++i) {
      const int32_t u = expanded[i];
      const auto q = t.dist(u);
      const double tot = checked_total(q);
      const int k = static_cast<int>(std::min<size_t>(static_cast<size_t>(n_), q.size()));
      const auto top = sample_children(Verifier::kGreedy, q, k, rng);  // deterministic
      for (size_t r = 0; r < top.size(); ++r) {
        const double d = std::min(1.0, static_cast<double>(q[static_cast<size_t>(top[r])]) / tot);
        if (!(d > 0)) break;
        cand.push_back({pp_[static_cast<size_t>(u)] * d, static_cast<int32_t>(i), static_cast<int32_t>(r), top[r]});
      }
    }
    auto better = [](const Cand& a, const Cand& b) {
      if (a.v != b.v) return a.v > b.v;
      return a.pos != b.pos ? a.pos < b.pos : a.rank < b.rank;
    };
    if (static_cast<int>(cand.size()) > n_) {
      std::nth_element(cand.begin(), cand.begin() + n_, cand.end(), better);
      cand.resize(static_cast<size_t>(n_));
    }
    // Creation order: parent by parent, each parent's children by rank (so
    // siblings are in descending probability, as the greedy verifier draws).
    std::sort(cand.begin(), cand.end(),
              [](const Cand& a, const Cand& b) { return a.pos != b.pos ? a.pos < b.pos : a.rank < b.rank; });
    std::vector<int32_t> layer;
    for (const Cand& c : cand) {
      layer.push_back(t.add(expanded[static_cast<size_t>(c.pos)], c.tok));
      pp_.push_back(c.v);
    }
    if (layer.empty()) return {};
    const auto best = detail::best_nodes(pp_, n_);
    double e_sub = 0;
    for (int32_t b : best) e_sub += pp_[static_cast<size_t>(b)];
    const double gain = e_sub - e_;
    e_ = e_sub;
    if (t.depth[static_cast<size_t>(layer[0])] + 1 >= levels_ || !(gain > delta_)) return {};
    std::vector<int32_t> next;
    for (int32_t c : layer)
      if (std::binary_search(best.begin(), best.end(), c)) next.push_back(c);
    return next;
  }
  std::vector<int32_t> final_nodes(const DraftTree& t) const override {
    if (static_cast<int>(pp_.size()) != t.size()) throw Error("opt-tree: tree and policy disagree");
    std::vector<int32_t> keep = {0};
    for (int32_t b : detail::best_nodes(pp_, n_)) keep.push_back(b);
    return keep;
  }
  bool needs_old_dists() const override { return false; }
  int max_nodes() const override { return n_ + 1; }
  // One pass per layer over at most n nodes.
  int max_draft_rows() const override { return n_ * std::max(0, levels_ - 2); }
  int max_levels() const override { return levels_; }

 private:
  int n_, levels_;
  double delta_;
  std::vector<double> pp_;  // p^ per node
  double e_ = 0;            // E_sub of the tree before the last layer
};

}  // namespace

std::unique_ptr<TreePolicy> make_opt_tree_policy(int budget, int depth, double delta) {
  return std::make_unique<OptTreePolicy>(budget, depth, delta);
}

}  // namespace redwood::spec
