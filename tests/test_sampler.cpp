#include <gtest/gtest.h>

#include <cmath>

#include "src/engine/sampler.h"
#include "src/util/error.h"

using namespace redwood;

TEST(Sampler, GreedyIsArgmaxLowestIndexOnTies) {
  std::vector<float> l = {1, 5, 5, 2};
  EXPECT_EQ(argmax(l), 1);
  Sampler s({});
  EXPECT_EQ(s.sample(l), 1);
}

TEST(Sampler, ProbsTemperatureTopKTopP) {
  std::vector<float> l = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  std::vector<float> p;
  probs({1.0f, 1.0f, 0, 0}, l, p);
  EXPECT_NEAR(p[0], 0.5, 1e-6);
  EXPECT_NEAR(p[3], 0.05, 1e-6);
  probs({1.0f, 1.0f, 2, 0}, l, p);
  EXPECT_NEAR(p[0], 0.5 / 0.8, 1e-6);
  EXPECT_EQ(p[2], 0.0f);
  probs({1.0f, 0.85f, 0, 0}, l, p);  // 0.5 + 0.3 = 0.8 < 0.85 -> keep 3
  EXPECT_NEAR(p[2], 0.15 / 0.95, 1e-6);
  EXPECT_EQ(p[3], 0.0f);
  probs({0.5f, 1.0f, 0, 0}, l, p);  // temperature 0.5 squares the odds
  EXPECT_NEAR(p[0] / p[1], (0.5 / 0.3) * (0.5 / 0.3), 1e-4);
}

TEST(Sampler, SeededAndReproducibleAndMatchesLaw) {
  std::vector<float> l = {0.0f, std::log(3.0f), std::log(6.0f)};
  SamplingParams sp{1.0f, 1.0f, 0, 1234};
  Sampler a(sp), b(sp);
  std::vector<int> counts(3);
  const int N = 200000;
  for (int i = 0; i < N; ++i) {
    const int x = a.sample(l);
    ASSERT_EQ(x, b.sample(l));
    counts[x]++;
  }
  // chi-square with 2 dof; 13.8 is the 0.999 quantile
  const double expect[3] = {0.1, 0.3, 0.6};
  double chi = 0;
  for (int k = 0; k < 3; ++k) chi += std::pow(counts[k] - N * expect[k], 2) / (N * expect[k]);
  EXPECT_LT(chi, 13.8);
}

TEST(Sampler, InvalidParams) {
  EXPECT_THROW(Sampler({-1.0f, 1.0f, 0, 0}), Error);
  EXPECT_THROW(Sampler({1.0f, 0.0f, 0, 0}), Error);
  EXPECT_THROW(Sampler({1.0f, 1.5f, 0, 0}), Error);
  EXPECT_THROW(Sampler({1.0f, 1.0f, -2, 0}), Error);
}
