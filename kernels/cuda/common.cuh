// Internal to the CUDA backend: error checking and the kernels' entry points
// (host functions that launch on a stream). Every CUDA/cuBLAS call is checked
// and a failure throws redwood::Error naming the call, file and line.
#pragma once
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/workspace.h"

namespace redwood::cuda {

const char* cublas_status_name(cublasStatus_t s);
inline void check(cublasStatus_t s, const char* call, const char* file, int line) {
  if (s != CUBLAS_STATUS_SUCCESS) fail(cublas_status_name(s), call, file, line);
}
// After a kernel launch: launch-configuration errors (not asynchronous faults).
#define RD_CUDA_LAUNCHED(name) ::redwood::cuda::check(cudaGetLastError(), name, __FILE__, __LINE__)

inline unsigned grid_for(size_t n, unsigned threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

// Grow-only device scratch (outgrown buffers are kept until free(): recorded
// passes may point at them). Geometric: each growth at least doubles, so the
// buffers held stay under 4x the largest request however requests vary
// (the activations' scratch, whose sizes follow n); otherwise exactly the
// request (the weights' scratch, whose few sizes do not depend on n).
struct Scratch {
  void* p = nullptr;
  size_t bytes = 0;
  bool geometric = false;
  std::vector<void*> retired;
  void* get(size_t n, cudaStream_t st);
  void free();
};

// ---- matmul.cu ----
struct MatmulContext {
  cublasHandle_t blas = nullptr;
  cudaStream_t stream = nullptr;
  Scratch weights, acts;
  int gemv_max_n = kGemvMaxN;  // n <= this: dequantizing GEMV kernel; above: cuBLAS on tensor cores
  // cuBLAS in fp32 throughout (weights dequantized to fp32, no tensor cores):
  // tree passes then round like the fp32 GEMV, which keeps greedy decoding
  // token-identical between plain and speculative runs up to summation order.
  bool exact = false;
};
void matmul(MatmulContext& c, const WeightView& w, const float* x, int n, float* y);
// The GEMV kernel alone (any n >= 1, for tests and the n <= gemv_max_n path).
void gemv(cudaStream_t st, const WeightView& w, const float* x, int n, float* y);
// Dequantizes rows [r0, r0 + count) of w into half (bf16 for BF16 weights) at dst.
void dequant_rows_half(cudaStream_t st, const WeightView& w, int64_t r0, int64_t count, void* dst);
void embed(cudaStream_t st, const WeightView& e, const int32_t* ids, int n, float* out);

// ---- attention.cu ----
void attention(cudaStream_t st, const AttentionArgs& a);

}  // namespace redwood::cuda
