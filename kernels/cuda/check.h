// CUDA runtime error checks, shared by the backend (kernels/cuda) and the
// offload engine's slot link (offload/cuda_link.cpp): a failed call throws
// redwood::Error naming the call (and where), after clearing the thread's
// last error so that the next, unrelated check does not report it again.
// Host-only C++: the CUDA runtime header alone.
#pragma once
#include <cuda_runtime.h>

namespace redwood::cuda {

// Throws "CUDA: <call> failed: <what> (<file>:<line>)"; file may be null.
[[noreturn]] void fail(const char* what, const char* call, const char* file, int line);
inline void check(cudaError_t e, const char* call, const char* file = nullptr, int line = 0) {
  if (e != cudaSuccess) fail(cudaGetErrorString(e), call, file, line);
}

}  // namespace redwood::cuda

#define RD_CUDA_CHECK(call) ::redwood::cuda::check((call), #call, __FILE__, __LINE__)
