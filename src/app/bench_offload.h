// `redwood bench offload`'s measurement: seconds per streamed forward pass
// for several batch sizes under a device budget, against the floor
//   max(bytes from storage / storage bandwidth, the same pass all-resident),
// with the storage bandwidth measured in the same run (sequential O_DIRECT
// reads of the same file ranges) and the peak RSS of the streamed phase.
#pragma once
#include <nlohmann/json.hpp>
#include <vector>

#include "src/runtime/model.h"

namespace redwood::app {

struct OffloadBench {
  runtime::RunOptions run;  // device_mem required; trace: a Chrome trace of the streamed passes
  std::vector<int> sizes;  // tree nodes per timed pass
  int repeat = 3, prefix = 32;
  bool skip_resident = false;  // no all-resident passes (a model bigger than RAM)
};

// The plan, bandwidths, peak RSS and one row per size (progress on stderr).
nlohmann::json bench_offload(const OffloadBench& o);

}  // namespace redwood::app
