// SpecTr k-Seq (see spectr.h). p = TARGET, q = DRAFT (the notes/paper swap them).
#include "src/speculative/spectr.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "src/speculative/dist_util.h"
#include "src/util/error.h"

namespace redwood::spec {

namespace {

void check_pair(std::span<const double> p, std::span<const double> q, int k) {
  if (p.empty()) throw Error("spectr: target distribution is empty");
  if (p.size() != q.size())
    throw Error("spectr: draft distribution has " + std::to_string(q.size()) + " entries, target has " +
                std::to_string(p.size()));
  if (k < 1) throw Error("spectr: number of drafts must be >= 1, got " + std::to_string(k));
}

// 1 - (1 - beta)^k for the rho* search, where it is evaluated ~60 times: an
// integer power by squaring (a few ns) unless beta is small enough for the
// cancellation to matter, then the log1p/expm1 form (~50 ns).
double pacc_fast(double beta, int k) {
  if (!(beta > 0)) return 0.0;
  if (beta >= 1) return 1.0;
  if (beta < 1e-2) return -std::expm1(static_cast<double>(k) * std::log1p(-beta));
  double base = 1 - beta, r = 1;
  for (unsigned e = static_cast<unsigned>(k); e; e >>= 1, base *= base)
    if (e & 1) r *= base;
  return 1 - r;
}

struct Ratio {
  double r, p, q;
};
struct RhoScratch {
  std::vector<Ratio> br;
};

}  // namespace

double spectr_beta(std::span<const double> p, std::span<const double> q, double rho) {
  double s = 0;
  for (size_t x = 0; x < p.size(); ++x) s += std::min(q[x], p[x] / rho);
  return s;
}

double spectr_pacc(double beta, int k) {
  if (!(beta > 0)) return 0.0;
  if (beta >= 1) return 1.0;
  return -std::expm1(static_cast<double>(k) * std::log1p(-beta));
}

double spectr_rho_star(std::span<const double> p, std::span<const double> q, int k) {
  check_pair(p, q, k);
  if (k == 1) return 1.0;  // f(rho) = beta (1 - rho): rho* = 1 exactly
  const double K = k;
  // With r(x) = p(x)/q(x): min(q, p/rho) = p/rho where r <= rho, q where r > rho.
  // So on an interval between consecutive ratios, beta(rho) = A/rho + B and
  // rho beta = A + B rho with constant A (target mass of the small ratios) and
  // B (draft mass of the large ones). Tokens with p = 0 or q = 0 add nothing.
  thread_local RhoScratch sc;
  std::vector<Ratio>& br = sc.br;
  br.clear();
  double A0 = 0, Bbig = 0;  // ratios <= 1 (always in A), ratios >= k (always in B)
  for (size_t x = 0; x < p.size(); ++x) {
    if (!(p[x] > 0 && q[x] > 0)) continue;
    const double r = p[x] / q[x];
    if (r <= 1)
      A0 += p[x];
    else if (r >= K)
      Bbig += q[x];
    else
      br.push_back({r, p[x], q[x]});
  }
  if (!(A0 + Bbig > 0) && br.empty()) return 1.0;  // beta(1) = 0: disjoint supports
  // f on a segment where A = target mass of ratios <= rho, B = draft mass of ratios > rho.
  auto f = [&](double rho, double A, double B) {
    const double beta = std::clamp(A / rho + B, 0.0, 1.0);
    return pacc_fast(beta, k) - (A + B * rho);
  };
  double Bcand = 0;
  for (const Ratio& c : br) Bcand += c.q;
  if (f(1.0, A0, Bbig + Bcand) <= 0) return 1.0;
  // Locate the segment [lo, hi] between consecutive ratios with f(lo) > 0 >=
  // f(hi) by quickselect on the ratios (expected O(V), no full sort): evaluate
  // f at the median candidate; ratios on the decided side join A or B for good.
  // f is continuous at a breakpoint (there p/rho = q), so ties may go either way.
  double lo = 1.0, hi = K, Aacc = 0, Bacc = 0;
  size_t b0 = 0, b1 = br.size();
  auto by_ratio = [](const Ratio& a, const Ratio& b) { return a.r < b.r; };
  while (b0 < b1) {
    const size_t mid = b0 + (b1 - b0) / 2;
    std::nth_element(br.begin() + static_cast<std::ptrdiff_t>(b0), br.begin() + static_cast<std::ptrdiff_t>(mid),
                     br.begin() + static_cast<std::ptrdiff_t>(b1), by_ratio);
    double Ain = 0, Bin = 0;  // [b0, mid) have ratio <= r, [mid, b1) ratio >= r
    for (size_t j = b0; j < mid; ++j) Ain += br[j].p;
    for (size_t j = mid; j < b1; ++j) Bin += br[j].q;
    const double r = br[mid].r;
    if (f(r, A0 + Aacc + Ain, Bbig + Bacc + Bin) <= 0) {
      hi = r;
      Bacc += Bin;
      b1 = mid;
    } else {
      lo = r;
      Aacc += Ain + br[mid].p;
      b0 = mid + 1;
    }
  }
  const double A = A0 + Aacc, B = Bbig + Bacc;
  if (hi == K && f(hi, A, B) > 0) return hi;  // rounding at rho = k (f(k) <= 0 in exact arithmetic)
  // Bisection inside the segment (A, B constant there), keeping f(lo) > 0 >=
  // f(hi), down to adjacent doubles: return the upper end.
  for (int it = 0; it < 2000; ++it) {
    const double mid = lo + 0.5 * (hi - lo);
    if (!(mid > lo && mid < hi)) break;
    if (f(mid, A, B) <= 0)
      hi = mid;
    else
      lo = mid;
  }
  return hi;
}

void SpecTrNode::begin(std::span<const double> p, std::span<const double> q, int k) {
  check_pair(p, q, k);
  p_ = p;
  q_ = q;
  k_ = k;
  rho_ = spectr_rho_star(p, q, k);
  beta_ = std::min(spectr_beta(p, q, rho_), 1.0);
  pacc_ = spectr_pacc(beta_, k);
  have_res_ = false;
}

double SpecTrNode::accept_probability(int32_t x) const {
  if (x < 0 || static_cast<size_t>(x) >= p_.size())
    throw Error("spectr: token id " + std::to_string(x) + " outside the vocabulary");
  const double qx = q_[static_cast<size_t>(x)];
  if (!(qx > 0)) return 0.0;
  return std::min(1.0, p_[static_cast<size_t>(x)] / (rho_ * qx));
}

bool SpecTrNode::accepts(int32_t x, double u) const {
  if (x < 0 || static_cast<size_t>(x) >= p_.size())
    throw Error("spectr: token id " + std::to_string(x) + " outside the vocabulary");
  const double qx = q_[static_cast<size_t>(x)];
  if (!(qx > 0)) return false;  // the draft could not have drawn x
  return u * (rho_ * qx) < p_[static_cast<size_t>(x)];
}

std::span<const double> SpecTrNode::residual() {
  if (have_res_) return res_;
  const size_t V = p_.size();
  res_.resize(V);
  double s = 0;
  if (beta_ > 0) {
    // P(accepted output = x) = min(q, p/rho) * pacc / beta; the residual is the
    // rest of p. Entries that should be 0 (ratio <= rho at rho*) may come out
    // at -1e-17: clamp.
    const double scale = pacc_ / beta_;
    for (size_t x = 0; x < V; ++x) {
      const double v = p_[x] - std::min(q_[x], p_[x] / rho_) * scale;
      res_[x] = v > 0 ? v : 0.0;
      s += res_[x];
    }
  }
  detail::normalise_residual(res_, p_, s);  // beta = 0 (s = 0): nothing accepted, the output is p
  have_res_ = true;
  return res_;
}

int32_t SpecTrNode::sample_residual(double u) {
  return detail::sample_residual_at(residual(), u);
}

}  // namespace redwood::spec
