#include "src/runtime/session.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <mutex>

#include "src/engine/kv_type.h"
#include "src/jobs/job.h"

namespace redwood::runtime {

std::string chat_template(const ModelDesc& m) {
  bool fallback = false;
  std::string t = chat_template_of(m.chat_template, m.tokenizer.tokens, &fallback);
  static std::once_flag said;
  if (fallback)
    std::call_once(said, [&] {
      std::fprintf(stderr,
                   "redwood: %s has no chat template, but its vocabulary has <|im_start|> and <|im_end|>: chats "
                   "are formatted as ChatML\n",
                   m.path.c_str());
    });
  return t;
}

std::vector<int32_t> encode_prompt(const LoadedModel& m, const PromptText& p) {
  const bool formatted = !p.messages.empty() || p.chat;
  std::string text = p.text;
  if (!p.messages.empty())
    text = apply_chat_template(chat_template(m.desc), p.messages);
  else if (p.chat)
    text = apply_chat_template(chat_template(m.desc), {{"user", p.text}});
  // A template that writes the BOS token's text ("<s>[INST]", "<|begin_of_text|>")
  // gives one BOS where the vocabulary adds one too: the text's is dropped,
  // as llama.cpp's chat formatting does.
  const TokenizerSpec& s = m.tokenizer->spec();
  if (formatted && s.add_bos && s.bos_id >= 0 && static_cast<size_t>(s.bos_id) < s.tokens.size()) {
    const std::string& bos = s.tokens[static_cast<size_t>(s.bos_id)];
    if (!bos.empty() && text.starts_with(bos)) text.erase(0, bos.size());
  }
  return m.tokenizer->encode(text, /*add_special=*/true, /*parse_special=*/true);
}

Session::Session(SessionConfig c) : c_(std::move(c)) {
  auto_ = !c_.draft.empty() && c_.tree.tree == "auto";
  if (c_.draft.empty() && c_.tree_given) throw SetupError("tree", "speculative decoding needs a draft model");
  if (!c_.hardware_profile.empty() && !auto_)
    throw SetupError("tree", "a hardware profile is only for a draft with tree \"auto\"");
  if (c_.prefill_chunk < 1) throw SetupError("tree", "prefill_chunk must be >= 1");
  set_sequences(c_.sequences);
  if (c_.pass_tokens < 1 || c_.pass_tokens > kMaxPassTokens)
    throw SetupError("batch", "pass_tokens must be in [1, " + std::to_string(kMaxPassTokens) + "], got " +
                                  std::to_string(c_.pass_tokens));
  if (auto_) {
    const spec::TreeOptions& t = c_.tree;
    if (t.threshold || t.delta || t.width || !t.verifier.empty() || t.is_alphabet)
      throw SetupError("tree",
                       "tree \"auto\" chooses the tree, its parameters and its verifier; it takes only budget and "
                       "depth (caps), acceptance (a profile) and a hardware profile");
    if (t.budget < 1 || t.budget > 8192)
      throw SetupError("tree", "the budget must be in [1, 8192], got " + std::to_string(t.budget));
    if (t.depth < 1 || t.depth > 1024)
      throw SetupError("tree", "the depth must be in [1, 1024], got " + std::to_string(t.depth));
  }
  std::optional<spec::SpecConfig> cfg;
  if (!c_.draft.empty() && !auto_) {
    try {
      cfg = spec::make_spec_config(c_.tree, c_.sampling);
    } catch (const Error& e) {
      throw SetupError("tree", e.what());
    }
    cfg->prefill_chunk = c_.prefill_chunk;
  }
  target_ = load_model(c_.run.model, /*with_weights=*/false);
  if (!c_.draft.empty()) {
    draft_ = load_model(c_.draft, /*with_weights=*/false);
    if (const std::string e = draft_vocab_mismatch(target_.desc, draft_->desc); !e.empty())
      throw SetupError("draft", e);
    setup_.emplace();
    setup_->target_desc = &target_.desc;
    setup_->draft_desc = &draft_->desc;
    if (cfg) setup_->config = *cfg;
  }
}

void Session::set_sequences(int sequences) {
  if (loaded()) throw Error("Session::set_sequences after load()");
  if (sequences < 1 || sequences > kMaxSequences)
    throw SetupError("batch", "sequences must be in [1, " + std::to_string(kMaxSequences) + "], got " +
                                  std::to_string(sequences));
  if (sequences > 1 && !c_.draft.empty() && c_.tree.tree != "auto" &&
      spec::parse_tree_kind(c_.tree.tree) != spec::TreeKind::kStatic)
    throw SetupError("batch", "several sequences per pass take static trees (sequoia, chain, kary) or tree \"auto\", not " +
                                  c_.tree.tree + ": set sequences = 1 or choose a static tree");
  c_.sequences = sequences;
}

int Session::tree_nodes() const {
  if (!draft_) return 0;
  if (auto_) return c_.tree.budget;
  return setup_ ? setup_->config.max_tree_nodes() : 0;
}

void Session::check_chat_template(const std::string& who) const {
  try {
    (void)apply_chat_template(chat_template(target_.desc), {{"user", "x"}});
  } catch (const Error& e) {
    throw Error(who + " needs a chat template, but " + target_.desc.path + " has none usable (" + e.what() + ")");
  }
}

std::vector<int32_t> Session::prepare_prompt(const PromptText& p, const PromptRoom& room) const {
  std::vector<int32_t> tokens = p.tokens;
  if (!tokens.empty()) {
    for (int32_t t : tokens)
      if (t < 0 || t >= target_.desc.hp.vocab) throw PromptError(p.name + ": id " + std::to_string(t) + " out of range");
  } else {
    // Bounded by bytes before tokenizing: tokenizing costs memory in
    // proportion to the text, whatever the memory budgets say.
    const int bound = room.ctx > 0 ? room.ctx : target_.desc.hp.ctx_len;
    size_t bytes = p.text.size();
    for (const ChatMessage& msg : p.messages) bytes += msg.role.size() + msg.content.size();
    if (bound > 0 && static_cast<int64_t>(bytes) > max_prompt_bytes(bound))
      throw PromptError(p.name + " is " + std::to_string(bytes) + " bytes; " +
                        (room.ctx > 0 ? room.ctx_name + " " : "the model's context (no " + room.ctx_name + ") ") +
                        std::to_string(bound) + " allows at most " + std::to_string(kPromptBytesPerToken) +
                        " bytes per token (" + std::to_string(max_prompt_bytes(bound)) + "), so it is not tokenized");
    tokens = encode_prompt(target_, p);
  }
  if (tokens.empty()) throw PromptError("the prompt encodes to no tokens");
  const int tree = room.ctx_holds_tree ? tree_nodes() : 0;
  const int64_t need = static_cast<int64_t>(tokens.size()) + room.max_tokens + (room.ctx_holds_tree ? tree + 2 : 0);
  if (room.ctx > 0 && need > room.ctx)
    throw PromptError("the prompt has " + std::to_string(tokens.size()) + " tokens; with " + room.max_tokens_name +
                      " " + std::to_string(room.max_tokens) + (tree ? " and a tree of " + std::to_string(tree) : "") +
                      " it exceeds " + room.ctx_name + " " + std::to_string(room.ctx));
  return tokens;
}

void Session::set_kv_rows(int rows) {
  if (loaded()) throw Error("Session::set_kv_rows after load()");
  if (rows < 0) throw Error("Session::set_kv_rows: negative rows");
  c_.kv_rows = rows;
}

int Session::max_shared_sequences() const {
  if (!draft_ || c_.tree.tree == "sequoia" || c_.tree.tree == "auto") return kMaxSequences;
  return std::max(1, c_.pass_tokens / std::max(1, tree_nodes()));
}

int Session::fit_kv_rows(int ctx, int batch_tokens, int64_t most) {
  if (c_.sequences < 2) throw Error("Session::fit_kv_rows: the session runs one sequence at a time");
  const int block = offload::RunShape{}.kv_block_rows;
  const auto blocks = [block](int64_t rows) { return offload::kv_blocks(rows, block); };
  int64_t lo = blocks(ctx), hi = std::min<int64_t>(blocks(most), std::numeric_limits<int>::max() / block);
  auto fits = [&](int64_t b) {
    set_kv_rows(static_cast<int>(b * block));
    try {
      check_plan(ctx, batch_tokens);
      return true;
    } catch (const SetupError&) {
      return false;
    }
  };
  if (hi < lo || !fits(lo)) {
    set_kv_rows(0);
    return 0;
  }
  while (lo < hi) {  // the most blocks that fit
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (fits(mid))
      lo = mid;
    else
      hi = mid - 1;
  }
  set_kv_rows(static_cast<int>(lo * block));
  return c_.kv_rows;
}

offload::RunShape Session::shape(int ctx, int batch_tokens) const {
  offload::RunShape s;
  s.ctx = ctx;
  s.max_tokens = std::max(batch_tokens, draft_ ? tree_nodes() + 1 : 0);
  if (c_.sequences > 1) {
    s.sequences = c_.sequences;
    // A shared target pass carries at most max(pass_tokens, sequences):
    // prompt chunks under pass_tokens (not batch_tokens), every decoding
    // sequence's token or tree (a fixed tree's whole shape fits pass_tokens,
    // BatchGenerator refuses otherwise). --tree auto also runs passes at
    // load: t(n) up to that cap, the hardware profile's prefix and, when its
    // acceptance profile is measured, one built-in passage at a time
    // (auto_tree_load_pass_tokens); those stay counted. The draft's passes
    // are no larger (spec::BatchLimits: a prompt reaches the draft in chunks
    // of pass_tokens).
    const int measured = auto_ ? std::max(tree_nodes() + 1, auto_tree_load_pass_tokens(target_)) : 1;
    s.max_tokens = std::max({measured, c_.pass_tokens, c_.sequences});
    s.kv_rows = c_.kv_rows;
  }
  return s;
}

void Session::check_plan(int ctx, int batch_tokens) const {
  if (c_.run.device_mem.empty() && c_.run.host_mem.empty()) return;
  try {
    (void)plan_run_memory(target_.desc, draft_ ? &draft_->desc : nullptr, c_.run, shape(ctx, batch_tokens));
  } catch (const Error& e) {
    throw SetupError("memory", e.what());
  }
}

void Session::load(int ctx, int batch_tokens, std::FILE* log) {
  if (c_.sequences > 1 && c_.kv_rows != 0 && c_.kv_rows < ctx)
    throw Error("Session::load: a KV pool of " + std::to_string(c_.kv_rows) +
                " positions cannot hold one sequence of " + std::to_string(ctx));
  ctx_ = ctx;
  // Before any weights load (the draft's come first): KV rows the target's
  // heads cannot take (load_weights checks each model and its backend again).
  check_kv_head_dim(kv_type_from_name(c_.run.kv_type), target_.desc.hp.head_dim, target_.desc.path);
  // Shared passes give each sequence its solo logits only if no kernel's sums
  // depend on the pass's size (kernels/backend.h).
  if (c_.sequences > 1) set_cpu_batch_invariant(true);
  if (draft_) {
    load_weights(*draft_, resident_run(c_.run), offload::RunShape{});
    setup_->draft = draft_->transformer.get();
  }
  load_weights(target_, c_.run, shape(ctx, batch_tokens), draft_ ? &draft_->desc : nullptr);
  if (auto_) {
    // Shared passes take Sequoia trees only, and the node budget rule fills
    // passes of up to max(pass_tokens, sequences) tokens (batcher()): t(n) is
    // timed that far.
    SharedPasses shared;
    if (c_.sequences > 1) shared = {std::max(c_.pass_tokens, c_.sequences), true};
    auto_result_ = choose_tree_auto(target_, *draft_, c_.run, c_.sampling, c_.tree.budget, c_.tree.depth, log,
                                    c_.tree.acceptance, c_.hardware_profile, shared);
    if (auto_result_->config) {
      setup_->config = *auto_result_->config;
      setup_->config.prefill_chunk = c_.prefill_chunk;
    } else {
      setup_.reset();  // plain decoding is predicted faster
    }
  }
}

spec::BatchGenerator& Session::batcher() {
  if (!loaded()) throw Error("Session::batcher before load()");
  if (c_.sequences < 2) throw Error("Session::batcher: the session runs one sequence at a time");
  if (!batcher_) {
    const offload::RunShape s = shape(ctx_, c_.pass_tokens);
    const LlamaHParams& hp = target_.desc.hp;
    pool_ = std::make_unique<KvPool>(*target_.backend, hp.n_layers, hp.n_kv_heads * hp.head_dim,
                                     static_cast<int>(offload::kv_pool_blocks(s)), s.kv_block_rows, ctx_,
                                     target_.transformer->kv_type());
    const spec::BatchLimits limits{c_.sequences, std::max(c_.pass_tokens, c_.sequences)};
    if (!setup_) {
      batcher_ = std::make_unique<spec::BatchGenerator>(*target_.transformer, *target_.tokenizer, *pool_, limits);
    } else {
      // Trees in the shared passes: the DP's smaller trees need its acceptance
      // vector (a Sequoia tree); the node budget rule needs t(n) (tree "auto").
      spec::BatchDraft d;
      d.draft = setup_->draft;
      d.target_desc = setup_->target_desc;
      d.draft_desc = setup_->draft_desc;
      d.config = setup_->config;
      if (auto_result_) {
        d.acceptance = auto_result_->acceptance;
        const planner::CostCurve t = auto_result_->target_pass;
        d.pass_seconds = [t](int n) { return t.at(n); };
        const planner::CostCurve c = auto_result_->draft_level;
        d.draft_level_seconds = [c](int w) { return c.at(w); };
      } else if (c_.tree.tree == "sequoia") {
        d.acceptance = c_.tree.acceptance.empty() ? spec::default_acceptance(16)
                                                  : spec::read_acceptance_file(c_.tree.acceptance);
      }
      batcher_ = std::make_unique<spec::BatchGenerator>(*target_.transformer, *target_.tokenizer, *pool_, limits, &d);
    }
  }
  return *batcher_;
}

spec::Generation Session::generate(const spec::GenerationRequest& req,
                                   const std::function<void(std::string_view)>& on_text,
                                   const std::function<bool()>& cancelled) {
  if (!loaded()) throw Error("Session::generate before load()");
  if (setup_) {  // (the session may have moved since load)
    setup_->target_desc = &target_.desc;
    setup_->draft_desc = &draft_->desc;
    setup_->draft = draft_->transformer.get();
  }
  return spec::generate(*target_.transformer, *target_.tokenizer, req, setup_ ? &*setup_ : nullptr, on_text, cancelled);
}

spec::GenerationRequest Session::request(std::span<const int32_t> prompt, int max_tokens,
                                         std::vector<std::string> stop) const {
  spec::GenerationRequest req;
  req.prompt = prompt;
  req.sampling = c_.sampling;
  req.max_tokens = max_tokens;
  req.prefill_chunk = c_.prefill_chunk;
  req.stop = std::move(stop);
  return req;
}

std::string Session::report_line(const spec::Generation& g, size_t prompt_tokens) const {
  const double spt = g.s_per_token();
  char buf[256];
  std::snprintf(buf, sizeof buf, "[%zu prompt tokens in %.3f s; %zu tokens, %.4f s/token, %.2f tokens/s", prompt_tokens,
                g.prefill_seconds, g.tokens.size(), spt, spt > 0 ? 1.0 / spt : 0.0);
  std::string line = buf;
  if (g.spec && g.spec->target_passes) {
    std::snprintf(buf, sizeof buf, "; %d target passes, %.2f tokens/pass", g.spec->target_passes,
                  double(g.spec->emitted) / g.spec->target_passes);
    line += buf;
  }
  if (target_.streamed) {
    const auto& t = target_.streamed->totals();
    std::snprintf(buf, sizeof buf, "; offload: %d passes, %.1f MB from storage, %.3f s stalled",
                  target_.streamed->passes(), static_cast<double>(t.storage_bytes) / 1e6, t.stall_seconds);
    line += buf;
  }
  return line + "]";
}

nlohmann::json Session::report(const spec::Generation& g, size_t prompt_tokens) const {
  nlohmann::json j;
  j["text"] = g.text;
  j["tokens"] = g.tokens;
  j["n_tokens"] = g.tokens.size();
  j["prompt_tokens"] = prompt_tokens;
  j["seconds"] = g.decode_seconds;
  j["prefill_seconds"] = g.prefill_seconds;
  j["s_per_token"] = g.s_per_token();
  j["finish_reason"] = g.finish;
  if (const auto& auto_result = auto_result_) {
    // What --tree auto chose (also when it chose plain decoding) and its prediction.
    j["tree_auto_choice"] = auto_result->choice;
    j["tree_auto_predicted_s_per_token"] =
        auto_result->config ? auto_result->best.seconds_per_token() : auto_result->autoregressive.seconds_per_token();
    j["tree_auto_predicted_tokens_per_pass"] = auto_result->config ? auto_result->best.tokens : 1.0;
  }
  if (const auto& sstats = g.spec) {
    const spec::SpecConfig* cfg = spec_config();
    j["target_passes"] = sstats->target_passes;
    j["draft_passes"] = sstats->draft_passes;
    j["mean_accepted"] = sstats->target_passes ? double(sstats->emitted) / sstats->target_passes : 0.0;
    j["accepted_by_depth"] = sstats->accepted_by_depth;
    j["draft_seconds"] = sstats->draft_seconds;
    j["verify_seconds"] = sstats->verify_seconds;
    j["draft_tokens"] = sstats->draft_tokens;
    // The tree settings in effect and the realised tree size per step (root included).
    nlohmann::json t;
    t["tree"] = c_.tree.tree;
    t["kind"] = spec::tree_kind_name(cfg->tree.kind);
    t["verify"] = spec::verifier_name(cfg->verifier);
    if (cfg->verify_options.is_alphabet > 0) t["is_alphabet"] = cfg->verify_options.is_alphabet;
    if (cfg->tree.kind == spec::TreeKind::kStatic) {
      t["nodes"] = cfg->shape.size();
      t["depth"] = cfg->shape.max_depth();
    } else {
      t["budget"] = cfg->tree.budget;
      t["depth"] = cfg->tree.depth;
      if (cfg->tree.kind == spec::TreeKind::kDySpec) t["threshold"] = cfg->tree.threshold;
      if (cfg->tree.kind == spec::TreeKind::kOptTree) t["delta"] = cfg->tree.delta;
      if (cfg->tree.kind == spec::TreeKind::kSpecExec) t["width"] = cfg->tree.width;
    }
    j["tree"] = t;
    const auto& ts = sstats->tree_nodes;
    j["tree_nodes"] = ts;
    int64_t sum = 0;
    for (int32_t x : ts) sum += x;
    j["tree_nodes_mean"] = ts.empty() ? 0.0 : double(sum) / double(ts.size());
    j["tree_nodes_min"] = ts.empty() ? 0 : *std::min_element(ts.begin(), ts.end());
    j["tree_nodes_max"] = ts.empty() ? 0 : *std::max_element(ts.begin(), ts.end());
  }
  if (target_.streamed) j["offload"] = offload_stats(target_);
  return j;
}

SessionConfig session_config(const jobs::JobConfig& job) {
  SessionConfig c;
  c.run.model = job.target;
  c.run.threads = job.threads;
  c.run.device_mem = job.device_mem;
  c.run.host_mem = job.host_mem;
  c.run.ring = job.ring;
  c.run.verify_io = job.verify_io;
  c.run.kv_type = job.kv_type;
  c.draft = job.draft;
  c.tree = spec::TreeOptions{job.tree,  job.budget, job.depth,      job.threshold,  job.delta,
                             job.width, job.verify, job.acceptance, job.is_alphabet};
  c.sampling = job.sampling;
  c.prefill_chunk = job.prefill_chunk;
  c.sequences = job.sequences_auto ? 1 : job.sequences;  // "auto": the job runner chooses
  c.pass_tokens = job.pass_tokens;
  return c;
}

}  // namespace redwood::runtime
