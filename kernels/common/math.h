// Per-element and per-block math shared by the CPU and CUDA backends.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/common/hd.h"

namespace redwood::math {

// IEEE half -> float, bit-exact for normals, subnormals, inf and NaN.
RD_HD float f16_to_f32(uint16_t h) {
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
RD_HD float dequant_q8_0(const BlockQ8_0& b, int j) { return f16_to_f32(b.d) * b.qs[j]; }
RD_HD float dequant_q4_0(const BlockQ4_0& b, int j) {
  const int q = j < 16 ? (b.qs[j] & 0xf) : (b.qs[j - 16] >> 4);
  return f16_to_f32(b.d) * (q - 8);
}
RD_HD float dequant_q4_1(const BlockQ4_1& b, int j) {
  const int q = j < 16 ? (b.qs[j] & 0xf) : (b.qs[j - 16] >> 4);
  return f16_to_f32(b.d) * q + f16_to_f32(b.m);
}

// RoPE: rotation angle of pair i (0..head_dim/2-1) at position pos.
RD_HD float rope_theta(int pos, int i, int head_dim, float base) {
  return (float)pos * powf(base, -2.0f * (float)i / (float)head_dim);
}

// Rotate one pair (a, b) by theta.
RD_HD void rope_rotate(float& a, float& b, float c, float s) {
  const float a0 = a, b0 = b;
  a = a0 * c - b0 * s;
  b = a0 * s + b0 * c;
}

RD_HD float silu(float x) { return x / (1.0f + expf(-x)); }

// 1 / sqrt(mean(x^2) + eps) given the sum of squares over n elements.
RD_HD float rms_scale(float sum_sq, int n, float eps) { return 1.0f / sqrtf(sum_sq / (float)n + eps); }

}  // namespace redwood::math
