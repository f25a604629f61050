// CUDA device discovery and link measurement (the backend itself is behind
// make_cuda_backend in kernels/backend.h). Compiled whenever REDWOOD_CUDA finds
// nvcc + cuBLAS.
#pragma once
#include <string>

namespace redwood::cuda {
// Number of usable CUDA devices (0 when no driver/device; never throws).
int device_count();
// One line per device: name, compute capability, memory. Throws redwood::Error
// naming the failing CUDA call on a driver error.
std::string describe_devices();
// Host -> device copy bandwidth (bytes/s) of the current device from pinned
// memory: `bytes` copied `repeat` times with cudaMemcpyAsync, best of, timed
// with events. The PCIe floor of a streamed pass is its bytes over this.
double host_to_device_bandwidth(size_t bytes, int repeat = 5);
}  // namespace redwood::cuda
