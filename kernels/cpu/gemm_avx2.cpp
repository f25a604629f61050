// The batched pass (n > kGemvMaxN) with AVX2: fused dequantize + GEMM with
// 256-bit FMAs, every type.
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/simd.h"

#ifdef REDWOOD_AVX2
// gemm_avx512.cpp's scheme for AVX2 machines (16 vector registers): the activations
// are transposed once per call into panels xt[k][16] (16 tokens, zero-padded),
// each 256-column chunk of a row tile is dequantized once and used by every
// panel, and a micro-kernel keeps R rows x 16 tokens of outputs in 12
// registers (R = 6; 12 rows x 8 tokens for a panel of at most 8): per column,
// 2 vector loads and R broadcasts feed 12 FMAs. Every output is one
// sequential fp32 FMA chain over k, so results do not depend on n.
namespace redwood::cpu::gemm_avx2 {

namespace {

constexpr int kTok = 16;      // tokens per panel
constexpr int64_t kKc = 256;  // k per chunk: the row tile (48 KiB) and the panels' chunks stay in L2
constexpr int64_t kRb = 48;   // rows per task: a multiple of both R below

// (The unroll pragmas make GCC keep acc in registers: without them it
// stores every accumulator to the stack on each step: about a third of the
// speed in bench_kernels' batched table.)
template <int R, int NV>
void micro(const float* w, int64_t kc, const float* xt, float* ct) {
  __m256 acc[R][NV];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_loadu_ps(ct + r * kTok + v * 8);
  for (int64_t k = 0; k < kc; ++k) {
    __m256 xv[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) xv[v] = _mm256_loadu_ps(xt + k * kTok + v * 8);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const __m256 b = _mm256_broadcast_ss(w + r * kKc + k);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(b, xv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) _mm256_storeu_ps(ct + r * kTok + v * 8, acc[r][v]);
}

}  // namespace

void gemm(const WeightView& w, const float* x, int n, float* y) {
  const int64_t cols = w.cols, rows = w.rows;
  const int n_panels = (n + kTok - 1) / kTok;
  // xt[p][k][16]: panel p holds tokens 16p .. 16p+15 (zero beyond n), kept per
  // calling thread as in gemm_avx512 (matmul is never called from a oneTBB task).
  thread_local std::vector<float> xt_buffer;
  if (xt_buffer.size() < static_cast<size_t>(n_panels) * cols * kTok)
    xt_buffer.resize(static_cast<size_t>(n_panels) * cols * kTok);
  float* const xt = xt_buffer.data();
  for (int t = 0; t < n_panels * kTok; ++t) {
    float* dst = xt + static_cast<size_t>(t / kTok) * cols * kTok + t % kTok;
    if (t >= n) {
      for (int64_t c = 0; c < cols; ++c) dst[c * kTok] = 0.0f;
      continue;
    }
    const float* src = x + static_cast<size_t>(t) * cols;
    for (int64_t c = 0; c < cols; ++c) dst[c * kTok] = src[c];
  }
  const size_t bb = dtype_info(w.type).block_bytes;
  const int64_t per_block = dtype_info(w.type).block_elems;
  const int64_t chunk_bytes = kKc / per_block * static_cast<int64_t>(bb);  // one row's kKc columns
  struct Scratch {
    std::vector<float> tile, ct;  // tile[kRb][kKc]; ct[panel][kRb][kTok]
  };
  tbb::enumerable_thread_specific<Scratch> scratch;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, (rows + kRb - 1) / kRb, 1),
                    [&](const tbb::blocked_range<int64_t>& range) {
                      Scratch& sc = scratch.local();
                      sc.tile.assign(kRb * kKc, 0.0f);  // rows past the matrix stay zero
                      sc.ct.resize(static_cast<size_t>(n_panels) * kRb * kTok);
                      for (int64_t blk = range.begin(); blk < range.end(); ++blk) {
                        const int64_t r0 = blk * kRb;
                        const int64_t nr = std::min(kRb, rows - r0);
                        if (nr < kRb) std::fill(sc.tile.begin() + nr * kKc, sc.tile.end(), 0.0f);
                        std::fill(sc.ct.begin(), sc.ct.end(), 0.0f);
                        for (int64_t k0 = 0; k0 < cols; k0 += kKc) {
                          const int64_t kc = std::min(kKc, cols - k0);
                          for (int64_t i = 0; i < nr; ++i) {
                            const uint8_t* src = row_ptr(w, r0 + i) + k0 / per_block * static_cast<int64_t>(bb);
                            gemv_avx2::dequant_span(w.type, src, kc, sc.tile.data() + i * kKc);
                            // The next chunk of this row streams in while the panels run:
                            // 48 short row streams are more than the hardware prefetchers follow.
                            if (k0 + kKc < cols)
                              for (int64_t off = 0; off < chunk_bytes; off += 64)
                                _mm_prefetch(reinterpret_cast<const char*>(src + chunk_bytes + off), _MM_HINT_T0);
                          }
                          for (int p = 0; p < n_panels; ++p) {
                            const float* xp = xt + (static_cast<size_t>(p) * cols + k0) * kTok;
                            float* cp = sc.ct.data() + static_cast<size_t>(p) * kRb * kTok;
                            if (n - p * kTok > 8) {
                              for (int64_t r = 0; r < nr; r += 6)
                                micro<6, 2>(sc.tile.data() + r * kKc, kc, xp, cp + r * kTok);
                            } else {
                              for (int64_t r = 0; r < nr; r += 12)
                                micro<12, 1>(sc.tile.data() + r * kKc, kc, xp, cp + r * kTok);
                            }
                          }
                        }
                        for (int p = 0; p < n_panels; ++p) {
                          const int nt = std::min(kTok, n - p * kTok);
                          const float* cp = sc.ct.data() + static_cast<size_t>(p) * kRb * kTok;
                          for (int t = 0; t < nt; ++t) {
                            float* yt = y + static_cast<size_t>(p * kTok + t) * rows + r0;
                            for (int64_t i = 0; i < nr; ++i) yt[i] = cp[i * kTok + t];
                          }
                        }
                      }
                    });
}

}  // namespace redwood::cpu::gemm_avx2
#endif
