// Where --tree auto keeps the profiles it measures: one JSON file per profile
// in the cache directory (src/util/cache_dir.h), named by a hash of what
// decides that profile. The files' formats are the profiles' own
// (spec::profile_json, measured_json, dynamic_json); this header only names
// them, so that a change of model, sampling or memory plan finds no stale file.
#pragma once
#include <string>
#include <vector>

#include "offload/placement.h"
#include "src/engine/sampler.h"

namespace redwood::planner {

// A cheap identity of model files (no hashing of weights): absolute path, size
// and modification time of each, and `extra`; 16 hex digits. redwood::Error
// when a file cannot be stat'ed.
std::string profile_key(const std::vector<std::string>& files, const std::string& extra);

// The sampling parameters that decide acceptance ("T=0.6;top_p=1;top_k=0").
std::string sampling_key(const SamplingParams& sp);

// acceptance-KEY.json: the target and draft files and the sampling parameters.
std::string acceptance_cache_path(const std::string& dir, const std::vector<std::string>& files,
                                  const SamplingParams& sp);

// What decides pass times besides the files: the backend, the budgets as
// given, the ring, threads, the largest pass timed, the plan they produced (which
// layers are resident, host-staged or streamed; ring slots × slot bytes; null:
// all resident), and the KV cache type the passes read (--kv-type's name).
struct HardwareKey {
  std::string backend, device_mem, host_mem;
  int ring = 0, threads = 0;
  int max_pass = 0;  // the largest pass timed: the tree cap, or a shared pass's cap (SharedPasses) when larger
  const offload::MemoryPlan* plan = nullptr;
  std::string kv_type = "f32";
};
// hardware-KEY.json.
std::string hardware_cache_path(const std::string& dir, const std::vector<std::string>& files, const HardwareKey& k);

// dynamic-KEY.json: the files, sampling parameters (not the seed: the profile
// describes the pair at a temperature, measured with fixed seeds), the tree
// caps, the number of text positions, and `rank1` (the acceptance profile's
// rank-1 acceptances the candidates are calibrated with, as text).
std::string dynamic_cache_path(const std::string& dir, const std::vector<std::string>& files, const SamplingParams& sp,
                               int max_budget, int max_depth, int positions, const std::string& rank1);

}  // namespace redwood::planner
