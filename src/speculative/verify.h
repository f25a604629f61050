// Token-tree verification: the accepted path plus one bonus token, with output
// law exactly the target's (lossless). Children of each node must have been
// drawn by the sampling scheme the verifier expects (sample_children below).
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "src/engine/sampler.h"

namespace redwood::spec {

enum class Verifier {
  kGreedy,     // temperature 0: accept the child equal to the target argmax
  kSpecInfer,  // children i.i.d. WITH replacement from the draft; multi-round rejection
  kSequoia,    // children WITHOUT replacement from the draft (Gumbel top-k); residual R and D updated
  kTargetSample,  // any children; one token sampled from the target per node, accept the child equal to it
  kSpecTr,        // children i.i.d. from the draft; SpecTr k-sequential selection (rho* solved per node)
  kMultiDraftIS,  // children i.i.d. from the draft; importance-weighted selection, then single-draft test vs pI
};
const char* verifier_name(Verifier v);
Verifier parse_verifier(const std::string& s);  // throws redwood::Error

// How children of one node are drawn at draft time, given the draft
// distribution q at that node (already temperature/top-p filtered, normalised):
//  kGreedy:    the k most likely tokens of q (ties: lower id), deterministic
//  kSpecInfer, kSpecTr, kMultiDraftIS, kTargetSample: k i.i.d. samples from q
//              (duplicates possible; target-sample is lossless for any children,
//              i.i.d. draws are just the default)
//  kSequoia:   k samples without replacement (exponential keys E_t / q_t, the k
//              smallest; zero-probability tokens only after all positive ones, in
//              uniformly random order); fewer than k positive tokens is fine.
//              Implemented as successive sampling (x_i ~ q restricted to the
//              tokens not yet drawn), which has exactly that (Plackett-Luce) law
//              and costs one O(V) pass plus O(V/256 + 256) per draw instead of V
//              logarithms.
// Greedy and Sequoia return min(k, V) tokens; k < 0 or bad q -> redwood::Error.
// For greedy, pass a non-degenerate q (e.g. the draft's T = 1 softmax): top-k
// of a one-hot vector is the argmax followed by the lowest ids.
// The verifier must later see the same q (proportional is enough) at that node.
std::vector<int32_t> sample_children(Verifier v, std::span<const float> q, int k, Rng& rng);

// The tree as the verifier sees it: nodes 0..n-1, parents precede children;
// parent -1 is the root (the committed context). children_of(-1) are the root's
// children. Child order = sampling order.
struct TreeView {
  std::span<const int32_t> parent;
  std::span<const int32_t> token;
};

// Distributions at a node u (u = -1: the root): the target's p(. | path to u)
// and the draft q(. | path to u) that u's children were drawn from. Both are
// full-vocabulary, normalised, after identical temperature/top-p filtering.
using DistFn = std::function<std::span<const float>(int32_t node)>;

struct VerifyResult {
  std::vector<int32_t> accepted;  // accepted node ids, root to leaf
  int32_t bonus = -1;             // the extra token sampled at the last accepted node
};

// One node's verification loop (the building block of verify_tree, exposed so
// that tests can enumerate branches analytically with exactly the arithmetic
// verify_tree uses). Internally double precision; buffers are reused across
// begin() calls, so keep one per thread. Usage per node:
//   begin(v, p, q); for each child x in sampling order:
//     if (accepts(x, u ~ U[0,1))) -> descend into that child; else reject(x);
//   all rejected (or no children): bonus = sample_residual(u ~ U[0,1)).
// The spans given to begin() must stay valid until the node is done.
class NodeVerifier {
 public:
  // Loads the target p and draft q at this node (normalised here in double;
  // greedy ignores q). Throws redwood::Error on empty/mismatched sizes,
  // negative or non-finite entries, or a zero sum.
  void begin(Verifier v, std::span<const float> p, std::span<const float> q);
  // P(accepts(x, u)) for u ~ U[0,1): min(1, R[x] / D[x]); 0 when D[x] == 0 (a
  // child the draft could not have drawn: it is skipped, reject() ignores it).
  // Greedy: 1 iff x == argmax p (lowest id on ties).
  double accept_probability(int32_t x) const;
  bool accepts(int32_t x, double u) const;  // u * D[x] < R[x]
  // Child x was rejected: R <- norm(max(R - D, 0)) (R kept if that mass is
  // <= 1e-15, a rounding-level event); Sequoia also D[x] <- 0, then D uniform
  // over the not-yet-rejected tokens once no positive-probability token is
  // left, D <- norm(D). SpecInfer keeps D = q. Greedy: no-op.
  void reject(int32_t x);
  // The bonus law at this point: R (p at a node whose children were never
  // tested); greedy: one-hot at argmax p. Materialises a dense vector.
  std::span<const double> residual();
  int32_t sample_residual(double u);  // inverse CDF of residual() at u in [0,1)
  int32_t vocab() const { return static_cast<int32_t>(p_.size()); }

 private:
  double r_at(int32_t x) const;
  double d_at(int32_t x) const;
  void densify();

  Verifier v_ = Verifier::kSequoia;
  std::span<const float> p_, q_;
  double ip_ = 0, iq_ = 0;  // 1 / sum(p), 1 / sum(q)
  bool dense_ = false;      // R_/D_ hold the state (else R = p * ip_, D = q * iq_)
  std::vector<double> R_, D_, onehot_;
  std::vector<uint8_t> rejected_;     // Sequoia: membership of S (dense)
  std::vector<int32_t> rejected_list_;
  int64_t positive_left_ = 0;  // Sequoia: tokens with q > 0 not yet rejected
  bool uniform_phase_ = false;
  int32_t argmax_ = 0;
};

// Walks the tree from the root.
// Greedy, SpecInfer, Sequoia: at each node runs the verifier's loop over its
// children (in order); an accepted child -> descend; all rejected -> bonus from
// the residual; at a leaf (or node without children) -> bonus from p.
// Random draws: one rng.uniform() per tested child, one for the bonus (greedy:
// none).
// Target-sample, SpecTr, multi-draft IS walk PATH CLASSES: the current position
// is the set of nodes spelling the accepted token path (initially the root); its
// drafts are all children of all those nodes (tree order), k = their number.
// One output token Y with exactly the target law is produced there
// (target-sample: Y ~ p, one draw; SpecTr: k-Seq with rho* solved for this k, one
// draw per tested draft + one for the residual; multi-draft IS: staged
// selection (a draw only for LP-weighted pairs), one draw for the test against
// pI, one for the residual). The next class = the drafts with token Y (even if
// Y came from a residual); none -> Y is the bonus. target(u) is asked for the
// first node u of each class, draft(u) for its first node that has children
// (all nodes of a class share the context). The
// accepted ids are the ancestors of the last class's first node: one per depth,
// a real root-to-node path, their tokens the accepted tokens. For K chains of
// length L (kary:KxL) this is SpecTr's sequence-level algorithm.
// Greedy and target-sample never call `draft`; the others call it only for
// nodes that have children (a leaf's draft distribution may be absent/empty).
// The span returned by target(u) / draft(u) must stay valid until the next call
// of the same function (each is called once per node or class on the accepted
// path, finished before the next call).
// Throws redwood::Error on a malformed tree, token ids outside the vocabulary or
// bad distributions.
// Verifier settings beyond the choice of verifier.
struct VerifyOptions {
  int is_alphabet = 0;  // multidraft-is: alphabet truncation to the M most likely target tokens (0 = off)
};
VerifyResult verify_tree(Verifier v, const TreeView& tree, const DistFn& target, const DistFn& draft, Rng& rng,
                         const VerifyOptions& options = {});

}  // namespace redwood::spec
