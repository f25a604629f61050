// The runtime layer (src/runtime): Session setup and its errors, the one
// generation loop's stop strings and cancellation through a Session, and the
// --tree auto choice from synthetic profiles. Tiny random GGUF models only
// (tests/util/tiny_gguf.h): no model file needed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "src/app/inspect.h"
#include "src/app/job_runner.h"
#include "src/engine/sampler.h"
#include "src/planner/measured.h"
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

std::string tiny_vocab_model(const std::string& name, const testutil::TinyShape& s) {
  const std::string path = ::testing::TempDir() + "runtime_vocab_" + name + ".gguf";
  testutil::write_tiny_llama(path, s);
  return path;
}

TEST(SessionSetup, TheDraftsVocabularyMustBeTheTargets) {
  std::string what;
  // A larger draft could propose ids the target lacks.
  EXPECT_EQ(setup_key(config(tiny_model("t"), tiny_model("other_vocab", 320, 2, 1)), &what), "draft");
  EXPECT_NE(what.find("is larger than the target's (288 rows"), std::string::npos) << what;
  EXPECT_EQ(setup_key(config(tiny_model("t"), tiny_model("d", 288, 2, 1))), "");
  // Issue 46: a smaller draft whose token list is a prefix of the target's
  // (320 rows over 288) pairs; so do equal lists under more target rows.
  EXPECT_EQ(setup_key(config(tiny_model("other_vocab", 320, 2, 1), tiny_model("d", 288, 2, 1)), &what), "") << what;
  testutil::TinyShape hf_target, hf_draft;
  hf_target.vocab = 320, hf_target.listed = 290;
  hf_draft.vocab = 320, hf_draft.rows = 300, hf_draft.listed = 290;
  EXPECT_EQ(setup_key(config(tiny_vocab_model("hf_t", hf_target), tiny_vocab_model("hf_d", hf_draft)), &what), "")
      << what;
  // A genuinely different tokenizer is refused, naming the first token that differs.
  testutil::TinyShape other = hf_draft;
  other.word = "\xe2\x96\x81v";
  EXPECT_EQ(setup_key(config(tiny_vocab_model("hf_t", hf_target), tiny_vocab_model("other_words", other)), &what),
            "draft");
  EXPECT_NE(what.find("differs from the target's ("), std::string::npos) << what;
  EXPECT_NE(what.find("): token 285 is '\xe2\x96\x81v285' in the draft, '\xe2\x96\x81w285' in the target"),
            std::string::npos)
      << what;
  EXPECT_EQ(what.find('\n'), std::string::npos) << what;
}

// The pairing rule itself (draft_vocab_mismatch, model_desc.h) on GGUF layouts:
// lists padded to the rows with "[PAD<id>]" (type unused), as llama.cpp's
// converter writes Qwen2.5's, pair with each other and with an unpadded list.
TEST(SessionSetup, PaddedVocabulariesPairByTheirRealTokens) {
  testutil::TinyShape target, draft, hf_target;
  target.vocab = 320, target.pad_from = 290;                      // 290 tokens, [PAD290]..[PAD319]
  draft.vocab = 320, draft.rows = 300, draft.pad_from = 290;      // [PAD290]..[PAD299]
  hf_target.vocab = 320, hf_target.listed = 290;                  // 290 tokens, 320 rows
  const ModelDesc t = load_model_desc(tiny_vocab_model("pad_t", target));
  const ModelDesc d = load_model_desc(tiny_vocab_model("pad_d", draft));
  const ModelDesc h = load_model_desc(tiny_vocab_model("pad_hf_t", hf_target));
  EXPECT_EQ(draft_vocab_mismatch(t, d), "");
  EXPECT_EQ(draft_vocab_mismatch(h, d), "");  // the draft's padding past the target's list
  EXPECT_EQ(draft_vocab_mismatch(t, t), "");
  EXPECT_NE(draft_vocab_mismatch(d, t), "");  // more rows than the target
  // A draft token past the target's list that is not padding.
  testutil::TinyShape real = draft;
  real.pad_from = 295;
  hf_target.listed = 292;
  const std::string e = draft_vocab_mismatch(load_model_desc(tiny_vocab_model("pad_hf_t292", hf_target)),
                                             load_model_desc(tiny_vocab_model("pad_d295", real)));
  EXPECT_NE(e.find("the draft's token 292 ('\xe2\x96\x81w292') is past the target's 292 tokens and is not padding"),
            std::string::npos)
      << e;
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

// --acceptance feeds the Sequoia DP only: with a chain, a k-ary tree or a
// Sequoia tree file it was silently ignored; now the setting is refused.
TEST(SessionSetup, AnAcceptanceFileIsOnlyForTheSequoiaDp) {
  SessionConfig c = config("/nonexistent/t.gguf", "/nonexistent/d.gguf");
  c.tree.acceptance = "/nonexistent/acc.json";
  for (const char* tree : {"chain:3", "kary:2x2", "sequoia:/nonexistent/tree.json"}) {
    c.tree.tree = tree;
    std::string what;
    EXPECT_EQ(setup_key(c, &what), "tree") << tree;
    EXPECT_EQ(what, std::string("--acceptance is only for --tree sequoia (--tree ") + tree + ")");
  }
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

// Issue 46, item 2: tests/data/chat_templates.json holds Qwen2.5's, Qwen3's
// and the llama.cpp vocab GGUFs' templates as shipped, with the text each
// renders (Jinja2) for a few conversations; tests/python/test_chat_templates.py
// checks that file against Jinja2 and llama.cpp, this against Redwood.
// Qwen2.5's default system message ("You are Qwen, ...") behind its tools
// branch is found; Qwen3's template has none.
TEST(ChatTemplates, EveryShippedTemplateFormatsAsItRenders) {
  std::ifstream f(std::string(REDWOOD_SOURCE_DIR) + "/tests/data/chat_templates.json");
  ASSERT_TRUE(f) << "tests/data/chat_templates.json";
  const nlohmann::json doc = nlohmann::json::parse(f);
  EXPECT_EQ(doc["templates"]["chatml-fallback"]["text"].get<std::string>(), std::string(kChatmlTemplate));
  int n = 0;
  for (const auto& c : doc["cases"]) {
    std::vector<ChatMessage> msgs;
    for (const auto& m : c["messages"]) msgs.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    const std::string name = c["template"].get<std::string>() + " / " + c["conversation"].get<std::string>();
    EXPECT_EQ(apply_chat_template(doc["templates"][c["template"].get<std::string>()]["text"], msgs),
              c["expected"].get<std::string>())
        << name;
    ++n;
  }
  EXPECT_EQ(n, 19);
}

// Mistral's formats other than NeMo's v3-tekken are refused, not formatted as
// Llama 2's; NeMo's roles must alternate as its template demands.
TEST(ChatTemplates, OtherMistralFormatsAreRefused) {
  std::ifstream f(std::string(REDWOOD_SOURCE_DIR) + "/tests/data/chat_templates.json");
  const nlohmann::json doc = nlohmann::json::parse(f);
  const std::string nemo = doc["templates"]["mistral-nemo"]["text"];
  const std::vector<ChatMessage> user = {{"user", "hi"}};
  for (const std::string& t : {std::string("{{ '[SYSTEM_PROMPT]' }}[INST]{{ m }}[/INST]"),
                               std::string("[AVAILABLE_TOOLS]{{ ' [INST] ' + m }}[/INST]"),
                               std::string("{{ ' [INST] ' + system_message }}[/INST]")})
    EXPECT_NE(testutil::error_of([&] { apply_chat_template(t, user); }).find("one of Mistral's v1/v3/v7 formats"),
              std::string::npos)
        << t;
  EXPECT_NE(testutil::error_of([&] { apply_chat_template(nemo, {{"user", "a"}, {"user", "b"}}); })
                .find("roles must alternate user / assistant"),
            std::string::npos);
  EXPECT_NE(testutil::error_of([&] { apply_chat_template(nemo, {{"user", "a"}, {"assistant", "b"}, {"system", "c"}}); })
                .find("message 3 is 'system'"),
            std::string::npos);
  EXPECT_EQ(apply_chat_template("{% for m in messages %}<s>[INST] {{ m }} [/INST]{% endfor %}", user),
            "<s>[INST] hi [/INST]");  // Llama 2's still
}

// A template that writes the BOS token's text ("<s>[INST] ...") on a
// vocabulary that adds BOS gives one BOS, not two (as in llama.cpp); the
// later turns' "<s>" stay BOS tokens.
TEST(ChatTemplates, TheTemplatesBosAndTheVocabularysAreOne) {
  testutil::TinyShape s;
  s.chat_template = "{% for m in messages %}[INST] {{ m['content'] }} [/INST]{% endfor %}";
  const std::string path = tiny_vocab_model("inst_bos", s);
  const LoadedModel m = load_model(path, /*with_weights=*/false);
  ASSERT_TRUE(m.tokenizer->spec().add_bos);
  const int32_t bos = m.tokenizer->bos();
  const std::vector<int32_t> one = encode_prompt(m, {"hi", {}, true, {}, "p"});
  ASSERT_GE(one.size(), 2u);
  EXPECT_EQ(one[0], bos);
  EXPECT_NE(one[1], bos);
  EXPECT_EQ(one, m.tokenizer->encode("[INST] hi [/INST]", true, true));
  const std::vector<int32_t> turns =
      encode_prompt(m, {"", {{"user", "a"}, {"assistant", "b"}, {"user", "c"}}, true, {}, "p"});
  EXPECT_EQ(std::count(turns.begin(), turns.end(), bos), 2);  // one per user turn
  // A plain prompt is tokenized as it is: its own "<s>" stays a token.
  const std::vector<int32_t> plain = encode_prompt(m, {"<s>hi", {}, false, {}, "p"});
  EXPECT_EQ(std::count(plain.begin(), plain.end(), bos), 2);
}

// A GGUF with no chat template but ChatML's tokens is formatted as ChatML
// (no default system message), said once on stderr; one with neither is refused.
TEST(ChatTemplates, ATemplatelessChatmlVocabularyGetsChatml) {
  testutil::TinyShape s;
  s.control_tokens = {"<|im_start|>", "<|im_end|>"};
  const std::string path = tiny_vocab_model("chatml_no_template", s);
  const Session session(config(path));
  testing::internal::CaptureStderr();
  session.check_chat_template("--chat");
  const LoadedModel m = load_model(path, /*with_weights=*/false);
  const std::vector<int32_t> got = encode_prompt(m, {"", {{"system", "Be brief."}, {"user", "hi"}}, true, {}, "p"});
  (void)encode_prompt(m, {"hi", {}, true, {}, "p"});
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(got, m.tokenizer->encode("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
                                     "<|im_start|>assistant\n",
                                     true, true));
  EXPECT_NE(std::count(got.begin(), got.end(), 287), 0);  // <|im_end|> parsed as its token
  const std::string note = "has no chat template, but its vocabulary has <|im_start|> and <|im_end|>: chats are "
                           "formatted as ChatML\n";
  ASSERT_NE(err.find(note), std::string::npos) << err;
  EXPECT_EQ(err.find(note), err.rfind(note)) << "said more than once: " << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  // Only with both tokens.
  s.control_tokens = {"<|im_start|>"};
  const Session half(config(tiny_vocab_model("chatml_half", s)));
  EXPECT_EQ(testutil::error_of([&] { half.check_chat_template("--chat"); }).rfind("--chat needs a chat template", 0), 0u);
}

// Issue 46, item 3: Mistral 7B v0.1's sliding window (here 8 tokens under a
// 2048-token training context) is the attention's: sessions load with any
// context (the target's or the draft's window), and passes run past the
// window. One block, so a token's logits depend only on the window's tokens:
// the last token of a 40-token chain has, bit for bit (batch-invariant
// kernels), the logits of a pass over its window alone at the same positions
// (no committed rows), and other logits than the same weights without the
// window (which was ignored before: full attention).
TEST(SessionSetup, ASlidingWindowRunsPastTheWindow) {
  testutil::TinyShape s;
  s.layers = 1;
  s.sliding_window = 8;
  const std::string path = tiny_vocab_model("swa8", s);
  s.sliding_window = 0;
  const std::string full_path = tiny_vocab_model("swa8_none", s);
  Session ok(config(path));
  EXPECT_NO_THROW(ok.load(100, 8, nullptr));
  Session with_draft(config(tiny_model("t"), path));
  EXPECT_NO_THROW(with_draft.load(100, 8, nullptr));
  set_cpu_batch_invariant(true);
  LoadedModel m = load_model(path), full = load_model(full_path);
  ASSERT_EQ(m.desc.hp.sliding_window, 8);
  const size_t V = static_cast<size_t>(m.desc.hp.vocab);
  std::vector<int32_t> toks(40);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<int32_t>((37 * i + 11) % V);
  auto last_logits = [&](LoadedModel& lm, std::span<const int32_t> t, int start) {
    KvCache kv = lm.transformer->make_cache(128);
    std::vector<float> lg(V);
    lm.transformer->forward(ChainBatch(t, start).view(), kv, lg, LogitsRows::kLast);
    return lg;
  };
  const std::vector<float> got = last_logits(m, toks, 0);
  EXPECT_EQ(got, last_logits(m, std::span<const int32_t>(toks).subspan(32), 32));
  EXPECT_NE(got, last_logits(full, toks, 0));
  // Decoding past the window, one token at a time after a committed prefix.
  KvCache kv = m.transformer->make_cache(128);
  std::vector<float> lg(V);
  m.transformer->forward(ChainBatch(std::span<const int32_t>(toks).first(39), 0).view(), kv, lg, LogitsRows::kLast);
  kv.commit_prefix(39);
  const int32_t t = toks[39], pos = 39, par = -1;
  m.transformer->forward(Batch{{&t, 1}, {&pos, 1}, {&par, 1}}, kv, lg, LogitsRows::kLast);
  EXPECT_EQ(lg, got);
  set_cpu_batch_invariant(false);
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

// ---- non-finite logits: an error on every path, never a token (issue 42) ------------

std::string poisoned_model(const std::string& name, uint32_t seed, int layers, int row, float value) {
  const std::string path = ::testing::TempDir() + "runtime_" + name + ".gguf";
  testutil::TinyShape s;
  s.seed = seed;
  s.layers = layers;
  s.poison_row = row;
  s.poison = value;
  testutil::write_tiny_llama(path, s);
  return path;
}

// The NonFiniteLogits message of generating 8 tokens, or "(no error: tokens ...)".
std::string non_finite_error(const std::string& target, const std::string& draft, float temperature,
                             const std::string& verify = "") {
  SessionConfig c = config(target, draft);
  c.tree.tree = "chain:3";
  c.tree.verifier = verify;
  c.sampling.temperature = temperature;
  Session s(c);
  s.load(256, 64, nullptr);
  const std::vector<int32_t> prompt = {1, 40, 41, 42};
  spec::GenerationRequest r;
  r.prompt = prompt;
  r.max_tokens = 8;
  r.sampling.temperature = temperature;
  r.sampling.seed = 3;
  try {
    const spec::Generation g = s.generate(r);
    std::string toks;
    for (const int32_t t : g.tokens) toks += std::to_string(t) + " ";
    return "(no error: tokens " + toks + ")";
  } catch (const NonFiniteLogits& e) {
    return e.what();
  }
}

TEST(NonFiniteLogits, EveryDecodingPathRefusesThem) {
  const float nan = std::nanf("");
  const std::string nan_t = poisoned_model("nan_t", 7, 2, 0, nan), nan_d = poisoned_model("nan_d", 8, 1, 0, nan);
  const std::string inf_t = poisoned_model("inf_t", 7, 2, 5, INFINITY);
  const std::string t = tiny_model("clean_t", 288, 7, 2), d = tiny_model("clean_d", 288, 8, 1);
  const std::string nan0 = "logits have a non-finite entry (nan at token id 0 of 288)";
  const std::string inf5 = "logits have a non-finite entry (-inf at token id 5 of 288)";  // +inf weight, h[0] < 0
  EXPECT_EQ(non_finite_error(nan_t, "", 0.0f), "model " + nan0);    // plain greedy (was tokens 0 0 0 ...)
  EXPECT_EQ(non_finite_error(nan_t, "", 0.8f), "model " + nan0);    // plain sampling
  EXPECT_EQ(non_finite_error(nan_t, d, 0.0f), "target " + nan0);    // greedy speculation, target rows
  EXPECT_EQ(non_finite_error(t, nan_d, 0.0f), "draft " + nan0);     // greedy speculation, draft rows
  EXPECT_EQ(non_finite_error(nan_t, d, 0.8f), "target " + nan0);    // sampled speculation (sequoia)
  EXPECT_EQ(non_finite_error(t, nan_d, 0.8f), "draft " + nan0);
  EXPECT_EQ(non_finite_error(nan_t, d, 0.8f, "target-sample"), "target " + nan0);
  EXPECT_EQ(non_finite_error(inf_t, "", 0.0f), "model " + inf5);    // an infinity
  EXPECT_EQ(non_finite_error(inf_t, "", 0.8f), "model " + inf5);
  EXPECT_EQ(non_finite_error(inf_t, d, 0.0f), "target " + inf5);
  EXPECT_EQ(non_finite_error(inf_t, d, 0.8f), "target " + inf5);
}

TEST(NonFiniteLogits, TheLogitsPassRefusesThem) {
  Session s(config(poisoned_model("nan_logits", 7, 2, 3, std::nanf(""))));
  s.load(64, 16, nullptr);
  int calls = 0;
  try {
    app::tree_logits(s.target(), {1, 40, 41}, {}, {}, 2, [&](std::span<const float>) { ++calls; });
    ADD_FAILURE() << "no error";
  } catch (const NonFiniteLogits& e) {
    EXPECT_EQ(std::string(e.what()), "row 0: model logits have a non-finite entry (nan at token id 3 of 288)");
  }
  EXPECT_EQ(calls, 0);  // no row of a NaN pass is handed on
}

// Issue 42 item 10: `redwood logits` runs in passes of a bounded size; chunked
// passes (a chain committing each, a tree kept pending) give one pass's logits.
TEST(TreeLogits, ChunkedPassesGiveTheWholePassesLogits) {
  Session s(config(tiny_model("logits_chunks", 288, 7, 2)));
  s.load(64, 16, nullptr);
  const std::vector<int32_t> toks = {1, 40, 41, 42, 43, 44, 45};
  const std::vector<int32_t> tree = {-1, 0, 0, 1, 2, 2, 4};
  for (const bool is_tree : {false, true}) {
    std::vector<float> whole, chunked;
    app::tree_logits(s.target(), toks, is_tree ? tree : std::vector<int32_t>{}, {}, 16,
                [&](std::span<const float> r) { whole.insert(whole.end(), r.begin(), r.end()); });
    int calls = 0;
    app::tree_logits(s.target(), toks, is_tree ? tree : std::vector<int32_t>{}, {}, 3, [&](std::span<const float> r) {
      ++calls;
      chunked.insert(chunked.end(), r.begin(), r.end());
    });
    EXPECT_EQ(calls, 3);
    ASSERT_EQ(whole.size(), toks.size() * 288);
    ASSERT_EQ(chunked.size(), whole.size());
    for (size_t i = 0; i < whole.size(); ++i) ASSERT_NEAR(chunked[i], whole[i], 1e-4) << i << (is_tree ? " tree" : " chain");
  }
}

TEST(NonFiniteLogits, ABatchJobRecordsTheErrorOnThePromptsLine) {
  const std::string dir = ::testing::TempDir() + "runtime_nan_job/";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  {
    std::ofstream p(dir + "prompts.jsonl");
    p << "{\"id\": 1, \"prompt\": \"abc\"}\n{\"id\": 2, \"prompt\": \"xyz\"}\n";
  }
  jobs::JobConfig job;
  job.file = dir + "job.toml";
  job.target = poisoned_model("nan_job", 7, 2, 0, std::nanf(""));
  job.prompts = dir + "prompts.jsonl";
  job.output = dir + "out.jsonl";
  job.ctx = 128;
  job.max_tokens = 4;
  jobs::check_job(job);
  app::JobHooks hooks;
  hooks.quiet = true;
  hooks.log = std::tmpfile();
  const app::JobOutcome out = app::run_job(job, hooks);
  std::fclose(hooks.log);
  EXPECT_EQ(out.summary["finish_reasons"].value("error", 0), 2) << out.summary.dump();
  std::ifstream in(job.output);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    ++lines;
    EXPECT_EQ(j["finish_reason"], "error") << line;
    EXPECT_EQ(j["tokens"], nlohmann::json::array()) << line;
    EXPECT_EQ(j.value("error", ""), "model logits have a non-finite entry (nan at token id 0 of 288)") << line;
  }
  EXPECT_EQ(lines, 2);
}

// $REDWOOD_CACHE_DIR set to `dir` for a scope (the profiles --tree auto measures go there).
struct ScopedCacheDir {
  explicit ScopedCacheDir(const std::string& dir) {
    if (const char* old = std::getenv("REDWOOD_CACHE_DIR")) saved = old;
    ::setenv("REDWOOD_CACHE_DIR", dir.c_str(), 1);
  }
  ~ScopedCacheDir() {
    if (saved)
      ::setenv("REDWOOD_CACHE_DIR", saved->c_str(), 1);
    else
      ::unsetenv("REDWOOD_CACHE_DIR");
  }
  std::optional<std::string> saved;
};

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

// --tree auto's profiles describe the models, the sampling parameters and the
// machine, not one seed's draws: a run with another --seed reuses the cached
// dynamic-tree profile (it used to re-measure 39 candidate trees, 1-2 minutes
// on a real pair), and what is measured does not depend on the run's seed.
TEST(TreeAuto, AnotherSeedReusesTheCachedProfiles) {
  const std::string target = tiny_model("auto_t", 288, 21, 2), draft = tiny_model("auto_d", 288, 22, 1);
  const std::string base = ::testing::TempDir() + "redwood_auto_cache_" + std::to_string(::getpid());
  std::filesystem::remove_all(base);
  // The cache's files after a load with `seed` in `dir` (name -> contents).
  auto run = [&](const std::string& dir, uint64_t seed) {
    const ScopedCacheDir cache(dir);
    SessionConfig c = config(target, draft);
    c.tree.tree = "auto";
    c.tree.budget = 8;
    c.tree.depth = 4;
    c.sampling.temperature = 0.6f;
    c.sampling.seed = seed;
    Session s(c);
    s.load(256, 64, nullptr);
    std::map<std::string, std::string> files;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      std::ifstream in(e.path(), std::ios::binary);
      files[e.path().filename().string()] = std::string(std::istreambuf_iterator<char>(in), {});
    }
    return files;
  };
  const auto first = run(base + "/a", 1);
  const auto again = run(base + "/a", 2);  // the same cache, another seed: nothing new measured
  const auto elsewhere = run(base + "/b", 3);  // an empty cache, another seed: the same profiles
  std::filesystem::remove_all(base);
  int dynamic = 0;
  for (const auto& [name, text] : first) {
    dynamic += name.starts_with("dynamic-");
    EXPECT_EQ(again.count(name), 1u) << name;
    if (name.starts_with("dynamic-") || name.starts_with("acceptance-")) {  // (hardware-: timings)
      ASSERT_EQ(elsewhere.count(name), 1u) << name;
      EXPECT_TRUE(elsewhere.at(name) == text) << name << " depends on the run's seed";
    }
  }
  EXPECT_EQ(dynamic, 1);
  EXPECT_EQ(again.size(), first.size());
  EXPECT_TRUE(again == first) << "the cache changed";
}

// A profile given with --hardware-profile that was measured on another model
// pair was used without a word when the models had the same sizes (two drafts
// cut from one target with the same layer count): the files' contents decide.
TEST(TreeAuto, AHardwareProfileOfAnotherPairIsAWarning) {
  const std::string target = tiny_model("hwp_t", 288, 31, 2), d1 = tiny_model("hwp_d1", 288, 32, 1),
                    d2 = tiny_model("hwp_d2", 288, 33, 1);
  ASSERT_EQ(std::filesystem::file_size(d1), std::filesystem::file_size(d2));
  const std::string dir = ::testing::TempDir() + "redwood_hwp_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const ScopedCacheDir cache(dir + "/cache");
  planner::MeasuredProfile hw = hardware(1.0, 64, 0.01);
  hw.target = spec::identify_files(target, {target});
  hw.draft = spec::identify_files(d1, {d1});
  hw.threads = 1;
  hw.ctx = 128;
  hw.layers_resident = 2;
  const std::string hw_file = dir + "/hw.json", acc_file = dir + "/acc.json";
  std::ofstream(hw_file) << planner::measured_json(hw);
  std::ofstream(acc_file) << R"({"acceptance": [0.8, 0.1]})";
  auto log_of = [&](const std::string& draft) {
    SessionConfig c = config(target, draft);
    c.tree.tree = "auto";
    c.tree.budget = 8;
    c.tree.depth = 4;
    c.tree.acceptance = acc_file;
    c.hardware_profile = hw_file;
    Session s(c);
    std::FILE* log = std::tmpfile();
    s.load(256, 64, log);
    std::rewind(log);
    std::string text;
    for (int ch; (ch = std::fgetc(log)) != EOF;) text += static_cast<char>(ch);
    std::fclose(log);
    return text;
  };
  const std::string same = log_of(d1), other = log_of(d2);
  std::filesystem::remove_all(dir);
  EXPECT_EQ(same.find("warning"), std::string::npos) << same;
  EXPECT_NE(other.find("redwood: warning: " + hw_file + " was measured for " + target + " + " + d1 +
                       ", not these models"),
            std::string::npos)
      << other;
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
