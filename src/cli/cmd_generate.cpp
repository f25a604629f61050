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
#include "src/runtime/session.h"
#include "src/speculative/speculate.h"
#include "src/util/error.h"
#include "src/util/io.h"

namespace redwood::cli {

namespace {
struct GenerateOptions {
  runtime::SessionConfig s;  // model, run options, draft, sampling, prefill chunk, hardware profile
  std::string prompt, prompt_tokens;
  int max_tokens = 128, ctx = 0;
  bool json = false, chat = false;
  std::vector<std::string> stop;
  // speculative decoding
  std::string tree = "sequoia", verify, acceptance;
  // Parsed by redwood (one-line errors, exit 1); empty = not given.
  std::string budget = "64", depth = "8", threshold, delta, width, is_alphabet;
  const CLI::App* cmd = nullptr;  // which flags were given
};

// The speculation flags given without --draft (they would be ignored).
std::string spec_flags_without_draft(const GenerateOptions& o) {
  std::string given;
  if (!o.s.draft.empty() || !o.cmd) return given;
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
  std::vector<std::string> inputs = {o.s.draft, o.acceptance, o.s.hardware_profile};
  if (o.tree.rfind("sequoia:", 0) == 0) inputs.push_back(o.tree.substr(8));
  apply_run_options(o.s.run, inputs);
  validate(o.s.sampling);
  if (o.cmd && o.cmd->count("--prompt") > 0 && o.prompt.empty()) throw Error("--prompt is empty");
  if (o.prompt.empty() == o.prompt_tokens.empty()) throw Error("give exactly one of --prompt and --prompt-tokens");
  if (const std::string f = spec_flags_without_draft(o); !f.empty())
    throw Error(f + ": speculative decoding needs --draft MODEL");
  check_draft_budget(o.s.run, o.s.draft);
  for (const std::string& st : o.stop)
    if (st.empty()) throw Error("--stop: the stop text is empty");
  const bool auto_tree = !o.s.draft.empty() && o.tree == "auto";
  if (!o.s.hardware_profile.empty() && !auto_tree)
    throw Error("--hardware-profile is only for --draft ... --tree auto");
  // Profiles given are read late (after weights load, --tree auto after measuring): not a FIFO or device.
  if (!o.acceptance.empty()) require_regular_input(o.acceptance, "an acceptance file");
  if (!o.s.hardware_profile.empty()) require_regular_input(o.s.hardware_profile, "a hardware profile");
  if (!o.s.draft.empty()) o.s.tree = tree_options(o);  // flags parsed before any model loads
  if (const spec::TreeOptions& t = o.s.tree;
      auto_tree && (t.threshold || t.delta || t.width || !t.verifier.empty() || t.is_alphabet))
    throw Error(
        "--tree auto chooses the tree, its parameters and its verifier: it takes only --budget and --depth "
        "(caps), --acceptance and --hardware-profile");
  std::optional<runtime::Session> session;
  try {
    session.emplace(o.s);
  } catch (const runtime::SetupError& e) {
    if (e.key() == "draft") throw Error(o.s.draft + ": " + e.what());
    throw;
  }
  LoadedModel& m = session->target();
  runtime::PromptText text{o.prompt, {}, o.chat, {}, o.prompt_tokens.empty() ? "--prompt" : "--prompt-tokens"};
  if (!o.prompt_tokens.empty()) text.tokens = parse_int_list(o.prompt_tokens, "--prompt-tokens");
  if (o.chat && o.prompt_tokens.empty()) session->check_chat_template("--chat");
  const std::vector<int32_t> prompt =
      session->prepare_prompt(text, {o.ctx, "--ctx", o.max_tokens, "--max-tokens", false});
  const int capacity = o.ctx > 0 ? o.ctx : static_cast<int>(prompt.size()) + o.max_tokens + 1;
  if (const int trained = m.desc.hp.ctx_len; trained > 0 && static_cast<int>(prompt.size()) + o.max_tokens > trained)
    std::fprintf(stderr,
                 "redwood: note: the prompt (%zu tokens) + --max-tokens %d go past the %d positions the model was "
                 "trained on; text beyond them is usually poor\n",
                 prompt.size(), o.max_tokens, trained);
  // The draft is always resident; the target's plan counts it and one tree.
  const int nodes = session->tree_nodes();
  session->load(capacity + (nodes ? nodes + 2 : 0), std::min(static_cast<int>(prompt.size()), o.s.prefill_chunk));

  // Ctrl-C (or SIGTERM): the loop stops between steps; the text so far stays.
  install_stop_signals();
  const spec::Generation g = session->generate(
      session->request(prompt, o.max_tokens, o.stop),
      [&](std::string_view piece) {
        if (o.json) return;
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      },
      [] { return stop_signal() != 0; });
  // An instruct model given a bare prompt often ends its turn at once: say why
  // nothing came out, and what usually helps.
  if (g.tokens.empty() && g.finish == "stop" && !o.chat && !o.prompt.empty() && !m.desc.chat_template.empty())
    std::fprintf(stderr,
                 "redwood: note: the model ended its reply at once (end-of-sequence token); it has a chat template: "
                 "try --chat\n");
  if (o.json) {
    const nlohmann::json j = session->report(g, prompt.size());
    std::puts(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::fputc('\n', stdout);
    std::fflush(stdout);  // the text ends before the stats line on stderr
  }
  if (g.finish == "cancelled") {  // one line; the text printed so far stays
    finish_run(m, o.s.run);
    const int sig = stop_signal();
    std::fprintf(stderr, "redwood: interrupted by %s after %zu tokens\n", stop_signal_name(),
                 g.tokens.size());
    return 128 + sig;
  }
  if (!o.json) std::fprintf(stderr, "%s\n", session->report_line(g, prompt.size()).c_str());
  finish_run(m, o.s.run);
  return 0;
}
}  // namespace

Runner add_generate(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  auto* c = app.add_subcommand("generate", "Generate text from a prompt (streams to stdout)");
  o->cmd = c;
  add_run_options(c, o->s.run);
  c->add_option("--prompt,-p", o->prompt, "Prompt text (special tokens like <|im_start|> are parsed)");
  c->add_option("--prompt-tokens", o->prompt_tokens, "Prompt as comma-separated token ids (instead of --prompt)");
  c->add_flag("--chat", o->chat, "Wrap the prompt in the model's chat template as a user message");
  c->add_option("--max-tokens,-n", o->max_tokens, "Tokens to generate")->transform(int_range(1, 1 << 20));
  c->add_option("--temperature", o->s.sampling.temperature, "0 = greedy");
  c->add_option("--top-p", o->s.sampling.top_p, "Nucleus sampling mass (0, 1]");
  c->add_option("--top-k", o->s.sampling.top_k, "Keep the k most likely tokens (0 = off)");
  c->add_option("--seed", o->s.sampling.seed, "Random seed (default 0: the same command samples the same text)")
      ->transform(int_range(0, INT64_MAX));
  c->add_option("--ctx", o->ctx, "KV cache capacity (default: prompt + max tokens)")->transform(int_range(1, 1 << 24));
  c->add_option("--prefill-chunk", o->s.prefill_chunk, "Prompt tokens per pass (bounds activation memory)")
      ->transform(int_range(1, 1 << 20));
  c->add_option("--stop", o->stop,
                "Stop before this text (repeatable); the tokens that completed it are counted, the text is cut")
      ->allow_extra_args(false)
      ->type_name("TEXT");
  c->add_flag("--json", o->json, "Print one JSON object instead of streaming text");
  c->add_option("--draft", o->s.draft, "Draft model (same vocabulary): enables speculative decoding");
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
  c->add_option("--hardware-profile", o->s.hardware_profile,
                "--tree auto: use this profile-hardware file instead of the cache (with --acceptance: an "
                "acceptance profile instead of the cache's)");
  c->add_option("--acceptance", o->acceptance, "sequoia: acceptance vector JSON {\"acceptance\": [...]}");
  return [o] { return run_generate(*o); };
}

}  // namespace redwood::cli
