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
struct GenerateOptions : SessionFlags {
  std::string prompt, prompt_tokens;
  int max_tokens = 128, ctx = 0;
  bool json = false, chat = false;
  std::vector<std::string> stop;
};

int run_generate(GenerateOptions& o) {
  std::optional<runtime::Session> session;
  make_session(o, session, [&] {
    if (o.cmd && o.cmd->count("--prompt") > 0 && o.prompt.empty()) throw Error("--prompt is empty");
    if (o.prompt.empty() == o.prompt_tokens.empty()) throw Error("give exactly one of --prompt and --prompt-tokens");
  }, [&] {
    for (const std::string& st : o.stop)
      if (st.empty()) throw Error("--stop: the stop text is empty");
  });
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
  add_session_flags(c, *o);
  c->add_option("--prompt,-p", o->prompt, "Prompt text (special tokens like <|im_start|> are parsed)");
  c->add_option("--prompt-tokens", o->prompt_tokens, "Prompt as comma-separated token ids (instead of --prompt)");
  c->add_flag("--chat", o->chat, "Wrap the prompt in the model's chat template as a user message");
  c->add_option("--max-tokens,-n", o->max_tokens, "Tokens to generate")->transform(int_range(1, 1 << 20));
  c->add_option("--ctx", o->ctx, "KV cache capacity (default: prompt + max tokens)")->transform(int_range(1, 1 << 24));
  c->add_option("--stop", o->stop,
                "Stop before this text (repeatable); the tokens that completed it are counted, the text is cut")
      ->allow_extra_args(false)
      ->type_name("TEXT");
  c->add_flag("--json", o->json, "Print one JSON object instead of streaming text");
  return [o] { return run_generate(*o); };
}

}  // namespace redwood::cli
