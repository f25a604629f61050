// Multi-draft speculative sampling with importance-weighted selection
// (Khisti et al., arXiv 2410.18234; shared/papers/NOTES-spectr-multidraft.md B1-B3).
//
// NAMING: in this code base p = TARGET and q = DRAFT (the notes/paper use p for
// the draft and q for the target).
//
// Canonical two-step scheme: a selection rule picks one token Y_I among the K
// draft tokens; whatever the rule, Y_I has some law pI (the "induced" draft
// law). Single-draft speculative sampling of Y_I against p with pI as the draft
// (accept min(1, p/pI), else sample norm(max(p - pI, 0))) then outputs exactly
// p, provided pI is the EXACT law of Y_I under the rule used. The rule only
// affects the acceptance sum_x min(p(x), pI(x)).
//
// The rule here (K = 2, "truncated weighted IS"): tokens sorted by the key
// p(x) - a(x) b(x) (most under-served first; only the 1024 largest keys are
// sorted, the rest follow in id order); Omega1 = the first s tokens,
// Omega2 = the rest. For drafts {x, y}: x == y -> x; both in Omega1 -> x with
// probability w[x][y] (w[x][y] + w[y][x] = 1, solved by a small LP maximising
// sum_{Omega1} min(p, pI)); otherwise the earlier-sorted token. pI in
// O(V log V) from suffix sums. K > 2: stages, Y1 = rule(X1, X2), Y2 =
// rule'(Y1, X3), ... where stage j's rule is built for the non-identical pair
// (Y_{j-1} ~ pI_{j-1}, X_{j+1} ~ q). K = 1: pI = q (plain speculative sampling).
// Alphabet truncation (the notes' Omega0, paper Section 4), optional: with
// `alphabet` = M > 0, Omega0 = the M most likely target tokens. The node then
// works on M + 1 symbols, Omega0 plus one symbol "other" standing for every
// token outside it (target mass 0 after renormalisation, draft mass q(outside)):
// draft tokens outside Omega0 enter the selection as "other", which is never
// accepted. That gives a token with law p restricted to Omega0, renormalised,
// exactly; a coin with P(keep) = p(Omega0) keeps it, otherwise the output is
// drawn from p restricted to the tokens outside Omega0. The law is p exactly;
// acceptance is p(Omega0) x the truncated problem's. Without truncation every
// stage works on the full vocabulary, O(V + H log H) per stage with H = 1024
// the sorted head.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "src/engine/sampler.h"

namespace redwood::spec {

// Default size s of Omega1 (s(s-1)/2 LP weights).
constexpr int kDefaultIsLpSize = 4;

// Small dense LP: maximise c.x subject to A x <= b, x >= 0, with b >= 0 (the
// origin is feasible). Tableau simplex with Bland's rule (no cycling). Throws
// redwood::Error if unbounded or on size mismatches. For tens of variables.
struct LpSolution {
  std::vector<double> x;
  double value = 0;
};
LpSolution lp_maximize(const std::vector<std::vector<double>>& A, const std::vector<double>& b,
                       const std::vector<double>& c);

// Selection between two independent draft tokens A ~ a and B ~ b (a == b for
// identical drafts), built for target p. All three normalised, same size.
class PairRule {
 public:
  // s: size of Omega1 (clamped to [0, V]; s <= 1 means no LP, a fixed order).
  void build(std::span<const double> p, std::span<const double> a, std::span<const double> b, int s);
  // P(the rule returns x | drafts x and y), symmetric in the sense
  // pick_first(x, y) + pick_first(y, x) = 1 for x != y; 1 when x == y.
  double pick_first(int32_t x, int32_t y) const;
  // The selected token; u ~ U[0,1) is consulted only when needs_uniform(x, y).
  int32_t select(int32_t x, int32_t y, double u) const { return u < pick_first(x, y) ? x : y; }
  bool needs_uniform(int32_t x, int32_t y) const;
  std::span<const double> induced() const { return pI_; }    // the exact law of the selected token
  std::span<const int32_t> order() const { return order_; }  // tokens, sort-key order
  double lp_value() const { return lp_value_; }  // sum over Omega1 of min(p, pI) at the LP optimum

 private:
  int s_ = 0;
  std::vector<int32_t> order_, rank_;
  std::vector<double> w_;  // s x s, w_[i*s+j] = P(rank i wins over rank j)
  std::vector<double> pI_;
  double lp_value_ = 0;
};

// One node: K drafts i.i.d. from q, target p (normalised doubles that stay
// valid until the node is done). Usage: begin(p, q, K); y = select(drafts,
// rng); if accepts(y, u) -> y else sample_residual(u').
class MultiDraftNode {
 public:
  // alphabet: size of Omega0 (0, or >= the vocabulary: no truncation).
  void begin(std::span<const double> p, std::span<const double> q, int k, int s = kDefaultIsLpSize,
             int alphabet = 0);
  // The whole scheme: (truncation coin,) staged selection, the test against
  // pI, the residual. Returns the node's output token (a vocabulary id).
  int32_t output(std::span<const int32_t> drafts, Rng& rng);
  // Truncated: Omega0's target mass; 1 otherwise.
  double kept_mass() const { return truncated_ ? mass_ : 1.0; }
  bool truncated() const { return truncated_; }
  // The methods below work on the node's own alphabet: the vocabulary, or
  // with truncation Omega0 + "other" (ids 0..M-1 = omega0()[i], M = other).
  std::span<const int32_t> omega0() const { return omega_; }
  int k() const { return k_; }
  int stages() const { return static_cast<int>(stages_.size()); }  // k - 1
  const PairRule& stage(int i) const { return stages_[static_cast<size_t>(i)]; }
  // Runs the staged selection over drafts (exactly k tokens, in sampling order).
  int32_t select(std::span<const int32_t> drafts, Rng& rng) const;
  std::span<const double> induced() const;    // pI of the final selected token
  double acceptance() const { return acc_; }  // sum_x min(p(x), pI(x)) (x kept_mass() when truncated)
  // min(1, p(y)/pI(y)); 0 when pI(y) = 0 (cannot be selected).
  double accept_probability(int32_t y) const;
  bool accepts(int32_t y, double u) const;  // u * pI(y) < p(y)
  std::span<const double> residual();       // norm(max(p - pI, 0)); p if that mass is rounding-level
  int32_t sample_residual(double u);

 private:
  std::span<const double> p_, q_;  // the node's alphabet (reduced when truncated)
  int k_ = 1;
  // Truncation: the full-vocabulary target, Omega0, the reduced p and q, and
  // vocabulary id -> reduced id (M for "other").
  bool truncated_ = false;
  double mass_ = 1;
  std::span<const double> full_p_;
  std::vector<int32_t> omega_, to_reduced_, mapped_;
  std::vector<double> pr_, qr_;
  std::vector<PairRule> stages_;
  double acc_ = 0;
  bool have_res_ = false;
  std::vector<double> res_;
};

}  // namespace redwood::spec
