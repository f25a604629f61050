// redwood generate: autoregressive decoding, or speculative decoding with a
// draft model and a token tree (--draft), with streaming output.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "src/cli/commands.h"
#include "src/cli/common.h"
#include "src/cli/profiling.h"
#include "src/engine/sampler.h"
#include "src/model/chat_template.h"
#include "src/spec/speculate.h"
#include "src/util/error.h"
#include "src/util/io.h"

namespace redwood::cli {

namespace {
struct GenerateOptions {
  RunOptions run;
  std::string prompt;
  std::string prompt_tokens;
  int max_tokens = 128;
  SamplingParams sampling;
  bool json = false;
  bool chat = false;
  int ctx = 0;
  int prefill_chunk = 512;
  // speculative decoding
  std::string draft, tree = "sequoia", verify, acceptance, hardware_profile;
  // Parsed by redwood (one-line errors, exit 1); empty = not given.
  std::string budget = "64", depth = "8", threshold, delta, width, is_alphabet;
  const CLI::App* cmd = nullptr;  // which flags were given
};

// The speculation flags given without --draft (they would be ignored).
std::string spec_flags_without_draft(const GenerateOptions& o) {
  std::string given;
  if (!o.draft.empty() || !o.cmd) return given;
  for (const char* f : {"--tree", "--verify", "--budget", "--depth", "--threshold", "--delta", "--width",
                        "--is-alphabet", "--acceptance", "--hardware-profile"})
    if (o.cmd->count(f) > 0) given += (given.empty() ? "" : ", ") + std::string(f);
  return given;
}

// The tree/verifier flags as make_spec_config's plain values.
spec::TreeOptions tree_options(const GenerateOptions& o) {
  spec::TreeOptions t;
  t.tree = o.tree;
  t.budget = parse_int_arg(o.budget, "--budget", 1, 8192);
  t.depth = parse_int_arg(o.depth, "--depth", 1, 1024);
  if (!o.threshold.empty()) t.threshold = parse_double_arg(o.threshold, "--threshold");
  if (!o.delta.empty()) t.delta = parse_double_arg(o.delta, "--delta");
  if (!o.width.empty()) t.width = parse_int_arg(o.width, "--width", 1, 4096);
  if (!o.is_alphabet.empty()) t.is_alphabet = parse_int_arg(o.is_alphabet, "--is-alphabet", 1, 1 << 24);
  t.verifier = o.verify;
  t.acceptance = o.acceptance;
  return t;
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int run_generate(GenerateOptions& o) {
  std::vector<std::string> inputs = {o.draft, o.acceptance, o.hardware_profile};
  if (o.tree.rfind("sequoia:", 0) == 0) inputs.push_back(o.tree.substr(8));
  apply_run_options(o.run, inputs);
  validate(o.sampling);
  if (o.cmd && o.cmd->count("--prompt") > 0 && o.prompt.empty()) throw Error("--prompt is empty");
  if (o.prompt.empty() == o.prompt_tokens.empty()) throw Error("give exactly one of --prompt and --prompt-tokens");
  if (const std::string f = spec_flags_without_draft(o); !f.empty())
    throw Error(f + ": speculative decoding needs --draft MODEL");
  check_draft_budget(o.run, o.draft);
  // Speculation flags are checked before any model loads.
  std::optional<spec::SpecConfig> cfg;
  const bool auto_tree = !o.draft.empty() && o.tree == "auto";
  int auto_budget = 0, auto_depth = 0;
  if (!o.hardware_profile.empty() && !auto_tree) throw Error("--hardware-profile is only for --draft ... --tree auto");
  // Profiles given are read late (after weights load, --tree auto after measuring): not a FIFO or device.
  if (!o.acceptance.empty()) require_regular_input(o.acceptance, "an acceptance file");
  if (!o.hardware_profile.empty()) require_regular_input(o.hardware_profile, "a hardware profile");
  if (auto_tree) {
    // --budget and --depth cap the optimizer's search; nothing else applies.
    const spec::TreeOptions t = tree_options(o);
    if (t.threshold || t.delta || t.width || !t.verifier.empty() || t.is_alphabet)
      throw Error(
          "--tree auto chooses the tree, its parameters and its verifier: it takes only --budget and --depth "
          "(caps), "
          "--acceptance and --hardware-profile");
    auto_budget = t.budget;
    auto_depth = t.depth;
  } else if (!o.draft.empty()) {
    cfg = spec::make_spec_config(tree_options(o), o.sampling);
    cfg->prefill_chunk = o.prefill_chunk;
  }
  LoadedModel m = load_model(o.run.model, /*with_weights=*/false);
  std::vector<int32_t> prompt;
  if (!o.prompt_tokens.empty()) {
    prompt = parse_int_list(o.prompt_tokens, "--prompt-tokens");
    for (int32_t t : prompt)
      if (t < 0 || t >= m.desc.hp.vocab) throw Error("--prompt-tokens: id " + std::to_string(t) + " out of range");
  } else {
    // Bounded by bytes before tokenizing (tokenizing costs memory in
    // proportion to the text): by --ctx, else by the model's trained context.
    const int bound = o.ctx > 0 ? o.ctx : m.desc.hp.ctx_len;
    if (bound > 0 && static_cast<int64_t>(o.prompt.size()) > max_prompt_bytes(bound))
      throw Error("--prompt is " + std::to_string(o.prompt.size()) + " bytes; " +
                  (o.ctx > 0 ? "--ctx " : "the model's context (no --ctx) ") + std::to_string(bound) +
                  " allows at most " + std::to_string(kPromptBytesPerToken) + " bytes per token (" +
                  std::to_string(max_prompt_bytes(bound)) + "), so it is not tokenized");
    std::string text = o.prompt;
    if (o.chat) text = apply_chat_template(m.desc.chat_template, {{"user", o.prompt}});
    prompt = m.tokenizer->encode(text, /*add_special=*/true, /*parse_special=*/true);
  }
  if (prompt.empty()) throw Error("the prompt encodes to no tokens");
  const int capacity = o.ctx > 0 ? o.ctx : static_cast<int>(prompt.size()) + o.max_tokens + 1;
  if (static_cast<int>(prompt.size()) + o.max_tokens > capacity)
    throw Error("prompt + --max-tokens exceed --ctx " + std::to_string(capacity));
  if (const int trained = m.desc.hp.ctx_len; trained > 0 && static_cast<int>(prompt.size()) + o.max_tokens > trained)
    std::fprintf(stderr,
                 "redwood: note: the prompt (%zu tokens) + --max-tokens %d go past the %d positions the model was "
                 "trained on; text beyond them is usually poor\n",
                 prompt.size(), o.max_tokens, trained);
  // The draft is always resident; the target's plan counts it.
  std::optional<LoadedModel> d;
  offload::RunShape shape;
  shape.ctx = capacity;
  shape.max_tokens = std::min(static_cast<int>(prompt.size()), o.prefill_chunk);
  if (!o.draft.empty()) {
    d = load_model(o.draft, /*with_weights=*/false);
    load_weights(*d, resident_run(o.run), offload::RunShape{});
    const int nodes = auto_tree ? auto_budget : cfg->max_tree_nodes();
    shape.ctx = capacity + nodes + 2;
    shape.max_tokens = std::max(shape.max_tokens, nodes + 1);
  }
  load_weights(m, o.run, shape, d ? &d->desc : nullptr);
  std::optional<AutoTreeResult> auto_result;
  if (auto_tree) {
    auto_result =
        choose_tree_auto(m, *d, o.run, o.sampling, auto_budget, auto_depth, stderr, o.acceptance, o.hardware_profile);
    if (auto_result->config) {
      cfg = auto_result->config;
      cfg->prefill_chunk = o.prefill_chunk;
    }
  }
  Utf8Stream utf8;
  std::string text;
  std::vector<int32_t> out;
  std::string finish = "length";

  // Emits one token; returns false when generation must stop.
  auto emit = [&](int32_t tok) {
    if (static_cast<int>(out.size()) >= o.max_tokens) return false;
    if (m.tokenizer->is_eog(tok)) {
      finish = "stop";
      return false;
    }
    out.push_back(tok);
    const std::string piece = utf8.push(m.tokenizer->token_bytes(tok));
    text += piece;
    if (!o.json) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    return static_cast<int>(out.size()) < o.max_tokens;
  };

  double t_prefill = 0, t1 = 0;
  std::optional<spec::SpecStats> sstats;
  if (!cfg) {
    KvCache kv = m.transformer->make_cache(capacity);
    Sampler sampler(o.sampling);
    std::vector<float> logits(m.desc.hp.vocab);
    const double t0 = now();
    prefill(*m.transformer, kv, prompt, o.prefill_chunk, logits);
    t_prefill = now() - t0;
    t1 = now();
    while (true) {
      const int32_t tok = sampler.sample(logits);
      if (!emit(tok)) break;
      const int32_t pos = kv.committed();
      const int32_t parent = -1;
      m.transformer->forward(Batch{{&tok, 1}, {&pos, 1}, {&parent, 1}}, kv, logits, LogitsRows::kLast);
      kv.commit_prefix(1);
    }
  } else {
    spec::SpecDecoder dec(*m.transformer, *d->transformer, m.desc, d->desc, *cfg, shape.ctx);
    const double t0 = now();
    dec.start(prompt);
    t_prefill = now() - t0;
    t1 = now();
    bool go = true;
    while (go) {
      for (int32_t tok : dec.step())
        if (!(go = emit(tok))) break;
    }
    sstats = dec.stats();
  }
  const std::string tail = utf8.flush();
  text += tail;
  const double secs = now() - t1;
  const double spt = out.empty() ? 0.0 : secs / static_cast<double>(out.size());
  // An instruct model given a bare prompt often ends its turn at once: say why
  // nothing came out, and what usually helps.
  if (out.empty() && finish == "stop" && !o.chat && !o.prompt.empty() && !m.desc.chat_template.empty())
    std::fprintf(stderr,
                 "redwood: note: the model ended its reply at once (end-of-sequence token); it has a chat template: "
                 "try --chat\n");
  if (o.json) {
    nlohmann::json j;
    j["text"] = text;
    j["tokens"] = out;
    j["n_tokens"] = out.size();
    j["prompt_tokens"] = prompt.size();
    j["seconds"] = secs;
    j["prefill_seconds"] = t_prefill;
    j["s_per_token"] = spt;
    j["finish_reason"] = finish;
    if (auto_result) {
      // What --tree auto chose (also when it chose plain decoding) and its prediction.
      j["tree_auto_choice"] = auto_result->choice;
      j["tree_auto_predicted_s_per_token"] =
          auto_result->config ? auto_result->best.seconds_per_token() : auto_result->autoregressive.seconds_per_token();
      j["tree_auto_predicted_tokens_per_pass"] = auto_result->config ? auto_result->best.tokens : 1.0;
    }
    if (sstats) {
      j["target_passes"] = sstats->target_passes;
      j["draft_passes"] = sstats->draft_passes;
      j["mean_accepted"] = sstats->target_passes ? double(sstats->emitted) / sstats->target_passes : 0.0;
      j["accepted_by_depth"] = sstats->accepted_by_depth;
      j["draft_seconds"] = sstats->draft_seconds;
      j["verify_seconds"] = sstats->verify_seconds;
      j["draft_tokens"] = sstats->draft_tokens;
      // The tree settings in effect and the realised tree size per step (root included).
      nlohmann::json t;
      t["tree"] = o.tree;
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
    if (m.streamed) j["offload"] = offload_stats(m);
    std::puts(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::fwrite(tail.data(), 1, tail.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);  // the text ends before the stats line on stderr
    std::fprintf(stderr, "[%zu prompt tokens in %.3f s; %zu tokens, %.4f s/token, %.2f tokens/s", prompt.size(),
                 t_prefill, out.size(), spt, spt > 0 ? 1.0 / spt : 0.0);
    if (sstats && sstats->target_passes)
      std::fprintf(stderr, "; %d target passes, %.2f tokens/pass", sstats->target_passes,
                   double(sstats->emitted) / sstats->target_passes);
    if (m.streamed) {
      const auto& t = m.streamed->totals();
      std::fprintf(stderr, "; offload: %d passes, %.1f MB from storage, %.3f s stalled", m.streamed->passes(),
                   static_cast<double>(t.storage_bytes) / 1e6, t.stall_seconds);
    }
    std::fprintf(stderr, "]\n");
  }
  finish_run(m, o.run);
  return 0;
}
}  // namespace

Runner add_generate(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  auto* c = app.add_subcommand("generate", "Generate text from a prompt (streams to stdout)");
  o->cmd = c;
  add_run_options(c, o->run);
  c->add_option("--prompt,-p", o->prompt, "Prompt text (special tokens like <|im_start|> are parsed)");
  c->add_option("--prompt-tokens", o->prompt_tokens, "Prompt as comma-separated token ids (instead of --prompt)");
  c->add_flag("--chat", o->chat, "Wrap the prompt in the model's chat template as a user message");
  c->add_option("--max-tokens,-n", o->max_tokens, "Tokens to generate")->transform(int_range(1, 1 << 20));
  c->add_option("--temperature", o->sampling.temperature, "0 = greedy");
  c->add_option("--top-p", o->sampling.top_p, "Nucleus sampling mass (0, 1]");
  c->add_option("--top-k", o->sampling.top_k, "Keep the k most likely tokens (0 = off)");
  c->add_option("--seed", o->sampling.seed, "Random seed (default 0: the same command samples the same text)")
      ->transform(int_range(0, INT64_MAX));
  c->add_option("--ctx", o->ctx, "KV cache capacity (default: prompt + max tokens)")->transform(int_range(1, 1 << 24));
  c->add_option("--prefill-chunk", o->prefill_chunk, "Prompt tokens per pass (bounds activation memory)")
      ->transform(int_range(1, 1 << 20));
  c->add_flag("--json", o->json, "Print one JSON object instead of streaming text");
  c->add_option("--draft", o->draft, "Draft model (same vocabulary): enables speculative decoding");
  c->add_option("--tree", o->tree,
                "Tree: chain:K | kary:WxD | sequoia | sequoia:FILE (static shapes), dyspec | opt-tree | specexec "
                "(built per step from the draft's probabilities), auto (the tree - Sequoia, or a dynamic policy with "
                "its parameters - and verifier, or none, that measured acceptance and pass times predict fastest; "
                "--budget/--depth cap it) (default sequoia)");
  c->add_option("--verify", o->verify,
                "Verifier: greedy | specinfer | sequoia | spectr | multidraft-is | target-sample (default: greedy at "
                "T=0; else sequoia, or target-sample for opt-tree/specexec). dyspec: sequoia|greedy; opt-tree, "
                "specexec: target-sample|greedy");
  c->add_option("--budget", o->budget,
                "sequoia, dyspec, opt-tree, specexec: nodes per target pass, root included, 1..8192 (default 64; "
                "dyspec --threshold: the node cap)")
      ->type_name("INT");
  c->add_option("--depth", o->depth,
                "sequoia and dynamic trees: maximum depth in levels, root included (as in the Sequoia paper), "
                "1..1024 (default 8)")
      ->type_name("INT");
  c->add_option("--threshold", o->threshold,
                "dyspec: 0 = heap variant filling --budget (default); in (0, 1): layer-wise variant expanding "
                "while value > threshold (e.g. 1/budget)")
      ->type_name("NUM");
  c->add_option("--delta", o->delta,
                "opt-tree: stop growing when a layer adds <= delta to the best-n expected length (default 0.5)")
      ->type_name("NUM");
  c->add_option("--width", o->width, "specexec: children per expanded node, 1..4096 (default 4)")->type_name("INT");
  c->add_option("--is-alphabet", o->is_alphabet,
                "multidraft-is: truncate each node's alphabet to the M most likely target tokens (exact: the "
                "result is kept with probability p(Omega0)); default off")
      ->type_name("M");
  c->add_option("--hardware-profile", o->hardware_profile,
                "--tree auto: use this profile-hardware file instead of the cache (with --acceptance: an "
                "acceptance profile instead of the cache's)");
  c->add_option("--acceptance", o->acceptance, "sequoia: acceptance vector JSON {\"acceptance\": [...]}");
  return [o] { return run_generate(*o); };
}

}  // namespace redwood::cli
