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

#include "src/speculative/tree_policy.h"
#include "src/util/error.h"

namespace redwood::spec {

namespace {

// value_ = p^ per node.
class OptTreePolicy : public detail::TopNPolicy {
 public:
  OptTreePolicy(int budget, int depth, double delta) : TopNPolicy("opt-tree", budget, depth), delta_(delta) {
    if (!(delta >= 0) || !std::isfinite(delta)) throw Error("opt-tree: delta must be finite and >= 0");
  }
  void begin_step() override {
    value_ = {1.0};
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
      const auto top = detail::top_children(t.dist(u), n_, rng);
      for (size_t r = 0; r < top.size(); ++r)
        cand.push_back({value_[static_cast<size_t>(u)] * top[r].prob, static_cast<int32_t>(i), static_cast<int32_t>(r),
                        top[r].token});
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
      value_.push_back(c.v);
    }
    if (layer.empty()) return {};
    const auto best = detail::best_nodes(value_, n_);
    double e_sub = 0;
    for (int32_t b : best) e_sub += value_[static_cast<size_t>(b)];
    const double gain = e_sub - e_;
    e_ = e_sub;
    if (t.depth[static_cast<size_t>(layer[0])] + 1 >= levels_ || !(gain > delta_)) return {};
    std::vector<int32_t> next;
    for (int32_t c : layer)
      if (std::binary_search(best.begin(), best.end(), c)) next.push_back(c);
    return next;
  }
  // final_nodes and the bounds (one pass per layer over at most n nodes): TopNPolicy.

 private:
  double delta_;
  double e_ = 0;  // E_sub of the tree before the last layer
};

}  // namespace

std::unique_ptr<TreePolicy> make_opt_tree_policy(int budget, int depth, double delta) {
  return std::make_unique<OptTreePolicy>(budget, depth, delta);
}

}  // namespace redwood::spec
