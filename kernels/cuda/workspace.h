// Device memory the CUDA backend takes besides weights, KV cache, activations
// and logits: what kernels/cuda allocates, and what the memory planner
// (offload/placement.cpp) counts for it. Host-only C++: no CUDA headers.
#pragma once
#include <cstddef>
#include <cstdlib>
#include <cstring>

namespace redwood::cuda {

// cuBLAS workspace, set explicitly per backend instance (a recorded pass may
// not allocate): backend.cu.
inline constexpr size_t kBlasWorkspaceBytes = size_t{32} << 20;
// Matmuls with n <= kGemvMaxN tokens run the dequantizing GEMV (no scratch);
// larger n dequantize at most this many weight elements per cuBLAS call
// (fp16, or fp32 in exact mode) and convert the activations to 16 bits:
// matmul.cu. Its scratch only grows, and outgrown buffers are kept until
// teardown (recorded passes may point at them).
inline constexpr int kGemvMaxN = 8;
inline constexpr size_t kGemmScratchElems = size_t{32} << 20;

// REDWOOD_CUDA_GEMM=fp32: every matmul in fp32 (MatmulContext::exact); the
// backend rejects any value but fp16, fp32 or empty.
inline bool exact_gemm_requested() {
  const char* g = std::getenv("REDWOOD_CUDA_GEMM");
  return g && std::strcmp(g, "fp32") == 0;
}

}  // namespace redwood::cuda
