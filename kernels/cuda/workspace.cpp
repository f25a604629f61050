// The CUDA backend's kernel workspace (kernels/backend.h), per backend instance
// (the target and the draft each have one): the cuBLAS workspace and, for passes
// of more than kGemvMaxN tokens, the matmul scratch, which only grows and keeps
// outgrown buffers:
//  - weights dequantized in chunks of at most kGemmScratchElems (fp16; fp32
//    in exact mode; F16/BF16 used in place, F32 never converted): sizes that
//    do not depend on n, so the sum of the distinct ones bounds what it holds;
//  - activations in 16 bits plus a scale per token (not in exact mode), for
//    any n up to max_tokens: that scratch grows geometrically, so it holds
//    less than 4x its largest request.
// Host-only C++, built with or without CUDA: the planner sizes CUDA runs anywhere.
#include <algorithm>
#include <cstdint>
#include <set>

#include "kernels/backend.h"
#include "kernels/cuda/workspace.h"

namespace redwood {

uint64_t cuda_workspace_bytes(const WorkspaceShape& s) {
  constexpr uint64_t kF32 = sizeof(float);
  uint64_t b = cuda::kBlasWorkspaceBytes;
  if (s.max_tokens <= cuda::kGemvMaxN) return b;
  const bool exact = cuda::exact_gemm_requested();
  const uint64_t n = static_cast<uint64_t>(s.max_tokens);
  std::set<uint64_t> weight_sizes;
  uint64_t act_max = 0;
  for (const WeightView& w : s.matrices) {
    if (w.type == DType::F32 || w.cols <= 0) continue;
    const uint64_t rows = static_cast<uint64_t>(w.rows), cols = static_cast<uint64_t>(w.cols);
    if (exact || (w.type != DType::F16 && w.type != DType::BF16)) {
      const uint64_t chunk = std::max<uint64_t>(1, std::min<uint64_t>(rows, cuda::kGemmScratchElems / cols));
      weight_sizes.insert(chunk * cols * (exact ? 4 : 2));
    }
    if (!exact) act_max = std::max(act_max, (n * cols * 2 + 255) / 256 * 256 + n * kF32);
  }
  for (uint64_t x : weight_sizes) b += x;
  return b + 4 * act_max;
}

}  // namespace redwood
