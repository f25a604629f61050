// Token sampling: greedy, temperature, top-k, top-p; seeded and reproducible
// (own uniform draw from a 64-bit Mersenne Twister, no implementation-defined
// distributions). probs() exposes the exact filtered distribution that sample()
// draws from, so speculative verifiers can use the same law for target and draft.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace redwood {

struct SamplingParams {
  float temperature = 0.0f;  // <= 0: greedy
  float top_p = 1.0f;        // (0, 1]
  int top_k = 0;             // 0: off
  uint64_t seed = 0;
  bool greedy() const { return temperature <= 0.0f; }
};

// Validates parameters; throws redwood::Error with a one-line message.
void validate(const SamplingParams& p);

// Index of the largest logit (lowest index on ties).
int32_t argmax(std::span<const float> logits);

// The filtered distribution (temperature, then top-k, then top-p), normalised
// over the full vocabulary; greedy gives a one-hot vector.
void probs(const SamplingParams& p, std::span<const float> logits, std::vector<float>& out);

class Rng {
 public:
  explicit Rng(uint64_t seed) : g_(seed) {}
  double uniform() { return static_cast<double>(g_() >> 11) * 0x1.0p-53; }  // [0, 1)
  uint64_t next() { return g_(); }

 private:
  std::mt19937_64 g_;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  int32_t sample(std::span<const float> logits);
  const SamplingParams& params() const { return p_; }

 private:
  SamplingParams p_;
  Rng rng_;
  std::vector<float> probs_;
};

}  // namespace redwood
