// A Session is what one run of a model pair is: the target, an optional
// resident draft, memory budgets and plan, the tree policy (given, or chosen
// by --tree auto), and the one generation loop (spec::generate) every command
// uses: `redwood generate`, `redwood batch` and the bench suites.
//
// Two phases, so that every setting can be checked before any weight loads:
//   Session s(config);          // descriptions and tokenizers; settings checked
//   s.load(ctx, batch_tokens);  // weights (the draft resident), then --tree auto
//   s.generate(request, on_text, cancelled);
#pragma once
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "src/engine/kv_pool.h"
#include "src/model/chat_template.h"
#include "src/runtime/model.h"
#include "src/runtime/tree_auto.h"
#include "src/speculative/batch_generation.h"
#include "src/speculative/generation.h"
#include "src/speculative/speculate.h"
#include "src/util/error.h"

namespace redwood::jobs {
struct JobConfig;
}

namespace redwood::runtime {

// Bounds of SessionConfig::sequences and pass_tokens.
inline constexpr int kMaxSequences = 256, kMaxPassTokens = 8192;

struct SessionConfig {
  RunOptions run;           // the target's: model, backend, threads, budgets
  std::string draft;        // empty: plain decoding
  spec::TreeOptions tree;   // with a draft; tree.tree == "auto": chosen at load (budget, depth: caps)
  bool tree_given = false;  // tree/verifier settings were given (an error without a draft)
  SamplingParams sampling;  // the tree's sampling mode (requests carry their own seed)
  int prefill_chunk = 512;
  std::string hardware_profile;  // --tree auto: a profile-hardware file instead of the cache
  // Sequences sharing each target pass (continuous batching, plain decoding
  // only): 1 = one prompt at a time through generate(); more = a paged KV pool
  // for that many sequences of ctx positions and batcher().
  int sequences = 1;
  int pass_tokens = 64;  // tokens in one shared pass (decode tokens first, then prompt chunks)
  // With sequences > 1: KV positions of the pool for all sequences together
  // (offload::RunShape::kv_rows); 0 = sequences x ctx.
  int kv_rows = 0;
};

// A setting that cannot work; `key` says which one ("draft", "tree", "memory")
// so that callers name it their way (a flag, a job key); what() has no prefix.
class SetupError : public Error {
 public:
  SetupError(std::string key, const std::string& what) : Error(what), key_(std::move(key)) {}
  const std::string& key() const { return key_; }

 private:
  std::string key_;
};

// A prompt as a command or a job gives it: text (special tokens such as
// <|im_start|> parsed), the same as one user message through the model's chat
// template (`chat`), chat messages through it, or token ids.
struct PromptText {
  std::string text;
  std::vector<ChatMessage> messages;  // instead of text
  bool chat = false;
  std::vector<int32_t> tokens;  // instead of text and messages
  std::string name = "the prompt";  // how messages name it: "--prompt", "id 7: the prompt"
};

// The room a prompt must leave in the KV cache, and how the caller names its settings.
struct PromptRoom {
  int ctx = 0;  // KV positions; 0: no bound but the model's trained context (on bytes)
  std::string ctx_name = "--ctx";  // "--ctx", "memory.ctx ="
  int max_tokens = 0;
  std::string max_tokens_name = "--max-tokens";
  // The tree's nodes (+ 2) count inside ctx (a job's memory.ctx), or come on
  // top of it (generate --ctx: Session::load is given ctx + the tree).
  bool ctx_holds_tree = false;
};

// A prompt that cannot run (too many bytes to tokenize, no tokens, no room,
// a token id out of range): one line, no file prefix.
class PromptError : public Error {
 public:
  using Error::Error;
};

// The template m's chats are formatted with (chat_template_of: its own, or
// ChatML for a template-less ChatML vocabulary, said once on stderr).
std::string chat_template(const ModelDesc& m);

// The prompt's token ids: through the chat template where it asks for it,
// tokenized with special tokens added and parsed (no checks: Session::prepare_prompt).
std::vector<int32_t> encode_prompt(const LoadedModel& m, const PromptText& p);

class Session {
 public:
  // Loads the models' descriptions and tokenizers (no weights) and checks the
  // settings: a tree without a draft, a draft whose vocabulary differs, tree
  // parameters (spec::make_spec_config), --tree auto's caps and what it does
  // not take. Throws SetupError (settings) or redwood::Error (model files).
  explicit Session(SessionConfig c);

  const SessionConfig& config() const { return c_; }
  LoadedModel& target() { return target_; }
  const LoadedModel& target() const { return target_; }
  LoadedModel* draft() { return draft_ ? &*draft_ : nullptr; }
  bool auto_tree() const { return auto_; }
  // Tree nodes a step may verify (--tree auto: the budget cap); 0 without a draft.
  int tree_nodes() const;
  // The tree config in effect (after load() for --tree auto); null: plain decoding.
  const spec::SpecConfig* spec_config() const { return setup_ ? &setup_->config : nullptr; }
  // --tree auto's choice and prediction (after load()).
  const std::optional<AutoTreeResult>& auto_choice() const { return auto_result_; }

  // Plans memory for a run of `ctx` KV positions and passes of up to
  // `batch_tokens` tokens (the tree's nodes are added) without loading
  // anything: SetupError("memory") when the budgets cannot hold it.
  void check_plan(int ctx, int batch_tokens) const;
  // Sets config().sequences (continuous batching), checked as the constructor
  // checks it. REQUIRES: before load().
  void set_sequences(int sequences);
  // Sets config().kv_rows. REQUIRES: before load(); 0 or, with sequences > 1,
  // at least the ctx load() will get (else load() throws).
  void set_kv_rows(int rows);
  // With config().sequences > 1: sets config().kv_rows to the most KV
  // positions, in whole blocks, from one sequence's `ctx` up to `most`, that
  // the budgets hold beside the rest of the run (check_plan), and returns
  // them; without budgets, `most`. Returns 0 (kv_rows unset) when not even
  // ctx fits. A sequence is promised its own rows when admitted, so a pool
  // of fewer than sequences x ctx positions still runs that many short ones.
  // REQUIRES: before load(); ctx <= most.
  int fit_kv_rows(int ctx, int batch_tokens, int64_t most);
  // The most sequences a shared pass can decode: with a fixed tree (chain,
  // kary), whose whole shape each decoding sequence takes, pass_tokens / its
  // nodes; else kMaxSequences.
  int max_shared_sequences() const;
  // Loads the draft (resident) and the target (planned under the budgets),
  // then runs --tree auto (saying what it chose on `log`, if not null).
  void load(int ctx, int batch_tokens, std::FILE* log = stderr);
  bool loaded() const { return target_.transformer != nullptr; }

  // Throws redwood::Error "WHO needs a chat template, but MODEL has none
  // usable (why)" unless the target's chat template renders.
  void check_chat_template(const std::string& who) const;
  // The prompt's tokens for a run leaving `room`, every check made in one
  // wording: at most kPromptBytesPerToken bytes per token of the context
  // before tokenizing (by room.ctx, else the model's trained context), token
  // ids in the vocabulary, at least one token, prompt + max_tokens (+ the
  // tree) within room.ctx. Throws PromptError.
  std::vector<int32_t> prepare_prompt(const PromptText& p, const PromptRoom& room) const;

  // A request for `prompt` (the tokens must outlive it: the request views
  // them) with the session's sampling (its seed included) and prefill chunk.
  spec::GenerationRequest request(std::span<const int32_t> prompt, int max_tokens,
                                  std::vector<std::string> stop) const;
  // The many-sequence loop (continuous batching) over the target, for
  // config().sequences > 1 after load(): a KV pool of `sequences` x ctx
  // positions (config().kv_rows if set) and passes of pass_tokens tokens, made on the first call. Its
  // requests run with batch-invariant CPU kernels (set at load()), so each
  // one's output is what it is alone in the batcher. Throws redwood::Error
  // before load() or with sequences == 1.
  spec::BatchGenerator& batcher();
  // The one generation loop (spec::generate) with this session's draft and tree.
  spec::Generation generate(const spec::GenerationRequest& req,
                            const std::function<void(std::string_view)>& on_text = {},
                            const std::function<bool()>& cancelled = {});
  // One generation as `redwood generate --json` reports it: text, tokens,
  // finish reason, times; --tree auto's choice; speculation statistics and the
  // tree in effect; offload statistics.
  nlohmann::json report(const spec::Generation& g, size_t prompt_tokens) const;
  // The same in one line, as `redwood generate` ends on stderr: "[N prompt
  // tokens in S s; N tokens, S s/token, R tokens/s; passes...; offload: ...]".
  std::string report_line(const spec::Generation& g, size_t prompt_tokens) const;

 private:
  offload::RunShape shape(int ctx, int batch_tokens) const;
  SessionConfig c_;
  LoadedModel target_;
  std::optional<LoadedModel> draft_;
  bool auto_ = false;
  std::optional<spec::DraftSetup> setup_;  // null: plain decoding
  std::optional<AutoTreeResult> auto_result_;
  int ctx_ = 0;  // load()'s
  std::unique_ptr<KvPool> pool_;                   // batcher()'s, made with it
  std::unique_ptr<spec::BatchGenerator> batcher_;  // uses pool_ (destroyed first)
};

// A job's session settings (jobs::JobConfig after check_job).
SessionConfig session_config(const jobs::JobConfig& job);

}  // namespace redwood::runtime
