// Continuous batching (BatchGenerator): every request's tokens, text and
// finish equal generate()'s for it alone, greedy and sampled, whatever shares
// its passes, with sequences arriving, prefilling in chunks and leaving out of
// order; the pool ends empty; bad requests are refused at submit.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/backend.h"
#include "src/engine/kv_pool.h"
#include "src/engine/sampler.h"
#include "src/speculative/batch_generation.h"
#include "src/speculative/generation.h"
#include "src/speculative/sequoia_dp.h"
#include "src/speculative/speculate.h"
#include "src/tokenizer/tokenizer.h"
#include "src/util/error.h"
#include "tests/util/test_model.h"
#include "tests/util/tiny_gguf.h"

using namespace redwood;

namespace {

struct BatchInvariant {
  BatchInvariant() { set_cpu_batch_invariant(true); }
  ~BatchInvariant() { set_cpu_batch_invariant(false); }
};

struct Fixture {
  std::string path;
  std::unique_ptr<testutil::TestModel> m;
  std::unique_ptr<Tokenizer> tok;
  explicit Fixture(DType type) {
    path = ::testing::TempDir() + "batchgen_tiny_" + std::string(dtype_name(type)) + ".gguf";
    testutil::TinyShape s;
    s.type = type;
    testutil::write_tiny_llama(path, s);
    m = std::make_unique<testutil::TestModel>(path);
    tok = Tokenizer::create(m->desc.tokenizer);
  }
};

struct Req {
  std::vector<int32_t> prompt;
  spec::GenerationRequest r;
};

// Requests of varied prompt lengths, lengths, temperatures, seeds and stop
// strings (token ids >= 3: no BOS/EOS in prompts).
std::vector<Req> requests(int vocab) {
  std::vector<Req> out;
  for (int i = 0; i < 9; ++i) {
    Req q;
    const int len = 1 + (i * 7) % 23;
    for (int j = 0; j < len; ++j) q.prompt.push_back(3 + (i * 31 + j * 17) % (vocab - 3));
    q.r.max_tokens = 3 + (i * 5) % 14;
    q.r.sampling.temperature = i % 3 == 0 ? 0.0f : 0.9f;
    q.r.sampling.top_k = i % 4 == 1 ? 40 : 0;
    q.r.sampling.seed = 1000 + static_cast<uint64_t>(i);
    if (i == 4) q.r.stop = {"b"};
    q.r.prefill_chunk = 512;
    out.push_back(std::move(q));
  }
  return out;
}

// Each request run alone by generate() (greedy: at temperature 0), the
// reference every shared run is compared with; sets each request's prompt.
std::vector<spec::Generation> solo_runs(Fixture& f, std::vector<Req>& reqs, bool greedy) {
  std::vector<spec::Generation> solo;
  for (auto& q : reqs) {
    if (greedy) q.r.sampling.temperature = 0;
    q.r.prompt = q.prompt;
    solo.push_back(spec::generate(*f.m->tf, *f.tok, q.r, nullptr));
  }
  return solo;
}

// Steps gen until idle; each request's generation by ticket (tickets 1..n).
// A run that does not end within 10,000 steps is a failure.
std::vector<std::optional<spec::Generation>> run_until_idle(spec::BatchGenerator& gen, size_t n) {
  std::vector<std::optional<spec::Generation>> got(n);
  for (int steps = 0; !gen.idle(); ++steps) {
    if (steps == 10000) {
      ADD_FAILURE() << "the batch did not end in 10000 steps";
      break;
    }
    for (auto& d : gen.step()) got[d.ticket - 1] = std::move(d.generation);
  }
  return got;
}

void expect_same(const spec::Generation& a, const spec::Generation& b, const std::string& what) {
  EXPECT_EQ(a.tokens, b.tokens) << what;
  EXPECT_EQ(a.text, b.text) << what;
  EXPECT_EQ(a.finish, b.finish) << what;
}

}  // namespace

class BatchGeneration : public ::testing::TestWithParam<DType> {};

TEST_P(BatchGeneration, EveryRequestEqualsItsRunAlone) {
  BatchInvariant inv;
  Fixture f(GetParam());
  auto reqs = requests(f.m->V());
  const std::vector<spec::Generation> solo = solo_runs(f, reqs, /*greedy=*/false);
  // The control that the comparison can fail: requests differ from each other.
  EXPECT_NE(solo[1].tokens, solo[2].tokens);

  // Small passes (prompts cut in chunks, decode tokens crowding them out), few
  // sequences at a time (churn), small blocks; then roomy settings.
  for (auto [seqs, pass, block_rows] : {std::tuple{3, 5, 4}, std::tuple{16, 64, 16}, std::tuple{2, 1, 8}}) {
    KvPool pool(*f.m->be, f.m->desc.hp.n_layers, f.m->desc.hp.n_kv_heads * f.m->desc.hp.head_dim, 40, block_rows,
                256, f.m->tf->kv_type());
    spec::BatchGenerator gen(*f.m->tf, *f.tok, pool, {seqs, pass});
    std::vector<std::string> streamed(reqs.size());
    std::vector<uint64_t> tickets;
    for (size_t i = 0; i < reqs.size(); ++i)
      tickets.push_back(gen.submit(reqs[i].r, [&, i](std::string_view s) { streamed[i] += s; }));
    const std::vector<std::optional<spec::Generation>> got = run_until_idle(gen, reqs.size());
    const std::string shape = "sequences " + std::to_string(seqs) + ", pass " + std::to_string(pass) +
                              ", blocks of " + std::to_string(block_rows);
    for (size_t i = 0; i < reqs.size(); ++i) {
      ASSERT_TRUE(got[i].has_value()) << shape << ", request " << i;
      expect_same(*got[i], solo[i], shape + ", request " + std::to_string(i));
      EXPECT_EQ(streamed[i], got[i]->text) << shape;
    }
    EXPECT_EQ(pool.live_sequences(), 0);
    EXPECT_EQ(pool.free_blocks(), pool.n_blocks());
    EXPECT_LE(gen.stats().max_in_flight, seqs);
    if (seqs > 2) {
      EXPECT_GT(gen.stats().max_in_flight, 1) << "passes were shared";
    }
  }
}

TEST_P(BatchGeneration, ASeedChangesASampledRequestAndNothingElse) {
  BatchInvariant inv;
  Fixture f(GetParam());
  auto reqs = requests(f.m->V());
  KvPool pool(*f.m->be, f.m->desc.hp.n_layers, f.m->desc.hp.n_kv_heads * f.m->desc.hp.head_dim, 64, 8, 256,
              f.m->tf->kv_type());
  auto run = [&](const std::vector<Req>& rs) {
    spec::BatchGenerator gen(*f.m->tf, *f.tok, pool, {8, 32});
    for (const auto& q : rs) gen.submit(q.r);
    std::vector<spec::Generation> out(rs.size());
    while (!gen.idle())
      for (auto& d : gen.step()) out[d.ticket - 1] = std::move(d.generation);
    return out;
  };
  for (auto& q : reqs) q.r.prompt = q.prompt, q.r.max_tokens = 16, q.r.stop.clear();
  const auto base = run(reqs);
  auto changed = reqs;
  changed[1].r.sampling.seed += 77;  // request 1 samples (T = 0.9)
  const auto other = run(changed);
  EXPECT_NE(other[1].tokens, base[1].tokens);  // negative control: the seed is used
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (i != 1) {
      EXPECT_EQ(other[i].tokens, base[i].tokens) << "request " << i;
    }
  }
}

TEST_P(BatchGeneration, CancelEndsARequestAtTheNextStep) {
  BatchInvariant inv;
  Fixture f(GetParam());
  auto reqs = requests(f.m->V());
  KvPool pool(*f.m->be, f.m->desc.hp.n_layers, f.m->desc.hp.n_kv_heads * f.m->desc.hp.head_dim, 64, 8, 256,
              f.m->tf->kv_type());
  spec::BatchGenerator gen(*f.m->tf, *f.tok, pool, {4, 16});
  for (auto& q : reqs) q.r.prompt = q.prompt, q.r.max_tokens = 50, q.r.stop.clear(), q.r.sampling.temperature = 0.9f;
  std::vector<uint64_t> t;
  for (const auto& q : reqs) t.push_back(gen.submit(q.r));
  (void)gen.step();
  gen.cancel(t[0]);  // in flight
  gen.cancel(t[8]);  // still queued
  std::vector<std::string> finish(reqs.size());
  while (!gen.idle())
    for (auto& d : gen.step()) finish[d.ticket - 1] = d.generation.finish;
  EXPECT_EQ(finish[0], "cancelled");
  EXPECT_EQ(finish[8], "cancelled");
  EXPECT_NE(finish[1], "cancelled");
  EXPECT_EQ(pool.free_blocks(), pool.n_blocks());
}

TEST_P(BatchGeneration, RequestsThatCanNeverRunAreRefusedAtSubmit) {
  Fixture f(GetParam());
  KvPool pool(*f.m->be, f.m->desc.hp.n_layers, f.m->desc.hp.n_kv_heads * f.m->desc.hp.head_dim, 4, 8, 24,
              f.m->tf->kv_type());
  spec::BatchGenerator gen(*f.m->tf, *f.tok, pool, {4, 16});
  const std::vector<int32_t> p = {5, 6, 7};
  spec::GenerationRequest r;
  r.prompt = p;
  r.max_tokens = 30;  // 3 + 30 + 1 positions > 24
  EXPECT_THROW(gen.submit(r), Error);
  r.max_tokens = 0;
  EXPECT_THROW(gen.submit(r), Error);
  r.prompt = {};
  r.max_tokens = 4;
  EXPECT_THROW(gen.submit(r), Error);
  EXPECT_TRUE(gen.idle());
  EXPECT_THROW(spec::BatchGenerator(*f.m->tf, *f.tok, pool, {0, 16}), Error);
}

// Trees in shared passes: at temperature 0 every request's output equals its
// plain run alone, whether the draft agrees with the target (a self-draft:
// long accepted paths, compacted per sequence in the pool) or not (another
// model: root-only acceptances), with fixed trees, trees shrunk to fit the
// pass, and the node budget rule choosing by a pass cost curve.
TEST_P(BatchGeneration, TreesInSharedPassesEqualPlainRunsAlone) {
  BatchInvariant inv;
  Fixture f(GetParam());
  testutil::TinyShape other;
  other.type = GetParam();
  other.seed = 7;
  const std::string other_path = ::testing::TempDir() + "batchgen_tiny_other_" + std::string(dtype_name(GetParam())) + ".gguf";
  testutil::write_tiny_llama(other_path, other);
  testutil::TestModel other_model(other_path);
  auto reqs = requests(f.m->V());
  const std::vector<spec::Generation> solo = solo_runs(f, reqs, /*greedy=*/true);  // speculation must not change a token
  spec::TreeOptions o;
  o.tree = "sequoia";
  o.budget = 6;
  o.depth = 4;
  for (const bool self : {true, false}) {
    testutil::TestModel& dm = self ? *f.m : other_model;
    spec::BatchDraft draft;
    draft.draft = dm.tf.get();
    draft.target_desc = &f.m->desc;
    draft.draft_desc = &dm.desc;
    draft.config = spec::make_spec_config(o, SamplingParams{});
    draft.acceptance = spec::default_acceptance(16);
    // A pass that costs what its bytes cost up to 8 tokens (trees come free), then per token.
    const std::function<double(int)> curve = [](int n) { return 1.0 + 0.2 * std::max(0, n - 8); };
    for (auto [seqs, pass, curved] :
         {std::tuple{3, 18, false}, std::tuple{4, 6, false}, std::tuple{16, 64, true}, std::tuple{1, 6, false}}) {
      draft.pass_seconds = curved ? curve : std::function<double(int)>{};
      // With t(n), the draft's passes priced too (levels and prompts' catch-up).
      draft.draft_level_seconds =
          curved ? std::function<double(int)>([](int w) { return 0.05 + 0.01 * w; }) : std::function<double(int)>{};
      KvPool pool(*f.m->be, f.m->desc.hp.n_layers, f.m->desc.hp.n_kv_heads * f.m->desc.hp.head_dim, 60, 8, 256,
                  f.m->tf->kv_type());
      spec::BatchGenerator gen(*f.m->tf, *f.tok, pool, {seqs, pass}, &draft);
      std::vector<std::string> streamed(reqs.size());
      for (size_t i = 0; i < reqs.size(); ++i)
        gen.submit(reqs[i].r, [&, i](std::string_view s) { streamed[i] += s; });
      const std::vector<std::optional<spec::Generation>> got = run_until_idle(gen, reqs.size());
      // Each sequence's draft passes are the levels of its trees and the
      // catch-up passes that carried its prompt; shared passes carry several
      // sequences' at once.
      int64_t own_draft_passes = 0;
      for (auto& g : got)
        if (g && g->spec) own_draft_passes += g->spec->draft_passes;
      const std::string shape = std::string(self ? "self-draft" : "other draft") + ", sequences " +
                                std::to_string(seqs) + ", pass " + std::to_string(pass) + (curved ? ", t(n)" : "");
      for (size_t i = 0; i < reqs.size(); ++i) {
        ASSERT_TRUE(got[i].has_value()) << shape << ", request " << i;
        expect_same(*got[i], solo[i], shape + ", request " + std::to_string(i));
        EXPECT_EQ(streamed[i], got[i]->text) << shape;
        ASSERT_TRUE(got[i]->spec.has_value()) << shape;
      }
      EXPECT_EQ(pool.live_sequences(), 0) << shape;
      EXPECT_EQ(pool.free_blocks(), pool.n_blocks()) << shape;
      const auto& st = gen.stats();
      EXPECT_LE(st.pass_tokens, st.passes * pass) << shape << ": a pass exceeded the node budget";
      // Prompts of up to 23 tokens: a new sequence's prompt reaches the draft
      // in chunks, so no draft pass is larger than a target pass (what the
      // planner counts for the draft).
      EXPECT_LE(st.max_pass_tokens, pass) << shape;
      EXPECT_LE(st.max_draft_pass_tokens, pass) << shape << ": a draft pass exceeded pass_tokens";
      EXPECT_GT(st.max_draft_pass_tokens, 0) << shape;
      EXPECT_GT(st.tree_steps, 0) << shape << ": no sequence ever had a tree";
      EXPECT_GT(st.draft_passes, 0) << shape;
      if (seqs > 1 && !curved) {
        EXPECT_LT(st.draft_passes, own_draft_passes) << shape << ": the sequences' draft passes never shared one";
      } else if (seqs == 1) {
        // One sequence: every draft pass, catch-up ones included, is its own.
        EXPECT_EQ(st.draft_passes, own_draft_passes) << shape;
      }
      if (pass < 23) {
        EXPECT_GT(st.draft_catch_up_passes, 0) << shape;
      }
      if (self) {
        // The self-draft is always right: trees cut the passes below one per token.
        EXPECT_GT(st.emitted, st.decode_tokens) << shape;
      }
    }
  }
}

// A chain as deep as it is long, with an acceptance vector (its smaller trees
// are the DP's, whose depth cannot exceed their size): the generator builds
// and each request's greedy text is its solo text.
TEST_P(BatchGeneration, ChainAsDeepAsItIsLongSharesPasses) {
  BatchInvariant inv;
  Fixture f(GetParam());
  auto reqs = requests(f.m->V());
  const std::vector<spec::Generation> solo = solo_runs(f, reqs, /*greedy=*/true);
  spec::TreeOptions o;
  o.tree = "chain:4";
  spec::BatchDraft draft;
  draft.draft = f.m->tf.get();
  draft.target_desc = &f.m->desc;
  draft.draft_desc = &f.m->desc;
  draft.config = spec::make_spec_config(o, SamplingParams{});
  ASSERT_EQ(draft.config.shape.max_depth(), draft.config.shape.size());
  draft.acceptance = spec::default_acceptance(16);
  KvPool pool(*f.m->be, f.m->desc.hp.n_layers, f.m->desc.hp.n_kv_heads * f.m->desc.hp.head_dim, 60, 8, 256,
              f.m->tf->kv_type());
  spec::BatchGenerator gen(*f.m->tf, *f.tok, pool, {3, 7}, &draft);
  for (auto& q : reqs) gen.submit(q.r);
  const std::vector<std::optional<spec::Generation>> got = run_until_idle(gen, reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_TRUE(got[i].has_value());
    expect_same(*got[i], solo[i], "chain:4, request " + std::to_string(i));
  }
  EXPECT_LE(gen.stats().max_draft_pass_tokens, 7) << "a draft pass exceeded pass_tokens";
}

// --kv-type q8_0 (issue 44): with Q8_0 KV rows (each row quantized on its
// own when written, so a row's bytes do not depend on what shares its pass)
// every request equals its run alone, sampled and greedy, in shared passes
// plain and with trees (a self-draft: long accepted paths compacted in the
// pool; another model: root-only acceptances), and a single sequence's tree
// passes (SpecDecoder) equal plain greedy decoding. Tiny models of head_dim
// 32 (Q8_0 needs whole blocks per head).
TEST(BatchGenerationQ8, SharedPassesAndTreesOverQ8RowsEqualRunsAlone) {
  BatchInvariant inv;
  const std::string dir = ::testing::TempDir();
  testutil::TinyShape s;
  s.type = DType::F16;
  s.heads = 2, s.kv_heads = 1;  // head_dim 32
  testutil::TinyShape o = s;
  o.seed = 7;
  testutil::write_tiny_llama(dir + "batchgen_q8kv.gguf", s);
  testutil::write_tiny_llama(dir + "batchgen_q8kv_other.gguf", o);
  testutil::TestModel m(dir + "batchgen_q8kv.gguf"), other(dir + "batchgen_q8kv_other.gguf");
  ASSERT_EQ(m.desc.hp.head_dim, 32);
  m.tf->set_kv_type(DType::Q8_0);
  other.tf->set_kv_type(DType::Q8_0);
  const auto tok = Tokenizer::create(m.desc.tokenizer);
  const auto& hp = m.desc.hp;
  auto reqs = requests(m.V());
  for (auto& q : reqs) q.r.prompt = q.prompt;
  auto solo = [&](bool greedy) {
    std::vector<spec::Generation> out;
    for (auto q : reqs) {
      if (greedy) q.r.sampling.temperature = 0;
      out.push_back(spec::generate(*m.tf, *tok, q.r, nullptr));
    }
    return out;
  };
  const std::vector<spec::Generation> sampled = solo(false), greedy = solo(true);
  EXPECT_NE(sampled[1].tokens, sampled[2].tokens);
  auto shared = [&](spec::BatchDraft* d, int seqs, int pass, bool greedy_reqs) {
    KvPool pool(*m.be, hp.n_layers, hp.n_kv_heads * hp.head_dim, 60, 8, 256, m.tf->kv_type());
    EXPECT_EQ(pool.type(), DType::Q8_0);
    EXPECT_EQ(pool.bytes(), 2ull * hp.n_layers * 60 * 8 * 34);
    spec::BatchGenerator gen(*m.tf, *tok, pool, {seqs, pass}, d);
    for (auto q : reqs) {
      if (greedy_reqs) q.r.sampling.temperature = 0;
      gen.submit(q.r);
    }
    auto got = run_until_idle(gen, reqs.size());
    EXPECT_GT(gen.stats().max_in_flight, 1) << "passes were shared";
    if (d) {
      EXPECT_GT(gen.stats().tree_steps, 0);
    }
    EXPECT_EQ(pool.free_blocks(), pool.n_blocks());
    return got;
  };
  for (auto [seqs, pass] : {std::pair{3, 5}, std::pair{16, 64}}) {
    const auto got = shared(nullptr, seqs, pass, false);
    for (size_t i = 0; i < reqs.size(); ++i) {
      ASSERT_TRUE(got[i].has_value());
      expect_same(*got[i], sampled[i], "plain, sequences " + std::to_string(seqs) + ", request " + std::to_string(i));
    }
  }
  spec::TreeOptions t;
  t.tree = "sequoia";
  t.budget = 6;
  t.depth = 4;
  for (testutil::TestModel* dm : {&m, &other}) {
    spec::BatchDraft draft;
    draft.draft = dm->tf.get();
    draft.target_desc = &m.desc;
    draft.draft_desc = &dm->desc;
    draft.config = spec::make_spec_config(t, SamplingParams{});
    draft.acceptance = spec::default_acceptance(16);
    const auto got = shared(&draft, 4, 18, true);
    for (size_t i = 0; i < reqs.size(); ++i) {
      ASSERT_TRUE(got[i].has_value());
      expect_same(*got[i], greedy[i], std::string(dm == &m ? "self-draft" : "other draft") + ", request " +
                                          std::to_string(i));
    }
  }
  // One sequence's tree passes: speculative greedy equals plain greedy.
  const spec::SpecConfig cfg = spec::make_spec_config(t, SamplingParams{});
  for (size_t p = 0; p < 3; ++p) {
    const int n = 24;
    const std::vector<int32_t> want = testutil::greedy_alone(*m.tf, reqs[p].prompt, n);
    spec::SpecDecoder dec(*m.tf, *other.tf, m.desc, other.desc, cfg,
                          static_cast<int>(reqs[p].prompt.size()) + n + cfg.max_tree_nodes() + 8);
    dec.start(reqs[p].prompt);
    std::vector<int32_t> got;
    while (static_cast<int>(got.size()) < n)
      for (int32_t x : dec.step()) got.push_back(x);
    got.resize(n);
    EXPECT_EQ(got, want) << "prompt " << p;
  }
}

// A tree's draft time: one pass per level with children, of that level's width.
TEST(SplitTreeNodes, TreeDraftSecondsCountsLevelsWithChildren) {
  spec::StaticTree t;  // root, two children, one grandchild
  t.parent = {-1, 0, 1, 0};
  t.depth = {0, 1, 2, 1};
  t.rank = {0, 0, 0, 1};
  EXPECT_DOUBLE_EQ(spec::tree_draft_seconds(t, [](int w) { return 1.0 + w; }), 2.0 + 3.0);
}

// Trees drafted together share a pass per level: a chain of 3 nodes and a
// root with two children cost c(1 + 2) then c(1), not c(1) + c(1) + c(2).
TEST(SplitTreeNodes, SharedDraftSecondsSumsLevelWidths) {
  const std::vector<std::vector<int>> widths = {{}, {1}, {1, 1}, {1, 2}};  // trees of 1..4 nodes
  const auto c = [](int w) { return 1.0 + w; };
  EXPECT_DOUBLE_EQ(spec::shared_draft_seconds(widths, {3, 4}, c), (1.0 + 2) + (1.0 + 3));
  EXPECT_DOUBLE_EQ(spec::shared_draft_seconds(widths, {1, 1}, c), 0.0);
  EXPECT_DOUBLE_EQ(spec::shared_draft_seconds(widths, {2}, c), 2.0);
  spec::StaticTree t;  // root, two children, one grandchild
  t.parent = {-1, 0, 1, 0};
  t.depth = {0, 1, 2, 1};
  t.rank = {0, 0, 0, 1};
  EXPECT_EQ(spec::level_widths(t), (std::vector<int>{1, 2}));
}

// The catch-up passes before the trees' first level: passes of up to cap
// tokens before the roots while more than cap are pending in all.
TEST(SplitTreeNodes, CatchUpDraftSecondsCountsThePasses) {
  std::vector<int> widths;
  const auto c = [&](int w) {
    widths.push_back(w);
    return 1.0 + 0.01 * w;
  };
  EXPECT_DOUBLE_EQ(spec::catch_up_draft_seconds(64, 3, 64, c), 0.0);  // fits the first level's pass
  EXPECT_TRUE(widths.empty());
  EXPECT_DOUBLE_EQ(spec::catch_up_draft_seconds(100, 2, 64, c), 1.64);  // one pass of 64: 36 left
  EXPECT_EQ(widths, (std::vector<int>{64}));
  widths.clear();
  EXPECT_DOUBLE_EQ(spec::catch_up_draft_seconds(200, 3, 64, c), 3 * 1.64);  // 200 -> 136 -> 72 -> 8
  EXPECT_EQ(widths, (std::vector<int>{64, 64, 64}));
  widths.clear();
  // Roots alone past the cap (more trees than the cap: never in a generator,
  // whose cap holds every root): nothing to run before them.
  EXPECT_DOUBLE_EQ(spec::catch_up_draft_seconds(70, 70, 64, c), 0.0);
  EXPECT_DOUBLE_EQ(spec::catch_up_draft_seconds(75, 70, 64, c), 1.05);  // the 5 before the roots
  EXPECT_EQ(widths, (std::vector<int>{5}));
}

// The node budget rule: a flat pass cost gives every sequence the largest
// tree that fits; a cost per token beyond the first gives plain batching; no
// cost curve splits the room evenly.
TEST(SplitTreeNodes, FollowsThePassCost) {
  const std::vector<double> f = {1.0, 1.8, 2.4, 2.8, 3.0};  // expected tokens of trees of 1..5 nodes
  const auto flat = [](int) { return 1.0; };
  EXPECT_EQ(spec::split_tree_nodes(3, 3, 100, f, flat), (std::vector<int>{5, 5, 5}));
  EXPECT_EQ(spec::split_tree_nodes(3, 3, 4, f, flat), (std::vector<int>{3, 2, 2}));
  const auto per_token = [](int n) { return 1.0 * n; };
  EXPECT_EQ(spec::split_tree_nodes(2, 2, 100, f, per_token), (std::vector<int>{1, 1}));
  EXPECT_EQ(spec::split_tree_nodes(2, 2, 5, f, {}), (std::vector<int>{4, 3}));
  EXPECT_TRUE(spec::split_tree_nodes(0, 0, 5, f, flat).empty());
  // The draft's time counts: trees that cost more to draft than they save stay small.
  const auto draft = [](const std::vector<int>& ks) { return 0.1 * (ks[0] - 1); };
  EXPECT_EQ(spec::split_tree_nodes(1, 1, 100, f, flat, draft), (std::vector<int>{4}));  // 2.8 / 1.3 beats 3.0 / 1.4
  const auto dear = [](const std::vector<int>& ks) { return ks[0] > 1 ? 5.0 : 0.0; };
  EXPECT_EQ(spec::split_tree_nodes(2, 2, 100, f, flat, dear), (std::vector<int>{1, 1}));
  // A pass of 8 tokens costs 1, then 0.2 per token: one sequence gets a tree,
  // sixteen share the pass plainly.
  const auto knee = [](int n) { return 1.0 + 0.2 * std::max(0, n - 8); };
  EXPECT_EQ(spec::split_tree_nodes(1, 1, 64, f, knee), (std::vector<int>{5}));
  EXPECT_EQ(spec::split_tree_nodes(16, 16, 48, f, knee), std::vector<int>(16, 1));
}

INSTANTIATE_TEST_SUITE_P(Types, BatchGeneration, ::testing::Values(DType::F16, DType::Q4_1),
                         [](const auto& p) { return std::string(dtype_name(p.param)); });

// Issue 46: sliding-window attention (Mistral 7B v0.1) past the window, here 8
// and 3 positions (trees of depth 4 reach past 3: the window then masks tree
// ancestors too, by their positions). Tiny random models: the target has 3
// blocks, the draft is its first 2 (the same window). Greedy speculative
// output equals the target's plain greedy output for static and dynamic
// trees; several sequences in shared passes (BatchGenerator, plain and with
// trees) equal their runs alone; and the window is real: the same weights
// without it decode otherwise. Also a window of 3 on some layers only (the
// target's first and last, the draft's first: attention.sliding_window_pattern),
// which decodes otherwise than the window on every layer.
TEST(SpecWindow, TreesAndSharedPassesPastTheWindowMatchGreedyAlone) {
  set_cpu_batch_invariant(true);  // every pass size on the same GEMM: ties cannot flip
  const std::string dir = ::testing::TempDir();
  const int n = 40;
  const std::vector<std::vector<int32_t>> prompts = {
      {1, 270, 280, 250, 262}, {1, 100, 5, 200, 150, 40, 41, 17, 19, 23, 29, 31}, {1, 66}};
  for (uint32_t window : {8u, 3u, 103u}) {
    const bool some_layers = window > 100;  // 103: a window of 3 on some layers
    if (some_layers) window -= 100;
    const std::string w = std::to_string(window) + (some_layers ? "-some-layers" : "");
    testutil::TinyShape ts;
    ts.layers = 3, ts.seed = 47, ts.sliding_window = window;
    if (some_layers) ts.window_pattern = {1, 0, 1};
    testutil::TinyShape ds = ts, fs = ts, es = ts;
    ds.layers = 2;
    if (some_layers) ds.window_pattern = {1, 0};
    fs.sliding_window = 0;
    fs.window_pattern.clear();
    es.window_pattern.clear();
    testutil::write_tiny_llama(dir + "swa_target_" + w + ".gguf", ts);
    testutil::write_tiny_llama(dir + "swa_draft_" + w + ".gguf", ds);
    testutil::write_tiny_llama(dir + "swa_full.gguf", fs);
    testutil::TestModel target(dir + "swa_target_" + w + ".gguf"), draft(dir + "swa_draft_" + w + ".gguf"),
        full(dir + "swa_full.gguf");
    ASSERT_EQ(target.desc.hp.sliding_window, static_cast<int>(window));
    ASSERT_EQ(target.desc.hp.mixed_window(), some_layers);
    auto reference = [&](testutil::TestModel& m, const std::vector<int32_t>& prompt) {
      return testutil::greedy_alone(*m.tf, prompt, n);
    };
    std::vector<std::vector<int32_t>> want;
    for (const auto& p : prompts) want.push_back(reference(target, p));
    EXPECT_NE(want[1], reference(full, prompts[1])) << "window " << w << ": the window changed nothing";
    if (some_layers) {
      testutil::write_tiny_llama(dir + "swa_every_" + w + ".gguf", es);
      testutil::TestModel every(dir + "swa_every_" + w + ".gguf");
      EXPECT_NE(want[1], reference(every, prompts[1])) << "window " << w << ": the layers changed nothing";
    }
    int64_t accepted = 0;
    for (const char* tree : {"chain:3", "kary:2x2", "sequoia", "opt-tree", "specexec", "dyspec"}) {
      spec::TreeOptions o;
      o.tree = tree;
      o.budget = 8;
      o.depth = 4;
      const spec::SpecConfig cfg = spec::make_spec_config(o, SamplingParams{});
      for (size_t p = 0; p < prompts.size(); ++p) {
        spec::SpecDecoder dec(*target.tf, *draft.tf, target.desc, draft.desc, cfg,
                              static_cast<int>(prompts[p].size()) + n + cfg.max_tree_nodes() + 8);
        dec.start(prompts[p]);
        std::vector<int32_t> got;
        while (static_cast<int>(got.size()) < n)
          for (int32_t t : dec.step()) got.push_back(t);
        got.resize(n);
        EXPECT_EQ(got, want[p]) << "window " << w << ", " << tree << ", prompt " << p;
        const auto& a = dec.stats().accepted_by_depth;
        for (size_t k = 1; k < a.size(); ++k) accepted += a[k] * static_cast<int64_t>(k);
      }
    }
    EXPECT_GT(accepted, 0) << "window " << w << ": no drafted token was accepted";
    // Shared passes: plain, then trees (the draft's passes run by the generator).
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
    for (spec::BatchDraft* d : {static_cast<spec::BatchDraft*>(nullptr), &bd}) {
      KvPool pool(*target.be, hp.n_layers, hp.n_kv_heads * hp.head_dim, 64, 16, 128, target.tf->kv_type());
      spec::BatchGenerator gen(*target.tf, *tok, pool, {3, 24}, d);
      for (const auto& p : prompts) {
        spec::GenerationRequest r;
        r.prompt = p;
        r.max_tokens = n;
        r.stop = {};
        gen.submit(r);
      }
      std::vector<std::vector<int32_t>> got(prompts.size());
      while (!gen.idle())
        for (auto& done : gen.step()) got[done.ticket - 1] = done.generation.tokens;
      for (size_t p = 0; p < prompts.size(); ++p) {
        std::vector<int32_t> cut = want[p];
        cut.erase(std::find(cut.begin(), cut.end(), tok->eos()), cut.end());  // generation stops at end of text
        EXPECT_EQ(got[p], cut) << "window " << w << ", shared passes" << (d ? " with trees" : "") << ", prompt " << p;
      }
      EXPECT_GT(gen.stats().max_in_flight, 1) << "passes were shared";
      if (d) {
        EXPECT_GT(gen.stats().tree_steps, 0);
      }
    }
  }
  set_cpu_batch_invariant(false);
}
