// Sequoia tree DP: brute force over all ordered trees (n <= 8), a direct
// transcription of Algorithm 5 (no pruning), unbounded vs bounded, -inf
// handling, timing at the paper's scale, tree files.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "src/speculative/sequoia_dp.h"
#include "src/util/error.h"

namespace redwood::spec {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// ---- brute force ----------------------------------------------------------------

struct Shape {
  std::vector<Shape> kids;
};

// All ordered rooted trees with exactly m nodes (memoised).
const std::vector<Shape>& trees_of_size(int m);

// All ordered forests with exactly k nodes.
std::vector<std::vector<Shape>> forests(int k) {
  if (k == 0) return {{}};
  std::vector<std::vector<Shape>> out;
  for (int a = 1; a <= k; ++a)
    for (const Shape& first : trees_of_size(a))
      for (auto& rest : forests(k - a)) {
        std::vector<Shape> f{first};
        f.insert(f.end(), rest.begin(), rest.end());
        out.push_back(std::move(f));
      }
  return out;
}

const std::vector<Shape>& trees_of_size(int m) {
  static std::map<int, std::vector<Shape>> memo;
  auto it = memo.find(m);
  if (it != memo.end()) return it->second;
  std::vector<Shape> out;
  for (auto& f : forests(m - 1)) out.push_back(Shape{std::move(f)});
  return memo[m] = std::move(out);
}

void flatten(const Shape& s, int32_t parent, int32_t depth, int32_t rank, StaticTree& t) {
  const int32_t id = t.size();
  t.parent.push_back(parent);
  t.depth.push_back(depth);
  t.rank.push_back(rank);
  for (size_t j = 0; j < s.kids.size(); ++j) flatten(s.kids[j], id, depth + 1, static_cast<int32_t>(j), t);
}

int max_branching(const StaticTree& t) {
  int b = 0;
  for (int32_t r : t.rank) b = std::max(b, r + 1);
  return t.size() > 1 ? b : 0;
}

// Best F over all trees with <= n nodes, <= d levels (d <= 0: unbounded), branching <= K.
double brute_force(const std::vector<double>& acc, int n, int d) {
  double best = kNegInf;
  for (int m = 1; m <= n; ++m)
    for (const Shape& s : trees_of_size(m)) {
      StaticTree t;
      flatten(s, -1, 0, 0, t);
      if (d > 0 && t.max_depth() > d) continue;
      if (max_branching(t) > static_cast<int>(acc.size())) continue;
      best = std::max(best, expected_tokens(t, acc));
    }
  return best;
}

void expect_valid(const StaticTree& t, const std::vector<double>& acc, int n, int d) {
  ASSERT_GE(t.size(), 1);
  EXPECT_LE(t.size(), n);
  if (d > 0) {
    EXPECT_LE(t.max_depth(), d);
  }
  EXPECT_LE(max_branching(t), static_cast<int>(acc.size()));
  EXPECT_NEAR(expected_tokens(t, acc), t.expected_tokens, 1e-12 * t.expected_tokens);  // also validates
}

const std::vector<std::vector<double>> kAcceptances = {
    {0.6, 0.2, 0.1}, {0.9}, {0.5, 0.3, 0.15, 0.05}, {0.3, 0.3, 0.3}, {0.7, 0.1, 0.0}, {0.45, 0.25},
};

TEST(SequoiaDp, MatchesBruteForce) {
  for (const auto& acc : kAcceptances)
    for (int n = 1; n <= 8; ++n)
      for (int d = 0; d <= n; ++d) {
        SCOPED_TRACE("n=" + std::to_string(n) + " d=" + std::to_string(d) + " K=" + std::to_string(acc.size()));
        const double want = brute_force(acc, n, d);
        const StaticTree t = sequoia_tree(acc, n, d);
        expect_valid(t, acc, n, d);
        EXPECT_NEAR(t.expected_tokens, want, 1e-12);
        if (d >= 1) {
          const StaticTree b = detail::sequoia_tree_bounded(acc, n, d);
          expect_valid(b, acc, n, d);
          EXPECT_NEAR(b.expected_tokens, want, 1e-12);
        }
      }
}

// Algorithm 5 written out literally: every entry, every split, -inf
// initialisation and explicit -inf guards; returns max over m <= n of G[m][d].
double algorithm5_reference(const std::vector<double>& p, int n, int d) {
  const int K = static_cast<int>(p.size());
  // T[m][l][b], m = 1..n, l = 1..d, b = 0..K
  std::vector<double> T(static_cast<size_t>((n + 1) * (d + 1) * (K + 1)), kNegInf);
  auto at = [&](int m, int l, int b) -> double& { return T[static_cast<size_t>((m * (d + 1) + l) * (K + 1) + b)]; };
  auto G = [&](int m, int l) {
    double g = kNegInf;
    for (int j = 0; j <= K; ++j) g = std::max(g, at(m, l, j));
    return g;
  };
  for (int l = 1; l <= d; ++l) at(1, l, 0) = 1;
  for (int m = 2; m <= n; ++m)
    for (int l = 2; l <= d; ++l) {
      const double g1 = G(m - 1, l - 1);
      if (g1 > kNegInf) at(m, l, 1) = 1 + p[0] * g1;
      for (int b = 2; b <= K; ++b) {
        double best = kNegInf;
        for (int y = 1; y <= m - 1; ++y) {
          const double a = at(y, l, b - 1), g = G(m - y, l - 1);
          if (a == kNegInf || g == kNegInf) continue;
          best = std::max(best, a + p[static_cast<size_t>(b - 1)] * g);
        }
        at(m, l, b) = best;
      }
    }
  double best = kNegInf;
  for (int m = 1; m <= n; ++m) best = std::max(best, G(m, d));
  return best;
}

TEST(SequoiaDp, MatchesLiteralAlgorithm5) {
  const std::vector<std::vector<double>> accs = {
      {0.6, 0.2, 0.1}, {0.5, 0.2, 0.1, 0.05, 0.04}, {0.3, 0.3, 0.3}, {0.8, 0.05}, default_acceptance(6)};
  for (const auto& acc : accs)
    for (int n : {9, 17, 33, 48})
      for (int d : {2, 3, 4, 6, 9}) {
        SCOPED_TRACE("n=" + std::to_string(n) + " d=" + std::to_string(d));
        const double want = algorithm5_reference(acc, n, d);
        const StaticTree b = detail::sequoia_tree_bounded(acc, n, d);
        expect_valid(b, acc, n, d);
        EXPECT_NEAR(b.expected_tokens, want, 1e-12 * want);
        EXPECT_NEAR(sequoia_tree(acc, n, d).expected_tokens, want, 1e-12 * want);
      }
}

TEST(SequoiaDp, BoundedEqualsUnboundedWhenDepthIsNoLimit) {
  for (const auto& acc : kAcceptances)
    for (int n : {1, 2, 5, 13, 40, 64}) {
      const StaticTree u = sequoia_tree(acc, n, 0);
      const StaticTree b = detail::sequoia_tree_bounded(acc, n, n);
      const StaticTree b2 = detail::sequoia_tree_bounded(acc, n, n + 7);  // clamped
      EXPECT_NEAR(u.expected_tokens, b.expected_tokens, 1e-12 * u.expected_tokens);
      EXPECT_NEAR(u.expected_tokens, b2.expected_tokens, 1e-12 * u.expected_tokens);
      expect_valid(u, acc, n, 0);
      expect_valid(b, acc, n, n);
    }
}

TEST(SequoiaDp, InfeasibleEntriesAndEdgeCases) {
  const std::vector<double> acc = {0.6, 0.2, 0.1};
  // Depth 1: only the root, whatever the budget.
  for (int n : {1, 2, 50}) {
    const StaticTree t = sequoia_tree(acc, n, 1);
    EXPECT_EQ(t.size(), 1);
    EXPECT_EQ(t.max_depth(), 1);
    EXPECT_DOUBLE_EQ(t.expected_tokens, 1.0);
    EXPECT_EQ(detail::sequoia_tree_bounded(acc, n, 1).size(), 1);
  }
  // Depth 2: a star with min(K, n - 1) children.
  const StaticTree star = sequoia_tree(acc, 50, 2);
  EXPECT_EQ(star.size(), 4);
  EXPECT_NEAR(star.expected_tokens, 1.9, 1e-15);
  EXPECT_EQ(sequoia_tree(acc, 3, 2).size(), 3);
  // Budget beyond what depth x width allows: the full tree (1 + 3 + 9 nodes).
  const StaticTree full = detail::sequoia_tree_bounded(acc, 100, 3);
  EXPECT_EQ(full.size(), 13);
  EXPECT_NEAR(full.expected_tokens, 1 + 0.9 + 0.9 * 0.9, 1e-14);
  // K = 1: chains.
  const StaticTree chain = sequoia_tree({0.9}, 10, 4);
  EXPECT_EQ(chain.size(), 4);
  EXPECT_NEAR(chain.expected_tokens, 1 + 0.9 + 0.81 + 0.729, 1e-14);
  EXPECT_EQ(sequoia_tree({0.9}, 10, 0).size(), 10);
  // Zero acceptance beyond rank 0: no rank-1 children, smallest optimal tree.
  const StaticTree z = sequoia_tree({0.7, 0.0}, 20, 5);
  EXPECT_EQ(z.size(), 5);
  EXPECT_EQ(max_branching(z), 1);
  // n = 1: the root.
  EXPECT_EQ(sequoia_tree(acc, 1, 0).size(), 1);
}

TEST(SequoiaDp, StructureDepthFirstAndRanksInSamplingOrder) {
  const std::vector<double> acc = default_acceptance(8);
  const StaticTree t = sequoia_tree(acc, 128, 10);
  expect_valid(t, acc, 128, 10);
  // Depth-first pre-order: every subtree is a contiguous range; the first
  // child's subtree is the biggest (p non-increasing).
  std::vector<int> subtree(static_cast<size_t>(t.size()), 1);
  for (int i = t.size() - 1; i >= 1; --i) subtree[static_cast<size_t>(t.parent[i])] += subtree[static_cast<size_t>(i)];
  for (int u = 0; u < t.size(); ++u) {
    int next = u + 1, prev_size = std::numeric_limits<int>::max(), r = 0;
    while (next < u + subtree[static_cast<size_t>(u)]) {
      ASSERT_EQ(t.parent[next], u);
      ASSERT_EQ(t.rank[next], r++);
      EXPECT_LE(subtree[static_cast<size_t>(next)], prev_size);
      prev_size = subtree[static_cast<size_t>(next)];
      next += subtree[static_cast<size_t>(next)];
    }
  }
}

// Paper-scale trees (n = 1024, d = 32): the bounded and unbounded DPs agree; the
// times are printed for the record, never asserted (tests time nothing).
TEST(SequoiaDp, PaperScaleTreesAgree) {
  struct Case {
    const char* name;
    std::vector<double> acc;
  };
  std::vector<double> steep = {0.92};  // deep unbounded optimum: forces Algorithm 5
  for (int k = 2; k <= 32; ++k) steep.push_back(0.06 / 31);
  const std::vector<Case> cases = {{"default_acceptance(32)", default_acceptance(32)}, {"p1=0.92 K=32", steep}};
  for (const auto& c : cases) {
    using clk = std::chrono::steady_clock;
    auto t0 = clk::now();
    const StaticTree b = detail::sequoia_tree_bounded(c.acc, 1024, 32);
    auto t1 = clk::now();
    const StaticTree s = sequoia_tree(c.acc, 1024, 32);
    auto t2 = clk::now();
    const StaticTree u = sequoia_tree(c.acc, 1024, 0);
    auto t3 = clk::now();
    auto ms = [](auto a, auto z) { return std::chrono::duration<double, std::milli>(z - a).count(); };
    std::printf("[ timing ] %s n=1024: Algorithm 5 d=32 %.1f ms (F=%.4f, %d nodes, depth %d); sequoia_tree d=32 "
                "%.1f ms; unbounded %.1f ms (F=%.4f, depth %d)\n",
                c.name, ms(t0, t1), b.expected_tokens, b.size(), b.max_depth(), ms(t1, t2), ms(t2, t3),
                u.expected_tokens, u.max_depth());
    EXPECT_NEAR(s.expected_tokens, b.expected_tokens, 1e-12 * b.expected_tokens);
    EXPECT_LE(b.max_depth(), 32);
    EXPECT_GE(u.expected_tokens, b.expected_tokens - 1e-12);
  }
  // For the record: tokens/step of the default vector at the paper's A100 sizes.
  for (int w : {8, 16, 32})
    std::printf("[ default ] width %d: p1=%.3f  F(128,10)=%.3f  F(64,6)=%.3f  F(768,22)=%.3f\n", w,
                default_acceptance(w)[0], sequoia_tree(default_acceptance(w), 128, 10).expected_tokens,
                sequoia_tree(default_acceptance(w), 64, 6).expected_tokens,
                sequoia_tree(default_acceptance(w), 768, 22).expected_tokens);
}

TEST(SequoiaDp, DefaultAcceptance) {
  for (int w : {1, 2, 8, 32}) {
    const auto p = default_acceptance(w);
    ASSERT_EQ(static_cast<int>(p.size()), w);
    double s = 0;
    for (size_t k = 0; k < p.size(); ++k) {
      s += p[k];
      if (k > 0) {
        EXPECT_NEAR(p[k] * double((k + 1) * (k + 1)), p[0], 1e-15);
      }
    }
    EXPECT_NEAR(s, 0.9, 1e-14);
  }
  EXPECT_THROW(default_acceptance(0), Error);
}

TEST(SequoiaDp, InvalidInput) {
  EXPECT_THROW(sequoia_tree({}, 10, 0), Error);
  EXPECT_THROW(sequoia_tree({0.5, 0.6}, 10, 0), Error);   // increasing
  EXPECT_THROW(sequoia_tree({0.7, 0.4}, 10, 0), Error);   // sum > 1
  EXPECT_THROW(sequoia_tree({-0.1}, 10, 0), Error);
  EXPECT_THROW(sequoia_tree({std::nan("")}, 10, 0), Error);
  EXPECT_THROW(sequoia_tree({1.5}, 10, 0), Error);
  EXPECT_THROW(sequoia_tree({0.5}, 0, 0), Error);
  EXPECT_THROW(sequoia_tree({0.5}, 1 << 20, 0), Error);
  EXPECT_THROW(detail::sequoia_tree_bounded({0.5}, 10, 0), Error);
  StaticTree bad;
  bad.parent = {-1, 0, 0};
  bad.depth = {0, 1, 1};
  bad.rank = {0, 0, 0};  // second child must have rank 1
  EXPECT_THROW(expected_tokens(bad, {0.5, 0.3}), Error);
  bad.rank = {0, 0, 1};
  EXPECT_NEAR(expected_tokens(bad, {0.5, 0.3}), 1.8, 1e-15);
  EXPECT_NEAR(expected_tokens(bad, {0.5}), 1.5, 1e-15);  // rank >= K contributes 0
}

// ---- tree files -----------------------------------------------------------------

class TreeFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("redwood_tree_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p) << text;
    return p;
  }
  std::filesystem::path dir_;
};

TEST_F(TreeFile, RoundTrip) {
  const auto acc = default_acceptance(6);
  const StaticTree t = sequoia_tree(acc, 200, 9);
  const std::string path = (dir_ / "t.json").string();
  write_tree_file(path, t, acc);
  std::vector<double> acc2;
  const StaticTree r = read_tree_file(path, &acc2);
  EXPECT_EQ(r.parent, t.parent);
  EXPECT_EQ(r.depth, t.depth);
  EXPECT_EQ(r.rank, t.rank);
  EXPECT_EQ(acc2, acc);  // exact: JSON doubles round-trip
  EXPECT_NEAR(r.expected_tokens, t.expected_tokens, 1e-12 * t.expected_tokens);
  // Without acceptance: the stored expected_tokens is used.
  write_tree_file(path, t, {});
  const StaticTree r2 = read_tree_file(path);
  EXPECT_EQ(r2.parent, t.parent);
  EXPECT_NEAR(r2.expected_tokens, t.expected_tokens, 1e-12 * t.expected_tokens);
  // A minimal hand-written file.
  const StaticTree m = read_tree_file(write("min.json", R"({"parent": [-1, 0, 1, 0]})"));
  EXPECT_EQ(m.depth, (std::vector<int32_t>{0, 1, 2, 1}));
  EXPECT_EQ(m.rank, (std::vector<int32_t>{0, 0, 0, 1}));
  EXPECT_EQ(m.max_depth(), 3);
}

TEST_F(TreeFile, MalformedFilesThrowNamingTheFile) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"not_json", "{\"parent\": [-1, 0"},
      {"not_object", "[-1, 0, 0]"},
      {"no_parent", R"({"budget": 3})"},
      {"parent_not_array", R"({"parent": 3})"},
      {"parent_empty", R"({"parent": []})"},
      {"parent_float", R"({"parent": [-1, 0.5]})"},
      {"parent_string", R"({"parent": [-1, "0"]})"},
      {"root_not_first", R"({"parent": [0, -1]})"},
      {"two_roots", R"({"parent": [-1, 0, -1]})"},
      {"forward_parent", R"({"parent": [-1, 2, 0]})"},
      {"self_parent", R"({"parent": [-1, 1]})"},
      {"huge_parent", R"({"parent": [-1, 99999999999]})"},
      {"not_depth_first", R"({"parent": [-1, 0, 0, 1]})"},
      {"rank_mismatch", R"({"parent": [-1, 0, 0], "rank": [0, 0, 0]})"},
      {"rank_short", R"({"parent": [-1, 0, 0], "rank": [0, 0]})"},
      {"depth_too_small", R"({"parent": [-1, 0, 1], "depth": 2})"},
      {"budget_too_small", R"({"parent": [-1, 0, 0], "budget": 2})"},
      {"acceptance_increasing", R"({"parent": [-1, 0], "acceptance": [0.2, 0.5]})"},
      {"acceptance_not_numbers", R"({"parent": [-1, 0], "acceptance": ["x"]})"},
      {"acceptance_sum", R"({"parent": [-1, 0], "acceptance": [0.9, 0.9]})"},
      {"expected_not_number", R"({"parent": [-1, 0], "expected_tokens": "many"})"},
  };
  for (const auto& [name, text] : bad) {
    const std::string path = write(name + ".json", text);
    try {
      read_tree_file(path);
      ADD_FAILURE() << name << ": no error";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << name << ": " << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << name << ": " << msg;
    } catch (const std::exception& e) {
      ADD_FAILURE() << name << ": wrong exception type: " << e.what();
    }
  }
  const std::string missing = (dir_ / "missing.json").string();
  try {
    read_tree_file(missing);
    ADD_FAILURE() << "missing file: no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos);
  }
  EXPECT_THROW(write_tree_file((dir_ / "no_such_dir" / "t.json").string(), sequoia_tree({0.5}, 3, 0), {0.5}),
               Error);
}

}  // namespace
}  // namespace redwood::spec
