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

#include "src/speculative/tree_policy.h"
#include "src/util/error.h"

namespace redwood::spec {

namespace {

// value_ = cumulative log-probability per node.
class SpecExecPolicy : public detail::TopNPolicy {
 public:
  SpecExecPolicy(int budget, int depth, int width) : TopNPolicy("specexec", budget, depth), width_(width) {
    if (width < 1) throw Error("specexec: width must be >= 1");
  }
  void begin_step() override { value_ = {0.0}; }
  std::vector<int32_t> grow(DraftTree& t, std::span<const int32_t> expanded, Rng& rng) override {
    if (n_ < 1 || levels_ < 2) return {};
    for (int32_t u : expanded) {
      for (const detail::TopChild& c : detail::top_children(t.dist(u), width_, rng)) {  // deterministic
        t.add(u, c.token);
        value_.push_back(value_[static_cast<size_t>(u)] + std::log(c.prob));
      }
    }
    const auto keep = detail::best_nodes(value_, n_);
    const bool full = static_cast<int>(keep.size()) == n_;
    double weakest = 0;
    if (full) {
      int32_t w = keep[0];
      for (int32_t b : keep)
        if (value_[static_cast<size_t>(b)] < value_[static_cast<size_t>(w)] ||
            (value_[static_cast<size_t>(b)] == value_[static_cast<size_t>(w)] && b > w))
          w = b;
      weakest = value_[static_cast<size_t>(w)];
    }
    std::vector<int32_t> next;
    for (int32_t c : keep)
      if (!t.expanded(c) && t.depth[static_cast<size_t>(c)] + 1 < levels_ &&
          (!full || value_[static_cast<size_t>(c)] > weakest))
        next.push_back(c);
    return next;
  }
  // final_nodes and the bounds: TopNPolicy.

 private:
  int width_;
};

}  // namespace

std::unique_ptr<TreePolicy> make_specexec_policy(int budget, int depth, int width) {
  return std::make_unique<SpecExecPolicy>(budget, depth, width);
}

}  // namespace redwood::spec
