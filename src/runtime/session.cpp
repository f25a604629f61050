#include "src/runtime/session.h"

#include <algorithm>

#include "src/jobs/job.h"

namespace redwood::runtime {

Session::Session(SessionConfig c) : c_(std::move(c)) {
  auto_ = !c_.draft.empty() && c_.tree.tree == "auto";
  if (c_.draft.empty() && c_.tree_given) throw SetupError("tree", "speculative decoding needs a draft model");
  if (!c_.hardware_profile.empty() && !auto_)
    throw SetupError("tree", "a hardware profile is only for a draft with tree \"auto\"");
  if (c_.prefill_chunk < 1) throw SetupError("tree", "prefill_chunk must be >= 1");
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
    if (draft_->desc.hp.vocab != target_.desc.hp.vocab || draft_->desc.tokenizer.tokens != target_.desc.tokenizer.tokens)
      throw SetupError("draft", "the draft's vocabulary differs from the target's");
    setup_.emplace();
    setup_->target_desc = &target_.desc;
    setup_->draft_desc = &draft_->desc;
    if (cfg) setup_->config = *cfg;
  }
}

int Session::tree_nodes() const {
  if (!draft_) return 0;
  if (auto_) return c_.tree.budget;
  return setup_ ? setup_->config.max_tree_nodes() : 0;
}

offload::RunShape Session::shape(int ctx, int batch_tokens) const {
  offload::RunShape s;
  s.ctx = ctx;
  s.max_tokens = std::max(batch_tokens, draft_ ? tree_nodes() + 1 : 0);
  return s;
}

void Session::check_plan(int ctx, int batch_tokens) const {
  if (c_.run.device_mem.empty() && c_.run.host_mem.empty()) return;
  offload::RunShape s = shape(ctx, batch_tokens);
  s.threads = cpu_threads();
  try {
    (void)offload::plan_memory(target_.desc, draft_ ? &draft_->desc : nullptr, budgets_from(c_.run), s);
  } catch (const Error& e) {
    throw SetupError("memory", e.what());
  }
}

void Session::load(int ctx, int batch_tokens, std::FILE* log) {
  if (draft_) {
    load_weights(*draft_, resident_run(c_.run), offload::RunShape{});
    setup_->draft = draft_->transformer.get();
  }
  load_weights(target_, c_.run, shape(ctx, batch_tokens), draft_ ? &draft_->desc : nullptr);
  if (auto_) {
    auto_result_ = choose_tree_auto(target_, *draft_, c_.run, c_.sampling, c_.tree.budget, c_.tree.depth, log,
                                    c_.tree.acceptance, c_.hardware_profile);
    if (auto_result_->config) {
      setup_->config = *auto_result_->config;
      setup_->config.prefill_chunk = c_.prefill_chunk;
    } else {
      setup_.reset();  // plain decoding is predicted faster
    }
  }
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
  return spec::generate(*target_.transformer, *target_.tokenizer, req, setup_ ? &*setup_ : nullptr, on_text,
                        cancelled);
}

SessionConfig session_config(const jobs::JobConfig& job) {
  SessionConfig c;
  c.run.model = job.target;
  c.run.threads = job.threads;
  c.run.device_mem = job.device_mem;
  c.run.host_mem = job.host_mem;
  c.run.ring = job.ring;
  c.run.verify_io = job.verify_io;
  c.draft = job.draft;
  c.tree = spec::TreeOptions{job.tree,  job.budget, job.depth,      job.threshold, job.delta,
                             job.width, job.verify, job.acceptance, job.is_alphabet};
  c.sampling = job.sampling;
  c.prefill_chunk = job.prefill_chunk;
  return c;
}

}  // namespace redwood::runtime
