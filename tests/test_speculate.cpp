// Speculative decoding on SmolLM2 with a self-draft: greedy identity for every
// tree shape and every dynamic tree (DySpec, OPT-Tree, SpecExec), and KV
// compaction equal to fresh runs (also with pruned draft rows).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "kernels/backend.h"
#include "offload/placement.h"
#include "offload/streamer.h"
#include "src/engine/transformer.h"
#include "src/engine/weights.h"
#include "src/model/gguf_writer.h"
#include "src/model/model_desc.h"
#include "src/model/packed.h"
#include "src/engine/kv_pool.h"
#include "src/speculative/batch_generation.h"
#include "src/speculative/speculate.h"
#include "src/tokenizer/tokenizer.h"
#include "src/util/error.h"
#include "tests/util/test_model.h"
#include "tests/util/tiny_gguf.h"

using namespace redwood;

namespace {

using Model = testutil::TestModel;

class Spec : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (access(REDWOOD_TEST_MODEL, R_OK) != 0) return;
    draft_path_ = ::testing::TempDir() + "smollm2_draft_6L.gguf";
    make_self_draft(REDWOOD_TEST_MODEL, 6, draft_path_);
    target_ = new Model(REDWOOD_TEST_MODEL);
    draft_ = new Model(draft_path_);
  }
  static void TearDownTestSuite() {
    delete target_;
    delete draft_;
    target_ = draft_ = nullptr;
  }
  void SetUp() override {
    if (!target_) GTEST_SKIP() << "model missing: run tools/fetch-models.sh";
  }
  static std::vector<int32_t> greedy_reference(const std::vector<int32_t>& prompt, int n) {
    return testutil::greedy_alone(*target_->tf, prompt, n);
  }
  static std::vector<int32_t> speculative(const std::vector<int32_t>& prompt, int n, const spec::StaticTree& shape,
                                          Transformer* target = nullptr) {
    spec::SpecConfig cfg;
    cfg.shape = shape;
    return speculative(prompt, n, cfg, target);
  }
  static std::vector<int32_t> speculative(const std::vector<int32_t>& prompt, int n, const spec::SpecConfig& cfg,
                                          Transformer* target = nullptr, spec::SpecStats* stats = nullptr) {
    spec::SpecDecoder dec(target ? *target : *target_->tf, *draft_->tf, target_->desc, draft_->desc, cfg,
                          static_cast<int>(prompt.size()) + n + cfg.max_tree_nodes() + 8);
    dec.start(prompt);
    std::vector<int32_t> out;
    while (static_cast<int>(out.size()) < n)
      for (int32_t t : dec.step()) out.push_back(t);
    out.resize(n);
    if (stats) *stats = dec.stats();
    return out;
  }
  static spec::SpecConfig dynamic(const std::string& tree, int budget, int depth, float temperature = 0) {
    spec::TreeOptions o;
    o.tree = tree;
    o.budget = budget;
    o.depth = depth;
    SamplingParams sp;
    sp.temperature = temperature;
    return spec::make_spec_config(o, sp);
  }
  static inline Model* target_ = nullptr;
  static inline Model* draft_ = nullptr;
  static inline std::string draft_path_;
};

// Five prompts (token ids of SmolLM2's tokenizer for varied English/code/chat text).
const std::vector<std::vector<int32_t>> kPrompts = {
    {1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 520, 9531, 198},
    {11865, 2464, 253, 655, 28, 665, 436, 253, 1165, 2902, 567},
    {2063, 1391, 33, 28, 270, 2145, 198, 325, 1288, 253, 1232, 270},
    {504, 3575, 282, 4649, 314},
    {1, 4093, 198, 10180, 253, 1977, 8666, 563, 260, 2337, 30, 2, 198, 1, 520, 9531, 198},
};

}  // namespace

TEST_F(Spec, GreedyIdentityAllTreeShapes) {
  const int n = 128;
  // Trees of <= 8 nodes keep target passes on the memory-bound GEMV path (a CPU
  // pays compute per tree node); shapes still cover chain, k-ary and DP trees.
  const std::vector<std::string> shapes = {"chain:3", "kary:2x3", "sequoia"};
  for (size_t p = 0; p < kPrompts.size(); ++p) {
    const auto want = greedy_reference(kPrompts[p], n);
    for (const auto& s : shapes) {
      const auto shape = spec::make_tree_shape(s, 8, 4, "");
      EXPECT_EQ(speculative(kPrompts[p], n, shape), want) << "prompt " << p << " tree " << s;
    }
  }
}

// --kv-type: with both caches in F16 or BF16, speculative greedy output is
// still the plain greedy output of the same model (rows are rounded when
// written, so a tree pass and a chain see the same keys and values).
TEST_F(Spec, GreedyIdentityForEveryKvType) {
  const int n = 40;
  for (DType t : {DType::F16, DType::BF16}) {
    target_->tf->set_kv_type(t);
    draft_->tf->set_kv_type(t);
    for (size_t p = 0; p < 2; ++p) {
      const auto want = greedy_reference(kPrompts[p], n);
      for (const char* s : {"chain:3", "sequoia"})
        EXPECT_EQ(speculative(kPrompts[p], n, spec::make_tree_shape(s, 8, 4, "")), want)
            << dtype_name(t) << " prompt " << p << " tree " << s;
    }
  }
  target_->tf->set_kv_type(DType::F32);
  draft_->tf->set_kv_type(DType::F32);
  EXPECT_THROW(target_->tf->set_kv_type(DType::Q4_0), Error);
}

TEST_F(Spec, GreedyIdentityWithTheTargetStreamedUnderABudget) {
  // Device budget: the planner's minimum plus a third of the layers, the draft
  // resident and counted; the rest of the target streams from storage.
  const int n = 128;
  offload::RunShape shape;
  shape.ctx = 256;
  shape.max_tokens = 32;
  offload::Budgets b;
  b.device = 1ull << 40;
  const auto& L = target_->desc.layers;
  b.device = offload::plan_memory(target_->desc, &draft_->desc, b, shape).device_min + L.size() / 3 * L[0].bytes();
  const offload::MemoryPlan plan = offload::plan_memory(target_->desc, &draft_->desc, b, shape);
  ASSERT_GT(plan.count(offload::Tier::kStorage), 0);
  ASSERT_GT(plan.count(offload::Tier::kDevice), 0);
  offload::StreamedWeights w(target_->desc, plan);
  Transformer streamed(target_->desc, w, *target_->be);
  const auto tree = spec::make_tree_shape("sequoia", 8, 4, "");
  for (size_t p = 0; p < kPrompts.size(); ++p)
    EXPECT_EQ(speculative(kPrompts[p], n, tree, &streamed), greedy_reference(kPrompts[p], n)) << "prompt " << p;
  EXPECT_GT(w.totals().storage_bytes, 0u);
}

// A packed target (redwood pack; its matrices are Q4_1/Q8_0 chunks stored raw,
// its norms F32 chunks coded): speculative greedy output equals the unpacked
// model's plain greedy output, resident and streamed through the decode stage.
TEST_F(Spec, GreedyIdentityWithAPackedTarget) {
  const std::string packed = ::testing::TempDir() + "smollm2_" + std::to_string(getpid()) + ".rwpk";
  pack_model(REDWOOD_TEST_MODEL, packed);
  {
    Model p(packed);
    ASSERT_EQ(p.desc.format, ModelFormat::kPacked);
    const int n = 48;
    const auto tree = spec::make_tree_shape("sequoia", 8, 4, "");
    for (size_t i : {0, 2})
      EXPECT_EQ(speculative(kPrompts[i], n, tree, p.tf.get()), greedy_reference(kPrompts[i], n)) << "prompt " << i;
    offload::RunShape shape;
    shape.ctx = 256;
    shape.max_tokens = 32;
    offload::Budgets b;
    b.device = 1ull << 40;
    const auto& L = p.desc.layers;
    b.device = offload::plan_memory(p.desc, &draft_->desc, b, shape).device_min + L.size() / 3 * L[0].bytes();
    const offload::MemoryPlan plan = offload::plan_memory(p.desc, &draft_->desc, b, shape);
    ASSERT_GT(plan.count(offload::Tier::kStorage), 0);
    offload::StreamedWeights w(p.desc, plan);
    Transformer streamed(p.desc, w, *p.be);
    for (size_t i : {1, 3})
      EXPECT_EQ(speculative(kPrompts[i], n, tree, &streamed), greedy_reference(kPrompts[i], n)) << "prompt " << i;
    EXPECT_GT(w.totals().storage_bytes, 0u);
  }
  std::remove(packed.c_str());
}

TEST_F(Spec, GreedyIdentityDynamicTrees) {
  const int n = 32;
  // Small budgets keep the CPU's target passes cheap (two prompts: the
  // static shapes above cover all five); depth 6 lets the dynamic trees go
  // deeper than wide.
  std::vector<std::pair<std::string, spec::SpecConfig>> cfgs = {
      {"dyspec", dynamic("dyspec", 8, 6)},
      {"dyspec threshold", dynamic("dyspec", 10, 6)},
      {"opt-tree", dynamic("opt-tree", 8, 6)},
      {"specexec", dynamic("specexec", 8, 6)},
  };
  cfgs[1].second.tree.threshold = 0.05;
  cfgs[2].second.tree.delta = 0.1;
  cfgs[3].second.tree.width = 3;
  for (size_t p : {0, 2}) {
    const auto want = greedy_reference(kPrompts[p], n);
    for (const auto& [name, cfg] : cfgs) {
      spec::SpecStats st;
      EXPECT_EQ(speculative(kPrompts[p], n, cfg, nullptr, &st), want) << "prompt " << p << " tree " << name;
      ASSERT_EQ(st.tree_nodes.size(), static_cast<size_t>(st.target_passes));
      for (int32_t x : st.tree_nodes) {
        EXPECT_GE(x, 1);
        EXPECT_LE(x, cfg.tree.budget) << name;
      }
      // The 6-layer self-draft is weak, but its best guesses do get accepted
      // (a tree built from the wrong distributions would sit at 1.0).
      EXPECT_GT(double(st.emitted) / st.target_passes, 1.02) << name;
      if (cfg.tree.threshold == 0 && cfg.tree.kind == spec::TreeKind::kDySpec) {  // the heap variant fills the budget
        EXPECT_EQ(*std::min_element(st.tree_nodes.begin(), st.tree_nodes.end()), cfg.tree.budget);
      }
    }
  }
}

TEST_F(Spec, DySpecSamplingRunsWithTheSequoiaVerifier) {
  // T > 0: siblings without replacement, Sequoia residuals; the heap variant
  // always verifies a full tree. (Losslessness itself: test_tree_policy.)
  auto cfg = dynamic("dyspec", 12, 6, 0.8f);
  ASSERT_EQ(cfg.verifier, spec::Verifier::kSequoia);
  cfg.sampling.seed = 7;
  spec::SpecStats st;
  const auto out = speculative(kPrompts[0], 24, cfg, nullptr, &st);
  EXPECT_EQ(out.size(), 24u);
  for (int32_t x : st.tree_nodes) EXPECT_EQ(x, 12);
  EXPECT_LE(st.draft_tokens, static_cast<int64_t>(st.target_passes) * 12);
}

// Both caches after each step hold exactly the committed sequence: compare the
// next-token logits from the compacted caches with fresh runs. Opt-tree and
// specexec leave draft rows of pruned nodes in the block; dyspec (heap) runs
// nodes through the draft out of level order.
static void check_kv_compaction(testutil::TestModel* target, testutil::TestModel* draft, const spec::SpecConfig& cfg,
                                const std::string& name) {
  const auto& prompt = kPrompts[1];
  spec::SpecDecoder dec(*target->tf, *draft->tf, target->desc, draft->desc, cfg, 256);
  dec.start(prompt);
  std::vector<int32_t> seq = prompt;  // committed + root
  const int V = target->desc.hp.vocab;
  auto rel = [&](const std::vector<float>& a, const std::vector<float>& b) {
    double num = 0, den = 0;
    for (int i = 0; i < V; ++i) num += (a[i] - b[i]) * (a[i] - b[i]), den += b[i] * b[i];
    return std::sqrt(num / den);
  };
  for (int step = 0; step < 8; ++step) {
    for (int32_t t : dec.step()) seq.push_back(t);
    ASSERT_EQ(dec.root(), seq.back());
    // target: cached state + [root] vs a fresh run over the whole sequence
    for (testutil::TestModel* m : {target, draft}) {
      const bool is_t = m == target;
      KvCache kv = is_t ? dec.target_cache() : dec.draft_cache();  // a copy
      const std::vector<int32_t> todo = is_t ? std::vector<int32_t>{dec.root()} : dec.draft_pending_tokens();
      ASSERT_EQ(kv.committed() + static_cast<int>(todo.size()), static_cast<int>(seq.size()));
      std::vector<float> got(V), fresh(V);
      ChainBatch b(todo, kv.committed());
      m->tf->forward(b.view(), kv, got, LogitsRows::kLast);
      KvCache f = m->tf->make_cache(static_cast<int>(seq.size()));
      ChainBatch all(seq, 0);
      m->tf->forward(all.view(), f, fresh, LogitsRows::kLast);
      EXPECT_LT(rel(got, fresh), 1e-4) << name << ": " << (is_t ? "target" : "draft") << " after step " << step;
    }
  }
}

TEST_F(Spec, KvCompactionEqualsFreshRun) {
  spec::SpecConfig cfg;
  cfg.shape = spec::make_tree_shape("sequoia", 40, 6, "");
  check_kv_compaction(target_, draft_, cfg, "sequoia");
}

TEST_F(Spec, KvCompactionEqualsFreshRunDynamicTrees) {
  auto opt = dynamic("opt-tree", 16, 6);
  opt.tree.delta = 0.05;
  check_kv_compaction(target_, draft_, opt, "opt-tree");
  check_kv_compaction(target_, draft_, dynamic("specexec", 16, 6), "specexec");
  check_kv_compaction(target_, draft_, dynamic("dyspec", 16, 6), "dyspec");
}

TEST_F(Spec, MismatchedVocabularyAndBadVerifierAreErrors) {
  spec::SpecConfig cfg;
  cfg.shape = spec::make_tree_shape("chain:2", 0, 0, "");
  cfg.verifier = spec::Verifier::kSequoia;  // needs temperature > 0
  EXPECT_THROW(spec::SpecDecoder(*target_->tf, *draft_->tf, target_->desc, draft_->desc, cfg, 64), Error);
  ModelDesc other = draft_->desc;
  other.tokenizer.tokens[100] = "something-else";
  cfg.verifier = spec::Verifier::kGreedy;
  EXPECT_THROW(spec::SpecDecoder(*target_->tf, *draft_->tf, target_->desc, other, cfg, 64), Error);
  EXPECT_THROW(spec::make_tree_shape("kary:3", 0, 0, ""), Error);
  EXPECT_THROW(spec::make_tree_shape("bogus", 0, 0, ""), Error);
  // A dynamic tree with a verifier that assumes another child law.
  auto dy = dynamic("dyspec", 8, 4, 0.7f);
  dy.verifier = spec::Verifier::kSpecInfer;
  EXPECT_THROW(spec::SpecDecoder(*target_->tf, *draft_->tf, target_->desc, draft_->desc, dy, 64), Error);
  auto ot = dynamic("opt-tree", 8, 4, 0.7f);
  ot.verifier = spec::Verifier::kSequoia;
  EXPECT_THROW(spec::SpecDecoder(*target_->tf, *draft_->tf, target_->desc, draft_->desc, ot, 64), Error);
}

// Trees in shared passes (BatchGenerator with a draft) on the real model: the
// 6-block self-draft is often wrong, so accepted paths that are not the
// pass's first rows (a later child accepted) are compacted per sequence in
// the shared pool; every prompt's greedy tokens equal its plain run alone.
TEST_F(Spec, TreesInSharedPassesMatchGreedyAlone) {
  set_cpu_batch_invariant(true);
  const int n = 24;
  std::vector<std::vector<int32_t>> want;
  const auto tok = Tokenizer::create(target_->desc.tokenizer);
  for (const auto& p : kPrompts) {
    want.push_back(greedy_reference(p, n));
    auto& w = want.back();
    w.erase(std::find(w.begin(), w.end(), tok->eos()), w.end());  // generation stops at end of text
  }
  spec::TreeOptions o;
  o.tree = "sequoia";
  o.budget = 8;
  o.depth = 4;
  spec::BatchDraft draft;
  draft.draft = draft_->tf.get();
  draft.target_desc = &target_->desc;
  draft.draft_desc = &draft_->desc;
  draft.config = spec::make_spec_config(o, SamplingParams{});
  draft.acceptance = spec::default_acceptance(16);
  const auto& hp = target_->desc.hp;
  for (auto [seqs, pass] : {std::pair{3, 20}, std::pair{5, 40}}) {
    KvPool pool(*target_->be, hp.n_layers, hp.n_kv_heads * hp.head_dim, 64, 16, 128, target_->tf->kv_type());
    spec::BatchGenerator gen(*target_->tf, *tok, pool, {seqs, pass}, &draft);
    for (const auto& p : kPrompts) {
      spec::GenerationRequest r;
      r.prompt = p;
      r.max_tokens = n;
      r.stop = {};
      gen.submit(r);
    }
    std::vector<std::vector<int32_t>> got(kPrompts.size());
    while (!gen.idle())
      for (auto& d : gen.step()) got[d.ticket - 1] = d.generation.tokens;
    for (size_t i = 0; i < kPrompts.size(); ++i)
      EXPECT_EQ(got[i], want[i]) << "sequences " << seqs << ", pass " << pass << ", prompt " << i;
    EXPECT_GT(gen.stats().tree_steps, 0);
    EXPECT_EQ(pool.free_blocks(), pool.n_blocks());
  }
  set_cpu_batch_invariant(false);
}

// Issue 46: a draft with fewer vocabulary rows than its target (Qwen2.5-0.5B's
// 151,936 under Qwen2.5-72B's 152,064; the extra rows are padding its
// tokenizer never produces). Tiny random models: the target has 320 rows and 3
// blocks, the draft is the same model cut to its first 2 blocks and first 300
// rows, so drafts are often accepted, and the target's greedy choice is
// sometimes a row the draft lacks (it is then the bonus token, which the draft
// must still read). Greedy speculative output equals the target alone for
// static and dynamic trees and in shared passes (BatchGenerator); a prompt
// holding such ids works too.
TEST(SpecVocabulary, ADraftWithFewerRowsIsLosslessGreedy) {
  set_cpu_batch_invariant(true);  // every pass size on the same GEMM: ties cannot flip
  testutil::TinyShape ts;
  ts.vocab = 320, ts.layers = 3, ts.seed = 46;
  testutil::TinyShape ds = ts;
  ds.layers = 2, ds.rows = 300;
  const std::string dir = ::testing::TempDir();
  testutil::write_tiny_llama(dir + "vocab_target_320.gguf", ts);
  testutil::write_tiny_llama(dir + "vocab_draft_300.gguf", ds);
  Model target(dir + "vocab_target_320.gguf"), draft(dir + "vocab_draft_300.gguf");
  ASSERT_EQ(target.V(), 320);
  ASSERT_EQ(draft.V(), 300);
  const int n = 40;
  auto reference = [&](const std::vector<int32_t>& prompt) { return testutil::greedy_alone(*target.tf, prompt, n); };
  const std::vector<std::vector<int32_t>> prompts = {
      {1, 270, 280, 290, 262}, {1, 300, 5, 310, 319, 290}, {1, 100, 200, 299, 150, 40, 41}};
  int past_draft_rows = 0;
  int64_t accepted = 0;
  for (const char* tree : {"chain:3", "kary:2x2", "sequoia", "opt-tree", "specexec", "dyspec"}) {
    spec::TreeOptions o;
    o.tree = tree;
    o.budget = 8;
    o.depth = 4;
    const spec::SpecConfig cfg = spec::make_spec_config(o, SamplingParams{});
    for (size_t p = 0; p < prompts.size(); ++p) {
      const std::vector<int32_t> want = reference(prompts[p]);
      spec::SpecDecoder dec(*target.tf, *draft.tf, target.desc, draft.desc, cfg,
                            static_cast<int>(prompts[p].size()) + n + cfg.max_tree_nodes() + 8);
      dec.start(prompts[p]);
      std::vector<int32_t> got;
      while (static_cast<int>(got.size()) < n)
        for (int32_t t : dec.step()) got.push_back(t);
      got.resize(n);
      EXPECT_EQ(got, want) << tree << ", prompt " << p;
      for (int32_t t : want) past_draft_rows += t >= draft.V();
      const auto& a = dec.stats().accepted_by_depth;
      for (size_t k = 1; k < a.size(); ++k) accepted += a[k] * static_cast<int64_t>(k);
    }
  }
  // Shared passes (BatchGenerator: the draft's passes run by the generator, DraftCache::kCaller).
  const auto tok = Tokenizer::create(target.desc.tokenizer);
  spec::TreeOptions o;
  o.tree = "sequoia";
  o.budget = 8;
  o.depth = 4;
  spec::BatchDraft bd;
  bd.draft = draft.tf.get();
  bd.target_desc = &target.desc;
  bd.draft_desc = &draft.desc;
  bd.config = spec::make_spec_config(o, SamplingParams{});
  bd.acceptance = spec::default_acceptance(16);
  const auto& hp = target.desc.hp;
  KvPool pool(*target.be, hp.n_layers, hp.n_kv_heads * hp.head_dim, 64, 16, 128, target.tf->kv_type());
  spec::BatchGenerator gen(*target.tf, *tok, pool, {3, 24}, &bd);
  for (const auto& p : prompts) {
    spec::GenerationRequest r;
    r.prompt = p;
    r.max_tokens = n;
    r.stop = {};
    gen.submit(r);
  }
  std::vector<std::vector<int32_t>> got(prompts.size());
  while (!gen.idle())
    for (auto& d : gen.step()) got[d.ticket - 1] = d.generation.tokens;
  for (size_t p = 0; p < prompts.size(); ++p) {
    std::vector<int32_t> want = reference(prompts[p]);
    want.erase(std::find(want.begin(), want.end(), tok->eos()), want.end());  // generation stops at end of text
    EXPECT_EQ(got[p], want) << "shared passes, prompt " << p;
  }
  EXPECT_GT(gen.stats().tree_steps, 0);
  set_cpu_batch_invariant(false);
  EXPECT_GT(past_draft_rows, 0) << "the target never chose a row the draft lacks: the test misses its case";
  EXPECT_GT(accepted, 0) << "no drafted token was accepted";
}
