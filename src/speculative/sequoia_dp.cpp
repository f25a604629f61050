// Sequoia tree construction (Sequoia §3.1, App. C.2) and tree files.
//
// F(T) = sum over nodes of the product of p_rank along the path (root = 1).
// Both DPs compute, for every size m, the best F of a tree with EXACTLY m nodes
// and return the best over m <= n (smallest m on ties).
//
// Unbounded depth: c_L(m) = best F with m nodes and L root children,
//   c_0(1) = 1, c_1(m) = 1 + p_1 c(m-1),
//   c_L(m) = max_s c_{L-1}(m - s) + p_L c(s)   (s = size of the L-th subtree),
//   c(m) = max_L c_L(m).
// Depth-bounded (Algorithm 5): T[m][l][b] with l = levels (root included),
//   T[1][l][0] = 1 and -inf for every infeasible entry,
//   T[m][l][1] = 1 + p_1 G[m-1][l-1],
//   T[m][l][b] = max_s T[m-s][l][b-1] + p_b G[s][l-1],   G[m][l] = max_b T[m][l][b].
// Infeasible entries are never read: s is limited to the range where both
// operands are feasible (at most cap(l-1) = 1 + K + ... + K^(l-2) nodes fit
// below a child), so the loops need no -inf arithmetic (0 * -inf would be NaN).
//
// Speed: the last child's subtree size s is limited to s <= (m-1)/b. This loses
// nothing: p is non-increasing (validated) and G / c are non-decreasing in the
// size (a leaf can always be added to a non-full tree), so by the rearrangement
// inequality some optimum has subtree sizes non-increasing in rank, whose last
// (smallest) one is <= (m-1)/b. The work drops from ~M^2 L K / 2 to
// ~M^2 L ln(K) / 2 multiply-adds (n = 1024, d = 32, K = 32: ~50 M).
#include "src/speculative/sequoia_dp.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "src/util/error.h"
#include "src/util/output_path.h"
#include "src/util/io.h"

namespace redwood::spec {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();
constexpr int kMaxNodes = 16384;                 // DP budget limit
constexpr int kMaxWidth = 4096;                  // acceptance vector length limit
constexpr int64_t kMaxBoundedEntries = 1 << 25;  // argmax table entries (int32)
constexpr size_t kMaxFileNodes = 1 << 20;

std::string fmt_double(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

void validate_acceptance(const std::vector<double>& a) {
  if (a.empty()) throw Error("acceptance vector is empty");
  if (a.size() > static_cast<size_t>(kMaxWidth))
    throw Error("acceptance vector has " + std::to_string(a.size()) + " entries (max " + std::to_string(kMaxWidth) +
                ")");
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || a[i] < 0 || a[i] > 1)
      throw Error("acceptance p_" + std::to_string(i + 1) + " = " + fmt_double(a[i]) + " is not in [0, 1]");
    if (i > 0 && a[i] > a[i - 1] + 1e-12)
      throw Error("acceptance vector must be non-increasing (p_" + std::to_string(i + 1) + " > p_" + std::to_string(i) +
                  ")");
    sum += a[i];
  }
  if (sum > 1 + 1e-9) throw Error("acceptance vector sums to " + fmt_double(sum) + " > 1");
}

void validate_budget(int n) {
  if (n < 1) throw Error("tree budget must be >= 1 node (the root), got " + std::to_string(n));
  if (n > kMaxNodes) throw Error("tree budget " + std::to_string(n) + " exceeds " + std::to_string(kMaxNodes));
}

// Flattens a tree given by a "children sizes" oracle into depth-first pre-order.
// Each task: a subtree of `m` nodes at DP level `l`, attached under `parent`.
struct Task {
  int m, l;
  int32_t parent, depth, rank;
};

template <typename ChildSizes>
StaticTree flatten(int m_root, int l_root, ChildSizes&& child_sizes) {
  StaticTree t;
  t.parent.reserve(static_cast<size_t>(m_root));
  t.depth.reserve(static_cast<size_t>(m_root));
  t.rank.reserve(static_cast<size_t>(m_root));
  std::vector<Task> stack{{m_root, l_root, -1, 0, 0}};
  std::vector<int> sizes;
  while (!stack.empty()) {
    const Task k = stack.back();
    stack.pop_back();
    const int32_t id = static_cast<int32_t>(t.parent.size());
    t.parent.push_back(k.parent);
    t.depth.push_back(k.depth);
    t.rank.push_back(k.rank);
    sizes.clear();
    child_sizes(k.m, k.l, sizes);  // sizes[j] = subtree size of child rank j
    for (int j = static_cast<int>(sizes.size()) - 1; j >= 0; --j)
      stack.push_back({sizes[static_cast<size_t>(j)], k.l - 1, id, k.depth + 1, j});
  }
  return t;
}

StaticTree unbounded_tree(const std::vector<double>& p, int n) {
  const int K = std::min(static_cast<int>(p.size()), n - 1);
  const size_t W = static_cast<size_t>(n) + 1;
  std::vector<double> c(W, kNegInf);
  std::vector<int32_t> best_l(W, 0);
  std::vector<double> cl(static_cast<size_t>(K + 1) * W, kNegInf);
  std::vector<int32_t> arg(static_cast<size_t>(K + 1) * W, 0);  // arg[L][m]: size of the L-th subtree
  auto at = [&](int L, int m) { return static_cast<size_t>(L) * W + static_cast<size_t>(m); };
  cl[at(0, 1)] = 1;
  c[1] = 1;
  for (int m = 2; m <= n; ++m) {
    cl[at(1, m)] = 1 + p[0] * c[static_cast<size_t>(m - 1)];
    arg[at(1, m)] = m - 1;
    for (int L = 2; L <= std::min(K, m - 1); ++L) {
      const double* prev = &cl[at(L - 1, 0)];
      const double pl = p[static_cast<size_t>(L - 1)];
      double best = kNegInf;
      int bs = 0;
      const int s_hi = (m - 1) / L;
      for (int s = 1; s <= s_hi; ++s) {
        const double v = prev[m - s] + pl * c[static_cast<size_t>(s)];
        if (v > best) {
          best = v;
          bs = s;
        }
      }
      cl[at(L, m)] = best;
      arg[at(L, m)] = bs;
    }
    for (int L = 1; L <= std::min(K, m - 1); ++L) {
      if (cl[at(L, m)] > c[static_cast<size_t>(m)]) {
        c[static_cast<size_t>(m)] = cl[at(L, m)];
        best_l[static_cast<size_t>(m)] = L;
      }
    }
  }
  int m_best = 1;
  for (int m = 2; m <= n; ++m)
    if (c[static_cast<size_t>(m)] > c[static_cast<size_t>(m_best)]) m_best = m;
  StaticTree t = flatten(m_best, 0, [&](int m, int, std::vector<int>& sizes) {
    const int L = best_l[static_cast<size_t>(m)];
    sizes.assign(static_cast<size_t>(L), 0);
    int cur = m;
    for (int j = L; j >= 2; --j) {
      const int s = arg[at(j, cur)];
      sizes[static_cast<size_t>(j - 1)] = s;
      cur -= s;
    }
    if (L >= 1) sizes[0] = cur - 1;
  });
  t.expected_tokens = c[static_cast<size_t>(m_best)];
  return t;
}

StaticTree bounded_tree(const std::vector<double>& p, int n, int d) {
  d = std::min(d, n);
  const int K = std::max(1, std::min(static_cast<int>(p.size()), n - 1));
  const size_t W = static_cast<size_t>(n) + 1;
  const size_t KB = static_cast<size_t>(K) + 1;
  if (static_cast<int64_t>(d + 1) * static_cast<int64_t>(KB) * static_cast<int64_t>(W) > kMaxBoundedEntries)
    throw Error("tree budget " + std::to_string(n) + " with depth " + std::to_string(d) + " and width " +
                std::to_string(K) + " is too large for the depth-bounded DP");
  // cap[l]: most nodes a tree of l levels can hold (saturated at n).
  std::vector<int64_t> cap(static_cast<size_t>(d) + 1, 0);
  cap[1] = 1;
  for (int l = 2; l <= d; ++l)
    cap[static_cast<size_t>(l)] = std::min<int64_t>(n, 1 + K * cap[static_cast<size_t>(l - 1)]);

  std::vector<double> g_prev(W, kNegInf), g_cur(W, kNegInf);
  std::vector<double> T(KB * W, kNegInf);  // current level: T[b][m]
  std::vector<int32_t> arg_s((static_cast<size_t>(d) + 1) * KB * W, 0);
  std::vector<int32_t> best_b((static_cast<size_t>(d) + 1) * W, 0);
  auto A = [&](int l, int b, int m) -> int32_t& {
    return arg_s[(static_cast<size_t>(l) * KB + static_cast<size_t>(b)) * W + static_cast<size_t>(m)];
  };
  auto B = [&](int l, int m) -> int32_t& { return best_b[static_cast<size_t>(l) * W + static_cast<size_t>(m)]; };
  g_prev[1] = 1;  // level 1: only the root
  for (int l = 2; l <= d; ++l) {
    const int64_t cp = cap[static_cast<size_t>(l - 1)];
    std::fill(T.begin(), T.end(), kNegInf);
    T[1] = 1;  // T[0][1]
    for (int m = 2; m <= n; ++m)
      if (m - 1 <= cp) {
        T[W + static_cast<size_t>(m)] = 1 + p[0] * g_prev[static_cast<size_t>(m - 1)];
        A(l, 1, m) = m - 1;
      }
    for (int b = 2; b <= K; ++b) {
      const double* tb = &T[static_cast<size_t>(b - 1) * W];
      double* out = &T[static_cast<size_t>(b) * W];
      const double pb = p[static_cast<size_t>(b - 1)];
      const double* g = g_prev.data();
      for (int m = b + 1; m <= n; ++m) {
        const int s_hi = static_cast<int>(std::min<int64_t>(cp, (m - 1) / b));
        const int s_lo = static_cast<int>(std::max<int64_t>(1, (m - 1) - (b - 1) * cp));
        if (s_lo > s_hi) continue;
        double best = kNegInf;
        int bs = 0;
        for (int s = s_lo; s <= s_hi; ++s) {
          const double v = tb[m - s] + pb * g[s];
          if (v > best) {
            best = v;
            bs = s;
          }
        }
        out[m] = best;
        A(l, b, m) = bs;
      }
    }
    std::fill(g_cur.begin(), g_cur.end(), kNegInf);
    for (int m = 1; m <= n; ++m) {
      for (int b = 0; b <= K; ++b) {
        const double v = T[static_cast<size_t>(b) * W + static_cast<size_t>(m)];
        if (v > g_cur[static_cast<size_t>(m)]) {
          g_cur[static_cast<size_t>(m)] = v;
          B(l, m) = b;
        }
      }
    }
    std::swap(g_prev, g_cur);
  }
  int m_best = 1;
  for (int m = 2; m <= n; ++m)
    if (g_prev[static_cast<size_t>(m)] > g_prev[static_cast<size_t>(m_best)]) m_best = m;
  StaticTree t = flatten(m_best, d, [&](int m, int l, std::vector<int>& sizes) {
    if (l <= 1) return;  // level 1: the node alone
    const int b = B(l, m);
    sizes.assign(static_cast<size_t>(b), 0);
    int cur = m;
    for (int j = b; j >= 2; --j) {
      const int s = A(l, j, cur);
      sizes[static_cast<size_t>(j - 1)] = s;
      cur -= s;
    }
    if (b >= 1) sizes[0] = cur - 1;
  });
  t.expected_tokens = g_prev[static_cast<size_t>(m_best)];
  return t;
}

// Algorithm 5's values only (no argmax tables): G[l][m] for all l <= d, m <= n.
std::vector<std::vector<double>> bounded_values(const std::vector<double>& p, int n, int d) {
  const int K = std::max(1, std::min(static_cast<int>(p.size()), n - 1));
  const size_t W = static_cast<size_t>(n) + 1;
  const size_t KB = static_cast<size_t>(K) + 1;
  std::vector<int64_t> cap(static_cast<size_t>(d) + 1, 0);
  cap[1] = 1;
  for (int l = 2; l <= d; ++l)
    cap[static_cast<size_t>(l)] = std::min<int64_t>(n, 1 + K * cap[static_cast<size_t>(l - 1)]);
  std::vector<std::vector<double>> G(static_cast<size_t>(d) + 1, std::vector<double>(W, kNegInf));
  G[1][1] = 1;
  std::vector<double> T(KB * W, kNegInf);
  for (int l = 2; l <= d; ++l) {
    const int64_t cp = cap[static_cast<size_t>(l - 1)];
    const std::vector<double>& g = G[static_cast<size_t>(l - 1)];
    std::fill(T.begin(), T.end(), kNegInf);
    T[1] = 1;
    for (int m = 2; m <= n; ++m)
      if (m - 1 <= cp) T[W + static_cast<size_t>(m)] = 1 + p[0] * g[static_cast<size_t>(m - 1)];
    for (int b = 2; b <= K; ++b) {
      const double* tb = &T[static_cast<size_t>(b - 1) * W];
      double* out = &T[static_cast<size_t>(b) * W];
      const double pb = p[static_cast<size_t>(b - 1)];
      for (int m = b + 1; m <= n; ++m) {
        const int s_hi = static_cast<int>(std::min<int64_t>(cp, (m - 1) / b));
        const int s_lo = static_cast<int>(std::max<int64_t>(1, (m - 1) - (b - 1) * cp));
        double best = kNegInf;
        for (int s = s_lo; s <= s_hi; ++s) best = std::max(best, tb[m - s] + pb * g[static_cast<size_t>(s)]);
        out[m] = best;
      }
    }
    std::vector<double>& gl = G[static_cast<size_t>(l)];
    for (int m = 1; m <= n; ++m)
      for (int b = 0; b <= K; ++b)
        gl[static_cast<size_t>(m)] =
            std::max(gl[static_cast<size_t>(m)], T[static_cast<size_t>(b) * W + static_cast<size_t>(m)]);
  }
  return G;
}

// Structure check shared by expected_tokens, the writer and the reader.
void validate_tree(const StaticTree& t) {
  const size_t n = t.parent.size();
  if (n == 0) throw Error("tree has no nodes");
  if (t.depth.size() != n || t.rank.size() != n) throw Error("tree arrays parent/depth/rank differ in length");
  if (t.parent[0] != -1 || t.depth[0] != 0 || t.rank[0] != 0)
    throw Error("tree node 0 must be the root (parent -1, depth 0, rank 0)");
  std::vector<int32_t> nchild(n, 0), path{0};
  for (size_t i = 1; i < n; ++i) {
    const int32_t par = t.parent[i];
    if (par < 0 || static_cast<size_t>(par) >= i)
      throw Error("tree node " + std::to_string(i) + " has parent " + std::to_string(par) +
                  " (parents must precede children; only node 0 is a root)");
    while (!path.empty() && path.back() != par) path.pop_back();
    if (path.empty()) throw Error("tree nodes are not in depth-first order (node " + std::to_string(i) + ")");
    path.push_back(static_cast<int32_t>(i));
    if (t.depth[i] != t.depth[static_cast<size_t>(par)] + 1)
      throw Error("tree node " + std::to_string(i) + " has depth " + std::to_string(t.depth[i]) + ", its parent " +
                  std::to_string(t.depth[static_cast<size_t>(par)]));
    if (t.rank[i] != nchild[static_cast<size_t>(par)])
      throw Error("tree node " + std::to_string(i) + " has rank " + std::to_string(t.rank[i]) + ", expected " +
                  std::to_string(nchild[static_cast<size_t>(par)]) + " (child order = sampling order)");
    ++nchild[static_cast<size_t>(par)];
  }
}

StaticTree from_parents(const std::vector<int32_t>& parent) {
  StaticTree t;
  t.parent = parent;
  const size_t n = parent.size();
  t.depth.assign(n, 0);
  t.rank.assign(n, 0);
  std::vector<int32_t> nchild(n, 0);
  for (size_t i = 1; i < n; ++i) {
    const int32_t par = parent[i];
    if (par < 0 || static_cast<size_t>(par) >= i)
      throw Error("node " + std::to_string(i) + " has parent " + std::to_string(par) +
                  " (parents must precede children; only node 0 is a root)");
    t.depth[i] = t.depth[static_cast<size_t>(par)] + 1;
    t.rank[i] = nchild[static_cast<size_t>(par)]++;
  }
  return t;
}

}  // namespace

std::vector<std::vector<double>> sequoia_value_table(const std::vector<double>& acceptance, int max_n, int max_depth) {
  validate_acceptance(acceptance);
  validate_budget(max_n);
  if (max_depth < 1 || max_depth > max_n)
    throw Error("tree depth must be in [1, " + std::to_string(max_n) + "], got " + std::to_string(max_depth));
  const int64_t K = std::max<int64_t>(1, std::min<int64_t>(static_cast<int64_t>(acceptance.size()), max_n - 1));
  if ((K + 1) * (static_cast<int64_t>(max_n) + 1) > kMaxBoundedEntries)
    throw Error("tree budget " + std::to_string(max_n) + " with width " + std::to_string(K) +
                " is too large for the value table");
  const std::vector<std::vector<double>> g = bounded_values(acceptance, max_n, max_depth);
  std::vector<std::vector<double>> table(static_cast<size_t>(max_depth) + 1,
                                         std::vector<double>(static_cast<size_t>(max_n) + 1, 0.0));
  for (size_t d = 1; d < table.size(); ++d) {
    double best = 0;  // best over exactly m nodes, m <= n
    for (size_t n = 1; n < table[d].size(); ++n) table[d][n] = best = std::max(best, g[d][n]);
  }
  return table;
}

std::vector<double> read_acceptance_file(const std::string& path) {
  nlohmann::json j = nlohmann::json::parse(read_text_file(path, "the acceptance file"), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("acceptance") || !j["acceptance"].is_array())
    throw Error(path + ": expected a JSON object with an \"acceptance\" array");
  std::vector<double> acc;
  for (const auto& v : j["acceptance"]) {
    if (!v.is_number()) throw Error(path + ": acceptance values must be numbers");
    acc.push_back(v.get<double>());
  }
  try {
    validate_acceptance(acc);
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
  return acc;
}

int StaticTree::max_depth() const {
  if (depth.empty()) return 0;
  return 1 + *std::max_element(depth.begin(), depth.end());
}

StaticTree sequoia_tree(const std::vector<double>& acceptance, int n, int max_depth) {
  validate_acceptance(acceptance);
  validate_budget(n);
  StaticTree t = unbounded_tree(acceptance, n);
  if (max_depth <= 0 || t.max_depth() <= max_depth) return t;
  return bounded_tree(acceptance, n, max_depth);
}

namespace detail {
StaticTree sequoia_tree_bounded(const std::vector<double>& acceptance, int n, int max_depth) {
  validate_acceptance(acceptance);
  validate_budget(n);
  if (max_depth < 1) throw Error("tree depth must be >= 1, got " + std::to_string(max_depth));
  return bounded_tree(acceptance, n, max_depth);
}
}  // namespace detail

double expected_tokens(const StaticTree& t, const std::vector<double>& acceptance) {
  validate_acceptance(acceptance);
  validate_tree(t);
  const size_t n = t.parent.size();
  std::vector<double> f(n, 1.0);
  double sum = 1.0;
  for (size_t i = 1; i < n; ++i) {
    const size_t r = static_cast<size_t>(t.rank[i]);
    f[i] = f[static_cast<size_t>(t.parent[i])] * (r < acceptance.size() ? acceptance[r] : 0.0);
    sum += f[i];
  }
  return sum;
}

// Default acceptance vector: p_k = c / k^2, sum_k p_k = 0.9.
//  - Exponent 2: Sequoia (§3.1, Fig. 3) observes that the probability r_k of
//    rejecting all k children follows a power law r_k ~ 1/k^b'. Since
//    p_k = r_{k-1} - r_k, that makes p_k ~ k^-(b'+1); b' ~ 1 gives exponent 2.
//    With exponent 1 the normaliser diverges (harmonic), so p_1 would shrink as
//    the width grows (mass 0.8: width 8 p_1 = 0.29, width 16 p_1 = 0.24), which
//    is not how a draft behaves; with exponent 2 p_1 hardly depends on the
//    width (0.59 at width 8, 0.57 at 16): a typical top-1 acceptance of a
//    small draft model.
//  - Mass 0.9 calibrates against the paper's Table 4 (A100, Llama2-7B target,
//    JF68M draft, C4): width 8 gives F = 4.08 tokens/step for the (n, d) =
//    (128, 7) tree vs 3.92 measured at T = 0.6, and F = 4.13 for (128, 10) vs
//    5.08 measured at T = 0 (greedy drafts are better than any fixed default).
//    Mass 0.8 would give 3.30 / 3.31; exponent 1 with mass 0.8 gives 2.72.
//  Measure the real vector per (model pair, temperature) whenever possible.
std::vector<double> default_acceptance(int width) {
  if (width < 1 || width > kMaxWidth)
    throw Error("acceptance width must be in [1, " + std::to_string(kMaxWidth) + "], got " + std::to_string(width));
  constexpr double kExponent = 2.0, kMass = 0.9;
  std::vector<double> p(static_cast<size_t>(width));
  double z = 0;
  for (int k = 1; k <= width; ++k) z += p[static_cast<size_t>(k - 1)] = std::pow(static_cast<double>(k), -kExponent);
  for (auto& x : p) x *= kMass / z;
  return p;
}

// ---- tree files ---------------------------------------------------------------

StaticTree read_tree_file(const std::string& path) {
  return read_tree_file(path, nullptr);
}

StaticTree read_tree_file(const std::string& path, std::vector<double>* acceptance) {
  const std::string where = "tree file '" + path + "': ";
  const std::string text = read_text_file(path, "the tree file");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    std::string msg = e.what();
    if (auto nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
    throw Error(where + "invalid JSON (" + msg + ")");
  }
  auto fail = [&](const std::string& msg) -> void { throw Error(where + msg); };
  auto get_int = [&](const nlohmann::json& v, const std::string& what) -> int64_t {
    if (!v.is_number_integer()) fail(what + " must be an integer");
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT32_MAX)) fail(what + " is out of range");
      return static_cast<int64_t>(u);
    }
    const int64_t s = v.get<int64_t>();
    if (s < INT32_MIN || s > INT32_MAX) fail(what + " is out of range");
    return s;
  };
  if (!j.is_object()) fail("expected a JSON object");
  if (!j.contains("parent")) fail("missing \"parent\"");
  const auto& jp = j["parent"];
  if (!jp.is_array() || jp.empty()) fail("\"parent\" must be a non-empty array");
  if (jp.size() > kMaxFileNodes) fail("too many nodes (" + std::to_string(jp.size()) + ")");
  std::vector<int32_t> parent(jp.size());
  for (size_t i = 0; i < jp.size(); ++i)
    parent[i] = static_cast<int32_t>(get_int(jp[i], "parent[" + std::to_string(i) + "]"));
  if (parent[0] != -1) fail("node 0 must be the root (parent -1)");
  StaticTree t;
  try {
    t = from_parents(parent);
    validate_tree(t);
  } catch (const Error& e) {
    throw Error(where + e.what());
  }
  if (j.contains("rank")) {
    const auto& jr = j["rank"];
    if (!jr.is_array() || jr.size() != parent.size()) fail("\"rank\" must be an array as long as \"parent\"");
    for (size_t i = 0; i < jr.size(); ++i)
      if (get_int(jr[i], "rank[" + std::to_string(i) + "]") != t.rank[i])
        fail("rank[" + std::to_string(i) + "] disagrees with the child order (" + std::to_string(t.rank[i]) + ")");
  }
  if (j.contains("depth")) {
    const int64_t d = get_int(j["depth"], "\"depth\"");
    if (d < t.max_depth())
      fail("\"depth\" " + std::to_string(d) + " is less than the tree's depth " + std::to_string(t.max_depth()));
  }
  if (j.contains("budget")) {
    const int64_t b = get_int(j["budget"], "\"budget\"");
    if (b < t.size())
      fail("\"budget\" " + std::to_string(b) + " is less than the node count " + std::to_string(t.size()));
  }
  std::vector<double> acc;
  if (j.contains("acceptance")) {
    const auto& ja = j["acceptance"];
    if (!ja.is_array()) fail("\"acceptance\" must be an array of numbers");
    for (const auto& v : ja) {
      if (!v.is_number()) fail("\"acceptance\" must be an array of numbers");
      acc.push_back(v.get<double>());
    }
    try {
      t.expected_tokens = expected_tokens(t, acc);
    } catch (const Error& e) {
      throw Error(where + e.what());
    }
  } else if (j.contains("expected_tokens")) {
    if (!j["expected_tokens"].is_number()) fail("\"expected_tokens\" must be a number");
    t.expected_tokens = j["expected_tokens"].get<double>();
  }
  if (acceptance) *acceptance = std::move(acc);
  return t;
}

void write_tree_file(const std::string& path, const StaticTree& t, const std::vector<double>& acceptance) {
  validate_tree(t);
  const double f = acceptance.empty() ? t.expected_tokens : expected_tokens(t, acceptance);
  // One key per line, arrays compact.
  std::string s = "{\n";
  s += "  \"format\": \"redwood-sequoia-tree\",\n";
  s += "  \"budget\": " + std::to_string(t.size()) + ",\n";
  s += "  \"depth\": " + std::to_string(t.max_depth()) + ",\n";
  s += "  \"expected_tokens\": " + nlohmann::json(f).dump() + ",\n";
  if (!acceptance.empty()) s += "  \"acceptance\": " + nlohmann::json(acceptance).dump() + ",\n";
  s += "  \"rank\": " + nlohmann::json(t.rank).dump() + ",\n";
  s += "  \"parent\": " + nlohmann::json(t.parent).dump() + "\n}\n";
  write_output_file(path, s);  // the output-path policy: temp file + rename
}

}  // namespace redwood::spec
