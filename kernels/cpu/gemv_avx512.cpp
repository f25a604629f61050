// AVX-512 GEMV of the plain types (F32, F16, BF16; n <= kGemvMaxN): rows
// converted to fp32 and multiplied with 512-bit FMAs. The quantized types take
// the integer dot kernels (intdot_avx512_vnni.cpp, or intdot_avx2.cpp and
// gemv_avx2.cpp on CPUs without VNNI and VBMI). Compiled for AVX-512 between
// the REDWOOD_TARGET_ markers (simd.h).
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

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

namespace redwood::cpu::gemv_avx512 {

namespace {

// Dot products of R weight rows (row_bytes apart) with N token vectors: each
// weight is read once for all N tokens, each activation vector once for all R
// rows. Decode over long rows uses R = 8: one row at a time, an activation
// vector of more than ~4096 floats stops staying in L1 while the weights
// stream past, and reloading it halves the rate (bench_kernels' "by row
// length" table). A row's arithmetic does not depend on R, so results are
// bit-identical whatever R. out[r * N + k] is row r, token k.
template <DType t, int N, int R = 1>
void row_dots512(const uint8_t* p, size_t row_bytes, int64_t cols, const float* x, int64_t ldx, float* out) {
  static_assert(t == DType::F32 || t == DType::F16 || t == DType::BF16);
  __m512 acc0[R][N], acc1[R][N];
  float macc[R][N];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < N; ++k) {
      acc0[r][k] = acc1[r][k] = _mm512_setzero_ps();
      macc[r][k] = 0.0f;
    }
  // Software prefetch per 64-byte line of 16-bit weights, in the row's
  // stream: 512 bytes ahead into L1 and 3 KiB ahead into L2, as the VNNI
  // integer dot GEMV does (1 KiB into L1 alone was slower, on a single matrix
  // and on a model's stream of F16/BF16 matrices: docs/perf-log).
  const RowStreamAhead<R> pf(512, row_bytes), pf_l2(3072, row_bytes);
  int64_t c = 0;
  for (; c + 32 <= cols; c += 32) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const uint8_t* row = p + r * row_bytes;
      if constexpr (t != DType::F32) {
        _mm_prefetch(reinterpret_cast<const char*>(row) + 2 * c + pf.at(2 * c), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(row) + 2 * c + pf_l2.at(2 * c), _MM_HINT_T1);
      }
      const __m512 w0 = load16<t>(row, c), w1 = load16<t>(row, c + 16);
      for (int k = 0; k < N; ++k) {
        acc0[r][k] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + k * ldx + c), acc0[r][k]);
        acc1[r][k] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + k * ldx + c + 16), acc1[r][k]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {  // tails (cols not a multiple of 32, then of 16)
    const uint8_t* row = p + r * row_bytes;
    int64_t ct = c;
    for (; ct + 16 <= cols; ct += 16) {
      const __m512 w = load16<t>(row, ct);
      for (int k = 0; k < N; ++k) acc0[r][k] = _mm512_fmadd_ps(w, _mm512_loadu_ps(x + k * ldx + ct), acc0[r][k]);
    }
    if (ct < cols) {
      float tmp[16];
      scalar::dequant_row(t, row + ct * (t == DType::F32 ? 4 : 2), cols - ct, tmp);
      for (int k = 0; k < N; ++k)
        for (int64_t j = ct; j < cols; ++j) macc[r][k] += tmp[j - ct] * x[k * ldx + j];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < N; ++k) out[r * N + k] = hsum512(_mm512_add_ps(acc0[r][k], acc1[r][k])) + macc[r][k];
}

template <int N>
void plain_n(const WeightView& w, const float* x, float* y) {
  const int64_t cols = w.cols, rows = w.rows;
  const size_t rb = *row_bytes(w.type, cols);
  tbb::parallel_for(
      tbb::blocked_range<int64_t>(0, rows, gemv_grain(cols, N, false)), [&](const tbb::blocked_range<int64_t>& r) {
        auto run = [&]<DType T>() {
          int64_t i = r.begin();
          float out[N];
          if (N == 1 && cols > kLongRow)
            for (; i + 8 <= r.end(); i += 8) row_dots512<T, 1, 8>(row_ptr(w, i), rb, cols, x, cols, y + i);
          for (; i < r.end(); ++i) {
            row_dots512<T, N>(row_ptr(w, i), 0, cols, x, cols, out);
            for (int k = 0; k < N; ++k) y[k * rows + i] = out[k];
          }
        };
        if (w.type == DType::F32)
          run.template operator()<DType::F32>();
        else if (w.type == DType::F16)
          run.template operator()<DType::F16>();
        else
          run.template operator()<DType::BF16>();
      });
}

}  // namespace

void gemv_plain(const WeightView& w, const float* x, int n, float* y) {
  with_tokens(n, [&]<int N>() { plain_n<N>(w, x, y); });
}

}  // namespace redwood::cpu::gemv_avx512

#pragma GCC diagnostic pop
REDWOOD_TARGET_END
#endif
