#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device.h"

namespace redwood::cuda {

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
    RD_CUDA_CHECK(cudaGetDeviceProperties(&p, i));
    out += std::to_string(i) + ": " + p.name + ", sm_" + std::to_string(p.major) + std::to_string(p.minor) + ", " +
           std::to_string(p.totalGlobalMem >> 20) + " MiB\n";
  }
  return out;
}

double host_to_device_bandwidth(size_t bytes, int repeat) {
  void* host = nullptr;
  void* dev = nullptr;
  cudaStream_t st = nullptr;
  cudaEvent_t a = nullptr, b = nullptr;
  double best = 0;
  try {
    RD_CUDA_CHECK(cudaHostAlloc(&host, bytes, cudaHostAllocDefault));
    RD_CUDA_CHECK(cudaMalloc(&dev, bytes));
    RD_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    RD_CUDA_CHECK(cudaEventCreate(&a));
    RD_CUDA_CHECK(cudaEventCreate(&b));
    for (int r = 0; r <= repeat; ++r) {  // the first copy warms up
      RD_CUDA_CHECK(cudaEventRecord(a, st));
      RD_CUDA_CHECK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, st));
      RD_CUDA_CHECK(cudaEventRecord(b, st));
      RD_CUDA_CHECK(cudaEventSynchronize(b));
      float ms = 0;
      RD_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
      if (r > 0 && ms > 0) best = std::max(best, static_cast<double>(bytes) / (ms * 1e-3));
    }
  } catch (...) {
    if (a) cudaEventDestroy(a);
    if (b) cudaEventDestroy(b);
    if (st) cudaStreamDestroy(st);
    if (dev) cudaFree(dev);
    if (host) cudaFreeHost(host);
    throw;
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaStreamDestroy(st);
  cudaFree(dev);
  cudaFreeHost(host);
  return best;
}

}  // namespace redwood::cuda
