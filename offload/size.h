// Memory sizes on the command line and in configs: "2GiB", "512MiB", "1.5GB",
// "4096" (bytes). Binary (KiB/MiB/GiB/TiB, also K/M/G/T) and decimal (kB/MB/GB/TB)
// units; anything else is a clear error.
#pragma once
#include <cstdint>
#include <string>

namespace redwood::offload {

// Throws redwood::Error("invalid size 'X' for WHAT: ...") on malformed input.
uint64_t parse_size(const std::string& s, const char* what = "size");

// "1.50 GiB", "512.0 MiB", "980 B".
std::string format_size(uint64_t bytes);

}  // namespace redwood::offload
