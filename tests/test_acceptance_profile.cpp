// Measured acceptance profiles (src/speculative/acceptance_profile.h): the estimator
// against exact values, pooling, file identity, and the profile file's
// round trip and validation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "src/speculative/acceptance_profile.h"
#include "src/util/error.h"
#include "tests/util/errors.h"

namespace redwood::spec {
namespace {

double sum_min(const std::vector<float>& p, const std::vector<float>& q) {
  double s = 0;
  for (size_t i = 0; i < p.size(); ++i) s += std::min(p[i], q[i]);
  return s;
}

TEST(AcceptanceCounter, FirstChildIsSumMinForBothSchemes) {
  const std::vector<float> p = {0.5f, 0.2f, 0.2f, 0.1f}, q = {0.1f, 0.4f, 0.3f, 0.2f};
  for (Verifier v : {Verifier::kSequoia, Verifier::kSpecInfer}) {
    AcceptanceCounter c(v, 1);
    Rng rng(7);
    for (int i = 0; i < 40000; ++i) c.add(p, q, rng);
    const AcceptanceVector r = c.result();
    ASSERT_EQ(r.acceptance.size(), 1u);
    const double want = sum_min(p, q);  // E[min(1, p(x)/q(x))], x ~ q
    const double half = r.ci95_high[0] - r.acceptance[0];
    EXPECT_GT(half, 0);
    EXPECT_NEAR(r.acceptance[0], want, 2.5 * half) << verifier_name(v);
    EXPECT_NEAR(r.none, 1 - r.acceptance[0], 1e-12);
    EXPECT_NEAR(r.expected_counts[0], r.acceptance[0] * 40000, 1e-6);
  }
}

TEST(AcceptanceCounter, SequoiaCoveringTheSupportAlwaysAccepts) {
  // Without replacement, W = V children try every token: some child is accepted.
  const std::vector<float> p = {0.5f, 0.2f, 0.2f, 0.1f}, q = {0.1f, 0.4f, 0.3f, 0.2f};
  AcceptanceCounter c(Verifier::kSequoia, 4);
  Rng rng(3);
  for (int i = 0; i < 2000; ++i) c.add(p, q, rng);
  EXPECT_LT(c.result().none, 1e-9);
  // With replacement it does not (duplicates are retried in vain).
  AcceptanceCounter s(Verifier::kSpecInfer, 4);
  for (int i = 0; i < 2000; ++i) s.add(p, q, rng);
  EXPECT_GT(s.result().none, 0.01);
}

TEST(AcceptanceCounter, GreedyIsTheRankOfTheTargetArgmaxAmongTheDraftsTopW) {
  const std::vector<float> p = {0.1f, 0.2f, 0.6f, 0.1f};
  AcceptanceCounter c(Verifier::kGreedy, 3);
  Rng rng(1);
  c.add(p, std::vector<float>{0.1f, 0.3f, 0.5f, 0.1f}, rng);  // draft order 2, 1, ... -> rank 1
  c.add(p, std::vector<float>{0.5f, 0.1f, 0.3f, 0.1f}, rng);  // 0, 2, ... -> rank 2
  c.add(p, std::vector<float>{0.4f, 0.3f, 0.1f, 0.2f}, rng);  // 0, 1, 3 -> none
  const AcceptanceVector r = c.result();
  EXPECT_EQ(r.trials, 3);
  EXPECT_NEAR(r.acceptance[0], 1.0 / 3, 1e-12);
  EXPECT_NEAR(r.acceptance[1], 1.0 / 3, 1e-12);
  EXPECT_NEAR(r.acceptance[2], 0.0, 1e-12);
  EXPECT_NEAR(r.none, 1.0 / 3, 1e-12);
}

// Target-sample over the draft's top-W children: a_k = p(k-th child), and the
// real verifier (verify_tree) accepts rank k with that frequency.
TEST(AcceptanceCounter, TargetSampleIsTheTargetMassOfTheDraftsTopChildren) {
  const std::vector<float> p = {0.1f, 0.2f, 0.6f, 0.1f}, q = {0.05f, 0.25f, 0.2f, 0.5f};  // draft top-3: 3, 1, 2
  AcceptanceCounter c(Verifier::kTargetSample, 3);
  Rng rng(1);
  c.add(p, q, rng);
  const AcceptanceVector r = c.result();
  EXPECT_NEAR(r.acceptance[0], 0.1, 1e-7);
  EXPECT_NEAR(r.acceptance[1], 0.2, 1e-7);
  EXPECT_NEAR(r.acceptance[2], 0.6, 1e-7);
  EXPECT_NEAR(r.none, 0.1, 1e-7);
  const std::vector<int32_t> parent = {-1, -1, -1}, token = {3, 1, 2};
  DistFn target = [&](int32_t) -> std::span<const float> { return p; };
  DistFn draft = [&](int32_t) -> std::span<const float> { return q; };
  std::vector<int> hits(4, 0);
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const VerifyResult v = verify_tree(Verifier::kTargetSample, TreeView{parent, token}, target, draft, rng);
    ++hits[v.accepted.empty() ? 3 : v.accepted[0]];
  }
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(hits[k] / double(n), r.acceptance[k], 0.005) << "rank " << k + 1;
  EXPECT_NEAR(hits[3] / double(n), r.none, 0.005);
}

TEST(AcceptanceCounter, RejectsOtherVerifiersAndWidths) {
  EXPECT_THROW(AcceptanceCounter(Verifier::kSpecTr, 4), Error);
  EXPECT_THROW(AcceptanceCounter(Verifier::kSequoia, 0), Error);
  AcceptanceCounter c(Verifier::kSequoia, 2);
  EXPECT_THROW(c.add_probabilities(std::vector<double>{0.5}), Error);
}

TEST(AcceptanceProfile, PoolsAdjacentViolators) {
  EXPECT_EQ(non_increasing({0.5, 0.3, 0.1}), (std::vector<double>{0.5, 0.3, 0.1}));
  const auto a = non_increasing({0.1, 0.3, 0.2});
  ASSERT_EQ(a.size(), 3u);
  for (double x : a) EXPECT_NEAR(x, 0.2, 1e-12);
  const auto b = non_increasing({0.4, 0.1, 0.2, 0.05});
  EXPECT_NEAR(b[0], 0.4, 1e-12);
  EXPECT_NEAR(b[1], 0.15, 1e-12);
  EXPECT_NEAR(b[2], 0.15, 1e-12);
  EXPECT_NEAR(b[3], 0.05, 1e-12);
}

std::string temp_file(const std::string& name, const std::string& bytes) {
  const std::string path = testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TEST(AcceptanceProfile, FileIdentityHashesContent) {
  const std::string a = temp_file("ident_a", "hello"), b = temp_file("ident_b", "hello!");
  const FileIdentity ia = identify_files("a", {a}), ib = identify_files("b", {b});
  EXPECT_EQ(ia.bytes, 5u);
  EXPECT_EQ(ia.xxh3.size(), 16u);
  EXPECT_NE(ia.xxh3, ib.xxh3);
  EXPECT_EQ(identify_files("a", {a}).xxh3, ia.xxh3);
  EXPECT_EQ(identify_files("ab", {a, b}).bytes, 11u);
  EXPECT_THROW(identify_files("x", {testing::TempDir() + "/no-such-file"}), Error);
}

AcceptanceProfile sample_profile() {
  AcceptanceProfile p;
  p.target = {"t.gguf", 100, "0123456789abcdef"};
  p.draft = {"d.gguf", 50, "fedcba9876543210"};
  p.prompts = {"p.jsonl", 10, "00000000000000ff"};
  p.prompt_count = 3;
  p.positions = 40;
  p.repeats = 2;
  p.temperature = 0.6;
  p.top_p = 0.95;
  p.seed = 9;
  AcceptanceCounter c(Verifier::kSequoia, 3);
  c.add_probabilities(std::vector<double>{0.5, 0.2, 0.1});
  c.add_probabilities(std::vector<double>{0.3, 0.3, 0.0});
  p.vectors.push_back(c.result());
  p.chain.depth = 3;
  p.chain.reached = {10, 6, 2, 1};
  p.acceptance = non_increasing(p.vectors[0].acceptance);
  return p;
}

TEST(AcceptanceProfile, RoundTrips) {
  const AcceptanceProfile p = sample_profile();
  const std::string text = profile_json(p);
  const AcceptanceProfile r = parse_acceptance_profile(text, "p.json");
  EXPECT_EQ(r.acceptance, p.acceptance);
  EXPECT_EQ(r.target.xxh3, p.target.xxh3);
  EXPECT_EQ(r.draft.path, p.draft.path);
  EXPECT_EQ(r.prompts.bytes, p.prompts.bytes);
  EXPECT_EQ(r.positions, 40);
  EXPECT_EQ(r.repeats, 2);
  EXPECT_DOUBLE_EQ(r.temperature, 0.6);
  EXPECT_EQ(r.seed, 9u);
  ASSERT_EQ(r.vectors.size(), 1u);
  EXPECT_EQ(r.vectors[0].verifier, Verifier::kSequoia);
  EXPECT_EQ(r.vectors[0].acceptance, p.vectors[0].acceptance);
  EXPECT_EQ(r.vectors[0].trials, 2);
  EXPECT_EQ(r.chain.reached, p.chain.reached);
  EXPECT_NEAR(r.chain.depth_acceptance()[1], 2.0 / 6, 1e-12);
  EXPECT_EQ(profile_json(r), text);  // stable
  // A bare acceptance file is a valid (minimal) profile.
  EXPECT_EQ(parse_acceptance_profile(R"({"acceptance": [0.6, 0.2]})", "a.json").acceptance,
            (std::vector<double>{0.6, 0.2}));
  // The file works where the DP takes an acceptance vector.
  const std::string path = temp_file("profile.json", text);
  EXPECT_EQ(read_acceptance_profile(path).acceptance, p.acceptance);
}

TEST(AcceptanceProfile, MalformedFilesAreClearErrors) {
  const std::string good = profile_json(sample_profile());
  auto replace = [&](const std::string& from, const std::string& to) { return testutil::replace_once(good, from, to); };
  const std::pair<std::string, std::string> cases[] = {
      {"{", "p.json: not valid JSON"},
      {"[1, 2]", "p.json: expected a JSON object"},
      {"{}", "p.json: missing \"acceptance\""},
      {R"({"acceptance": []})", "p.json: acceptance must be a non-empty array of probabilities"},
      {R"({"acceptance": [0.6, "x"]})", "p.json: acceptance[1] must be a number"},
      {R"({"acceptance": [0.6, 0.7]})", "p.json: acceptance sums to 1.3 > 1"},
      {R"({"acceptance": [1.5]})", "p.json: acceptance[0] must be in [0, 1]"},
      {R"({"acceptance": [0.2, 0.3]})", "p.json: acceptance must be non-increasing (index 1)"},
      {replace("\"version\": 1", "\"version\": 7"), "p.json: unsupported version (expected 1)"},
      {replace("\"xxh3\": \"0123456789abcdef\"", "\"xxh3\": \"12\""), "p.json: target.xxh3 must be 16 hex digits"},
      {replace("\"positions\": 40", "\"positions\": -1"), "p.json: positions must be a non-negative integer"},
      {replace("\"sequoia\"", "\"magic\""), "p.json: one_level_trees.magic: unknown verifier"},
      {replace("\"width\": 3", "\"width\": 4"),
       "p.json: one_level_trees.sequoia.width must equal the acceptance length"},
      {replace("\"steps_reaching_depth\": [\n      10", "\"steps_reaching_depth\": [\n      1"),
       "p.json: chain.steps_reaching_depth must be non-increasing"},
  };
  for (const auto& [text, want] : cases)
    EXPECT_EQ(testutil::error_of([&] { (void)parse_acceptance_profile(text, "p.json"); }), want) << text.substr(0, 80);
  EXPECT_THROW(read_acceptance_profile(testing::TempDir() + "/missing.json"), Error);
}

}  // namespace
}  // namespace redwood::spec
