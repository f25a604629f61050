#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/device.h"
#include "src/util/error.h"

namespace redwood::cuda {

namespace {
void check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) throw Error(std::string(call) + " failed: " + cudaGetErrorString(e));
}
#define RD_CUDA(call) check((call), #call)
}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

std::string describe_devices() {
  std::string out;
  const int n = device_count();
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    RD_CUDA(cudaGetDeviceProperties(&p, i));
    out += std::to_string(i) + ": " + p.name + ", sm_" + std::to_string(p.major) + std::to_string(p.minor) + ", " +
           std::to_string(p.totalGlobalMem >> 20) + " MiB\n";
  }
  return out;
}

}  // namespace redwood::cuda
