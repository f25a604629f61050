#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

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

// ggml's kvalues_iq4nl, written out, against the packed table; and one
// IQ4_XS sub-block scale (6 bits across scales_l and scales_h, biased by 32).
TEST(Math, Iq4Levels) {
  const int want[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  for (int q = 0; q < 16; ++q) EXPECT_EQ(iq4nl_level(q), want[q]) << q;
  BlockIQ4_XS b{};
  b.d = f32_to_f16(0.5f);
  b.scales_l[1] = 0x70;            // sub-block 3: low bits 7
  b.scales_h = uint16_t(2u << 6);  // sub-block 3: high bits 2 -> 7 | 32 = 39, minus 32 = 7
  b.qs[16 * 3 + 4] = 0xf0;         // element 3*32 + 20: level 113; element 3*32 + 4: level -127
  EXPECT_EQ(iq4xs_scale(b.scales_h, b.scales_l, 3), 7);
  EXPECT_EQ(iq4xs_scale(b.scales_h, b.scales_l, 0), -32);
  EXPECT_FLOAT_EQ(dequant_iq4_xs(b, 3 * 32 + 20), 0.5f * 7 * 113);
  EXPECT_FLOAT_EQ(dequant_iq4_xs(b, 3 * 32 + 4), 0.5f * 7 * -127);
  BlockIQ4_NL n{};
  n.d = f32_to_f16(0.25f);
  n.qs[2] = 0x9e;  // element 2: level 89, element 18: level 13
  EXPECT_FLOAT_EQ(dequant_iq4_nl(n, 2), 0.25f * 89);
  EXPECT_FLOAT_EQ(dequant_iq4_nl(n, 18), 0.25f * 13);
}

// dequant8_* (eight elements, the sub-block's scale decoded once: the CUDA
// GEMV's path) equals the per-element functions bit for bit, on random
// super-blocks with finite scales, at every 8-aligned start.
template <typename Block, typename One, typename Eight>
void expect_eight_equal_one(One one, Eight eight, const char* name) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> byte(0, 255);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  for (int trial = 0; trial < 200; ++trial) {
    Block b;
    auto* raw = reinterpret_cast<uint8_t*>(&b);
    for (size_t i = 0; i < sizeof b; ++i) raw[i] = static_cast<uint8_t>(byte(rng));
    // finite fp16 scales wherever the block keeps them
    if constexpr (requires { b.dmin; }) b.dmin = f32_to_f16(nd(rng));
    b.d = f32_to_f16(nd(rng));
    for (int e0 = 0; e0 < 256; e0 += 8) {
      float v[8];
      eight(b, e0, v);
      for (int i = 0; i < 8; ++i) {
        const float w = one(b, e0 + i);
        ASSERT_EQ(std::memcmp(&v[i], &w, sizeof w), 0) << name << " element " << e0 + i << ": " << v[i] << " vs " << w;
      }
    }
  }
}

TEST(Math, EightAtATimeEqualsPerElement) {
  expect_eight_equal_one<BlockQ2_K>(dequant_q2_k, dequant8_q2_k, "Q2_K");
  expect_eight_equal_one<BlockQ3_K>(dequant_q3_k, dequant8_q3_k, "Q3_K");
  expect_eight_equal_one<BlockQ4_K>(dequant_q4_k, dequant8_q4_k, "Q4_K");
  expect_eight_equal_one<BlockQ5_K>(dequant_q5_k, dequant8_q5_k, "Q5_K");
  expect_eight_equal_one<BlockQ6_K>(dequant_q6_k, dequant8_q6_k, "Q6_K");
  expect_eight_equal_one<BlockIQ4_XS>(dequant_iq4_xs, dequant8_iq4_xs, "IQ4_XS");
}

TEST(Math, RopeThetaAndRotation) {
  EXPECT_FLOAT_EQ(rope_theta(3, rope_inv_freq(0, 64, 10000.0, 1.0)), 3.0f);
  EXPECT_NEAR(rope_theta(5, rope_inv_freq(16, 64, 10000.0, 1.0)), 5.0f * std::pow(10000.0f, -0.5f), 1e-6);
  EXPECT_NEAR(rope_theta(5, rope_inv_freq(16, 64, 10000.0, 8.0)), 5.0f / 8 * std::pow(10000.0f, -0.5f), 1e-7);
  float a = 1, b = 0;
  rope_rotate(a, b, std::cos(0.5f), std::sin(0.5f));
  EXPECT_NEAR(a, std::cos(0.5f), 1e-7);
  EXPECT_NEAR(b, std::sin(0.5f), 1e-7);
  EXPECT_NEAR(silu(1.0f), 1.0f / (1.0f + std::exp(-1.0f)), 1e-7);
}

// ---- math shared with the CUDA kernels (flash attention, device sampling) ----

#include <algorithm>
#include <random>
#include <vector>

// The CUDA attention kernel's reduction, run on the host: keys dealt round-robin
// to 4 partial states (one per warp), each updated with online_softmax_add,
// then merged with online_softmax_merge. Must equal the two-pass softmax.
TEST(Math, OnlineSoftmaxAsTheAttentionKernelUsesIt) {
  std::mt19937 g(3);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  for (int len : {1, 2, 3, 5, 64, 1000}) {
    const int dim = 8;
    std::vector<float> s(len), v(static_cast<size_t>(len) * dim);
    for (auto& x : s) x = nd(g);
    for (auto& x : v) x = nd(g);
    double mx = -INFINITY, sum = 0;
    for (float x : s) mx = std::max<double>(mx, x);
    std::vector<double> want(dim, 0.0);
    for (int j = 0; j < len; ++j) {
      const double w = std::exp(s[j] - mx);
      sum += w;
      for (int d = 0; d < dim; ++d) want[d] += w * v[static_cast<size_t>(j) * dim + d];
    }
    constexpr int kWarps = 4;
    float m[kWarps], l[kWarps];
    std::vector<float> acc(kWarps * dim, 0.0f);
    for (int w = 0; w < kWarps; ++w) m[w] = -INFINITY, l[w] = 0;
    for (int j = 0; j < len; ++j) {
      const int w = j % kWarps;
      float so, wn;
      online_softmax_add(m[w], l[w], s[j], so, wn);
      for (int d = 0; d < dim; ++d) acc[w * dim + d] = acc[w * dim + d] * so + wn * v[static_cast<size_t>(j) * dim + d];
    }
    for (int w = 1; w < kWarps; ++w) {  // warps past len are empty: merged with weight 0
      float s1, s2;
      online_softmax_merge(m[0], l[0], m[w], l[w], s1, s2);
      for (int d = 0; d < dim; ++d) acc[d] = acc[d] * s1 + acc[w * dim + d] * s2;
    }
    for (int d = 0; d < dim; ++d) EXPECT_NEAR(acc[d] / l[0], want[d] / sum, 1e-5 * (1 + std::abs(want[d] / sum)));
  }
  float m = -INFINITY, l = 0, s1, s2;  // two empty states stay empty, no NaN
  online_softmax_merge(m, l, -INFINITY, 0.0f, s1, s2);
  EXPECT_EQ(s1, 0.0f);
  EXPECT_EQ(s2, 0.0f);
  EXPECT_EQ(l, 0.0f);
}

TEST(Math, CounterUniformIsInOpenUnitIntervalAndUniform) {
  double sum = 0;
  const int n = 1 << 20;
  std::vector<int> bins(16, 0);
  for (int i = 0; i < n; ++i) {
    const float u = counter_uniform(42, static_cast<uint64_t>(i));
    ASSERT_GT(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum += u;
    ++bins[static_cast<int>(u * 16)];
  }
  EXPECT_NEAR(sum / n, 0.5, 1e-3);
  double chi = 0;
  for (int b : bins) chi += (b - n / 16.0) * (b - n / 16.0) / (n / 16.0);
  EXPECT_LT(chi, 37.7);  // chi-square, 15 degrees of freedom, p = 0.001
  EXPECT_NE(counter_uniform(1, 0), counter_uniform(2, 0));
}

// Gumbel top-k (the device's without-replacement draw) has the sequential
// SWOR law: P(a then b) = p_a * p_b / (1 - p_a). Chi-square over ordered pairs,
// 200k draws; the same test with the keys' sign flipped (a wrong key) fails.
TEST(Math, GumbelTopKDrawsWithoutReplacement) {
  const std::vector<float> p = {0.5f, 0.3f, 0.15f, 0.05f, 0.0f};
  const int V = static_cast<int>(p.size()), draws = 200000;
  auto chi_square = [&](bool wrong) {
    std::vector<long> counts(V * V, 0);
    for (int r = 0; r < draws; ++r) {
      std::vector<std::pair<float, int>> keys;
      for (int i = 0; i < V; ++i) {
        const float u = counter_uniform(7, static_cast<uint64_t>(r) * V + i);
        float k = p[i] > 0 ? gumbel_key(p[i], u) : -1e30f * (1.0f + u);
        if (wrong && p[i] > 0) k = std::log(p[i]) + std::log(-std::log(u));
        keys.push_back({k, i});
      }
      std::stable_sort(keys.begin(), keys.end(), [](auto& a, auto& b) { return a.first > b.first; });
      ++counts[keys[0].second * V + keys[1].second];
    }
    double chi = 0;
    for (int a = 0; a < V; ++a)
      for (int b = 0; b < V; ++b) {
        if (a == b || p[a] == 0) continue;
        const double e = draws * static_cast<double>(p[a]) * p[b] / (1.0 - p[a]);
        if (e == 0) {
          if (counts[a * V + b] > 0) return static_cast<double>(INFINITY);
          continue;
        }
        chi += (counts[a * V + b] - e) * (counts[a * V + b] - e) / e;
      }
    return chi;
  };
  EXPECT_LT(chi_square(false), 32.9);  // 12 cells with mass, 11 dof, p = 0.0005
  EXPECT_GT(chi_square(true), 1000.0);
}
