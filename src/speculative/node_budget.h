// One node budget per pass, shared by sequences and tree nodes: how the
// nodes a pass has left after every decoding sequence's next-token slot are
// split into speculative trees (BatchGenerator per pass; `redwood plan
// --sequences` to predict). Pure functions of the trees' expected tokens and
// the measured or predicted costs.
#pragma once
#include <functional>
#include <vector>

#include "src/speculative/sequoia_dp.h"

namespace redwood::spec {

// How a pass's spare nodes are split into trees: with d decoding sequences,
// `base` tokens already in the pass and `room` nodes left, the number of nodes
// (root included, 1..f.size()) each sequence's tree gets, given f[k-1] = the
// expected emitted tokens of a tree of k nodes and draft[k-1] (empty: 0) the
// draft's seconds to build it. Even splits only (f concave): t empty gives
// every sequence the largest tree that fits; else the split maximising
// sum f / (t(base + extra nodes) + sum draft).
std::vector<int> split_tree_nodes(int d, int base, int room, const std::vector<double>& f,
                                  const std::function<double(int)>& t, const std::vector<double>& draft = {});
// The draft's seconds to build a static tree: one pass per level with
// children, of that level's width, under c(w).
double tree_draft_seconds(const StaticTree& shape, const std::function<double(int)>& c);

}  // namespace redwood::spec
