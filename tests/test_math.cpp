#include <gtest/gtest.h>

#include <cmath>

#include "kernels/common/math.h"

using namespace redwood::math;

TEST(Math, F16RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32((uint16_t)h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f))));
      continue;
    }
    ASSERT_EQ(f32_to_f16(f), (uint16_t)h) << "half " << h;
  }
}

TEST(Math, F16KnownValues) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7c00)));
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie -> even
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);                          // overflow -> inf
}

TEST(Math, Bf16) {
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  for (uint32_t h = 0; h < 65536; h += 7) {
    const float f = bf16_to_f32((uint16_t)h);
    if (!std::isnan(f)) {
      ASSERT_EQ(f32_to_bf16(f), (uint16_t)h);
    }
  }
}

TEST(Math, DequantBlocks) {
  BlockQ4_1 b{};
  b.d = f32_to_f16(0.5f);
  b.m = f32_to_f16(-1.0f);
  b.qs[0] = 0x3a;  // element 0 = 0xa, element 16 = 0x3
  EXPECT_FLOAT_EQ(dequant_q4_1(b, 0), 10 * 0.5f - 1.0f);
  EXPECT_FLOAT_EQ(dequant_q4_1(b, 16), 3 * 0.5f - 1.0f);
  BlockQ4_0 c{};
  c.d = f32_to_f16(2.0f);
  c.qs[1] = 0xf0;  // element 1 = 0, element 17 = 15
  EXPECT_FLOAT_EQ(dequant_q4_0(c, 1), -16.0f);
  EXPECT_FLOAT_EQ(dequant_q4_0(c, 17), 14.0f);
  BlockQ8_0 q{};
  q.d = f32_to_f16(0.25f);
  q.qs[5] = -7;
  EXPECT_FLOAT_EQ(dequant_q8_0(q, 5), -1.75f);
}

TEST(Math, RopeThetaAndRotation) {
  EXPECT_FLOAT_EQ(rope_theta(3, 0, 64, 10000.0f), 3.0f);
  EXPECT_NEAR(rope_theta(5, 16, 64, 10000.0f), 5.0f * std::pow(10000.0f, -0.5f), 1e-6);
  float a = 1, b = 0;
  rope_rotate(a, b, std::cos(0.5f), std::sin(0.5f));
  EXPECT_NEAR(a, std::cos(0.5f), 1e-7);
  EXPECT_NEAR(b, std::sin(0.5f), 1e-7);
  EXPECT_NEAR(silu(1.0f), 1.0f / (1.0f + std::exp(-1.0f)), 1e-7);
}
