#include "kernels/cpu/matmul.h"

#include <cblas.h>
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/parallel_for.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/common/math.h"
#include "kernels/cpu/dequant.h"
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
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::IQ4_NL:
    case DType::IQ4_XS:
      dequant_chunked_scalar(t, p, cols, out);
      break;
  }
}

// Where a software prefetch `ahead` bytes further along a row's stream lands
// when R rows (row_bytes apart, consecutive) are read side by side, R at a
// time: that row's stream continues in the same row of the next R rows, not
// in the next row, which the same call is already reading. at(offset) is the
// distance from the byte at `offset` in row r to the byte `ahead` further in
// row r's stream: offset + ahead within the row, else (R - 1) rows further
// per row boundary crossed. One division per call. Used by every GEMV that
// reads rows side by side (AVX2 row_dots and intdot2, AVX-512 row_dots512
// and intdot).
template <int R>
struct RowStreamAhead {
  size_t near, wrap_rows_bytes, wrap_from;
  RowStreamAhead(size_t ahead, size_t rb) {
    if (R == 1 || rb == 0) {
      near = ahead;
      wrap_rows_bytes = 0;
      wrap_from = ~size_t{0};
    } else {  // ahead = q rows + rem bytes: q whole rows of the stream are q * R rows in memory
      const size_t q = ahead / rb, rem = ahead % rb;
      near = rem + q * R * rb;
      wrap_rows_bytes = (R - 1) * rb;
      wrap_from = rb - rem;  // offsets from here on cross one more row boundary
    }
  }
  size_t at(size_t offset) const { return near + (offset >= wrap_from ? wrap_rows_bytes : 0); }
};

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
  for (int i = 0; i < 4; ++i)
    w[i] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8 * i))));
}

// Hardware (F16C) half -> float for block scales; bit-identical to math::f16_to_f32.
inline float h2f(const uint8_t* p) {
  uint16_t h;
  memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// The 32 weights of a Q8_0, Q4_0 or Q4_1 block as four fp32 vectors (elements
// 0..7, ..., 24..31), exactly dequant_row_scalar's values: Q8_0 q d; Q4_0
// q d - 8 d = (q - 8) d (both products exact in fp32); Q4_1 q d + m, one
// rounding.
template <DType t>
inline void dequant_block(const uint8_t* blk, __m256 w[4]) {
  static_assert(t == DType::Q8_0 || t == DType::Q4_0 || t == DType::Q4_1);
  const float dv = h2f(blk);
  __m256 off = _mm256_setzero_ps();
  if constexpr (t == DType::Q8_0) {
    load_q8(reinterpret_cast<const int8_t*>(blk + 2), w);
  } else if constexpr (t == DType::Q4_0) {
    load_q4(blk + 2, w);
    off = _mm256_set1_ps(-8.0f * dv);
  } else {
    load_q4(blk + 4, w);
    off = _mm256_set1_ps(h2f(blk + 2));
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
// reloading it for every row costs bandwidth). Quantized types take the integer dot paths below. A row's
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
      // line of 16-bit weights (as in intdot2::rows_dot below).
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
      dequant_row_scalar(t, row + ct * (t == DType::F32 ? 4 : 2), cols - ct, tmp);
      for (int k = 0; k < N; ++k)
        for (int64_t j = ct; j < cols; ++j) macc[r][k] += tmp[j - ct] * x[k * ldx + j];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < N; ++k) out[r * N + k] = hsum(_mm256_add_ps(acc0[r][k], acc1[r][k])) + macc[r][k];
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

// Through memory: GCC 12's _mm512_reduce_add_ps trips -Wuninitialized.
inline float hsum512(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  return hsum(_mm256_add_ps(_mm256_load_ps(lanes), _mm256_load_ps(lanes + 8)));
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
    // Software prefetch per 64-byte line of 16-bit weights, in the row's
    // stream: 512 bytes ahead into L1 and 3 KiB ahead into L2, as intdot's
    // quantized GEMV does. On Zen 4 (2026-11-26, interleaved A/B rounds in one
    // process), against 1 KiB into L1 alone: an 8192^2 F16 GEMV 1.18-1.21x
    // faster, the 1.88B model's stream of 183 F16/BF16 matrices 1.22-1.68x
    // (docs/PERFORMANCE.md, "F16/BF16 GEMV prefetching into L2").
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
    for (int k = 0; k < N; ++k) out[r * N + k] = hsum512(_mm512_add_ps(acc0[r][k], acc1[r][k])) + macc[r][k];
}

#if defined(__AVX512VNNI__) && defined(__AVX512VBMI__)
#define REDWOOD_INTDOT 1
// ---- quantized decode with integer dot products ------------------------------
// Decoding (n <= 8), a quantized GEMV is bound by the work per weight, not by
// memory, when it widens every weight to fp32. Here the weights stay bytes and
// VPDPBUSD does 64 byte products per instruction. The activations become
// integers: the few elements x that meet in one int32 lane are rounded to
// X = round(x * 2^(B - e)), e their exponent (max |x| < 2^e), B = 22 (4-bit)
// or 21 (Q8_0, whose lane of four products must fit in int32), so |X| <= 2^B
// and the rounding error is at most 2^-B of the lane's largest element, the
// order of fp32 summation rounding; X is split into three signed bytes
// (X = 65536 d2 + 256 d1 + d0) and the three digit planes are dotted with the
// weight bytes, shifting in between. Each int32 lane then holds the exact
// integer dot of its weights, converted to fp32 once and scaled by (weight
// block scale) * 2^(e - B).
// Weights go in groups of 64 bytes of quants: four 4-bit blocks (their 16-byte
// quants gathered by one VPERMT2B, low and high nibbles as two vectors) or two
// Q8_0 blocks. Unsigned weight bytes meet signed digits: Q4_0's q - 8 and
// Q8_0's q + 128 - 128 are offset corrections computed once per activation
// lane (exact in wrapping int32: every lane's true value fits). Q4_1's offset
// m adds m * sum(x) per lane, in fp32. Q5_0 and Q5_1 are Q4_0 and Q4_1 with
// each element's fifth bit (from the block's qh, gathered and moved to bit 4
// of each byte by VPMULTISHIFTQB) OR-ed in; Q5_0's correction is 16 sum(X).
// IQ4_NL and IQ4_XS are laid out as Q4_0; their nibbles index ggml's int8
// levels, looked up (VPSHUFB) as level + 128 (1..241) with the correction
// 128 sum(X); |level| <= 127 over eight elements per lane fits int32 with
// B = 21 (the uncorrected sum may wrap). IQ4_XS's 64 bytes of quants per group
// are contiguous in its super-block; the scale of a lane is d (sub-block scale - 32).
namespace intdot {

// Rows per rows_dot call at n = 1: over rows longer than kLongRow columns
// (32 vector registers), and over shorter ones (more independent work per
// step; faster for SmolLM2's 576-column LM head in a test outside the repository).
constexpr int kLongRows = 8, kShortRows = 4;

template <DType t>
struct Layout {
  static constexpr bool q4 = t != DType::Q8_0;                           // two nibble planes (Q5: plus a fifth bit)
  static constexpr bool iq4 = t == DType::IQ4_NL || t == DType::IQ4_XS;  // nibbles index the int8 levels
  static constexpr bool q5 = t == DType::Q5_0 || t == DType::Q5_1;       // a fifth bit per element in qh
  static constexpr bool has_min = t == DType::Q4_1 || t == DType::Q5_1;  // offset m, added in fp32
  static constexpr int bits = q4 ? (iq4 ? 21 : 22) : 21;                 // B above
  static constexpr int planes = q4 ? 2 : 1;                              // weight vectors per group (low, high nibbles)
  static constexpr int blocks = q4 ? 4 : 2;                              // quantized blocks per group
  static constexpr int lanes_per_block = 16 / blocks;                    // int32 lanes holding one block's products
  // Block bytes (IQ4_XS: an eighth of its 136-byte super-block; qidx and didx unused).
  static constexpr int bb = t == DType::Q4_0 || t == DType::IQ4_NL ? 18
                            : t == DType::Q4_1                     ? 20
                            : t == DType::IQ4_XS                   ? 17
                            : t == DType::Q5_0                     ? 22
                            : t == DType::Q5_1                     ? 24
                                                                   : 34;
  static constexpr int qhoff = has_min ? 4 : 2;                   // Q5: qh's offset in a block (after d, m)
  static constexpr int qoff = has_min ? 4 + 4 * q5 : 2 + 4 * q5;  // quants' offset in a block
  static constexpr int group_bytes = blocks * bb;                 // 72, 80, 88, 96, 68: two 64-byte loads (IQ4_XS: one)
  // Activation bytes per group: 3 digit planes x planes vectors, then per lane
  // 2^(e - B) (fp32), then the offset correction (int32; has_min: the lane's sum(x), fp32).
  static constexpr int xbytes = 3 * planes * 64 + 64 + 64;
  // The integer correction: (offset of the unsigned weight bytes) sum(X), as a shift of sum(X).
  static constexpr int corr_shift = t == DType::Q4_0 ? 3 : t == DType::Q5_0 ? 4 : 7;
  // Gather indexes: byte k of a weight vector, the scale word of lane k, and
  // (Q5) qh's four bytes of block k / 16, twice per 64-bit lane.
  alignas(64) uint8_t qidx[64]{};
  alignas(64) uint16_t didx[32]{};
  alignas(64) uint8_t qhidx[64]{};
  constexpr Layout() {
    for (int k = 0; k < 64; ++k) {
      const int per = q4 ? 16 : 32;
      qidx[k] = static_cast<uint8_t>((k / per) * bb + qoff + k % per);
      qhidx[k] = static_cast<uint8_t>((k / 16) * bb + qhoff + k % 4);
    }
    for (int k = 0; k < 32; ++k) didx[k] = static_cast<uint16_t>((k % 16) / lanes_per_block * bb / 2);
  }
};

// Within each 128-bit lane (four floats: the elements that meet in one int32
// lane of the dot), every element becomes the four's max / sum. The max is of
// magnitudes' bit patterns (non-negative floats order as integers), so a NaN
// wins too, unlike with VMAXPS.
inline __m512i max4(__m512i a) {
  a = _mm512_max_epu32(a, _mm512_shuffle_epi32(a, _MM_PERM_CDAB));
  return _mm512_max_epu32(a, _mm512_shuffle_epi32(a, _MM_PERM_BADC));
}
inline __m512i magnitude(__m512 v) {
  return _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff));
}
inline __m512 sum4(__m512 a) {
  a = _mm512_add_ps(a, _mm512_permute_ps(a, 0xb1));
  return _mm512_add_ps(a, _mm512_permute_ps(a, 0x4e));
}
inline __m512i sum4(__m512i a) {
  a = _mm512_add_epi32(a, _mm512_shuffle_epi32(a, _MM_PERM_CDAB));
  return _mm512_add_epi32(a, _mm512_shuffle_epi32(a, _MM_PERM_BADC));
}
// One value per group of four (elements 0, 4, 8, 12), as four floats / ints.
inline __m128 per_group(__m512 v) {
  return _mm512_castps512_ps128(_mm512_maskz_compress_ps(0x1111, v));
}
inline __m128i per_group(__m512i v) {
  return _mm512_castsi512_si128(_mm512_maskz_compress_epi32(0x1111, v));
}

inline uint64_t load_u64(const uint8_t* p) {
  uint64_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

// Lays x (cols, a multiple of 32) out for rows_dot<t>: groups of
// Layout<t>::xbytes. The elements that meet in one int32 lane (Q4: 4 low- and
// 4 high-nibble positions; Q8_0: 4) share one exponent e, the biased exponent
// of their largest magnitude less 126 (so max |x| < 2^e; zero and subnormal
// maxima give e = -126, still exact in X): X = x * 2^(B - e) by VSCALEFPS,
// rounded to nearest even. A non-finite element makes its lane's scale NaN.
template <DType t>
void prepare(const float* x, int64_t cols, uint8_t* out) {
  using L = Layout<t>;
  const int64_t nb = cols / 32, groups = (nb + L::blocks - 1) / L::blocks;
  // Every byte of a whole group is written below; a partial last group's
  // missing blocks must read as zeros (no digits, zero scale).
  if (nb % L::blocks) memset(out + (groups - 1) * L::xbytes, 0, L::xbytes);
  const __m512i bias = _mm512_set1_epi32(126 + L::bits), inf_exp = _mm512_set1_epi32(255);
  // v's 16 elements with lane maxima m: digit planes at pos (bytes) of plane; returns X.
  auto put = [&](uint8_t* g, __m512 v, __m512i biased, int plane, int pos) {
    const __mmask16 finite = _mm512_cmplt_epi32_mask(biased, inf_exp);
    const __m512i X =
        _mm512_maskz_cvtps_epi32(finite, _mm512_scalef_ps(v, _mm512_cvtepi32_ps(_mm512_sub_epi32(bias, biased))));
    const __m512i d0 = _mm512_srai_epi32(_mm512_slli_epi32(X, 24), 24);
    const __m512i y = _mm512_srai_epi32(_mm512_sub_epi32(X, d0), 8);
    const __m512i d1 = _mm512_srai_epi32(_mm512_slli_epi32(y, 24), 24);
    const __m512i d2 = _mm512_srai_epi32(_mm512_sub_epi32(y, d1), 8);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(g + (0 * L::planes + plane) * 64 + pos), _mm512_cvtepi32_epi8(d2));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(g + (1 * L::planes + plane) * 64 + pos), _mm512_cvtepi32_epi8(d1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(g + (2 * L::planes + plane) * 64 + pos), _mm512_cvtepi32_epi8(d0));
    return X;
  };
  // Four lanes' scales 2^(e - B) (NaN where not finite) at lane index `lane`.
  auto put_scales = [&](uint8_t* g, __m512i biased, int lane) {
    const __mmask16 finite = _mm512_cmplt_epi32_mask(biased, inf_exp);
    const __m512 sc = _mm512_mask_scalef_ps(_mm512_set1_ps(std::numeric_limits<float>::quiet_NaN()), finite,
                                            _mm512_set1_ps(1.0f), _mm512_cvtepi32_ps(_mm512_sub_epi32(biased, bias)));
    _mm_storeu_ps(reinterpret_cast<float*>(g + 3 * L::planes * 64) + lane, per_group(sc));
  };
  auto exponents = [](__m512i m) { return _mm512_srli_epi32(m, 23); };
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* g = out + (b / L::blocks) * L::xbytes;
    uint8_t* corr = g + 3 * L::planes * 64 + 64;
    const int bl = static_cast<int>(b % L::blocks);
    const __m512 v0 = _mm512_loadu_ps(x + b * 32), v1 = _mm512_loadu_ps(x + b * 32 + 16);
    if constexpr (L::q4) {  // lane k of the block: elements 4k..4k+3 of both halves
      const __m512i e = exponents(max4(_mm512_max_epu32(magnitude(v0), magnitude(v1))));
      const __m512i X = _mm512_add_epi32(put(g, v0, e, 0, bl * 16), put(g, v1, e, 1, bl * 16));
      put_scales(g, e, bl * 4);
      // The correction (offset) sum(X): Q4_0 8, Q5_0 16, IQ4 128 (level + 128)
      if constexpr (!L::has_min)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(corr) + bl, per_group(_mm512_slli_epi32(sum4(X), L::corr_shift)));
      else  // Q4_1, Q5_1: m sum(x), in fp32
        _mm_storeu_ps(reinterpret_cast<float*>(corr) + bl * 4, per_group(sum4(_mm512_add_ps(v0, v1))));
    } else {  // Q8_0, lane k of the block: elements 4k..4k+3; sum((q + 128) X) - 128 sum(X)
      for (int h = 0; h < 2; ++h) {
        const __m512 v = h ? v1 : v0;
        const __m512i e = exponents(max4(magnitude(v)));
        const __m512i X = put(g, v, e, 0, bl * 32 + h * 16);
        put_scales(g, e, bl * 8 + h * 4);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(corr) + bl * 2 + h, per_group(_mm512_slli_epi32(sum4(X), 7)));
      }
    }
  }
}

// Dot products of R weight rows (row_bytes apart) with N prepared token
// vectors (xstride bytes apart): each weight group is loaded and unpacked once
// for all N tokens. A row's arithmetic is the same for every R and N.
// out[r * N + k] is row r, token k.
template <DType t, int N, int R>
void rows_dot(const uint8_t* p, size_t row_bytes, int64_t cols, const uint8_t* xq, size_t xstride, float* out) {
  using L = Layout<t>;
  static constexpr L lay{};
  const __m512i qidx = _mm512_load_si512(lay.qidx), didx = _mm512_load_si512(lay.didx);
  [[maybe_unused]] const __m512i midx = _mm512_add_epi16(didx, _mm512_set1_epi16(1));  // Q4_1/Q5_1's m follows d
  // Q5: qh's bit i (low nibbles) or 16 + i (high) of element i to bit 4 of its
  // byte (VPMULTISHIFTQB takes 8 bits from any offset, wrapping in the qword).
  [[maybe_unused]] const __m512i qhidx = _mm512_load_si512(lay.qhidx);
  [[maybe_unused]] const __m512i hlo = _mm512_set_epi8(
      11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 63, 62, 61, 60, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 63, 62, 61, 60, 11,
      10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 63, 62, 61, 60, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 63, 62, 61, 60);
  [[maybe_unused]] const __m512i hhi = _mm512_add_epi8(hlo, _mm512_set1_epi8(16));
  [[maybe_unused]] const __m512i bit4 = _mm512_set1_epi8(0x10);
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  [[maybe_unused]] const __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80));
  // IQ4: level + 128 for each nibble, in every 128-bit lane.
  [[maybe_unused]] const __m512i levels = _mm512_xor_si512(
      _mm512_set4_epi64(static_cast<int64_t>(math::kIq4nlLevelsHi), static_cast<int64_t>(math::kIq4nlLevelsLo),
                        static_cast<int64_t>(math::kIq4nlLevelsHi), static_cast<int64_t>(math::kIq4nlLevelsLo)),
      sign);
  constexpr bool xs = t == DType::IQ4_XS;
  // IQ4_XS, group h of a super-block: 64-bit lane m holds sub-block j = 4h + m/2,
  // whose scale's low 4 bits are bits 32 + 4j of the super-block's first eight
  // bytes (d, scales_h, scales_l) and whose high 2 bits are bits 16 + 2j.
  [[maybe_unused]] const __m512i xs_lo[2] = {_mm512_set_epi64(44, 44, 40, 40, 36, 36, 32, 32),
                                             _mm512_set_epi64(60, 60, 56, 56, 52, 52, 48, 48)};
  [[maybe_unused]] const __m512i xs_hi[2] = {_mm512_set_epi64(18, 18, 16, 16, 14, 14, 12, 12),
                                             _mm512_set_epi64(26, 26, 24, 24, 22, 22, 20, 20)};
  const int64_t nb = cols / 32, groups = (nb + L::blocks - 1) / L::blocks;
  // Both 64-byte loads of a group are plain where the row has 128 bytes left
  // from its start (reading into the next group is harmless); the last groups'
  // loads are masked to the row (masked loads that split cache lines are slow,
  // so only there). IQ4_XS: one load per group, always inside its super-block.
  const int64_t row_len = nb * L::bb;
  const int64_t plain_groups = xs ? groups : row_len >= 128 ? (row_len - 128) / L::group_bytes + 1 : 0;
  __m512 acc[R][N], macc[R][N];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < N; ++k) acc[r][k] = macc[r][k] = _mm512_setzero_ps();
  const RowStreamAhead<R> pf(1024, row_bytes), pf_l2(3072, row_bytes);
  for (int64_t gi = 0; gi < groups; ++gi) {
    const bool plain = gi < plain_groups;
    const int64_t rem = row_len - gi * L::group_bytes;  // bytes left in the row
    const __mmask64 mlo = rem >= 64 ? ~0ull : (1ull << rem) - 1;
    const __mmask64 mhi = rem >= 128 ? ~0ull : rem > 64 ? (1ull << (rem - 64)) - 1 : 0;
    // The group's offset in its row (IQ4_XS: its super-block's, plus 64 for the second half).
    const size_t off = xs ? static_cast<size_t>(gi / 2 * 136 + gi % 2 * 64) : static_cast<size_t>(gi * L::group_bytes);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const uint8_t* a = p + r * row_bytes + off;
      // Software prefetch 1 KiB ahead in each row's stream into L1: in the Zen 5
      // VM's ~75 GB/s state it took the 4-bit GEMV from ~0.65 to ~0.8 of the
      // copy bandwidth (2 KiB: ~0.75). Past the row's end, into the same row of
      // the next R (RowStreamAhead; on Zen 4, 8192^2 Q4_0 1.22x and 2048-column
      // rows 1.56x faster than with the address in the next row). And 3 KiB
      // ahead into L2: the L1 prefetch alone was too close to hide DRAM's
      // latency in a model's stream of matrices (Zen 4, 1.88B Q4_0 decode
      // 19-20 -> 27-28 tok/s; docs/PERFORMANCE.md, "prefetching into L2").
      if (plain) {
        _mm_prefetch(reinterpret_cast<const char*>(a) + pf.at(off), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(a) + pf_l2.at(off), _MM_HINT_T1);
      }
      __m512i q, v0, v1;
      if constexpr (xs) {
        q = _mm512_loadu_si512(a + 8);
      } else {
        v0 = plain ? _mm512_loadu_si512(a) : _mm512_maskz_loadu_epi8(mlo, a);
        v1 = plain ? _mm512_loadu_si512(a + 64) : _mm512_maskz_loadu_epi8(mhi, a + 64);
        q = _mm512_permutex2var_epi8(v0, qidx, v1);
      }
      __m512i lo, hi;
      if constexpr (L::q4) {
        lo = _mm512_and_si512(q, low4);
        hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), low4);
        if constexpr (L::iq4) {
          lo = _mm512_shuffle_epi8(levels, lo);
          hi = _mm512_shuffle_epi8(levels, hi);
        }
        if constexpr (L::q5) {  // lo | (bit & 0x10), hi likewise
          const __m512i qh = _mm512_permutex2var_epi8(v0, qhidx, v1);
          lo = _mm512_ternarylogic_epi32(lo, _mm512_multishift_epi64_epi8(hlo, qh), bit4, 0xf8);
          hi = _mm512_ternarylogic_epi32(hi, _mm512_multishift_epi64_epi8(hhi, qh), bit4, 0xf8);
        }
      } else {
        lo = hi = _mm512_xor_si512(q, sign);  // q + 128, unsigned
      }
      __m512 d;
      if constexpr (xs) {  // per lane d (scale - 32) of its sub-block
        const uint8_t* sb = a - gi % 2 * 64;
        const __m512i h = _mm512_set1_epi64(load_u64(sb));
        const __m512i sc =
            _mm512_ternarylogic_epi64(_mm512_srlv_epi64(h, xs_lo[gi % 2]),
                                      _mm512_and_si512(_mm512_srlv_epi64(h, xs_hi[gi % 2]), _mm512_set1_epi64(0x30)),
                                      _mm512_set1_epi64(0x0f), 0xec);  // (lo & 0x0f) | hi
        d = _mm512_mul_ps(
            _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_shuffle_epi32(sc, _MM_PERM_CCAA), _mm512_set1_epi32(32))),
            _mm512_set1_ps(h2f(sb)));
      } else {
        // The scales (and mins) of the group's blocks: in the first 64 bytes, except Q5's last block's.
        const __m512i dw = L::q5 ? _mm512_permutex2var_epi16(v0, didx, v1) : _mm512_permutexvar_epi16(didx, v0);
        d = _mm512_maskz_cvtph_ps(0xffff, _mm512_castsi512_si256(dw));
      }
      [[maybe_unused]] __m512 m;
      if constexpr (L::has_min) {
        const __m512i mw = L::q5 ? _mm512_permutex2var_epi16(v0, midx, v1) : _mm512_permutexvar_epi16(midx, v0);
        m = _mm512_maskz_cvtph_ps(0xffff, _mm512_castsi512_si256(mw));
      }
#pragma GCC unroll 16
      for (int k = 0; k < N; ++k) {
        const uint8_t* xg = xq + k * xstride + gi * L::xbytes;
        __m512i s;
        if constexpr (L::q4) {
          s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_load_si512(xg));
          s = _mm512_slli_epi32(_mm512_dpbusd_epi32(s, hi, _mm512_load_si512(xg + 64)), 8);
          s = _mm512_dpbusd_epi32(s, lo, _mm512_load_si512(xg + 128));
          s = _mm512_slli_epi32(_mm512_dpbusd_epi32(s, hi, _mm512_load_si512(xg + 192)), 8);
          s = _mm512_dpbusd_epi32(s, lo, _mm512_load_si512(xg + 256));
          s = _mm512_dpbusd_epi32(s, hi, _mm512_load_si512(xg + 320));
        } else {
          s = _mm512_slli_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_load_si512(xg)), 8);
          s = _mm512_slli_epi32(_mm512_dpbusd_epi32(s, lo, _mm512_load_si512(xg + 64)), 8);
          s = _mm512_dpbusd_epi32(s, lo, _mm512_load_si512(xg + 128));
        }
        const uint8_t* tail = xg + 3 * L::planes * 64;
        if constexpr (!L::has_min) s = _mm512_sub_epi32(s, _mm512_load_si512(tail + 64));
        const __m512 scale = _mm512_mul_ps(d, _mm512_load_ps(reinterpret_cast<const float*>(tail)));
        acc[r][k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), scale, acc[r][k]);
        if constexpr (L::has_min)
          macc[r][k] = _mm512_fmadd_ps(m, _mm512_load_ps(reinterpret_cast<const float*>(tail + 64)), macc[r][k]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < N; ++k) out[r * N + k] = hsum512(_mm512_add_ps(acc[r][k], macc[r][k]));
}

// The K-quants Q2_K, Q3_K, Q4_K, Q5_K and Q6_K on the Q8_0-prepared activations: 64 elements
// per group in their natural order, four per int32 lane, B = 21. A
// super-block's weights are rebuilt as one unsigned byte per element, 64 at a
// time, so that each vector is one prepared group and each of its lanes lies
// within one sub-block:
//  - Q4_K: 32 bytes of qs hold elements 0..31 (low nibbles) and 32..63 (high)
//    of a 64-element group: broadcast to both halves, shifted by 0 or 4, masked.
//    Lanes 0-7 and 8-15 are sub-blocks 2g and 2g + 1 (scale d sc_j); the mins
//    dmin m_j times the token's sums over 32 elements (fp32) are added apart.
//    Q5_K adds 16 where the element's bit (2g or 2g + 1) of qh[l] is set.
//  - Q6_K: 64 bytes of ql and 32 of qh (broadcast) give elements 0..63 and
//    64..127 of a 128-element half (low nibbles | qh bits 0-3 << 4, high
//    nibbles | qh bits 4-7); lanes 4j..4j+3 are 16-element sub-block j (scale
//    d sc_j), and q - 32 is the exact integer correction 32 sum(X) per lane,
//    a quarter of Q8_0's 128 sum(X).
//  - Q3_K: 32 bytes of qs (broadcast) hold elements 0..127 of a half as bit
//    pairs 2k, 2k + 1 (quarter k): shifted by 2k per half of the vector, masked;
//    plus 4 where the element's bit 4h + k of hmask[l] is set. Sub-blocks as
//    Q6_K's (scale d (sc_j - 32)); q - 4 is the correction 4 sum(X).
//  - Q2_K: Q3_K's bit pairs without hmask; scale d sc_j, and the mins dmin m_j
//    against the prepared, exact 128 sum(X) of each lane (so the 16-element
//    sub-blocks need no sums of their own).
// Per lane, the integer dot times the sub-block's scale (rounded to fp32 as
// math::dequant_q4_k / dequant_q6_k round it) times the lane's 2^(e - B).
namespace kquant {
// 256 bits in both halves (the masked form: GCC 12's unmasked one reads an
// undefined vector that -Wuninitialized reports under the sanitizers).
inline __m512i bcast256(const uint8_t* p) {
  return _mm512_maskz_broadcast_i64x4(0xff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
constexpr int kSuperBytesQ2K = 84, kSuperBytesQ3K = 110, kSuperBytesQ4K = 144, kSuperBytesQ5K = 176,
              kSuperBytesQ6K = 210;
// Lane j of group g takes scale (permutation index) sub[g][j]: Q4_K/Q5_K
// (two 32-element sub-blocks per group): 2g + j / 8; Q6_K (four 16-element
// ones): 4g + j / 4, i.e. 8h + j / 4 and 8h + 4 + j / 4 for the groups of half h.
struct LaneSubs {
  alignas(64) int32_t sub[4][16]{};
  constexpr explicit LaneSubs(int lanes_per_sub) {
    for (int g = 0; g < 4; ++g)
      for (int j = 0; j < 16; ++j) sub[g][j] = (16 / lanes_per_sub) * g + j / lanes_per_sub;
  }
};
// Q4_K's eight 6-bit scales (bytes 0-7) and mins (8-15) of the 12 packed bytes
// (math::kquant_scale_min): j < 4 in the low six bits of bytes j and j + 4;
// j >= 4 from the nibbles of bytes j + 4 and the top two bits of bytes j - 4, j.
inline void q4k_scales_mins(const uint8_t* s, uint64_t& sc, uint64_t& mn) {
  uint32_t a, b, c;
  memcpy(&a, s, 4), memcpy(&b, s + 4, 4), memcpy(&c, s + 8, 4);
  const uint32_t low6 = 0x3f3f3f3f, nib = 0x0f0f0f0f, top2 = 0x03030303;
  sc = (a & low6) | static_cast<uint64_t>((c & nib) | (((a >> 6) & top2) << 4)) << 32;
  mn = (b & low6) | static_cast<uint64_t>(((c >> 4) & nib) | (((b >> 6) & top2) << 4)) << 32;
}
// Q3_K's sixteen 6-bit scales (offset 32 not removed) of the 12 packed bytes
// (math::q3k_scale): scale i's low 4 bits are the low (i < 8) or high nibble of
// byte i % 8, its high 2 bits bits 2 (i / 4) of byte 8 + i % 4.
inline void q3k_scales(const uint8_t* s, uint64_t& lo8, uint64_t& hi8) {
  uint32_t a, b, c;
  memcpy(&a, s, 4), memcpy(&b, s + 4, 4), memcpy(&c, s + 8, 4);
  const uint32_t nib = 0x0f0f0f0f, two = 0x03030303;
  lo8 = ((a & nib) | ((c & two) << 4)) | static_cast<uint64_t>((b & nib) | (((c >> 2) & two) << 4)) << 32;
  hi8 = (((a >> 4) & nib) | (((c >> 4) & two) << 4)) | static_cast<uint64_t>(((b >> 4) & nib) | (((c >> 6) & two) << 4))
                                                           << 32;
}
}  // namespace kquant

// xs: the tokens' sums over each 32 elements (Q4_K's mins), xs_stride floats apart.
template <DType t, int N, int R>
void rows_dot_k(const uint8_t* p, size_t row_bytes, int64_t cols, const uint8_t* xq, size_t xstride, const float* xs,
                int64_t xs_stride, float* out) {
  static_assert(t == DType::Q2_K || t == DType::Q3_K || t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K);
  using L = Layout<DType::Q8_0>;
  constexpr bool q4k = t == DType::Q4_K || t == DType::Q5_K, q5k = t == DType::Q5_K;  // q4k: their scales and mins
  constexpr bool q3k = t == DType::Q3_K, q2k = t == DType::Q2_K;
  constexpr int bb = t == DType::Q4_K ? kquant::kSuperBytesQ4K
                     : q5k            ? kquant::kSuperBytesQ5K
                     : q3k            ? kquant::kSuperBytesQ3K
                     : q2k            ? kquant::kSuperBytesQ2K
                                      : kquant::kSuperBytesQ6K;
  constexpr int qs_at = q5k ? 48 : 16;  // Q5_K: d, dmin, scales, then qh[32] before qs
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  [[maybe_unused]] const __m512i bits45 = _mm512_set1_epi8(0x30);
  // Per 16-bit word: the shift for the low and the high 256 bits.
  const __m512i shift_lo_hi =
      q4k ? _mm512_set_epi64(0x0004000400040004, 0x0004000400040004, 0x0004000400040004, 0x0004000400040004, 0, 0, 0, 0)
          : _mm512_set_epi64(0x0002000200020002, 0x0002000200020002, 0x0002000200020002, 0x0002000200020002,
                             0x0004000400040004, 0x0004000400040004, 0x0004000400040004, 0x0004000400040004);
  [[maybe_unused]] const __m512i shift_b =
      _mm512_set_epi64(0x0002000200020002, 0x0002000200020002, 0x0002000200020002, 0x0002000200020002, 0, 0, 0, 0);
  // Q3_K and Q2_K, group g: quarters k = 2 (g % 2) (low 256 bits) and k + 1 (high).
  [[maybe_unused]] const __m512i q3_shift[2] = {
      shift_b, _mm512_set_epi64(0x0006000600060006, 0x0006000600060006, 0x0006000600060006, 0x0006000600060006,
                                0x0004000400040004, 0x0004000400040004, 0x0004000400040004, 0x0004000400040004)};
  static constexpr kquant::LaneSubs subs(q4k ? 8 : 4);
  __m512i sub_idx[4];
  [[maybe_unused]] __m512i qh_bit[4];
  for (int g = 0; g < 4; ++g) {
    sub_idx[g] = _mm512_load_si512(subs.sub[g]);
    // Q5_K: qh bits 2g, 2g + 1; Q3_K: hmask bits 4h + k = 2g, 2g + 1 (h = g / 2, k = 2 (g % 2))
    if constexpr (q5k || q3k)
      qh_bit[g] = _mm512_mask_blend_epi64(0xf0, _mm512_set1_epi8(static_cast<char>(1 << (2 * g))),
                                          _mm512_set1_epi8(static_cast<char>(2 << (2 * g))));
  }
  __m512 acc[R][N];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < N; ++k) acc[r][k] = _mm512_setzero_ps();
  const RowStreamAhead<R> pf(1024, row_bytes), pf_l2(3072, row_bytes);  // as in rows_dot
  const int64_t supers = cols / 256;
  for (int64_t sb = 0; sb < supers; ++sb) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const uint8_t* blk = p + r * row_bytes + sb * bb;
      const size_t in_row = static_cast<size_t>(sb * bb);
      // One prefetch per ~70 bytes, as rows_dot's one per 72-byte group (Q3_K: 55, Q2_K: 42).
      constexpr int pf_step = t == DType::Q4_K ? 72 : q5k ? 88 : q3k ? 55 : q2k ? 42 : 70;
#pragma GCC unroll 4
      for (int off = 0; off < bb; off += pf_step) {
        _mm_prefetch(reinterpret_cast<const char*>(blk) + off + pf.at(in_row + off), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(blk) + off + pf_l2.at(in_row + off), _MM_HINT_T1);
      }
      __m512 scales;                 // d sc_j, j = 0..7 (Q4_K, Q5_K) or 0..15 (Q6_K)
      [[maybe_unused]] __m512i qh5;  // Q5_K's qh, Q3_K's hmask
      if constexpr (q5k) qh5 = kquant::bcast256(blk + 16);
      if constexpr (q3k) qh5 = kquant::bcast256(blk);
      [[maybe_unused]] __m256 mins;
      [[maybe_unused]] __m512 mins16;  // Q2_K: dmin m_j / 128, against the prepared 128 sum(X)
      if constexpr (q4k) {
        uint64_t sc, mn;
        kquant::q4k_scales_mins(blk + 4, sc, mn);
        const __m256 d = _mm256_set1_ps(h2f(blk)), dmin = _mm256_set1_ps(h2f(blk + 2));
        scales = _mm512_castps256_ps512(
            _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(sc))))));
        mins =
            _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(mn)))));
      } else if constexpr (q2k) {
        const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)), nib = _mm_set1_epi8(0x0f);
        scales = _mm512_mul_ps(_mm512_set1_ps(h2f(blk + 80)),
                               _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(sc, nib))));
        mins16 = _mm512_mul_ps(_mm512_set1_ps(h2f(blk + 82) * (1.0f / 128)),
                               _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(sc, 4), nib))));
      } else if constexpr (q3k) {
        uint64_t lo8, hi8;
        kquant::q3k_scales(blk + 96, lo8, hi8);
        scales = _mm512_mul_ps(
            _mm512_set1_ps(h2f(blk + 108)),
            _mm512_cvtepi32_ps(_mm512_sub_epi32(
                _mm512_cvtepu8_epi32(_mm_set_epi64x(static_cast<int64_t>(hi8), static_cast<int64_t>(lo8))),
                _mm512_set1_epi32(32))));
      } else {
        scales = _mm512_mul_ps(
            _mm512_set1_ps(h2f(blk + 208)),
            _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192)))));
      }
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {
        __m512i v;
        if constexpr (q4k) {
          const __m512i q = kquant::bcast256(blk + qs_at + 32 * g);
          v = _mm512_and_si512(_mm512_srlv_epi16(q, shift_lo_hi), low4);
          if constexpr (q5k)  // + 16 where bit 2g (low half) or 2g + 1 (high half) of qh[l] is set
            v = _mm512_mask_add_epi8(v, _mm512_test_epi8_mask(qh5, qh_bit[g]), v, _mm512_set1_epi8(16));
        } else if constexpr (q3k || q2k) {  // Q3_K: + 4 where the hmask bit is set
          const __m512i q = kquant::bcast256(blk + (q3k ? 32 : 16) + 32 * (g / 2));
          v = _mm512_and_si512(_mm512_srlv_epi16(q, q3_shift[g % 2]), _mm512_set1_epi8(3));
          if constexpr (q3k) v = _mm512_mask_add_epi8(v, _mm512_test_epi8_mask(qh5, qh_bit[g]), v, _mm512_set1_epi8(4));
        } else {  // group g: half g / 2, its low (g even) or high nibbles
          const __m512i ql = _mm512_loadu_si512(blk + 64 * (g / 2));
          const __m512i qh = kquant::bcast256(blk + 128 + 32 * (g / 2));
          const __m512i nib = (g & 1) ? _mm512_srli_epi16(ql, 4) : ql;
          const __m512i hi = (g & 1) ? _mm512_srlv_epi16(qh, shift_b) : _mm512_sllv_epi16(qh, shift_lo_hi);
          v = _mm512_ternarylogic_epi64(_mm512_and_si512(nib, low4), hi, bits45, 0xf8);  // a | (b & c)
        }
        const __m512 lane_scale = _mm512_permutexvar_ps(sub_idx[g], scales);
        [[maybe_unused]] __m512 lane_min;
        if constexpr (q2k) lane_min = _mm512_permutexvar_ps(sub_idx[g], mins16);
#pragma GCC unroll 8
        for (int k = 0; k < N; ++k) {
          const uint8_t* xg = xq + k * xstride + (sb * 4 + g) * L::xbytes;
          __m512i s = _mm512_slli_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), v, _mm512_load_si512(xg)), 8);
          s = _mm512_slli_epi32(_mm512_dpbusd_epi32(s, v, _mm512_load_si512(xg + 64)), 8);
          s = _mm512_dpbusd_epi32(s, v, _mm512_load_si512(xg + 128));
          if constexpr (q3k || t == DType::Q6_K)
            s = _mm512_sub_epi32(s, _mm512_srai_epi32(_mm512_load_si512(xg + 256), q3k ? 5 : 2));
          const __m512 xsc = _mm512_load_ps(reinterpret_cast<const float*>(xg + 192));
          acc[r][k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(lane_scale, xsc), acc[r][k]);
          if constexpr (q2k)  // - dmin m_j sum(x), from the exact integer 128 sum(X) per lane
            acc[r][k] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(xg + 256)), _mm512_mul_ps(lane_min, xsc),
                                         acc[r][k]);
        }
      }
      if constexpr (q4k)  // the mins in the low eight lanes
        for (int k = 0; k < N; ++k)
          acc[r][k] = _mm512_mask3_fnmadd_ps(_mm512_zextps256_ps512(mins),
                                             _mm512_zextps256_ps512(_mm256_loadu_ps(xs + k * xs_stride + sb * 8)),
                                             acc[r][k], 0x00ff);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < N; ++k) out[r * N + k] = hsum512(acc[r][k]);
}

}  // namespace intdot
#endif
#pragma GCC diagnostic pop
#endif
#endif

#if defined(REDWOOD_AVX2) && !defined(REDWOOD_INTDOT)
#define REDWOOD_INTDOT2 1
// ---- quantized decode with integer dot products, AVX2 ------------------------
// The same idea as intdot above for machines without AVX-512 VNNI: the
// weights stay small integers, the activations become exact integers, and the
// dot products run on VPMADDWD (16 16-bit products per instruction, summed in
// pairs into int32 lanes); widening every weight to fp32 instead costs more
// work per weight than a core can do at memory speed. The four elements that
// meet in one int32 lane (2j, 2j + 1, 16 + 2j, 17 + 2j of a 32-element block)
// share one exponent e (max |x| < 2^e) and are rounded to
// X = round(x * 2^(B - e)), B = 24 for 4-bit weights and 21 for Q8_0 (a lane
// of four products must fit in int32), so the rounding is at most 2^-B of the
// lane's largest element. X = 4096 H + L, with L in [-2048, 2048) and H small,
// both int16; the H and L planes are dotted with the weights (Q8_0's q as
// int16, the 4-bit types' unsigned q) and combined as (H-dot << 12) + L-dot,
// each lane's exact integer dot, converted to fp32 once and scaled by
// (weight block scale) * 2^(e - B); Q4_0's offset (8 sum(X) per lane) and
// Q4_1's m * sum(x) are applied in fp32.
namespace intdot2 {

// Rows per rows_dot call at n = 1: four over rows longer than kLongRow
// columns; shorter rows one at a time, so consecutive rows are one sequential
// stream for the prefetchers (four interleaved short streams cost a third of
// the 1.88B Q4_0 model's decode).
constexpr int kLongRows = 4, kShortRows = 1;

// IQ4_NL and IQ4_XS take this path too (n = 1): a nibble's level is an int8,
// so after a byte-shuffle lookup a 32-element (sub-)block is a Q8_0 block,
// prepared activations and all (IQ4_XS: scale d (scale_j - 32) per sub-block).
template <DType t>
struct Layout {
  static constexpr bool q4 = t == DType::Q4_0 || t == DType::Q4_1;  // unsigned 4-bit q; else int8 values
  static constexpr int bits = q4 ? 24 : 21;                         // B above
  static constexpr int shift = 12;                                  // X = H << shift + L
  static constexpr int blocks = 1;                                  // quantized blocks per prepared group
  // Bytes per 32 weights (IQ4_XS: its 136-byte super-block holds eight).
  static constexpr int bb = t == DType::Q4_0 || t == DType::IQ4_NL ? 18 : t == DType::Q4_1 ? 20 : 34;
  // Activation bytes per block: H (elements 0..15, 16..31), L (the same), the
  // eight lanes' 2^(e - B) (fp32; NaN where not finite), then Q4_0: the lanes'
  // 8 sum(X) 2^(e - B) (fp32), Q4_1: the lanes' sum(x) (fp32).
  static constexpr int xbytes = 4 * 32 + 32 + (q4 ? 32 : 0);
};

// Lays x (cols, a multiple of 32) out for rows_dot<t>: Layout<t>::xbytes per block.
template <DType t>
void prepare(const float* x, int64_t cols, uint8_t* out) {
  using L = Layout<t>;
  const __m256i absmask = _mm256_set1_epi32(0x7fffffff), inf_exp = _mm256_set1_epi32(255);
  // Maxima of zero or below 2^(B - 125) are treated as 2^(B - 125): X loses
  // nothing that matters (such lanes' products are below 2^-100) and both
  // 2^(B - e) and 2^(e - B) stay normal floats.
  const __m256i min_exp = _mm256_set1_epi32(L::bits + 1), half = _mm256_set1_epi32(1 << (L::shift - 1));
  const __m256 nan = _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN());
  for (int64_t b = 0; b < cols / 32; ++b) {
    uint8_t* g = out + b * L::xbytes;
    __m256 v[4];
    for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(x + b * 32 + 8 * i);
    // Lane maxima of magnitudes' bit patterns (a NaN wins too), per element:
    // a[0] for elements 0..7 and 16..23, a[1] for 8..15 and 24..31.
    __m256i biased[2], fin[2], X[4];
    __m256 sc[2];
    for (int h = 0; h < 2; ++h) {
      __m256i a = _mm256_max_epu32(_mm256_and_si256(_mm256_castps_si256(v[h]), absmask),
                                   _mm256_and_si256(_mm256_castps_si256(v[h + 2]), absmask));
      a = _mm256_max_epu32(a, _mm256_shuffle_epi32(a, _MM_SHUFFLE(2, 3, 0, 1)));
      biased[h] = _mm256_max_epi32(_mm256_srli_epi32(a, 23), min_exp);
      fin[h] = _mm256_cmpgt_epi32(inf_exp, biased[h]);
      // 2^(126 + B - biased) and 2^(biased - 126 - B), built as exponent fields.
      const __m256 up =
          _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(253 + L::bits), biased[h]), 23));
      sc[h] = _mm256_blendv_ps(
          nan, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_sub_epi32(biased[h], _mm256_set1_epi32(L::bits - 1)), 23)),
          _mm256_castsi256_ps(fin[h]));
      X[h] = _mm256_and_si256(_mm256_cvtps_epi32(_mm256_mul_ps(v[h], up)), fin[h]);
      X[h + 2] = _mm256_and_si256(_mm256_cvtps_epi32(_mm256_mul_ps(v[h + 2], up)), fin[h]);
    }
    // H and L planes as int16 in element order (packs interleaves 128-bit halves).
    for (int part = 0; part < 2; ++part) {  // elements 0..15, 16..31
      const __m256i x0 = X[2 * part], x1 = X[2 * part + 1];
      const __m256i h0 = _mm256_srai_epi32(_mm256_add_epi32(x0, half), L::shift);
      const __m256i h1 = _mm256_srai_epi32(_mm256_add_epi32(x1, half), L::shift);
      const __m256i l0 = _mm256_sub_epi32(x0, _mm256_slli_epi32(h0, L::shift));
      const __m256i l1 = _mm256_sub_epi32(x1, _mm256_slli_epi32(h1, L::shift));
      _mm256_store_si256(reinterpret_cast<__m256i*>(g + 32 * part),
                         _mm256_permute4x64_epi64(_mm256_packs_epi32(h0, h1), 0xd8));
      _mm256_store_si256(reinterpret_cast<__m256i*>(g + 64 + 32 * part),
                         _mm256_permute4x64_epi64(_mm256_packs_epi32(l0, l1), 0xd8));
    }
    // Lane j's scale: element 2j of sc[0] (j < 4) or 2(j - 4) of sc[1].
    _mm256_store_ps(
        reinterpret_cast<float*>(g + 128),
        _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(sc[0], sc[1], 0x88)), 0xd8)));
    if constexpr (t == DType::Q4_0) {  // sum((q - 8) X) = sum(q X) - 8 sum(X): the lanes' 8 sum(X) 2^(e - B) in fp32
      const __m256i s0 = _mm256_add_epi32(X[0], X[2]), s1 = _mm256_add_epi32(X[1], X[3]);
      const __m256 lane_scale = _mm256_load_ps(reinterpret_cast<const float*>(g + 128));
      _mm256_store_ps(reinterpret_cast<float*>(g + 160),
                      _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_slli_epi32(
                                        _mm256_permute4x64_epi64(_mm256_hadd_epi32(s0, s1), 0xd8), 3)),
                                    lane_scale));
    }
    if constexpr (t == DType::Q4_1)  // the block's sum(x) in eight partial sums (any lane order: m is per block)
      _mm256_store_ps(reinterpret_cast<float*>(g + 160),
                      _mm256_hadd_ps(_mm256_add_ps(v[0], v[2]), _mm256_add_ps(v[1], v[3])));
  }
}

// The 32 weights of a block as two int16 vectors (elements 0..15, 16..31):
// Q8_0's q, the 4-bit types' unsigned q.
template <DType t>
inline void load_block(const uint8_t* blk, __m256i& w0, __m256i& w1) {
  if constexpr (t == DType::IQ4_NL || t == DType::IQ4_XS) {  // blk: the 16 nibble bytes
    __m128i lo, hi;
    iq4_levels(blk, lo, hi);
    w0 = _mm256_cvtepi8_epi16(lo);
    w1 = _mm256_cvtepi8_epi16(hi);
  } else if constexpr (t == DType::Q8_0) {
    w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2)));
    w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 18)));
  } else {
    const __m256i q = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + Layout<t>::bb - 16)));
    const __m256i low4 = _mm256_set1_epi16(0x0f);
    w0 = _mm256_and_si256(q, low4);
    w1 = _mm256_srli_epi16(q, 4);
  }
}

// Every fp16 value as fp32 (256 KiB, as in ggml): a block scale becomes one
// broadcast load, where VPBROADCASTW + VCVTPH2PS cost vector-pipe work per
// block that the decode loop cannot spare. Scales of one matrix take few
// distinct values, so the table's hot part stays in cache.
struct HalfTable {
  std::vector<float> f = std::vector<float>(65536);
  HalfTable() {
    for (uint32_t h = 0; h < 65536; ++h) f[h] = f16_to_f32(static_cast<uint16_t>(h));
  }
};
inline const float* half_table() {
  static const HalfTable table;
  return table.f.data();
}

inline __m256 load_half_bcast(const float* table, const uint8_t* p) {
  uint16_t h;
  memcpy(&h, p, 2);
  return _mm256_broadcast_ss(table + h);
}

// Dot products of R weight rows (row_bytes apart) with N prepared token
// vectors (xstride bytes apart): each block is loaded and widened once for all
// N tokens. A row's arithmetic is the same for every R and N.
// out[r * N + k] is row r, token k.
template <DType t, int N, int R>
void rows_dot(const uint8_t* p, size_t row_bytes, int64_t cols, const uint8_t* xq, size_t xstride, float* out) {
  using L = Layout<t>;
  const int64_t nb = cols / 32;
  const float* const h2f_table = half_table();
  // Q4_1's m sum(x) terms go to their own accumulators (macc): with both FMAs
  // of a block on one chain, a single row (R = N = 1) was bound by the chain's
  // latency, two FMAs (8 cycles on Zen 3) per block.
  constexpr int RM = t == DType::Q4_1 ? R : 1, NM = t == DType::Q4_1 ? N : 1;
  // IQ4_XS: the current super-block's eight sub-block scales per row, set at its first sub-block.
  alignas(32) float djs[t == DType::IQ4_XS ? R : 1][8];
  __m256 acc[R][N], macc[RM][NM];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < N; ++k) acc[r][k] = _mm256_setzero_ps();
#pragma GCC unroll 16
  for (int r = 0; r < RM; ++r)
    for (int k = 0; k < NM; ++k) macc[r][k] = _mm256_setzero_ps();
  const RowStreamAhead<R> pf(4096, row_bytes);
#pragma GCC unroll 2
  for (int64_t b = 0; b < nb; ++b) {  // two blocks per step: fewer loop instructions (1.88B Q4_0 decode +4-7%)
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const uint8_t* blk = p + r * row_bytes + b * L::bb;
      if constexpr (t == DType::IQ4_XS) blk = p + r * row_bytes + (b >> 3) * 136;  // the super-block
      // Software prefetch 4 KiB ahead in each row's stream, about once per
      // cache line: rows of up to 4096 columns go one at a time, a single
      // sequential stream over consecutive rows (bench_kernels --models-only,
      // 1.88B Q4_0 decode: 13-15 tok/s with 1 KiB here, 16.2-16.3 with 4 KiB).
      // With R rows at a time, what follows a row's end in this stream is the
      // same row of the next R, not the next row, which this call is already
      // reading (an 8192-column Q4_0 row is 4.5 KiB: 9 in 10 prefetches were
      // wasted so; 8192^2 GEMV 20-25% faster, docs/PERFORMANCE.md).
      if (L::q4 || t == DType::IQ4_NL ? (b & 1) == 0 : t == DType::IQ4_XS ? (b & 3) == 0 : true)
        _mm_prefetch(reinterpret_cast<const char*>(blk) + pf.at(static_cast<size_t>(blk - (p + r * row_bytes))),
                     _MM_HINT_T0);
      __m256i w0, w1;
      __m256 d;
      if constexpr (t == DType::IQ4_XS) {
        const int j = static_cast<int>(b & 7);
        if (j == 0) {
          uint16_t h;
          memcpy(&h, blk, 2);
          _mm256_store_ps(djs[r], iq4xs_scales(blk, h2f_table[h]));
        }
        load_block<t>(blk + 8 + 16 * j, w0, w1);
        d = _mm256_broadcast_ss(&djs[r][j]);
      } else {
        load_block<t>(blk + (t == DType::IQ4_NL ? 2 : 0), w0, w1);
        d = load_half_bcast(h2f_table, blk);
      }
      [[maybe_unused]] __m256 m;
      if constexpr (t == DType::Q4_1) m = load_half_bcast(h2f_table, blk + 2);
#pragma GCC unroll 16
      for (int k = 0; k < N; ++k) {
        const uint8_t* xg = xq + k * xstride + b * L::xbytes;
        auto ld = [&](int off) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(xg + off)); };
        const __m256i sh = _mm256_add_epi32(_mm256_madd_epi16(w0, ld(0)), _mm256_madd_epi16(w1, ld(32)));
        const __m256i sl = _mm256_add_epi32(_mm256_madd_epi16(w0, ld(64)), _mm256_madd_epi16(w1, ld(96)));
        const __m256i s = _mm256_add_epi32(_mm256_slli_epi32(sh, L::shift), sl);
        const __m256 xscale = _mm256_load_ps(reinterpret_cast<const float*>(xg + 128));
        // Q4_0: d (sum(q X) 2^(e - B) - 8 sum(X) 2^(e - B)), the offset taken
        // off in fp32 by one FMSUB, one instruction fewer than an integer
        // subtraction before the scaling. sum(q X) < 2^30 is rounded to fp32
        // first: at most 2^-24 of 15 sum(|X|) per lane, still fp32-level.
        if constexpr (t == DType::Q4_0)
          acc[r][k] = _mm256_fmadd_ps(
              _mm256_fmsub_ps(_mm256_cvtepi32_ps(s), xscale, _mm256_load_ps(reinterpret_cast<const float*>(xg + 160))),
              d, acc[r][k]);
        else
          acc[r][k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(d, xscale), acc[r][k]);
        if constexpr (t == DType::Q4_1)
          macc[r][k] = _mm256_fmadd_ps(m, _mm256_load_ps(reinterpret_cast<const float*>(xg + 160)), macc[r][k]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < N; ++k) {
      if constexpr (t == DType::Q4_1)
        out[r * N + k] = hsum(_mm256_add_ps(acc[r][k], macc[r][k]));
      else
        out[r * N + k] = hsum(acc[r][k]);
    }
}

}  // namespace intdot2

// ---- quantized GEMV for 2..8 tokens, AVX2: dequantize once, fp32 FMAs --------
// intdot2 pays its integer dot (about 13 vector instructions) per block and
// token. Dequantizing a block to four fp32 vectors costs about 18, once for
// all tokens, after which a token costs 4 FMAs: cheaper from two tokens up
// (redwood profile-hardware, SmolLM2: see docs/PERFORMANCE.md). Products and
// sums are fp32.
namespace deqdot {

// One weight row against N token vectors (ldx floats apart): out[k].
template <DType t, int N>
void row_dot(const uint8_t* p, int64_t cols, const float* x, int64_t ldx, float* out) {
  constexpr int A = N <= 2 ? 4 : N <= 4 ? 2 : 1;  // accumulators per token: enough FMA chains to hide latency
  constexpr int bb = intdot2::Layout<t>::bb;
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

}  // namespace deqdot
#endif

// The integer dot path this build has, if any (both have the same interface).
#if defined(REDWOOD_INTDOT)
namespace idot = intdot;
#define REDWOOD_IDOT 1
#elif defined(REDWOOD_INTDOT2)
namespace idot = intdot2;
#define REDWOOD_IDOT 1
#endif

// Dequantizes `cols` weights starting at p (a whole number of blocks for the
// quantized types) into out; the same values as dequant_row_scalar.
void dequant_span(DType t, const uint8_t* p, int64_t cols, float* out) {
  if (is_chunked_type(t)) return dequant_chunked(t, p, cols, out);
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
#endif
  dequant_row_scalar(t, p, cols, out);
}

#ifdef REDWOOD_AVX512
// ---- batched pass: fused dequantize + GEMM with 512-bit FMAs -----------------
// Vectors run along the tokens: the activations are transposed once per call
// into panels xt[k][64] (64 tokens, zero-padded), and each weight is broadcast
// from a strip of R rows x 256 columns, dequantized just before the kernel
// that reads it, while the next strip's weights are prefetched (run_rows
// below). A micro-kernel keeps an R x (16 NV) block of
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
    case DType::F16:
    case DType::BF16:
      if (cols % 16 == 0) {
        for (int64_t c = 0; c < cols; c += 16)
          _mm512_storeu_ps(out + c, t == DType::F16 ? load16<DType::F16>(p, c) : load16<DType::BF16>(p, c));
        return;
      }
      return dequant_span(t, p, cols, out);
    default:
      return dequant_span(t, p, cols, out);
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

}  // namespace gemm512
#endif

#if defined(REDWOOD_AVX2) && !defined(REDWOOD_AVX512)
// ---- batched pass: fused dequantize + GEMM with 256-bit FMAs -----------------
// gemm512's scheme for AVX2 machines (16 vector registers): the activations
// are transposed once per call into panels xt[k][16] (16 tokens, zero-padded),
// each 256-column chunk of a row tile is dequantized once and used by every
// panel, and a micro-kernel keeps R rows x 16 tokens of outputs in 12
// registers (R = 6; 12 rows x 8 tokens for a panel of at most 8): per column,
// 2 vector loads and R broadcasts feed 12 FMAs. Every output is one
// sequential fp32 FMA chain over k, so results do not depend on n.
namespace gemm256 {

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

void gemm(const WeightView& w, const float* x, int n, float* y) {
  const int64_t cols = w.cols, rows = w.rows;
  const int n_panels = (n + kTok - 1) / kTok;
  // xt[p][k][16]: panel p holds tokens 16p .. 16p+15 (zero beyond n), kept per
  // calling thread as in gemm512 (matmul is never called from a oneTBB task).
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
                            dequant_span(w.type, src, kc, sc.tile.data() + i * kKc);
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

}  // namespace gemm256
#endif

// Rows longer than this (in columns) are processed eight (AVX-512) or four
// (AVX2, 16 vector registers) at a time at n = 1.
constexpr int64_t kLongRow = 4096;

// Calls f.template operator()<T>() for the T among Ts that equals t, if Keep{}(T)
// (a type that Keep rejects is not instantiated).
template <class Keep, DType... Ts, class F>
void dispatch_type(DType t, F&& f) {
  (
      [&] {
        if constexpr (Keep{}(Ts))
          if (t == Ts) f.template operator()<Ts>();
      }(),
      ...);
}

// Chunked types (dequant.h) that take an integer dot instead: Q5_0, Q5_1,
// IQ4_NL and IQ4_XS go on intdot as Q4_0-like groups at 1..8 tokens (VNNI);
// IQ4_NL and IQ4_XS single tokens on intdot2 as Q8_0 blocks (AVX2 builds
// without VNNI; the rest stays on the chunked path there).
template <int N>
constexpr bool chunked_idot(DType t) {
#if defined(REDWOOD_INTDOT)
  return t == DType::Q5_0 || t == DType::Q5_1 || t == DType::IQ4_NL || t == DType::IQ4_XS;
#elif defined(REDWOOD_INTDOT2)
  return N == 1 && (t == DType::IQ4_NL || t == DType::IQ4_XS);
#else
  return false && t == DType::F32;
#endif
}

#ifdef REDWOOD_IDOT
// The integer dot kernels' rows [b, e) at n tokens: at n = 1, idot::kLongRows
// rows per call over rows longer than kLongRow columns, then kShortRows per
// call; otherwise (and the rest) one row per call. dot.template
// operator()<R, N>(i, out) fills out[r * N + k] for rows i..i+R-1.
template <int N, typename Dot>
void by_row_groups(int64_t b, int64_t e, int64_t rows, int64_t cols, float* y, Dot&& dot) {
  constexpr int kl = idot::kLongRows, ks = idot::kShortRows;
  int64_t i = b;
  if constexpr (N == 1) {
    if (cols > kLongRow)
      for (; i + kl <= e; i += kl) dot.template operator()<kl, 1>(i, y + i);
    for (; i + ks <= e; i += ks) dot.template operator()<ks, 1>(i, y + i);
  }
  float out[N];
  for (; i < e; ++i) {
    dot.template operator()<1, N>(i, out);
    for (int k = 0; k < N; ++k) y[k * rows + i] = out[k];
  }
}
#endif

template <int N>
void gemv_n(const WeightView& w, const float* x, float* y) {
  const int64_t cols = w.cols, rows = w.rows;
#ifdef REDWOOD_IDOT
  // The quantized types take the integer dot path (intdot or intdot2), with activations prepared below.
  constexpr auto intdot_type = [](DType t) {
    return t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q8_0 || chunked_idot<N>(t);
  };
#else
  constexpr auto intdot_type = [](DType) { return false; };
#endif
#ifdef REDWOOD_INTDOT
  // K-quants on the Q8_0-prepared activations (intdot::rows_dot_k), where that
  // is faster than dequantizing to fp32 (chunked_row_dot): Q2_K, Q3_K and Q4_K
  // at every n, Q5_K up to 2 tokens, Q6_K for one (4096^2 out of cache, Zen 4:
  // Q6_K 10-25% slower from 3 tokens, Q5_K from 3 to 6; Q2_K and Q3_K level at 3-5).
  constexpr auto kdot_type = [](DType t) {
    return t == DType::Q2_K || t == DType::Q3_K || t == DType::Q4_K || (t == DType::Q5_K && N <= 2) ||
           (t == DType::Q6_K && N == 1);
  };
#else
  constexpr auto kdot_type = [](DType) { return false; };
#endif
#ifdef REDWOOD_AVX512  // row_dots512 adds Q4_1's m * sum(x) per block
  std::vector<float> xsum;
  const float* xs = nullptr;
  if (w.type == DType::Q4_1 && !intdot_type(w.type)) {
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
#endif
#ifdef REDWOOD_IDOT
  std::vector<uint8_t> xprep;
  const uint8_t* xq = nullptr;
  size_t xstride = 0;
#ifdef REDWOOD_INTDOT2
  constexpr bool deq = N >= 2;  // deqdot above, no prepared activations
#else
  constexpr bool deq = false;
#endif
  if ((intdot_type(w.type) || kdot_type(w.type)) && !deq) {
    auto prepare_tokens = [&]<DType T>() {
      using L = idot::Layout<T>;
      xstride = static_cast<size_t>((cols / 32 + L::blocks - 1) / L::blocks * L::xbytes);
      xprep.resize(N * xstride + 64);
      uint8_t* aligned = xprep.data() + (64 - reinterpret_cast<uintptr_t>(xprep.data()) % 64) % 64;  // aligned loads
      for (int k = 0; k < N; ++k) idot::prepare<T>(x + k * cols, cols, aligned + k * xstride);
      xq = aligned;
    };
    if (w.type == DType::Q4_0)
      prepare_tokens.template operator()<DType::Q4_0>();
    else if (w.type == DType::Q4_1)
      prepare_tokens.template operator()<DType::Q4_1>();
#ifdef REDWOOD_INTDOT
    else if (w.type == DType::Q5_0)
      prepare_tokens.template operator()<DType::Q5_0>();
    else if (w.type == DType::Q5_1)
      prepare_tokens.template operator()<DType::Q5_1>();
    else if (w.type == DType::IQ4_NL || w.type == DType::IQ4_XS)  // the same prepared activations
      prepare_tokens.template operator()<DType::IQ4_NL>();
#endif
    else  // Q8_0 (and IQ4_NL, IQ4_XS on intdot2)
      prepare_tokens.template operator()<DType::Q8_0>();
  }
#endif
#ifdef REDWOOD_AVX2
  // The single-token Q4_K/Q5_K dot's sums over 32 elements (rows_dot_k's: every token's, for the mins).
  std::vector<float> xsum32;
  const bool mins = w.type == DType::Q4_K || w.type == DType::Q5_K;
  const int n_sums = kdot_type(w.type) ? (mins ? N : 0) : N == 1 && needs_sums_of_32(w.type) ? 1 : 0;
  xsum32.resize(n_sums * (cols / 32));
  for (int k = 0; k < n_sums; ++k) sums_of_32(x + k * cols, cols, xsum32.data() + k * (cols / 32));
#endif
  int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1));
  // blocked_range splits down to [grain/2, grain] rows: keep groups of eight (four).
  if (N == 1 && (cols > kLongRow || intdot_type(w.type))) grain = std::max<int64_t>(grain, 16);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, rows, grain), [&](const tbb::blocked_range<int64_t>& r) {
#ifdef REDWOOD_AVX2
    float out[N];
#ifdef REDWOOD_INTDOT
    if (kdot_type(w.type)) {
      auto run_k = [&]<DType T>() {
        const size_t rb = *row_bytes(T, cols);
        by_row_groups<N>(r.begin(), r.end(), rows, cols, y, [&]<int R, int NN>(int64_t i, float* o) {
          intdot::rows_dot_k<T, NN, R>(row_ptr(w, i), rb, cols, xq, xstride, xsum32.data(), cols / 32, o);
        });
      };
      dispatch_type<decltype(kdot_type), DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K>(w.type,
                                                                                                          run_k);
      return;
    }
#endif
    if (is_chunked_type(w.type) && !chunked_idot<N>(w.type)) {
      for (int64_t i = r.begin(); i < r.end(); ++i) {
        chunked_row_dot<N>(w.type, row_ptr(w, i), cols, x, cols, xsum32.data(), out);
        for (int k = 0; k < N; ++k) y[k * rows + i] = out[k];
      }
      return;
    }
    auto run = [&]<DType T>() {
      int64_t i = r.begin();
#ifdef REDWOOD_IDOT
#ifdef REDWOOD_INTDOT2
      if constexpr (intdot_type(T) && deq) {
        for (; i < r.end(); ++i) {
          deqdot::row_dot<T, N>(row_ptr(w, i), cols, x, cols, out);
          for (int k = 0; k < N; ++k) y[k * rows + i] = out[k];
        }
        return;
      }
#endif
      if constexpr (intdot_type(T)) {
        const size_t rb = *row_bytes(w.type, cols);
        by_row_groups<N>(i, r.end(), rows, cols, y, [&]<int R, int NN>(int64_t row, float* o) {
          idot::rows_dot<T, NN, R>(row_ptr(w, row), rb, cols, xq, xstride, o);
        });
        return;
      }
#endif
#ifdef REDWOOD_AVX512
      if (N == 1 && cols > kLongRow) {
        const size_t rb = *row_bytes(w.type, cols);
        for (; i + 8 <= r.end(); i += 8) row_dots512<T, 1, 8>(row_ptr(w, i), rb, cols, x, cols, xs, y + i);
      }
      for (; i < r.end(); ++i) {
        row_dots512<T, N>(row_ptr(w, i), 0, cols, x, cols, xs, out);
        for (int k = 0; k < N; ++k) y[k * rows + i] = out[k];
      }
#else
      if constexpr (!intdot_type(T)) {  // quantized types returned above (intdot2)
        const size_t rb = *row_bytes(w.type, cols);
        if (N == 1 && cols > kLongRow)
          for (; i + 4 <= r.end(); i += 4) row_dots<T, 1, 4>(row_ptr(w, i), rb, cols, x, cols, y + i);
        for (; i < r.end(); ++i) {
          row_dots<T, N>(row_ptr(w, i), 0, cols, x, cols, out);
          for (int k = 0; k < N; ++k) y[k * rows + i] = out[k];
        }
      }
#endif
    };
    // The plain types, and the chunked ones (Q5_0, Q5_1, IQ4_NL, IQ4_XS) where they have an integer dot at
    // this N (the others returned above).
    constexpr auto run_type = [](DType t) {
      return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::Q8_0 || t == DType::Q4_0 ||
             t == DType::Q4_1 || chunked_idot<N>(t);
    };
    dispatch_type<decltype(run_type), DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1,
                  DType::Q5_0, DType::Q5_1, DType::IQ4_NL, DType::IQ4_XS>(w.type, run);
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
#if defined(REDWOOD_AVX512)
  if (n > kGemvMaxN) return gemm512::gemm(w, x, n, y);
#elif defined(REDWOOD_AVX2)
  if (n > kGemvMaxN) return gemm256::gemm(w, x, n, y);
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
