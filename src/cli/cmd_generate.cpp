// redwood generate: autoregressive decoding, or speculative decoding with a
// draft model and a token tree (--draft), with streaming output.
#include <signal.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "src/cli/commands.h"
#include "src/cli/common.h"
#include "src/engine/sampler.h"
#include "src/model/chat_template.h"
#include "src/runtime/session.h"
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
  std::vector<std::string> stop;
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
  const bool auto_tree = !o.draft.empty() && o.tree == "auto";
  if (!o.hardware_profile.empty() && !auto_tree) throw Error("--hardware-profile is only for --draft ... --tree auto");
  // Profiles given are read late (after weights load, --tree auto after measuring): not a FIFO or device.
  if (!o.acceptance.empty()) require_regular_input(o.acceptance, "an acceptance file");
  if (!o.hardware_profile.empty()) require_regular_input(o.hardware_profile, "a hardware profile");
  runtime::SessionConfig sc;
  sc.run = o.run;
  sc.draft = o.draft;
  sc.sampling = o.sampling;
  sc.prefill_chunk = o.prefill_chunk;
  sc.hardware_profile = o.hardware_profile;
  if (!o.draft.empty()) sc.tree = tree_options(o);  // flags parsed before any model loads
  if (auto_tree) {
    const spec::TreeOptions& t = sc.tree;
    if (t.threshold || t.delta || t.width || !t.verifier.empty() || t.is_alphabet)
      throw Error(
          "--tree auto chooses the tree, its parameters and its verifier: it takes only --budget and --depth "
          "(caps), --acceptance and --hardware-profile");
  }
  std::optional<runtime::Session> session;
  try {
    session.emplace(sc);
  } catch (const runtime::SetupError& e) {
    if (e.key() == "draft") throw Error(o.draft + ": " + e.what());
    throw;
  }
  LoadedModel& m = session->target();
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
  for (const std::string& st : o.stop)
    if (st.empty()) throw Error("--stop: the stop text is empty");
  const int capacity = o.ctx > 0 ? o.ctx : static_cast<int>(prompt.size()) + o.max_tokens + 1;
  if (static_cast<int>(prompt.size()) + o.max_tokens > capacity)
    throw Error("prompt + --max-tokens exceed --ctx " + std::to_string(capacity));
  if (const int trained = m.desc.hp.ctx_len; trained > 0 && static_cast<int>(prompt.size()) + o.max_tokens > trained)
    std::fprintf(stderr,
                 "redwood: note: the prompt (%zu tokens) + --max-tokens %d go past the %d positions the model was "
                 "trained on; text beyond them is usually poor\n",
                 prompt.size(), o.max_tokens, trained);
  // The draft is always resident; the target's plan counts it and one tree.
  const int nodes = session->tree_nodes();
  session->load(capacity + (nodes ? nodes + 2 : 0), std::min(static_cast<int>(prompt.size()), o.prefill_chunk));

  spec::GenerationRequest req;
  req.prompt = prompt;
  req.sampling = o.sampling;
  req.max_tokens = o.max_tokens;
  req.prefill_chunk = o.prefill_chunk;
  req.stop = o.stop;
  // Ctrl-C (or SIGTERM): the loop stops between steps; the text so far stays.
  install_stop_signals();
  const spec::Generation g = session->generate(
      req,
      [&](std::string_view piece) {
        if (o.json) return;
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      },
      [] { return stop_signal() != 0; });
  const std::optional<spec::SpecStats>& sstats = g.spec;
  const spec::SpecConfig* cfg = session->spec_config();
  const std::optional<runtime::AutoTreeResult>& auto_result = session->auto_choice();
  const double secs = g.decode_seconds;
  const double spt = g.s_per_token();
  // An instruct model given a bare prompt often ends its turn at once: say why
  // nothing came out, and what usually helps.
  if (g.tokens.empty() && g.finish == "stop" && !o.chat && !o.prompt.empty() &&
      !m.desc.chat_template.empty())
    std::fprintf(stderr,
                 "redwood: note: the model ended its reply at once (end-of-sequence token); it has a chat template: "
                 "try --chat\n");
  if (o.json) {
    nlohmann::json j;
    j["text"] = g.text;
    j["tokens"] = g.tokens;
    j["n_tokens"] = g.tokens.size();
    j["prompt_tokens"] = prompt.size();
    j["seconds"] = secs;
    j["prefill_seconds"] = g.prefill_seconds;
    j["s_per_token"] = spt;
    j["finish_reason"] = g.finish;
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
    std::fputc('\n', stdout);
    std::fflush(stdout);  // the text ends before the stats line on stderr
  }
  if (g.finish == "cancelled") {  // one line; the text printed so far stays
    finish_run(m, o.run);
    const int sig = stop_signal();
    std::fprintf(stderr, "redwood: interrupted by %s after %zu tokens\n", sig == SIGTERM ? "SIGTERM" : "SIGINT",
                 g.tokens.size());
    return 128 + sig;
  }
  if (!o.json) {
    std::fprintf(stderr, "[%zu prompt tokens in %.3f s; %zu tokens, %.4f s/token, %.2f tokens/s", prompt.size(),
                 g.prefill_seconds, g.tokens.size(), spt, spt > 0 ? 1.0 / spt : 0.0);
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
  c->add_option("--stop", o->stop,
                "Stop before this text (repeatable); the tokens that completed it are counted, the text is cut")
      ->allow_extra_args(false)
      ->type_name("TEXT");
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
