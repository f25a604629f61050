// `redwood serve`'s library side: an OpenAI-compatible HTTP server (cpp-httplib)
// over one Session, its requests run by an Engine (engine.h).
//
//   Server server(session, options);   // options checked (check_serve_options)
//   int port = server.bind();           // listening; /health says "loading"
//   session.load(...);                  // the model loads while clients can ask /health
//   server.ready();                     // the engine starts; requests are answered
//   ... until a signal ...
//   server.stop();                      // refuse new requests, cancel in-flight ones, close
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <thread>

#include "src/runtime/session.h"
#include "src/server/api.h"
#include "src/server/engine.h"
#include "src/util/thread_annotations.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}

namespace redwood::server {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8080;         // 0: a free port (bind() says which)
  std::string api_key;     // empty: no key (loopback hosts only)
  int max_queue = 64;      // requests waiting beyond the sequences in flight; more get 429
  int ctx = 2048;          // KV positions per request: prompt + max_tokens
  int max_tokens = 256;    // a request's default max_tokens (capped by the room ctx leaves)
  size_t max_body = 1 << 20;  // bytes of a request body; more get 413
  int timeout_s = 30;      // reading a request, writing a response
  std::string model_id;    // what clients name the model (model_id(path) when empty)
  std::optional<uint64_t> default_seed;  // a request without a seed: this, else a fresh one
};

// Session::load's arguments for serving requests of `ctx` positions each.
struct LoadShape {
  int ctx = 0, batch_tokens = 0;
};
// Sizes a session (before load) for requests of *ctx positions: *ctx capped by
// the model's trained context unless given; `sequences` requests sharing each
// pass (with a draft: 1, unless given, which the session then refuses); the
// memory plan checked (redwood::Error naming --sequences and --ctx).
LoadShape size_session(runtime::Session& s, int& ctx, bool ctx_given, int sequences, bool sequences_given);

// The id clients use for a model file: its file name without .gguf (a directory: its name).
std::string model_id(const std::string& path);
bool is_loopback(const std::string& host);
// Throws redwood::Error (one line) for options that cannot serve: a host that
// is not loopback without an API key, a bad port or bound.
void check_serve_options(const ServeOptions& o);

class Server {
 public:
  // REQUIRES: session outlives the server; config().sequences as it will run.
  Server(runtime::Session& session, ServeOptions o);
  ~Server();  // stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds host:port and starts answering (/health: loading; the API: 503 until
  // ready()). Returns the port. Throws redwood::Error naming host:port.
  int bind();
  // After session.load(): starts the engine; the API answers.
  void ready();
  // Refuses new requests, cancels the running ones (each ends at its next
  // pass; streams get their last chunk), waits up to `grace_s` for responses
  // to finish, then closes every connection. Idempotent.
  void stop(double grace_s = 3.0);

  // The Prometheus text of /metrics.
  std::string metrics_text() const;

 private:
  void routes();
  // POST /v1/chat/completions, /v1/completions: checked, queued, answered as the job's text comes.
  void generate(const httplib::Request& req, httplib::Response& res, Endpoint e);
  void count_status(int status) EXCLUDES(mu_);

  runtime::Session& session_;
  ServeOptions o_;
  std::unique_ptr<httplib::Server> http_;
  std::unique_ptr<Engine> engine_;  // set before ready_
  std::atomic<bool> ready_{false}, stopping_{false};
  std::atomic<int> open_responses_{0};  // handlers and content providers not yet released
  std::atomic<uint64_t> next_id_{1};
  std::string chat_error_;  // why chat completions cannot run (no usable template); empty: they can
  int64_t started_ = 0;     // Unix seconds
  std::thread listener_;
  mutable Mutex mu_;
  std::map<int, int64_t> responses_ GUARDED_BY(mu_);  // by HTTP status
};

}  // namespace redwood::server
