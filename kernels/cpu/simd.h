// Small SIMD helpers for the CPU backend: AVX2/FMA/F16C when compiled for it,
// portable scalar code otherwise. Results of the two paths differ only in
// float summation order.
#pragma once
#include <cstddef>
#include <cstdint>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define REDWOOD_AVX2 1
#include <immintrin.h>
#endif

namespace redwood::cpu {

#ifdef REDWOOD_AVX2
inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  __m128 hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  __m128 sh = _mm_movehdup_ps(lo);
  __m128 s = _mm_add_ps(lo, sh);
  sh = _mm_movehl_ps(sh, s);
  s = _mm_add_ss(s, sh);
  return _mm_cvtss_f32(s);
}
#endif

inline float dot(const float* a, const float* b, size_t n) {
  size_t i = 0;
  float s = 0.0f;
#ifdef REDWOOD_AVX2
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  s = hsum(_mm256_add_ps(acc0, acc1));
#endif
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// y += alpha * x
inline void axpy(float alpha, const float* x, float* y, size_t n) {
  size_t i = 0;
#ifdef REDWOOD_AVX2
  const __m256 va = _mm256_set1_ps(alpha);
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
#endif
  for (; i < n; ++i) y[i] += alpha * x[i];
}

inline void scale(float* y, float alpha, size_t n) {
  size_t i = 0;
#ifdef REDWOOD_AVX2
  const __m256 va = _mm256_set1_ps(alpha);
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(va, _mm256_loadu_ps(y + i)));
#endif
  for (; i < n; ++i) y[i] *= alpha;
}

}  // namespace redwood::cpu
