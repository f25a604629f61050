// One node budget per pass, shared by sequences and tree nodes: how the
// nodes a pass has left after every decoding sequence's next-token slot are
// split into speculative trees (BatchGenerator per pass; `redwood plan
// --sequences` to predict). Pure functions of the trees' expected tokens and
// the measured or predicted costs.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "src/speculative/sequoia_dp.h"

namespace redwood::spec {

// How a pass's spare nodes are split into trees: with d decoding sequences,
// `base` tokens already in the pass and `room` nodes left, the number of nodes
// (root included, 1..f.size()) each sequence's tree gets, given f[k-1] = the
// expected emitted tokens of a tree of k nodes and draft(ks) (empty: 0) the
// draft's seconds to build trees of ks nodes together. Even splits only (f
// concave): t empty gives every sequence the largest tree that fits; else the
// split maximising sum f / (t(base + extra nodes) + draft(split)).
std::vector<int> split_tree_nodes(int d, int base, int room, const std::vector<double>& f,
                                  const std::function<double(int)>& t,
                                  const std::function<double(const std::vector<int>&)>& draft = {});
// The widths of a static tree's levels that have children (a draft pass each).
std::vector<int> level_widths(const StaticTree& shape);
// The draft's seconds to build a static tree alone: one pass per level with
// children, of that level's width, under c(w).
double tree_draft_seconds(const StaticTree& shape, const std::function<double(int)>& c);
// The draft's seconds to build trees of ks[i] nodes together, as
// BatchGenerator does: one pass per level carrying every tree's nodes of that
// level. widths[k-1]: level_widths of the tree of k nodes.
double shared_draft_seconds(const std::vector<std::vector<int>>& widths, const std::vector<int>& ks,
                            const std::function<double(int)>& c);
// The draft's seconds to catch `trees` sequences up before their trees' first
// level, as BatchGenerator does: while more than cap tokens are pending in all
// (each tree's root among them), one pass of up to cap of the tokens before the
// roots, under c(w). REQUIRES: pending >= trees >= 0, cap > 0.
double catch_up_draft_seconds(int64_t pending, int trees, int cap, const std::function<double(int)>& c);
// The level widths of the trees of k = 1..n nodes for shared_draft_seconds,
// built at a grid of sizes (k grows by a quarter; tree_of(k) is called only
// there, n included), the smaller grid tree's levels standing in between
// (the DP's trees grow level by level): building every tree up to a budget
// of 768 at depth 32 takes seconds. REQUIRES: n >= 1.
std::vector<std::vector<int>> grid_level_widths(int n, const std::function<StaticTree(int)>& tree_of);

}  // namespace redwood::spec
