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
//
// Dynamic trees (DySpec, OPT-Tree, SpecExec) have no positional G(n, d): their
// shape follows the draft's confidence on the text. They are scored from
// DynamicTreeSamples, trees grown with the real draft at real text positions
// (src/planner/dynamic_profile.h), each with its verified node count, its draft
// passes and a calibrated expected-tokens estimate (calibrated_tokens below):
//
//     tokens/s = mean E[tokens] / (mean t(n_i) + mean (c(1) + sum_l c(w_il)))
//
// (a ratio of means: the long-run rate over steps), c(1) for the pass over
// the root, c(w) per further draft pass of w rows.
#pragma once
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "src/speculative/sequoia_dp.h"
#include "src/speculative/tree_policy.h"

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

// ---- dynamic trees ------------------------------------------------------------------

// Calibration of a dynamic tree's expected accepted tokens (an assumption,
// stated here and in docs/ARCHITECTURE.md): a drafted node is accepted, given
// its parent was, with probability a(v) = min(alpha * q(v), 1 - sum of the
// estimates of its earlier siblings), q(v) its draft probability under its
// parent's distribution (the value DySpec and OPT-Tree rank nodes by). alpha
// maps draft probability to measured acceptance: alpha = a_1 / E[q(rank-1
// child)], a_1 the profile's measured acceptance of the first child in the
// verifier's own scheme and the denominator the draft's mean probability of
// that child over the same kind of text (Sequoia's sampled children:
// E_{y~q} q(y) = sum q^2; greedy and target-sample, whose first child is the
// draft's argmax: max q). So the estimate matches the measurement at rank 1, and
// deeper and later nodes are scaled by the draft's own confidence; expected
// tokens = 1 (the bonus) + sum over drafted nodes of the product of a() along
// the path (Sequoia's F(T) with per-node instead of positional acceptance).
// Throws redwood::Error when a1 is outside [0, 1] or mean_rank1_q is not in (0, 1].
double calibration_scale(double a1, double mean_rank1_q);
// parent[0] = -1 (the root), parent[i] < i; children in sampling order = id
// order; q[i] in [0, 1] (q[0] ignored). Throws redwood::Error on a bad tree.
double calibrated_tokens(std::span<const int32_t> parent, std::span<const double> q, double alpha);

// One tree grown by a dynamic policy with the real draft at one text position.
struct DynamicTreeSample {
  int nodes = 1;                 // verified nodes, root included
  std::vector<int> pass_widths;  // rows of each draft pass after the root's
  double tokens = 1;             // calibrated expected tokens per step (bonus included)
};

// A dynamic policy with its parameters and verifier, and its measured samples.
struct DynamicCandidate {
  spec::TreeParams params;
  spec::Verifier verifier = spec::Verifier::kGreedy;
  std::vector<DynamicTreeSample> samples;
};

// The objective above (TreeChoice: budget/depth = the policy's caps, tokens =
// mean E, target_s = mean t(n_i), draft_s = mean draft seconds per step).
// Throws redwood::Error when there are no samples.
TreeChoice evaluate_dynamic(const std::vector<DynamicTreeSample>& samples, const std::function<double(int)>& target_s,
                            const std::function<double(int)>& draft_step_s);
// The index of the candidate with the most tokens/s (ties: the earlier), -1 when
// none has samples; *choice (if given) receives its evaluation.
int best_dynamic(const std::vector<DynamicCandidate>& cands, const std::function<double(int)>& target_s,
                 const std::function<double(int)>& draft_step_s, TreeChoice* choice = nullptr);

// The bounded search grid for --tree auto within the caps (budget: nodes per
// target pass, root included; depth: levels): DySpec heap budgets (4, 6, 8,
// 12, 16, 24, ... : powers of 2 and midpoints, and the cap), DySpec thresholds
// {0.5, 0.3, 0.2, 0.1, 0.05, 0.02} (node cap = the budget cap), OPT-Tree
// delta {0.1, 0.3, 1} x budgets {8, 16, 32, ...}, SpecExec width {2, 4, 8} x the
// same budgets. The verifier of each is the tree's default for the sampling
// mode (make_spec_config: greedy at temperature 0, else sequoia for DySpec and
// target-sample for OPT-Tree/SpecExec), so every pair passes check_pairing.
std::vector<DynamicCandidate> dynamic_grid(int max_budget, int max_depth, bool greedy);

// "dyspec budget 16 depth 8", "dyspec threshold 0.1 budget 32 depth 8",
// "opt-tree budget 16 depth 8 delta 0.3", "specexec budget 16 depth 8 width 4".
std::string describe_tree(const spec::TreeParams& p);

}  // namespace redwood::planner
