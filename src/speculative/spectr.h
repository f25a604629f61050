// SpecTr k-sequential selection (k-Seq; Sun et al., arXiv 2310.15141, Alg. 2/3):
// one output token with exactly the target law from k i.i.d. draft samples.
//
// NAMING: in this code base p = TARGET and q = DRAFT, everywhere (the paper and
// shared/papers/NOTES-spectr-multidraft.md use the opposite letters: p draft,
// q target). Translated to our letters, with division factor rho in [1, k]:
//   beta(rho)  = sum_x min(q(x), p(x) / rho)
//   pacc       = 1 - (1 - beta)^k                  (P(some draft accepted))
//   accept X_i w.p. min(1, p(X_i) / (rho q(X_i))), i = 1..k in order
//   residual   = [p(x) - min(q(x), p(x)/rho) * pacc / beta] / (1 - pacc)
// The residual is non-negative iff pacc <= rho * beta, i.e. rho >= rho*, where
// rho* solves 1 - (1 - beta(rho))^k = rho * beta(rho); rho* maximises pacc.
// k = 1 gives rho* = 1: plain speculative sampling (accept min(1, p/q), residual
// norm(max(p - q, 0))).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace redwood::spec {

// beta(rho) for normalised target p and draft q.
double spectr_beta(std::span<const double> p, std::span<const double> q, double rho);
// 1 - (1 - beta)^k, accurate for small beta (-expm1(k log1p(-beta))).
double spectr_pacc(double beta, int k);
// rho* for k >= 1 drafts: the segment between two consecutive ratios p/q where
// f(rho) = 1 - (1-beta)^k - rho beta changes sign is located exactly (there
// beta = A/rho + B with constant A, B) by quickselect on the ratios (the
// notes' "sort q/p once", without the full sort: expected O(V)), and f is
// bisected inside it to the last ulp, returning the UPPER end (f <= 0 there:
// a rho below rho* would give negative residual entries).
// Returns 1 for k = 1 or when beta(1) = 0 (disjoint supports: nothing can be
// accepted, the residual is p).
double spectr_rho_star(std::span<const double> p, std::span<const double> q, int k);

// One node's k-Seq step, in double precision. Usage:
//   begin(p, q, k); for each draft x in order: if accepts(x, u ~ U[0,1)) -> x;
//   none accepted: sample_residual(u ~ U[0,1)).
// p and q must be normalised and stay valid until the node is done.
class SpecTrNode {
 public:
  void begin(std::span<const double> p, std::span<const double> q, int k);
  int k() const { return k_; }
  double rho() const { return rho_; }
  double beta() const { return beta_; }
  double acceptance() const { return pacc_; }  // P(one of the k drafts is accepted)
  // min(1, p(x) / (rho q(x))); 0 when q(x) = 0 (the draft could not have drawn x).
  double accept_probability(int32_t x) const;
  bool accepts(int32_t x, double u) const;  // u * rho * q(x) < p(x)
  // The law of the output when every draft was rejected (normalised; p itself
  // when beta = 0 or when the rejection mass is at rounding level).
  std::span<const double> residual();
  int32_t sample_residual(double u);

 private:
  std::span<const double> p_, q_;
  int k_ = 1;
  double rho_ = 1, beta_ = 0, pacc_ = 0;
  bool have_res_ = false;
  std::vector<double> res_;
};

}  // namespace redwood::spec
