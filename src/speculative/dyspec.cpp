// DySpec (arXiv 2410.11744): the tree grows greedily by the value of pending
// samples, v = (product of the ancestors' draft probabilities) x (1 - sum of
// the earlier siblings' probabilities), original un-renormalised probabilities.
// Siblings are drawn WITHOUT replacement (the k-th from q with the earlier ones
// removed), which is the law the Sequoia verifier corrects for; at temperature
// 0 the k-th sibling is the k-th most likely token (the greedy verifier's order).
// Nothing drawn is ever pruned: whether a node gets another sibling or a child
// depends only on draft-side quantities, a stopping rule the verifier allows.
//
// Residuals are never materialised: a pending sample of node u is (u, value),
// its residual is u's draft distribution minus the tokens of u's children so far
// (the tree holds them) — no vocabulary-sized copy per node or heap entry.
//
// Heap variant (Algorithm 1, budget): a max-heap of pending samples, one per
// node: "next child of u" with value pp(u) * (1 - removed(u)). Popping u draws
// y from u's residual, adds child c (value pp(c) = pp(u) * q_u(y)), re-pushes u
// (next sibling, smaller value) and pushes c (its first child, pending c's
// distribution). Every pushed value is <= the popped one, so pops come in
// non-increasing value order and the tree is the max-value one.
// Batching: the paper runs the draft once per node. Here the value of c's
// first-child entry is known before c's draft pass; only drawing from it needs
// the distribution. So pops continue without a pass while the top entry's node
// is expanded; when it is not, ONE draft pass runs over every unexpanded node
// among the r = budget - size largest entries, the only ones that can still be
// popped: each of the r remaining pops removes exactly one entry (pushes only
// add), so an entry with r entries above it still has one above it when the
// budget is reached. The pops, the random draws and hence the tree are exactly
// those of the one-node-per-pass algorithm (the tests compare both); the price
// is draft rows for tree nodes that end up without children (at most r a pass).
//
// Threshold variant (Algorithm 2): layer by layer, one batched draft pass per
// layer; each node draws children while its pending value > threshold
// ("while v_i > t"; the printed "<" is a typo). Across the layer's nodes the
// draws go by value (a per-layer heap) so that the hard node cap (the budget)
// keeps the most valuable ones; without the cap the tree has the same law as
// the paper's node-by-node loop. Nodes whose own value is <= threshold would
// draw no child: they are not run through the draft.
#include <algorithm>
#include <cmath>

#include "src/speculative/tree_policy.h"
#include "src/util/error.h"

namespace redwood::spec {

namespace {

constexpr size_t kBlock = 256;

struct Entry {
  double v;
  int32_t node;
  int64_t seq;  // push order: equal values pop first-pushed first
};
// std::push_heap/pop_heap keep the "largest" in front.
bool heap_less(const Entry& a, const Entry& b) {
  return a.v < b.v || (a.v == b.v && a.seq > b.seq);
}

struct NodeState {
  bool init = false;
  double total = 0;           // sum of q (the distribution is normalised up to rounding)
  int64_t positive = 0;       // tokens with q > 0
  double removed = 0;         // normalised mass of the children drawn so far
  std::vector<double> block;  // sampling: block sums of q
  std::vector<int32_t> top;   // greedy: q's tokens in descending order (a prefix)
};

class DySpecPolicy : public TreePolicy {
 public:
  DySpecPolicy(int budget, int depth, double threshold, bool greedy, bool lookahead)
      : budget_(budget), levels_(depth), threshold_(threshold), greedy_(greedy), lookahead_(lookahead) {
    if (budget < 1) throw Error("dyspec: budget must be >= 1");
    if (depth < 1) throw Error("dyspec: depth must be >= 1");
    if (!(threshold >= 0 && threshold < 1)) throw Error("dyspec: threshold must be in [0, 1)");
  }
  void begin_step() override {
    pp_ = {1.0};
    ns_.clear();
    heap_.clear();
    seq_ = 0;
    started_ = false;
  }
  std::vector<int32_t> grow(DraftTree& t, std::span<const int32_t> expanded, Rng& rng) override {
    return threshold_ > 0 ? grow_threshold(t, expanded, rng) : grow_heap(t, rng);
  }
  bool needs_old_dists() const override { return threshold_ == 0; }
  int max_nodes() const override { return budget_; }
  int max_draft_rows() const override { return budget_; }
  int max_levels() const override { return levels_; }

 private:
  void push(std::vector<Entry>& h, double v, int32_t node) {
    h.push_back({v, node, seq_++});
    std::push_heap(h.begin(), h.end(), heap_less);
  }
  Entry pop(std::vector<Entry>& h) {
    std::pop_heap(h.begin(), h.end(), heap_less);
    const Entry e = h.back();
    h.pop_back();
    return e;
  }
  NodeState& state(const DraftTree& t, int32_t u) {
    if (ns_.size() < static_cast<size_t>(t.size())) ns_.resize(static_cast<size_t>(t.size()));
    NodeState& s = ns_[static_cast<size_t>(u)];
    if (!s.init) {
      const auto q = t.dist(u);
      s.init = true;
      double tot = 0;
      int64_t pos = 0;
      if (!greedy_) s.block.assign((q.size() + kBlock - 1) / kBlock, 0.0);
      for (size_t i = 0; i < q.size(); ++i) {
        const float x = q[i];
        if (!(x >= 0.0f) || !std::isfinite(x)) throw Error("draft distribution has a negative or non-finite entry");
        tot += x;
        pos += x > 0.0f;
        if (!greedy_) s.block[i / kBlock] += x;
      }
      if (!(tot > 0)) throw Error("draft distribution sums to zero");
      s.total = tot;
      s.positive = pos;
    }
    return s;
  }

  // The next sibling under u: a draw from u's residual (sampling) or the next
  // token in descending order (greedy); -1 when no positive-probability token
  // is left.
  int32_t next_child(const DraftTree& t, int32_t u, Rng& rng) {
    NodeState& s = state(t, u);
    const auto q = t.dist(u);
    const auto& kids = t.children[static_cast<size_t>(u)];
    const size_t k = kids.size();
    if (static_cast<int64_t>(k) >= s.positive) return -1;
    if (greedy_) {
      if (k >= s.top.size()) {
        const int want = static_cast<int>(std::min(q.size(), std::max<size_t>(8, 2 * s.top.size())));
        s.top = sample_children(Verifier::kGreedy, q, want, rng);  // deterministic: no draws
      }
      const int32_t y = s.top[k];
      return q[static_cast<size_t>(y)] > 0.0f ? y : -1;
    }
    auto taken = [&](int32_t x) {
      for (int32_t c : kids)
        if (t.token[static_cast<size_t>(c)] == x) return true;
      return false;
    };
    // x ~ q restricted to the tokens not drawn yet (successive sampling, the
    // law of sampling without replacement): rejection from the full q while
    // the drawn mass is small, else an exact scan of the residual.
    if (s.removed <= 0.75) {
      for (int tries = 0; tries < 32; ++tries) {
        const double target = rng.uniform() * s.total;
        double cum = 0;
        size_t b = 0;
        for (; b + 1 < s.block.size(); ++b) {
          if (target < cum + s.block[b]) break;
          cum += s.block[b];
        }
        int32_t x = -1;
        for (size_t i = b * kBlock; i < q.size(); ++i) {
          if (!(q[i] > 0.0f)) continue;
          cum += q[i];
          x = static_cast<int32_t>(i);
          if (target < cum) break;
        }
        if (x >= 0 && !taken(x)) return x;
      }
    }
    double rem = 0;
    std::vector<uint8_t>& mark = mark_;
    mark.assign(q.size(), 0);
    for (int32_t c : kids) mark[static_cast<size_t>(t.token[static_cast<size_t>(c)])] = 1;
    for (size_t i = 0; i < q.size(); ++i)
      if (!mark[i]) rem += q[i];
    const double target = rng.uniform() * rem;
    double cum = 0;
    int32_t x = -1;
    for (size_t i = 0; i < q.size(); ++i) {
      if (mark[i] || !(q[i] > 0.0f)) continue;
      cum += q[i];
      x = static_cast<int32_t>(i);
      if (target < cum) break;
    }
    return x;
  }

  // Draws u's next child; returns it (or -1) and updates values.
  int32_t add_child(DraftTree& t, int32_t u, Rng& rng) {
    const int32_t y = next_child(t, u, rng);
    if (y < 0) return -1;
    NodeState& s = ns_[static_cast<size_t>(u)];
    const double d = std::min(1.0, static_cast<double>(t.dist(u)[static_cast<size_t>(y)]) / s.total);
    const int32_t c = t.add(u, y);
    pp_.push_back(pp_[static_cast<size_t>(u)] * d);
    s.removed += d;
    return c;
  }
  // Value of u's next sibling sample (0 when none is left).
  double sibling_value(const DraftTree& t, int32_t u) const {
    const NodeState& s = ns_[static_cast<size_t>(u)];
    if (static_cast<int64_t>(t.children[static_cast<size_t>(u)].size()) >= s.positive) return 0;
    return pp_[static_cast<size_t>(u)] * std::max(0.0, 1.0 - s.removed);
  }
  bool can_have_children(const DraftTree& t, int32_t c) const { return t.depth[static_cast<size_t>(c)] + 1 < levels_; }

  std::vector<int32_t> grow_heap(DraftTree& t, Rng& rng) {
    if (!started_) {
      started_ = true;
      if (budget_ > 1 && levels_ > 1) push(heap_, 1.0, 0);
    }
    while (t.size() < budget_ && !heap_.empty()) {
      if (!t.expanded(heap_.front().node)) break;
      const int32_t u = pop(heap_).node;
      const int32_t c = add_child(t, u, rng);
      if (c < 0) continue;
      if (const double v1 = sibling_value(t, u); v1 > 0) push(heap_, v1, u);
      if (const double v0 = pp_[static_cast<size_t>(c)]; v0 > 0 && can_have_children(t, c)) push(heap_, v0, c);
    }
    if (t.size() >= budget_ || heap_.empty()) return {};
    if (!lookahead_) return {heap_.front().node};
    // The entries that can still be popped: the r largest. Their unexpanded
    // nodes (the top one among them) go through the draft together.
    const size_t r = std::min(heap_.size(), static_cast<size_t>(budget_ - t.size()));
    std::vector<Entry> h = heap_;
    std::partial_sort(h.begin(), h.begin() + static_cast<std::ptrdiff_t>(r), h.end(),
                      [](const Entry& a, const Entry& b) { return heap_less(b, a); });
    std::vector<int32_t> next;
    for (size_t i = 0; i < r; ++i)
      if (!t.expanded(h[i].node)) next.push_back(h[i].node);
    return next;
  }

  std::vector<int32_t> grow_threshold(DraftTree& t, std::span<const int32_t> expanded, Rng& rng) {
    if (!started_) {
      started_ = true;
      if (levels_ <= 1) return {};
    }
    std::vector<Entry> layer;
    for (int32_t u : expanded)
      if (pp_[static_cast<size_t>(u)] > threshold_) push(layer, pp_[static_cast<size_t>(u)], u);
    std::vector<int32_t> next;
    while (!layer.empty() && t.size() < budget_) {
      const Entry e = pop(layer);
      if (!(e.v > threshold_)) break;  // the largest pending value: all others are <= t too
      const int32_t c = add_child(t, e.node, rng);
      if (c < 0) continue;
      if (const double v1 = sibling_value(t, e.node); v1 > threshold_) push(layer, v1, e.node);
      if (pp_[static_cast<size_t>(c)] > threshold_ && can_have_children(t, c)) next.push_back(c);
    }
    if (t.size() >= budget_) return {};
    return next;
  }

  int budget_, levels_;
  double threshold_;
  bool greedy_, lookahead_;
  std::vector<double> pp_;  // path probability per node (root 1)
  std::vector<NodeState> ns_;
  std::vector<Entry> heap_;
  std::vector<uint8_t> mark_;
  int64_t seq_ = 0;
  bool started_ = false;
};

}  // namespace

std::unique_ptr<TreePolicy> make_dyspec_policy(int budget, int depth, double threshold, bool greedy, bool lookahead) {
  return std::make_unique<DySpecPolicy>(budget, depth, threshold, greedy, lookahead);
}

}  // namespace redwood::spec
