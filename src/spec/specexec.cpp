// SpecExec's tree: a parallel best-first search by cumulative draft
// log-probability lp(node) = sum of log q along its path (root 0). Each
// expanded node gets its top-`width` children (deterministic); the kept set K
// is the global top-n nodes by lp (n = budget - 1), ties to the lower id
// (parent-first: lp never grows from parent to child, so K stays connected).
// Each round runs ONE draft pass over every node of K that could still improve
// K: unexpanded, below the depth limit, and (K full) with lp above the weakest
// kept node's — its children's lp is at most its own. No such node: early stop.
// A node left out once is left out for good (K's weakest only improves), so
// every node is expanded in the round after it appeared or never: at most
// depth - 2 passes of at most n nodes, and K is the top-n of the whole
// width-ary tree within the depth (the tests compare with brute force).
#include <algorithm>
#include <cmath>

#include "src/spec/tree_policy.h"
#include "src/util/error.h"

namespace redwood::spec {

namespace {

class SpecExecPolicy : public TreePolicy {
 public:
  SpecExecPolicy(int budget, int depth, int width) : n_(budget - 1), levels_(depth), width_(width) {
    if (budget < 1) throw Error("specexec: budget must be >= 1");
    if (depth < 1) throw Error("specexec: depth must be >= 1");
    if (width < 1) throw Error("specexec: width must be >= 1");
  }
  void begin_step() override { lp_ = {0.0}; }
  std::vector<int32_t> grow(DraftTree& t, std::span<const int32_t> expanded, Rng& rng) override {
    if (n_ < 1 || levels_ < 2) return {};
    for (int32_t u : expanded) {
      const auto q = t.dist(u);
      double tot = 0;
      for (const float x : q) {
        if (!(x >= 0.0f) || !std::isfinite(x)) throw Error("draft distribution has a negative or non-finite entry");
        tot += x;
      }
      if (!(tot > 0)) throw Error("draft distribution sums to zero");
      const int k = static_cast<int>(std::min<size_t>(static_cast<size_t>(width_), q.size()));
      for (const int32_t y : sample_children(Verifier::kGreedy, q, k, rng)) {  // deterministic
        const double d = std::min(1.0, static_cast<double>(q[static_cast<size_t>(y)]) / tot);
        if (!(d > 0)) break;
        t.add(u, y);
        lp_.push_back(lp_[static_cast<size_t>(u)] + std::log(d));
      }
    }
    const auto keep = detail::best_nodes(lp_, n_);
    const bool full = static_cast<int>(keep.size()) == n_;
    double weakest = 0;
    if (full) {
      int32_t w = keep[0];
      for (int32_t b : keep)
        if (lp_[static_cast<size_t>(b)] < lp_[static_cast<size_t>(w)] ||
            (lp_[static_cast<size_t>(b)] == lp_[static_cast<size_t>(w)] && b > w))
          w = b;
      weakest = lp_[static_cast<size_t>(w)];
    }
    std::vector<int32_t> next;
    for (int32_t c : keep)
      if (!t.expanded(c) && t.depth[static_cast<size_t>(c)] + 1 < levels_ &&
          (!full || lp_[static_cast<size_t>(c)] > weakest))
        next.push_back(c);
    return next;
  }
  std::vector<int32_t> final_nodes(const DraftTree& t) const override {
    if (static_cast<int>(lp_.size()) != t.size()) throw Error("specexec: tree and policy disagree");
    std::vector<int32_t> keep = {0};
    for (int32_t b : detail::best_nodes(lp_, n_)) keep.push_back(b);
    return keep;
  }
  bool needs_old_dists() const override { return false; }
  int max_nodes() const override { return n_ + 1; }
  int max_draft_rows() const override { return n_ * std::max(0, levels_ - 2); }
  int max_levels() const override { return levels_; }

 private:
  int n_, levels_, width_;
  std::vector<double> lp_;  // cumulative log-probability per node
};

}  // namespace

std::unique_ptr<TreePolicy> make_specexec_policy(int budget, int depth, int width) {
  return std::make_unique<SpecExecPolicy>(budget, depth, width);
}

}  // namespace redwood::spec
