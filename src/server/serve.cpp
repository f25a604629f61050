#include "src/server/serve.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <thread>

#include "src/runtime/model.h"
#include "src/runtime/stop_signal.h"
#include "src/util/error.h"

namespace redwood::server {

namespace {
std::string number_text(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}
}  // namespace

namespace {
// The file's setting for each flag not given: the session's keys ([model],
// [memory], [speculation], [sampling]); memory.ctx and sampling.max_tokens into
// ctx and max_tokens.
void apply_session_keys(runtime::SessionSettings& f, const jobs::ServeFile& file, int& ctx, int& max_tokens) {
  const jobs::JobConfig& j = file.run;
  const auto take = [&](const char* flag, const char* key, auto& dst, const auto& v) {
    if (!(f.given && f.given(flag)) && file.has(key)) dst = v;
  };
  take("--model", "model.target", f.s.run.model, j.target);
  take("--draft", "model.draft", f.s.draft, j.draft);
  take("--device-mem", "memory.device", f.s.run.device_mem, j.device_mem);
  take("--host-mem", "memory.host", f.s.run.host_mem, j.host_mem);
  take("--ring", "memory.ring", f.s.run.ring, j.ring);
  take("--ctx", "memory.ctx", ctx, j.ctx);
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
  take("--temperature", "sampling.temperature", f.s.sampling.temperature, j.sampling.temperature);
  take("--top-p", "sampling.top_p", f.s.sampling.top_p, j.sampling.top_p);
  take("--top-k", "sampling.top_k", f.s.sampling.top_k, j.sampling.top_k);
  take("--seed", "sampling.seed", f.s.sampling.seed, j.sampling.seed);
  take("--max-tokens", "sampling.max_tokens", max_tokens, j.max_tokens);
  if (f.s.draft.empty() && file.has("speculation"))
    throw Error(j.where("speculation") + ": [speculation] needs a draft (model.draft or --draft)");
}
}  // namespace

void apply_serve_file(ServeSettings& f) {
  if (f.config.empty()) return;
  f.file = jobs::parse_serve_file(f.config);
  const jobs::ServeFile& file = f.file;
  apply_session_keys(f, file, f.o.ctx, f.o.max_tokens);
  const auto take = [&](const char* flag, const char* key, auto& dst, const auto& v) {
    if (!(f.given && f.given(flag)) && file.has(key)) dst = v;
  };
  take("--sequences", "batch.sequences", f.sequences, file.run.sequences);
  if (file.has("batch.pass_tokens")) f.s.pass_tokens = file.run.pass_tokens;  // no flag
  take("--host", "server.host", f.o.host, file.host);
  take("--port", "server.port", f.o.port, file.port);
  if (file.has("server.api_key_env") && file.api_key.empty() && !(f.given && f.given("--api-key")))
    throw Error(file.run.where("server.api_key_env") + ": the environment variable '" + file.api_key_env +
                "' is not set or empty (it holds the API key)");
  take("--api-key", "server.api_key_env", f.o.api_key, file.api_key);
  take("--max-queue", "server.max_queue", f.o.max_queue, file.max_queue);
  if (file.has("server.timeout_s")) f.o.timeout_s = file.timeout_s;  // no flag
}

int serve(ServeSettings& f) {
  std::optional<runtime::Session> session;
  if (!f.config.empty()) {
    try {  // a refused configuration: exit 2, as for --host without --api-key
      apply_serve_file(f);
    } catch (const Error& e) {
      std::fprintf(stderr, "redwood: %s\n", e.what());
      return 2;
    }
    f.inputs.push_back(f.config);  // never an output (--trace)
  }
  try {
    runtime::make_session(f, session, [&] { check_serve_options(f.o); });
  } catch (const Error& e) {
    const bool exposed = !f.o.host.empty() && !is_loopback(f.o.host) && f.o.api_key.empty();
    if (!exposed) throw;
    std::fprintf(stderr, "redwood: %s\n", e.what());
    return 2;
  }
  if (f.given_or_set("--seed", "sampling.seed")) f.o.default_seed = f.s.sampling.seed;
  const LoadShape shape = size_session(*session, f.o.ctx, f.given_or_set("--ctx", "memory.ctx"), f.sequences,
                                       f.given_or_set("--sequences", "batch.sequences"));
  ::signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error return, not a signal
  runtime::install_stop_signals();
  Server srv(*session, f.o);
  const int port = srv.bind();
  std::printf("redwood: listening on http://%s:%d\n", f.o.host.c_str(), port);
  std::fflush(stdout);
  session->load(shape.ctx, shape.batch_tokens);
  srv.ready();
  if (session->config().sequences > 1)
    std::fprintf(stderr, "redwood: ready: %s, %d sequences of up to %d positions sharing a KV pool of %d\n",
                 model_id(f.s.run.model).c_str(), session->config().sequences, f.o.ctx, session->config().kv_rows);
  else
    std::fprintf(stderr, "redwood: ready: %s, 1 sequence of %d positions\n", model_id(f.s.run.model).c_str(), f.o.ctx);
  while (runtime::stop_signal() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  srv.stop();
  runtime::finish_run(session->target(), f.s.run);
  std::fprintf(stderr, "redwood: stopped by %s\n", runtime::stop_signal_name());
  return 0;
}

int chat(ChatSettings& f) {
  std::optional<runtime::Session> session;
  if (!f.config.empty()) {
    try {  // as serve's
      f.file = jobs::parse_serve_file(f.config);
      apply_session_keys(f, f.file, f.o.ctx, f.o.max_tokens);
    } catch (const Error& e) {
      std::fprintf(stderr, "redwood: %s\n", e.what());
      return 2;
    }
    f.inputs.push_back(f.config);
  }
  runtime::make_session(f, session);
  session->check_chat_template("redwood chat");
  const LoadShape shape =
      size_session(*session, f.o.ctx, (f.given && f.given("--ctx")) || f.file.has("memory.ctx"), 1, false);
  session->load(shape.ctx, shape.batch_tokens);
  runtime::install_interrupt_signals();  // Ctrl-C stops a reply; SIGTERM/SIGHUP end the conversation
  run_chat(
      *session, f.o, STDIN_FILENO, stdout, [] { return runtime::stop_signal() != 0; },
      [] {
        if (runtime::stop_signal() != SIGINT) return false;
        runtime::clear_stop_signal();
        return true;
      });
  std::fputc('\n', stdout);
  runtime::finish_run(session->target(), f.s.run);
  return 0;
}

}  // namespace redwood::server
