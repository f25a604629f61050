// Memory sizes on the command line and in configs: "2GiB", "512MiB", "1.5GB",
// "4096" (bytes). Binary (KiB/MiB/GiB/TiB, also K/M/G/T) and decimal (kB/MB/GB/TB)
// units; anything else is a clear error. A device budget may add "+draft".
#pragma once
#include <cstdint>
#include <string>

namespace redwood {

// Throws redwood::Error("invalid size 'X' for WHAT: ...") on malformed input.
uint64_t parse_size(const std::string& s, const char* what = "size");

// "1.50 GiB", "512.0 MiB", "980 B".
std::string format_size(uint64_t bytes);

// A device budget as written on the command line or in a config: "SIZE" or
// "SIZE+draft" (the draft's costs come on top of SIZE; offload::Budgets says
// what that means). Throws redwood::Error, also for 0 bytes (no budget at all
// is written by leaving it out).
struct DeviceBudget {
  uint64_t bytes = 0;
  bool draft_on_top = false;
};
DeviceBudget parse_device_budget(const std::string& s, const char* what = "--device-mem");

}  // namespace redwood
