// Internal helpers shared by the verifiers (verify.cpp, spectr.cpp,
// multidraft.cpp): inverse-CDF sampling and the residual normalisation. Not a
// public header.
#pragma once
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace redwood::spec::detail {

// A residual whose total mass is at most this is a rounding-level event (its
// probability is that mass): fall back (to p, or keep R) instead of
// normalising noise.
inline constexpr double kResidualFloor = 1e-15;

// Index of the first entry whose cumulative sum exceeds target, skipping zeros;
// the last positive entry when rounding leaves target beyond the total (0 when
// there is none).
template <typename T>
int32_t inverse_cdf(std::span<const T> w, double target) {
  double cum = 0;
  int32_t last = -1;
  for (size_t i = 0; i < w.size(); ++i) {
    if (!(w[i] > 0)) continue;
    cum += static_cast<double>(w[i]);
    last = static_cast<int32_t>(i);
    if (target < cum) return last;
  }
  return last < 0 ? 0 : last;
}

// res holds the clamped residual with total mass s: normalise it, or (mass at
// rounding level) replace it by p. res.size() == p.size().
inline void normalise_residual(std::vector<double>& res, std::span<const double> p, double s) {
  if (s > kResidualFloor) {
    const double inv = 1.0 / s;
    for (double& v : res) v *= inv;
  } else {
    std::copy(p.begin(), p.end(), res.begin());
  }
}

// The inverse CDF of the (normalised up to rounding) residual r at u in [0, 1).
inline int32_t sample_residual_at(std::span<const double> r, double u) {
  double total = 0;
  for (const double v : r) total += v;
  return inverse_cdf(r, u * total);
}

}  // namespace redwood::spec::detail
