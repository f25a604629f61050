// AVX-512 helpers shared by the AVX-512 kernel files (gemv_avx512.cpp,
// gemm_avx512.cpp, intdot_avx512_vnni.cpp). Include this inside a file's
// REDWOOD_TARGET_AVX512_BEGIN / _VNNI_BEGIN region, after simd.h: it includes
// nothing itself. Internal linkage: each file keeps its own copies, compiled
// for its own instruction set.
#pragma once

#ifndef REDWOOD_AVX512_KERNELS
#error "simd_avx512.h is for the AVX-512 kernel files"
#endif

namespace redwood::cpu {
namespace {

// The 32 4-bit weights of a block as two 16-float vectors (elements 0..15, 16..31).
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

}  // namespace
}  // namespace redwood::cpu
