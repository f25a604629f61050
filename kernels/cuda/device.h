// CUDA device discovery. The CUDA backend proper (kernels, streaming) is issue 8;
// this is compiled whenever REDWOOD_CUDA finds nvcc + cuBLAS so CI builds the path.
#pragma once
#include <string>

namespace redwood::cuda {
// Number of usable CUDA devices (0 when no driver/device; never throws).
int device_count();
// One line per device: name, compute capability, memory. Throws redwood::Error
// naming the failing CUDA call on a driver error.
std::string describe_devices();
}  // namespace redwood::cuda
