// AVX2 integer dot GEMV for one token (n = 1): Q8_0, Q4_0, Q4_1, IQ4_NL, IQ4_XS.
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <cstring>
#include <limits>
#include <vector>

#include "kernels/common/math.h"
#include "kernels/cpu/dequant.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/simd.h"

#ifdef REDWOOD_AVX2
namespace redwood::cpu::intdot_avx2 {

using namespace redwood::math;

// Quantized single-token GEMV with AVX2 integer dot products: Q8_0, Q4_0, Q4_1,
// IQ4_NL, IQ4_XS. The same idea as intdot_avx512_vnni.cpp for machines without
// AVX-512 VNNI: the
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
namespace {

// Rows per rows_dot call at n = 1: four over rows longer than kLongRow
// columns; shorter rows one at a time, so consecutive rows are one sequential
// stream for the prefetchers (four interleaved short streams were much slower
// in a model's decode).
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
  for (int64_t b = 0; b < nb; ++b) {  // two blocks per step: fewer loop instructions
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const uint8_t* blk = p + r * row_bytes + b * L::bb;
      if constexpr (t == DType::IQ4_XS) blk = p + r * row_bytes + (b >> 3) * 136;  // the super-block
      // Software prefetch 4 KiB ahead in each row's stream, about once per
      // cache line: rows of up to 4096 columns go one at a time, a single
      // sequential stream over consecutive rows (1 KiB ahead was slower in a
      // model's decode). With R rows at a time, what follows a row's end in
      // this stream is the same row of the next R, not the next row, which
      // this call is already reading (an 8192-column Q4_0 row is 4.5 KiB: 9 in
      // 10 prefetches would land in rows already read; measurements: docs/perf-log).
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

}  // namespace

void gemv(const WeightView& w, const float* x, int n, float* y) {
  const int64_t cols = w.cols, rows = w.rows;
  auto prepare_tokens = [&]<DType T>(std::vector<uint8_t>& buf) {
    buf.resize(static_cast<size_t>(cols / 32 * Layout<T>::xbytes) + 64);
    uint8_t* aligned = buf.data() + (64 - reinterpret_cast<uintptr_t>(buf.data()) % 64) % 64;  // aligned loads
    prepare<T>(x, cols, aligned);
    return static_cast<const uint8_t*>(aligned);
  };
  std::vector<uint8_t> xprep;
  const uint8_t* xq = w.type == DType::Q4_0   ? prepare_tokens.template operator()<DType::Q4_0>(xprep)
                      : w.type == DType::Q4_1 ? prepare_tokens.template operator()<DType::Q4_1>(xprep)
                                              : prepare_tokens.template operator()<DType::Q8_0>(xprep);  // and IQ4
  const size_t rb = *row_bytes(w.type, cols);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, rows, gemv_grain(cols, 1, true)),
                    [&](const tbb::blocked_range<int64_t>& r) {
                      auto run = [&]<DType T>() {
                        // kLongRows rows per call over rows longer than kLongRow columns, then kShortRows.
                        int64_t i = r.begin();
                        if (cols > kLongRow)
                          for (; i + kLongRows <= r.end(); i += kLongRows)
                            rows_dot<T, 1, kLongRows>(row_ptr(w, i), rb, cols, xq, 0, y + i);
                        for (; i + kShortRows <= r.end(); i += kShortRows)
                          rows_dot<T, 1, kShortRows>(row_ptr(w, i), rb, cols, xq, 0, y + i);
                      };
                      switch (w.type) {
                        case DType::Q4_0:
                          return run.template operator()<DType::Q4_0>();
                        case DType::Q4_1:
                          return run.template operator()<DType::Q4_1>();
                        case DType::IQ4_NL:
                          return run.template operator()<DType::IQ4_NL>();
                        case DType::IQ4_XS:
                          return run.template operator()<DType::IQ4_XS>();
                        default:
                          return run.template operator()<DType::Q8_0>();
                      }
                    });
}

}  // namespace redwood::cpu::intdot_avx2
#endif
