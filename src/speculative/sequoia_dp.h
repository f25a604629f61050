// Sequoia's tree construction by dynamic programming (Sequoia §3.1, App. C.2):
// from a positional acceptance vector p_1 >= p_2 >= ... (p_k = probability that
// the k-th sampled child of an accepted node is the accepted one), the tree of
// n nodes (root included) and depth <= d maximising the expected number of
// generated tokens F(T) = sum over nodes of prod of p along the path.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace redwood::spec {

struct StaticTree {
  // Nodes in depth-first order; node 0 is the root (the last committed token's
  // position: it is NOT a drafted token). parent[0] = -1; rank = child index in
  // sampling order (0-based) under its parent; depth[0] = 0.
  std::vector<int32_t> parent, depth, rank;
  double expected_tokens = 0;  // F(T) under the acceptance vector
  int size() const { return static_cast<int>(parent.size()); }
  // Depth in LEVELS, root included: 1 + max(depth[]) (a root-only tree has
  // depth 1; 0 for an empty tree), the convention of sequoia_tree's max_depth
  // and of the paper (a tree of depth d needs d - 1 drafted levels).
  int max_depth() const;
};

// Unbounded depth (max_depth <= 0) or depth-bounded (Algorithm 5, -inf for
// infeasible entries, argmax reconstruction). n >= 1 counts the root; so does
// max_depth (levels: max_depth = 1 gives the root alone). The result has at
// most n nodes: fewer when more nodes cannot add value (zero acceptance entries,
// or n larger than the depth/branching bounds allow); among equal values the
// smaller tree (then fewer root children) wins. Branching <= K = acceptance.size().
// acceptance: p_1..p_K (K = max branching), non-increasing, sum <= 1.
// Throws redwood::Error on invalid input. Must be fast: n = 1024, d = 32 in well
// under a second.
StaticTree sequoia_tree(const std::vector<double>& acceptance, int n, int max_depth);

namespace detail {
// Algorithm 5 itself, without sequoia_tree's shortcut (when the unbounded
// optimum already fits in max_depth it is returned). For tests. max_depth >= 1.
StaticTree sequoia_tree_bounded(const std::vector<double>& acceptance, int n, int max_depth);
}  // namespace detail

// G(n, d) for every budget n <= max_n and depth d <= max_depth (levels, root
// included) at once, from one run of the depth-bounded DP: table[d][n] equals
// sequoia_tree(acceptance, n, d).expected_tokens (best over trees of at most n
// nodes and at most d levels); rows 0 and columns 0 are 0. For the
// hardware-aware optimizer (src/planner). Throws redwood::Error on invalid input.
std::vector<std::vector<double>> sequoia_value_table(const std::vector<double>& acceptance, int max_n, int max_depth);

// Reads an acceptance vector file, JSON {"acceptance": [p1, p2, ...]}, and
// validates it (non-increasing, in [0, 1], sum <= 1). Errors name the file.
std::vector<double> read_acceptance_file(const std::string& path);

// Expected generated tokens of any tree under the acceptance vector (a child of
// rank >= K contributes 0). Validates the tree (as read_tree_file does).
double expected_tokens(const StaticTree& t, const std::vector<double>& acceptance);

// Tree files (JSON): {"parent": [...], "acceptance": [...]?, "budget": n, "depth": d, ...}.
// Reading validates (root first, parents precede children, depth-first
// pre-order, "rank"/"depth"/"budget"/"acceptance" consistent when present).
// Errors (unreadable file, bad JSON, bad structure) throw redwood::Error naming
// the file. The overload also returns the file's acceptance vector (empty when
// absent); expected_tokens is recomputed from it when present, else taken from
// the file's "expected_tokens" (0 if absent).
StaticTree read_tree_file(const std::string& path);
StaticTree read_tree_file(const std::string& path, std::vector<double>* acceptance);
void write_tree_file(const std::string& path, const StaticTree& t, const std::vector<double>& acceptance);

// Default acceptance vector when none is given: a power law p_k = c / k^b
// normalised so that sum_k p_k = total (documented in the implementation).
std::vector<double> default_acceptance(int width);

}  // namespace redwood::spec
