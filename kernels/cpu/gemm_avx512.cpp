// The batched pass (n > kGemvMaxN) with AVX-512: fused dequantize + GEMM with
// 512-bit FMAs, every type. Compiled for AVX-512 between the REDWOOD_TARGET_
// markers (simd.h).
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/simd.h"

#ifdef REDWOOD_AVX512_KERNELS
REDWOOD_TARGET_AVX512_BEGIN
// GCC 12 reports its own AVX-512 intrinsics' _mm512_undefined_* operands as
// maybe-uninitialized (GCC bug 105593); the masked forms avoid most. Helpers
// that return 512-bit vectors are internal to this file, so that their ABI
// differs from the baseline's (-Wpsabi) concerns no caller elsewhere.
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#include "kernels/cpu/simd_avx512.h"

// Vectors run along the tokens: the activations are transposed once per call
// into panels xt[k][64] (64 tokens, zero-padded), and each weight is broadcast
// from a strip of R rows x 256 columns, dequantized just before the kernel
// that reads it, while the next strip's weights are prefetched (run_rows
// below). A micro-kernel keeps an R x (16 NV) block of
// outputs in registers (R rows, up to 64 tokens) and walks k: NV vector loads
// and R broadcasts feed R * NV FMAs. Every output is one sequential fp32 FMA
// chain over k, so a row's result does not depend on n or on the other tokens.
namespace redwood::cpu::gemm_avx512 {

namespace {

// gemv_avx2::dequant_span with 512-bit vectors for the quantized types (a block is two
// vectors): the same values, half the instructions of the AVX2 loop.
template <DType t>
void dequant_blocks512(const uint8_t* p, int64_t cols, float* out) {
  constexpr size_t bb = t == DType::Q8_0 ? 34 : t == DType::Q4_0 ? 18 : 20;
  for (int64_t b = 0; b < cols / 32; ++b) {
    const uint8_t* blk = p + b * bb;
    __m512 w0, w1;
    load_block512<t>(blk, w0, w1);
    const __m512 d = _mm512_set1_ps(h2f_in_block(blk));
    if constexpr (t == DType::Q4_1) {
      const __m512 m = _mm512_set1_ps(h2f_in_block(blk + 2));
      _mm512_storeu_ps(out + b * 32, _mm512_fmadd_ps(w0, d, m));
      _mm512_storeu_ps(out + b * 32 + 16, _mm512_fmadd_ps(w1, d, m));
    } else {
      _mm512_storeu_ps(out + b * 32, _mm512_mul_ps(w0, d));
      _mm512_storeu_ps(out + b * 32 + 16, _mm512_mul_ps(w1, d));
    }
  }
}

void dequant_tile_span(DType t, const uint8_t* p, int64_t cols, float* out) {
  switch (t) {
    case DType::Q8_0:
      return dequant_blocks512<DType::Q8_0>(p, cols, out);
    case DType::Q4_0:
      return dequant_blocks512<DType::Q4_0>(p, cols, out);
    case DType::Q4_1:
      return dequant_blocks512<DType::Q4_1>(p, cols, out);
    case DType::F16:
    case DType::BF16:
      if (cols % 16 == 0) {
        for (int64_t c = 0; c < cols; c += 16)
          _mm512_storeu_ps(out + c, t == DType::F16 ? load16<DType::F16>(p, c) : load16<DType::BF16>(p, c));
        return;
      }
      return gemv_avx2::dequant_span(t, p, cols, out);
    default:
      return gemv_avx2::dequant_span(t, p, cols, out);
  }
}

constexpr int kTok = 64;      // tokens per panel
constexpr int64_t kKc = 256;  // k per chunk: a panel's chunk (64 KiB) stays in L2
constexpr int64_t kRb = 60;   // rows per task: a multiple of every R below
constexpr int kMaxR = 12;
// Cache lines of kMaxR rows' share of a chunk, F32 the largest (kKc * 4 bytes,
// one more line where a row's share does not start on a line).
constexpr int kMaxLines = kMaxR * (kKc * 4 / 64 + 1);

// pf[0..npf): cache lines to prefetch, spread over the k loop (one every
// `every` steps) rather than issued together: in a burst they queue behind
// each other, and the 64-token F16 GEMM ran at 0.78 of the FMA peak instead
// of 0.85.
template <int R, int NV>
void micro(const float* w, int64_t kc, const float* xt, int xs, float* ct, const char* const* pf, int npf,
           int every) {
  __m512 acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_loadu_ps(ct + r * kTok + v * 16);
  int next = 0, countdown = 0;
  for (int64_t k = 0; k < kc; ++k) {
    if (--countdown <= 0 && next < npf) {
      _mm_prefetch(pf[next++], _MM_HINT_T0);
      countdown = every;
    }
    __m512 xv[NV];
    for (int v = 0; v < NV; ++v) xv[v] = _mm512_loadu_ps(xt + k * xs + v * 16);
    for (int r = 0; r < R; ++r) {
      const __m512 b = _mm512_set1_ps(w[r * kKc + k]);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(b, xv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(ct + r * kTok + v * 16, acc[r][v]);
}

// One chunk (kc columns from column k0) of a block of nr rows against one
// panel, R rows at a time: the R rows are dequantized into `strip` (R x kKc
// floats) just before their micro-kernel, so the strip is still in L1 when the
// kernel reads it. (A whole-block tile, dequantized once per chunk and kept
// for every panel, was evicted to L2 by the panel streaming through L1, and
// its stores and loads cost a fifth of a 64-token F16 pass.) While a kernel
// runs, the weights of the next R rows are prefetched, spread over its k loop:
// 60 short row streams are more than the hardware prefetchers follow. After
// the last R rows, `after` (nullable) names the rows the next call starts
// with: after_rows rows, row_bytes apart, after_bytes each.
template <int R, int NV>
void run_rows(const WeightView& w, int64_t r0, int64_t nr, int64_t k0, int64_t kc, const uint8_t* after,
              int64_t after_rows, int64_t after_bytes, float* strip, const float* xt, int xs, float* ct) {
  const size_t rb = *row_bytes(w.type, w.cols);
  const int64_t per_block = dtype_info(w.type).block_elems, bb = dtype_info(w.type).block_bytes;
  const uint8_t* base = row_ptr(w, r0) + k0 / per_block * bb;
  const int64_t bytes = (kc + per_block - 1) / per_block * bb;  // one row's share of this chunk
  for (int64_t r = 0; r < nr; r += R) {
    const int64_t rows_here = std::min<int64_t>(R, nr - r);
    for (int64_t i = 0; i < rows_here; ++i) dequant_tile_span(w.type, base + (r + i) * rb, kc, strip + i * kKc);
    for (int64_t i = rows_here; i < R; ++i) std::fill_n(strip + i * kKc, kc, 0.0f);  // padding rows
    // The cache lines of the next R rows (addresses as integers: a line may
    // start before the row).
    const char* lines[kMaxLines];
    int nl = 0;
    const bool last = r + R >= nr;
    const uint8_t* pb = last ? after : base + (r + R) * rb;
    const int64_t pr = std::min<int64_t>(R, last ? after_rows : nr - r - R), pbytes = last ? after_bytes : bytes;
    for (int64_t i = 0; pb && i < pr; ++i) {
      const uintptr_t start = reinterpret_cast<uintptr_t>(pb + i * rb), end = start + pbytes;
      for (uintptr_t line = start & ~uintptr_t{63}; line < end && nl < kMaxLines; line += 64)
        lines[nl++] = reinterpret_cast<const char*>(line);
    }
    micro<R, NV>(strip, kc, xt, xs, ct + r * kTok, lines, nl, nl ? std::max<int>(1, static_cast<int>(kc) / nl) : 0);
  }
}

}  // namespace

void gemm(const WeightView& w, const float* x, int n, float* y) {
  const int64_t cols = w.cols, rows = w.rows;
  const int n_panels = (n + kTok - 1) / kTok;
  // Floats per k in a panel: 64, or for a single panel of fewer tokens the
  // tokens rounded up to 16 (a 16-token pass's panel chunk is then 16 KiB and
  // stays in L1, instead of 64 KiB of which a quarter is read).
  const int xs = n_panels == 1 ? (n + 15) / 16 * 16 : kTok;
  // xt[p][k][xs]: panel p holds tokens 64p .. 64p+63 (zero beyond n). Kept per
  // calling thread, so a forward pass does not reallocate it for every matmul.
  // (A lambda naming a thread_local sees the running thread's copy: the tasks
  // below get the panels through a plain pointer.) matmul is never called from
  // inside a oneTBB task, so a thread cannot re-enter this with its buffer in use.
  thread_local std::vector<float> xt_buffer;
  if (xt_buffer.size() < static_cast<size_t>(n_panels) * cols * xs)
    xt_buffer.resize(static_cast<size_t>(n_panels) * cols * xs);
  float* const xt = xt_buffer.data();
  // The transposition runs on every thread, by ranges of columns (serial, it
  // was 7% of a 1024-token pass over 8192-column rows).
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, cols, 64), [&](const tbb::blocked_range<int64_t>& cr) {
    for (int t = 0; t < n; ++t) {
      float* dst = xt + static_cast<size_t>(t / kTok) * cols * xs + t % kTok;
      const float* src = x + static_cast<size_t>(t) * cols;
      for (int64_t c = cr.begin(); c < cr.end(); ++c) dst[c * xs] = src[c];
    }
    for (int t = n; t < (n_panels - 1) * kTok + xs; ++t) {
      float* dst = xt + static_cast<size_t>(t / kTok) * cols * xs + t % kTok;
      for (int64_t c = cr.begin(); c < cr.end(); ++c) dst[c * xs] = 0.0f;
    }
  });
  const int64_t per_block = dtype_info(w.type).block_elems, bb = static_cast<int64_t>(dtype_info(w.type).block_bytes);
  auto chunk_bytes = [&](int64_t k0) { return (std::min(kKc, cols - k0) + per_block - 1) / per_block * bb; };
  struct Scratch {
    std::vector<float> strip, ct;  // strip[kMaxR][kKc]; ct[panel][kRb][kTok]
  };
  tbb::enumerable_thread_specific<Scratch> scratch;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, (rows + kRb - 1) / kRb, 1),
                    [&](const tbb::blocked_range<int64_t>& range) {
                      Scratch& sc = scratch.local();
                      sc.strip.resize(kMaxR * kKc);
                      sc.ct.resize(static_cast<size_t>(n_panels) * kRb * kTok);
                      for (int64_t blk = range.begin(); blk < range.end(); ++blk) {
                        const int64_t r0 = blk * kRb;
                        const int64_t nr = std::min(kRb, rows - r0);
                        std::fill(sc.ct.begin(), sc.ct.end(), 0.0f);
                        for (int64_t k0 = 0; k0 < cols; k0 += kKc) {
                          const int64_t kc = std::min(kKc, cols - k0);
                          for (int p = 0; p < n_panels; ++p) {
                            const int nv = (std::min(kTok, n - p * kTok) + 15) / 16;
                            const float* xp = xt + (static_cast<size_t>(p) * cols + k0) * xs;
                            float* cp = sc.ct.data() + static_cast<size_t>(p) * kRb * kTok;
                            // What the next call reads first: this chunk again (the next
                            // panel), the block's next chunk, or the next block's first.
                            const uint8_t* after = nullptr;
                            int64_t after_rows = nr, after_bytes = 0;
                            if (p + 1 < n_panels) {
                              after = row_ptr(w, r0) + k0 / per_block * bb;
                              after_bytes = chunk_bytes(k0);
                            } else if (k0 + kKc < cols) {
                              after = row_ptr(w, r0) + (k0 + kKc) / per_block * bb;
                              after_bytes = chunk_bytes(k0 + kKc);
                            } else if (blk + 1 < range.end()) {
                              after = row_ptr(w, r0 + kRb);
                              after_rows = std::min(kRb, rows - r0 - kRb);
                              after_bytes = chunk_bytes(0);
                            }
                            float* st = sc.strip.data();
                            switch (nv) {
                              case 1:
                                run_rows<12, 1>(w, r0, nr, k0, kc, after, after_rows, after_bytes, st, xp, xs, cp);
                                break;
                              case 2:
                                run_rows<10, 2>(w, r0, nr, k0, kc, after, after_rows, after_bytes, st, xp, xs, cp);
                                break;
                              case 3:
                                run_rows<6, 3>(w, r0, nr, k0, kc, after, after_rows, after_bytes, st, xp, xs, cp);
                                break;
                              default:
                                run_rows<6, 4>(w, r0, nr, k0, kc, after, after_rows, after_bytes, st, xp, xs, cp);
                                break;
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

}  // namespace redwood::cpu::gemm_avx512

#pragma GCC diagnostic pop
REDWOOD_TARGET_END
#endif
