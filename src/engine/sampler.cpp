#include "src/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "kernels/common/math.h"
#include "src/util/error.h"

namespace redwood {

void validate(const SamplingParams& p) {
  if (!std::isfinite(p.temperature))
    throw Error("temperature must be a finite number >= 0, got " + std::to_string(p.temperature));
  if (p.temperature < 0) throw Error("temperature must be >= 0");
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) throw Error("top-p must be in (0, 1]");
  if (p.top_k < 0) throw Error("top-k must be >= 0");
}

void check_finite(std::span<const float> logits, const char* who) {
  for (size_t i = 0; i < logits.size(); ++i) {
    const float x = logits[i];
    if (std::isfinite(x)) continue;
    throw NonFiniteLogits(std::string(who) + " logits have a non-finite entry (" +
                          (std::isnan(x) ? "nan" : x > 0 ? "+inf" : "-inf") + " at token id " + std::to_string(i) +
                          " of " + std::to_string(logits.size()) + ")");
  }
}

int32_t argmax(std::span<const float> logits, const char* who) {
  if (logits.empty()) return 0;
  int32_t best = 0;
  float z = logits[0] - logits[0];  // stays 0 while every entry is finite; NaN after a NaN or an inf
  for (size_t i = 1; i < logits.size(); ++i) {
    z += logits[i] - logits[i];
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  }
  if (z != 0.0f) check_finite(logits, who);
  return best;
}

void probs(const SamplingParams& p, std::span<const float> logits, std::vector<float>& out, const char* who) {
  const size_t V = logits.size();
  out.assign(V, 0.0f);
  if (V == 0) return;
  if (p.greedy()) {
    out[argmax(logits, who)] = 1.0f;
    return;
  }
  float mx = logits[0], z = 0.0f;  // z: as in argmax
  for (const float x : logits) {
    z += x - x;
    mx = std::max(mx, x);
  }
  if (z != 0.0f) check_finite(logits, who);
  double sum = 0;
  for (size_t i = 0; i < V; ++i) sum += out[i] = math::tempered(logits[i], mx, p.temperature);
  for (auto& x : out) x = static_cast<float>(x / sum);
  const bool use_k = p.top_k > 0 && static_cast<size_t>(p.top_k) < V;
  if (!use_k && p.top_p >= 1.0f) return;
  // Order: probability descending, index ascending on ties (a total order).
  // Kept: the first k of it (top-k), then the shortest prefix of those with
  // mass >= top_p. Only the kept prefix needs sorting: the top m are found
  // with nth_element (O(V)) and sorted, m growing x4 until the prefix is
  // inside them. That is the full sort's prefix exactly, so the same tokens
  // and sums, at O(V) instead of O(V log V) per call.
  std::vector<int32_t> idx(V);
  std::iota(idx.begin(), idx.end(), 0);
  const size_t k = use_k ? static_cast<size_t>(p.top_k) : V;
  auto cmp = [&](int32_t a, int32_t b) { return out[a] > out[b] || (out[a] == out[b] && a < b); };
  size_t keep = k;
  if (p.top_p < 1.0f) {
    // Round r: [0, done) is already the sorted top `done`; select the next
    // m - done among the rest, sort just those, and go on summing.
    double cum = 0;
    size_t done = 0, found = 0;
    for (size_t m = std::min<size_t>(k, 64); !found; m = std::min(k, 4 * m)) {
      const auto first = idx.begin() + static_cast<std::ptrdiff_t>(done);
      if (m < V) std::nth_element(first, idx.begin() + static_cast<std::ptrdiff_t>(m), idx.end(), cmp);
      std::sort(first, idx.begin() + static_cast<std::ptrdiff_t>(m), cmp);
      for (size_t i = done; i < m && !found; ++i)
        if ((cum += out[idx[i]]) >= p.top_p) found = i + 1;
      done = m;
      if (m == k && !found) found = k;
    }
    keep = found;
  } else {
    std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(), cmp);
  }
  std::vector<float> kept(V, 0.0f);
  double ks = 0;
  for (size_t i = 0; i < keep; ++i) ks += kept[idx[i]] = out[idx[i]];
  for (size_t i = 0; i < V; ++i) out[i] = static_cast<float>(kept[i] / ks);
}

Sampler::Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {
  validate(p);
}

int32_t Sampler::sample(std::span<const float> logits) {
  if (p_.greedy()) return argmax(logits);
  probs(p_, logits, probs_);
  const double u = rng_.uniform();
  double cum = 0;
  int32_t last_nonzero = 0;
  for (size_t i = 0; i < probs_.size(); ++i) {
    if (probs_[i] <= 0) continue;
    cum += probs_[i];
    last_nonzero = static_cast<int32_t>(i);
    if (u < cum) return last_nonzero;
  }
  return last_nonzero;  // rounding: u beyond the accumulated mass
}

}  // namespace redwood
