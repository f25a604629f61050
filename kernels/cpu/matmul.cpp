#include "kernels/cpu/matmul.h"

#include <cblas.h>
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/parallel_for.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/common/math.h"
#include "kernels/cpu/simd.h"

namespace redwood::cpu {

using namespace redwood::math;

namespace {

const uint8_t* row_ptr(const WeightView& w, int64_t r) {
  return static_cast<const uint8_t*>(w.data) + static_cast<uint64_t>(r) * *row_bytes(w.type, w.cols);
}

// ---- scalar dequantization of one row (reference and fallback) ------------------
void dequant_row_scalar(DType t, const uint8_t* p, int64_t cols, float* out) {
  switch (t) {
    case DType::F32:
      memcpy(out, p, cols * 4);
      break;
    case DType::F16:
      for (int64_t c = 0; c < cols; ++c) {
        uint16_t h;
        memcpy(&h, p + 2 * c, 2);
        out[c] = f16_to_f32(h);
      }
      break;
    case DType::BF16:
      for (int64_t c = 0; c < cols; ++c) {
        uint16_t h;
        memcpy(&h, p + 2 * c, 2);
        out[c] = bf16_to_f32(h);
      }
      break;
    case DType::Q8_0:
      for (int64_t b = 0; b < cols / 32; ++b) {
        BlockQ8_0 blk;
        memcpy(&blk, p + b * sizeof(blk), sizeof(blk));
        for (int j = 0; j < 32; ++j) out[b * 32 + j] = dequant_q8_0(blk, j);
      }
      break;
    case DType::Q4_0:
      for (int64_t b = 0; b < cols / 32; ++b) {
        BlockQ4_0 blk;
        memcpy(&blk, p + b * sizeof(blk), sizeof(blk));
        for (int j = 0; j < 32; ++j) out[b * 32 + j] = dequant_q4_0(blk, j);
      }
      break;
    case DType::Q4_1:
      for (int64_t b = 0; b < cols / 32; ++b) {
        BlockQ4_1 blk;
        memcpy(&blk, p + b * sizeof(blk), sizeof(blk));
        for (int j = 0; j < 32; ++j) out[b * 32 + j] = dequant_q4_1(blk, j);
      }
      break;
  }
}

#ifdef REDWOOD_AVX2
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
  const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + 16));
  w[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(a));
  w[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(a, 8)));
  w[2] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
  w[3] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8)));
}

// Hardware (F16C) half -> float for block scales; bit-identical to math::f16_to_f32.
inline float h2f(const uint8_t* p) {
  uint16_t h;
  memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

inline __m256 load_h8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m256 load_bf8(const uint8_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// Dot products of one weight row with N token vectors, each row read once.
// For quantized blocks, the block scale is applied per block to the sum over
// the block: acc += d * (q . x), plus m * sum(x) for Q4_1 (xsum precomputed).
template <DType t, int N>
void row_dots(const uint8_t* p, int64_t cols, const float* x, int64_t ldx, const float* xsum, float* out) {
  // Two accumulators per token (even/odd step) and split partial sums inside a
  // block keep FMA dependency chains short: at n = 1 the kernel must not be
  // latency-bound if it is to run at memory bandwidth.
  __m256 acc0[N], acc1[N];
  for (int k = 0; k < N; ++k) acc0[k] = acc1[k] = _mm256_setzero_ps();
  float macc[N] = {};
  if constexpr (t == DType::F32 || t == DType::F16 || t == DType::BF16) {
    {
      auto load = [&](int64_t c) {
        return t == DType::F32   ? _mm256_loadu_ps(reinterpret_cast<const float*>(p) + c)
               : t == DType::F16 ? load_h8(p + 2 * c)
                                 : load_bf8(p + 2 * c);
      };
      int64_t c = 0;
      for (; c + 16 <= cols; c += 16) {
        const __m256 w0 = load(c), w1 = load(c + 8);
        for (int k = 0; k < N; ++k) {
          acc0[k] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + k * ldx + c), acc0[k]);
          acc1[k] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + k * ldx + c + 8), acc1[k]);
        }
      }
      for (; c + 8 <= cols; c += 8) {
        const __m256 w = load(c);
        for (int k = 0; k < N; ++k) acc0[k] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x + k * ldx + c), acc0[k]);
      }
      if (c < cols) {  // tail (cols not a multiple of 8)
        float tmp[8];
        dequant_row_scalar(t, p + c * (t == DType::F32 ? 4 : 2), cols - c, tmp);
        for (int k = 0; k < N; ++k)
          for (int64_t j = c; j < cols; ++j) macc[k] += tmp[j - c] * x[k * ldx + j];
      }
    }
  } else {
    {
      const int64_t nb = cols / 32;
      const size_t bb = dtype_info(t).block_bytes;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = p + b * bb;
        const __m256 d = _mm256_set1_ps(h2f(blk));
        __m256 w[4];
        float m = 0.0f;
        if constexpr (t == DType::Q8_0) {
          load_q8(reinterpret_cast<const int8_t*>(blk + 2), w);
        } else if constexpr (t == DType::Q4_0) {
          load_q4(blk + 2, w);
          const __m256 eight = _mm256_set1_ps(8.0f);
          for (auto& v : w) v = _mm256_sub_ps(v, eight);
        } else {
          m = h2f(blk + 2);
          load_q4(blk + 4, w);
        }
        for (int k = 0; k < N; ++k) {
          const float* xb = x + k * ldx + b * 32;
          __m256 s0 = _mm256_mul_ps(w[0], _mm256_loadu_ps(xb));
          __m256 s1 = _mm256_mul_ps(w[1], _mm256_loadu_ps(xb + 8));
          s0 = _mm256_fmadd_ps(w[2], _mm256_loadu_ps(xb + 16), s0);
          s1 = _mm256_fmadd_ps(w[3], _mm256_loadu_ps(xb + 24), s1);
          if (b & 1)
            acc1[k] = _mm256_fmadd_ps(d, _mm256_add_ps(s0, s1), acc1[k]);
          else
            acc0[k] = _mm256_fmadd_ps(d, _mm256_add_ps(s0, s1), acc0[k]);
          if constexpr (t == DType::Q4_1) macc[k] = std::fma(m, xsum[k * nb + b], macc[k]);
        }
      }
    }
  }
  for (int k = 0; k < N; ++k) out[k] = hsum(_mm256_add_ps(acc0[k], acc1[k])) + macc[k];
}

#ifdef __AVX512F__
#define REDWOOD_AVX512 1
// GCC 12 reports its own AVX-512 intrinsics' _mm512_undefined_* operands as
// maybe-uninitialized (GCC bug 105593); the masked forms below avoid most.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// The same dot products with 512-bit vectors (a whole quantized block is two
// vectors): half the conversions and FMAs per weight, which is what bounds a
// quantized GEMV. Same per-token arithmetic for every N, as above.
inline void load_q4_512(const uint8_t* qs, __m512& w0, __m512& w1) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0f);
  w0 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(raw, mask)));                     // elements 0..15
  w1 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(raw, 4), mask)));  // 16..31
}

template <DType t>
inline __m512 load16(const uint8_t* p, int64_t c) {
  if constexpr (t == DType::F32) return _mm512_loadu_ps(reinterpret_cast<const float*>(p) + c);
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 * c));
  if constexpr (t == DType::F16) return _mm512_maskz_cvtph_ps(0xffff, h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// A quantized block's 32 weights as two 16-float vectors, without the block
// scale: q (Q8_0), q - 8 (Q4_0) or q (Q4_1, whose offset m is added apart).
template <DType t>
inline void load_block512(const uint8_t* blk, __m512& w0, __m512& w1) {
  if constexpr (t == DType::Q8_0) {
    w0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2))));
    w1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 18))));
  } else if constexpr (t == DType::Q4_0) {
    load_q4_512(blk + 2, w0, w1);
    const __m512 eight = _mm512_set1_ps(8.0f);
    w0 = _mm512_sub_ps(w0, eight);
    w1 = _mm512_sub_ps(w1, eight);
  } else {
    load_q4_512(blk + 4, w0, w1);
  }
}

// Dot products of R weight rows (row_bytes apart) with N token vectors: each
// weight is read once for all N tokens, each activation vector once for all R
// rows. Decode over long rows uses R = 8: one row at a time, an activation
// vector of more than ~4096 floats stops staying in L1 while the weights
// stream past, and reloading it halves the rate (bench_kernels' "by row
// length" table). A row's arithmetic does not depend on R, so results are
// bit-identical whatever R. out[r * N + k] is row r, token k.
template <DType t, int N, int R = 1>
void row_dots512(const uint8_t* p, size_t row_bytes, int64_t cols, const float* x, int64_t ldx, const float* xsum,
                 float* out) {
  __m512 acc0[R][N], acc1[R][N];
  float macc[R][N];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < N; ++k) {
      acc0[r][k] = acc1[r][k] = _mm512_setzero_ps();
      macc[r][k] = 0.0f;
    }
  if constexpr (t == DType::F32 || t == DType::F16 || t == DType::BF16) {
    int64_t c = 0;
    for (; c + 32 <= cols; c += 32) {
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const uint8_t* row = p + r * row_bytes;
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
        dequant_row_scalar(t, row + ct * (t == DType::F32 ? 4 : 2), cols - ct, tmp);
        for (int k = 0; k < N; ++k)
          for (int64_t j = ct; j < cols; ++j) macc[r][k] += tmp[j - ct] * x[k * ldx + j];
      }
    }
  } else {
    const int64_t nb = cols / 32;
    const size_t bb = dtype_info(t).block_bytes;
    for (int64_t b = 0; b < nb; ++b) {
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const uint8_t* blk = p + r * row_bytes + b * bb;
        const __m512 d = _mm512_set1_ps(h2f(blk));
        __m512 w0, w1;
        load_block512<t>(blk, w0, w1);
        [[maybe_unused]] const float m = t == DType::Q4_1 ? h2f(blk + 2) : 0.0f;
        for (int k = 0; k < N; ++k) {
          const float* xb = x + k * ldx + b * 32;
          const __m512 sv = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xb + 16), _mm512_mul_ps(w0, _mm512_loadu_ps(xb)));
          if (b & 1)
            acc1[r][k] = _mm512_fmadd_ps(d, sv, acc1[r][k]);
          else
            acc0[r][k] = _mm512_fmadd_ps(d, sv, acc0[r][k]);
          if constexpr (t == DType::Q4_1) macc[r][k] = std::fma(m, xsum[k * nb + b], macc[r][k]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < N; ++k) {
      // Through memory: GCC 12's _mm512_reduce_add_ps trips -Wmaybe-uninitialized.
      alignas(64) float lanes[16];
      _mm512_store_ps(lanes, _mm512_add_ps(acc0[r][k], acc1[r][k]));
      out[r * N + k] = hsum(_mm256_add_ps(_mm256_load_ps(lanes), _mm256_load_ps(lanes + 8))) + macc[r][k];
    }
}

#ifdef __AVX512BF16__
#define REDWOOD_BF16DOT 1
// ---- 4-bit decode with bf16 dot products -------------------------------------
// A 4-bit weight is a small integer, exact in bf16, and VDPBF16PS multiplies
// pairs of bf16 exactly into fp32 accumulators: 32 multiply-adds per
// instruction, with no widening to 32 bits and no int->float conversion. To keep
// fp32 accuracy the activations are split into three bf16 parts, x = hi + mid +
// lo (8 + 8 + 8 significant bits: x itself, except in rare cases a last bit),
// so a block costs three dot instructions per half instead of two
// conversions and two FMAs per 16 weights. Blocks go in pairs (64 weights): the
// 32 low nibbles of blocks A and B widen to one vector of 16-bit lanes, and
// the activations are laid out per pair to match (xp below).
namespace bf16dot {

// Per pair of blocks, 6 x 32 bf16: for the low-nibble half (weights 0..15 of
// A, then of B) hi, mid, lo; then the same for the high-nibble half (16..31).
constexpr int kPairWords = 192;

inline uint16_t to_bf16(float f) {  // round to nearest even; x is finite
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float from_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

void split_activations(const float* x, int64_t cols, uint16_t* xp) {
  const int64_t pairs = cols / 64;
  for (int64_t p = 0; p < pairs; ++p) {
    uint16_t* o = xp + p * kPairWords;
    for (int half = 0; half < 2; ++half)
      for (int blk = 0; blk < 2; ++blk)
        for (int j = 0; j < 16; ++j) {
          const float v = x[p * 64 + blk * 32 + half * 16 + j];
          const uint16_t hi = to_bf16(v);
          const float r1 = v - from_bf16(hi);
          const uint16_t mid = to_bf16(r1);
          const uint16_t lo = to_bf16(r1 - from_bf16(mid));
          o[half * 96 + blk * 16 + j] = hi;
          o[half * 96 + 32 + blk * 16 + j] = mid;
          o[half * 96 + 64 + blk * 16 + j] = lo;
        }
  }
}

// R rows (R = 1, or 8 over long rows); each row's arithmetic is the same for
// every R. xs: per-block sums of x (Q4_1). An odd last block is done in fp32.
template <DType t, int R>
void rows_dot(const uint8_t* p, size_t row_bytes, int64_t cols, const float* x, const uint16_t* xp, const float* xs,
              float* out) {
  static_assert(t == DType::Q4_0 || t == DType::Q4_1);
  constexpr int qoff = t == DType::Q4_0 ? 2 : 4;
  constexpr size_t bb = t == DType::Q4_0 ? 18 : 20;
  // nibble -> bf16 of the weight's integer part: q - 8 (Q4_0) or q (Q4_1)
  alignas(64) uint16_t tab[32] = {};
  for (int q = 0; q < 16; ++q) {
    const float v = static_cast<float>(t == DType::Q4_0 ? q - 8 : q);
    tab[q] = to_bf16(v);
  }
  const __m512i table = _mm512_load_si512(tab);
  const __m512i low4 = _mm512_set1_epi16(0x0f);
  const __m512i d_idx = _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0);
  [[maybe_unused]] const __m512i m_idx = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1);
  __m512 acc[R], macc[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) acc[r] = macc[r] = _mm512_setzero_ps();
  const int64_t nb = cols / 32, pairs = nb / 2;
  for (int64_t pi = 0; pi < pairs; ++pi) {
    const uint16_t* xq = xp + pi * kPairWords;
    const __m512bh l_hi = (__m512bh)_mm512_loadu_si512(xq), l_mid = (__m512bh)_mm512_loadu_si512(xq + 32),
                   l_lo = (__m512bh)_mm512_loadu_si512(xq + 64), h_hi = (__m512bh)_mm512_loadu_si512(xq + 96),
                   h_mid = (__m512bh)_mm512_loadu_si512(xq + 128), h_lo = (__m512bh)_mm512_loadu_si512(xq + 160);
    __m512 xsv = _mm512_setzero_ps();
    if constexpr (t == DType::Q4_1)  // lanes 0-7: sum(x of A) / 8, lanes 8-15: sum(x of B) / 8
      xsv = _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(xs[2 * pi] * 0.125f), _mm512_set1_ps(xs[2 * pi + 1] * 0.125f));
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const uint8_t* a = p + r * row_bytes + 2 * pi * bb;
      const uint8_t* b = a + bb;
      const __m256i q =
          _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + qoff))),
                                  _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + qoff)), 1);
      const __m512i w16 = _mm512_cvtepu8_epi16(q);
      const __m512bh wl = (__m512bh)_mm512_permutexvar_epi16(_mm512_and_si512(w16, low4), table);
      const __m512bh wh = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(w16, 4), table);
      // The small parts (lo, then mid) accumulate in one chain, the main part in another.
      __m512 t1 = _mm512_dpbf16_ps(_mm512_setzero_ps(), wl, l_hi);
      __m512 t2 = _mm512_dpbf16_ps(_mm512_setzero_ps(), wl, l_lo);
      t1 = _mm512_dpbf16_ps(t1, wh, h_hi);
      t2 = _mm512_dpbf16_ps(t2, wh, h_lo);
      t2 = _mm512_dpbf16_ps(t2, wl, l_mid);
      t2 = _mm512_dpbf16_ps(t2, wh, h_mid);
      const __m512 sum = _mm512_add_ps(t1, t2);
      // [dA, mA, dB, mB] as halves (Q4_0: [dA, -, dB, -]), converted once, then spread
      // to lanes 0-7 (block A) and 8-15 (block B).
      uint32_t ha, hb;
      memcpy(&ha, a, 4);
      memcpy(&hb, b, 4);
      const __m512 scales = _mm512_castps128_ps512(
          _mm_cvtph_ps(_mm_insert_epi32(_mm_cvtsi32_si128(static_cast<int>(ha)), static_cast<int>(hb), 1)));
      acc[r] = _mm512_fmadd_ps(sum, _mm512_permutexvar_ps(d_idx, scales), acc[r]);
      if constexpr (t == DType::Q4_1) {
        const __m512 mv = _mm512_permutexvar_ps(m_idx, scales);
        macc[r] = _mm512_fmadd_ps(mv, xsv, macc[r]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    float tail = 0.0f;
    if (nb % 2) {  // the odd last block, in fp32
      const int64_t bl = nb - 1;
      const uint8_t* blk = p + r * row_bytes + bl * bb;
      __m512 w0, w1;
      load_block512<t>(blk, w0, w1);
      const __m512 sv =
          _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + bl * 32 + 16), _mm512_mul_ps(w0, _mm512_loadu_ps(x + bl * 32)));
      macc[r] = _mm512_fmadd_ps(_mm512_set1_ps(h2f(blk)), sv, macc[r]);
      if constexpr (t == DType::Q4_1) tail = h2f(blk + 2) * xs[bl];
    }
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, _mm512_add_ps(acc[r], macc[r]));
    out[r] = hsum(_mm256_add_ps(_mm256_load_ps(lanes), _mm256_load_ps(lanes + 8))) + tail;
  }
}

}  // namespace bf16dot
#endif
#pragma GCC diagnostic pop
#endif
#endif

// Dequantizes `cols` weights starting at p (a whole number of blocks for the
// quantized types) into out; the same values as dequant_row_scalar.
void dequant_span(DType t, const uint8_t* p, int64_t cols, float* out) {
#ifdef REDWOOD_AVX2
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
    for (int64_t b = 0; b < cols / 32; ++b) {
      const uint8_t* blk = p + b * bb;
      const float dv = h2f(blk);
      __m256 v[4];
      __m256 off = _mm256_setzero_ps();
      if (t == DType::Q8_0) {
        load_q8(reinterpret_cast<const int8_t*>(blk + 2), v);
      } else if (t == DType::Q4_0) {
        load_q4(blk + 2, v);
        off = _mm256_set1_ps(-8.0f * dv);
      } else {
        load_q4(blk + 4, v);
        off = _mm256_set1_ps(h2f(blk + 2));
      }
      const __m256 d = _mm256_set1_ps(dv);
      for (int j = 0; j < 4; ++j) _mm256_storeu_ps(out + b * 32 + j * 8, _mm256_fmadd_ps(v[j], d, off));
    }
    return;
  }
#endif
  dequant_row_scalar(t, p, cols, out);
}

#ifdef REDWOOD_AVX512
// ---- batched pass: fused dequantize + GEMM with 512-bit FMAs -----------------
// Vectors run along the tokens: the activations are transposed once per call
// into panels xt[k][64] (64 tokens, zero-padded), and each weight is broadcast
// from a dequantized row tile. A micro-kernel keeps an R x (16 NV) block of
// outputs in registers (R rows, up to 64 tokens) and walks k: NV vector loads
// and R broadcasts feed R * NV FMAs. Every output is one sequential fp32 FMA
// chain over k, so a row's result does not depend on n or on the other tokens.
namespace gemm512 {

// dequant_span with 512-bit vectors for the quantized types (a block is two
// vectors): the same values, half the instructions of the AVX2 loop.
template <DType t>
void dequant_blocks512(const uint8_t* p, int64_t cols, float* out) {
  constexpr size_t bb = t == DType::Q8_0 ? 34 : t == DType::Q4_0 ? 18 : 20;
  for (int64_t b = 0; b < cols / 32; ++b) {
    const uint8_t* blk = p + b * bb;
    __m512 w0, w1;
    load_block512<t>(blk, w0, w1);
    const __m512 d = _mm512_set1_ps(h2f(blk));
    if constexpr (t == DType::Q4_1) {
      const __m512 m = _mm512_set1_ps(h2f(blk + 2));
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
    default:
      return dequant_span(t, p, cols, out);
  }
}

constexpr int kTok = 64;      // tokens per panel
constexpr int64_t kKc = 256;  // k per chunk: the panel chunk (64 KiB) and row tile stay in L2
constexpr int64_t kRb = 60;   // rows per task: a multiple of every R below

template <int R, int NV>
void micro(const float* w, int64_t kc, const float* xt, float* ct) {
  __m512 acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_loadu_ps(ct + r * kTok + v * 16);
  for (int64_t k = 0; k < kc; ++k) {
    __m512 xv[NV];
    for (int v = 0; v < NV; ++v) xv[v] = _mm512_loadu_ps(xt + k * kTok + v * 16);
    for (int r = 0; r < R; ++r) {
      const __m512 b = _mm512_set1_ps(w[r * kKc + k]);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(b, xv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(ct + r * kTok + v * 16, acc[r][v]);
}

template <int R, int NV>
void run_rows(const float* tile, int64_t nrows_padded, int64_t kc, const float* xt, float* ct) {
  for (int64_t r = 0; r < nrows_padded; r += R) micro<R, NV>(tile + r * kKc, kc, xt, ct + r * kTok);
}

void gemm(const WeightView& w, const float* x, int n, float* y) {
  const int64_t cols = w.cols, rows = w.rows;
  const int n_panels = (n + kTok - 1) / kTok;
  // xt[p][k][64]: panel p holds tokens 64p .. 64p+63 (zero beyond n). Kept per
  // calling thread, so a forward pass does not reallocate it for every matmul.
  // (A lambda naming a thread_local sees the running thread's copy: the tasks
  // below get the panels through a plain pointer.) matmul is never called from
  // inside a oneTBB task, so a thread cannot re-enter this with its buffer in use.
  thread_local std::vector<float> xt_buffer;
  if (xt_buffer.size() < static_cast<size_t>(n_panels) * cols * kTok)
    xt_buffer.resize(static_cast<size_t>(n_panels) * cols * kTok);
  float* const xt = xt_buffer.data();
  for (int t = n; t < n_panels * kTok; ++t) {
    float* dst = xt + static_cast<size_t>(t / kTok) * cols * kTok + t % kTok;
    for (int64_t c = 0; c < cols; ++c) dst[c * kTok] = 0.0f;
  }
  for (int t = 0; t < n; ++t) {
    float* dst = xt + static_cast<size_t>(t / kTok) * cols * kTok + t % kTok;
    const float* src = x + static_cast<size_t>(t) * cols;
    for (int64_t c = 0; c < cols; ++c) dst[c * kTok] = src[c];
  }
  const size_t bb = dtype_info(w.type).block_bytes;
  const int64_t per_block = dtype_info(w.type).block_elems;
  struct Scratch {
    std::vector<float> tile, ct;
  };
  tbb::enumerable_thread_specific<Scratch> scratch;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, (rows + kRb - 1) / kRb, 1),
                    [&](const tbb::blocked_range<int64_t>& range) {
                      Scratch& sc = scratch.local();
                      sc.tile.assign(kRb * kKc, 0.0f);
                      sc.ct.resize(kRb * kTok);
                      for (int64_t blk = range.begin(); blk < range.end(); ++blk) {
                        const int64_t r0 = blk * kRb;
                        const int64_t nr = std::min(kRb, rows - r0);
                        for (int p = 0; p < n_panels; ++p) {
                          const int nt = std::min(kTok, n - p * kTok);
                          const int nv = (nt + 15) / 16;
                          const int R = nv == 1 ? 12 : nv == 2 ? 10 : 6;
                          const int64_t nr_padded = (nr + R - 1) / R * R;
                          std::fill(sc.ct.begin(), sc.ct.end(), 0.0f);
                          for (int64_t k0 = 0; k0 < cols; k0 += kKc) {
                            const int64_t kc = std::min(kKc, cols - k0);
                            for (int64_t i = 0; i < nr; ++i)
                              dequant_tile_span(w.type, row_ptr(w, r0 + i) + k0 / per_block * static_cast<int64_t>(bb),
                                                kc, sc.tile.data() + i * kKc);
                            for (int64_t i = nr; i < nr_padded; ++i) std::fill_n(sc.tile.data() + i * kKc, kc, 0.0f);
                            const float* xp = xt + (static_cast<size_t>(p) * cols + k0) * kTok;
                            switch (nv) {
                              case 1:
                                run_rows<12, 1>(sc.tile.data(), nr_padded, kc, xp, sc.ct.data());
                                break;
                              case 2:
                                run_rows<10, 2>(sc.tile.data(), nr_padded, kc, xp, sc.ct.data());
                                break;
                              case 3:
                                run_rows<6, 3>(sc.tile.data(), nr_padded, kc, xp, sc.ct.data());
                                break;
                              default:
                                run_rows<6, 4>(sc.tile.data(), nr_padded, kc, xp, sc.ct.data());
                                break;
                            }
                          }
                          for (int t = 0; t < nt; ++t) {
                            float* yt = y + static_cast<size_t>(p * kTok + t) * rows + r0;
                            for (int64_t i = 0; i < nr; ++i) yt[i] = sc.ct[i * kTok + t];
                          }
                        }
                      }
                    });
}

}  // namespace gemm512
#endif

// Rows longer than this (in columns) are processed eight at a time at n = 1.
constexpr int64_t kLongRow = 4096;

template <int N>
void gemv_n(const WeightView& w, const float* x, float* y) {
  const int64_t cols = w.cols, rows = w.rows;
  std::vector<float> xsum;
  const float* xs = nullptr;
  if (w.type == DType::Q4_1) {
    const int64_t nb = cols / 32;
    xsum.resize(N * nb);
    for (int k = 0; k < N; ++k)
      for (int64_t b = 0; b < nb; ++b) {
        float s = 0;
        for (int j = 0; j < 32; ++j) s += x[k * cols + b * 32 + j];
        xsum[k * nb + b] = s;
      }
    xs = xsum.data();
  }
  [[maybe_unused]] const uint16_t* xp = nullptr;
#ifdef REDWOOD_BF16DOT
  std::vector<uint16_t> xsplit;
  if (N == 1 && (w.type == DType::Q4_0 || w.type == DType::Q4_1)) {
    xsplit.resize(static_cast<size_t>(cols / 64) * bf16dot::kPairWords);
    bf16dot::split_activations(x, cols, xsplit.data());
    xp = xsplit.data();
  }
#endif
  int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1));
  // blocked_range splits down to [grain/2, grain] rows: keep groups of eight.
  if (N == 1 && cols > kLongRow) grain = std::max<int64_t>(grain, 16);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, rows, grain), [&](const tbb::blocked_range<int64_t>& r) {
#ifdef REDWOOD_AVX2
    float out[N];
    auto run = [&]<DType T>() {
      int64_t i = r.begin();
#ifdef REDWOOD_BF16DOT
      if constexpr (N == 1 && (T == DType::Q4_0 || T == DType::Q4_1)) {
        const size_t rb = *row_bytes(w.type, cols);
        if (cols > kLongRow)
          for (; i + 8 <= r.end(); i += 8) bf16dot::rows_dot<T, 8>(row_ptr(w, i), rb, cols, x, xp, xs, y + i);
        for (; i < r.end(); ++i) bf16dot::rows_dot<T, 1>(row_ptr(w, i), rb, cols, x, xp, xs, y + i);
        return;
      }
#endif
#ifdef REDWOOD_AVX512
      if (N == 1 && cols > kLongRow) {
        const size_t rb = *row_bytes(w.type, cols);
        for (; i + 8 <= r.end(); i += 8) row_dots512<T, 1, 8>(row_ptr(w, i), rb, cols, x, cols, xs, y + i);
      }
#endif
      for (; i < r.end(); ++i) {
#ifdef REDWOOD_AVX512
        row_dots512<T, N>(row_ptr(w, i), 0, cols, x, cols, xs, out);
#else
        row_dots<T, N>(row_ptr(w, i), cols, x, cols, xs, out);
#endif
        for (int k = 0; k < N; ++k) y[k * rows + i] = out[k];
      }
    };
    switch (w.type) {
      case DType::F32:
        run.template operator()<DType::F32>();
        break;
      case DType::F16:
        run.template operator()<DType::F16>();
        break;
      case DType::BF16:
        run.template operator()<DType::BF16>();
        break;
      case DType::Q8_0:
        run.template operator()<DType::Q8_0>();
        break;
      case DType::Q4_0:
        run.template operator()<DType::Q4_0>();
        break;
      case DType::Q4_1:
        run.template operator()<DType::Q4_1>();
        break;
    }
#else
    std::vector<float> tmp(cols);
    for (int64_t i = r.begin(); i < r.end(); ++i) {
      dequant_row_scalar(w.type, row_ptr(w, i), cols, tmp.data());
      for (int k = 0; k < N; ++k) y[k * rows + i] = dot(tmp.data(), x + k * cols, cols);
    }
#endif
  });
}

[[maybe_unused]] void gemm_blocked(const WeightView& w, const float* x, int n, float* y) {
  const int64_t cols = w.cols, rows = w.rows;
  // Rows per block: sgemm repacks the activations once per call, so tiles are
  // large (about 2 MiB of floats, L3-resident) while leaving >= 4 tiles per thread.
  const int64_t tile_rows = std::clamp<int64_t>((2 << 20) / 4 / cols, 16, 512);
  const int64_t rb = std::max<int64_t>(16, std::min(tile_rows, rows / 8 / 16 * 16));
  tbb::enumerable_thread_specific<std::vector<float>> tiles;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, (rows + rb - 1) / rb, 1), [&](const tbb::blocked_range<int64_t>& r) {
    auto& tile = tiles.local();
    tile.resize(rb * cols);
    for (int64_t blk = r.begin(); blk < r.end(); ++blk) {
      const int64_t r0 = blk * rb;
      const int64_t nr = std::min(rb, rows - r0);
      const float* wt;
      if (w.type == DType::F32) {
        wt = static_cast<const float*>(w.data) + r0 * cols;
      } else {
        dequantize_rows(w, r0, nr, tile.data());
        wt = tile.data();
      }
      // y[:, r0:r0+nr] = x (n x cols) * wt^T (cols x nr)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, static_cast<int>(nr), static_cast<int>(cols), 1.0f, x,
                  static_cast<int>(cols), wt, static_cast<int>(cols), 0.0f, y + r0, static_cast<int>(rows));
    }
  });
}

}  // namespace

void dequantize_rows(const WeightView& w, int64_t r0, int64_t nrows, float* out) {
  for (int64_t i = 0; i < nrows; ++i) dequant_span(w.type, row_ptr(w, r0 + i), w.cols, out + i * w.cols);
}

void matmul(const WeightView& w, const float* x, int n, float* y) {
  if (n <= 0) return;
#ifdef REDWOOD_AVX512
  if (n > kGemvMaxN) return gemm512::gemm(w, x, n, y);
#endif
  if (n > kGemvMaxN) return gemm_blocked(w, x, n, y);
  switch (n) {
    case 1:
      return gemv_n<1>(w, x, y);
    case 2:
      return gemv_n<2>(w, x, y);
    case 3:
      return gemv_n<3>(w, x, y);
    case 4:
      return gemv_n<4>(w, x, y);
    case 5:
      return gemv_n<5>(w, x, y);
    case 6:
      return gemv_n<6>(w, x, y);
    case 7:
      return gemv_n<7>(w, x, y);
    default:
      return gemv_n<8>(w, x, y);
  }
}

void matmul_reference(const WeightView& w, const float* x, int n, float* y) {
  std::vector<float> row(w.cols);
  for (int64_t r = 0; r < w.rows; ++r) {
    dequant_row_scalar(w.type, row_ptr(w, r), w.cols, row.data());
    for (int t = 0; t < n; ++t) {
      double s = 0;
      for (int64_t c = 0; c < w.cols; ++c) s += static_cast<double>(row[c]) * x[t * w.cols + c];
      y[t * w.rows + r] = static_cast<float>(s);
    }
  }
}

}  // namespace redwood::cpu
