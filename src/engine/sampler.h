// Token sampling: greedy, temperature, top-k, top-p; seeded and reproducible
// (own uniform draw from a 64-bit Mersenne Twister, no implementation-defined
// distributions). probs() exposes the exact filtered distribution that sample()
// draws from, so speculative verifiers can use the same law for target and draft.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "src/util/error.h"

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

// Logits with a NaN or infinite entry (NaN weights, an overflow in the pass):
// no token is ever drawn from them. argmax, probs and Sampler::sample throw it
// ("<who> logits have a non-finite entry (nan at token id 5 of 288)"); `who`
// names the model ("target", "draft"). A batch job records it on the prompt's
// line; elsewhere it is the command's one-line error.
class NonFiniteLogits : public Error {
 public:
  using Error::Error;
};

// Throws NonFiniteLogits naming the first non-finite entry of `logits`, if any.
void check_finite(std::span<const float> logits, const char* who = "model");

// Index of the largest logit (lowest index on ties). Non-finite logits throw
// NonFiniteLogits (checked in the same scan).
int32_t argmax(std::span<const float> logits, const char* who = "model");

// The filtered distribution (temperature, then top-k, then top-p), normalised
// over the full vocabulary; greedy gives a one-hot vector. Non-finite logits
// throw NonFiniteLogits.
void probs(const SamplingParams& p, std::span<const float> logits, std::vector<float>& out, const char* who = "model");

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
