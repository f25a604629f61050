// Speculative decoding on SmolLM2 with a self-draft: greedy identity for every
// tree shape (also under a tree file), and KV compaction equal to fresh runs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>

#include "kernels/backend.h"
#include "offload/plan.h"
#include "offload/streamer.h"
#include "src/engine/transformer.h"
#include "src/engine/weights.h"
#include "src/model/gguf_writer.h"
#include "src/model/model_desc.h"
#include "src/spec/speculate.h"
#include "src/util/error.h"
#include "tests/util/test_model.h"

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
    KvCache kv = target_->tf->make_cache(static_cast<int>(prompt.size()) + n + 1);
    std::vector<float> lg(target_->desc.hp.vocab);
    ChainBatch b(prompt, 0);
    target_->tf->forward(b.view(), kv, lg, LogitsRows::kLast);
    kv.commit_prefix(static_cast<int>(prompt.size()));
    std::vector<int32_t> out;
    for (int i = 0; i < n; ++i) {
      const int32_t t = argmax(lg), pos = kv.committed(), par = -1;
      out.push_back(t);
      target_->tf->forward(Batch{{&t, 1}, {&pos, 1}, {&par, 1}}, kv, lg, LogitsRows::kLast);
      kv.commit_prefix(1);
    }
    return out;
  }
  static std::vector<int32_t> speculative(const std::vector<int32_t>& prompt, int n, const spec::StaticTree& shape,
                                          Transformer* target = nullptr) {
    spec::SpecConfig cfg;
    cfg.shape = shape;
    spec::SpecDecoder dec(target ? *target : *target_->tf, *draft_->tf, target_->desc, draft_->desc, cfg,
                          static_cast<int>(prompt.size()) + n + shape.size() + 8);
    dec.start(prompt);
    std::vector<int32_t> out;
    while (static_cast<int>(out.size()) < n)
      for (int32_t t : dec.step()) out.push_back(t);
    out.resize(n);
    return out;
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

TEST_F(Spec, KvCompactionEqualsFreshRun) {
  spec::SpecConfig cfg;
  cfg.shape = spec::make_tree_shape("sequoia", 40, 6, "");
  const auto& prompt = kPrompts[1];
  spec::SpecDecoder dec(*target_->tf, *draft_->tf, target_->desc, draft_->desc, cfg, 256);
  dec.start(prompt);
  std::vector<int32_t> seq = prompt;  // committed + root
  const int V = target_->desc.hp.vocab;
  auto rel = [&](const std::vector<float>& a, const std::vector<float>& b) {
    double num = 0, den = 0;
    for (int i = 0; i < V; ++i) num += (a[i] - b[i]) * (a[i] - b[i]), den += b[i] * b[i];
    return std::sqrt(num / den);
  };
  for (int step = 0; step < 8; ++step) {
    for (int32_t t : dec.step()) seq.push_back(t);
    ASSERT_EQ(dec.root(), seq.back());
    // target: cached state + [root] vs a fresh run over the whole sequence
    for (Model* m : {target_, draft_}) {
      const bool is_t = m == target_;
      KvCache kv = is_t ? dec.target_cache() : dec.draft_cache();  // a copy
      const std::vector<int32_t> todo = is_t ? std::vector<int32_t>{dec.root()} : dec.draft_pending_tokens();
      ASSERT_EQ(kv.committed() + static_cast<int>(todo.size()), static_cast<int>(seq.size()));
      std::vector<float> got(V), fresh(V);
      ChainBatch b(todo, kv.committed());
      m->tf->forward(b.view(), kv, got, LogitsRows::kLast);
      KvCache f = m->tf->make_cache(static_cast<int>(seq.size()));
      ChainBatch all(seq, 0);
      m->tf->forward(all.view(), f, fresh, LogitsRows::kLast);
      EXPECT_LT(rel(got, fresh), 1e-4) << (is_t ? "target" : "draft") << " after step " << step;
    }
  }
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
}
