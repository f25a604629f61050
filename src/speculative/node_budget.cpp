#include "src/speculative/node_budget.h"

#include <algorithm>

namespace redwood::spec {

std::vector<int> level_widths(const StaticTree& shape) {
  std::vector<int> width;
  for (const int32_t v : shape.depth) {
    if (static_cast<size_t>(v) >= width.size()) width.resize(static_cast<size_t>(v) + 1, 0);
    ++width[static_cast<size_t>(v)];
  }
  if (!width.empty()) width.pop_back();  // the deepest level has no children
  return width;
}

double tree_draft_seconds(const StaticTree& shape, const std::function<double(int)>& c) {
  double s = 0;
  for (const int w : level_widths(shape)) s += c(w);
  return s;
}

double shared_draft_seconds(const std::vector<std::vector<int>>& widths, const std::vector<int>& ks,
                            const std::function<double(int)>& c) {
  std::vector<int> sum;
  for (const int k : ks) {
    const std::vector<int>& w = widths[static_cast<size_t>(k - 1)];
    if (w.size() > sum.size()) sum.resize(w.size(), 0);
    for (size_t l = 0; l < w.size(); ++l) sum[l] += w[l];
  }
  double s = 0;
  for (const int w : sum) s += c(w);
  return s;
}

double catch_up_draft_seconds(int64_t pending, int trees, int cap, const std::function<double(int)>& c) {
  int64_t before_roots = pending - trees;
  double s = 0;
  while (pending > cap && before_roots > 0) {
    const int64_t w = std::min<int64_t>(cap, before_roots);
    s += c(static_cast<int>(w));
    pending -= w, before_roots -= w;
  }
  return s;
}

std::vector<int> split_tree_nodes(int d, int base, int room, const std::vector<double>& f,
                                  const std::function<double(int)>& t,
                                  const std::function<double(const std::vector<int>&)>& draft) {
  if (d <= 0) return {};
  const int kmax = static_cast<int>(f.size());
  const int max_extra = std::min(std::max(room, 0), d * (kmax - 1));
  auto split = [&](int extra) {
    std::vector<int> k(static_cast<size_t>(d), 1 + extra / d);
    for (int i = 0; i < extra % d; ++i) ++k[static_cast<size_t>(i)];
    return k;
  };
  if (!t) return split(max_extra);
  int best = 0;
  double best_rate = -1;
  for (int extra = 0; extra <= max_extra; ++extra) {
    const std::vector<int> ks = split(extra);
    double tokens = 0, seconds = t(base + extra) + (draft ? draft(ks) : 0.0);
    for (const int k : ks) tokens += f[static_cast<size_t>(k - 1)];
    const double rate = tokens / std::max(seconds, 1e-12);
    if (rate > best_rate * (1 + 1e-9)) best_rate = rate, best = extra;  // ties: the smaller pass
  }
  return split(best);
}

std::vector<std::vector<int>> grid_level_widths(int n, const std::function<StaticTree(int)>& tree_of) {
  std::vector<int> grid;
  for (int k = 1; k < n; k = std::max(k + 1, k * 5 / 4)) grid.push_back(k);
  grid.push_back(n);
  std::vector<std::vector<int>> widths(static_cast<size_t>(n));
  for (size_t i = 0; i < grid.size(); ++i) {
    const std::vector<int> w = level_widths(tree_of(grid[i]));
    const int next = i + 1 < grid.size() ? grid[i + 1] : n + 1;
    for (int k = grid[i]; k < next; ++k) widths[static_cast<size_t>(k - 1)] = w;
  }
  return widths;
}

}  // namespace redwood::spec
