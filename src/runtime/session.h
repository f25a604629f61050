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
#include <optional>
#include <string>
#include <string_view>

#include "src/runtime/model.h"
#include "src/runtime/tree_auto.h"
#include "src/spec/generation.h"
#include "src/spec/speculate.h"
#include "src/util/error.h"

namespace redwood::jobs {
struct JobConfig;
}

namespace redwood::runtime {

struct SessionConfig {
  RunOptions run;           // the target's: model, backend, threads, budgets
  std::string draft;        // empty: plain decoding
  spec::TreeOptions tree;   // with a draft; tree.tree == "auto": chosen at load (budget, depth: caps)
  bool tree_given = false;  // tree/verifier settings were given (an error without a draft)
  SamplingParams sampling;  // the tree's sampling mode (requests carry their own seed)
  int prefill_chunk = 512;
  std::string hardware_profile;  // --tree auto: a profile-hardware file instead of the cache
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
  // Loads the draft (resident) and the target (planned under the budgets),
  // then runs --tree auto (saying what it chose on `log`, if not null).
  void load(int ctx, int batch_tokens, std::FILE* log = stderr);
  bool loaded() const { return target_.transformer != nullptr; }

  // The one generation loop (spec::generate) with this session's draft and tree.
  spec::Generation generate(const spec::GenerationRequest& req,
                            const std::function<void(std::string_view)>& on_text = {},
                            const std::function<bool()>& cancelled = {});
  // One generation as `redwood generate --json` reports it: text, tokens,
  // finish reason, times; --tree auto's choice; speculation statistics and the
  // tree in effect; offload statistics.
  nlohmann::json report(const spec::Generation& g, size_t prompt_tokens) const;

 private:
  offload::RunShape shape(int ctx, int batch_tokens) const;
  SessionConfig c_;
  LoadedModel target_;
  std::optional<LoadedModel> draft_;
  bool auto_ = false;
  std::optional<spec::DraftSetup> setup_;  // null: plain decoding
  std::optional<AutoTreeResult> auto_result_;
};

// A job's session settings (jobs::JobConfig after check_job).
SessionConfig session_config(const jobs::JobConfig& job);

}  // namespace redwood::runtime
