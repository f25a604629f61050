// AVX2 GEMV kernels (n <= kGemvMaxN) and AVX2 dequantization:
//  - gemv_plain: F32, F16, BF16 rows converted to fp32 and multiplied with FMAs;
//  - gemv_dequantized: Q8_0, Q4_0, Q4_1 at 2..8 tokens (one token takes the
//    integer dot, intdot_avx2.cpp);
//  - gemv_chunked: the chunked types (dequant.h) through dequant.cpp's chunked_row_dot;
//  - dequant_span: rows as fp32 for the GEMMs and dequantize_rows.
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <vector>

#include "kernels/cpu/dequant.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/simd.h"

#ifdef REDWOOD_AVX2
namespace redwood::cpu::gemv_avx2 {

namespace {

// Loads 32 weights of a quantized block as four 8-float vectors.
inline void load_q4(const uint8_t* qs, __m256 w[4]) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0f);
  const __m128i lo = _mm_and_si128(raw, mask);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(raw, 4), mask);
  w[0] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo));
  w[1] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)));
  w[2] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi));
  w[3] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)));
}

inline void load_q8(const int8_t* qs, __m256 w[4]) {
  for (int i = 0; i < 4; ++i)
    w[i] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8 * i))));
}

// The 32 weights of a Q8_0, Q4_0 or Q4_1 block as four fp32 vectors (elements
// 0..7, ..., 24..31), exactly dequant_row_scalar's values: Q8_0 q d; Q4_0
// q d - 8 d = (q - 8) d (both products exact in fp32); Q4_1 q d + m, one
// rounding.
template <DType t>
inline void dequant_block(const uint8_t* blk, __m256 w[4]) {
  static_assert(t == DType::Q8_0 || t == DType::Q4_0 || t == DType::Q4_1);
  const float dv = h2f_in_block(blk);
  __m256 off = _mm256_setzero_ps();
  if constexpr (t == DType::Q8_0) {
    load_q8(reinterpret_cast<const int8_t*>(blk + 2), w);
  } else if constexpr (t == DType::Q4_0) {
    load_q4(blk + 2, w);
    off = _mm256_set1_ps(-8.0f * dv);
  } else {
    load_q4(blk + 4, w);
    off = _mm256_set1_ps(h2f_in_block(blk + 2));
  }
  const __m256 d = _mm256_set1_ps(dv);
  for (int j = 0; j < 4; ++j) w[j] = _mm256_fmadd_ps(w[j], d, off);
}

inline __m256 load_h8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m256 load_bf8(const uint8_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// Dot products of R weight rows (row_bytes apart) of a plain type (F32, F16,
// BF16) with N token vectors: each weight is read once for all N tokens, each
// activation vector once for all R rows (decode uses R = 4 over rows longer
// than kLongRow columns: an activation vector of 8192 floats fills L1, and
// reloading it for every row costs bandwidth). Quantized types take
// gemv_dequantized or the integer dot kernels. A row's
// arithmetic does not depend on R. out[r * N + k] is row r, token k.
template <DType t, int N, int R = 1>
void row_dots(const uint8_t* p, size_t row_bytes, int64_t cols, const float* x, int64_t ldx, float* out) {
  static_assert(t == DType::F32 || t == DType::F16 || t == DType::BF16);
  // Two accumulators per token (even/odd step) keep FMA dependency chains
  // short: at n = 1 the kernel must not be latency-bound if it is to run at
  // memory bandwidth.
  __m256 acc0[R][N], acc1[R][N];
  float macc[R][N];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < N; ++k) {
      acc0[r][k] = acc1[r][k] = _mm256_setzero_ps();
      macc[r][k] = 0.0f;
    }
  auto load = [](const uint8_t* row, int64_t c) {
    return t == DType::F32   ? _mm256_loadu_ps(reinterpret_cast<const float*>(row) + c)
           : t == DType::F16 ? load_h8(row + 2 * c)
                             : load_bf8(row + 2 * c);
  };
  const RowStreamAhead<R> pf(1024, row_bytes);
  int64_t c = 0;
  for (; c + 16 <= cols; c += 16) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const uint8_t* row = p + r * row_bytes;
      // Software prefetch 1 KiB ahead in the row's stream, once per 64-byte
      // line of 16-bit weights (as in intdot_avx2::rows_dot).
      if (t != DType::F32 && (c & 31) == 0)
        _mm_prefetch(reinterpret_cast<const char*>(row) + 2 * c + pf.at(2 * c), _MM_HINT_T0);
      const __m256 w0 = load(row, c), w1 = load(row, c + 8);
      for (int k = 0; k < N; ++k) {
        acc0[r][k] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + k * ldx + c), acc0[r][k]);
        acc1[r][k] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + k * ldx + c + 8), acc1[r][k]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {  // tails (cols not a multiple of 16, then of 8)
    const uint8_t* row = p + r * row_bytes;
    int64_t ct = c;
    for (; ct + 8 <= cols; ct += 8) {
      const __m256 w = load(row, ct);
      for (int k = 0; k < N; ++k) acc0[r][k] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x + k * ldx + ct), acc0[r][k]);
    }
    if (ct < cols) {
      float tmp[8];
      scalar::dequant_row(t, row + ct * (t == DType::F32 ? 4 : 2), cols - ct, tmp);
      for (int k = 0; k < N; ++k)
        for (int64_t j = ct; j < cols; ++j) macc[r][k] += tmp[j - ct] * x[k * ldx + j];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < N; ++k) out[r * N + k] = hsum(_mm256_add_ps(acc0[r][k], acc1[r][k])) + macc[r][k];
}

// ---- quantized GEMV for 2..8 tokens: dequantize once, fp32 FMAs ------------------
// intdot_avx2 pays its integer dot (about 13 vector instructions) per block and
// token. Dequantizing a block to four fp32 vectors costs about 18, once for
// all tokens, after which a token costs 4 FMAs: cheaper from two tokens up
// (redwood profile-hardware, SmolLM2: see docs/PERFORMANCE.md). Products and
// sums are fp32.

// One weight row against N token vectors (ldx floats apart): out[k].
template <DType t, int N>
void row_dot_dequantized(const uint8_t* p, int64_t cols, const float* x, int64_t ldx, float* out) {
  constexpr int A = N <= 2 ? 4 : N <= 4 ? 2 : 1;  // accumulators per token: enough FMA chains to hide latency
  constexpr int bb = t == DType::Q8_0 ? 34 : t == DType::Q4_0 ? 18 : 20;
  __m256 acc[N][A];
#pragma GCC unroll 32
  for (int k = 0; k < N; ++k)
    for (int a = 0; a < A; ++a) acc[k][a] = _mm256_setzero_ps();
  for (int64_t b = 0; b < cols / 32; ++b) {
    const uint8_t* blk = p + b * bb;
    if ((b & 1) == 0) _mm_prefetch(reinterpret_cast<const char*>(blk) + 4096, _MM_HINT_T0);
    __m256 w[4];
    dequant_block<t>(blk, w);
#pragma GCC unroll 8
    for (int k = 0; k < N; ++k) {
      const float* xk = x + k * ldx + b * 32;
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) acc[k][i % A] = _mm256_fmadd_ps(w[i], _mm256_loadu_ps(xk + 8 * i), acc[k][i % A]);
    }
  }
  for (int k = 0; k < N; ++k) {
    __m256 s = acc[k][0];
    for (int a = 1; a < A; ++a) s = _mm256_add_ps(s, acc[k][a]);
    out[k] = hsum(s);
  }
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
            for (; i + 4 <= r.end(); i += 4) row_dots<T, 1, 4>(row_ptr(w, i), rb, cols, x, cols, y + i);
          for (; i < r.end(); ++i) {
            row_dots<T, N>(row_ptr(w, i), 0, cols, x, cols, out);
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

template <int N>
void dequantized_n(const WeightView& w, const float* x, float* y) {
  const int64_t cols = w.cols, rows = w.rows;
  tbb::parallel_for(
      tbb::blocked_range<int64_t>(0, rows, gemv_grain(cols, N, false)), [&](const tbb::blocked_range<int64_t>& r) {
        auto run = [&]<DType T>() {
          float out[N];
          for (int64_t i = r.begin(); i < r.end(); ++i) {
            row_dot_dequantized<T, N>(row_ptr(w, i), cols, x, cols, out);
            for (int k = 0; k < N; ++k) y[k * rows + i] = out[k];
          }
        };
        if (w.type == DType::Q8_0)
          run.template operator()<DType::Q8_0>();
        else if (w.type == DType::Q4_0)
          run.template operator()<DType::Q4_0>();
        else
          run.template operator()<DType::Q4_1>();
      });
}

template <int N>
void chunked_n(const WeightView& w, const float* x, float* y) {
  const int64_t cols = w.cols, rows = w.rows;
  // The single-token Q4_K/Q5_K dot's sums over 32 elements (its mins).
  std::vector<float> xsum32;
  if (N == 1 && needs_sums_of_32(w.type)) {
    xsum32.resize(cols / 32);
    sums_of_32(x, cols, xsum32.data());
  }
  tbb::parallel_for(
      tbb::blocked_range<int64_t>(0, rows, gemv_grain(cols, N, false)), [&](const tbb::blocked_range<int64_t>& r) {
        float out[N];
        for (int64_t i = r.begin(); i < r.end(); ++i) {
          chunked_row_dot<N>(w.type, row_ptr(w, i), cols, x, cols, xsum32.data(), out);
          for (int k = 0; k < N; ++k) y[k * rows + i] = out[k];
        }
      });
}

}  // namespace

void gemv_plain(const WeightView& w, const float* x, int n, float* y) {
  with_tokens(n, [&]<int N>() { plain_n<N>(w, x, y); });
}

void gemv_dequantized(const WeightView& w, const float* x, int n, float* y) {
  with_tokens(n, [&]<int N>() { dequantized_n<N>(w, x, y); });
}

void gemv_chunked(const WeightView& w, const float* x, int n, float* y) {
  with_tokens(n, [&]<int N>() { chunked_n<N>(w, x, y); });
}

// Dequantizes `cols` weights starting at p (a whole number of blocks for the
// quantized types) into out; the same values as scalar::dequant_row.
void dequant_span(DType t, const uint8_t* p, int64_t cols, float* out) {
  if (is_chunked_type(t)) return dequant_chunked(t, p, cols, out);
  if (t == DType::F16 && cols % 8 == 0) {
    for (int64_t c = 0; c < cols; c += 8) _mm256_storeu_ps(out + c, load_h8(p + 2 * c));
    return;
  }
  if (t == DType::BF16 && cols % 8 == 0) {
    for (int64_t c = 0; c < cols; c += 8) _mm256_storeu_ps(out + c, load_bf8(p + 2 * c));
    return;
  }
  if (t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q8_0) {
    const size_t bb = dtype_info(t).block_bytes;
    auto span = [&]<DType T>() {
      for (int64_t b = 0; b < cols / 32; ++b) {
        __m256 v[4];
        dequant_block<T>(p + b * bb, v);
        for (int j = 0; j < 4; ++j) _mm256_storeu_ps(out + b * 32 + j * 8, v[j]);
      }
    };
    if (t == DType::Q8_0)
      span.template operator()<DType::Q8_0>();
    else if (t == DType::Q4_0)
      span.template operator()<DType::Q4_0>();
    else
      span.template operator()<DType::Q4_1>();
    return;
  }
  scalar::dequant_row(t, p, cols, out);
}

}  // namespace redwood::cpu::gemv_avx2
#endif
