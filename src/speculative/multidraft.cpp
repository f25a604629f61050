// Multi-draft speculative sampling with truncated importance-weighted selection
// (see multidraft.h). p = TARGET, q = DRAFT (the notes/paper swap the letters).
#include "src/speculative/multidraft.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "src/speculative/dist_util.h"
#include "src/util/error.h"

namespace redwood::spec {

namespace {

constexpr double kPivotEps = 1e-13;  // LP entries are probabilities (<= 1)
constexpr size_t kHeadSize = 1024;   // tokens ranked by the sort key (see PairRule::build)

void check_same(std::span<const double> p, std::span<const double> x, const char* what) {
  if (p.empty()) throw Error("multidraft: target distribution is empty");
  if (x.size() != p.size())
    throw Error(std::string("multidraft: ") + what + " distribution has " + std::to_string(x.size()) +
                " entries, target has " + std::to_string(p.size()));
}

}  // namespace

namespace {

// Dense tableau simplex for max c.x, A x <= b (b >= 0), x >= 0: m constraint
// rows [A | I | b] and the objective row [-c | 0 | 0]. Buffers are reused
// (thread_local instance below): the IS rule solves one small LP per stage.
class DenseLp {
 public:
  void init(size_t m, size_t n) {
    m_ = m;
    n_ = n;
    cols_ = n + m + 1;
    T_.assign((m + 1) * cols_, 0.0);
    basis_.resize(m);
    for (size_t i = 0; i < m; ++i) {
      at(i, n + i) = 1.0;
      basis_[i] = n + i;
    }
  }
  void set(size_t i, size_t j, double v) { at(i, j) = v; }
  void rhs(size_t i, double v) {
    if (!(v >= 0)) throw Error("lp_maximize: b must be non-negative (origin feasible)");
    at(i, cols_ - 1) = v;
  }
  void objective(size_t j, double cj) { at(m_, j) = -cj; }
  // Dantzig's rule (most negative reduced cost: few pivots) until a degenerate
  // pivot (zero step) is seen, then Bland's rule (the lowest-index improving
  // column, the lowest-index basic variable among tied ratios), which cannot
  // cycle. Writes x (size n).
  void solve(std::vector<double>& x) {
    const size_t m = m_, cols = cols_;
    bool bland = false;
    for (int it = 0; it < 100000; ++it) {
      size_t enter = cols;
      double most = -kPivotEps;
      for (size_t j = 0; j + 1 < cols; ++j)
        if (at(m, j) < most) {
          enter = j;
          if (bland) break;
          most = at(m, j);
        }
      if (enter == cols) break;  // optimal
      size_t leave = m;
      double best = 0;
      for (size_t i = 0; i < m; ++i) {
        const double a = at(i, enter);
        if (!(a > kPivotEps)) continue;
        const double ratio = at(i, cols - 1) / a;
        if (leave == m || ratio < best || (ratio == best && basis_[i] < basis_[leave])) {
          leave = i;
          best = ratio;
        }
      }
      if (leave == m) throw Error("lp_maximize: unbounded");
      if (best == 0) bland = true;
      double* __restrict L = &T_[leave * cols];
      const double inv = 1.0 / L[enter];
      for (size_t j = 0; j < cols; ++j) L[j] *= inv;
      for (size_t r = 0; r <= m; ++r) {
        if (r == leave) continue;
        double* __restrict R = &T_[r * cols];
        const double f = R[enter];
        if (f == 0) continue;
        for (size_t j = 0; j < cols; ++j) R[j] -= f * L[j];
      }
      basis_[leave] = enter;
    }
    x.assign(n_, 0.0);
    for (size_t i = 0; i < m; ++i)
      if (basis_[i] < n_) x[basis_[i]] = std::max(at(i, cols - 1), 0.0);
  }

 private:
  double& at(size_t r, size_t c) { return T_[r * cols_ + c]; }
  size_t m_ = 0, n_ = 0, cols_ = 0;
  std::vector<double> T_;
  std::vector<size_t> basis_;
};

}  // namespace

LpSolution lp_maximize(const std::vector<std::vector<double>>& A, const std::vector<double>& b,
                       const std::vector<double>& c) {
  const size_t m = A.size(), n = c.size();
  if (b.size() != m) throw Error("lp_maximize: A has " + std::to_string(m) + " rows, b " + std::to_string(b.size()));
  DenseLp lp;
  lp.init(m, n);
  for (size_t i = 0; i < m; ++i) {
    if (A[i].size() != n) throw Error("lp_maximize: row " + std::to_string(i) + " has the wrong width");
    for (size_t j = 0; j < n; ++j) lp.set(i, j, A[i][j]);
    lp.rhs(i, b[i]);
  }
  for (size_t j = 0; j < n; ++j) lp.objective(j, c[j]);
  LpSolution sol;
  lp.solve(sol.x);
  for (size_t j = 0; j < n; ++j) sol.value += c[j] * sol.x[j];
  return sol;
}

// ---- PairRule -------------------------------------------------------------------

void PairRule::build(std::span<const double> p, std::span<const double> a, std::span<const double> b, int s) {
  check_same(p, a, "first draft");
  check_same(p, b, "second draft");
  const size_t V = p.size();
  if (V > static_cast<size_t>(INT32_MAX)) throw Error("multidraft: vocabulary too large");
  // Most under-served tokens first: p(x) - a(x) b(x) is what x still lacks if it
  // were selected only when both drafts agree on it. Only the head (the
  // kHeadSize largest keys, found by nth_element) is sorted; the tail follows
  // in id order. Any order is exact (pI below is the law of the order used);
  // the tail's order barely moves the acceptance, and a stage stays O(V)
  // instead of O(V log V) at a 128k vocabulary.
  thread_local std::vector<double> key;
  thread_local std::vector<uint8_t> in_head;
  key.resize(V);
  for (size_t x = 0; x < V; ++x) key[x] = p[x] - a[x] * b[x];
  auto before = [&](int32_t x, int32_t y) {
    const double kx = key[static_cast<size_t>(x)], ky = key[static_cast<size_t>(y)];
    return kx > ky || (kx == ky && x < y);
  };
  order_.resize(V);
  std::iota(order_.begin(), order_.end(), 0);
  const size_t head = std::min(V, kHeadSize);
  if (head < V) {
    std::nth_element(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(head), order_.end(), before);
    in_head.assign(V, 0);
    for (size_t r = 0; r < head; ++r) in_head[static_cast<size_t>(order_[r])] = 1;
    size_t t = head;
    for (size_t x = 0; x < V; ++x)
      if (!in_head[x]) order_[t++] = static_cast<int32_t>(x);
  }
  std::sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(head), before);
  rank_.resize(V);
  for (size_t r = 0; r < V; ++r) rank_[static_cast<size_t>(order_[r])] = static_cast<int32_t>(r);
  s_ = std::clamp(s, 0, static_cast<int>(std::min<size_t>(V, 64)));
  pI_.assign(V, 0.0);
  // Omega2 (ranks >= s): the earlier-ranked token wins, so
  //   pI(x) = a(x) b(x) + a(x) sum_{later} b + b(x) sum_{later} a.
  double SA = 0, SB = 0;
  for (size_t r = V; r > static_cast<size_t>(s_); --r) {
    const size_t x = static_cast<size_t>(order_[r - 1]);
    pI_[x] = a[x] * b[x] + a[x] * SB + b[x] * SA;
    SA += a[x];
    SB += b[x];
  }
  // Omega1 beats Omega2; inside Omega1 the pair {i, j} (ranks i < j) is
  // decided by w_ij, the probability that i wins: the pair has mass
  // m_ij = a_i b_j + a_j b_i, of which w_ij goes to i and 1 - w_ij to j.
  const int S = s_;
  w_.assign(static_cast<size_t>(S) * static_cast<size_t>(S), 0.0);
  std::vector<double> base(static_cast<size_t>(S)), pt(static_cast<size_t>(S));
  for (int i = 0; i < S; ++i) {
    const size_t x = static_cast<size_t>(order_[static_cast<size_t>(i)]);
    base[static_cast<size_t>(i)] = a[x] * b[x] + a[x] * SB + b[x] * SA;
    pt[static_cast<size_t>(i)] = p[x];
  }
  struct Edge {
    int i, j;
    double m;
  };
  std::vector<Edge> edges;
  for (int i = 0; i < S; ++i)
    for (int j = i + 1; j < S; ++j) {
      const size_t x = static_cast<size_t>(order_[static_cast<size_t>(i)]);
      const size_t y = static_cast<size_t>(order_[static_cast<size_t>(j)]);
      edges.push_back({i, j, a[x] * b[y] + a[y] * b[x]});
    }
  std::vector<double> wts(edges.size(), 1.0);  // default (no LP): the earlier rank wins
  if (S >= 2) {
    // LP over (w_e, z_i): maximise sum z_i, z_i <= p_i, z_i <= pI_i(w), 0 <= w_e <= 1.
    // pI_i(w) = base_i + sum_{e=(i,.)} m_e w_e + sum_{e=(.,i)} m_e (1 - w_e).
    // Rows: w_e <= 1 (M), z_i <= p_i (S), z_i - sum_(i,.) m w + sum_(.,i) m w <= c_i (S).
    const size_t M = edges.size(), Sz = static_cast<size_t>(S);
    thread_local DenseLp lp;
    thread_local std::vector<double> x;
    lp.init(M + 2 * Sz, M + Sz);
    for (size_t e = 0; e < M; ++e) {
      lp.set(e, e, 1.0);
      lp.rhs(e, 1.0);
    }
    for (size_t i = 0; i < Sz; ++i) {
      const size_t r1 = M + i, r2 = M + Sz + i;
      lp.set(r1, M + i, 1.0);
      lp.rhs(r1, pt[i]);
      lp.set(r2, M + i, 1.0);
      lp.objective(M + i, 1.0);
    }
    std::vector<double> ci(base);
    for (size_t e = 0; e < M; ++e) {
      lp.set(M + Sz + static_cast<size_t>(edges[e].i), e, -edges[e].m);
      lp.set(M + Sz + static_cast<size_t>(edges[e].j), e, edges[e].m);
      ci[static_cast<size_t>(edges[e].j)] += edges[e].m;
    }
    for (size_t i = 0; i < Sz; ++i) lp.rhs(M + Sz + i, ci[i]);
    lp.solve(x);
    for (size_t e = 0; e < M; ++e) wts[e] = std::clamp(x[e], 0.0, 1.0);
  }
  // pI on Omega1 from the weights actually used (exactness needs the law of the
  // rule as applied, not the LP's z).
  for (int i = 0; i < S; ++i) w_[static_cast<size_t>(i * S + i)] = 1.0;
  std::vector<double> pis(base);
  for (size_t e = 0; e < edges.size(); ++e) {
    const Edge& ed = edges[e];
    w_[static_cast<size_t>(ed.i * S + ed.j)] = wts[e];
    w_[static_cast<size_t>(ed.j * S + ed.i)] = 1.0 - wts[e];
    pis[static_cast<size_t>(ed.i)] += ed.m * wts[e];
    pis[static_cast<size_t>(ed.j)] += ed.m * (1.0 - wts[e]);
  }
  lp_value_ = 0;
  for (int i = 0; i < S; ++i) {
    pI_[static_cast<size_t>(order_[static_cast<size_t>(i)])] = pis[static_cast<size_t>(i)];
    lp_value_ += std::min(pt[static_cast<size_t>(i)], pis[static_cast<size_t>(i)]);
  }
}

double PairRule::pick_first(int32_t x, int32_t y) const {
  if (x < 0 || y < 0 || static_cast<size_t>(x) >= rank_.size() || static_cast<size_t>(y) >= rank_.size())
    throw Error("multidraft: token id outside the vocabulary");
  if (x == y) return 1.0;
  const int rx = rank_[static_cast<size_t>(x)], ry = rank_[static_cast<size_t>(y)];
  if (rx < s_ && ry < s_) return w_[static_cast<size_t>(rx * s_ + ry)];
  return rx < ry ? 1.0 : 0.0;
}

bool PairRule::needs_uniform(int32_t x, int32_t y) const {
  const double w = pick_first(x, y);
  return w > 0 && w < 1;
}

// ---- MultiDraftNode -----------------------------------------------------------------

void MultiDraftNode::begin(std::span<const double> p, std::span<const double> q, int k, int s, int alphabet) {
  check_same(p, q, "draft");
  if (k < 1) throw Error("multidraft: number of drafts must be >= 1, got " + std::to_string(k));
  if (alphabet < 0) throw Error("multidraft: alphabet size must be >= 0, got " + std::to_string(alphabet));
  truncated_ = alphabet > 0 && static_cast<size_t>(alphabet) < p.size();
  full_p_ = p;
  if (truncated_) {
    // Omega0: the M largest p, ties to the smaller id (deterministic).
    const size_t V = p.size(), M = static_cast<size_t>(alphabet);
    omega_.resize(V);
    std::iota(omega_.begin(), omega_.end(), 0);
    const auto before = [&](int32_t a, int32_t b) {
      return p[static_cast<size_t>(a)] != p[static_cast<size_t>(b)] ? p[static_cast<size_t>(a)] > p[static_cast<size_t>(b)]
                                                                    : a < b;
    };
    std::nth_element(omega_.begin(), omega_.begin() + static_cast<std::ptrdiff_t>(M), omega_.end(), before);
    omega_.resize(M);
    std::sort(omega_.begin(), omega_.end());
    to_reduced_.assign(V, static_cast<int32_t>(M));
    pr_.assign(M + 1, 0.0);
    qr_.assign(M + 1, 0.0);
    mass_ = 0;
    double q_in = 0;
    for (size_t i = 0; i < M; ++i) {
      const auto x = static_cast<size_t>(omega_[i]);
      to_reduced_[x] = static_cast<int32_t>(i);
      mass_ += pr_[i] = p[x];
      q_in += qr_[i] = q[x];
    }
    if (!(mass_ > 0)) throw Error("multidraft: the target has no mass on its most likely tokens");
    for (size_t i = 0; i < M; ++i) pr_[i] /= mass_;
    double q_out = 0;  // summed directly: 1 - q_in would lose the small outside mass
    for (size_t x = 0; x < V; ++x)
      if (to_reduced_[x] == static_cast<int32_t>(M)) q_out += q[x];
    qr_[M] = q_out;
    const double qs = q_in + q_out;
    for (double& v : qr_) v /= qs;
    p = pr_;
    q = qr_;
  } else {
    omega_.clear();
    mass_ = 1;
  }
  p_ = p;
  q_ = q;
  k_ = k;
  stages_.resize(static_cast<size_t>(k - 1));  // sized first: stage j reads stage j-1's pI in place
  for (int j = 0; j + 1 < k; ++j) {
    const std::span<const double> a = j == 0 ? q : stages_[static_cast<size_t>(j - 1)].induced();
    stages_[static_cast<size_t>(j)].build(p, a, q, s);
  }
  const auto pI = induced();
  acc_ = 0;
  for (size_t x = 0; x < p.size(); ++x) acc_ += std::min(p[x], pI[x]);
  if (truncated_) acc_ *= mass_;
  have_res_ = false;
}

int32_t MultiDraftNode::output(std::span<const int32_t> drafts, Rng& rng) {
  if (!truncated_) {
    const int32_t y = select(drafts, rng);
    return accepts(y, rng.uniform()) ? y : sample_residual(rng.uniform());
  }
  const size_t V = full_p_.size();
  if (rng.uniform() >= mass_) {
    // Not kept: p restricted to the tokens outside Omega0 (mass 1 - mass_).
    const double target = rng.uniform() * (1.0 - mass_);
    double cum = 0;
    int32_t last = -1;
    for (size_t x = 0; x < V; ++x) {
      if (to_reduced_[x] != static_cast<int32_t>(omega_.size()) || !(full_p_[x] > 0)) continue;
      cum += full_p_[x];
      last = static_cast<int32_t>(x);
      if (target < cum) return last;
    }
    if (last >= 0) return last;
    // Rounding: mass_ < 1 by less than the outside mass resolves; stay in Omega0.
  }
  mapped_.resize(drafts.size());
  for (size_t i = 0; i < drafts.size(); ++i) {
    if (drafts[i] < 0 || static_cast<size_t>(drafts[i]) >= V)
      throw Error("multidraft: token id outside the vocabulary");
    mapped_[i] = to_reduced_[static_cast<size_t>(drafts[i])];
  }
  const int32_t y = select(mapped_, rng);
  const int32_t r = accepts(y, rng.uniform()) ? y : sample_residual(rng.uniform());
  // "other" has target mass 0: it is never accepted nor drawn from the residual.
  return omega_[static_cast<size_t>(std::min<int32_t>(r, static_cast<int32_t>(omega_.size()) - 1))];
}

std::span<const double> MultiDraftNode::induced() const {
  return k_ == 1 ? q_ : stages_.back().induced();
}

int32_t MultiDraftNode::select(std::span<const int32_t> drafts, Rng& rng) const {
  if (drafts.size() != static_cast<size_t>(k_))
    throw Error("multidraft: " + std::to_string(drafts.size()) + " drafts given, node built for " + std::to_string(k_));
  int32_t y = drafts[0];
  for (size_t j = 0; j < stages_.size(); ++j) {
    const int32_t x = drafts[j + 1];
    const double u = stages_[j].needs_uniform(y, x) ? rng.uniform() : 0.0;
    y = stages_[j].select(y, x, u);
  }
  return y;
}

double MultiDraftNode::accept_probability(int32_t y) const {
  if (y < 0 || static_cast<size_t>(y) >= p_.size()) throw Error("multidraft: token id outside the vocabulary");
  const double d = induced()[static_cast<size_t>(y)];
  if (!(d > 0)) return 0.0;
  return std::min(1.0, p_[static_cast<size_t>(y)] / d);
}

bool MultiDraftNode::accepts(int32_t y, double u) const {
  if (y < 0 || static_cast<size_t>(y) >= p_.size()) throw Error("multidraft: token id outside the vocabulary");
  const double d = induced()[static_cast<size_t>(y)];
  if (!(d > 0)) return false;
  return u * d < p_[static_cast<size_t>(y)];
}

std::span<const double> MultiDraftNode::residual() {
  if (have_res_) return res_;
  const auto pI = induced();
  const size_t V = p_.size();
  res_.resize(V);
  double s = 0;
  for (size_t x = 0; x < V; ++x) {
    res_[x] = std::max(p_[x] - pI[x], 0.0);
    s += res_[x];
  }
  detail::normalise_residual(res_, p_, s);
  have_res_ = true;
  return res_;
}

int32_t MultiDraftNode::sample_residual(double u) {
  return detail::sample_residual_at(residual(), u);
}

}  // namespace redwood::spec
