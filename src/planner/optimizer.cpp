#include "src/planner/optimizer.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <sstream>

#include "src/speculative/speculate.h"
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

// ---- dynamic trees ------------------------------------------------------------------

double calibration_scale(double a1, double mean_rank1_q) {
  if (!(a1 >= 0 && a1 <= 1)) throw Error("calibration: rank-1 acceptance must be in [0, 1]");
  if (!(mean_rank1_q > 0 && mean_rank1_q <= 1))
    throw Error("calibration: the draft's mean rank-1 probability must be in (0, 1]");
  return a1 / mean_rank1_q;
}

double calibrated_tokens(std::span<const int32_t> parent, std::span<const double> q, double alpha) {
  const size_t n = parent.size();
  if (n < 1 || q.size() != n || parent[0] != -1) throw Error("calibrated_tokens: the tree must start with its root");
  if (!(alpha >= 0) || !std::isfinite(alpha)) throw Error("calibrated_tokens: alpha must be finite and >= 0");
  std::vector<double> path(n, 0.0), siblings(n, 0.0);
  path[0] = 1;
  double e = 1;  // the bonus token
  for (size_t i = 1; i < n; ++i) {
    const int32_t u = parent[i];
    if (u < 0 || static_cast<size_t>(u) >= i) throw Error("calibrated_tokens: parents must precede children");
    if (!(q[i] >= 0 && q[i] <= 1)) throw Error("calibrated_tokens: draft probabilities must be in [0, 1]");
    double& s = siblings[static_cast<size_t>(u)];
    const double a = std::min(alpha * q[i], std::max(0.0, 1.0 - s));
    s += a;
    path[i] = path[static_cast<size_t>(u)] * a;
    e += path[i];
  }
  return e;
}

TreeChoice evaluate_dynamic(const std::vector<DynamicTreeSample>& samples, const std::function<double(int)>& target_s,
                            const std::function<double(int)>& draft_step_s) {
  if (samples.empty()) throw Error("optimizer: a dynamic candidate without samples");
  double tokens = 0, t = 0, c = 0;
  for (const DynamicTreeSample& x : samples) {
    tokens += x.tokens;
    t += target_s(std::max(1, x.nodes));
    c += draft_step_s(1);  // the pass over the root
    for (int w : x.pass_widths) c += draft_step_s(std::max(1, w));
  }
  const double k = static_cast<double>(samples.size());
  TreeChoice r;
  r.tokens = tokens / k;
  r.target_s = t / k;
  r.draft_s = c / k;
  return r;
}

int best_dynamic(const std::vector<DynamicCandidate>& cands, const std::function<double(int)>& target_s,
                 const std::function<double(int)>& draft_step_s, TreeChoice* choice) {
  int best = -1;
  double best_rate = 0;
  for (size_t i = 0; i < cands.size(); ++i) {
    if (cands[i].samples.empty()) continue;
    TreeChoice c = evaluate_dynamic(cands[i].samples, target_s, draft_step_s);
    c.budget = cands[i].params.budget;
    c.depth = cands[i].params.depth;
    if (best < 0 || c.tokens_per_second() > best_rate) {
      best = static_cast<int>(i);
      best_rate = c.tokens_per_second();
      if (choice) *choice = c;
    }
  }
  return best;
}

std::vector<DynamicCandidate> dynamic_grid(int max_budget, int max_depth, bool greedy) {
  if (max_budget < 2) return {};
  if (max_depth < 2) return {};
  std::vector<DynamicCandidate> out;
  SamplingParams sp;
  sp.temperature = greedy ? 0.0f : 1.0f;
  auto add = [&](const char* tree, int budget, std::optional<double> threshold, std::optional<double> delta,
                 std::optional<int> width) {
    spec::TreeOptions o;
    o.tree = tree;
    o.budget = budget;
    o.depth = max_depth;
    o.threshold = threshold;
    o.delta = delta;
    o.width = width;
    // The tree's default verifier for this sampling mode, with every check the CLI runs.
    const spec::SpecConfig c = spec::make_spec_config(o, sp);
    DynamicCandidate d;
    d.params = c.tree;
    d.verifier = c.verifier;
    out.push_back(std::move(d));
  };
  std::vector<int> heap_budgets;
  for (int p = 4; p <= max_budget; p *= 2) {
    heap_budgets.push_back(p);
    if (p + p / 2 <= max_budget) heap_budgets.push_back(p + p / 2);
  }
  if (heap_budgets.empty() || heap_budgets.back() != max_budget) heap_budgets.push_back(max_budget);
  for (int b : heap_budgets) add("dyspec", b, std::nullopt, std::nullopt, std::nullopt);
  for (double t : {0.5, 0.3, 0.2, 0.1, 0.05, 0.02}) add("dyspec", max_budget, t, std::nullopt, std::nullopt);
  std::vector<int> topn_budgets;
  for (int p = 8; p <= max_budget; p *= 2) topn_budgets.push_back(p);
  if (topn_budgets.empty() || topn_budgets.back() != max_budget) topn_budgets.push_back(max_budget);
  for (double delta : {0.1, 0.3, 1.0})
    for (int b : topn_budgets) add("opt-tree", b, std::nullopt, delta, std::nullopt);
  for (int w : {2, 4, 8})
    for (int b : topn_budgets) add("specexec", b, std::nullopt, std::nullopt, w);
  return out;
}

std::string describe_tree(const spec::TreeParams& p) {
  std::ostringstream o;
  o << spec::tree_kind_name(p.kind);
  if (p.kind == spec::TreeKind::kDySpec && p.threshold > 0) o << " threshold " << p.threshold;
  o << " budget " << p.budget << " depth " << p.depth;
  if (p.kind == spec::TreeKind::kOptTree) o << " delta " << p.delta;
  if (p.kind == spec::TreeKind::kSpecExec) o << " width " << p.width;
  return o.str();
}

}  // namespace redwood::planner
