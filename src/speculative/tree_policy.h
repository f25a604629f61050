// How the draft's token tree is built in one speculative step. The step loop
// (SpecDecoder::step, or grow_tree below for tests) and a TreePolicy alternate:
//   the loop runs ONE batched draft pass over the nodes the policy asked for
//   and stores their draft distributions in the tree; the policy reads them,
//   adds children (token, parent) and names the nodes to run next, or none
//   (done); finally the policy says which nodes form the verified tree.
// Policies: a static shape (chain/kary/sequoia: the shape's children drawn with
// sample_children), DySpec (greedy expansion by value, siblings without
// replacement; heap or layer-wise threshold variant), OPT-Tree (per layer the n
// largest path probabilities, gain test) and SpecExec (parallel best-first by
// cumulative log-probability). Notes: shared/papers/NOTES-dyspec-opttree.md.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "src/engine/sampler.h"
#include "src/speculative/sequoia_dp.h"
#include "src/speculative/verify.h"

namespace redwood::spec {

enum class TreeKind { kStatic, kDySpec, kOptTree, kSpecExec };
const char* tree_kind_name(TreeKind k);  // "static", "dyspec", "opt-tree", "specexec"

// Parameters of the dynamic trees (a static tree is its StaticTree).
struct TreeParams {
  TreeKind kind = TreeKind::kStatic;
  int budget = 64;       // nodes per target pass, root included: a hard cap on the verified tree
  int depth = 8;         // maximum depth in levels, root included (2 = one drafted level)
  double threshold = 0;  // dyspec: 0 = heap variant (fills the budget); in (0, 1) = layer-wise
                         // variant expanding while value > threshold (budget = node cap)
  double delta = 0.5;    // opt-tree: stop when a layer raises the best-n sum by <= delta
  int width = 4;         // specexec: top-width children per expanded node
};

// The tree of one step. Node 0 is the root (the newest token, depth 0); nodes
// are only appended, parents precede children, and a node's children are in
// creation order, which is their sampling order (what the verifiers expect).
// A node's draft distribution exists once the node has been run through the
// draft ("expanded"); only expanded nodes get children.
class DraftTree {
 public:
  std::vector<int32_t> token, parent, depth;
  std::vector<std::vector<int32_t>> children;

  int size() const { return static_cast<int>(token.size()); }
  int32_t add(int32_t parent_node, int32_t tok);
  bool expanded(int32_t u) const { return expanded_[static_cast<size_t>(u)] != 0; }
  // The draft distribution of an expanded node (normalised, full vocabulary).
  // With retain_dists() false it is only available during the grow() call that
  // follows the node's draft pass (distributions live in per-batch slots).
  std::span<const float> dist(int32_t u) const;

  // ---- for the step loop ----
  // Starts a step with the root only. retain: keep every node's distribution
  // for the whole step (the verifier or the policy needs them later).
  void reset(int32_t root_token, bool retain);
  bool retain_dists() const { return retain_; }
  // Before setting the distributions of one draft pass.
  void begin_batch();
  // Marks u expanded and returns its distribution buffer (the caller fills it).
  std::vector<float>& set_dist(int32_t u);

 private:
  bool retain_ = true;
  std::vector<uint8_t> expanded_;
  std::vector<int32_t> slot_;         // distribution slot per node (-1: none now)
  std::vector<int32_t> batch_nodes_;  // nodes whose slots are valid (retain_ = false)
  int next_slot_ = 0;
  std::vector<std::vector<float>> pool_;  // reused across steps
};

class TreePolicy {
 public:
  virtual ~TreePolicy() = default;
  // Clears per-step state; the tree now holds the root only.
  virtual void begin_step() = 0;
  // `expanded`: the nodes whose distributions the last draft pass set (the
  // root on the first call). Adds children to expanded nodes and returns the
  // nodes for the next draft pass (each unexpanded, with an expanded parent;
  // empty = the tree is complete).
  virtual std::vector<int32_t> grow(DraftTree& t, std::span<const int32_t> expanded, Rng& rng) = 0;
  // The verified tree: node ids ascending, root first, every parent included.
  // Default: every node.
  virtual std::vector<int32_t> final_nodes(const DraftTree& t) const;
  // Whether grow() reads distributions of nodes expanded in earlier passes.
  virtual bool needs_old_dists() const = 0;
  // Bounds, for cache capacities: nodes in the verified tree (root included),
  // nodes run through the draft per step (root excluded), depth in levels.
  virtual int max_nodes() const = 0;
  virtual int max_draft_rows() const = 0;
  virtual int max_levels() const = 0;
};

// The policy for a configuration. Pairings (the verifier's child-drawing law
// must be what the policy does): static shapes draw with sample_children(v);
// dyspec needs sequoia (siblings without replacement) or greedy (top-k order);
// opt-tree and specexec take deterministic top-k children, so target-sample
// or greedy. Throws redwood::Error on a bad pairing or bad parameters.
std::unique_ptr<TreePolicy> make_policy(const TreeParams& p, const StaticTree& shape, Verifier v);
// The one-line error for a bad pairing, or "" when v suits kind.
std::string check_pairing(TreeKind kind, Verifier v);
// Throws redwood::Error (one line) when a parameter is out of range for kind.
void validate_tree_params(const TreeParams& p);

// Concrete policies (make_policy picks one; tests build them directly).
std::unique_ptr<TreePolicy> make_static_policy(const StaticTree& shape, Verifier v);
// lookahead = false: one draft pass per heap pop that needs a distribution
// (Algorithm 1 literally); the tree is identical either way (tests check it).
std::unique_ptr<TreePolicy> make_dyspec_policy(int budget, int depth, double threshold, bool greedy,
                                               bool lookahead = true);
std::unique_ptr<TreePolicy> make_opt_tree_policy(int budget, int depth, double delta);
std::unique_ptr<TreePolicy> make_specexec_policy(int budget, int depth, int width);

// One step's tree without a model: `forward(nodes)` stands for one batched
// draft pass and must fill t.set_dist(u) for each node (after t.begin_batch(),
// which grow_tree calls). t must hold the root with its distribution set
// (reset, begin_batch, set_dist(0)). Returns final_nodes(). `passes` (if
// given) receives the number of forward calls. The SpecDecoder runs the same
// sequence with real draft passes.
std::vector<int32_t> grow_tree(TreePolicy& p, DraftTree& t,
                               const std::function<void(std::span<const int32_t>)>& forward, Rng& rng,
                               int* passes = nullptr);

namespace detail {
// The n nodes among 1..value.size()-1 with the largest value, ties to the
// lower id (a parent before its children, so a selection whose values never
// increase from parent to child stays connected); ids ascending.
std::vector<int32_t> best_nodes(std::span<const double> value, int n);

// The top-min(limit, V) children of an expanded node by draft probability
// (sample_children(kGreedy): deterministic, ties to the lower id), each with
// its normalised probability min(1, q(y) / sum q), cut before the first whose
// probability is not positive. Throws redwood::Error when q has a negative or
// non-finite entry or sums to zero.
struct TopChild {
  int32_t token;
  double prob;
};
std::vector<TopChild> top_children(std::span<const float> q, int limit, Rng& rng);

// The common part of OPT-Tree and SpecExec: a value per node (value_[0] for
// the root), the verified tree is the root plus the n = budget - 1 nodes with
// the largest value (best_nodes), at most `depth` levels, draft passes over at
// most n nodes per level below the root's. `name` prefixes the error messages.
class TopNPolicy : public TreePolicy {
 public:
  // Throws redwood::Error when budget < 1 or depth < 1.
  TopNPolicy(const char* name, int budget, int depth);
  std::vector<int32_t> final_nodes(const DraftTree& t) const override;
  bool needs_old_dists() const override { return false; }
  int max_nodes() const override { return n_ + 1; }
  int max_draft_rows() const override { return n_ * std::max(0, levels_ - 2); }
  int max_levels() const override { return levels_; }

 protected:
  const char* name_;
  int n_, levels_;
  std::vector<double> value_;  // per node
};
}  // namespace detail

}  // namespace redwood::spec
