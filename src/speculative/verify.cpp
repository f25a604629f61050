// Token-tree verification (greedy, SpecInfer, Sequoia, target-sample, SpecTr,
// multi-draft IS) and the matching child-sampling schemes. See verify.h for the
// contract; the per-node algorithms follow Sequoia's Algorithm 1 (sampling
// without replacement) and SpecInfer's Algorithm 3 (the same loop with the
// draft distribution never updated); SpecTr and multi-draft IS live in
// spectr.cpp / multidraft.cpp and are walked by path classes (verify_classes).
// NAMING: here p = TARGET, q = DRAFT (the SpecTr/multi-draft notes swap them).
#include "src/speculative/verify.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "src/speculative/dist_util.h"
#include "src/speculative/multidraft.h"
#include "src/speculative/spectr.h"
#include "src/util/error.h"

namespace redwood::spec {

namespace {

// A rejection whose residual mass is at most this is a rounding-level event
// (its probability IS that mass): keep R rather than normalise noise.
using detail::kResidualFloor;

// GCC/Clang vector extension: four double lanes (AVX2 register), no intrinsics.
using v4d = double __attribute__((vector_size(32)));

// Sum over [0, n) of f(i) in four double lanes (breaks the add latency chain
// and lets the compiler vectorise). Deterministic for a given n.
template <typename F>
double sum4(size_t n, F&& f) {
  v4d acc = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const v4d x = {f(i), f(i + 1), f(i + 2), f(i + 3)};
    acc += x;
  }
  double tail = 0;
  for (; i < n; ++i) tail += f(i);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + tail;
}

// One pass over float weights: the sum (double), the count of positive
// entries, and whether any entry is negative or NaN.
struct FloatStats {
  double sum = 0;
  int64_t positive = 0;
  bool bad = false;
};

FloatStats scan_floats(const float* d, size_t n) {
  v4d s0 = {0, 0, 0, 0}, s1 = s0;
  using m4 = decltype(s0 < s1);
  m4 ok = s0 == s1;  // all lanes true (-1)
  m4 pos = s0 < s1;  // all lanes 0; each positive entry subtracts 1
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const v4d a = {d[i], d[i + 1], d[i + 2], d[i + 3]};
    const v4d b = {d[i + 4], d[i + 5], d[i + 6], d[i + 7]};
    ok &= (a >= 0) & (b >= 0);  // false for negatives and NaN
    pos += (a > 0) + (b > 0);
    s0 += a;
    s1 += b;
  }
  FloatStats st;
  double tail = 0;
  for (; i < n; ++i) {
    st.bad |= !(d[i] >= 0.0f);
    st.positive += d[i] > 0.0f;
    tail += d[i];
  }
  for (int l = 0; l < 4; ++l) {
    st.bad |= ok[l] == 0;
    st.positive -= pos[l];
  }
  st.sum = (((s0[0] + s1[0]) + (s0[1] + s1[1])) + ((s0[2] + s1[2]) + (s0[3] + s1[3]))) + tail;
  return st;
}

// Sum of a distribution given as floats, with validation.
double checked_sum(std::span<const float> x, const char* what) {
  const FloatStats st = scan_floats(x.data(), x.size());
  if (st.bad) throw Error(std::string(what) + " distribution has a negative or NaN entry");
  if (!std::isfinite(st.sum)) throw Error(std::string(what) + " distribution has a non-finite entry");
  if (!(st.sum > 0)) throw Error(std::string(what) + " distribution sums to zero");
  return st.sum;
}

using detail::inverse_cdf;  // float or double weights

// Two-level CDF of a float distribution: one O(V) vectorisable pass for block
// sums, then each draw walks the block sums and scans one block. The law is q
// up to double rounding.
class BlockedCdf {
 public:
  static constexpr size_t kBlock = 256;

  // Validates q (non-negative, finite, positive sum); counts positive entries.
  void build(std::span<const float> q) {
    q_ = q;
    const size_t nb = (q.size() + kBlock - 1) / kBlock;
    block_.resize(nb);
    bool bad = false;
    int64_t pos = 0;
    total_ = 0;
    for (size_t b = 0; b < nb; ++b) {
      const size_t lo = b * kBlock, len = std::min(kBlock, q.size() - lo);
      const FloatStats st = scan_floats(q.data() + lo, len);
      block_[b] = st.sum;
      bad |= st.bad;
      pos += st.positive;
      total_ += st.sum;
    }
    if (bad) throw Error("draft distribution has a negative or NaN entry");
    if (!std::isfinite(total_)) throw Error("draft distribution has a non-finite entry");
    if (!(total_ > 0)) throw Error("draft distribution sums to zero");
    positive_ = pos;
  }
  double total() const { return total_; }
  int64_t positive() const { return positive_; }

  // x ~ q with u in [0, 1): never a zero-probability token.
  int32_t draw(double u) const {
    const double target = u * total_;
    double cum = 0;
    size_t b = 0;
    for (; b + 1 < block_.size(); ++b) {
      if (target < cum + block_[b]) break;
      cum += block_[b];
    }
    // Scan block b (rounding may run past it: then continue to the end).
    int32_t last = -1;
    for (size_t i = b * kBlock; i < q_.size(); ++i) {
      if (!(q_[i] > 0.0f)) continue;
      cum += q_[i];
      last = static_cast<int32_t>(i);
      if (target < cum) return last;
    }
    if (last >= 0) return last;
    for (size_t i = q_.size(); i > 0; --i)  // target beyond everything: last positive token
      if (q_[i - 1] > 0.0f) return static_cast<int32_t>(i - 1);
    return 0;
  }

 private:
  std::span<const float> q_;
  std::vector<double> block_;
  double total_ = 0;
  int64_t positive_ = 0;
};

struct SampleScratch {
  BlockedCdf cdf;
  std::vector<uint8_t> mark;  // all zero between calls
  std::vector<int32_t> zeros;
};

SampleScratch& scratch() {
  thread_local SampleScratch s;
  return s;
}

std::vector<int32_t> top_k(std::span<const float> q, int k) {
  if (k <= 0) return {};
  if (k > 64) {  // wide: partial sort of all ids
    std::vector<int32_t> idx(q.size());
    for (size_t t = 0; t < q.size(); ++t) idx[t] = static_cast<int32_t>(t);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [&](int32_t a, int32_t b) { return q[a] > q[b] || (q[a] == q[b] && a < b); });
    idx.resize(static_cast<size_t>(k));
    return idx;
  }
  // Sorted (q descending, id ascending) insertion into a k-long list.
  std::vector<int32_t> best;
  best.reserve(static_cast<size_t>(k));
  for (size_t t = 0; t < q.size(); ++t) {
    const float v = q[t];
    if (static_cast<int>(best.size()) == k && !(v > q[best.back()])) continue;
    auto pos = std::upper_bound(best.begin(), best.end(), v,
                                [&](float val, int32_t id) { return val > q[id]; });
    best.insert(pos, static_cast<int32_t>(t));
    if (static_cast<int>(best.size()) > k) best.pop_back();
  }
  return best;
}

// Sequoia's draw: k tokens without replacement (q already in s.cdf).
std::vector<int32_t> sample_swor(std::span<const float> q, int k, Rng& rng, SampleScratch& s) {
  const size_t V = q.size();
  const double total = s.cdf.total();
  const int64_t positive = s.cdf.positive();
  if (s.mark.size() < V) s.mark.resize(V, 0);
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(k));
  double chosen_mass = 0;
  size_t zeros_taken = 0;
  bool zeros_built = false;
  for (int i = 0; i < k; ++i) {
    int32_t x = -1;
    if (static_cast<int64_t>(out.size()) < positive) {
      // x ~ q restricted to the tokens not yet drawn. Rejection from the full
      // CDF has exactly that law; when the drawn mass is large, scan instead
      // (also exact: the scan draws afresh from the restricted law).
      if (chosen_mass <= 0.75 * total) {
        for (int tries = 0; tries < 32 && x < 0; ++tries) {
          const int32_t c = s.cdf.draw(rng.uniform());
          if (!s.mark[static_cast<size_t>(c)]) x = c;
        }
      }
      if (x < 0) {
        const double rem = sum4(V, [&](size_t t) { return s.mark[t] ? 0.0 : static_cast<double>(q[t]); });
        const double target = rng.uniform() * rem;
        double cum = 0;
        for (size_t t = 0; t < V; ++t) {
          if (s.mark[t] || !(q[t] > 0.0f)) continue;
          cum += q[t];
          x = static_cast<int32_t>(t);
          if (target < cum) break;
        }
      }
      chosen_mass += q[static_cast<size_t>(x)];
    } else {
      // All positive tokens drawn: zero-probability tokens in uniformly random
      // order (partial Fisher-Yates over the list of zero tokens).
      if (!zeros_built) {
        s.zeros.clear();
        for (size_t t = 0; t < V; ++t)
          if (!(q[t] > 0.0f)) s.zeros.push_back(static_cast<int32_t>(t));
        zeros_built = true;
      }
      const size_t left = s.zeros.size() - zeros_taken;
      size_t j = zeros_taken + static_cast<size_t>(rng.uniform() * static_cast<double>(left));
      if (j >= s.zeros.size()) j = s.zeros.size() - 1;
      std::swap(s.zeros[zeros_taken], s.zeros[j]);
      x = s.zeros[zeros_taken++];
    }
    s.mark[static_cast<size_t>(x)] = 1;
    out.push_back(x);
  }
  for (const int32_t x : out) s.mark[static_cast<size_t>(x)] = 0;
  return out;
}

}  // namespace

const char* verifier_name(Verifier v) {
  switch (v) {
    case Verifier::kGreedy: return "greedy";
    case Verifier::kSpecInfer: return "specinfer";
    case Verifier::kSequoia: return "sequoia";
    case Verifier::kTargetSample: return "target-sample";
    case Verifier::kSpecTr: return "spectr";
    case Verifier::kMultiDraftIS: return "multidraft-is";
  }
  return "?";
}

Verifier parse_verifier(const std::string& s) {
  if (s == "greedy") return Verifier::kGreedy;
  if (s == "specinfer") return Verifier::kSpecInfer;
  if (s == "sequoia") return Verifier::kSequoia;
  if (s == "target-sample") return Verifier::kTargetSample;
  if (s == "spectr") return Verifier::kSpecTr;
  if (s == "multidraft-is") return Verifier::kMultiDraftIS;
  throw Error("unknown verifier '" + s +
              "' (expected greedy, specinfer, sequoia, target-sample, spectr or multidraft-is)");
}

std::vector<int32_t> sample_children(Verifier v, std::span<const float> q, int k, Rng& rng) {
  if (k < 0) throw Error("number of children must be >= 0, got " + std::to_string(k));
  if (q.empty()) throw Error("draft distribution is empty");
  if (q.size() > static_cast<size_t>(INT32_MAX)) throw Error("vocabulary too large");
  if (v == Verifier::kGreedy) {
    for (const float x : q)
      if (!(x >= 0.0f) || !std::isfinite(x)) throw Error("draft distribution has a negative or non-finite entry");
    return top_k(q, std::min(k, static_cast<int>(q.size())));
  }
  SampleScratch& s = scratch();
  s.cdf.build(q);  // validates
  if (k == 0) return {};
  if (v == Verifier::kSequoia) return sample_swor(q, std::min(k, static_cast<int>(q.size())), rng, s);
  std::vector<int32_t> out(static_cast<size_t>(k));  // SpecInfer: i.i.d.
  for (auto& x : out) x = s.cdf.draw(rng.uniform());
  return out;
}

// ---- NodeVerifier -------------------------------------------------------------

void NodeVerifier::begin(Verifier v, std::span<const float> p, std::span<const float> q) {
  if (p.empty()) throw Error("target distribution is empty");
  if (p.size() > static_cast<size_t>(INT32_MAX)) throw Error("vocabulary too large");
  v_ = v;
  p_ = p;
  ip_ = 1.0 / checked_sum(p, "target");
  dense_ = false;
  if (v == Verifier::kGreedy) {
    q_ = p;
    iq_ = ip_;
    argmax_ = redwood::argmax(p);
    return;
  }
  if (q.size() != p.size())
    throw Error("draft distribution has " + std::to_string(q.size()) + " entries, target has " +
                std::to_string(p.size()));
  q_ = q;
  iq_ = 1.0 / checked_sum(q, "draft");
}

// R = p / sum(p) and D = q / sum(q) until the first rejection (same arithmetic
// as densify(), so the lazy and dense states agree bit for bit).
double NodeVerifier::r_at(int32_t x) const { return dense_ ? R_[x] : static_cast<double>(p_[x]) * ip_; }
double NodeVerifier::d_at(int32_t x) const { return dense_ ? D_[x] : static_cast<double>(q_[x]) * iq_; }

double NodeVerifier::accept_probability(int32_t x) const {
  if (x < 0 || x >= vocab()) throw Error("token id " + std::to_string(x) + " outside the vocabulary");
  if (v_ == Verifier::kGreedy) return x == argmax_ ? 1.0 : 0.0;
  const double d = d_at(x);
  if (!(d > 0)) return 0.0;
  return std::min(1.0, r_at(x) / d);
}

bool NodeVerifier::accepts(int32_t x, double u) const {
  if (x < 0 || x >= vocab()) throw Error("token id " + std::to_string(x) + " outside the vocabulary");
  if (v_ == Verifier::kGreedy) return x == argmax_;
  const double d = d_at(x);
  if (!(d > 0)) return false;  // the draft could not have drawn x: skipped
  return u * d < r_at(x);
}

void NodeVerifier::densify() {
  const size_t V = p_.size();
  R_.resize(V);
  D_.resize(V);
  const float* p = p_.data();
  const float* q = q_.data();
  double* R = R_.data();
  double* D = D_.data();
  const double ip = ip_, iq = iq_;
  for (size_t t = 0; t < V; ++t) {
    R[t] = static_cast<double>(p[t]) * ip;
    D[t] = static_cast<double>(q[t]) * iq;
  }
  if (v_ == Verifier::kSequoia) {
    if (rejected_.size() < V) rejected_.resize(V, 0);
    for (const int32_t x : rejected_list_) rejected_[static_cast<size_t>(x)] = 0;  // clear the last node's marks
    rejected_list_.clear();
    positive_left_ = static_cast<int64_t>(sum4(V, [&](size_t t) { return q[t] > 0.0f ? 1.0 : 0.0; }));
    uniform_phase_ = false;
  }
  dense_ = true;
}

void NodeVerifier::reject(int32_t x) {
  if (x < 0 || x >= vocab()) throw Error("token id " + std::to_string(x) + " outside the vocabulary");
  if (v_ == Verifier::kGreedy) return;
  if (!(d_at(x) > 0)) return;  // skipped child (see accept_probability)
  if (!dense_) densify();
  const size_t V = R_.size();
  double* R = R_.data();
  double* D = D_.data();
  // R <- norm(max(R - D, 0)) with D BEFORE x is zeroed. The residual mass s is
  // also the probability that x was rejected.
  const double s = sum4(V, [&](size_t t) { return std::max(R[t] - D[t], 0.0); });
  if (s > kResidualFloor) {
    const double inv = 1.0 / s;
    for (size_t t = 0; t < V; ++t) R[t] = std::max(R[t] - D[t], 0.0) * inv;
  }
  if (v_ == Verifier::kSpecInfer) return;  // D stays q
  // Sequoia: D[x] <- 0, S += x, D <- norm(D) (or uniform over V \ S).
  D[x] = 0;
  rejected_[static_cast<size_t>(x)] = 1;
  rejected_list_.push_back(x);
  if (!uniform_phase_ && q_[x] > 0.0f) --positive_left_;
  if (!uniform_phase_ && positive_left_ > 0) {
    // Recomputed rather than 1 - D[x]: accurate even when D[x] was close to 1.
    const double sd = sum4(V, [&](size_t t) { return D[t]; });
    const double inv = 1.0 / sd;  // sd > 0: some token with q > 0 is left
    for (size_t t = 0; t < V; ++t) D[t] *= inv;
    return;
  }
  uniform_phase_ = true;
  const size_t left = V - rejected_list_.size();
  const double u = left > 0 ? 1.0 / static_cast<double>(left) : 0.0;
  for (size_t t = 0; t < V; ++t) D[t] = rejected_[t] ? 0.0 : u;
}

std::span<const double> NodeVerifier::residual() {
  const size_t V = p_.size();
  if (v_ == Verifier::kGreedy) {
    onehot_.assign(V, 0.0);
    onehot_[static_cast<size_t>(argmax_)] = 1.0;
    return onehot_;
  }
  if (!dense_) densify();
  return R_;
}

int32_t NodeVerifier::sample_residual(double u) {
  if (v_ == Verifier::kGreedy) return argmax_;
  if (!dense_) return inverse_cdf(p_, u / ip_);  // R = p / sum(p)
  const double total = sum4(R_.size(), [&](size_t t) { return R_[t]; });
  return inverse_cdf(std::span<const double>(R_), u * total);
}

// ---- tree walk ----------------------------------------------------------------

namespace {

struct WalkScratch {
  std::vector<int32_t> start;  // CSR over parent + 1 (slot 0 = the root)
  std::vector<int32_t> kids;
  std::vector<int32_t> fill;
  NodeVerifier nv;
  // Path-class walk (target-sample, SpecTr, multi-draft IS).
  std::vector<int32_t> cls, drafts, draft_tokens, next;
  std::vector<double> pd, qd;  // normalised double copies of p and q
  SpecTrNode spectr;
  MultiDraftNode md;
};

// dst = src / sum(src) in double (src validated: non-negative, finite, positive sum).
void normalise_into(std::span<const float> src, std::vector<double>& dst, const char* what) {
  const double inv = 1.0 / checked_sum(src, what);
  dst.resize(src.size());
  for (size_t i = 0; i < src.size(); ++i) dst[i] = static_cast<double>(src[i]) * inv;
}

// Target-sample, SpecTr and multi-draft IS, walked by path classes. The current
// position is a set of tree nodes that all spell the same token path (initially
// the root alone); its drafts are all children of all its nodes, in tree (id)
// order. Given everything verified so far those children are i.i.d. from the
// draft at that path (each was drawn given its parent's token only, and the
// verification so far never looked at them), so any k-draft scheme can be run
// on them with k = their number; the output token Y has exactly the target law.
// The next class is every draft child with token Y (even if Y came from a
// residual); none -> Y is the bonus. A static "kary:KxL" tree (K chains of L)
// with i.i.d. first-level draws is then SpecTr's sequence-level Algorithm 3 (K
// sequences), and a tree with distinct children the per-node variant; k = 1 is
// plain speculative sampling.
VerifyResult verify_classes(Verifier v, const TreeView& tree, int32_t n, WalkScratch& w, const DistFn& target,
                            const DistFn& draft, Rng& rng, const VerifyOptions& options) {
  w.cls.assign(1, -1);
  int32_t last = -1;
  size_t tree_vocab = 0;
  for (;;) {
    const int32_t u = w.cls[0];
    const std::span<const float> p = target(u);
    if (p.empty()) throw Error("target distribution is empty");
    if (p.size() > static_cast<size_t>(INT32_MAX)) throw Error("vocabulary too large");
    if (u < 0) {  // every token must lie in the vocabulary, accepted or not
      for (int32_t i = 0; i < n; ++i)
        if (tree.token[i] >= static_cast<int32_t>(p.size()))
          throw Error("tree node " + std::to_string(i) + " has token " + std::to_string(tree.token[i]) +
                      " outside the vocabulary of " + std::to_string(p.size()));
    } else if (p.size() != tree_vocab) {
      throw Error("target distribution at tree node " + std::to_string(u) + " has " + std::to_string(p.size()) +
                  " entries, at the root " + std::to_string(tree_vocab));
    }
    tree_vocab = p.size();
    normalise_into(p, w.pd, "target");
    w.drafts.clear();
    for (const int32_t c : w.cls) {
      const size_t b = static_cast<size_t>(c) + 1;
      for (int32_t j = w.start[b]; j < w.start[b + 1]; ++j) w.drafts.push_back(w.kids[static_cast<size_t>(j)]);
    }
    std::sort(w.drafts.begin(), w.drafts.end());
    const int k = static_cast<int>(w.drafts.size());
    int32_t y = -1;
    if (k == 0 || v == Verifier::kTargetSample) {
      // No drafts: the bonus from p. Target-sample: Y ~ p, whatever the children.
      y = inverse_cdf(std::span<const double>(w.pd), rng.uniform());
    } else {
      // The draft at this path, asked of a node that has children (a leaf's
      // draft distribution may be absent); all nodes of the class share it.
      int32_t du = u;
      for (const int32_t c : w.cls)
        if (w.start[static_cast<size_t>(c) + 1] < w.start[static_cast<size_t>(c) + 2]) {
          du = c;
          break;
        }
      const std::span<const float> q = draft(du);
      if (q.size() != p.size())
        throw Error("draft distribution has " + std::to_string(q.size()) + " entries, target has " +
                    std::to_string(p.size()));
      normalise_into(q, w.qd, "draft");
      if (v == Verifier::kSpecTr) {
        w.spectr.begin(w.pd, w.qd, k);
        for (const int32_t c : w.drafts) {
          const int32_t x = tree.token[c];
          if (w.spectr.accepts(x, rng.uniform())) {
            y = x;
            break;
          }
        }
        if (y < 0) y = w.spectr.sample_residual(rng.uniform());
      } else {
        w.md.begin(w.pd, w.qd, k, kDefaultIsLpSize, options.is_alphabet);
        w.draft_tokens.clear();
        for (const int32_t c : w.drafts) w.draft_tokens.push_back(tree.token[c]);
        y = w.md.output(w.draft_tokens, rng);
      }
    }
    w.next.clear();
    for (const int32_t c : w.drafts)
      if (tree.token[c] == y) w.next.push_back(c);
    if (w.next.empty()) {
      // The accepted path: the ancestors of the last class's first node. Every
      // node of a class spells the same path, so this chain carries exactly the
      // accepted tokens, one node per depth, and is a real root-to-node path.
      VerifyResult res;
      for (int32_t a = last; a >= 0; a = tree.parent[a]) res.accepted.push_back(a);
      std::reverse(res.accepted.begin(), res.accepted.end());
      res.bonus = y;
      return res;
    }
    last = w.next[0];
    w.cls.swap(w.next);
  }
}

}  // namespace

VerifyResult verify_tree(Verifier v, const TreeView& tree, const DistFn& target, const DistFn& draft, Rng& rng,
                         const VerifyOptions& options) {
  if (options.is_alphabet < 0)
    throw Error("multidraft-is alphabet size must be >= 0, got " + std::to_string(options.is_alphabet));
  if (tree.parent.size() != tree.token.size())
    throw Error("tree has " + std::to_string(tree.parent.size()) + " parents but " +
                std::to_string(tree.token.size()) + " tokens");
  if (tree.parent.size() > static_cast<size_t>(INT32_MAX) - 1) throw Error("tree too large");
  const int32_t n = static_cast<int32_t>(tree.parent.size());
  thread_local WalkScratch w;
  w.start.assign(static_cast<size_t>(n) + 2, 0);
  for (int32_t i = 0; i < n; ++i) {
    const int32_t par = tree.parent[i];
    if (par < -1 || par >= i)
      throw Error("tree node " + std::to_string(i) + " has parent " + std::to_string(par) +
                  " (parents must precede children; -1 is the root)");
    if (tree.token[i] < 0) throw Error("tree node " + std::to_string(i) + " has a negative token id");
    ++w.start[static_cast<size_t>(par) + 2];
  }
  for (size_t i = 2; i < w.start.size(); ++i) w.start[i] += w.start[i - 1];
  w.kids.resize(static_cast<size_t>(n));
  w.fill.assign(w.start.begin(), w.start.end() - 1);
  for (int32_t i = 0; i < n; ++i) w.kids[static_cast<size_t>(w.fill[static_cast<size_t>(tree.parent[i]) + 1]++)] = i;
  if (v == Verifier::kTargetSample || v == Verifier::kSpecTr || v == Verifier::kMultiDraftIS)
    return verify_classes(v, tree, n, w, target, draft, rng, options);

  VerifyResult res;
  int32_t u = -1;
  size_t tree_vocab = 0;
  for (;;) {
    const size_t b = static_cast<size_t>(u) + 1;
    const bool has_children = w.start[b] < w.start[b + 1];
    const std::span<const float> p = target(u);
    // q is only needed to test children: a leaf's bonus comes from p.
    const std::span<const float> q = v == Verifier::kGreedy || !has_children ? p : draft(u);
    w.nv.begin(v, p, q);
    if (u < 0) {  // every token must lie in the vocabulary, accepted or not
      for (int32_t i = 0; i < n; ++i)
        if (tree.token[i] >= w.nv.vocab())
          throw Error("tree node " + std::to_string(i) + " has token " + std::to_string(tree.token[i]) +
                      " outside the vocabulary of " + std::to_string(w.nv.vocab()));
    } else if (p.size() != tree_vocab) {
      throw Error("target distribution at tree node " + std::to_string(u) + " has " + std::to_string(p.size()) +
                  " entries, at the root " + std::to_string(tree_vocab));
    }
    tree_vocab = p.size();
    int32_t next = -1;
    for (int32_t c = w.start[b]; c < w.start[b + 1]; ++c) {
      const int32_t child = w.kids[static_cast<size_t>(c)];
      const int32_t x = tree.token[child];
      const double r = v == Verifier::kGreedy ? 0.0 : rng.uniform();
      if (w.nv.accepts(x, r)) {
        next = child;
        break;
      }
      w.nv.reject(x);
    }
    if (next >= 0) {
      res.accepted.push_back(next);
      u = next;
      continue;
    }
    res.bonus = w.nv.sample_residual(v == Verifier::kGreedy ? 0.0 : rng.uniform());
    return res;
  }
}

}  // namespace redwood::spec
