// The measured cost model (src/planner/measured.h): interpolation of t(n) and
// c(w), and the profile file's round trip and validation.
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "src/planner/measured.h"
#include "src/util/error.h"
#include "tests/util/errors.h"

namespace redwood::planner {
namespace {

TEST(CostCurve, InterpolatesLinearlyAndExtendsTheLastSlope) {
  const CostCurve c{{1, 4, 16}, {0.010, 0.016, 0.040}};
  EXPECT_DOUBLE_EQ(c.at(1), 0.010);
  EXPECT_DOUBLE_EQ(c.at(0.5), 0.010);  // below the grid: the first value
  EXPECT_NEAR(c.at(2), 0.012, 1e-15);
  EXPECT_NEAR(c.at(10), 0.028, 1e-15);
  EXPECT_DOUBLE_EQ(c.at(16), 0.040);
  EXPECT_NEAR(c.at(28), 0.064, 1e-15);  // beyond: slope of [4, 16]
  EXPECT_DOUBLE_EQ(CostCurve({{8}, {0.5}}).at(100), 0.5);
  // Noise that makes a larger pass cheaper is flattened, never extrapolated downwards.
  const CostCurve noisy{{1, 2, 4}, {0.5, 0.6, 0.55}};
  EXPECT_DOUBLE_EQ(noisy.at(4), 0.6);
  EXPECT_DOUBLE_EQ(noisy.at(64), 0.6);
  EXPECT_DOUBLE_EQ(noisy.at(3), 0.6);
  EXPECT_THROW((void)CostCurve{}.at(1), Error);
}

MeasuredProfile sample() {
  MeasuredProfile p;
  p.target = {"t.gguf", 100, "0123456789abcdef"};
  p.draft = {"d.gguf", 50, "fedcba9876543210"};
  p.device_mem = "80MiB+draft";
  p.ring = 2;
  p.threads = 2;
  p.ctx = 1100;
  p.prefix = 64;
  p.layers_resident = 3;
  p.layers_streamed = 27;
  p.target_pass = {{1, 16, 64}, {0.02, 0.05, 0.12}};
  p.draft_level = {{1, 8}, {0.003, 0.01}};
  return p;
}

TEST(MeasuredProfile, RoundTrips) {
  const std::string text = measured_json(sample());
  const MeasuredProfile r = parse_measured(text, "hw.json");
  EXPECT_EQ(r.target.xxh3, "0123456789abcdef");
  EXPECT_EQ(r.device_mem, "80MiB+draft");
  EXPECT_EQ(r.layers_streamed, 27);
  EXPECT_EQ(r.target_pass.x, (std::vector<int>{1, 16, 64}));
  EXPECT_EQ(r.draft_level.seconds, (std::vector<double>{0.003, 0.01}));
  EXPECT_EQ(measured_json(r), text);
}

TEST(MeasuredProfile, MalformedFilesAreClearErrors) {
  const std::string good = measured_json(sample());
  auto replace = [&](const std::string& from, const std::string& to) { return testutil::replace_once(good, from, to); };
  const std::pair<std::string, std::string> cases[] = {
      {"nope", "hw.json: not valid JSON"},
      {"[]", "hw.json: expected a JSON object"},
      {R"({"acceptance": [0.5]})", "hw.json: format must be \"redwood-hardware-profile\""},
      {replace("\"version\": 1", "\"version\": 2"), "hw.json: unsupported version (expected 1)"},
      {replace("\"xxh3\": \"fedcba9876543210\"", "\"xxh3\": 5"), "hw.json: draft must be {path, bytes, xxh3 (16 hex digits)}"},
      {replace("\"ring\": 2", "\"ring\": 1"), "hw.json: config.ring must be an integer >= 2"},
      {replace("\"n\": 16", "\"n\": 1"), "hw.json: target_pass[1].n must be increasing"},
      {replace("\"seconds\": 0.05", "\"seconds\": -0.05"), "hw.json: target_pass[1].seconds must be a positive number"},
      {replace("\"draft_level\": [", "\"draft_level\": [], \"x\": ["), "hw.json: draft_level must be a non-empty array"},
  };
  for (const auto& [text, want] : cases)
    EXPECT_EQ(testutil::error_of([&] { (void)parse_measured(text, "hw.json"); }), want) << text.substr(0, 80);
  EXPECT_THROW(read_measured("/nonexistent/hw.json"), Error);
}

}  // namespace
}  // namespace redwood::planner
