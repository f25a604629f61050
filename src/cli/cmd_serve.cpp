// redwood serve: an OpenAI-compatible HTTP server over one loaded session, and
// redwood chat: the same session in the terminal. Flags here; what they do is
// src/server's (serve.h).
#include "src/cli/commands.h"
#include "src/cli/common.h"
#include "src/server/serve.h"

namespace redwood::cli {

Runner add_chat(CLI::App& app) {
  auto f = std::make_shared<server::ChatSettings>();
  auto* c = app.add_subcommand("chat", "A conversation in the terminal (Ctrl-C stops a reply, /exit leaves)");
  add_session_flags(c, *f);
  c->add_option("--ctx", f->o.ctx, "KV positions: the conversation + one reply (default 2048, or the model's)")
      ->transform(int_range(2, 1 << 20));
  c->add_option("--max-tokens,-n", f->o.max_tokens, "Tokens per reply at most (default 512)")
      ->transform(int_range(1, 1 << 20));
  c->add_option("--system", f->o.system, "A system message opening the conversation");
  c->add_option("--config", f->config,
                "A serve file (TOML): its model, memory, speculation and sampling settings; flags given win");
  return [f] { return server::chat(*f); };
}

Runner add_serve(CLI::App& app) {
  auto f = std::make_shared<server::ServeSettings>();
  auto* c = app.add_subcommand("serve", "Serve the model over an OpenAI-compatible HTTP API");
  add_session_flags(c, *f);
  c->add_option("--config", f->config,
                "A serve file (TOML, e.g. configs/serve/default.toml): the flags' settings in a job file's sections "
                "and [server]; flags given win");
  c->add_option("--host", f->o.host, "Address to bind (default 127.0.0.1; others need --api-key)");
  c->add_option("--port", f->o.port, "Port (default 8080; 0: a free one, printed)")->transform(int_range(0, 65535));
  c->add_option("--api-key", f->o.api_key, "Require 'Authorization: Bearer KEY' on every request but /health");
  c->add_option("--sequences", f->sequences,
                "Requests sharing each pass (continuous batching; default 8, also with --draft and a static tree; "
                "1 with --tree auto or a dynamic tree)")
      ->transform(int_range(1, kMaxSequences));
  c->add_option("--max-queue", f->o.max_queue, "Requests waiting beyond --sequences; more get 429 (default 64)")
      ->transform(int_range(0, 4096));
  c->add_option("--ctx", f->o.ctx, "KV positions per request, prompt + max_tokens (default 2048, or the model's)")
      ->transform(int_range(2, 1 << 20));
  c->add_option("--max-tokens,-n", f->o.max_tokens, "A request's max_tokens when it gives none (default 256)")
      ->transform(int_range(1, 1 << 20));
  return [f] { return server::serve(*f); };
}

}  // namespace redwood::cli
