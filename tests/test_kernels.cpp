// CPU kernels against plain references, over dtypes and odd shapes.
#include <gtest/gtest.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "kernels/backend.h"
#include "kernels/common/math.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/simd.h"
#include "src/util/error.h"
#include "tests/util/tiny_gguf.h"

using namespace redwood;

namespace {
double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;  // NaN never passes
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

struct Mat {
  std::vector<uint8_t> bytes;
  WeightView view;
};

Mat random_matrix(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  Mat m;
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& x : row) x = nd(rng);
    auto q = testutil::quantize_row(t, row.data(), cols);
    m.bytes.insert(m.bytes.end(), q.begin(), q.end());
  }
  m.view = WeightView{t, rows, cols, m.bytes.data()};
  return m;
}
}  // namespace

class MatmulTest : public ::testing::TestWithParam<DType> {};

TEST_P(MatmulTest, MatchesReferenceAllSizes) {
  const DType t = GetParam();
  const bool block = dtype_info(t).block_elems > 1;
  const int64_t be = dtype_info(t).block_elems;
  // 4160, 4352: the long-row decode path (several rows at once); 768, 4352: K types (256-element blocks);
  // 64, 96, 160, 256: 2, 3, 5 and 8 blocks (the integer dot's groups of four: every partial last group)
  for (int64_t cols : {64, 96, 160, 256, 576, 768, 4160, 4352}) {
    if (cols % be != 0 || ((cols == 768 || cols == 4352) && be != 256)) continue;
    for (int64_t extra : {0, 8, 5}) {  // plain types also get tails (cols % 8 != 0)
      if (block && extra) continue;
      const int64_t c = cols + extra;
      for (int64_t rows : {1, 7, 33, 200}) {
        Mat m = random_matrix(t, rows, c, (uint32_t)(rows * 31 + c));
        for (int n : {1, 2, 3, 5, 8, 9, 17, 33, 48, 64, 65, 130}) {
          std::mt19937 rng(n);
          std::normal_distribution<float> nd;
          std::vector<float> x(n * c);
          for (auto& v : x) v = nd(rng);
          std::vector<float> y(n * rows, NAN), ref(n * rows);  // poisoned output
          cpu::matmul(m.view, x.data(), n, y.data());
          cpu::matmul_reference(m.view, x.data(), n, ref.data());
          ASSERT_LT(rel_err(y, ref), 1e-5) << dtype_name(t) << " rows " << rows << " cols " << c << " n " << n;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, MatmulTest,
                         ::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1,
                                           DType::Q5_0, DType::Q5_1, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K,
                                           DType::Q6_K, DType::IQ4_NL, DType::IQ4_XS),
                         [](const auto& p) { return std::string(dtype_name(p.param)); });

// The batched path (n > kGemvMaxN) computes every output as one sequential
// FMA chain over k with the AVX-512 or AVX2 kernel, so a token's logits do not
// depend on how many other tokens share the pass (a tree's size, a prefill chunk).
TEST(Kernels, BatchedMatmulIsBatchInvariant) {
  if (cpu::kernel_isa() == cpu::Isa::scalar) GTEST_SKIP() << "the OpenBLAS path (no AVX2) is not batch-invariant";
  for (DType t : {DType::F16, DType::Q4_1, DType::Q8_0, DType::Q4_K}) {
    const int64_t rows = 77, cols = t == DType::Q4_K ? 768 : 608;
    Mat m = random_matrix(t, rows, cols, 5);
    std::mt19937 rng(9);
    std::normal_distribution<float> nd;
    std::vector<float> x(200 * cols);
    for (auto& v : x) v = nd(rng);
    std::vector<float> y_full(200 * rows);
    cpu::matmul(m.view, x.data(), 200, y_full.data());
    for (int n : {9, 16, 63, 64, 100}) {
      for (int first : {0, 37, 100}) {
        std::vector<float> y(n * rows);
        cpu::matmul(m.view, x.data() + first * cols, n, y.data());
        for (int i = 0; i < n * rows; ++i)
          ASSERT_EQ(y[i], y_full[first * rows + i]) << dtype_name(t) << " n " << n << " first " << first << " i " << i;
      }
    }
  }
}

// set_cpu_batch_invariant: every n takes the batched kernel, so a token's
// outputs at n = 1..8 are those of a pass of 64; off, the GEMV kernels give
// other bits (the control).
TEST(Kernels, BatchInvariantModeGivesTheBatchedBitsAtEveryN) {
  if (cpu::kernel_isa() == cpu::Isa::scalar) GTEST_SKIP() << "the OpenBLAS path (no AVX2) is not batch-invariant";
  struct Restore {
    ~Restore() { set_cpu_batch_invariant(false); }
  } restore;
  for (DType t : {DType::F16, DType::Q8_0, DType::Q4_1, DType::Q4_K, DType::IQ4_XS}) {
    const int64_t rows = 40, cols = 512;
    Mat m = random_matrix(t, rows, cols, 3);
    std::mt19937 rng(5);
    std::normal_distribution<float> nd;
    std::vector<float> x(64 * cols);
    for (auto& v : x) v = nd(rng);
    std::vector<float> full(64 * rows);
    cpu::matmul(m.view, x.data(), 64, full.data());
    bool gemv_differs = false;
    for (bool on : {false, true}) {
      set_cpu_batch_invariant(on);
      EXPECT_EQ(cpu_batch_invariant(), on);
      for (int n = 1; n <= cpu::kGemvMaxN; ++n) {
        std::vector<float> y(n * rows);
        cpu::matmul(m.view, x.data(), n, y.data());
        const bool same = std::equal(y.begin(), y.end(), full.begin());
        if (on)
          EXPECT_TRUE(same) << dtype_name(t) << " n " << n;
        else
          gemv_differs = gemv_differs || !same;
      }
    }
    set_cpu_batch_invariant(false);
    EXPECT_TRUE(gemv_differs) << dtype_name(t) << ": the control found no GEMV difference";
  }
}

// The kernels run on the instruction set REDWOOD_ISA names (tests/CMakeLists.txt
// runs this binary on each one the CPU has), and the dispatch table picks that
// set's kernels: the AVX2 ones are really tested on an AVX-512 machine.
TEST(Kernels, KernelIsaFollowsEnvironment) {
  const char* env = std::getenv("REDWOOD_ISA");
  const cpu::Isa isa = cpu::kernel_isa();
  std::printf("CPU kernels: %s (best here: %s)\n", cpu::isa_name(isa), cpu::isa_name(cpu::best_isa()));
  if (env && *env)
    EXPECT_STREQ(cpu::isa_name(isa), env);
  else
    EXPECT_EQ(isa, cpu::best_isa());
  struct Want {
    DType t;
    int n;
    const char* kernel[4];  // scalar, avx2, avx512, avx512vnni
  };
  const Want table[] = {
      {DType::Q4_0, 1, {"scalar_gemv", "intdot_avx2", "intdot_avx2", "intdot_avx512_vnni"}},
      {DType::Q4_0, 2, {"scalar_gemv", "gemv_dequantized_avx2", "gemv_dequantized_avx2", "intdot_avx512_vnni"}},
      {DType::F16, 1, {"scalar_gemv", "gemv_plain_avx2", "gemv_plain_avx512", "gemv_plain_avx512"}},
      {DType::Q4_K, 3, {"scalar_gemv", "gemv_chunked_avx2", "gemv_chunked_avx2", "kquant_avx512_vnni"}},
      {DType::Q6_K, 2, {"scalar_gemv", "gemv_chunked_avx2", "gemv_chunked_avx2", "gemv_chunked_avx2"}},
      {DType::IQ4_XS, 1, {"scalar_gemv", "intdot_avx2", "intdot_avx2", "intdot_avx512_vnni"}},
      {DType::Q5_0, 1, {"scalar_gemv", "gemv_chunked_avx2", "gemv_chunked_avx2", "intdot_avx512_vnni"}},
      {DType::Q8_0, 9, {"blas_gemm", "gemm_avx2", "gemm_avx512", "gemm_avx512"}},
  };
  for (const Want& w : table)
    for (cpu::Isa i : {cpu::Isa::scalar, cpu::Isa::avx2, cpu::Isa::avx512, cpu::Isa::avx512_vnni})
      EXPECT_STREQ(cpu::matmul_kernel(w.t, w.n, i), w.kernel[static_cast<int>(i)])
          << dtype_name(w.t) << " n " << w.n << " on " << cpu::isa_name(i);
}

// Decode processes several rows at once (eight over long rows; four for the
// quantized types); each row's arithmetic is the single-row kernel's, so the
// results are bit-identical to one-row calls.
TEST(Kernels, LongRowDecodeEqualsRowByRow) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                  DType::IQ4_NL, DType::IQ4_XS, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K})
    for (int64_t cols : {int64_t{576}, int64_t{8192 + 64}}) {
      if (dtype_info(t).block_elems == 256) cols = cols / 256 * 256 + 256;  // whole 256-element super-blocks
      const int64_t rows = 45;
      Mat m = random_matrix(t, rows, cols, 11);
      std::mt19937 rng(3);
      std::normal_distribution<float> nd;
      std::vector<float> x(cols);
      for (auto& v : x) v = nd(rng);
      std::vector<float> y(rows, NAN);
      cpu::matmul(m.view, x.data(), 1, y.data());
      const size_t rb = *row_bytes(t, cols);
      for (int64_t r = 0; r < rows; ++r) {
        const WeightView one{t, 1, cols, static_cast<const uint8_t*>(m.view.data) + r * rb};
        float y1 = NAN;
        cpu::matmul(one, x.data(), 1, &y1);
        ASSERT_EQ(y[r], y1) << dtype_name(t) << " cols " << cols << " row " << r;
      }
    }
}

// The IQ4 types' integer dot at its int32 bound: every weight at the extreme
// level (-127 or 113, scale 1) and every activation just under a power of two
// (rounded to X = 2^21), so that with all of one sign each lane of eight
// products sums to 8 * 127 * 2^21, 0.99 of 2^31; then with mixed signs; 1..8 tokens.
TEST(Kernels, Iq4DecodeAtTheInt32Bound) {
  for (DType t : {DType::IQ4_NL, DType::IQ4_XS})
    for (uint8_t nibbles : {uint8_t{0x00}, uint8_t{0xff}})
      for (int n : {1, 2, 8}) {
        const int64_t rows = 9, cols = 4352;
        const uint64_t rb = *row_bytes(t, cols), bb = dtype_info(t).block_bytes;
        std::vector<uint8_t> bytes(rows * rb, nibbles);
        const uint16_t one = math::f32_to_f16(1.0f);
        for (uint64_t b = 0; b < bytes.size() / bb; ++b) {
          memcpy(bytes.data() + b * bb, &one, 2);
          if (t == DType::IQ4_XS) {  // every sub-block scale 63 - 32 = 31
            const uint16_t sh = 0xffff;
            memcpy(bytes.data() + b * bb + 2, &sh, 2);
            memset(bytes.data() + b * bb + 4, 0xff, 4);
          }
        }
        const WeightView w{t, rows, cols, bytes.data()};
        std::vector<float> x(n * cols, std::nextafter(2.0f, 0.0f)), y(n * rows, NAN), ref(n * rows);
        cpu::matmul(w, x.data(), n, y.data());  // all positive: the largest lane sums
        cpu::matmul_reference(w, x.data(), n, ref.data());
        ASSERT_LT(rel_err(y, ref), 1e-6) << dtype_name(t) << " nibbles " << int(nibbles) << " n " << n;
        for (int64_t c = 0; c < n * cols; c += 3) x[c] = -x[c];  // mixed signs
        cpu::matmul(w, x.data(), n, y.data());
        cpu::matmul_reference(w, x.data(), n, ref.data());
        ASSERT_LT(rel_err(y, ref), 1e-6) << dtype_name(t) << " nibbles " << int(nibbles) << " n " << n;
      }
}

// Decode keeps fp32-level accuracy for activations spanning seven decades with
// outliers (the integer dot path rounds each lane of 4-8 elements to 2^-22 or
// 2^-21 of its largest; measured worst 6.8e-7, Q4_K and Q5_K 1.1e-6 with their
// mins against fp32 sums, F16's fp32 path 6e-8; rounding to 2^-14 fails):
// every row within 2e-6 of sum |w x| of a double dot.
// A non-finite activation makes every output NaN, as an fp32 dot would.
TEST(Kernels, DecodeIsFp32AccurateForWideRangeActivations) {
  for (DType t : {DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::IQ4_NL,
                  DType::IQ4_XS, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    for (int64_t cols : {64, 96, 576, 4160}) {
      if (dtype_info(t).block_elems == 256) cols = cols / 256 * 256 + 256;  // whole 256-element super-blocks
      const int64_t rows = 40;
      Mat m = random_matrix(t, rows, cols, 5);
      std::mt19937 rng(cols);
      std::normal_distribution<float> nd;
      std::uniform_real_distribution<float> decade(-4.0f, 3.0f);
      std::vector<float> x(cols);
      for (auto& v : x) v = rng() % 7 == 0 ? 0.0f : nd(rng) * std::pow(10.0f, decade(rng));
      std::vector<float> y(rows, NAN), w(rows * cols);
      cpu::matmul(m.view, x.data(), 1, y.data());
      cpu::dequantize_rows(m.view, 0, rows, w.data());
      double worst = 0;
      for (int64_t r = 0; r < rows; ++r) {
        double ref = 0, mag = 0;
        for (int64_t c = 0; c < cols; ++c) {
          ref += double(w[r * cols + c]) * x[c];
          mag += std::fabs(double(w[r * cols + c]) * x[c]);
        }
        worst = std::max(worst, std::fabs(y[r] - ref) / mag);
      }
      EXPECT_LT(worst, 2e-6) << dtype_name(t) << " cols " << cols;
      x[cols / 3] = NAN;
      cpu::matmul(m.view, x.data(), 1, y.data());
      for (int64_t r = 0; r < rows; ++r) ASSERT_TRUE(std::isnan(y[r])) << dtype_name(t) << " cols " << cols;
      x[cols / 3] = INFINITY;
      cpu::matmul(m.view, x.data(), 1, y.data());
      for (int64_t r = 0; r < rows; ++r) ASSERT_FALSE(std::isfinite(y[r])) << dtype_name(t) << " cols " << cols;
    }
  }
}

// The vectorized dequantizers of the 5-bit and K types give exactly the shared
// per-element math (which the CUDA backend uses), on random bytes: every
// scale, min, sign and high-bit pattern occurs.
TEST(Kernels, ChunkedTypesDequantizeExactlyAsSharedMath) {
  std::mt19937 g(17);
  for (DType t : {DType::Q5_0, DType::Q5_1, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K,
                  DType::IQ4_NL, DType::IQ4_XS}) {
    const int64_t rows = 5, cols = 1024;
    const uint64_t rb = *row_bytes(t, cols);
    std::vector<uint8_t> bytes(rows * rb);
    for (auto& b : bytes) b = static_cast<uint8_t>(g());
    // Finite fp16 scales (random bytes may make inf/NaN ones; those propagate the same, but compare as unequal).
    const uint32_t be = dtype_info(t).block_elems, bb = dtype_info(t).block_bytes;
    for (uint64_t b = 0; b < bytes.size() / bb; ++b) {
      uint8_t* p = bytes.data() + b * bb;
      auto put = [&](uint8_t* q) {
        const uint16_t h = math::f32_to_f16(0.001f * float(g() % 2000) - 1.0f);
        memcpy(q, &h, 2);
      };
      if (t == DType::Q6_K) put(p + 208);
      if (t == DType::Q3_K) put(p + 108);
      if (t == DType::Q2_K) put(p + 80), put(p + 82);
      if (t == DType::Q5_0 || t == DType::Q5_1 || t == DType::Q4_K || t == DType::Q5_K || t == DType::IQ4_NL ||
          t == DType::IQ4_XS)
        put(p);
      if (t == DType::Q5_1 || t == DType::Q4_K || t == DType::Q5_K) put(p + 2);
    }
    const WeightView w{t, rows, cols, bytes.data()};
    std::vector<float> out(rows * cols);
    cpu::dequantize_rows(w, 0, rows, out.data());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const uint8_t* blk = bytes.data() + r * rb + c / be * bb;
        const int e = static_cast<int>(c % be);
        float want = NAN;
        if (t == DType::Q5_0) want = math::dequant_q5_0(*reinterpret_cast<const math::BlockQ5_0*>(blk), e);
        if (t == DType::Q5_1) want = math::dequant_q5_1(*reinterpret_cast<const math::BlockQ5_1*>(blk), e);
        if (t == DType::Q2_K) want = math::dequant_q2_k(*reinterpret_cast<const math::BlockQ2_K*>(blk), e);
        if (t == DType::Q3_K) want = math::dequant_q3_k(*reinterpret_cast<const math::BlockQ3_K*>(blk), e);
        if (t == DType::Q4_K) want = math::dequant_q4_k(*reinterpret_cast<const math::BlockQ4_K*>(blk), e);
        if (t == DType::Q5_K) want = math::dequant_q5_k(*reinterpret_cast<const math::BlockQ5_K*>(blk), e);
        if (t == DType::Q6_K) want = math::dequant_q6_k(*reinterpret_cast<const math::BlockQ6_K*>(blk), e);
        if (t == DType::IQ4_NL) want = math::dequant_iq4_nl(*reinterpret_cast<const math::BlockIQ4_NL*>(blk), e);
        if (t == DType::IQ4_XS) want = math::dequant_iq4_xs(*reinterpret_cast<const math::BlockIQ4_XS*>(blk), e);
        ASSERT_EQ(out[r * cols + c], want) << dtype_name(t) << " row " << r << " col " << c;
      }
  }
}

TEST(Kernels, DequantizeRowsMatchesSharedMath) {
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::F16, DType::BF16}) {
    Mat m = random_matrix(t, 3, 64, 5);
    std::vector<float> out(3 * 64);
    cpu::dequantize_rows(m.view, 0, 3, out.data());
    // Reference via a 1-token matmul with unit vectors is circular; use shared math directly.
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 64; ++c) {
        const uint8_t* row = m.bytes.data() + r * *row_bytes(t, 64);
        float want = 0;
        if (t == DType::Q8_0) want = math::dequant_q8_0(((const math::BlockQ8_0*)row)[c / 32], c % 32);
        if (t == DType::Q4_0) want = math::dequant_q4_0(((const math::BlockQ4_0*)row)[c / 32], c % 32);
        if (t == DType::Q4_1) want = math::dequant_q4_1(((const math::BlockQ4_1*)row)[c / 32], c % 32);
        if (t == DType::F16) want = math::f16_to_f32(((const uint16_t*)row)[c]);
        if (t == DType::BF16) want = math::bf16_to_f32(((const uint16_t*)row)[c]);
        ASSERT_FLOAT_EQ(out[r * 64 + c], want) << dtype_name(t);
      }
  }
}

// The vectorized exp of the attention softmax: within 2 ulp of e^x over
// [-87, 88.37] (a dense sweep), 0 below -87 and for -inf, NaN for NaN.
TEST(Kernels, Exp256IsWithinTwoUlp) {
#ifndef REDWOOD_AVX2
  GTEST_SKIP() << "no AVX2 build";
#else
  auto exp8 = [](float x) {
    float out[8];
    _mm256_storeu_ps(out, cpu::exp256(_mm256_set1_ps(x)));
    return out[0];
  };
  double worst = 0;
  for (double x = -87.0; x <= 88.37; x += 0.000731) {
    const float xf = static_cast<float>(x), got = exp8(xf);
    const double want = std::exp(static_cast<double>(xf));
    const double ulp = std::ldexp(1.0, std::ilogb(want) - 23);
    worst = std::max(worst, std::abs(got - want) / ulp);
  }
  EXPECT_LE(worst, 2.0);
  EXPECT_EQ(exp8(0.0f), 1.0f);
  EXPECT_EQ(exp8(-87.5f), 0.0f);
  EXPECT_EQ(exp8(-1e30f), 0.0f);
  EXPECT_EQ(exp8(-INFINITY), 0.0f);
  EXPECT_TRUE(std::isnan(exp8(NAN)));
#endif
}

namespace {
// A random tree of n tokens after n_past committed ones, with ancestor lists
// (root first, self last) as the model builds them. Under a sliding window
// (with_window): token i at position n_past + its depth, its ancestor list
// only the rows within the window.
struct TreeCase {
  int n_heads, n_kv, hd, n_past, n;
  std::vector<int32_t> parents, off{0}, anc;
  std::vector<float> q, k, v;
  std::vector<int32_t> pos;
  int window = 0;
  AttentionArgs args(float* out) const {
    AttentionArgs a{q.data(),
                    k.data(),
                    v.data(),
                    out,
                    n,
                    n_past,
                    n_heads,
                    n_kv,
                    hd,
                    parents.data(),
                    off.data(),
                    anc.data(),
                    1.0f / std::sqrt(float(hd))};
    a.pos = pos.empty() ? nullptr : pos.data();
    a.window = window;
    return a;
  }
};
TreeCase with_window(TreeCase c, int window) {
  c.window = window;
  c.pos.assign(c.n, 0);
  for (int i = 0; i < c.n; ++i) {
    c.pos[i] = c.n_past;
    for (int j = c.parents[i]; j >= 0; j = c.parents[j]) ++c.pos[i];
  }
  std::vector<int32_t> off{0}, anc;
  for (int i = 0; i < c.n; ++i) {
    for (int e = c.off[i]; e < c.off[i + 1]; ++e)
      if (c.pos[i] - c.pos[c.anc[e]] < window) anc.push_back(c.anc[e]);
    off.push_back(static_cast<int32_t>(anc.size()));
  }
  c.off = off, c.anc = anc;
  return c;
}
TreeCase random_tree_case(std::mt19937& rng, int n_heads, int n_kv, int hd, int n_past, int n) {
  std::normal_distribution<float> nd;
  TreeCase c{n_heads, n_kv, hd, n_past, n, std::vector<int32_t>(n), {0}, {}, {}, {}, {}, {}, 0};
  for (int i = 0; i < n; ++i) c.parents[i] = i == 0 ? -1 : (int)(rng() % (i + 1)) - 1;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p;
    for (int j = i; j >= 0; j = c.parents[j]) p.push_back(j);
    c.anc.insert(c.anc.end(), p.rbegin(), p.rend());
    c.off.push_back((int32_t)c.anc.size());
  }
  c.q.resize(n * n_heads * hd);
  c.k.resize((n_past + n) * n_kv * hd);
  c.v.resize(c.k.size());
  for (auto* vec : {&c.q, &c.k, &c.v})
    for (auto& x : *vec) x = 3 * nd(rng);
  return c;
}
// Rows of `row` floats as a Q8_0 KV store holds them (written by
// write_kv_rows, each element read back as d * q).
std::vector<float> q8_rows(const std::vector<float>& x, int row) {
  std::vector<math::BlockQ8_0> b(x.size() / 32);
  cpu::write_kv_rows(b.data(), DType::Q8_0, 0, x.data(), static_cast<int64_t>(x.size()) / row, row);
  std::vector<float> out(x.size());
  for (size_t e = 0; e < x.size(); ++e) out[e] = math::dequant_q8_0(b[e / 32], static_cast<int>(e % 32));
  return out;
}
}  // namespace

// Head sizes of the vectorized path (multiples of 8: one or two 64-float
// chunks of the output) and of the generic one (12), prefixes long enough for
// several 32-position value blocks, one-token and many-token passes (the two
// task splits).
// KV rows of F16/BF16: attention over them equals attention over the same
// rows widened to float, bit for bit, on the vector path (head_dim 64) and the
// generic one (head_dim 12); the reference reads them the same way; and the
// rounding is real (the unrounded rows give other outputs).
TEST(Kernels, TreeAttentionOverHalfRowsEqualsWidenedRows) {
  std::mt19937 rng(7);
  for (DType t : {DType::F16, DType::BF16})
    for (int hd : {64, 12}) {
      const TreeCase c = random_tree_case(rng, 6, 2, hd, 37, 21);
      const int row = c.n_kv * hd, rows = static_cast<int>(c.k.size()) / row;
      std::vector<uint16_t> k16(c.k.size()), v16(c.v.size());
      cpu::write_kv_rows(k16.data(), t, 0, c.k.data(), rows, row);
      cpu::write_kv_rows(v16.data(), t, 0, c.v.data(), rows, row);
      TreeCase w = c;
      for (size_t i = 0; i < c.k.size(); ++i) {
        w.k[i] = t == DType::F16 ? math::f16_to_f32(k16[i]) : math::bf16_to_f32(k16[i]);
        w.v[i] = t == DType::F16 ? math::f16_to_f32(v16[i]) : math::bf16_to_f32(v16[i]);
      }
      const size_t n_out = static_cast<size_t>(c.n) * c.n_heads * hd;
      std::vector<float> got(n_out), want(n_out), raw(n_out), ref_got(n_out), ref_want(n_out);
      AttentionArgs a = c.args(got.data());
      a.k = k16.data(), a.v = v16.data(), a.kv_type = t;
      cpu::attention(a);
      cpu::attention(w.args(want.data()));
      cpu::attention(c.args(raw.data()));
      EXPECT_EQ(got, want) << dtype_name(t) << " head_dim " << hd;
      EXPECT_NE(got, raw) << dtype_name(t) << " head_dim " << hd << ": no rounding happened";
      a.out = ref_got.data();
      cpu::attention_reference(a);
      cpu::attention_reference(w.args(ref_want.data()));
      EXPECT_EQ(ref_got, ref_want);
    }
}

// KV rows of Q8_0: attention over them equals attention over the same rows
// dequantized (d * q) as F32 rows, bit for bit, on the vector path (head_dim
// 32 and 64: one or two blocks per head) and the generic one (288 > 256), in
// tree passes and one-token passes; the reference reads them the same way and
// agrees with the kernel; the quantization is real (the rows as written give
// other outputs) and close (within a few percent).
TEST(Kernels, TreeAttentionOverQ8RowsEqualsDequantizedRows) {
  std::mt19937 rng(80);
  for (int hd : {32, 64, 288})
    for (int n : {21, 1}) {
      const TreeCase c = random_tree_case(rng, 6, 2, hd, 37, n);
      const int row = c.n_kv * hd, rows = static_cast<int>(c.k.size()) / row;
      std::vector<math::BlockQ8_0> kq(c.k.size() / 32), vq(c.v.size() / 32);
      cpu::write_kv_rows(kq.data(), DType::Q8_0, 0, c.k.data(), rows, row);
      cpu::write_kv_rows(vq.data(), DType::Q8_0, 0, c.v.data(), rows, row);
      TreeCase w = c;
      w.k = q8_rows(c.k, row), w.v = q8_rows(c.v, row);
      const size_t n_out = static_cast<size_t>(c.n) * c.n_heads * hd;
      std::vector<float> got(n_out, NAN), want(n_out), raw(n_out), ref_got(n_out), ref_want(n_out);
      AttentionArgs a = c.args(got.data());
      a.k = kq.data(), a.v = vq.data(), a.kv_type = DType::Q8_0;
      cpu::attention(a);
      cpu::attention(w.args(want.data()));
      cpu::attention(c.args(raw.data()));
      const std::string what = "head_dim " + std::to_string(hd) + " n " + std::to_string(n);
      EXPECT_EQ(got, want) << what;
      EXPECT_NE(got, raw) << what << ": no quantization happened";
      EXPECT_LT(rel_err(got, raw), 0.05) << what;
      a.out = ref_got.data();
      cpu::attention_reference(a);
      cpu::attention_reference(w.args(ref_want.data()));
      EXPECT_EQ(ref_got, ref_want) << what;
      EXPECT_LT(rel_err(got, ref_got), 1e-5) << what;
    }
  // head_dim not a multiple of 32: one line, no read.
  const TreeCase c = random_tree_case(rng, 6, 2, 48, 5, 3);
  std::vector<float> out(3 * 6 * 48);
  std::vector<math::BlockQ8_0> kq(c.k.size() / 32);
  AttentionArgs a = c.args(out.data());
  a.k = a.v = kq.data(), a.kv_type = DType::Q8_0;
  try {
    cpu::attention(a);
    ADD_FAILURE() << "head_dim 48 was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("head_dim that is a multiple of 32, got 48"), std::string::npos) << e.what();
  }
}

// The Q8_0 row store: each block of 32 is ggml's q8_0 of those 32 floats
// (d = max|x| / 127 as f16, q = round(x / d), written out here from the
// definition), a zero block d = 0; a row's bytes depend on that row alone
// (written with others, alone, or through row_at: the same bytes); a block
// holding a NaN or an infinity reads back as NaN while the row's other blocks
// keep their values, and attention over such a row gives NaN only to the
// tokens that read it (no crash); a row length that is not whole blocks is a
// one-line error.
TEST(Kernels, KvRowStoreQuantizesQ8BlocksOnTheirOwn) {
  std::mt19937 rng(44);
  std::normal_distribution<float> nd;
  const int row = 96, rows = 5;  // three blocks per row
  std::vector<float> x(static_cast<size_t>(row) * rows);
  for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 7 == 0 ? 40.0f : 1.0f) * nd(rng);
  for (int i = 0; i < 32; ++i) x[32 + i] = 0.0f;                                  // row 0, block 1: zeros
  for (int i = 0; i < 32; ++i) x[64 + i] = static_cast<float>(i - 16) * 0.25f;  // row 0, block 2: a ramp
  std::vector<math::BlockQ8_0> all(x.size() / 32);
  cpu::write_kv_rows(all.data(), DType::Q8_0, 0, x.data(), rows, row);
  for (size_t b = 0; b < all.size(); ++b) {
    const float* xb = x.data() + 32 * b;
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float d = amax / 127.0f;
    EXPECT_EQ(all[b].d, math::f32_to_f16(d)) << "block " << b;
    for (int i = 0; i < 32; ++i)
      EXPECT_EQ(all[b].qs[i], d == 0 ? 0 : static_cast<int>(std::round(xb[i] * (1.0f / d)))) << "block " << b;
  }
  EXPECT_EQ(all[1].d, 0);
  EXPECT_EQ(all[2].qs[0], -127);  // -4, the largest magnitude
  EXPECT_EQ(all[2].qs[18], 16);   // 0.5 * 127 / 4 = 15.875
  // Row independence: rows 3 and 1 written alone, and through row_at in reverse order.
  std::vector<math::BlockQ8_0> one(all.size()), at(all.size());
  cpu::write_kv_rows(one.data(), DType::Q8_0, 3, x.data() + 3 * row, 1, row);
  EXPECT_EQ(0, std::memcmp(one.data() + 9, all.data() + 9, 3 * sizeof(math::BlockQ8_0)));
  const int32_t where[rows] = {4, 3, 2, 1, 0};
  std::vector<float> reversed;
  for (int r = rows - 1; r >= 0; --r) reversed.insert(reversed.end(), x.begin() + r * row, x.begin() + (r + 1) * row);
  cpu::write_kv_rows_at(at.data(), DType::Q8_0, where, reversed.data(), rows, row);
  EXPECT_EQ(0, std::memcmp(at.data(), all.data(), all.size() * sizeof(math::BlockQ8_0)));
  // Non-finite input: its block reads back NaN, the others keep their values.
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    std::vector<float> y(x.begin(), x.begin() + row);
    y[40] = bad;  // block 1
    std::vector<math::BlockQ8_0> q(3);
    cpu::write_kv_rows(q.data(), DType::Q8_0, 0, y.data(), 1, row);
    for (int i = 0; i < 32; ++i) {
      EXPECT_TRUE(std::isnan(math::dequant_q8_0(q[1], i))) << bad;
      EXPECT_EQ(math::dequant_q8_0(q[0], i), math::dequant_q8_0(all[0], i));
      EXPECT_EQ(math::dequant_q8_0(q[2], i), math::dequant_q8_0(all[2], i));
    }
  }
  // Attention over a NaN row: a chain of 4 new tokens (head_dim 32, one KV
  // head) whose third key row is NaN: tokens 0 and 1 do not read it.
  TreeCase c = random_tree_case(rng, 2, 1, 32, 0, 4);
  for (int i = 0; i < 4; ++i) c.parents[i] = i - 1;
  c.off = {0}, c.anc.clear();
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j <= i; ++j) c.anc.push_back(j);
    c.off.push_back(static_cast<int32_t>(c.anc.size()));
  }
  c.k[2 * 32 + 5] = NAN;
  std::vector<math::BlockQ8_0> kq(4), vq(4);
  cpu::write_kv_rows(kq.data(), DType::Q8_0, 0, c.k.data(), 4, 32);
  cpu::write_kv_rows(vq.data(), DType::Q8_0, 0, c.v.data(), 4, 32);
  std::vector<float> out(4 * 2 * 32, 0.0f);
  AttentionArgs a = c.args(out.data());
  a.k = kq.data(), a.v = vq.data(), a.kv_type = DType::Q8_0;
  cpu::attention(a);
  for (int i = 0; i < 4; ++i)
    for (int e = 0; e < 64; ++e) EXPECT_EQ(std::isnan(out[i * 64 + e]), i >= 2) << "token " << i;
  // Not whole blocks.
  try {
    cpu::write_kv_rows(kq.data(), DType::Q8_0, 0, x.data(), 1, 48);
    ADD_FAILURE() << "48 floats were taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of 32 floats, got 48"), std::string::npos) << e.what();
  }
}

// The KV row store rounds to nearest even exactly like the shared math (the
// CUDA backend's rows), on the vector body and the scalar tail.
TEST(Kernels, KvRowStoreRoundsLikeTheSharedMath) {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd;
  std::vector<float> x;
  for (float s : {1e-7f, 1e-3f, 1.0f, 300.0f, 6e4f})
    for (int i = 0; i < 200; ++i) x.push_back(s * nd(rng));
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, 65504.0f, 65519.0f, 65520.0f, 1e-8f, 6e-8f,
                            1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f,
                            3.0e38f, -3.4e38f};
  x.insert(x.end(), std::begin(specials), std::end(specials));
  x.push_back(NAN);
  x.push_back(2.0f);  // count % 8 != 0: a scalar tail
  ASSERT_NE(x.size() % 8, 0u);
  for (DType t : {DType::F16, DType::BF16}) {
    std::vector<uint16_t> got(x.size());
    cpu::write_kv_rows(got.data(), t, 0, x.data(), 1, static_cast<int>(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      const uint16_t want = t == DType::F16 ? math::f32_to_f16(x[i]) : math::f32_to_bf16(x[i]);
      if (std::isnan(x[i])) {
        const float back = t == DType::F16 ? math::f16_to_f32(got[i]) : math::bf16_to_f32(got[i]);
        EXPECT_TRUE(std::isnan(back));
      } else {
        EXPECT_EQ(got[i], want) << dtype_name(t) << " x = " << x[i];
      }
    }
  }
  // Halfway cases go to the even neighbour.
  EXPECT_EQ(math::f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
  EXPECT_EQ(math::f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);
  EXPECT_EQ(math::f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
  EXPECT_EQ(math::f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
  // Rows land at first_row.
  std::vector<float> one = {1.5f, -2.0f};
  std::vector<uint16_t> store(6, 0);
  cpu::write_kv_rows(store.data(), DType::BF16, 2, one.data(), 1, 2);
  EXPECT_EQ(store, (std::vector<uint16_t>{0, 0, 0, 0, 0x3fc0, 0xc000}));
  // Only the KV types hold KV rows.
  EXPECT_THROW(cpu::write_kv_rows(store.data(), DType::Q4_0, 0, one.data(), 1, 2), Error);
  AttentionArgs bad;
  bad.kv_type = DType::Q4_0;
  EXPECT_THROW(cpu::attention(bad), Error);
}

TEST(Kernels, TreeAttentionMatchesDenseMaskReference) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 32; ++trial) {
    const int hd = std::vector<int>{16, 64, 128, 12}[trial % 4];
    const int n_kv = trial % 2 ? 2 : 3;
    const int n_past = trial % 8 == 0 ? 0 : (int)(rng() % 100);
    const int n = trial % 3 == 0 ? 1 : 1 + (int)(rng() % 64);
    const TreeCase c = random_tree_case(rng, 6, n_kv, hd, n_past, n);
    std::vector<float> out(n * 6 * hd, NAN), ref(out.size());
    cpu::attention(c.args(out.data()));
    cpu::attention_reference(c.args(ref.data()));
    ASSERT_LT(rel_err(out, ref), 1e-5) << "trial " << trial << " hd " << hd << " n " << n;
  }
}

// Issue 46: sliding-window attention (Mistral 7B v0.1). A token at position
// p sees key positions p - window + 1 .. p (llama.cpp's is_masked_swa): the
// kernel (committed rows from its window's start, ancestors as listed) agrees
// with the reference's dense mask built from positions, on both paths
// (head_dim 12: generic), with windows that mask committed rows, ancestors or
// nothing. Negative control: where the window masks a key, the output differs
// from full attention's.
TEST(Kernels, TreeAttentionUnderASlidingWindowMatchesReference) {
  std::mt19937 rng(46);
  int masked = 0;
  for (int trial = 0; trial < 48; ++trial) {
    const int hd = std::vector<int>{16, 64, 128, 12}[trial % 4];
    const int window = std::vector<int>{1, 3, 20, 64, 200, 9}[trial % 6];
    const int n_past = trial % 8 == 0 ? 0 : (int)(rng() % 100);
    const int n = trial % 3 == 0 ? 1 : 1 + (int)(rng() % 64);
    const TreeCase full = random_tree_case(rng, 6, 2, hd, n_past, n), c = with_window(full, window);
    std::vector<float> out(n * 6 * hd, NAN), ref(out.size()), all(out.size());
    cpu::attention(c.args(out.data()));
    cpu::attention_reference(c.args(ref.data()));
    ASSERT_LT(rel_err(out, ref), 1e-5) << "trial " << trial << " hd " << hd << " window " << window << " n " << n;
    cpu::attention(full.args(all.data()));
    const bool masks = *std::max_element(c.pos.begin(), c.pos.end()) >= window;
    if (masks) ++masked;
    if (masks)
      EXPECT_NE(out, all) << "trial " << trial << ": the window masked nothing";
    else
      EXPECT_EQ(out, all) << "trial " << trial << ": a window past every position changed the output";
  }
  EXPECT_GT(masked, 16);
  const TreeCase small = random_tree_case(rng, 6, 2, 16, 4, 2);
  std::vector<float> out(2 * 6 * 16);
  AttentionArgs no_pos = small.args(out.data());
  no_pos.window = 3;
  EXPECT_THROW(cpu::attention(no_pos), Error);
}

// Under a sliding window a token's attention in a tree pass is still
// bit-identical to decoding it alone after its prefix and every ancestor
// (there the window masks committed rows only): masking keeps each token's
// reduction order. Windows shorter than the trees' depth mask ancestors too.
TEST(Kernels, TreeAttentionUnderAWindowOfATokenEqualsDecodingItAlone) {
  std::mt19937 rng(47);
  for (const int threads : {0, 1})
    for (int hd : {16, 64, 12})
      for (int window : {2, 4, 30}) {
        const TreeCase full = random_tree_case(rng, 8, 2, hd, 45, 41), c = with_window(full, window);
        std::vector<float> out(c.n * 8 * hd);
        if (threads)
          tbb::task_arena(threads).execute([&] { cpu::attention(c.args(out.data())); });
        else
          cpu::attention(c.args(out.data()));
        const int64_t kv = 2 * hd;
        for (int i = 0; i < c.n; ++i) {
          TreeCase d = c;
          d.n = 1;
          d.n_past = c.n_past + (full.off[i + 1] - full.off[i]) - 1;
          d.k.assign(c.k.begin(), c.k.begin() + c.n_past * kv);
          d.v.assign(c.v.begin(), c.v.begin() + c.n_past * kv);
          for (int j = full.off[i]; j < full.off[i + 1]; ++j) {
            const int64_t row = (c.n_past + full.anc[j]) * kv;
            d.k.insert(d.k.end(), c.k.begin() + row, c.k.begin() + row + kv);
            d.v.insert(d.v.end(), c.v.begin() + row, c.v.begin() + row + kv);
          }
          d.q.assign(c.q.begin() + i * 8 * hd, c.q.begin() + (i + 1) * 8 * hd);
          d.parents = {-1};
          d.off = {0, 1};
          d.anc = {0};
          d.pos = {c.pos[i]};
          ASSERT_EQ(d.pos[0], d.n_past);
          std::vector<float> one(8 * hd);
          cpu::attention(d.args(one.data()));
          for (int e = 0; e < 8 * hd; ++e)
            ASSERT_EQ(one[e], out[i * 8 * hd + e])
                << "threads " << threads << " hd " << hd << " window " << window << " token " << i;
        }
      }
}

// A token's attention in a tree pass is bit-identical to the same token
// decoded alone after its prefix and ancestors: the scores, softmax and
// weighted sum never depend on which other tokens share the pass. The pass
// runs on all threads and on one: a pass with enough tokens for the threads
// takes eight tokens per task (sharing the prefix), so one thread makes sure
// that path is taken whatever the machine; 41 tokens leave a partial block.
TEST(Kernels, TreeAttentionOfATokenEqualsDecodingItAlone) {
  std::mt19937 rng(11);
  for (const int threads : {0, 1})
    for (int hd : {16, 64, 128, 12}) {
      const TreeCase c = random_tree_case(rng, 8, 2, hd, 45, 41);
      std::vector<float> out(c.n * 8 * hd);
      if (threads)
        tbb::task_arena(threads).execute([&] { cpu::attention(c.args(out.data())); });
      else
        cpu::attention(c.args(out.data()));
      const int64_t kv = 2 * hd;
      for (int i = 0; i < c.n; ++i) {
        // The cache as decoding would have it: prefix, then the ancestors in order.
        TreeCase d = c;
        d.n = 1;
        d.n_past = c.n_past + (c.off[i + 1] - c.off[i]) - 1;
        d.k.assign(c.k.begin(), c.k.begin() + c.n_past * kv);
        d.v.assign(c.v.begin(), c.v.begin() + c.n_past * kv);
        for (int j = c.off[i]; j < c.off[i + 1]; ++j) {
          const int64_t row = (c.n_past + c.anc[j]) * kv;
          d.k.insert(d.k.end(), c.k.begin() + row, c.k.begin() + row + kv);
          d.v.insert(d.v.end(), c.v.begin() + row, c.v.begin() + row + kv);
        }
        d.q.assign(c.q.begin() + i * 8 * hd, c.q.begin() + (i + 1) * 8 * hd);
        d.parents = {-1};
        d.off = {0, 1};
        d.anc = {0};
        std::vector<float> one(8 * hd);
        cpu::attention(d.args(one.data()));
        for (int e = 0; e < 8 * hd; ++e)
          ASSERT_EQ(one[e], out[i * 8 * hd + e]) << "threads " << threads << " hd " << hd << " token " << i;
      }
    }
}

namespace {
// Several sequences (trees after prefixes of different lengths) in one store
// of blocks of 8 rows, laid out in shuffled blocks, and their tokens
// interleaved in one pass: the AttentionArgs of a paged KV cache.
struct PagedCase {
  static constexpr int kBlockRows = 8;
  std::vector<TreeCase> seqs;
  std::vector<int32_t> seq, past, table, off{0}, anc, owner_row;  // owner_row: token i is row owner_row[i] of its tree
  std::vector<int32_t> pos;                                       // under a window
  std::vector<float> q, k, v;
  int stride = 0, n = 0, window = 0;
  AttentionArgs args(float* out) const {
    const TreeCase& c = seqs[0];
    AttentionArgs a{q.data(),
                    k.data(),
                    v.data(),
                    out,
                    n,
                    0,
                    c.n_heads,
                    c.n_kv,
                    c.hd,
                    nullptr,
                    off.data(),
                    anc.data(),
                    1.0f / std::sqrt(float(c.hd))};
    a.seq = seq.data(), a.seq_past = past.data(), a.table = table.data();
    a.table_stride = stride, a.block_rows = kBlockRows;
    a.pos = window > 0 ? pos.data() : nullptr, a.window = window;
    return a;
  }
};
PagedCase paged_case(std::mt19937& rng, int n_heads, int n_kv, int hd, const std::vector<std::pair<int, int>>& shapes,
                     int window = 0) {
  PagedCase p;
  p.window = window;
  int blocks = 0;
  for (auto [past, n] : shapes) {
    p.seqs.push_back(random_tree_case(rng, n_heads, n_kv, hd, past, n));
    if (window > 0) p.seqs.back() = with_window(p.seqs.back(), window);
    p.stride = std::max(p.stride, (past + n + 7) / 8);
    blocks += (past + n + 7) / 8;
  }
  blocks += 3;  // blocks nobody owns (NaN: reading one poisons the output)
  std::vector<int32_t> ids(blocks);
  for (int b = 0; b < blocks; ++b) ids[b] = b;
  std::shuffle(ids.begin(), ids.end(), rng);
  const int64_t row = static_cast<int64_t>(n_kv) * hd;
  p.k.assign(blocks * 8 * row, NAN);
  p.v.assign(p.k.size(), NAN);
  p.table.assign(shapes.size() * p.stride, -1);
  int next = 0;
  for (size_t s = 0; s < shapes.size(); ++s) {
    const TreeCase& c = p.seqs[s];
    p.past.push_back(c.n_past);
    for (int b = 0; b < (c.n_past + c.n + 7) / 8; ++b) p.table[s * p.stride + b] = ids[next++];
    for (int r = 0; r < c.n_past + c.n; ++r) {
      const int64_t at = kv_row(p.table.data() + s * p.stride, 8, r) * row;
      std::copy_n(c.k.begin() + r * row, row, p.k.begin() + at);
      std::copy_n(c.v.begin() + r * row, row, p.v.begin() + at);
    }
  }
  // Tokens interleaved: round robin over the sequences, each in its own order.
  std::vector<int> taken(shapes.size(), 0);
  for (bool more = true; more;) {
    more = false;
    for (size_t s = 0; s < shapes.size(); ++s) {
      const TreeCase& c = p.seqs[s];
      if (taken[s] == c.n) continue;
      more = true;
      const int i = taken[s]++;
      p.seq.push_back(static_cast<int32_t>(s));
      p.owner_row.push_back(i);
      if (window > 0) p.pos.push_back(c.pos[i]);
      p.anc.insert(p.anc.end(), c.anc.begin() + c.off[i], c.anc.begin() + c.off[i + 1]);
      p.off.push_back(static_cast<int32_t>(p.anc.size()));
      p.q.insert(p.q.end(), c.q.begin() + i * n_heads * hd, c.q.begin() + (i + 1) * n_heads * hd);
    }
  }
  p.n = static_cast<int>(p.seq.size());
  return p;
}
}  // namespace

// Many sequences in one pass over a paged store: every token's output is bit
// for bit that of its own sequence's pass alone over a contiguous cache (the
// one-sequence case of the same kernel), on the vector path (head_dim 64) and
// the generic one (12), on all threads and on one, for F32, F16 and Q8_0 rows
// (Q8_0: head_dim 64 only), with
// and without a sliding window (6: it masks committed rows and ancestors); the
// double-precision reference agrees. Negative control: a sequence reading
// another's block table gives other outputs.
TEST(Kernels, TreeAttentionOverSeveralSequencesEqualsEachAlone) {
  std::mt19937 rng(21);
  const std::vector<std::pair<int, int>> shapes = {{45, 1}, {0, 9}, {13, 12}, {70, 1}, {3, 17}};
  for (int window : {0, 6})
    for (DType t : {DType::F32, DType::F16, DType::Q8_0})
      for (int hd : {64, 12})
        for (int threads : {0, 1}) {
          if (t == DType::Q8_0 && hd % 32 != 0) continue;
          PagedCase p = paged_case(rng, 8, 2, hd, shapes, window);
          // Q8_0: the store written from the rows as they are; the rows
          // compared with are what it holds (each row quantized on its own,
          // so both layouts round alike).
          std::vector<math::BlockQ8_0> kq(p.k.size() / 32), vq(p.v.size() / 32);
          if (t == DType::Q8_0) {
            const int row = 2 * hd;
            cpu::write_kv_rows(kq.data(), t, 0, p.k.data(), static_cast<int64_t>(p.k.size()) / row, row);
            cpu::write_kv_rows(vq.data(), t, 0, p.v.data(), static_cast<int64_t>(p.v.size()) / row, row);
            p.k = q8_rows(p.k, row), p.v = q8_rows(p.v, row);
            for (TreeCase& c : p.seqs) c.k = q8_rows(c.k, row), c.v = q8_rows(c.v, row);
          }
          if (t == DType::F16) {
            // Rows rounded as the store would hold them, in both layouts.
            auto round = [](std::vector<float>& x) {
              for (float& e : x) e = std::isnan(e) ? e : math::f16_to_f32(math::f32_to_f16(e));
            };
            round(p.k), round(p.v);
            for (TreeCase& c : p.seqs) round(c.k), round(c.v);
          }
          std::vector<uint16_t> k16(p.k.size()), v16(p.v.size());
          const int row = 2 * hd;
          cpu::write_kv_rows(k16.data(), DType::F16, 0, p.k.data(), p.k.size() / row, row);
          cpu::write_kv_rows(v16.data(), DType::F16, 0, p.v.data(), p.v.size() / row, row);
          const size_t per_tok = 8 * hd;
          std::vector<float> out(p.n * per_tok, NAN), ref(out.size());
          AttentionArgs a = p.args(out.data());
          if (t == DType::F16) a.k = k16.data(), a.v = v16.data(), a.kv_type = t;
          if (t == DType::Q8_0) a.k = kq.data(), a.v = vq.data(), a.kv_type = t;
          auto run = [&](const AttentionArgs& x) {
            if (threads)
              tbb::task_arena(threads).execute([&] { cpu::attention(x); });
            else
              cpu::attention(x);
          };
          run(a);
          const std::string what = std::string(dtype_name(t)) + " hd " + std::to_string(hd) + " threads " +
                                   std::to_string(threads) + " window " + std::to_string(window);
          for (size_t s = 0; s < p.seqs.size(); ++s) {
            const TreeCase& c = p.seqs[s];
            std::vector<float> alone(c.n * per_tok);
            run(c.args(alone.data()));
            for (int i = 0; i < p.n; ++i) {
              if (p.seq[i] != static_cast<int32_t>(s)) continue;
              for (size_t e = 0; e < per_tok; ++e)
                ASSERT_EQ(out[i * per_tok + e], alone[p.owner_row[i] * per_tok + e])
                    << what << " seq " << s << " token " << i;
            }
          }
          AttentionArgs r = a;
          r.out = ref.data();
          cpu::attention_reference(r);
          EXPECT_LT(rel_err(out, ref), 1e-5) << what;
          // Sequence 1's tokens read sequence 4's table (it covers their positions).
          std::vector<int32_t> table = p.table;
          std::copy_n(p.table.begin() + 4 * p.stride, p.stride, table.begin() + 1 * p.stride);
          std::vector<float> wrong(out.size());
          AttentionArgs w = a;
          w.table = table.data(), w.out = wrong.data();
          run(w);
          EXPECT_NE(wrong, out) << what;
        }
}

TEST(Kernels, RopeModesAndNorm) {
  auto be = make_cpu_backend();
  const int hd = 8;
  std::vector<float> x(2 * hd), y;
  for (int i = 0; i < 2 * hd; ++i) x[i] = 0.1f * (float)(i + 1);
  const int32_t pos[2] = {0, 3};
  // Pair i turns by pos / factor[i] * base^(-2i/hd) (scaled RoPE: Llama 3's
  // rope_freqs, linear scaling).
  const double factor[hd / 2] = {1.0, 2.0, 8.0, 1.5};
  std::vector<double> inv(hd / 2);
  for (int i = 0; i < hd / 2; ++i) inv[i] = math::rope_inv_freq(i, hd, 10000.0, factor[i]);
  auto theta = [&](int i) { return static_cast<float>(3.0 * std::pow(10000.0, -2.0 * i / hd) / factor[i]); };
  y = x;
  be->rope(y.data(), 2, 1, hd, pos, inv.data(), RopeMode::kInterleaved);
  for (int i = 0; i < hd; ++i) EXPECT_FLOAT_EQ(y[i], x[i]);  // position 0: identity
  for (int i = 0; i < hd / 2; ++i) {
    const float th = theta(i);
    EXPECT_NEAR(y[hd + 2 * i], x[hd + 2 * i] * std::cos(th) - x[hd + 2 * i + 1] * std::sin(th), 1e-6);
  }
  y = x;
  be->rope(y.data(), 2, 1, hd, pos, inv.data(), RopeMode::kHalf);
  for (int i = 0; i < hd / 2; ++i) {
    const float th = theta(i);
    EXPECT_NEAR(y[hd + i], x[hd + i] * std::cos(th) - x[hd + i + hd / 2] * std::sin(th), 1e-6);
    EXPECT_NEAR(y[hd + i + hd / 2], x[hd + i] * std::sin(th) + x[hd + i + hd / 2] * std::cos(th), 1e-6);
  }
  std::vector<float> w(hd, 2.0f), o(2 * hd);
  be->rmsnorm(x.data(), w.data(), 2, hd, 1e-5f, o.data());
  double ss = 0;
  for (int i = 0; i < hd; ++i) ss += x[i] * x[i];
  EXPECT_NEAR(o[3], x[3] * 2.0f / std::sqrt(ss / hd + 1e-5), 1e-6);
}

// The fused residual add + RMSNorm equals add then rmsnorm exactly, also when
// its output is the residual's input buffer (as the forward pass uses it).
TEST(Kernels, AddRmsnormIsAddThenRmsnorm) {
  auto be = make_cpu_backend();
  const int n = 3, dim = 37;
  std::vector<float> x(n * dim), y(n * dim), w(dim);
  for (int i = 0; i < n * dim; ++i) x[i] = std::sin(0.37f * i), y[i] = std::cos(0.11f * i);
  for (int i = 0; i < dim; ++i) w[i] = 0.5f + 0.01f * i;
  std::vector<float> xa = x, want(n * dim);
  be->add(xa.data(), y.data(), xa.size());
  be->rmsnorm(xa.data(), w.data(), n, dim, 1e-5f, want.data());
  std::vector<float> xb = x, yb = y;
  be->add_rmsnorm(xb.data(), yb.data(), w.data(), n, dim, 1e-5f, yb.data());
  EXPECT_EQ(xb, xa);
  EXPECT_EQ(yb, want);
}

// The bias add (Qwen2's q/k/v biases) adds the one row to every token's row,
// and RMSNorm in place over [n * heads] rows of head_dim (Qwen3's per-head
// q/k norms) equals the out-of-place norm.
TEST(Kernels, AddBiasAndPerHeadNormInPlace) {
  auto be = make_cpu_backend();
  const int n = 3, width = 40, hd = 8;
  std::vector<float> x(n * width), b(width);
  for (int i = 0; i < n * width; ++i) x[i] = std::sin(0.29f * i);
  for (int c = 0; c < width; ++c) b[c] = 0.25f * c - 3.0f;
  std::vector<float> got = x;
  be->add_bias(got.data(), b.data(), n, width);
  for (int t = 0; t < n; ++t)
    for (int c = 0; c < width; ++c) EXPECT_EQ(got[t * width + c], x[t * width + c] + b[c]) << t << " " << c;
  std::vector<float> w(hd), want(n * width);
  for (int i = 0; i < hd; ++i) w[i] = 0.75f + 0.1f * i;
  be->rmsnorm(got.data(), w.data(), n * width / hd, hd, 1e-6f, want.data());
  be->rmsnorm(got.data(), w.data(), n * width / hd, hd, 1e-6f, got.data());
  EXPECT_EQ(got, want);
}

#ifdef REDWOOD_HAVE_CUDA
#include "kernels/cuda/device.h"
TEST(CudaBackend, DescribeDevices) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  EXPECT_NE(cuda::describe_devices().find("sm_"), std::string::npos);
}
#endif
