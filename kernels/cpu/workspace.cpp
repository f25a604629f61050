// The CPU backend's kernel workspace (kernels/backend.h), for passes of up to n tokens:
//  - matmul, n > kGemvMaxN: each worker thread keeps one dequantized row tile of
//    rb x cols floats, rb <= clamp(2^19 / cols, 16, 512) (about 2 MiB; more for cols > 32768);
//  - matmul, n <= kGemvMaxN: one vector of n * cols / 32 block sums per call (Q4_1);
//  - attention: each worker keeps (n_past + ancestors) x group floats of scores, at most ctx x group.
// OpenBLAS's own packing buffers are reserved by the library at start-up and not counted.
#include <algorithm>
#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cpu/matmul.h"

namespace redwood {

uint64_t cpu_workspace_bytes(const WorkspaceShape& s) {
  constexpr uint64_t kF32 = sizeof(float);
  uint64_t per_thread = 0, per_call = 0;
  for (const WeightView& w : s.matrices) {
    const uint64_t cols = w.cols > 0 ? static_cast<uint64_t>(w.cols) : 0;
    if (s.max_tokens > cpu::kGemvMaxN) {
      const uint64_t tile_rows = std::clamp<uint64_t>((2u << 20) / kF32 / std::max<uint64_t>(cols, 1), 16, 512);
      per_thread = std::max(per_thread, tile_rows * cols * kF32);
    } else {
      per_call = std::max(per_call, static_cast<uint64_t>(std::max(s.max_tokens, 0)) * (cols / 32) * kF32);
    }
  }
  const uint64_t group = s.n_kv_heads > 0 ? static_cast<uint64_t>(s.n_heads / s.n_kv_heads) : 1;
  per_thread += static_cast<uint64_t>(std::max(s.ctx, 0)) * group * kF32;
  return static_cast<uint64_t>(std::max(s.threads, 1)) * per_thread + per_call;
}

}  // namespace redwood
