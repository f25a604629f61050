// Dequantization and dot products for the block types without an integer dot
// kernel (Q5_0, Q5_1, the K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and the
// non-linear IQ4_NL, IQ4_XS: the types of llama.cpp's Q2_K ... Q6_K and IQ4_*
// files and their fallbacks; on AVX-512 VNNI CPUs the K-quants GEMVs (where faster)
// and the Q5_0, Q5_1, IQ4_NL and IQ4_XS GEMVs take intdot_avx512_vnni.cpp
// instead, see matmul.cpp's dispatch table). Both work
// on 32-element sub-blocks dequantized to fp32 vectors. Values are exactly
// math::dequant_* (kernels/common/math.h), the per-element reference that the
// CUDA backend uses too.
#pragma once
#include <cstdint>
#include <cstring>

#include "kernels/common/dtype.h"
#include "kernels/common/math.h"
#include "kernels/cpu/simd.h"

namespace redwood::cpu {

// True for the types above.
constexpr bool is_chunked_type(DType t) {
  return t == DType::Q5_0 || t == DType::Q5_1 || t == DType::Q2_K || t == DType::Q3_K || t == DType::Q4_K ||
         t == DType::Q5_K || t == DType::Q6_K || t == DType::IQ4_NL || t == DType::IQ4_XS;
}

// Dequantizes `cols` weights from p (a whole number of blocks of a chunked type)
// into out. AVX2 where the build has it, else scalar; the same values either way.
void dequant_chunked(DType t, const uint8_t* p, int64_t cols, float* out);

// True where the single-token chunked_row_dot reads xs (the mins of Q4_K and Q5_K).
constexpr bool needs_sums_of_32(DType t) {
  return t == DType::Q4_K || t == DType::Q5_K;
}

// Dot products of one row of a chunked type with N (1..8) token vectors, ldx
// floats apart: out[k]. Each 32-element sub-block is dequantized once into
// registers (the values above), then takes 4 fp32 FMAs per token. For one
// token, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS take their scales out of the sums instead;
// Q4_K and Q5_K then also read xs, the token's sums over each 32 elements
// (sums_of_32; ignored otherwise). AVX2 builds only.
template <int N>
void chunked_row_dot(DType t, const uint8_t* p, int64_t cols, const float* x, int64_t ldx, const float* xs, float* out);
// xs[b] = x[32 b] + ... + x[32 b + 31] for the cols / 32 groups (AVX2 builds only).
void sums_of_32(const float* x, int64_t cols, float* xs);

#ifdef REDWOOD_AVX2
// IQ4_NL / IQ4_XS: 16 bytes of nibbles as the int8 levels of elements 0..15
// (lo, the low nibbles) and 16..31 (hi), by byte-shuffle lookups.
inline void iq4_levels(const uint8_t* qs, __m128i& lo, __m128i& hi) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i levels =
      _mm_set_epi64x(static_cast<long long>(math::kIq4nlLevelsHi), static_cast<long long>(math::kIq4nlLevelsLo));
  const __m128i m4 = _mm_set1_epi8(0x0f);
  lo = _mm_shuffle_epi8(levels, _mm_and_si128(raw, m4));
  hi = _mm_shuffle_epi8(levels, _mm_and_si128(_mm_srli_epi16(raw, 4), m4));
}

// An IQ4_XS super-block's eight sub-block scales d (scale_j - 32), each
// product rounded once as in math::dequant_iq4_xs (d: the block's fp16 d as
// fp32). Scale j's low four bits are nibble j of the 32-bit scales_l, its
// high two bits 2j, 2j + 1 of scales_h.
inline __m256 iq4xs_scales(const uint8_t* blk, float d) {
  uint16_t sh;
  uint32_t sl;
  memcpy(&sh, blk + 2, 2), memcpy(&sl, blk + 4, 4);
  const __m256i lo = _mm256_and_si256(
      _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(sl)), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
      _mm256_set1_epi32(15));
  const __m256i hi = _mm256_and_si256(
      _mm256_srlv_epi32(_mm256_set1_epi32(sh), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)), _mm256_set1_epi32(3));
  const __m256i ls = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
  return _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(ls));
}
#endif

// The scalar reference (one element at a time through math::dequant_*).
void dequant_chunked_scalar(DType t, const uint8_t* p, int64_t cols, float* out);

}  // namespace redwood::cpu
