// Measuring what the tree optimizer needs, on models already loaded in their
// run configuration: the draft's acceptance (profile-acceptance) and the pass
// costs t(n), c(w) (profile-hardware); and `--tree auto`, which takes both
// from a cache (measuring them when missing) and picks the tree.
#pragma once
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "src/cli/common.h"
#include "src/planner/measured.h"
#include "src/planner/optimizer.h"
#include "src/spec/acceptance_profile.h"
#include "src/spec/speculate.h"

namespace redwood::cli {

struct AcceptanceRun {
  SamplingParams sampling;
  int width = 8, count = 256, repeats = 4;
  int max_tokens = 64;  // continuation per prompt; 0: positions over the prompt text itself
  int chain_depth = 6;  // 0: no chain measurement
  bool quiet = false;
};
// Fills prof's vectors, positions, prompt_count, chain and acceptance (the
// identities and sampling fields are the caller's).
void measure_acceptance(LoadedModel& m, LoadedModel& d, const std::vector<std::vector<int32_t>>& prompts,
                        const AcceptanceRun& r, spec::AcceptanceProfile& prof);

struct HardwareRun {
  std::vector<int> sizes, widths;  // increasing
  int repeats = 3, warmup = 1, prefix = 64;
  bool quiet = false;
};
// Fills prof's curves (and layer counts from m's plan); the rest is the caller's.
void measure_hardware(LoadedModel& m, LoadedModel& d, const HardwareRun& r, planner::MeasuredProfile& prof);

// --tree auto. The profiles are cached in $REDWOOD_CACHE_DIR (default
// $XDG_CACHE_HOME/redwood or ~/.cache/redwood), keyed by both models (path,
// size, modification time), the sampling parameters (acceptance) or the memory
// configuration and tree cap (hardware), the sampling parameters, caps and
// the profile's rank-1 acceptance (dynamic trees: grown with the draft alone
// at 16 positions of built-in text; see planner::calibrated_tokens). Searches
// Sequoia trees (n, d) per measured verifier scheme and the dynamic policies'
// parameters (planner::dynamic_grid) with their default verifier for the
// sampling mode. Returns the chosen tree config, or nullopt when plain decoding
// is predicted fastest; says what it chose (and what it measured) on `log`.
struct AutoTreeResult {
  std::optional<spec::SpecConfig> config;
  planner::TreeChoice best, autoregressive;
  // "autoregressive", "sequoia budget N depth D" or planner::describe_tree()
  std::string choice = "autoregressive";
};
// acceptance_file / hardware_file: use these profiles instead of the cache
// (empty: the cache).
AutoTreeResult choose_tree_auto(LoadedModel& m, LoadedModel& d, const RunOptions& run, const SamplingParams& sampling,
                                int max_budget, int max_depth, std::FILE* log, const std::string& acceptance_file = "",
                                const std::string& hardware_file = "");

}  // namespace redwood::cli
