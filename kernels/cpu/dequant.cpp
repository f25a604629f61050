#include "kernels/cpu/dequant.h"

#include <cstring>

#include "kernels/common/math.h"
#include "kernels/cpu/simd.h"

namespace redwood::cpu {

namespace {

template <typename Block, int kElems, float (*F)(const Block&, int)>
void scalar_blocks(const uint8_t* p, int64_t cols, float* out) {
  for (int64_t b = 0; b < cols / kElems; ++b) {
    Block blk;
    memcpy(&blk, p + b * sizeof(Block), sizeof(Block));
    for (int e = 0; e < kElems; ++e) out[b * kElems + e] = F(blk, e);
  }
}

#ifdef REDWOOD_AVX2
inline float h2f(const uint8_t* p) {
  uint16_t h;
  memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// Eight bytes from p as int32 lanes: their low nibbles, or their high nibbles.
inline __m256i nibbles8(const uint8_t* p, bool high) {
  const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return high ? _mm256_srli_epi32(v, 4) : _mm256_and_si256(v, _mm256_set1_epi32(15));
}
inline __m256i bytes8(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// Q5_0 / Q5_1: (q - 16) d = fma(q, d, -16 d) exactly (both products fit fp32); q d + m with one rounding.
template <DType T>
void q5_blocks(const uint8_t* p, int64_t cols, float* out) {
  constexpr size_t bb = T == DType::Q5_0 ? 22 : 24;
  constexpr int qh_at = T == DType::Q5_0 ? 2 : 4;
  for (int64_t b = 0; b < cols / 32; ++b) {
    const uint8_t* blk = p + b * bb;
    const float dv = h2f(blk);
    const __m256 d = _mm256_set1_ps(dv);
    const __m256 off = _mm256_set1_ps(T == DType::Q5_0 ? -16.0f * dv : h2f(blk + 2));
    uint32_t qh;
    memcpy(&qh, blk + qh_at, 4);
    const __m256i hbits = _mm256_set1_epi32(static_cast<int>(qh));
    const uint8_t* qs = blk + qh_at + 4;
    for (int i = 0; i < 4; ++i) {
      const __m256i idx =
          _mm256_setr_epi32(8 * i, 8 * i + 1, 8 * i + 2, 8 * i + 3, 8 * i + 4, 8 * i + 5, 8 * i + 6, 8 * i + 7);
      const __m256i hi = _mm256_slli_epi32(_mm256_and_si256(_mm256_srlv_epi32(hbits, idx), _mm256_set1_epi32(1)), 4);
      const __m256i q = _mm256_or_si256(nibbles8(qs + 8 * (i & 1), i >= 2), hi);
      _mm256_storeu_ps(out + b * 32 + 8 * i, _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), d, off));
    }
  }
}

// Q4_K / Q5_K: sub-block j's values d_j q - m_j with d_j = d scale_j and
// m_j = dmin min_j rounded first, then one rounding (fmsub), as the reference.
template <DType T>
void k45_blocks(const uint8_t* p, int64_t cols, float* out) {
  constexpr bool five = T == DType::Q5_K;
  constexpr size_t bb = five ? 176 : 144;
  for (int64_t b = 0; b < cols / 256; ++b) {
    const uint8_t* blk = p + b * bb;
    const float d = h2f(blk), dmin = h2f(blk + 2);
    const uint8_t* scales = blk + 4;
    const uint8_t* qh = blk + 16;
    const uint8_t* qs = blk + (five ? 48 : 16);
    float* o = out + b * 256;
    for (int j = 0; j < 8; ++j) {
      int sc, mn;
      math::kquant_scale_min(scales, j, sc, mn);
      const __m256 dj = _mm256_set1_ps(d * static_cast<float>(sc));
      const __m256 mj = _mm256_set1_ps(dmin * static_cast<float>(mn));
      const uint8_t* q = qs + (j >> 1) * 32;
      for (int i = 0; i < 4; ++i) {
        __m256i v = nibbles8(q + 8 * i, j & 1);
        if constexpr (five) {
          const __m256i h = _mm256_and_si256(_mm256_srli_epi32(bytes8(qh + 8 * i), j), _mm256_set1_epi32(1));
          v = _mm256_or_si256(v, _mm256_slli_epi32(h, 4));
        }
        _mm256_storeu_ps(o + 32 * j + 8 * i, _mm256_fmsub_ps(dj, _mm256_cvtepi32_ps(v), mj));
      }
    }
  }
}

// Q6_K: (d scale) (q - 32), the scale's product rounded first as in the reference.
void q6k_blocks(const uint8_t* p, int64_t cols, float* out) {
  for (int64_t b = 0; b < cols / 256; ++b) {
    const uint8_t* blk = p + b * 210;
    const float d = h2f(blk + 208);
    const auto* scales = reinterpret_cast<const int8_t*>(blk + 192);
    float* o = out + b * 256;
    for (int h = 0; h < 2; ++h)
      for (int k = 0; k < 4; ++k)
        for (int i = 0; i < 4; ++i) {
          const __m256i lo = nibbles8(blk + 64 * h + (k & 1) * 32 + 8 * i, k & 2);
          const __m256i hi =
              _mm256_and_si256(_mm256_srli_epi32(bytes8(blk + 128 + 32 * h + 8 * i), 2 * k), _mm256_set1_epi32(3));
          const __m256i q = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
          const __m256 s = _mm256_set1_ps(d * static_cast<float>(scales[8 * h + 2 * k + (i >> 1)]));
          _mm256_storeu_ps(o + 128 * h + 32 * k + 8 * i, _mm256_mul_ps(s, _mm256_cvtepi32_ps(q)));
        }
  }
}
#endif

}  // namespace

void dequant_chunked_scalar(DType t, const uint8_t* p, int64_t cols, float* out) {
  switch (t) {
    case DType::Q5_0:
      return scalar_blocks<math::BlockQ5_0, 32, math::dequant_q5_0>(p, cols, out);
    case DType::Q5_1:
      return scalar_blocks<math::BlockQ5_1, 32, math::dequant_q5_1>(p, cols, out);
    case DType::Q4_K:
      return scalar_blocks<math::BlockQ4_K, 256, math::dequant_q4_k>(p, cols, out);
    case DType::Q5_K:
      return scalar_blocks<math::BlockQ5_K, 256, math::dequant_q5_k>(p, cols, out);
    case DType::Q6_K:
      return scalar_blocks<math::BlockQ6_K, 256, math::dequant_q6_k>(p, cols, out);
    default:
      return;  // not a chunked type: the callers never pass one
  }
}

void dequant_chunked(DType t, const uint8_t* p, int64_t cols, float* out) {
#ifdef REDWOOD_AVX2
  switch (t) {
    case DType::Q5_0:
      return q5_blocks<DType::Q5_0>(p, cols, out);
    case DType::Q5_1:
      return q5_blocks<DType::Q5_1>(p, cols, out);
    case DType::Q4_K:
      return k45_blocks<DType::Q4_K>(p, cols, out);
    case DType::Q5_K:
      return k45_blocks<DType::Q5_K>(p, cols, out);
    case DType::Q6_K:
      return q6k_blocks(p, cols, out);
    default:
      return;
  }
#else
  dequant_chunked_scalar(t, p, cols, out);
#endif
}

}  // namespace redwood::cpu
