#include "src/planner/optimizer.h"

#include <map>

#include "src/util/error.h"

namespace redwood::planner {

TreeChoice evaluate_tree(int n, int d, double g, double t_n, const std::function<double(int)>& draft_step_s) {
  TreeChoice c;
  c.budget = n;
  c.depth = d;
  c.tokens = g;
  c.target_s = t_n;
  if (d > 1) {
    const int levels = d - 1;
    const int width = (n - 1 + levels - 1) / levels;
    c.draft_s = levels * draft_step_s(std::max(width, 1));
  }
  return c;
}

bool adds_value(double g, double g_smaller_n, double g_shallower) {
  constexpr double kEps = 1e-12;
  return g > g_smaller_n + kEps && g > g_shallower + kEps;
}

TreeChoice optimize_tree(const OptimizerInput& in) {
  if (in.max_budget < 1) throw Error("optimizer: max budget must be >= 1");
  if (in.max_depth < 1) throw Error("optimizer: max depth must be >= 1");
  if (!in.target_s || !in.draft_step_s) throw Error("optimizer: cost functions missing");
  const int D = std::min(in.max_depth, in.max_budget);
  const std::vector<std::vector<double>> G = spec::sequoia_value_table(in.acceptance, in.max_budget, D);
  std::vector<double> t(static_cast<size_t>(in.max_budget) + 1);
  for (int n = 1; n <= in.max_budget; ++n) t[static_cast<size_t>(n)] = in.target_s(n);
  std::map<int, double> c_cache;
  auto c = [&](int w) {
    auto it = c_cache.find(w);
    if (it == c_cache.end()) it = c_cache.emplace(w, in.draft_step_s(w)).first;
    return it->second;
  };
  TreeChoice best = evaluate_tree(1, 1, 1.0, t[1], c);
  double best_rate = best.tokens_per_second();
  for (int n = 1; n <= in.max_budget; ++n)
    for (int d = 1; d <= std::min(D, n); ++d) {
      const double g = G[static_cast<size_t>(d)][static_cast<size_t>(n)];
      if (!adds_value(g, G[static_cast<size_t>(d)][static_cast<size_t>(n - 1)],
                      G[static_cast<size_t>(d - 1)][static_cast<size_t>(n)]))
        continue;
      const TreeChoice x = evaluate_tree(n, d, g, t[static_cast<size_t>(n)], c);
      const double r = x.tokens_per_second();
      if (r > best_rate) {
        best = x;
        best_rate = r;
      }
    }
  return best;
}

}  // namespace redwood::planner
