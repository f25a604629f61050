// The predicted cost model (src/planner): hardware profiles and model configs
// (TOML, validated with one-line errors), config -> ModelDesc sizes, the cost
// model, the hardware-aware Sequoia optimizer against brute force, the
// dynamic-tree objective and calibration (--tree auto), and the
// L40 / Llama2-70B / Llama2-7B prediction in Sequoia's offloading regime.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "offload/layer_layout.h"
#include "src/planner/cost_model.h"
#include "src/planner/hardware.h"
#include "src/planner/model_config.h"
#include "src/planner/optimizer.h"
#include "src/planner/predict.h"
#include "src/planner/profile_cache.h"
#include "src/speculative/sequoia_dp.h"
#include "src/speculative/tree_policy.h"
#include "src/util/error.h"
#include "tests/fuzz/planner_harness.h"
#include "tests/util/errors.h"

using namespace redwood;
using namespace redwood::planner;

namespace {

const std::string kSrc = REDWOOD_SOURCE_DIR;
std::string cfg(const std::string& rel) {
  return kSrc + "/configs/" + rel;
}

const char* kGoodHw = R"(name = "test gpu"
kind = "gpu"
device_memory = "16GiB"
device_bandwidth = 1000.0
link_bandwidth = 20
storage_bandwidth = 5.0
tflops = 100.0
)";

const char* kGoodModel = R"(name = "tiny"
layers = 4
dim = 256
heads = 4
kv_heads = 2
ffn = 512
vocab = 1000
dtype = "F16"
)";

using testutil::error_of;

}  // namespace

// ---- hardware profiles ---------------------------------------------------------

TEST(Hardware, ParsesAndDefaults) {
  const HardwareProfile h = parse_hardware(kGoodHw, "hw.toml");
  EXPECT_EQ(h.name, "test gpu");
  EXPECT_EQ(h.backend, offload::BackendKind::kCuda);
  EXPECT_EQ(h.device_memory, 16ull << 30);
  EXPECT_EQ(h.device_budget(), 16ull << 30);
  EXPECT_EQ(h.host_memory, 0u);
  EXPECT_DOUBLE_EQ(h.link_bandwidth, 20.0);  // integers are numbers too
  EXPECT_DOUBLE_EQ(h.bandwidth_efficiency, 1.0);
  EXPECT_DOUBLE_EQ(h.eff_flops(), 100e12);
}

TEST(Hardware, ShippedProfilesLoad) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(cfg("hardware"))) {
    if (e.path().extension() != ".toml") continue;
    SCOPED_TRACE(e.path().string());
    const HardwareProfile h = load_hardware(e.path().string());
    EXPECT_FALSE(h.name.empty());
    EXPECT_FALSE(h.source.empty());
    EXPECT_LT(h.bandwidth_efficiency, 1.0);
    ++n;
  }
  EXPECT_GE(n, 5);
  const HardwareProfile l40 = load_hardware(cfg("hardware/l40.toml"));
  EXPECT_EQ(l40.device_memory, 48'000'000'000ull);
  EXPECT_DOUBLE_EQ(l40.link_bandwidth, 25.0);
  EXPECT_EQ(load_hardware(cfg("hardware/cpu-dev.toml")).backend, offload::BackendKind::kCpu);
}

TEST(Hardware, RejectsMalformedInput) {
  const std::string base = kGoodHw;
  auto with = [&](const std::string& extra) { return base + extra; };
  auto without = [&](const std::string& key) {
    std::string s = base;
    const auto at = s.find(key + " =");
    return s.erase(at, s.find('\n', at) - at + 1);
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {with("colour = 3\n"),
       "hw.toml:8: unknown key 'colour' (known in the top level: name, source, kind, device_memory, "
       "device_reserved, host_memory, device_bandwidth, link_bandwidth, storage_bandwidth, tflops, "
       "bandwidth_efficiency, flops_efficiency, layer_overhead_us, decode_bandwidth)"},
      {without("tflops"), "hw.toml: missing required key 'tflops'"},
      {without("device_memory"), "hw.toml: missing required key 'device_memory'"},
      {with("bandwidth_efficiency = \"high\"\n"), "hw.toml:8: bandwidth_efficiency: expected a number, got a string"},
      {with("flops_efficiency = 1.5\n"), "hw.toml:8: flops_efficiency: must be in (0, 1], got 1.5"},
      {with("layer_overhead_us = -1\n"), "hw.toml:8: layer_overhead_us: must be in [0, 1e+06], got -1"},
      {with("host_memory = \"lots\"\n"),
       "hw.toml:8: host_memory: invalid size 'lots' (expected e.g. \"48GB\", \"44GiB\", \"512MiB\")"},
      {with("host_memory = -5\n"), "hw.toml:8: host_memory: must not be negative, got -5"},
      {with("device_reserved = \"16GiB\"\n"), "hw.toml:8: device_reserved: must be less than device_memory"},
      {with("name = \"twice\"\n"),
       "hw.toml:8: Error while parsing key-value pair: cannot redefine existing string 'name'"},
      {with("link = [\n"), "hw.toml:8: Error while parsing array: encountered end-of-file"},
  };
  for (const auto& [text, msg] : cases) EXPECT_EQ(error_of([&] { parse_hardware(text, "hw.toml"); }), msg) << text;
  std::string neg = base;
  neg.replace(neg.find("link_bandwidth = 20"), 19, "link_bandwidth = -25");
  EXPECT_EQ(error_of([&] { parse_hardware(neg, "hw.toml"); }),
            "hw.toml:5: link_bandwidth: must be in (0, 1e+09], got -25");
  std::string kind = base;
  kind.replace(kind.find("\"gpu\""), 5, "\"tpu\"");
  EXPECT_EQ(error_of([&] { parse_hardware(kind, "hw.toml"); }), "hw.toml:2: kind: expected gpu | cpu, got 'tpu'");
  std::string mem = base;
  mem.replace(mem.find("\"16GiB\""), 7, "16.5");
  EXPECT_EQ(
      error_of([&] { parse_hardware(mem, "hw.toml"); }),
      "hw.toml:3: device_memory: expected a size string (\"48GB\", \"44GiB\") or a number of bytes, got a number");
  EXPECT_EQ(error_of([] { load_hardware("/nonexistent/hw.toml"); }),
            "/nonexistent/hw.toml: cannot open hardware profile");
}

// ---- model configs --------------------------------------------------------------

TEST(ModelConfig, RejectsMalformedInput) {
  const std::string base = kGoodModel;
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string s = base;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {base + "hidden = 4\n",
       "m.toml:9: unknown key 'hidden' (known in the top level: name, source, architecture, layers, dim, heads, kv_heads, "
       "head_dim, ffn, vocab, tied, dtype, embedding_dtype, context, rope_base)"},
      {replace("layers = 4\n", ""), "m.toml: missing required key 'layers'"},
      {replace("layers = 4", "layers = \"4\""), "m.toml:2: layers: expected an integer, got a string"},
      {replace("layers = 4", "layers = 0"), "m.toml:2: layers: must be in [1, 1024], got 0"},
      {replace("heads = 4", "heads = 3"), "m.toml:4: heads: dim 256 is not a multiple of 3 heads (give head_dim)"},
      {replace("kv_heads = 2", "kv_heads = 3"), "m.toml:5: kv_heads: 4 heads are not a multiple of 3 KV heads"},
      {replace("\"F16\"", "\"FP8\""),
       "m.toml:8: dtype: expected F32 | F16 | BF16 | Q8_0 | Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q2_K | Q3_K | Q4_K | Q5_K | "
       "Q6_K | IQ4_NL | IQ4_XS, got 'FP8'"},
      {replace("ffn = 512", "ffn = 520").replace(base.find("\"F16\"") + 0, 5, "\"Q4_0\""),
       "m.toml:8: dtype: Q4_0 needs rows that are a multiple of 32 elements, but a matrix has 520 columns"},
      {base + "tied = 1\n", "m.toml:9: tied: expected true or false, got an integer"},
  };
  for (const auto& [text, msg] : cases) EXPECT_EQ(error_of([&] { parse_model_config(text, "m.toml"); }), msg) << text;
  EXPECT_EQ(error_of([] { load_model_config("/nonexistent/m.toml"); }),
            "/nonexistent/m.toml: cannot open model config");
}

// A hardware profile or model config nested 50,000 levels deep (a 100 kB
// dotted key or table header: `redwood plan --hardware / --model-config`)
// overflowed toml++'s stack; now one line naming file and line.
TEST(ModelConfig, DeeplyNestedTomlIsOneLineError) {
  std::string dotted = "a", header = "[a";
  for (int i = 0; i < 50000; ++i) dotted += ".a", header += ".a";
  for (const std::string& deep : {dotted + " = 1\n", header + "]\n"}) {
    const std::string hw = error_of([&] { parse_hardware(std::string(kGoodHw) + deep, "hw.toml"); });
    EXPECT_EQ(hw, "hw.toml:8: nested more than 64 levels deep (dotted keys, table headers, arrays and inline "
                  "tables count)");
    const std::string m = error_of([&] { parse_model_config(std::string(kGoodModel) + deep, "m.toml"); });
    EXPECT_EQ(m, "m.toml:9: nested more than 64 levels deep (dotted keys, table headers, arrays and inline tables "
                 "count)");
  }
}

// The libFuzzer corpus of the planner's TOML readers (tests/fuzz/fuzz_planner.cpp:
// seeds, deep nesting, fixed crashers) through the same harness.
TEST(ModelConfig, FuzzCorpusReplays) {
  const std::filesystem::path dir = kSrc + "/tests/fuzz/corpus/planner";
  int n = 0, loaded = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::ifstream f(e.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
    try {
      EXPECT_TRUE(fuzz::run_planner(data, bytes.size())) << e.path();
      if (e.path().filename().string().starts_with("valid_")) {  // the seeds that reach deep code do load
        EXPECT_EQ(error_of([&] { (void)fuzz::run_planner_or_throw(data, bytes.size()); }), "(no error)") << e.path();
        ++loaded;
      }
    } catch (const std::exception& ex) {
      ADD_FAILURE() << e.path() << ": non-redwood exception " << ex.what();
    }
    ++n;
  }
  EXPECT_GE(n, 8);
  EXPECT_GE(loaded, 4);
}

TEST(ModelConfig, KnownParameterCounts) {
  struct Known {
    const char* file;
    double params;  // published / computed from the HF configs
  };
  const Known known[] = {
      {"llama2-7b", 6.738e9}, {"llama2-13b", 13.016e9}, {"llama2-70b", 68.977e9},
      {"llama3-8b", 8.030e9}, {"llama3-70b", 70.554e9}, {"smollm2-135m", 134.5e6},
  };
  for (const Known& k : known) {
    SCOPED_TRACE(k.file);
    const ModelConfig c = load_model_config(cfg(std::string("models/") + k.file + ".toml"));
    const ModelDesc m = model_desc_from_config(c);
    EXPECT_NEAR(static_cast<double>(parameter_count(m)), k.params, k.params * 1e-3);
  }
  const ModelDesc m70 = model_desc_from_config(load_model_config(cfg("models/llama2-70b.toml")));
  EXPECT_EQ(m70.layers.size(), 80u);
  EXPECT_EQ(m70.hp.head_dim, 128);
  EXPECT_NEAR(static_cast<double>(m70.total_bytes()), 137.95e9, 0.05e9);  // fp16: 2 bytes per parameter
  EXPECT_EQ(m70.layers[0].w_gate.bytes, 28672ull * 8192 * 2);
  EXPECT_EQ(m70.layers[0].wk.rows, 1024);
}

// The virtual description has the same bytes per tensor as the real file.
TEST(ModelConfig, MatchesTheRealSmolLM2File) {
  if (!std::filesystem::exists(REDWOOD_TEST_MODEL)) GTEST_SKIP() << "no " << REDWOOD_TEST_MODEL;
  const ModelDesc real = load_model_desc(REDWOOD_TEST_MODEL);
  const ModelDesc virt = model_desc_from_config(load_model_config(cfg("models/smollm2-135m.toml")));
  ASSERT_EQ(real.layers.size(), virt.layers.size());
  EXPECT_EQ(real.total_bytes(), virt.total_bytes());
  for (size_t i = 0; i < real.layers.size(); ++i) EXPECT_EQ(real.layers[i].bytes(), virt.layers[i].bytes());
  EXPECT_EQ(real.tok_embd.type, virt.tok_embd.type);
}

// ---- Sequoia value table, optimizer --------------------------------------------

TEST(Optimizer, ValueTableMatchesSequoiaTree) {
  for (const std::vector<double>& acc :
       {std::vector<double>{0.6, 0.2, 0.1}, std::vector<double>{0.9}, spec::default_acceptance(8),
        std::vector<double>{0.5, 0.5}, std::vector<double>{0.7, 0.1, 0, 0}}) {
    const auto table = spec::sequoia_value_table(acc, 48, 9);
    for (int d = 1; d <= 9; ++d)
      for (int n = d; n <= 48; ++n)
        EXPECT_NEAR(table[static_cast<size_t>(d)][static_cast<size_t>(n)],
                    spec::sequoia_tree(acc, n, d).expected_tokens, 1e-9)
            << "n " << n << " d " << d;
  }
}

TEST(Optimizer, EqualsBruteForce) {
  struct Case {
    std::vector<double> acc;
    std::function<double(int)> t, c;
  };
  const std::vector<Case> cases = {
      // Offloading-like: t flat, then growing; draft cheap.
      {{0.8, 0.1, 0.05}, [](int n) { return 1.0 + 0.002 * n; }, [](int) { return 0.02; }},
      // On-chip-like: t grows fast, draft expensive.
      {{0.7, 0.15, 0.05, 0.02}, [](int n) { return 0.05 + 0.01 * n; }, [](int) { return 0.03; }},
      // Width-dependent draft (compute-bound beyond 4 tokens per level), step-shaped t.
      {spec::default_acceptance(6), [](int n) { return 0.5 + 0.2 * ((n + 15) / 16); },
       [](int w) { return 0.01 * std::max(1, w / 4); }},
      // Drafting so costly that autoregressive decoding wins.
      {{0.3, 0.1}, [](int) { return 0.01; }, [](int) { return 1.0; }},
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    SCOPED_TRACE(k);
    const Case& cs = cases[k];
    OptimizerInput in;
    in.acceptance = cs.acc;
    in.max_budget = 40;
    in.max_depth = 8;
    in.target_s = cs.t;
    in.draft_step_s = cs.c;
    const TreeChoice got = optimize_tree(in);
    TreeChoice best;
    double best_rate = -1;
    auto G = [&](int n, int d) { return n < 1 || d < 1 ? 0.0 : spec::sequoia_tree(cs.acc, n, d).expected_tokens; };
    for (int n = 1; n <= 40; ++n)
      for (int d = 1; d <= std::min(8, n); ++d) {
        const double g = G(n, d);
        if (!adds_value(g, G(n - 1, d), G(n, d - 1))) continue;
        // Then the DP's tree has exactly n nodes and d levels.
        const spec::StaticTree tree = spec::sequoia_tree(cs.acc, n, d);
        EXPECT_EQ(tree.size(), n);
        EXPECT_EQ(tree.max_depth(), d);
        const TreeChoice x = evaluate_tree(n, d, g, cs.t(n), cs.c);
        if (x.tokens_per_second() > best_rate * (1 + 1e-12)) best = x, best_rate = x.tokens_per_second();
      }
    EXPECT_NEAR(got.tokens_per_second(), best_rate, best_rate * 1e-9);
    EXPECT_EQ(got.budget, best.budget);
    EXPECT_EQ(got.depth, best.depth);
    // And the objective really is G / (t(n) + (d - 1) c).
    const double g = spec::sequoia_tree(cs.acc, got.budget, got.depth).expected_tokens;
    EXPECT_NEAR(got.tokens, g, 1e-9);
  }
  // The last case: drafting never pays.
  OptimizerInput in;
  in.acceptance = {0.3, 0.1};
  in.max_budget = 40;
  in.target_s = [](int) { return 0.01; };
  in.draft_step_s = [](int) { return 1.0; };
  const TreeChoice ar = optimize_tree(in);
  EXPECT_EQ(ar.budget, 1);
  EXPECT_EQ(ar.depth, 1);
  EXPECT_DOUBLE_EQ(ar.tokens, 1.0);
}

TEST(Optimizer, DraftCostUsesAverageLevelWidth) {
  const TreeChoice x = evaluate_tree(13, 4, 3.0, 1.0, [](int w) { return 0.001 * w; });
  EXPECT_DOUBLE_EQ(x.draft_s, 3 * 0.004);  // 12 drafted nodes over 3 levels
  EXPECT_DOUBLE_EQ(x.seconds_per_token(), (1.0 + 0.012) / 3.0);
}

// ---- dynamic trees (--tree auto) -------------------------------------------------

TEST(DynamicTrees, CalibrationHandComputed) {
  EXPECT_DOUBLE_EQ(calibration_scale(0.3, 0.6), 0.5);
  EXPECT_EQ(error_of([] { calibration_scale(1.2, 0.5); }), "calibration: rank-1 acceptance must be in [0, 1]");
  EXPECT_EQ(error_of([] { calibration_scale(0.2, 0.0); }),
            "calibration: the draft's mean rank-1 probability must be in (0, 1]");
  // root -> {1 (q 0.5), 2 (q 0.3)}, 1 -> {3 (q 0.6)}.
  const std::vector<int32_t> parent = {-1, 0, 0, 1};
  const std::vector<double> q = {1.0, 0.5, 0.3, 0.6};
  // alpha 0.4: a = 0.2, 0.12, 0.24 -> 1 + 0.2 + 0.12 + 0.2 * 0.24.
  EXPECT_NEAR(calibrated_tokens(parent, q, 0.4), 1.368, 1e-12);
  // alpha 1.5: a(1) = 0.75, a(2) = min(0.45, 1 - 0.75) = 0.25 (siblings are exclusive), a(3) = 0.9.
  EXPECT_NEAR(calibrated_tokens(parent, q, 1.5), 1 + 0.75 + 0.25 + 0.75 * 0.9, 1e-12);
  EXPECT_DOUBLE_EQ(calibrated_tokens(std::vector<int32_t>{-1}, std::vector<double>{1.0}, 0.7), 1.0);
  EXPECT_EQ(error_of([] {
              calibrated_tokens(std::vector<int32_t>{-1, 1}, std::vector<double>{1, 0.5}, 1);
            }),
            "calibrated_tokens: parents must precede children");
}

TEST(DynamicTrees, ObjectiveIsARatioOfMeans) {
  auto t = [](int n) { return 1.0 + 0.01 * n; };
  auto c = [](int) { return 0.05; };
  std::vector<DynamicCandidate> cands(4);
  cands[0].samples = {{4, {1}, 1.5}};           // (1.04 + 0.10) -> 1.5 / 1.14 = 1.316 tokens/s
  cands[1].samples = {{16, {3, 5}, 2.0}};       // (1.16 + 0.15) -> 2.0 / 1.31 = 1.527
  cands[2].samples = {{64, {8, 16, 32}, 2.4}};  // (1.64 + 0.20) -> 2.4 / 1.84 = 1.304
  // Two steps: tokens 2 on average over (1.02 + 0.05 | 1.30 + 0.15) -> 2 / 1.26 = 1.587.
  cands[3].samples = {{2, {}, 1.0}, {30, {4, 4}, 3.0}};
  const TreeChoice d = evaluate_dynamic(cands[3].samples, t, c);
  EXPECT_DOUBLE_EQ(d.tokens, 2.0);
  EXPECT_NEAR(d.target_s, 1.16, 1e-12);
  EXPECT_NEAR(d.draft_s, 0.10, 1e-12);
  EXPECT_NEAR(d.tokens_per_second(), 2.0 / 1.26, 1e-12);
  TreeChoice best;
  EXPECT_EQ(best_dynamic(cands, t, c, &best), 3);
  EXPECT_NEAR(best.tokens_per_second(), 2.0 / 1.26, 1e-12);
  cands.pop_back();
  EXPECT_EQ(best_dynamic(cands, t, c, &best), 1);
  EXPECT_NEAR(best.seconds_per_token(), 1.31 / 2.0, 1e-12);
  EXPECT_EQ(best_dynamic({}, t, c), -1);
  EXPECT_EQ(error_of([&] { evaluate_dynamic({}, t, c); }), "optimizer: a dynamic candidate without samples");
}

// DySpec trees grown from a synthetic draft, calibrated, then the objective:
// a one-level tree (depth 2) under q = [0.5, 0.2, 0.1, 0.08, 0.06, 0.03, 0.02,
// 0.01] takes the B - 1 most likely tokens (greedy), so with alpha = 1 it
// yields 1 + the sum of the B - 1 largest q; with t(n) = 1 + 0.05 n and a free
// draft the rates are B=2: 1.5/1.1, 3: 1.7/1.15, 4: 1.8/1.2, 5: 1.88/1.25
// (the best, 1.504), 6: 1.94/1.3, 8: 1.99/1.4.
TEST(DynamicTrees, SyntheticDraftPicksTheKnownOptimum) {
  const std::vector<float> q = {0.5f, 0.2f, 0.1f, 0.08f, 0.06f, 0.03f, 0.02f, 0.01f};
  std::vector<DynamicCandidate> cands;
  for (int b : {2, 3, 4, 5, 6, 8}) {
    DynamicCandidate c;
    c.params.kind = spec::TreeKind::kDySpec;
    c.params.budget = b;
    c.params.depth = 2;
    c.verifier = spec::Verifier::kGreedy;
    cands.push_back(c);
  }
  // The layer-wise variant: children while the pending value 1 - sum(earlier) > 0.09: five of them.
  DynamicCandidate th;
  th.params.kind = spec::TreeKind::kDySpec;
  th.params.budget = 32;
  th.params.depth = 2;
  th.params.threshold = 0.09;
  th.verifier = spec::Verifier::kGreedy;
  cands.push_back(th);
  const double expect_tokens[] = {1.5, 1.7, 1.8, 1.88, 1.94, 1.99, 1.94};
  const int expect_nodes[] = {2, 3, 4, 5, 6, 8, 6};
  for (size_t i = 0; i < cands.size(); ++i) {
    auto policy = spec::make_policy(cands[i].params, spec::StaticTree{}, cands[i].verifier);
    spec::DraftTree tree;
    tree.reset(7, true);
    tree.begin_batch();
    tree.set_dist(0) = q;
    Rng rng(1);
    int passes = -1;
    auto forward = [&](std::span<const int32_t> nodes) {
      for (int32_t u : nodes) tree.set_dist(u) = q;
    };
    const std::vector<int32_t> keep = spec::grow_tree(*policy, tree, forward, rng, &passes);
    std::vector<int32_t> parent;
    std::vector<double> pq;
    for (int32_t v : keep) {
      const int32_t u = tree.parent[static_cast<size_t>(v)];
      parent.push_back(u);  // ids are already 0..n-1 (nothing pruned)
      pq.push_back(u < 0 ? 1.0 : tree.dist(u)[static_cast<size_t>(tree.token[static_cast<size_t>(v)])]);
    }
    EXPECT_EQ(passes, 0);  // one level: only the root's distribution is needed
    EXPECT_EQ(static_cast<int>(keep.size()), expect_nodes[i]) << i;
    DynamicTreeSample s;
    s.nodes = static_cast<int>(keep.size());
    s.tokens = calibrated_tokens(parent, pq, 1.0);
    EXPECT_NEAR(s.tokens, expect_tokens[i], 1e-6) << i;
    cands[i].samples.push_back(s);
  }
  TreeChoice best;
  const int i = best_dynamic(
      cands, [](int n) { return 1.0 + 0.05 * n; }, [](int) { return 0.0; }, &best);
  EXPECT_EQ(i, 3);
  EXPECT_EQ(best.budget, 5);
  EXPECT_NEAR(best.tokens_per_second(), 1.88 / 1.25, 1e-6);
  // An expensive draft pass over the root makes plain decoding (1 / 1.05) the better choice.
  best_dynamic(
      cands, [](int n) { return 1.0 + 0.05 * n; }, [](int) { return 1.0; }, &best);
  EXPECT_LT(best.tokens_per_second(), 1.0 / 1.05);
}

TEST(DynamicTrees, GridPairsEachPolicyWithALosslessVerifier) {
  for (const bool greedy : {true, false}) {
    const auto grid = dynamic_grid(32, 8, greedy);
    int kinds[4] = {0, 0, 0, 0};
    for (const auto& c : grid) {
      EXPECT_EQ(spec::check_pairing(c.params.kind, c.verifier), "") << describe_tree(c.params);
      EXPECT_NO_THROW(spec::validate_tree_params(c.params));
      EXPECT_LE(c.params.budget, 32);
      EXPECT_EQ(c.params.depth, 8);
      const spec::Verifier want = greedy                                     ? spec::Verifier::kGreedy
                                  : c.params.kind == spec::TreeKind::kDySpec ? spec::Verifier::kSequoia
                                                                             : spec::Verifier::kTargetSample;
      EXPECT_EQ(c.verifier, want);
      ++kinds[static_cast<int>(c.params.kind)];
    }
    EXPECT_EQ(kinds[1], 7 + 6);  // heap budgets 4, 6, 8, 12, 16, 24, 32; six thresholds
    EXPECT_EQ(kinds[2], 3 * 3);  // delta 0.1, 0.3, 1 x budgets 8, 16, 32
    EXPECT_EQ(kinds[3], 3 * 3);  // width 2, 4, 8 x budgets 8, 16, 32
  }
  EXPECT_TRUE(dynamic_grid(1, 8, true).empty());
  spec::TreeParams p;
  p.kind = spec::TreeKind::kDySpec;
  p.budget = 32;
  p.depth = 8;
  p.threshold = 0.1;
  EXPECT_EQ(describe_tree(p), "dyspec threshold 0.1 budget 32 depth 8");
  p.kind = spec::TreeKind::kOptTree;
  p.delta = 0.3;
  EXPECT_EQ(describe_tree(p), "opt-tree budget 32 depth 8 delta 0.3");
  p.kind = spec::TreeKind::kSpecExec;
  p.width = 4;
  EXPECT_EQ(describe_tree(p), "specexec budget 32 depth 8 width 4");
}

// ---- cost model -----------------------------------------------------------------

TEST(CostModel, ResidentIsComputeOnly) {
  const HardwareProfile hw = parse_hardware(kGoodHw, "hw.toml");
  const ModelDesc m = model_desc_from_config(parse_model_config(kGoodModel, "m.toml"));
  offload::Budgets b;
  b.backend = offload::BackendKind::kCuda;
  const offload::MemoryPlan p = offload::plan_memory(m, nullptr, b, offload::RunShape{});
  ASSERT_EQ(p.count(offload::Tier::kDevice), 4);
  const PassCost c = target_pass(hw, m, p, 8, 100);
  EXPECT_EQ(c.transfer_s, 0.0);
  EXPECT_DOUBLE_EQ(c.seconds, c.compute_s);
  double sum = 0;
  for (const LayerDesc& L : m.layers) sum += layer_compute_s(hw, m.hp, L, 8, 100);
  EXPECT_GT(c.compute_s, sum);  // plus the LM head
  // A layer: bandwidth-bound at n = 1 (bytes / 1000 GB/s), compute-bound for large n.
  const LayerDesc& L = m.layers[0];
  double bytes = 0, params = 0;
  for (const TensorExtent* t : offload::layer_matrices(L))
    bytes += static_cast<double>(t->bytes), params += t->rows * t->cols;
  const double kv = 2.0 * 2 * 64 * (0 + 1) * 4;  // an F32 KV cache (the default, on every backend)
  EXPECT_NEAR(layer_compute_s(hw, m.hp, L, 1, 0), (bytes + kv) / 1000e9, 1e-15);
  EXPECT_NEAR(layer_compute_s(hw, m.hp, L, 1, 0, DType::F16), (bytes + kv / 2) / 1000e9, 1e-15);
  EXPECT_NEAR(layer_compute_s(hw, m.hp, L, 1, 0, DType::Q8_0), (bytes + kv / 4 * 34 / 32) / 1000e9, 1e-15);
  const double n = 100000, attn = 4.0 * n * n * 256;
  EXPECT_NEAR(layer_compute_s(hw, m.hp, L, 100000, 0), (2 * params * n + attn) / 100e12, 1e-9);
}

TEST(CostModel, StreamedPassIsThePipeline) {
  const HardwareProfile hw = parse_hardware(kGoodHw, "hw.toml");
  const ModelDesc m = model_desc_from_config(parse_model_config(kGoodModel, "m.toml"));
  offload::Budgets b;
  b.backend = offload::BackendKind::kCuda;
  b.device = 1;  // below the minimum: use the minimum
  offload::MemoryPlan p;
  try {
    p = offload::plan_memory(m, nullptr, b, offload::RunShape{});
  } catch (const Error&) {
  }
  offload::Budgets b2 = b;
  offload::Budgets cuda;
  cuda.backend = offload::BackendKind::kCuda;
  b2.device = offload::plan_memory(m, nullptr, cuda, offload::RunShape{}).device_min;
  p = offload::plan_memory(m, nullptr, b2, offload::RunShape{});
  ASSERT_EQ(p.count(offload::Tier::kDevice), 0);
  ASSERT_EQ(p.count(offload::Tier::kStorage), 4);
  const PassCost c = target_pass(hw, m, p, 1, 0);
  // Storage at 5 GB/s is slower than the link: transfers are bytes / 5 GB/s.
  double tr = 0;
  for (uint64_t bytes : p.layer_bytes) tr += static_cast<double>(bytes) / 5e9;
  EXPECT_NEAR(c.transfer_s, tr, 1e-15);
  // Transfer-bound: the pass is every transfer plus the last layer's compute and the head.
  const double last = layer_compute_s(hw, m.hp, m.layers[3], 1, 0);
  EXPECT_NEAR(c.seconds, tr + last + (c.compute_s - 4 * last), 1e-12);
  EXPECT_GE(c.seconds, std::max(c.transfer_s, c.compute_s));
  // Time never decreases with the number of tokens.
  double prev = 0;
  for (int n : {1, 2, 16, 256, 4096, 65536}) {
    const double t = target_pass(hw, m, p, n, 0).seconds;
    EXPECT_GE(t, prev);
    prev = t;
  }
}

// A packed model (assume_packed): the planner reads stored bytes per layer, and
// the pass adds one decode stage per streamed layer after its read; without a
// decode_bandwidth the prediction is refused.
TEST(CostModel, APackedModelReadsStoredBytesAndDecodes) {
  HardwareProfile hw = parse_hardware(kGoodHw, "hw.toml");
  const ModelDesc m = model_desc_from_config(parse_model_config(kGoodModel, "m.toml"));
  ModelDesc packed = m;
  assume_packed(packed);
  offload::Budgets cuda;
  cuda.backend = offload::BackendKind::kCuda;
  auto streamed_plan = [&](const ModelDesc& d) {
    offload::Budgets b = cuda;
    b.device = offload::plan_memory(d, nullptr, cuda, offload::RunShape{}).device_min;
    return offload::plan_memory(d, nullptr, b, offload::RunShape{});
  };
  const offload::MemoryPlan p = streamed_plan(m), q = streamed_plan(packed);
  ASSERT_EQ(q.count(offload::Tier::kStorage), 4);
  EXPECT_LT(q.storage_bytes_per_pass, p.storage_bytes_per_pass);
  // The ratio, plus each tensor's stream head and 4 KiB alignment (large on this small model).
  const double r = static_cast<double>(q.storage_bytes_per_pass) / static_cast<double>(p.storage_bytes_per_pass);
  EXPECT_GE(r, packed_ratio(DType::F16));
  EXPECT_LE(r, packed_ratio(DType::F16) + 0.1);
  EXPECT_THROW(target_pass(hw, packed, q, 1, 0), Error);  // no decode_bandwidth
  hw.decode_bandwidth = 1e6;                              // decoding is free: fewer bytes, a faster pass
  const PassCost plain = target_pass(hw, m, p, 1, 0), fast = target_pass(hw, packed, q, 1, 0);
  EXPECT_LT(fast.seconds, plain.seconds);
  EXPECT_NEAR(fast.transfer_s / plain.transfer_s, r, 1e-9);
  hw.decode_bandwidth = 0.5;  // GB/s: slower than storage, so the decode stage sets the pace
  const PassCost slow = target_pass(hw, packed, q, 1, 0);
  double decoded = 0;
  for (uint64_t b : q.layer_decode_bytes) decoded += static_cast<double>(b);
  EXPECT_NEAR(slow.decode_s, decoded / 0.5e9, 1e-9);
  EXPECT_GT(slow.seconds, slow.decode_s);
  EXPECT_GT(slow.seconds, plain.seconds);
  // Quantized types are stored raw: nothing to gain.
  EXPECT_EQ(packed_ratio(DType::Q4_0), 1.0);
}

// ---- the L40 / Llama2-70B / Llama2-7B regime (Sequoia Table 5) ------------------

namespace {
Prediction l40_prediction(int max_budget) {
  const HardwareProfile hw = load_hardware(cfg("hardware/l40.toml"));
  const ModelDesc target = model_desc_from_config(load_model_config(cfg("models/llama2-70b.toml")));
  const ModelDesc draft = model_desc_from_config(load_model_config(cfg("models/llama2-7b.toml")));
  PredictOptions o;
  o.acceptance = spec::read_acceptance_file(cfg("acceptance/sequoia-70b-7b-like.json"));
  o.max_budget = max_budget;
  return predict(hw, target, draft, o);
}
}  // namespace

// Shared passes (plan --sequences): one sequence alone is Sequoia's choice
// again (the node budget rule gives it the whole pass); more sequences trade
// resident layers for KV and fill the pass with several trees; throughput
// grows with B, trees beat plain batching while the pass is cheap per token,
// and a B whose KV does not fit says so.
TEST(Predict, SharedPassesOnTheL40) {
  const HardwareProfile hw = load_hardware(cfg("hardware/l40.toml"));
  const ModelDesc target = model_desc_from_config(load_model_config(cfg("models/llama2-70b.toml")));
  ModelConfig dc = load_model_config(cfg("models/llama2-7b.toml"));
  dc.dtype = dc.embedding_dtype = DType::Q4_0;  // a 4-bit draft leaves room for the KV of many sequences
  const ModelDesc draft = model_desc_from_config(dc);
  PredictOptions o;
  o.acceptance = spec::read_acceptance_file(cfg("acceptance/sequoia-70b-7b-like.json"));
  o.ctx = 512;
  o.kv_type = DType::F16;
  o.sequences = {1, 4, 16, 64, 256};
  const Prediction p = predict(hw, target, draft, o);
  ASSERT_EQ(p.sequences.size(), 5u);
  const SequencesRow& one = p.sequences[0];
  EXPECT_NEAR(one.tree_tokens_per_s, p.sequoia.choice.tokens_per_second(), 0.05 * p.sequoia.choice.tokens_per_second());
  EXPECT_NEAR(one.plain_tokens_per_s, 1.0 / one.plain_pass_s, 1e-9);
  for (size_t i = 1; i < 4; ++i) {
    const SequencesRow& r = p.sequences[i];
    ASSERT_TRUE(r.does_not_fit.empty()) << r.does_not_fit;
    EXPECT_GT(r.tree_tokens_per_s, p.sequences[i - 1].tree_tokens_per_s) << "B = " << r.sequences;
    EXPECT_GT(r.tree_tokens_per_s, r.plain_tokens_per_s) << "B = " << r.sequences;
    EXPECT_LE(r.pass_tokens, o.max_budget);
    EXPECT_LE(r.resident_layers, p.sequences[i - 1].resident_layers);
  }
  EXPECT_LT(p.sequences[3].tree_nodes, p.sequences[1].tree_nodes);  // smaller trees when many share the pass
  EXPECT_NE(p.sequences[4].does_not_fit.find("256 sequences"), std::string::npos) << p.sequences[4].does_not_fit;
  EXPECT_NE(prediction_table(p).find("shared passes"), std::string::npos);
  EXPECT_EQ(prediction_json(p)["sequences"].size(), 5u);
  EXPECT_EQ(prediction_json(p)["kv_type"], "f16");  // the name --kv-type takes, not the dtype's "F16"
}

TEST(Predict, L40Llama70BInSequoiasRegime) {
  const Prediction p = l40_prediction(1024);
  // The acceptance vector yields 10-12 tokens per step at n = 768 (Sequoia: 9.8-12.2).
  const auto g = spec::sequoia_value_table(p.options.acceptance, 768, 32);
  EXPECT_GE(g[32][768], 10.0);
  EXPECT_LE(g[32][768], 12.5);
  // Trees of hundreds of nodes, deep; 0.3-0.9 s/token (Sequoia: 0.56-0.76).
  const Scenario& s = p.sequoia;
  EXPECT_GE(s.choice.budget, 256);
  EXPECT_GE(s.choice.depth, 12);
  EXPECT_GE(s.choice.seconds_per_token(), 0.3);
  EXPECT_LE(s.choice.seconds_per_token(), 0.9);
  // The pass is dominated by the weights crossing PCIe.
  EXPECT_GT(s.pass.transfer_s, 3 * s.pass.compute_s);
  // The leftover VRAM holds some layers; that helps, and helps plain offloading more.
  EXPECT_GT(s.plan.count(offload::Tier::kDevice), 5);
  EXPECT_EQ(p.sequoia_min.plan.count(offload::Tier::kDevice), 0);
  EXPECT_EQ(p.autoregressive_min.plan.count(offload::Tier::kDevice), 0);
  EXPECT_GT(p.autoregressive.plan.count(offload::Tier::kDevice), s.plan.count(offload::Tier::kDevice));
  EXPECT_LT(s.choice.seconds_per_token(), p.sequoia_min.choice.seconds_per_token());
  // Plain offloading with nothing resident: ~137 GB over 25 GB/s (DeepSpeed ZeRO-Inference: 5.5 s/token).
  EXPECT_NEAR(p.autoregressive_min.choice.seconds_per_token(), 5.5, 0.3);
  EXPECT_GT(p.autoregressive.choice.seconds_per_token() / s.choice.seconds_per_token(), 5.0);
  // Sequoia's own grid stops at 768: the same regime.
  const Prediction q = l40_prediction(768);
  EXPECT_EQ(q.sequoia.choice.budget, 768);
  EXPECT_GE(q.sequoia.choice.tokens, 10.0);
  EXPECT_GE(q.sequoia.choice.seconds_per_token(), 0.3);
  EXPECT_LE(q.sequoia.choice.seconds_per_token(), 0.9);
}

TEST(Predict, JsonHasTheFields) {
  const Prediction p = l40_prediction(512);
  const nlohmann::json j = nlohmann::json::parse(prediction_json(p).dump());
  for (const char* s : {"sequoia", "sequoia_min", "autoregressive", "autoregressive_min"}) {
    SCOPED_TRACE(s);
    ASSERT_TRUE(j.contains(s));
    for (const char* k : {"budget", "depth", "tokens_per_pass", "target_pass_s", "draft_s", "s_per_token",
                          "tokens_per_s", "memory_plan"})
      EXPECT_TRUE(j[s].contains(k)) << k;
    EXPECT_TRUE(j[s]["memory_plan"].contains("resident_layers"));
  }
  EXPECT_EQ(j["autoregressive"]["budget"], 1);
  EXPECT_DOUBLE_EQ(j["autoregressive"]["tokens_per_pass"].get<double>(), 1.0);
  EXPECT_GT(j["residency_gain_sequoia"].get<double>(), 1.0);
  EXPECT_EQ(j["t_n"].size(), 6u);  // n = 1 ... 512
  const std::string table = prediction_table(p);
  EXPECT_NE(table.find("sequoia_min"), std::string::npos);
  EXPECT_NE(table.find("speedup over plain offloading"), std::string::npos);
}

TEST(Predict, EveryProfileWithSmallModels) {
  // Target and draft share a vocabulary (predict() refuses a mismatch).
  const ModelDesc target = model_desc_from_config(load_model_config(cfg("models/smollm2-135m-f16.toml")));
  const ModelDesc draft = model_desc_from_config(load_model_config(cfg("models/smollm2-135m.toml")));
  PredictOptions o;
  o.acceptance = spec::default_acceptance(8);
  o.max_budget = 128;
  o.max_depth = 12;
  for (const char* f : {"l40", "a100-80gb-sxm", "h100-pcie", "rtx4090", "cpu-dev"}) {
    SCOPED_TRACE(f);
    const Prediction p = predict(load_hardware(cfg(std::string("hardware/") + f + ".toml")), target, draft, o);
    EXPECT_GT(p.sequoia.choice.tokens_per_second(), 0);
    EXPECT_GE(p.sequoia.choice.tokens_per_second(), p.autoregressive.choice.tokens_per_second() * 0.5);
  }
}

TEST(Predict, RejectsPastBeyondCtxAndMismatchedVocabularies) {
  const HardwareProfile hw = load_hardware(cfg("hardware/l40.toml"));
  const ModelDesc t70 = model_desc_from_config(load_model_config(cfg("models/llama2-70b.toml")));
  const ModelDesc d7 = model_desc_from_config(load_model_config(cfg("models/llama2-7b.toml")));
  const ModelDesc smol = model_desc_from_config(load_model_config(cfg("models/smollm2-135m.toml")));
  PredictOptions o;
  o.acceptance = spec::default_acceptance(8);
  o.max_budget = 16;
  o.ctx = 512;
  o.n_past = 513;
  EXPECT_EQ(error_of([&] { predict(hw, t70, d7, o); }),
            "--past 513 exceeds --ctx 512 (the KV cache holds at most ctx tokens)");
  o.n_past = 512;
  EXPECT_NO_THROW(predict(hw, t70, d7, o));
  const std::string e = error_of([&] { predict(hw, t70, smol, o); });
  EXPECT_EQ(e.rfind("the draft config's vocabulary (49152 tokens, ", 0), 0u) << e;
  EXPECT_NE(e.find(") is larger than the target's (32000 tokens, "), std::string::npos) << e;
  EXPECT_NE(e.find("the draft could propose tokens the target does not have"), std::string::npos) << e;
  // Issue 46: a draft with fewer rows of the same tokenizer (Qwen2.5-0.5B's
  // 151,936 under Qwen2.5-72B's 152,064) is planned; the larger one is not.
  const ModelDesc q72 = model_desc_from_config(load_model_config(cfg("models/qwen2.5-72b.toml")));
  const ModelDesc q05 = model_desc_from_config(load_model_config(cfg("models/qwen2.5-0.5b.toml")));
  EXPECT_NO_THROW(predict(hw, q72, q05, o));
  EXPECT_NE(error_of([&] { predict(hw, q05, q72, o); }).find("is larger than the target's"), std::string::npos);
}

TEST(Acceptance, FileErrors) {
  const std::string dir = ::testing::TempDir();
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir + name) << text;
    return dir + name;
  };
  EXPECT_EQ(error_of([&] { spec::read_acceptance_file(dir + "none.json"); }),
            dir + "none.json: cannot open the acceptance file");
  const std::string bad = write("bad.json", "{\"acc\": []}");
  EXPECT_EQ(error_of([&] { spec::read_acceptance_file(bad); }),
            bad + ": expected a JSON object with an \"acceptance\" array");
  const std::string up = write("up.json", "{\"acceptance\": [0.1, 0.5]}");
  EXPECT_EQ(error_of([&] { spec::read_acceptance_file(up); }),
            up + ": acceptance vector must be non-increasing (p_2 > p_1)");
  const std::string ok = write("ok.json", "{\"acceptance\": [0.5, 0.25]}");
  EXPECT_EQ(spec::read_acceptance_file(ok), (std::vector<double>{0.5, 0.25}));
}

// --tree auto's cache file names (profile_cache.h): each profile's name
// changes with exactly what decides it, and an unreadable model is an error.
TEST(ProfileCache, NamesChangeWithWhatDecidesTheProfile) {
  const auto dir = std::filesystem::temp_directory_path() / ("redwood_profile_cache_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string a = (dir / "target.gguf").string(), b = (dir / "draft.gguf").string();
  std::ofstream(a) << "target";
  std::ofstream(b) << "draft";
  const std::vector<std::string> files{a, b};
  SamplingParams t0, t6;
  t6.temperature = 0.6f;
  const std::string d = dir.string();
  EXPECT_EQ(acceptance_cache_path(d, files, t0), acceptance_cache_path(d, files, t0));
  EXPECT_NE(acceptance_cache_path(d, files, t0), acceptance_cache_path(d, files, t6));
  EXPECT_NE(acceptance_cache_path(d, files, t0), acceptance_cache_path(d, {b, a}, t0));
  EXPECT_EQ(acceptance_cache_path(d, files, t0).rfind(d + "/acceptance-", 0), 0u);
  // The names are pinned to their format, so that caches written by earlier
  // builds stay valid: XXH3-64 of "abs path|size|mtime s.ns;" per file, then
  // what decides the profile.
  auto identity = [](const std::string& f) {
    struct stat st {};
    EXPECT_EQ(::stat(f.c_str(), &st), 0);
    return std::filesystem::absolute(f).string() + "|" + std::to_string(st.st_size) + "|" +
           std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + ";";
  };
  auto hex = [](const std::string& s) {
    char h[17];
    std::snprintf(h, sizeof h, "%016llx", static_cast<unsigned long long>(XXH3_64bits(s.data(), s.size())));
    return std::string(h);
  };
  EXPECT_EQ(acceptance_cache_path(d, files, t0),
            d + "/acceptance-" + hex(identity(a) + identity(b) + "T=0;top_p=1;top_k=0|v2") + ".json");
  EXPECT_EQ(sampling_key(t6), "T=0.6;top_p=1;top_k=0");

  offload::MemoryPlan p1, p2;
  p1.layer_tier = {offload::Tier::kDevice, offload::Tier::kStorage};
  p2.layer_tier = {offload::Tier::kDevice, offload::Tier::kHost};
  p1.ring_slots = p2.ring_slots = 2;
  p1.slot_bytes = 4096;
  HardwareKey k{"cpu", "820MiB", "", 0, 2, 32, &p1};
  const std::string h1 = hardware_cache_path(d, files, k);
  EXPECT_EQ(h1, d + "/hardware-" + hex(identity(a) + identity(b) + "cpu|820MiB||0|2|32|02|2x4096|f32") + ".json");
  EXPECT_EQ(h1, hardware_cache_path(d, files, k));
  HardwareKey k2 = k;
  k2.plan = &p2;
  EXPECT_NE(h1, hardware_cache_path(d, files, k2));
  k2 = k;
  k2.max_pass = 64;
  EXPECT_NE(h1, hardware_cache_path(d, files, k2));
  k2 = k;
  k2.plan = nullptr;
  EXPECT_NE(h1, hardware_cache_path(d, files, k2));
  k2 = k;  // passes over q8_0 rows are timed apart from f32's
  k2.kv_type = "q8_0";
  EXPECT_NE(h1, hardware_cache_path(d, files, k2));

  const std::string y1 = dynamic_cache_path(d, files, t0, 32, 8, 16, "|greedy=0.5");
  EXPECT_EQ(y1, d + "/dynamic-" +
                    hex(identity(a) + identity(b) + "T=0;top_p=1;top_k=0|32|8|16|greedy=0.5|v3") + ".json");
  // The run's seed is not in it (the profile is measured with fixed seeds): a
  // new --seed used to re-measure 39 candidate trees before generating.
  SamplingParams seeded = t0;
  seeded.seed = 12345;
  EXPECT_EQ(y1, dynamic_cache_path(d, files, seeded, 32, 8, 16, "|greedy=0.5"));
  seeded.temperature = 0.6f;
  EXPECT_NE(y1, dynamic_cache_path(d, files, seeded, 32, 8, 16, "|greedy=0.5"));
  EXPECT_NE(y1, dynamic_cache_path(d, files, t0, 32, 8, 16, "|greedy=0.6"));
  EXPECT_NE(y1, dynamic_cache_path(d, files, t0, 32, 8, 8, "|greedy=0.5"));

  // A model file rewritten (another size) is another profile.
  const std::string before = acceptance_cache_path(d, files, t0);
  std::ofstream(a) << "target, requantized";
  EXPECT_NE(before, acceptance_cache_path(d, files, t0));

  std::filesystem::remove(a);
  EXPECT_NE(testutil::error_of([&] { acceptance_cache_path(d, files, t0); }).find(a + ": cannot stat"),
            std::string::npos);
  std::filesystem::remove_all(dir);
}
