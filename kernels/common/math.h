// Per-element and per-block math shared by the CPU and CUDA backends.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/common/hd.h"
#if defined(__CUDACC__)
#include <cuda_fp16.h>
#endif

namespace redwood::math {

// IEEE half -> float, bit-exact for normals, subnormals, inf and NaN (on the
// device the hardware conversion: the same values; a NaN stays NaN, its
// payload may differ).
RD_HD float f16_to_f32(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));
#else
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        mant <<= 1;
        ++e;
      } while ((mant & 0x400u) == 0);
      mant &= 0x3ffu;
      bits = sign | (uint32_t)(112 - e) << 23 | mant << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 112) << 23 | mant << 13;
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
#endif
}

// float -> IEEE half, round to nearest even.
RD_HD uint16_t f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0));
  if (absx >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  // overflow -> inf
  if (absx < 0x38800000u) {                                    // subnormal or zero
    if (absx < 0x33000000u) return (uint16_t)sign;
    const uint32_t e = absx >> 23;
    const uint32_t m = (absx & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
    return (uint16_t)(sign | r);
  }
  uint32_t r = absx - 0x38000000u;
  r = (r + 0xfffu + ((r >> 13) & 1)) >> 13;
  return (uint16_t)(sign | r);
}

RD_HD float bf16_to_f32(uint16_t h) {
  const uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

RD_HD uint16_t f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);  // quiet NaN
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

// ggml block layouts (little-endian, packed).
struct BlockQ8_0 {
  uint16_t d;  // f16 scale
  int8_t qs[32];
};
struct BlockQ4_0 {
  uint16_t d;  // f16 scale; value = (nibble - 8) * d
  uint8_t qs[16];
};
struct BlockQ4_1 {
  uint16_t d, m;  // value = nibble * d + m
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20);

// Element j (0..31) of a block: low nibbles hold elements 0..15, high 16..31.
RD_HD float dequant_q8_0(const BlockQ8_0& b, int j) {
  return f16_to_f32(b.d) * b.qs[j];
}
// 32 floats -> one Q8_0 block, ggml's reference rounding (quantize_row_q8_0_ref,
// byte for byte on finite input): d = max|x| / 127 stored as f16 (nearest
// even; past 65504 * 127 it is inf, as F16 rows overflow), q = round(x / d)
// half away from zero, 1/d taken before d is rounded; a zero block stores
// d = 0 (q = 0 also where 1/d overflows). A block holding a NaN or an
// infinity stores d = NaN and q = 0: every element of it reads back as NaN
// (ggml's result there depends on where the NaN sits). Dequantized, d * q is
// exact in float (an 11-bit d times a 7-bit q).
RD_HD void quantize_q8_0(const float* x, BlockQ8_0& b) {
  float amax = 0.0f;
  bool finite = true;
  for (int i = 0; i < 32; ++i) {
    const float a = fabsf(x[i]);
    if (!(a <= 3.40282347e+38f)) finite = false;  // NaN compares false
    amax = a > amax ? a : amax;
  }
  if (!finite) {
    b.d = 0x7e00;  // f16 quiet NaN
    for (int i = 0; i < 32; ++i) b.qs[i] = 0;
    return;
  }
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  b.d = f32_to_f16(d);
  const bool tiny = !(id <= 3.40282347e+38f);  // d subnormal, 1/d overflows: d rounds to f16 0, so q = 0
  for (int i = 0; i < 32; ++i) b.qs[i] = tiny ? 0 : static_cast<int8_t>(roundf(x[i] * id));
}
RD_HD float dequant_q4_0(const BlockQ4_0& b, int j) {
  const int q = j < 16 ? (b.qs[j] & 0xf) : (b.qs[j - 16] >> 4);
  return f16_to_f32(b.d) * (q - 8);
}
RD_HD float dequant_q4_1(const BlockQ4_1& b, int j) {
  const int q = j < 16 ? (b.qs[j] & 0xf) : (b.qs[j - 16] >> 4);
  return f16_to_f32(b.d) * q + f16_to_f32(b.m);
}

// 5-bit blocks: a 4-bit low part as in Q4_0/Q4_1 plus bit j of the 32-bit
// little-endian qh. (Byte arrays, not uint32_t: blocks are only 2-aligned.)
struct BlockQ5_0 {
  uint16_t d;  // value = (q - 16) * d
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ5_1 {
  uint16_t d, m;  // value = q * d + m
  uint8_t qh[4];
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24);

RD_HD int q5_quant(const uint8_t* qs, const uint8_t* qh, int j) {
  const int lo = j < 16 ? (qs[j] & 0xf) : (qs[j - 16] >> 4);
  return lo | (((qh[j >> 3] >> (j & 7)) & 1) << 4);
}
RD_HD float dequant_q5_0(const BlockQ5_0& b, int j) {
  return f16_to_f32(b.d) * (q5_quant(b.qs, b.qh, j) - 16);
}
RD_HD float dequant_q5_1(const BlockQ5_1& b, int j) {
  return fmaf(f16_to_f32(b.d), (float)q5_quant(b.qs, b.qh, j), f16_to_f32(b.m));
}

// K-quants: 256-element super-blocks (ggml's QK_K). Q4_K and Q5_K have eight
// 32-element sub-blocks, each with a 6-bit scale and a 6-bit min packed into
// 12 bytes; value = d * scale_j * q - dmin * min_j. Within each 64 elements
// the 32 low nibbles of qs come first, then the 32 high nibbles.
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[32];  // bit (j) of qh[l]: 5th bit of element 32 j + l
  uint8_t qs[128];
};
// Q6_K: sixteen 16-element sub-blocks with int8 scales; value = d * scale * (q - 32),
// q = 4 bits of ql | 2 bits of qh << 4.
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);
// Q2_K and Q3_K: sixteen 16-element sub-blocks, 2-bit quants; in each 128-element
// half h, quarter k (32 elements) takes bits 2k, 2k + 1 of qs[32 h + l].
// Q2_K: scales[i] = scale | min << 4 (4 bits each); value = d scale q - dmin min.
struct BlockQ2_K {
  uint8_t scales[16];
  uint8_t qs[64];
  uint16_t d, dmin;
};
// Q3_K: a third bit in hmask (bit 4 h + k of hmask[l]; clear means q - 4), and
// 6-bit scales stored with an offset of 32; value = d (scale - 32) q.
struct BlockQ3_K {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];
  uint16_t d;
};
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110);

// Scale and min of sub-block j (0..7) from the 12 packed bytes (ggml's get_scale_min_k4).
RD_HD void kquant_scale_min(const uint8_t* s, int j, int& scale, int& min) {
  if (j < 4) {
    scale = s[j] & 63;
    min = s[j + 4] & 63;
  } else {
    scale = (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4);
    min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}
// Element e (0..255) of a super-block. d * scale and dmin * min are rounded
// to float first, as ggml does; the AVX2 dequantizer computes the same values.
RD_HD float dequant_q4_k(const BlockQ4_K& b, int e) {
  const int j = e >> 5, l = e & 31;
  int sc, mn;
  kquant_scale_min(b.scales, j, sc, mn);
  const uint8_t byte = b.qs[(j >> 1) * 32 + l];
  const int q = (j & 1) ? byte >> 4 : byte & 0xf;
  return fmaf(f16_to_f32(b.d) * (float)sc, (float)q, -(f16_to_f32(b.dmin) * (float)mn));
}
RD_HD float dequant_q5_k(const BlockQ5_K& b, int e) {
  const int j = e >> 5, l = e & 31;
  int sc, mn;
  kquant_scale_min(b.scales, j, sc, mn);
  const uint8_t byte = b.qs[(j >> 1) * 32 + l];
  const int q = ((j & 1) ? byte >> 4 : byte & 0xf) | (((b.qh[l] >> j) & 1) << 4);
  return fmaf(f16_to_f32(b.d) * (float)sc, (float)q, -(f16_to_f32(b.dmin) * (float)mn));
}
RD_HD float dequant_q2_k(const BlockQ2_K& b, int e) {
  const int h = e >> 7, k = (e >> 5) & 3, l = e & 31;
  const int sc = b.scales[8 * h + 2 * k + (l >> 4)];
  const int q = (b.qs[32 * h + l] >> (2 * k)) & 3;
  return fmaf(f16_to_f32(b.d) * (float)(sc & 0xf), (float)q, -(f16_to_f32(b.dmin) * (float)(sc >> 4)));
}
// Scale i (0..15) of Q3_K, offset removed: low 4 bits from byte i (i < 8) or
// the high nibble of byte i - 8; high 2 bits from byte 8 + i % 4, bits 2 (i / 4).
RD_HD int q3k_scale(const uint8_t* s, int i) {
  const int lo = i < 8 ? (s[i] & 0xf) : (s[i - 8] >> 4);
  const int hi = (s[8 + (i & 3)] >> (2 * (i >> 2))) & 3;
  return (lo | (hi << 4)) - 32;
}
RD_HD float dequant_q3_k(const BlockQ3_K& b, int e) {
  const int h = e >> 7, k = (e >> 5) & 3, l = e & 31;
  const int q = ((b.qs[32 * h + l] >> (2 * k)) & 3) - (((b.hmask[l] >> (4 * h + k)) & 1) ? 0 : 4);
  return f16_to_f32(b.d) * (float)q3k_scale(b.scales, 8 * h + 2 * k + (l >> 4)) * (float)q;
}
// Q6_K: each 128-element half h has ql[64 h ..], qh[32 h ..], scales[8 h ..];
// quarter k (32 elements) of a half takes ql[l] (k = 0), ql[l + 32] (1) low
// nibbles, then their high nibbles (2, 3), and bits 2k, 2k + 1 of qh[l].
RD_HD float dequant_q6_k(const BlockQ6_K& b, int e) {
  const int h = e >> 7, k = (e >> 5) & 3, l = e & 31;
  const uint8_t lo = b.ql[64 * h + (k & 1) * 32 + l];
  const int q = ((k & 2) ? lo >> 4 : lo & 0xf) | (((b.qh[32 * h + l] >> (2 * k)) & 3) << 4);
  return f16_to_f32(b.d) * (float)b.scales[8 * h + 2 * k + (l >> 4)] * (float)(q - 32);
}

// Non-linear 4-bit blocks: each nibble indexes ggml's kvalues_iq4nl, sixteen
// int8 levels {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53,
// 69, 89, 113}, packed eight to a word here so host and device share them
// without a table in memory.
constexpr uint64_t kIq4nlLevelsLo = 0xf6eaddcfbfad9881ull;  // levels 0..7, byte q = level q
constexpr uint64_t kIq4nlLevelsHi = 0x7159453526190d01ull;  // levels 8..15
RD_HD int iq4nl_level(int q) {
  return (int)(int8_t)(uint8_t)(((q < 8) ? kIq4nlLevelsLo : kIq4nlLevelsHi) >> (8 * (q & 7)));
}
// IQ4_NL: 32 elements, value = d * level(nibble); low nibbles hold elements
// 0..15, high 16..31 (as Q4_0).
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[16];
};
// IQ4_XS: 256 elements in eight 32-element sub-blocks, each with a 6-bit
// scale (low 4 bits in scales_l, high 2 in scales_h) biased by 32;
// value = (d * (scale - 32)) * level(nibble), sub-block j's nibbles in
// qs[16 j ..] laid out as IQ4_NL's.
struct BlockIQ4_XS {
  uint16_t d, scales_h;
  uint8_t scales_l[4];
  uint8_t qs[128];
};
static_assert(sizeof(BlockIQ4_NL) == 18 && sizeof(BlockIQ4_XS) == 136);

RD_HD float dequant_iq4_nl(const BlockIQ4_NL& b, int j) {
  const int q = j < 16 ? (b.qs[j] & 0xf) : (b.qs[j - 16] >> 4);
  return f16_to_f32(b.d) * (float)iq4nl_level(q);
}
// Sub-block j's scale, 32 removed.
RD_HD int iq4xs_scale(uint16_t scales_h, const uint8_t* scales_l, int j) {
  return (((scales_l[j >> 1] >> (4 * (j & 1))) & 0xf) | (((scales_h >> (2 * j)) & 3) << 4)) - 32;
}
RD_HD float dequant_iq4_xs(const BlockIQ4_XS& b, int e) {
  const int j = e >> 5, l = e & 31;
  const int q = l < 16 ? (b.qs[16 * j + l] & 0xf) : (b.qs[16 * j + l - 16] >> 4);
  return f16_to_f32(b.d) * (float)iq4xs_scale(b.scales_h, b.scales_l, j) * (float)iq4nl_level(q);
}

// Eight consecutive elements e0 .. e0 + 7 (e0 a multiple of 8) of a 256-element
// super-block, as the per-element functions above give them, bit for bit: the
// eight share one sub-block (32 or 16 elements), whose scale (and min) is
// decoded once and rounded in the same order (d * scale first). The CUDA GEMV
// reads the K and IQ4_XS types eight weights per lane this way.
// Q4_K and Q5_K (Q5_K: the fifth bits from qh).
template <typename Block, bool kFifthBit>
RD_HD void dequant8_k4(const Block& b, int e0, float* v) {
  const int j = e0 >> 5, l0 = e0 & 31, sh = (j & 1) * 4;
  int sc, mn;
  kquant_scale_min(b.scales, j, sc, mn);
  const float ds = f16_to_f32(b.d) * (float)sc, dm = -(f16_to_f32(b.dmin) * (float)mn);
  const uint8_t* qs = b.qs + (j >> 1) * 32 + l0;
  for (int i = 0; i < 8; ++i) {
    int q = (qs[i] >> sh) & 0xf;
    if constexpr (kFifthBit) q |= ((b.qh[l0 + i] >> j) & 1) << 4;
    v[i] = fmaf(ds, (float)q, dm);
  }
}
RD_HD void dequant8_q4_k(const BlockQ4_K& b, int e0, float* v) {
  dequant8_k4<BlockQ4_K, false>(b, e0, v);
}
RD_HD void dequant8_q5_k(const BlockQ5_K& b, int e0, float* v) {
  dequant8_k4<BlockQ5_K, true>(b, e0, v);
}
RD_HD void dequant8_q2_k(const BlockQ2_K& b, int e0, float* v) {
  const int h = e0 >> 7, k = (e0 >> 5) & 3, l0 = e0 & 31;
  const int sc = b.scales[8 * h + 2 * k + (l0 >> 4)];
  const float ds = f16_to_f32(b.d) * (float)(sc & 0xf), dm = -(f16_to_f32(b.dmin) * (float)(sc >> 4));
  const uint8_t* qs = b.qs + 32 * h + l0;
  for (int i = 0; i < 8; ++i) v[i] = fmaf(ds, (float)((qs[i] >> (2 * k)) & 3), dm);
}
RD_HD void dequant8_q3_k(const BlockQ3_K& b, int e0, float* v) {
  const int h = e0 >> 7, k = (e0 >> 5) & 3, l0 = e0 & 31;
  const float ds = f16_to_f32(b.d) * (float)q3k_scale(b.scales, 8 * h + 2 * k + (l0 >> 4));
  for (int i = 0; i < 8; ++i) {
    const int l = l0 + i;
    const int q = ((b.qs[32 * h + l] >> (2 * k)) & 3) - (((b.hmask[l] >> (4 * h + k)) & 1) ? 0 : 4);
    v[i] = ds * (float)q;
  }
}
RD_HD void dequant8_q6_k(const BlockQ6_K& b, int e0, float* v) {
  const int h = e0 >> 7, k = (e0 >> 5) & 3, l0 = e0 & 31;
  const float ds = f16_to_f32(b.d) * (float)b.scales[8 * h + 2 * k + (l0 >> 4)];
  const uint8_t* ql = b.ql + 64 * h + (k & 1) * 32 + l0;
  const uint8_t* qh = b.qh + 32 * h + l0;
  for (int i = 0; i < 8; ++i) {
    const int q = ((k & 2) ? ql[i] >> 4 : ql[i] & 0xf) | (((qh[i] >> (2 * k)) & 3) << 4);
    v[i] = ds * (float)(q - 32);
  }
}
RD_HD void dequant8_iq4_xs(const BlockIQ4_XS& b, int e0, float* v) {
  const int j = e0 >> 5, l0 = e0 & 31;
  const float ds = f16_to_f32(b.d) * (float)iq4xs_scale(b.scales_h, b.scales_l, j);
  const uint8_t* qs = b.qs + 16 * j + (l0 & 15);
  const int sh = l0 < 16 ? 0 : 4;
  for (int i = 0; i < 8; ++i) v[i] = ds * (float)iq4nl_level((qs[i] >> sh) & 0xf);
}

// RoPE. Pair i (0..head_dim/2-1) turns by pos * inv_freq[i], with
// inv_freq[i] = base^(-2i/head_dim) / factor[i] (factor 1 without scaling; a
// constant for linear scaling; Llama 3's per-pair rope_freqs). The table is
// computed once in double on the host and shared by every backend, and the
// angle is rounded once to float, so host and device agree (float powf
// differs by an ulp between libm and CUDA, which at position 16000 moves the
// angle by ~1e-3 rad; double ulps vanish in the rounding).
inline double rope_inv_freq(int i, int head_dim, double base, double factor) {
  return pow(base, -2.0 * (double)i / (double)head_dim) / factor;
}

RD_HD float rope_theta(int pos, double inv_freq) {
  return (float)((double)pos * inv_freq);
}

// Rotate one pair (a, b) by theta.
RD_HD void rope_rotate(float& a, float& b, float c, float s) {
  const float a0 = a, b0 = b;
  a = a0 * c - b0 * s;
  b = a0 * s + b0 * c;
}

RD_HD float silu(float x) {
  return x / (1.0f + expf(-x));
}

// 1 / sqrt(mean(x^2) + eps) given the sum of squares over n elements.
RD_HD float rms_scale(float sum_sq, int n, float eps) {
  return 1.0f / sqrtf(sum_sq / (float)n + eps);
}

// ---- online softmax (flash-style attention) ----
// Running max m and normaliser l of exp(s - m) over the scores seen so far;
// start with m = -inf, l = 0. Adding score s: the accumulator of weighted values
// is multiplied by *scale_old and the new value added with weight *w_new.
RD_HD void online_softmax_add(float& m, float& l, float s, float& scale_old, float& w_new) {
  const float m_new = s > m ? s : m;
  scale_old = m == -INFINITY ? 0.0f : expf(m - m_new);
  w_new = expf(s - m_new);
  l = l * scale_old + w_new;
  m = m_new;
}

// Merges state (m2, l2) into (m, l); accumulators combine as acc*scale1 + acc2*scale2.
// Either side may be empty (m = -inf, l = 0).
RD_HD void online_softmax_merge(float& m, float& l, float m2, float l2, float& scale1, float& scale2) {
  const float m_new = m2 > m ? m2 : m;
  if (m_new == -INFINITY) {
    scale1 = scale2 = 0.0f;
    return;
  }
  scale1 = m == -INFINITY ? 0.0f : expf(m - m_new);
  scale2 = m2 == -INFINITY ? 0.0f : expf(m2 - m_new);
  l = l * scale1 + l2 * scale2;
  m = m_new;
}

// ---- sampling ----
// Gumbel-top-k key of a token with probability p given a uniform u in (0, 1):
// the k largest keys are k draws without replacement, in draw order (the
// exponential-race form log p - log(-log u)). p = 0 gives -inf (never drawn
// before a positive token).
RD_HD float gumbel_key(float p, float u) {
  if (!(p > 0.0f)) return -INFINITY;
  return logf(p) - logf(-logf(u));
}

// exp((logit - max) / temperature): the unnormalised tempered probability.
RD_HD float tempered(float logit, float max_logit, float temperature) {
  return expf((logit - max_logit) / temperature);
}

// A counter-based uniform in (0, 1) (splitmix64 of seed and counter, 24 bits):
// the same draws on the host and the device, in any order or thread layout.
RD_HD float counter_uniform(uint64_t seed, uint64_t counter) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (counter + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return ((float)(z >> 40) + 0.5f) * (1.0f / 16777216.0f);
}

}  // namespace redwood::math
