// Hardware profiles for the predicted cost model (configs/hardware/*.toml):
// the few numbers that decide how long a layer-streaming pass takes. Units:
// bandwidths in GB/s (1e9 bytes/s), compute in TFLOP/s (1e12 FLOP/s), memory
// sizes as strings ("48GB", "44GiB"). Peak numbers come from datasheets; the
// efficiency factors say which fraction of them the kernels actually reach.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "offload/placement.h"

namespace redwood::planner {

struct HardwareProfile {
  std::string name;
  std::string source;  // where the numbers come from (URLs, measurements)
  std::string file;    // the profile's path (for messages), or "<text>"
  // "gpu": weights are computed on in device memory; non-resident layers cross the
  // host link. "cpu": the device IS host RAM (backend cpu); there is no link.
  offload::BackendKind backend = offload::BackendKind::kCuda;
  uint64_t device_memory = 0;       // total device memory (RAM for "cpu")
  uint64_t device_reserved = 0;     // not available to the planner (CUDA context, OS, ...)
  uint64_t host_memory = 0;         // host memory for staged layers (0 = none: they stream from storage)
  double device_bandwidth = 0;      // GB/s, peak device memory bandwidth
  double link_bandwidth = 0;        // GB/s, achievable host -> device copy (pinned); "cpu": memcpy
  double storage_bandwidth = 0;     // GB/s, sequential reads from storage (O_DIRECT)
  double tflops = 0;                // dense fp16/bf16 TFLOP/s peak (tensor cores / FMA)
  double bandwidth_efficiency = 1;  // fraction of device_bandwidth a GEMV reaches
  double flops_efficiency = 1;      // fraction of tflops a large GEMM reaches
  double layer_overhead_us = 0;     // fixed cost per layer and pass (kernel launches, sync)
  // GB/s of decoded weights a packed model's decode stage delivers (redwood
  // pack; on the CPU one decode thread beside the compute threads); 0: not
  // given, and a plan that streams packed layers is refused.
  double decode_bandwidth = 0;

  // Device budget for the planner: device_memory - device_reserved.
  uint64_t device_budget() const { return device_memory - device_reserved; }
  // Bytes/s and FLOP/s actually expected.
  double eff_device_bps() const { return device_bandwidth * 1e9 * bandwidth_efficiency; }
  double eff_flops() const { return tflops * 1e12 * flops_efficiency; }
};

// Reads and validates a profile; errors are one line, "file:line: key: message"
// (or "file: missing required key 'x'"). Throws redwood::Error.
HardwareProfile load_hardware(const std::string& path);
HardwareProfile parse_hardware(std::string_view toml_text, const std::string& name);

}  // namespace redwood::planner
