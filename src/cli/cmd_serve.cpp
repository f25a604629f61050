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
#include "src/jobs/serve_config.h"
#include "src/server/chat.h"
#include "src/server/server.h"
#include "src/util/error.h"

namespace redwood::cli {

namespace {
struct ServeFlags : SessionFlags {
  server::ServeOptions o;
  int sequences = 8;
  std::string config;
  jobs::ServeFile file;
  // Set by the flag, or else by the file's key.
  bool given(const char* flag, const char* key) const { return cmd->count(flag) > 0 || file.has(key); }
};

std::string number_text(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

// The file's setting for every flag not given on the command line.
void apply_file(ServeFlags& f) {
  const jobs::ServeFile& file = f.file;
  const jobs::JobConfig& j = file.run;
  const auto take = [&](const char* flag, const char* key, auto& dst, const auto& v) {
    if (f.cmd->count(flag) == 0 && file.has(key)) dst = v;
  };
  take("--model", "model.target", f.s.run.model, j.target);
  take("--draft", "model.draft", f.s.draft, j.draft);
  take("--device-mem", "memory.device", f.s.run.device_mem, j.device_mem);
  take("--host-mem", "memory.host", f.s.run.host_mem, j.host_mem);
  take("--ring", "memory.ring", f.s.run.ring, j.ring);
  take("--ctx", "memory.ctx", f.o.ctx, j.ctx);
  take("--threads", "memory.threads", f.s.run.threads, j.threads);
  take("--verify-io", "memory.verify_io", f.s.run.verify_io, j.verify_io);
  take("--kv-type", "memory.kv_type", f.s.run.kv_type, j.kv_type);
  take("--tree", "speculation.tree", f.tree, j.tree);
  take("--verify", "speculation.verify", f.verify, j.verify);
  take("--budget", "speculation.budget", f.budget, std::to_string(j.budget));
  take("--depth", "speculation.depth", f.depth, std::to_string(j.depth));
  take("--threshold", "speculation.threshold", f.threshold, number_text(j.threshold.value_or(0)));
  take("--delta", "speculation.delta", f.delta, number_text(j.delta.value_or(0)));
  take("--width", "speculation.width", f.width, std::to_string(j.width.value_or(0)));
  take("--is-alphabet", "speculation.is_alphabet", f.is_alphabet, std::to_string(j.is_alphabet.value_or(0)));
  take("--acceptance", "speculation.acceptance", f.acceptance, j.acceptance);
  take("--prefill-chunk", "speculation.prefill_chunk", f.s.prefill_chunk, j.prefill_chunk);
  take("--sequences", "batch.sequences", f.sequences, j.sequences);
  if (file.has("batch.pass_tokens")) f.s.pass_tokens = j.pass_tokens;  // no flag
  take("--temperature", "sampling.temperature", f.s.sampling.temperature, j.sampling.temperature);
  take("--top-p", "sampling.top_p", f.s.sampling.top_p, j.sampling.top_p);
  take("--top-k", "sampling.top_k", f.s.sampling.top_k, j.sampling.top_k);
  take("--seed", "sampling.seed", f.s.sampling.seed, j.sampling.seed);
  take("--max-tokens", "sampling.max_tokens", f.o.max_tokens, j.max_tokens);
  take("--host", "server.host", f.o.host, file.host);
  take("--port", "server.port", f.o.port, file.port);
  take("--api-key", "server.api_key_env", f.o.api_key, file.api_key);
  take("--max-queue", "server.max_queue", f.o.max_queue, file.max_queue);
  if (file.has("server.timeout_s")) f.o.timeout_s = file.timeout_s;  // no flag
  if (f.s.draft.empty() && file.has("speculation"))
    throw Error(j.where("speculation") + ": [speculation] needs a draft (model.draft or --draft)");
}

int run_serve(ServeFlags& f) {
  std::optional<Session> session;
  if (!f.config.empty()) {
    try {  // a refused configuration: exit 2, as for --host without --api-key
      f.file = jobs::parse_serve_file(f.config);
      apply_file(f);
    } catch (const Error& e) {
      std::fprintf(stderr, "redwood: %s\n", e.what());
      return 2;
    }
    f.inputs.push_back(f.config);  // never an output (--trace)
  }
  try {
    make_session(f, session, [&] { server::check_serve_options(f.o); });
  } catch (const Error& e) {
    const bool exposed = !f.o.host.empty() && !server::is_loopback(f.o.host) && f.o.api_key.empty();
    if (!exposed) throw;
    std::fprintf(stderr, "redwood: %s\n", e.what());
    return 2;
  }
  if (f.given("--seed", "sampling.seed")) f.o.default_seed = f.s.sampling.seed;
  const server::LoadShape shape = server::size_session(*session, f.o.ctx, f.given("--ctx", "memory.ctx"), f.sequences,
                                                       f.given("--sequences", "batch.sequences"));
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
  c->add_option("--config", f->config,
                "A serve file (TOML, e.g. configs/serve/default.toml): the flags' settings in a job file's sections "
                "and [server]; flags given win");
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
