// redwood serve: an OpenAI-compatible HTTP server over one loaded session
// (src/server). Flags here; requests, scheduling and responses are the library's.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <thread>

#include "src/cli/commands.h"
#include "src/cli/common.h"
#include "src/server/chat.h"
#include "src/server/server.h"
#include "src/util/error.h"

namespace redwood::cli {

namespace {
struct ServeFlags : SessionFlags {
  server::ServeOptions o;
  int sequences = 8;
};

int run_serve(ServeFlags& f) {
  std::optional<Session> session;
  try {
    make_session(f, session, [&] { server::check_serve_options(f.o); });
  } catch (const Error& e) {
    const bool exposed = !f.o.host.empty() && !server::is_loopback(f.o.host) && f.o.api_key.empty();
    if (!exposed) throw;
    std::fprintf(stderr, "redwood: %s\n", e.what());
    return 2;
  }
  if (f.cmd->count("--seed") > 0) f.o.default_seed = f.s.sampling.seed;
  const server::LoadShape shape =
      server::size_session(*session, f.o.ctx, f.cmd->count("--ctx") > 0, f.sequences, f.cmd->count("--sequences") > 0);
  ::signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error return, not a signal
  install_stop_signals();
  server::Server srv(*session, f.o);
  const int port = srv.bind();
  std::printf("redwood: listening on http://%s:%d\n", f.o.host.c_str(), port);
  std::fflush(stdout);
  session->load(shape.ctx, shape.batch_tokens);
  srv.ready();
  std::fprintf(stderr, "redwood: ready: %s, %d sequence(s) of %d positions\n", server::model_id(f.s.run.model).c_str(),
               session->config().sequences, f.o.ctx);
  while (stop_signal() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  srv.stop();
  finish_run(session->target(), f.s.run);
  std::fprintf(stderr, "redwood: stopped by %s\n", stop_signal_name());
  return 0;
}
struct ChatFlags : SessionFlags {
  server::ChatOptions o;
};

int run_chat(ChatFlags& f) {
  std::optional<Session> session;
  make_session(f, session);
  session->check_chat_template("redwood chat");
  const server::LoadShape shape = server::size_session(*session, f.o.ctx, f.cmd->count("--ctx") > 0, 1, false);
  session->load(shape.ctx, shape.batch_tokens);
  install_interrupt_signals();  // Ctrl-C stops a reply; SIGTERM/SIGHUP end the conversation
  server::run_chat(
      *session, f.o, STDIN_FILENO, stdout, [] { return stop_signal() != 0; },
      [] {
        if (stop_signal() != SIGINT) return false;
        clear_stop_signal();
        return true;
      });
  std::fputc('\n', stdout);
  finish_run(session->target(), f.s.run);
  return 0;
}
}  // namespace

Runner add_chat(CLI::App& app) {
  auto f = std::make_shared<ChatFlags>();
  auto* c = app.add_subcommand("chat", "A conversation in the terminal (Ctrl-C stops a reply, /exit leaves)");
  add_session_flags(c, *f);
  c->add_option("--ctx", f->o.ctx, "KV positions: the conversation + one reply (default 2048, or the model's)")
      ->transform(int_range(2, 1 << 20));
  c->add_option("--max-tokens,-n", f->o.max_tokens, "Tokens per reply at most (default 512)")
      ->transform(int_range(1, 1 << 20));
  c->add_option("--system", f->o.system, "A system message opening the conversation");
  return [f] { return run_chat(*f); };
}

Runner add_serve(CLI::App& app) {
  auto f = std::make_shared<ServeFlags>();
  auto* c = app.add_subcommand("serve", "Serve the model over an OpenAI-compatible HTTP API");
  add_session_flags(c, *f);
  c->add_option("--host", f->o.host, "Address to bind (default 127.0.0.1; others need --api-key)");
  c->add_option("--port", f->o.port, "Port (default 8080; 0: a free one, printed)")->transform(int_range(0, 65535));
  c->add_option("--api-key", f->o.api_key, "Require 'Authorization: Bearer KEY' on every request but /health");
  c->add_option("--sequences", f->sequences,
                "Requests sharing each pass (continuous batching; default 8; with --draft 1, or N for static trees in shared passes)")
      ->transform(int_range(1, kMaxSequences));
  c->add_option("--max-queue", f->o.max_queue, "Requests waiting beyond --sequences; more get 429 (default 64)")
      ->transform(int_range(0, 4096));
  c->add_option("--ctx", f->o.ctx, "KV positions per request, prompt + max_tokens (default 2048, or the model's)")
      ->transform(int_range(2, 1 << 20));
  c->add_option("--max-tokens,-n", f->o.max_tokens, "A request's max_tokens when it gives none (default 256)")
      ->transform(int_range(1, 1 << 20));
  return [f] { return run_serve(*f); };
}

}  // namespace redwood::cli
