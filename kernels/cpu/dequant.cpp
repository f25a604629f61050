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

// Eight bytes from p as int32 lanes: all of each byte, its low nibble, or its high nibble.
inline __m256i bytes8(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
template <bool kHigh>
inline __m256i nibbles8(const uint8_t* p) {
  const __m256i v = bytes8(p);
  if constexpr (kHigh) return _mm256_srli_epi32(v, 4);
  return _mm256_and_si256(v, _mm256_set1_epi32(15));
}

// Elements and bytes of one block of T, from kernels/common/dtype.h.
template <DType T>
constexpr int kBlockElems = static_cast<int>(dtype_info(T).block_elems);
template <DType T>
constexpr int kBlockBytes = static_cast<int>(dtype_info(T).block_bytes);

// Per-block constants, read once per block: scales (and offsets) of its sub-blocks.
template <DType T>
struct BlockConsts;

// Q5_0 / Q5_1: (q - 16) d = fma(q, d, -16 d) exactly (both products fit fp32);
// q d + m with one rounding, as the reference's fmaf.
template <>
struct BlockConsts<DType::Q5_0> {
  static constexpr int kQh = 2;  // qh's offset in the block
  __m256 d, off;
  __m256i qh;
  explicit BlockConsts(const uint8_t* blk) {
    const float dv = h2f(blk);
    d = _mm256_set1_ps(dv), off = _mm256_set1_ps(-16.0f * dv);
    uint32_t h;
    memcpy(&h, blk + kQh, 4);
    qh = _mm256_set1_epi32(static_cast<int>(h));
  }
};
template <>
struct BlockConsts<DType::Q5_1> {
  static constexpr int kQh = 4;
  __m256 d, off;
  __m256i qh;
  explicit BlockConsts(const uint8_t* blk) {
    d = _mm256_set1_ps(h2f(blk)), off = _mm256_set1_ps(h2f(blk + 2));
    uint32_t h;
    memcpy(&h, blk + kQh, 4);
    qh = _mm256_set1_epi32(static_cast<int>(h));
  }
};
// Q4_K / Q5_K: sub-block j's d_j = d scale_j and m_j = dmin min_j, rounded
// first, then d_j q - m_j with one rounding (fmsub), as the reference.
template <>
struct BlockConsts<DType::Q4_K> {
  alignas(32) float dj[8], mj[8];
  explicit BlockConsts(const uint8_t* blk) {
    // math::kquant_scale_min for all eight sub-blocks at once, four bytes per word:
    // a, b, c are the 12 packed bytes; scales 0-3 and mins 0-3 are a's and b's
    // low 6 bits, scales 4-7 and mins 4-7 c's nibbles with a's and b's top 2 bits above.
    uint32_t a, b, c;
    memcpy(&a, blk + 4, 4), memcpy(&b, blk + 8, 4), memcpy(&c, blk + 12, 4);
    const uint64_t sc = (a & 0x3f3f3f3fu) | uint64_t{(c & 0x0f0f0f0fu) | (((a >> 6) & 0x03030303u) << 4)} << 32;
    const uint64_t mn = (b & 0x3f3f3f3fu) | uint64_t{((c >> 4) & 0x0f0f0f0fu) | (((b >> 6) & 0x03030303u) << 4)} << 32;
    auto widen = [](uint64_t v) {
      return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(v))));
    };
    _mm256_store_ps(dj, _mm256_mul_ps(_mm256_set1_ps(h2f(blk)), widen(sc)));
    _mm256_store_ps(mj, _mm256_mul_ps(_mm256_set1_ps(h2f(blk + 2)), widen(mn)));
  }
};
template <>
struct BlockConsts<DType::Q5_K> : BlockConsts<DType::Q4_K> {
  using BlockConsts<DType::Q4_K>::BlockConsts;
};
// Q6_K: (d scale) (q - 32), one rounding, as the reference.
template <>
struct BlockConsts<DType::Q6_K> {
  alignas(32) float ds[16];
  explicit BlockConsts(const uint8_t* blk) {
    const __m256 d = _mm256_set1_ps(h2f(blk + 208));
    const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192));
    _mm256_store_ps(ds, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc))));
    _mm256_store_ps(ds + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8)))));
  }
};

// Q2_K: sub-block i's d scale_i and dmin min_i rounded first, then one rounding (fmsub).
template <>
struct BlockConsts<DType::Q2_K> {
  alignas(32) float ds[16], ms[16];
  explicit BlockConsts(const uint8_t* blk) {
    const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk));
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m128i s = _mm_and_si128(sc, m4), m = _mm_and_si128(_mm_srli_epi16(sc, 4), m4);
    const __m256 d = _mm256_set1_ps(h2f(blk + 80)), dmin = _mm256_set1_ps(h2f(blk + 82));
    auto widen = [](__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)); };
    _mm256_store_ps(ds, _mm256_mul_ps(d, widen(s)));
    _mm256_store_ps(ds + 8, _mm256_mul_ps(d, widen(_mm_srli_si128(s, 8))));
    _mm256_store_ps(ms, _mm256_mul_ps(dmin, widen(m)));
    _mm256_store_ps(ms + 8, _mm256_mul_ps(dmin, widen(_mm_srli_si128(m, 8))));
  }
};
// Q3_K: (d (scale - 32)) q, the product rounded first as in the reference.
template <>
struct BlockConsts<DType::Q3_K> {
  alignas(32) float ds[16];
  explicit BlockConsts(const uint8_t* blk) {
    // math::q3k_scale for all sixteen at once, four bytes per word.
    uint32_t a, b, c;
    memcpy(&a, blk + 96, 4), memcpy(&b, blk + 100, 4), memcpy(&c, blk + 104, 4);
    constexpr uint32_t m4 = 0x0f0f0f0fu, m2 = 0x03030303u;
    const uint64_t lo = ((a & m4) | ((c & m2) << 4)) | uint64_t{(b & m4) | (((c >> 2) & m2) << 4)} << 32;
    const uint64_t hi = (((a >> 4) & m4) | (((c >> 4) & m2) << 4)) | uint64_t{((b >> 4) & m4) | (((c >> 6) & m2) << 4)}
                                                                         << 32;
    const __m128i sc =
        _mm_sub_epi8(_mm_set_epi64x(static_cast<long long>(hi), static_cast<long long>(lo)), _mm_set1_epi8(32));
    const __m256 d = _mm256_set1_ps(h2f(blk + 108));
    _mm256_store_ps(ds, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc))));
    _mm256_store_ps(ds + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8)))));
  }
};

// IQ4_NL: d times the level, one rounding, as the reference.
template <>
struct BlockConsts<DType::IQ4_NL> {
  __m256 d;
  explicit BlockConsts(const uint8_t* blk) : d(_mm256_set1_ps(h2f(blk))) {}
};
// IQ4_XS: sub-block j's d (scale_j - 32) rounded first, then times the level.
template <>
struct BlockConsts<DType::IQ4_XS> {
  alignas(32) float dj[8];
  explicit BlockConsts(const uint8_t* blk) { _mm256_store_ps(dj, iq4xs_scales(blk, h2f(blk))); }
};

// Q6_K, Q3_K and Q2_K: the scale of elements 32 S + 8 i .. 32 S + 8 i + 7 (one per 16 elements).
constexpr int q6k_scale_index(int S, int i) {
  return 8 * (S >> 2) + 2 * (S & 3) + (i >> 1);
}

// Elements 32 S .. 32 S + 31 of a block as four fp32 vectors, exactly
// math::dequant_*'s values (S is a constant after unrolling).
// With kRaw (Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS only), the quants themselves as
// fp32 integers instead: q (Q4_K, Q5_K), q - 4 (Q3_K), q - 32 (Q6_K) or the
// level (IQ4_XS), unscaled.
template <DType T, int S, bool kRaw = false>
[[gnu::always_inline]] inline void sub_dequant(const uint8_t* blk, const BlockConsts<T>& c, __m256 w[4]) {
  if constexpr (T == DType::Q5_0 || T == DType::Q5_1) {
    const uint8_t* qs = blk + BlockConsts<T>::kQh + 4;
    const __m256i one = _mm256_set1_epi32(1);
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      const __m256i idx = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(8 * i));
      const __m256i hi = _mm256_slli_epi32(_mm256_and_si256(_mm256_srlv_epi32(c.qh, idx), one), 4);
      const __m256i lo = i >= 2 ? nibbles8<true>(qs + 8 * (i & 1)) : nibbles8<false>(qs + 8 * (i & 1));
      w[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_or_si256(lo, hi)), c.d, c.off);
    }
  } else if constexpr (T == DType::IQ4_NL || T == DType::IQ4_XS) {
    __m128i lo, hi;
    iq4_levels(blk + (T == DType::IQ4_NL ? 2 : 8 + 16 * S), lo, hi);
    const __m128i part[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      w[i] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part[i]));
      if constexpr (T == DType::IQ4_NL) {
        w[i] = _mm256_mul_ps(c.d, w[i]);
      } else if constexpr (!kRaw) {
        w[i] = _mm256_mul_ps(_mm256_set1_ps(c.dj[S]), w[i]);
      }
    }
  } else if constexpr (T == DType::Q4_K) {
    const uint8_t* q = blk + 16 + (S >> 1) * 32;
    const __m256 dj = _mm256_set1_ps(c.dj[S]), mj = _mm256_set1_ps(c.mj[S]);
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      w[i] = _mm256_cvtepi32_ps(nibbles8<(S & 1) != 0>(q + 8 * i));
      if constexpr (!kRaw) w[i] = _mm256_fmsub_ps(dj, w[i], mj);
    }
  } else if constexpr (T == DType::Q2_K || T == DType::Q3_K) {
    // 2-bit quants of the 32 elements as bytes (Q3_K: with the hmask bit, minus 4, as int8), then widened.
    constexpr int h = S >> 2, k = S & 3;
    const __m256i qs =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + (T == DType::Q2_K ? 16 : 32) + 32 * h));
    __m256i q = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * k), _mm256_set1_epi8(3));
    if constexpr (T == DType::Q3_K) {
      const __m256i hm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk));
      const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + k), _mm256_set1_epi8(1));
      q = _mm256_sub_epi8(_mm256_or_si256(q, _mm256_slli_epi16(hb, 2)), _mm256_set1_epi8(4));
    }
    const __m128i q0 = _mm256_castsi256_si128(q), q1 = _mm256_extracti128_si256(q, 1);
    const __m128i part[4] = {q0, _mm_srli_si128(q0, 8), q1, _mm_srli_si128(q1, 8)};
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      const int si = q6k_scale_index(S, i);  // Q2_K and Q3_K share Q6_K's scale layout
      if constexpr (T == DType::Q2_K) {
        w[i] = _mm256_fmsub_ps(_mm256_set1_ps(c.ds[si]), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(part[i])),
                               _mm256_set1_ps(c.ms[si]));
      } else {
        w[i] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part[i]));
        if constexpr (!kRaw) w[i] = _mm256_mul_ps(_mm256_set1_ps(c.ds[si]), w[i]);
      }
    }
  } else {
    // Q5_K and Q6_K: the quants of the 32 elements are assembled as bytes in
    // one vector (the bit fields of 32 bytes at once), then widened.
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256i q;
    if constexpr (T == DType::Q5_K) {
      const __m256i qs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 48 + (S >> 1) * 32));
      const __m256i lo = _mm256_and_si256((S & 1) ? _mm256_srli_epi16(qs, 4) : qs, m4);
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16));
      const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(qh, S), _mm256_set1_epi8(1));
      q = _mm256_or_si256(lo, _mm256_slli_epi16(hb, 4));
    } else {
      constexpr int h = S >> 2, k = S & 3;
      const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h + (k & 1) * 32));
      const __m256i lo = _mm256_and_si256((k & 2) ? _mm256_srli_epi16(ql, 4) : ql, m4);
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h));
      const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), _mm256_set1_epi8(3));
      q = _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hb, 4)), _mm256_set1_epi8(32));  // q - 32 in int8
    }
    const __m128i q0 = _mm256_castsi256_si128(q), q1 = _mm256_extracti128_si256(q, 1);
    const __m128i part[4] = {q0, _mm_srli_si128(q0, 8), q1, _mm_srli_si128(q1, 8)};
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      if constexpr (T == DType::Q5_K) {
        w[i] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(part[i]));
        if constexpr (!kRaw) w[i] = _mm256_fmsub_ps(_mm256_set1_ps(c.dj[S]), w[i], _mm256_set1_ps(c.mj[S]));
      } else {
        w[i] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part[i]));
        if constexpr (!kRaw) w[i] = _mm256_mul_ps(_mm256_set1_ps(c.ds[q6k_scale_index(S, i)]), w[i]);
      }
    }
  }
}

// Stores sub-blocks S.. of a block.
template <DType T, int S = 0>
[[gnu::always_inline]] inline void store_subs(const uint8_t* blk, const BlockConsts<T>& c, float* out) {
  if constexpr (S < kBlockElems<T> / 32) {
    __m256 w[4];
    sub_dequant<T, S>(blk, c, w);
    for (int i = 0; i < 4; ++i) _mm256_storeu_ps(out + 32 * S + 8 * i, w[i]);
    store_subs<T, S + 1>(blk, c, out);
  }
}

template <DType T>
void dequant_blocks(const uint8_t* p, int64_t cols, float* out) {
  constexpr int be = kBlockElems<T>, bb = kBlockBytes<T>;
  for (int64_t b = 0; b < cols / be; ++b) {
    const BlockConsts<T> c(p + b * bb);
    store_subs<T>(p + b * bb, c, out + b * be);
  }
}

// Sub-blocks S.. of a block against N tokens (x points at the block's first column).
template <DType T, int N, int A, int S = 0>
[[gnu::always_inline]] inline void dot_subs(const uint8_t* blk, const BlockConsts<T>& c, const float* x, int64_t ldx,
                                            __m256 (&acc)[N][A]) {
  if constexpr (S < kBlockElems<T> / 32) {
    __m256 w[4];
    sub_dequant<T, S>(blk, c, w);
#pragma GCC unroll 8
    for (int k = 0; k < N; ++k)
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i)
        acc[k][i % A] = _mm256_fmadd_ps(w[i], _mm256_loadu_ps(x + k * ldx + 32 * S + 8 * i), acc[k][i % A]);
    dot_subs<T, N, A, S + 1>(blk, c, x, ldx, acc);
  }
}

// Types whose single-token dot takes the scales out of the sums (row_dot1).
template <DType T>
constexpr bool kFactored =
    T == DType::Q3_K || T == DType::Q4_K || T == DType::Q5_K || T == DType::Q6_K || T == DType::IQ4_XS;

// Sub-blocks S.. of a block against one token, scales taken out: each
// sub-block's (each 16 elements' for Q6_K and Q3_K) sum of q x in fp32, then
// times its scale into acc. The mins (Q4_K, Q5_K) are left to the caller.
template <DType T, int S = 0>
[[gnu::always_inline]] inline void dot_subs1(const uint8_t* blk, const BlockConsts<T>& c, const float* x,
                                             __m256 (&acc)[2]) {
  if constexpr (S < 8) {
    __m256 q[4];
    sub_dequant<T, S, true>(blk, c, q);
    auto xv = [&](int i) { return _mm256_loadu_ps(x + 32 * S + 8 * i); };
    if constexpr (T == DType::Q6_K || T == DType::Q3_K) {
      const __m256 s0 = _mm256_fmadd_ps(q[1], xv(1), _mm256_mul_ps(q[0], xv(0)));
      const __m256 s1 = _mm256_fmadd_ps(q[3], xv(3), _mm256_mul_ps(q[2], xv(2)));
      acc[0] = _mm256_fmadd_ps(_mm256_set1_ps(c.ds[q6k_scale_index(S, 0)]), s0, acc[0]);
      acc[1] = _mm256_fmadd_ps(_mm256_set1_ps(c.ds[q6k_scale_index(S, 2)]), s1, acc[1]);
    } else {
      __m256 s = _mm256_mul_ps(q[0], xv(0));
#pragma GCC unroll 3
      for (int i = 1; i < 4; ++i) s = _mm256_fmadd_ps(q[i], xv(i), s);
      acc[S & 1] = _mm256_fmadd_ps(_mm256_set1_ps(c.dj[S]), s, acc[S & 1]);
    }
    dot_subs1<T, S + 1>(blk, c, x, acc);
  }
}

// One row against one token for the kFactored types: per element
// d_j q - m_j summed as d_j sum(q x) - m_j sum(x), with xs the token's sums
// over each 32 elements (sums_of_32). Fewer instructions per weight than
// dequantizing first (the scale and min leave the per-element work); still
// fp32 products and sums, as Q4_1's integer dot that takes m sum(x) out too.
template <DType T>
void row_dot1(const uint8_t* p, int64_t cols, const float* x, const float* xs, float* out) {
  static_assert(kFactored<T>);
  constexpr int bb = kBlockBytes<T>;
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  __m256 macc = _mm256_setzero_ps();
  for (int64_t b = 0; b < cols / 256; ++b) {
    const uint8_t* blk = p + b * bb;
#pragma GCC unroll 4
    for (int off = 0; off < bb; off += 64) _mm_prefetch(reinterpret_cast<const char*>(blk) + 1024 + off, _MM_HINT_T0);
    const BlockConsts<T> c(blk);
    dot_subs1<T>(blk, c, x + b * 256, acc);
    if constexpr (needs_sums_of_32(T)) macc = _mm256_fnmadd_ps(_mm256_load_ps(c.mj), _mm256_loadu_ps(xs + b * 8), macc);
  }
  *out = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), macc));
}

// One row against N token vectors (ldx floats apart): each sub-block is
// dequantized once into registers, then each token takes 4 FMAs on A accumulators.
template <DType T, int N>
void row_dot(const uint8_t* p, int64_t cols, const float* x, int64_t ldx, float* out) {
  constexpr int A = N <= 2 ? 4 : N <= 4 ? 2 : 1;
  constexpr int be = kBlockElems<T>, bb = kBlockBytes<T>;
  __m256 acc[N][A];
#pragma GCC unroll 32
  for (int k = 0; k < N; ++k)
#pragma GCC unroll 4
    for (int a = 0; a < A; ++a) acc[k][a] = _mm256_setzero_ps();
  for (int64_t b = 0; b < cols / be; ++b) {
    const uint8_t* blk = p + b * bb;
#pragma GCC unroll 4
    for (int off = 0; off < bb; off += 64) _mm_prefetch(reinterpret_cast<const char*>(blk) + 1024 + off, _MM_HINT_T0);
    const BlockConsts<T> c(blk);
    dot_subs<T, N, A>(blk, c, x + b * be, ldx, acc);
  }
#pragma GCC unroll 8
  for (int k = 0; k < N; ++k) {
    __m256 s = acc[k][0];
#pragma GCC unroll 4
    for (int a = 1; a < A; ++a) s = _mm256_add_ps(s, acc[k][a]);
    out[k] = hsum(s);
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
    case DType::Q2_K:
      return scalar_blocks<math::BlockQ2_K, 256, math::dequant_q2_k>(p, cols, out);
    case DType::Q3_K:
      return scalar_blocks<math::BlockQ3_K, 256, math::dequant_q3_k>(p, cols, out);
    case DType::Q4_K:
      return scalar_blocks<math::BlockQ4_K, 256, math::dequant_q4_k>(p, cols, out);
    case DType::Q5_K:
      return scalar_blocks<math::BlockQ5_K, 256, math::dequant_q5_k>(p, cols, out);
    case DType::Q6_K:
      return scalar_blocks<math::BlockQ6_K, 256, math::dequant_q6_k>(p, cols, out);
    case DType::IQ4_NL:
      return scalar_blocks<math::BlockIQ4_NL, 32, math::dequant_iq4_nl>(p, cols, out);
    case DType::IQ4_XS:
      return scalar_blocks<math::BlockIQ4_XS, 256, math::dequant_iq4_xs>(p, cols, out);
    default:
      return;  // not a chunked type: the callers never pass one
  }
}

void dequant_chunked(DType t, const uint8_t* p, int64_t cols, float* out) {
#ifdef REDWOOD_AVX2
  switch (t) {
    case DType::Q5_0:
      return dequant_blocks<DType::Q5_0>(p, cols, out);
    case DType::Q5_1:
      return dequant_blocks<DType::Q5_1>(p, cols, out);
    case DType::Q2_K:
      return dequant_blocks<DType::Q2_K>(p, cols, out);
    case DType::Q3_K:
      return dequant_blocks<DType::Q3_K>(p, cols, out);
    case DType::Q4_K:
      return dequant_blocks<DType::Q4_K>(p, cols, out);
    case DType::Q5_K:
      return dequant_blocks<DType::Q5_K>(p, cols, out);
    case DType::Q6_K:
      return dequant_blocks<DType::Q6_K>(p, cols, out);
    case DType::IQ4_NL:
      return dequant_blocks<DType::IQ4_NL>(p, cols, out);
    case DType::IQ4_XS:
      return dequant_blocks<DType::IQ4_XS>(p, cols, out);
    default:
      return;
  }
#else
  dequant_chunked_scalar(t, p, cols, out);
#endif
}

#ifdef REDWOOD_AVX2
void sums_of_32(const float* x, int64_t cols, float* xs) {
  for (int64_t b = 0; b < cols / 32; ++b) {
    const float* v = x + 32 * b;
    xs[b] = hsum(_mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(v), _mm256_loadu_ps(v + 8)),
                               _mm256_add_ps(_mm256_loadu_ps(v + 16), _mm256_loadu_ps(v + 24))));
  }
}

template <int N>
void chunked_row_dot(DType t, const uint8_t* p, int64_t cols, const float* x, int64_t ldx, const float* xs,
                     float* out) {
  if constexpr (N == 1) {
    switch (t) {
      case DType::Q3_K:
        return row_dot1<DType::Q3_K>(p, cols, x, xs, out);
      case DType::Q4_K:
        return row_dot1<DType::Q4_K>(p, cols, x, xs, out);
      case DType::Q5_K:
        return row_dot1<DType::Q5_K>(p, cols, x, xs, out);
      case DType::Q6_K:
        return row_dot1<DType::Q6_K>(p, cols, x, xs, out);
      case DType::IQ4_XS:
        return row_dot1<DType::IQ4_XS>(p, cols, x, xs, out);
      default:
        break;
    }
  }
  switch (t) {
    case DType::Q5_0:
      return row_dot<DType::Q5_0, N>(p, cols, x, ldx, out);
    case DType::Q5_1:
      return row_dot<DType::Q5_1, N>(p, cols, x, ldx, out);
    case DType::Q2_K:
      return row_dot<DType::Q2_K, N>(p, cols, x, ldx, out);
    case DType::Q3_K:
      return row_dot<DType::Q3_K, N>(p, cols, x, ldx, out);
    case DType::Q4_K:
      return row_dot<DType::Q4_K, N>(p, cols, x, ldx, out);
    case DType::Q5_K:
      return row_dot<DType::Q5_K, N>(p, cols, x, ldx, out);
    case DType::Q6_K:
      return row_dot<DType::Q6_K, N>(p, cols, x, ldx, out);
    case DType::IQ4_NL:
      return row_dot<DType::IQ4_NL, N>(p, cols, x, ldx, out);
    case DType::IQ4_XS:
      return row_dot<DType::IQ4_XS, N>(p, cols, x, ldx, out);
    default:
      return;
  }
}
template void chunked_row_dot<1>(DType, const uint8_t*, int64_t, const float*, int64_t, const float*, float*);
template void chunked_row_dot<2>(DType, const uint8_t*, int64_t, const float*, int64_t, const float*, float*);
template void chunked_row_dot<3>(DType, const uint8_t*, int64_t, const float*, int64_t, const float*, float*);
template void chunked_row_dot<4>(DType, const uint8_t*, int64_t, const float*, int64_t, const float*, float*);
template void chunked_row_dot<5>(DType, const uint8_t*, int64_t, const float*, int64_t, const float*, float*);
template void chunked_row_dot<6>(DType, const uint8_t*, int64_t, const float*, int64_t, const float*, float*);
template void chunked_row_dot<7>(DType, const uint8_t*, int64_t, const float*, int64_t, const float*, float*);
template void chunked_row_dot<8>(DType, const uint8_t*, int64_t, const float*, int64_t, const float*, float*);
#endif

}  // namespace redwood::cpu
