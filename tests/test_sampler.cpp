#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>

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

// The kept set by a full sort (the definition): probability descending,
// index ascending on ties; the first top_k, then the shortest prefix with
// mass >= top_p.
std::vector<float> probs_by_full_sort(const SamplingParams& p, const std::vector<float>& logits) {
  std::vector<float> out;
  probs({p.temperature, 1.0f, 0, 0}, logits, out);  // tempered softmax, nothing cut
  const size_t V = out.size();
  std::vector<int32_t> idx(V);
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(),
            [&](int32_t a, int32_t b) { return out[a] > out[b] || (out[a] == out[b] && a < b); });
  const size_t k = p.top_k > 0 && static_cast<size_t>(p.top_k) < V ? static_cast<size_t>(p.top_k) : V;
  size_t keep = k;
  double cum = 0;
  for (size_t i = 0; i < k && p.top_p < 1.0f; ++i)
    if ((cum += out[idx[i]]) >= p.top_p) {
      keep = i + 1;
      break;
    }
  std::vector<float> kept(V, 0.0f);
  double ks = 0;
  for (size_t i = 0; i < keep; ++i) ks += kept[idx[i]] = out[idx[i]];
  for (size_t i = 0; i < V; ++i) out[i] = static_cast<float>(kept[i] / ks);
  return out;
}

// probs() sorts only the kept prefix (nth_element, growing): bit-identical to
// the full sort on peaked, flat and tied distributions, nuclei of 1 to V tokens.
TEST(Sampler, TopPEqualsTheFullSortDefinition) {
  std::mt19937 g(5);
  for (size_t V : {1u, 3u, 64u, 65u, 1000u, 49152u})
    for (float spread : {0.0f, 0.01f, 1.0f, 8.0f})
      for (float top_p : {1e-6f, 0.3f, 0.9f, 0.999f, 0.9999999f})
        for (int top_k : {0, 1, 50, 300}) {
          std::normal_distribution<float> nd(0.0f, spread);
          std::vector<float> logits(V);
          for (auto& x : logits) x = std::round(nd(g) * 4) / 4;  // quarter steps: many exact ties
          const SamplingParams sp{0.8f, top_p, top_k, 0};
          std::vector<float> got;
          probs(sp, logits, got);
          ASSERT_EQ(got, probs_by_full_sort(sp, logits))
              << "V " << V << " spread " << spread << " top_p " << top_p << " top_k " << top_k;
        }
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

// Issue 42: NaN or infinite logits are an error, never a token (the old argmax
// kept id 0 when logit 0 was NaN; sampling drew the last id).
TEST(Sampler, NonFiniteLogitsAreAnErrorNamingTheEntry) {
  const float nan = std::nanf(""), inf = INFINITY;
  const std::vector<std::pair<std::vector<float>, std::string>> rows = {
      {{nan, 1, 2, 3}, "nan at token id 0 of 4"},
      {{1, 2, 3, nan}, "nan at token id 3 of 4"},
      {{1, inf, 2, 3, 4, 5, 6, 7, 8}, "+inf at token id 1 of 9"},
      {{1, 2, -inf}, "-inf at token id 2 of 3"},
      {{nan, nan, nan}, "nan at token id 0 of 3"}};
  for (const auto& [l, what] : rows) {
    for (const float t : {0.0f, 0.7f}) {
      SamplingParams p;
      p.temperature = t;
      std::vector<float> out;
      for (const auto& f : std::vector<std::function<void()>>{[&] { Sampler(p).sample(l); },
                                                              [&] { probs(p, l, out, "draft"); }}) {
        try {
          f();
          ADD_FAILURE() << what << " at T = " << t << ": no error";
        } catch (const NonFiniteLogits& e) {
          EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
          EXPECT_NE(std::string(e.what()).find("logits have a non-finite entry"), std::string::npos) << e.what();
        }
      }
    }
    EXPECT_THROW(argmax(l), NonFiniteLogits) << what;
  }
  std::vector<float> o;
  try {
    probs({}, std::vector<float>{nan}, o, "target");
    ADD_FAILURE();
  } catch (const NonFiniteLogits& e) {
    EXPECT_EQ(std::string(e.what()), "target logits have a non-finite entry (nan at token id 0 of 1)");
  }
  const std::vector<float> ok = {-1e30f, 3e38f, 0.0f};  // large but finite: fine
  EXPECT_EQ(argmax(ok), 1);
}
