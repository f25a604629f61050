#include "src/speculative/tree_policy.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "src/util/error.h"

namespace redwood::spec {

const char* tree_kind_name(TreeKind k) {
  switch (k) {
    case TreeKind::kStatic:
      return "static";
    case TreeKind::kDySpec:
      return "dyspec";
    case TreeKind::kOptTree:
      return "opt-tree";
    case TreeKind::kSpecExec:
      return "specexec";
  }
  return "?";
}

// ---- DraftTree ------------------------------------------------------------------

int32_t DraftTree::add(int32_t parent_node, int32_t tok) {
  const int32_t id = size();
  token.push_back(tok);
  parent.push_back(parent_node);
  depth.push_back(parent_node < 0 ? 0 : depth[static_cast<size_t>(parent_node)] + 1);
  children.emplace_back();
  if (parent_node >= 0) children[static_cast<size_t>(parent_node)].push_back(id);
  expanded_.push_back(0);
  slot_.push_back(-1);
  return id;
}

std::span<const float> DraftTree::dist(int32_t u) const {
  const int32_t s = slot_.at(static_cast<size_t>(u));
  if (s < 0)
    throw Error("draft tree: node " + std::to_string(u) +
                (expanded(u) ? "'s distribution is no longer kept" : " has not been run through the draft"));
  return pool_[static_cast<size_t>(s)];
}

void DraftTree::reset(int32_t root_token, bool retain) {
  token.clear();
  parent.clear();
  depth.clear();
  children.clear();
  expanded_.clear();
  slot_.clear();
  batch_nodes_.clear();
  next_slot_ = 0;
  retain_ = retain;
  add(-1, root_token);
}

void DraftTree::begin_batch() {
  if (retain_) return;
  // Slots are reused pass by pass: the previous pass's distributions go.
  for (int32_t u : batch_nodes_) slot_[static_cast<size_t>(u)] = -1;
  batch_nodes_.clear();
  next_slot_ = 0;
}

std::vector<float>& DraftTree::set_dist(int32_t u) {
  if (expanded(u)) throw Error("draft tree: node " + std::to_string(u) + " expanded twice");
  expanded_[static_cast<size_t>(u)] = 1;
  const int32_t s = next_slot_++;
  if (static_cast<size_t>(s) >= pool_.size()) pool_.emplace_back();
  slot_[static_cast<size_t>(u)] = s;
  if (!retain_) batch_nodes_.push_back(u);
  return pool_[static_cast<size_t>(s)];
}

// ---- driver ---------------------------------------------------------------------

std::vector<int32_t> TreePolicy::final_nodes(const DraftTree& t) const {
  std::vector<int32_t> all(static_cast<size_t>(t.size()));
  for (int i = 0; i < t.size(); ++i) all[static_cast<size_t>(i)] = i;
  return all;
}

std::vector<int32_t> grow_tree(TreePolicy& p, DraftTree& t,
                               const std::function<void(std::span<const int32_t>)>& forward, Rng& rng, int* passes) {
  p.begin_step();
  const int32_t root = 0;
  std::vector<int32_t> next = p.grow(t, std::span<const int32_t>(&root, 1), rng);
  int n = 0;
  while (!next.empty()) {
    t.begin_batch();
    forward(next);
    ++n;
    for (int32_t u : next)
      if (!t.expanded(u)) throw Error("draft tree: the draft pass left node " + std::to_string(u) + " unexpanded");
    next = p.grow(t, next, rng);
  }
  if (passes) *passes = n;
  return p.final_nodes(t);
}

namespace detail {
std::vector<int32_t> best_nodes(std::span<const double> value, int n) {
  std::vector<int32_t> ids;
  for (size_t i = 1; i < value.size(); ++i) ids.push_back(static_cast<int32_t>(i));
  auto better = [&](int32_t a, int32_t b) { return value[a] > value[b] || (value[a] == value[b] && a < b); };
  if (static_cast<int>(ids.size()) > n) {
    std::nth_element(ids.begin(), ids.begin() + n, ids.end(), better);
    ids.resize(static_cast<size_t>(n));
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::vector<TopChild> top_children(std::span<const float> q, int limit, Rng& rng) {
  // The sum (probs() normalises, up to float rounding) with the checks the verifiers apply.
  double tot = 0;
  for (const float x : q) {
    if (!(x >= 0.0f) || !std::isfinite(x)) throw Error("draft distribution has a negative or non-finite entry");
    tot += x;
  }
  if (!(tot > 0)) throw Error("draft distribution sums to zero");
  const int k = static_cast<int>(std::min<size_t>(static_cast<size_t>(limit), q.size()));
  std::vector<TopChild> out;
  for (const int32_t y : sample_children(Verifier::kGreedy, q, k, rng)) {  // deterministic
    const double d = std::min(1.0, static_cast<double>(q[static_cast<size_t>(y)]) / tot);
    if (!(d > 0)) break;
    out.push_back({y, d});
  }
  return out;
}

TopNPolicy::TopNPolicy(const char* name, int budget, int depth) : name_(name), n_(budget - 1), levels_(depth) {
  if (budget < 1) throw Error(std::string(name) + ": budget must be >= 1");
  if (depth < 1) throw Error(std::string(name) + ": depth must be >= 1");
}

std::vector<int32_t> TopNPolicy::final_nodes(const DraftTree& t) const {
  if (static_cast<int>(value_.size()) != t.size()) throw Error(std::string(name_) + ": tree and policy disagree");
  std::vector<int32_t> keep = {0};
  for (int32_t b : best_nodes(value_, n_)) keep.push_back(b);
  return keep;
}
}  // namespace detail

// ---- static shapes --------------------------------------------------------------

namespace {

// The shape's children drawn per node exactly as the level-by-level loop always
// did: each level's expanding nodes in order, sample_children(v) per node.
class StaticPolicy : public TreePolicy {
 public:
  StaticPolicy(const StaticTree& s, Verifier v) : shape_(s), v_(v) {
    if (s.size() < 1 || s.parent[0] != -1) throw Error("tree shape must start with its root");
    kids_.assign(static_cast<size_t>(s.size()), {});
    for (int i = 1; i < s.size(); ++i) {
      if (s.parent[i] < 0 || s.parent[i] >= i) throw Error("tree shape: parents must precede children");
      kids_[static_cast<size_t>(s.parent[i])].push_back(i);
    }
    for (auto& c : kids_) std::stable_sort(c.begin(), c.end(), [&](int a, int b) { return s.rank[a] < s.rank[b]; });
  }
  void begin_step() override { shape_of_ = {0}; }
  std::vector<int32_t> grow(DraftTree& t, std::span<const int32_t> expanded, Rng& rng) override {
    std::vector<int32_t> next;
    for (int32_t u : expanded) {
      const auto& kids = kids_[static_cast<size_t>(shape_of_[static_cast<size_t>(u)])];
      if (kids.empty()) continue;
      const auto drawn = sample_children(v_, t.dist(u), static_cast<int>(kids.size()), rng);
      for (size_t c = 0; c < drawn.size() && c < kids.size(); ++c) {
        const int32_t id = t.add(u, drawn[c]);
        shape_of_.push_back(kids[c]);
        if (!kids_[static_cast<size_t>(kids[c])].empty()) next.push_back(id);
      }
    }
    return next;
  }
  bool needs_old_dists() const override { return false; }
  int max_nodes() const override { return shape_.size(); }
  int max_draft_rows() const override { return shape_.size(); }
  int max_levels() const override { return shape_.max_depth(); }

 private:
  StaticTree shape_;
  Verifier v_;
  std::vector<std::vector<int32_t>> kids_;  // children of each shape node in rank order
  std::vector<int32_t> shape_of_;           // runtime node -> shape node
};

const char* allowed_verifiers(TreeKind k) {
  switch (k) {
    case TreeKind::kStatic:
      return "greedy, specinfer, sequoia, spectr, multidraft-is or target-sample";
    case TreeKind::kDySpec:
      return "sequoia or greedy";
    case TreeKind::kOptTree:
    case TreeKind::kSpecExec:
      return "target-sample or greedy";
  }
  return "?";
}

}  // namespace

std::unique_ptr<TreePolicy> make_static_policy(const StaticTree& shape, Verifier v) {
  return std::make_unique<StaticPolicy>(shape, v);
}

std::string check_pairing(TreeKind kind, Verifier v) {
  bool ok = false;
  switch (kind) {
    case TreeKind::kStatic:
      ok = true;
      break;
    // Siblings without replacement: the Sequoia residual update is what makes
    // the tree lossless; SpecInfer/SpecTr/IS assume i.i.d. children.
    case TreeKind::kDySpec:
      ok = v == Verifier::kSequoia || v == Verifier::kGreedy;
      break;
    // Deterministic top-k children have no draft law to correct for: only
    // matching against a target sample (or the target argmax) is lossless.
    case TreeKind::kOptTree:
    case TreeKind::kSpecExec:
      ok = v == Verifier::kTargetSample || v == Verifier::kGreedy;
      break;
  }
  if (ok) return "";
  return std::string("--tree ") + tree_kind_name(kind) + " cannot be verified with --verify " + verifier_name(v) +
         " (use " + allowed_verifiers(kind) + ")";
}

namespace {
std::string num(double x) {
  std::ostringstream o;
  o << x;
  return o.str();
}
}  // namespace

void validate_tree_params(const TreeParams& p) {
  if (p.kind == TreeKind::kStatic) return;
  const std::string t = std::string("--tree ") + tree_kind_name(p.kind) + ": ";
  if (p.budget < 1 || p.budget > 8192)
    throw Error(t + "--budget must be in [1, 8192] (nodes per target pass, root included), got " +
                std::to_string(p.budget));
  if (p.depth < 1 || p.depth > 1024)
    throw Error(t + "--depth must be in [1, 1024] (levels, root included), got " + std::to_string(p.depth));
  if (!(p.threshold >= 0 && p.threshold < 1))
    throw Error(t + "--threshold must be in [0, 1) (0 = heap variant), got " + num(p.threshold));
  if (!(p.delta >= 0 && std::isfinite(p.delta)))
    throw Error(t + "--delta must be a finite number >= 0, got " + num(p.delta));
  if (p.width < 1 || p.width > 4096) throw Error(t + "--width must be in [1, 4096], got " + std::to_string(p.width));
}

std::unique_ptr<TreePolicy> make_policy(const TreeParams& p, const StaticTree& shape, Verifier v) {
  if (const std::string e = check_pairing(p.kind, v); !e.empty()) throw Error(e);
  validate_tree_params(p);
  switch (p.kind) {
    case TreeKind::kStatic:
      return make_static_policy(shape, v);
    case TreeKind::kDySpec:
      return make_dyspec_policy(p.budget, p.depth, p.threshold, v == Verifier::kGreedy);
    case TreeKind::kOptTree:
      return make_opt_tree_policy(p.budget, p.depth, p.delta);
    case TreeKind::kSpecExec:
      return make_specexec_policy(p.budget, p.depth, p.width);
  }
  throw Error("unknown tree kind");
}

}  // namespace redwood::spec
