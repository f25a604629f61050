// The runtime layer (src/runtime): Session setup and its errors, the one
// generation loop's stop strings and cancellation through a Session, and the
// --tree auto choice from synthetic profiles. Tiny random GGUF models only
// (tests/util/tiny_gguf.h): no model file needed.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "src/runtime/session.h"
#include "src/runtime/tree_auto.h"
#include "src/util/error.h"
#include "tests/util/errors.h"
#include "tests/util/tiny_gguf.h"

namespace redwood::runtime {
namespace {

std::string tiny_model(const std::string& name, int vocab = 288, uint32_t seed = 1, int layers = 2) {
  const std::string path = ::testing::TempDir() + "runtime_" + name + ".gguf";
  testutil::TinyShape s;
  s.vocab = vocab;
  s.seed = seed;
  s.layers = layers;
  testutil::write_tiny_llama(path, s);
  return path;
}

SessionConfig config(const std::string& target, const std::string& draft = "") {
  SessionConfig c;
  c.run.model = target;
  c.draft = draft;
  return c;
}

// The setting a SetupError names, or "" when the session opens.
std::string setup_key(const SessionConfig& c, std::string* what = nullptr) {
  try {
    Session s(c);
  } catch (const SetupError& e) {
    if (what) *what = e.what();
    return e.key();
  }
  return "";
}

TEST(SessionSetup, ATreeNeedsADraft) {
  SessionConfig c = config(tiny_model("t"));
  c.tree_given = true;
  std::string what;
  EXPECT_EQ(setup_key(c, &what), "tree");
  EXPECT_NE(what.find("needs a draft"), std::string::npos) << what;
}

TEST(SessionSetup, AHardwareProfileIsOnlyForTreeAuto) {
  SessionConfig c = config(tiny_model("t"), tiny_model("d", 288, 2, 1));
  c.hardware_profile = "hw.json";
  EXPECT_EQ(setup_key(c), "tree");
  c.tree.tree = "auto";
  EXPECT_EQ(setup_key(c), "");
}

TEST(SessionSetup, TheDraftsVocabularyMustBeTheTargets) {
  std::string what;
  EXPECT_EQ(setup_key(config(tiny_model("t"), tiny_model("other_vocab", 320, 2, 1)), &what), "draft");
  EXPECT_NE(what.find("vocabulary differs"), std::string::npos) << what;
  EXPECT_EQ(setup_key(config(tiny_model("t"), tiny_model("d", 288, 2, 1))), "");
}

TEST(SessionSetup, BadTreeSettingsAreRefusedBeforeAnyModelLoads) {
  // The models do not exist: the settings are checked first.
  SessionConfig c = config("/nonexistent/t.gguf", "/nonexistent/d.gguf");
  c.tree.tree = "no-such-tree";
  EXPECT_EQ(setup_key(c), "tree");
  c.tree.tree = "sequoia";
  c.tree.budget = 0;
  EXPECT_EQ(setup_key(c), "tree");
  c.tree.tree = "auto";
  EXPECT_EQ(setup_key(c), "tree");  // budget 0 as a cap
  c.tree.budget = 64;
  c.tree.width = 4;  // auto chooses the parameters itself
  std::string what;
  EXPECT_EQ(setup_key(c, &what), "tree");
  EXPECT_NE(what.find("chooses the tree"), std::string::npos) << what;
  c.tree.width.reset();
  c.prefill_chunk = 0;
  EXPECT_EQ(setup_key(c), "tree");
}

TEST(SessionSetup, AMissingModelIsAnErrorNamingIt) {
  const std::string what = testutil::error_of([] { Session s(config(tiny_model("t"), "/nonexistent/draft.gguf")); });
  EXPECT_NE(what.find("/nonexistent/draft.gguf"), std::string::npos) << what;
}

TEST(SessionSetup, BudgetsThatCannotHoldTheRunAreAMemoryError) {
  SessionConfig c = config(tiny_model("t"));
  c.run.device_mem = "1KiB";
  Session s(c);
  EXPECT_THROW(s.check_plan(256, 64), SetupError);
  try {
    s.check_plan(256, 64);
  } catch (const SetupError& e) {
    EXPECT_EQ(e.key(), "memory");
  }
  EXPECT_THROW((void)s.generate({}), Error);  // not loaded
}

// Session::prepare_prompt: every prompt check in one wording, the caller's
// settings named in it (generate's flags, a job's keys).
std::string prompt_error(const Session& s, const PromptText& p, const PromptRoom& room) {
  try {
    (void)s.prepare_prompt(p, room);
  } catch (const PromptError& e) {
    return e.what();
  }
  return "";
}

TEST(SessionPrompt, TooManyBytesAreRefusedBeforeTokenizing) {
  const Session s(config(tiny_model("t")));
  const PromptText text{std::string(64 * 16 + 1, 'x'), {}, false, {}, "--prompt"};
  EXPECT_EQ(prompt_error(s, text, {16, "--ctx", 4, "--max-tokens", false}),
            "--prompt is 1025 bytes; --ctx 16 allows at most 64 bytes per token (1024), so it is not tokenized");
  const PromptText line{text.text, {}, false, {}, "id 7: the prompt"};
  EXPECT_EQ(prompt_error(s, line, {16, "memory.ctx =", 4, "max_tokens", true}),
            "id 7: the prompt is 1025 bytes; memory.ctx = 16 allows at most 64 bytes per token (1024), so it is not "
            "tokenized");
  EXPECT_EQ(prompt_error(s, {std::string(64 * 16, 'x'), {}, false, {}, "--prompt"}, {16, "--ctx", 0, "", false})
                .find("bytes;"),
            std::string::npos);  // at the bound: tokenized (and then too long for 16 positions)
}

TEST(SessionPrompt, TheRoomCountsMaxTokensAndTheTreeWhereTheContextHoldsIt) {
  const Session s(config(tiny_model("t")));
  const PromptText ids{"", {}, false, {5, 6, 7}, "--prompt-tokens"};
  EXPECT_EQ(prompt_error(s, ids, {10, "--ctx", 7, "--max-tokens", false}), "");
  EXPECT_EQ(prompt_error(s, ids, {10, "--ctx", 8, "--max-tokens", false}),
            "the prompt has 3 tokens; with --max-tokens 8 it exceeds --ctx 10");
  // A job's memory.ctx holds the tree's room too (+ 2, also without a draft).
  EXPECT_EQ(prompt_error(s, ids, {12, "memory.ctx =", 7, "max_tokens", true}), "");
  EXPECT_EQ(prompt_error(s, ids, {11, "memory.ctx =", 7, "max_tokens", true}),
            "the prompt has 3 tokens; with max_tokens 7 it exceeds memory.ctx = 11");
  EXPECT_EQ(s.prepare_prompt(ids, {0, "--ctx", 1000, "--max-tokens", false}), (std::vector<int32_t>{5, 6, 7}));
}

TEST(SessionPrompt, TokenIdsOutsideTheVocabularyAndAMissingChatTemplateAreRefused) {
  const Session s(config(tiny_model("t")));
  EXPECT_EQ(prompt_error(s, {"", {}, false, {1, 288}, "--prompt-tokens"}, {0, "--ctx", 4, "--max-tokens", false}),
            "--prompt-tokens: id 288 out of range");
  const std::string what = testutil::error_of([&] { s.check_chat_template("--chat"); });
  EXPECT_EQ(what.rfind("--chat needs a chat template, but ", 0), 0u) << what;
}

TEST(SessionSetup, TreeNodesCountTheTreeOrTheAutoCap) {
  const std::string t = tiny_model("t"), d = tiny_model("d", 288, 2, 1);
  EXPECT_EQ(Session(config(t)).tree_nodes(), 0);
  SessionConfig c = config(t, d);
  c.tree.tree = "chain:3";
  EXPECT_EQ(Session(c).tree_nodes(), 4);  // the root and three drafted tokens
  c.tree.tree = "auto";
  c.tree.budget = 24;
  EXPECT_EQ(Session(c).tree_nodes(), 24);
}

// ---- the one generation loop through a Session -----------------------------------

struct Loop : ::testing::Test {
  static void SetUpTestSuite() {
    target = new std::string(tiny_model("loop_t", 288, 7, 2));
    draft = new std::string(tiny_model("loop_d", 288, 8, 1));
  }
  static void TearDownTestSuite() {
    delete target;
    delete draft;
  }
  static Session open(bool speculative) {
    SessionConfig c = config(*target, speculative ? *draft : "");
    c.tree.tree = "chain:3";
    Session s(c);
    s.load(256, 64, nullptr);
    return s;
  }
  static spec::GenerationRequest request(const std::vector<int32_t>& prompt, int n) {
    spec::GenerationRequest r;
    r.prompt = prompt;
    r.max_tokens = n;
    return r;
  }
  static std::string* target;
  static std::string* draft;
};
std::string* Loop::target = nullptr;
std::string* Loop::draft = nullptr;

TEST_F(Loop, PlainAndSpeculativeGreedyAgree) {
  const std::vector<int32_t> prompt = {1, 40, 41, 42, 43};
  Session plain = open(false), spec = open(true);
  const spec::Generation a = plain.generate(request(prompt, 24)), b = spec.generate(request(prompt, 24));
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.text, b.text);
  EXPECT_FALSE(a.spec);
  ASSERT_TRUE(b.spec);
  EXPECT_GT(b.spec->target_passes, 0);
}

TEST_F(Loop, AStopStringCutsTheTextAndStreamsOnlyWhatStays) {
  const std::vector<int32_t> prompt = {1, 50, 51, 52};
  for (const bool speculative : {false, true}) {
    Session s = open(speculative);
    const spec::Generation full = s.generate(request(prompt, 40));
    if (full.finish != "length" || full.text.size() < 12) GTEST_SKIP() << "the tiny model's text is too short";
    // A stop string from the middle of the text: the text ends just before its first occurrence.
    const std::string stop = full.text.substr(full.text.size() / 2, 3);
    const size_t at = full.text.find(stop);
    spec::GenerationRequest req = request(prompt, 40);
    req.stop = {"never there \x01", stop};
    std::string streamed;
    const spec::Generation g = s.generate(req, [&](std::string_view piece) { streamed += piece; });
    EXPECT_EQ(g.finish, "stop");
    EXPECT_EQ(g.text, full.text.substr(0, at)) << (speculative ? "speculative" : "plain");
    EXPECT_EQ(streamed, g.text);
    EXPECT_LE(g.tokens.size(), full.tokens.size());
    EXPECT_EQ(std::vector<int32_t>(full.tokens.begin(), full.tokens.begin() + static_cast<long>(g.tokens.size())),
              g.tokens);
  }
}

TEST_F(Loop, CancelledAfterKStepsFinishesCancelledWithTheTextSoFar) {
  const std::vector<int32_t> prompt = {1, 60, 61};
  for (const bool speculative : {false, true}) {
    Session s = open(speculative);
    const spec::Generation full = s.generate(request(prompt, 40));
    for (const int k : {0, 1, 3}) {
      int polls = 0;
      std::string streamed;
      const spec::Generation g = s.generate(
          request(prompt, 40), [&](std::string_view piece) { streamed += piece; }, [&] { return polls++ >= k; });
      EXPECT_EQ(g.finish, "cancelled") << k;
      EXPECT_EQ(polls, k + 1);
      if (speculative) {
        EXPECT_GE(static_cast<int>(g.tokens.size()), k);  // at least one per step
      } else {
        EXPECT_EQ(static_cast<int>(g.tokens.size()), k);  // one token per step
      }
      EXPECT_EQ(std::vector<int32_t>(full.tokens.begin(), full.tokens.begin() + static_cast<long>(g.tokens.size())),
                g.tokens);
      EXPECT_EQ(streamed, g.text);
      EXPECT_EQ(full.text.compare(0, g.text.size(), g.text), 0);
    }
  }
}

// ---- --tree auto from synthetic profiles -------------------------------------------

spec::AcceptanceProfile greedy_profile(std::vector<double> a) {
  spec::AcceptanceProfile p;
  spec::AcceptanceVector v;
  v.verifier = spec::Verifier::kGreedy;
  v.width = static_cast<int>(a.size());
  v.acceptance = a;
  p.vectors.push_back(v);
  p.acceptance = a;
  p.temperature = 0;
  return p;
}

// Target passes cost `base` seconds up to `flat` nodes, then grow; draft levels are cheap.
planner::MeasuredProfile hardware(double base, int flat, double draft_level) {
  planner::MeasuredProfile hw;
  for (int n = 1; n <= 64; n *= 2) {
    hw.target_pass.x.push_back(n);
    hw.target_pass.seconds.push_back(n <= flat ? base : base * n / flat);
  }
  for (int w = 1; w <= 64; w *= 2) {
    hw.draft_level.x.push_back(w);
    hw.draft_level.seconds.push_back(draft_level);
  }
  return hw;
}

SamplingParams greedy() {
  SamplingParams s;
  s.temperature = 0;
  return s;
}

TEST(TreeAuto, AGoodDraftAndFlatPassCostsChooseASequoiaTree) {
  const AutoTreeResult r =
      choose_tree(greedy_profile({0.8, 0.1, 0.05}), hardware(1.0, 64, 0.01), {}, greedy(), 64, 8, nullptr, "acc");
  ASSERT_TRUE(r.config);
  EXPECT_EQ(r.choice.rfind("sequoia budget ", 0), 0u) << r.choice;
  EXPECT_EQ(r.config->verifier, spec::Verifier::kGreedy);
  EXPECT_GT(r.best.tokens, 1.5);
  EXPECT_LT(r.best.seconds_per_token(), r.autoregressive.seconds_per_token());
  EXPECT_LE(r.best.budget, 64);
  EXPECT_LE(r.best.depth, 8);
}

TEST(TreeAuto, AUselessDraftOrCostlyDraftPassesChoosePlainDecoding) {
  const AutoTreeResult useless =
      choose_tree(greedy_profile({0.001, 0.0, 0.0}), hardware(1.0, 64, 0.01), {}, greedy(), 64, 8, nullptr, "acc");
  EXPECT_FALSE(useless.config);
  EXPECT_EQ(useless.choice, "autoregressive");
  // The draft costs as much as the target: no tree pays.
  const AutoTreeResult costly =
      choose_tree(greedy_profile({0.5, 0.1}), hardware(1.0, 1, 1.0), {}, greedy(), 64, 8, nullptr, "acc");
  EXPECT_FALSE(costly.config);
}

TEST(TreeAuto, TheCapsBoundTheTree) {
  const AutoTreeResult r =
      choose_tree(greedy_profile({0.9, 0.05}), hardware(1.0, 64, 0.001), {}, greedy(), 8, 3, nullptr, "acc");
  ASSERT_TRUE(r.config);
  EXPECT_LE(r.best.budget, 8);
  EXPECT_LE(r.best.depth, 3);
  EXPECT_LE(r.config->max_tree_nodes(), 8);
}

TEST(TreeAuto, AProfileMeasuredInAnotherSamplingModeIsAnError) {
  SamplingParams sampled;
  sampled.temperature = 0.7f;
  const std::string what = testutil::error_of([&] {
    (void)choose_tree(greedy_profile({0.8}), hardware(1.0, 64, 0.01), {}, sampled, 64, 8, nullptr, "acc.json");
  });
  EXPECT_NE(what.find("acc.json"), std::string::npos) << what;
  EXPECT_NE(what.find("temperature"), std::string::npos) << what;
}

TEST(TreeAuto, RankOneAcceptanceComesFromTheVerifiersVector) {
  const spec::AcceptanceProfile p = greedy_profile({0.7, 0.2});
  EXPECT_DOUBLE_EQ(*rank1_acceptance(p, spec::Verifier::kGreedy, true), 0.7);
  EXPECT_FALSE(rank1_acceptance(p, spec::Verifier::kTargetSample, true));
  spec::AcceptanceProfile bare;  // {"acceptance": [...]}: the default verifier of the mode
  bare.acceptance = {0.6};
  EXPECT_DOUBLE_EQ(*rank1_acceptance(bare, spec::Verifier::kSequoia, false), 0.6);
  EXPECT_FALSE(rank1_acceptance(bare, spec::Verifier::kGreedy, false));
}

}  // namespace
}  // namespace redwood::runtime
