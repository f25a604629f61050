// Timing passes for the tree optimizer (profile-hardware) and --tree auto,
// which takes the acceptance and hardware profiles from a cache (measuring
// them when missing) and picks the tree.
#pragma once
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "src/planner/measured.h"
#include "src/planner/optimizer.h"
#include "src/runtime/model.h"
#include "src/speculative/acceptance_profile.h"
#include "src/speculative/speculate.h"

namespace redwood::runtime {

struct HardwareRun {
  std::vector<int> sizes, widths;  // increasing
  int repeats = 3, warmup = 1, prefix = 64;
  bool quiet = false;
};
// Fills prof's curves (and layer counts from m's plan); the rest is the caller's.
void measure_hardware(LoadedModel& m, LoadedModel& d, const HardwareRun& r, planner::MeasuredProfile& prof);

struct AutoTreeResult {
  std::optional<spec::SpecConfig> config;  // nullopt: plain decoding is predicted fastest
  planner::TreeChoice best, autoregressive;
  // "autoregressive", "sequoia budget N depth D" or planner::describe_tree()
  std::string choice = "autoregressive";
  std::vector<double> acceptance;  // a Sequoia choice: its DP's acceptance vector (else empty)
  planner::CostCurve target_pass;  // the hardware profile's t(n) the choice was made with
  planner::CostCurve draft_level;  // and its c(w)
};

// The draft's measured acceptance of its first child for verifier v (a bare
// {"acceptance": [...]} profile: for the default verifier of the sampling mode).
std::optional<double> rank1_acceptance(const spec::AcceptanceProfile& acc, spec::Verifier v, bool greedy);

// The choice from the profiles alone: one Sequoia optimisation per measured
// verifier scheme of the run's sampling mode, the dynamic candidates (already
// measured; may be empty) by their samples, against plain decoding; the
// fastest predicted wins. Says what it chose on `log` (if not null).
// `acc_name` names the acceptance profile in errors (measured at another
// temperature). skipped_topn: OPT-Tree/SpecExec were left out (said on log).
AutoTreeResult choose_tree(const spec::AcceptanceProfile& acc, const planner::MeasuredProfile& hw,
                           const std::vector<planner::DynamicCandidate>& dyn, const SamplingParams& sampling,
                           int max_budget, int max_depth, std::FILE* log, const std::string& acc_name,
                           bool skipped_topn = false);

// The largest pass --tree auto runs through the target at load, other than
// t(n)'s own up to its cap: the hardware profile's prefix and, when the
// acceptance profile is measured, one whole built-in passage at a time
// (tokenized with m's tokenizer).
int auto_tree_load_pass_tokens(const LoadedModel& m);

// --tree auto. The profiles are cached in $REDWOOD_CACHE_DIR (default
// $XDG_CACHE_HOME/redwood or ~/.cache/redwood), keyed by both models (path,
// size, modification time), the sampling parameters (acceptance) or the memory
// configuration and largest pass timed (hardware: the tree cap, or shared.max_pass), the sampling parameters, caps and
// the profile's rank-1 acceptance (dynamic trees: grown with the draft alone
// at 16 positions of built-in text; see planner::calibrated_tokens). Searches
// Sequoia trees (n, d) per measured verifier scheme and the dynamic policies'
// parameters (planner::dynamic_grid) with their default verifier for the
// sampling mode. acceptance_file / hardware_file: use these profiles instead
// of the cache (empty: the cache). shared: the choice is for shared passes
// (see SharedPasses).
struct SharedPasses {
  // The largest pass the node budget rule may fill (BatchDraft::pass_seconds):
  // t(n) is timed up to it too, not only up to the tree cap (0: the tree cap).
  int max_pass = 0;
  // Sequoia trees only: shared passes take no dynamic tree, so OPT-Tree and
  // SpecExec are not candidates (measured or chosen).
  bool static_only = false;
};
AutoTreeResult choose_tree_auto(LoadedModel& m, LoadedModel& d, const RunOptions& run, const SamplingParams& sampling,
                                int max_budget, int max_depth, std::FILE* log, const std::string& acceptance_file = "",
                                const std::string& hardware_file = "", const SharedPasses& shared = {});

}  // namespace redwood::runtime
