// Quantized GEMV (n <= kGemvMaxN) with AVX-512 VNNI integer dot products
// (VPDPBUSD; the byte gathers and shifts need VBMI): Q8_0, Q4_0, Q4_1, Q5_0,
// Q5_1, IQ4_NL, IQ4_XS (gemv) and the K-quants Q2_K..Q6_K (gemv_kquant).
// Compiled for AVX-512 VNNI + VBMI between the REDWOOD_TARGET_ markers (simd.h).
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/common/math.h"
#include "kernels/cpu/dequant.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/simd.h"

#ifdef REDWOOD_AVX512_KERNELS
REDWOOD_TARGET_AVX512_VNNI_BEGIN
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

namespace redwood::cpu::intdot_avx512_vnni {

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
namespace {

// Rows per rows_dot call at n = 1: over rows longer than kLongRow columns
// (32 vector registers), and over shorter ones (more independent work per
// step; faster for a 576-column LM head).
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
      // Software prefetch 1 KiB ahead in each row's stream into L1 (closer to
      // the copy bandwidth than none or 2 KiB), past the row's end into the
      // same row of the next R (RowStreamAhead), and 3 KiB ahead into L2: the
      // L1 prefetch alone was too close to hide DRAM's latency in a model's
      // stream of matrices (measurements: docs/perf-log).
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

}  // namespace

namespace {

// The kernels' rows [b, e) at n tokens: at n = 1, kLongRows rows per call
// over rows longer than kLongRow columns, then kShortRows per call; otherwise
// (and the rest) one row per call. dot.template operator()<R, N>(i, out) fills
// out[r * N + k] for rows i..i+R-1.
template <int N, typename Dot>
void by_row_groups(int64_t b, int64_t e, int64_t rows, int64_t cols, float* y, Dot&& dot) {
  constexpr int kl = kLongRows, ks = kShortRows;
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

// The N tokens laid out for rows_dot<T> (Layout<T>), 64-byte aligned, in buf.
template <DType T, int N>
const uint8_t* prepare_tokens(const float* x, int64_t cols, std::vector<uint8_t>& buf, size_t& xstride) {
  using L = Layout<T>;
  xstride = static_cast<size_t>((cols / 32 + L::blocks - 1) / L::blocks * L::xbytes);
  buf.resize(N * xstride + 64);
  uint8_t* aligned = buf.data() + (64 - reinterpret_cast<uintptr_t>(buf.data()) % 64) % 64;  // aligned loads
  for (int k = 0; k < N; ++k) prepare<T>(x + k * cols, cols, aligned + k * xstride);
  return aligned;
}

template <int N>
void gemv_n(const WeightView& w, const float* x, float* y) {
  const int64_t cols = w.cols, rows = w.rows;
  std::vector<uint8_t> xprep;
  size_t xstride = 0;
  const uint8_t* xq = nullptr;
  switch (w.type) {
    case DType::Q4_0:
      xq = prepare_tokens<DType::Q4_0, N>(x, cols, xprep, xstride);
      break;
    case DType::Q4_1:
      xq = prepare_tokens<DType::Q4_1, N>(x, cols, xprep, xstride);
      break;
    case DType::Q5_0:
      xq = prepare_tokens<DType::Q5_0, N>(x, cols, xprep, xstride);
      break;
    case DType::Q5_1:
      xq = prepare_tokens<DType::Q5_1, N>(x, cols, xprep, xstride);
      break;
    case DType::IQ4_NL:
    case DType::IQ4_XS:  // the same prepared activations
      xq = prepare_tokens<DType::IQ4_NL, N>(x, cols, xprep, xstride);
      break;
    default:  // Q8_0
      xq = prepare_tokens<DType::Q8_0, N>(x, cols, xprep, xstride);
      break;
  }
  const size_t rb = *row_bytes(w.type, cols);
  tbb::parallel_for(
      tbb::blocked_range<int64_t>(0, rows, gemv_grain(cols, N, true)), [&](const tbb::blocked_range<int64_t>& r) {
        auto run = [&]<DType T>() {
          by_row_groups<N>(r.begin(), r.end(), rows, cols, y, [&]<int R, int NN>(int64_t row, float* o) {
            rows_dot<T, NN, R>(row_ptr(w, row), rb, cols, xq, xstride, o);
          });
        };
        switch (w.type) {
          case DType::Q4_0:
            return run.template operator()<DType::Q4_0>();
          case DType::Q4_1:
            return run.template operator()<DType::Q4_1>();
          case DType::Q5_0:
            return run.template operator()<DType::Q5_0>();
          case DType::Q5_1:
            return run.template operator()<DType::Q5_1>();
          case DType::IQ4_NL:
            return run.template operator()<DType::IQ4_NL>();
          case DType::IQ4_XS:
            return run.template operator()<DType::IQ4_XS>();
          default:
            return run.template operator()<DType::Q8_0>();
        }
      });
}

template <int N>
void gemv_kquant_n(const WeightView& w, const float* x, float* y) {
  const int64_t cols = w.cols, rows = w.rows;
  std::vector<uint8_t> xprep;
  size_t xstride = 0;
  const uint8_t* xq = prepare_tokens<DType::Q8_0, N>(x, cols, xprep, xstride);
  // Q4_K and Q5_K: every token's sums over 32 elements, for the mins.
  std::vector<float> xsum32;
  if (w.type == DType::Q4_K || w.type == DType::Q5_K) {
    xsum32.resize(N * (cols / 32));
    for (int k = 0; k < N; ++k) sums_of_32(x + k * cols, cols, xsum32.data() + k * (cols / 32));
  }
  const size_t rb = *row_bytes(w.type, cols);
  tbb::parallel_for(
      tbb::blocked_range<int64_t>(0, rows, gemv_grain(cols, N, false)), [&](const tbb::blocked_range<int64_t>& r) {
        auto run = [&]<DType T>() {
          by_row_groups<N>(r.begin(), r.end(), rows, cols, y, [&]<int R, int NN>(int64_t i, float* o) {
            rows_dot_k<T, NN, R>(row_ptr(w, i), rb, cols, xq, xstride, xsum32.data(), cols / 32, o);
          });
        };
        switch (w.type) {
          case DType::Q2_K:
            return run.template operator()<DType::Q2_K>();
          case DType::Q3_K:
            return run.template operator()<DType::Q3_K>();
          case DType::Q4_K:
            return run.template operator()<DType::Q4_K>();
          case DType::Q5_K:
            return run.template operator()<DType::Q5_K>();
          default:
            return run.template operator()<DType::Q6_K>();
        }
      });
}

}  // namespace

void gemv(const WeightView& w, const float* x, int n, float* y) {
  with_tokens(n, [&]<int N>() { gemv_n<N>(w, x, y); });
}

void gemv_kquant(const WeightView& w, const float* x, int n, float* y) {
  with_tokens(n, [&]<int N>() { gemv_kquant_n<N>(w, x, y); });
}

}  // namespace redwood::cpu::intdot_avx512_vnni

#pragma GCC diagnostic pop
REDWOOD_TARGET_END
#endif
