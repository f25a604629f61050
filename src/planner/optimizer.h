// The hardware-aware tree optimizer (Sequoia §3.3): choose the tree budget n
// (nodes per target pass, root included) and depth d (levels, root included)
// maximising tokens per second
//
//     G(n, d) / (t(n) + (d - 1) * c(w(n, d)))
//
// where G(n, d) is the expected tokens per step of the best Sequoia tree of at
// most n nodes and d levels (sequoia_value_table; the bonus token included),
// t(n) the target pass time over n tokens, and the draft spends one pass per
// expanded level (d - 1 of them: the deepest level is not expanded; its first
// pass also covers the root) of c(w) seconds each, w = ceil((n - 1) / (d - 1))
// the tree's average level width (exact for a constant c). d = 1 is plain
// autoregressive decoding: G = 1, no draft.
#pragma once
#include <functional>
#include <vector>

#include "src/spec/sequoia_dp.h"

namespace redwood::planner {

struct TreeChoice {
  int budget = 1;       // n
  int depth = 1;        // d (levels, root included)
  double tokens = 1;    // G(n, d)
  double target_s = 0;  // t(n)
  double draft_s = 0;   // (d - 1) * c(w)
  double seconds_per_token() const { return (target_s + draft_s) / tokens; }
  double tokens_per_second() const { return tokens / (target_s + draft_s); }
};

struct OptimizerInput {
  std::vector<double> acceptance;
  int max_budget = 1024;                          // n in [1, max_budget]
  int max_depth = 32;                             // d in [1, max_depth]
  std::function<double(int n)> target_s;          // t(n), non-decreasing
  std::function<double(int width)> draft_step_s;  // c(w)
};

// The argmax over the grid; ties go to the smaller n, then the smaller d. Only
// (n, d) whose best tree needs all n nodes and d levels are candidates: G(n, d)
// must exceed both G(n - 1, d) and G(n, d - 1) (else the same tree is a smaller
// candidate, and its draft cost would be overstated). (1, 1) always is.
// t is evaluated once per n and c once per distinct width. Throws redwood::Error
// on invalid input (acceptance, bounds).
TreeChoice optimize_tree(const OptimizerInput& in);

// The candidate rule above (1e-12 tolerance); G(0, d) = G(n, 0) = 0.
bool adds_value(double g, double g_smaller_n, double g_shallower);

// The objective for one (n, d) given G: shared by the optimizer and its tests.
TreeChoice evaluate_tree(int n, int d, double g, double t_n, const std::function<double(int)>& draft_step_s);

}  // namespace redwood::planner
