// Small SIMD helpers for the CPU backend: AVX2/FMA/F16C when compiled for it,
// portable scalar code otherwise. Results of the two paths differ only in
// float summation order.
#pragma once
#include <cstddef>
#include <cstdint>

// ---- instruction sets ------------------------------------------------------------
// REDWOOD_AVX2: this translation unit is compiled for AVX2 + FMA + F16C (the
// x86-64-v3 baseline, or -march=native on such a CPU); the helpers below use them.
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define REDWOOD_AVX2 1
#include <immintrin.h>
#endif

// REDWOOD_AVX512_KERNELS: the build holds the AVX-512 matmul kernels
// (gemv_avx512.cpp, intdot_avx512_vnni.cpp, gemm_avx512.cpp), which matmul.cpp
// runs only where the CPU has AVX-512. Their code lies between
// REDWOOD_TARGET_AVX512_BEGIN (or _VNNI_BEGIN) and REDWOOD_TARGET_END, after
// every #include: the functions defined there are compiled for AVX-512
// (F, BW, DQ, VL, CD; the VNNI form adds VNNI and VBMI; the VBMI2 form, for
// the packed-weight decoder wpack_avx512.cpp, VBMI and VBMI2), while inline functions
// and templates from headers (the standard library, oneTBB, this file) keep the
// build's baseline, so no AVX-512 code can end up in a copy that other files
// share. (Per-file -mavx512f would compile those copies for AVX-512 too, and
// the linker keeps any one of them.)
#if defined(REDWOOD_AVX2) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define REDWOOD_AVX512_KERNELS 1
#if defined(__clang__)
#define REDWOOD_TARGET_AVX512_BEGIN \
  _Pragma("clang attribute push(__attribute__((target(\"avx512f,avx512bw,avx512dq,avx512vl,avx512cd\"))), apply_to = function)")
#define REDWOOD_TARGET_AVX512_VNNI_BEGIN \
  _Pragma("clang attribute push(__attribute__((target(\"avx512f,avx512bw,avx512dq,avx512vl,avx512cd,avx512vnni,avx512vbmi\"))), apply_to = function)")
#define REDWOOD_TARGET_AVX512_VBMI2_BEGIN \
  _Pragma("clang attribute push(__attribute__((target(\"avx512f,avx512bw,avx512dq,avx512vl,avx512cd,avx512vbmi,avx512vbmi2\"))), apply_to = function)")
#define REDWOOD_TARGET_END _Pragma("clang attribute pop")
#else
#define REDWOOD_TARGET_AVX512_BEGIN \
  _Pragma("GCC push_options") _Pragma("GCC target(\"avx512f,avx512bw,avx512dq,avx512vl,avx512cd\")")
#define REDWOOD_TARGET_AVX512_VNNI_BEGIN \
  _Pragma("GCC push_options")            \
      _Pragma("GCC target(\"avx512f,avx512bw,avx512dq,avx512vl,avx512cd,avx512vnni,avx512vbmi\")")
#define REDWOOD_TARGET_AVX512_VBMI2_BEGIN \
  _Pragma("GCC push_options")             \
      _Pragma("GCC target(\"avx512f,avx512bw,avx512dq,avx512vl,avx512cd,avx512vbmi,avx512vbmi2\")")
#define REDWOOD_TARGET_END _Pragma("GCC pop_options")
#endif
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

#ifdef REDWOOD_AVX2
// e^x for eight floats (Cephes' expf: x = n ln2 + r, |r| <= ln2/2, a degree-7
// polynomial for e^r, 2^n put into the exponent field); within 2 ulp of expf.
// x < -87 gives 0 (expf: a denormal or 0, below 2^-125 either way), x > 88.37
// gives e^88.37; NaN stays NaN.
inline __m256 exp256(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.0f);
  const __m256 keep = _mm256_cmp_ps(x, lo, _CMP_NLT_UQ);  // x >= -87 or NaN
  // max/min return their second operand when either is NaN: x passes through.
  x = _mm256_min_ps(_mm256_set1_ps(88.37f), _mm256_max_ps(lo, x));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // 2^n for n in [-126, 128): n = 128 (x near 88.37) as 2 * 2^127.
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i big = _mm256_cmpgt_epi32(ni, _mm256_set1_epi32(127));
  const __m256 pow2 = _mm256_castsi256_ps(_mm256_slli_epi32(
      _mm256_add_epi32(_mm256_sub_epi32(ni, _mm256_and_si256(big, _mm256_set1_epi32(1))), _mm256_set1_epi32(127)), 23));
  y = _mm256_mul_ps(y, _mm256_blendv_ps(pow2, _mm256_mul_ps(pow2, _mm256_set1_ps(2.0f)), _mm256_castsi256_ps(big)));
  return _mm256_and_ps(y, keep);
}
#endif

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
