#include "src/server/server.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <random>

#include "offload/placement.h"
#include "src/engine/sampler.h"
#include "src/server/api.h"
#include "src/speculative/speculate.h"
#include "src/util/error.h"

namespace redwood::server {

using nlohmann::json;

std::string model_id(const std::string& path) {
  std::filesystem::path p(path);
  while (!p.empty() && p.filename().empty()) p = p.parent_path();  // "dir/"
  std::string name = p.filename().string();
  if (name.size() > 5 && name.compare(name.size() - 5, 5, ".gguf") == 0) name.resize(name.size() - 5);
  return name.empty() ? path : name;
}

bool is_loopback(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  in_addr a{};
  return inet_pton(AF_INET, host.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

void check_serve_options(const ServeOptions& o) {
  if (o.host.empty()) throw Error("--host is empty");
  if (!is_loopback(o.host) && o.api_key.empty())
    throw Error("--host " + o.host +
                " is not a loopback address: serving beyond this machine needs --api-key KEY (clients send "
                "'Authorization: Bearer KEY')");
  if (o.port < 0 || o.port > 65535) throw Error("--port must be in [0, 65535], got " + std::to_string(o.port));
  if (o.ctx < 2) throw Error("--ctx must be at least 2, got " + std::to_string(o.ctx));
}

LoadShape size_session(runtime::Session& s, int& ctx, bool ctx_given, int sequences, bool sequences_given) {
  const int trained = s.target().desc.hp.ctx_len;
  if (!ctx_given && trained > 0) ctx = std::min(ctx, trained);
  // With a draft the default shares passes when the tree is static (trees grow
  // together, one draft pass per level); "auto" may choose a dynamic tree, which
  // shared passes cannot take, so a lone user would lose it: one at a time.
  // A count given is taken (a dynamic tree with several: the Session's error).
  const std::string& tree = s.config().tree.tree;
  const bool static_tree = tree != "auto" && spec::parse_tree_kind(tree) == spec::TreeKind::kStatic;
  if (!s.draft() || static_tree || (sequences_given && sequences > 1)) s.set_sequences(sequences);
  const int nodes = s.tree_nodes();
  LoadShape shape;
  shape.ctx = ctx + 1 + (nodes ? nodes + 2 : 0);  // +1: the last token's row; a tree on top
  shape.batch_tokens = s.config().sequences > 1 ? s.config().pass_tokens : std::min(ctx, s.config().prefill_chunk);
  // Several sequences share a paged KV pool: the most positions the budget
  // holds, up to sequences x ctx; each request is promised its own rows, so
  // short requests run that many at once and long ones wait their turn.
  const int block = offload::RunShape{}.kv_block_rows;  // each request's rows in whole blocks, as admitted
  const int64_t each = offload::kv_block_aligned_rows(shape.ctx, block);
  if (s.config().sequences > 1 && s.fit_kv_rows(shape.ctx, shape.batch_tokens, s.config().sequences * each) > 0)
    return shape;
  try {
    s.check_plan(shape.ctx, shape.batch_tokens);
  } catch (const runtime::SetupError& e) {
    throw Error(std::string(e.what()) + " (for --sequences " + std::to_string(s.config().sequences) + " and --ctx " +
                std::to_string(ctx) + ": lower them or raise the budget)");
  }
  return shape;
}

namespace {

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(dump(error_json(e)), "application/json");
}

// A key comparison whose time does not depend on where the strings differ.
bool same_key(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i % (b.empty() ? 1 : b.size())]);
  return diff == 0 && !b.empty();
}

const char* status_message(int status) {
  switch (status) {
    case 400:
      return "bad request";
    case 404:
      return "no such endpoint";
    case 405:
      return "method not allowed";
    case 413:
      return "the request body is too large";
    case 414:
      return "the request URI is too long";
    default:
      return status >= 500 ? "internal server error" : "the request failed";
  }
}

}  // namespace

namespace {

using Clock = std::chrono::steady_clock;

// Waits up to `ms` for `events` on fd: true when they came.
bool wait_for(int fd, short events, int ms) {
  pollfd p{fd, events, 0};
  int r;
  do r = ::poll(&p, 1, std::max(ms, 0));
  while (r < 0 && errno == EINTR);
  return r > 0 && (p.revents & (events | POLLHUP | POLLERR)) != 0;
}

int ms_until(Clock::time_point t) {
  return static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count());
}

void address_of(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage a{};
  socklen_t n = sizeof a;
  ip.clear();
  port = 0;
  if ((peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &n)
            : ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n)) != 0)
    return;
  char text[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    ::inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
    port = ntohs(v4->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
    ::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
    port = ntohs(v6->sin6_port);
  }
  ip = text;
}

// One connection. A request (its line, headers and body) must arrive whole
// before its deadline: a client that trickles a byte at a time is cut off
// there, not kept for as long as each byte comes within a read timeout (which
// is all cpp-httplib's own stream bounds). Each write waits at most the write
// timeout for room, so a client that stops reading fails the write (and its
// job is cancelled) instead of holding the thread.
class ConnStream final : public httplib::Stream {
 public:
  ConnStream(int fd, int write_timeout_ms) : fd_(fd), write_ms_(write_timeout_ms) {}
  void set_deadline(Clock::time_point t) { deadline_ = t; }
  bool buffered() const { return pos_ < end_; }

  bool is_readable() const override { return buffered() || wait_for(fd_, POLLIN, ms_until(deadline_)); }
  bool is_writable() const override {
    if (!wait_for(fd_, POLLOUT, write_ms_)) return false;
    char c;  // readable with nothing to read: the client closed (or reset) the connection
    if (!wait_for(fd_, POLLIN, 0)) return true;
    return ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
  }
  ssize_t read(char* ptr, size_t size) override {
    while (!buffered()) {
      if (!wait_for(fd_, POLLIN, ms_until(deadline_))) return -1;  // past the request's deadline
      const ssize_t n = ::recv(fd_, buf_, sizeof buf_, MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) return n;  // closed, or an error
      pos_ = 0;
      end_ = static_cast<size_t>(n);
    }
    const size_t n = std::min(size, end_ - pos_);
    std::copy(buf_ + pos_, buf_ + pos_ + n, ptr);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    size_t done = 0;
    while (done < size) {
      if (!wait_for(fd_, POLLOUT, write_ms_)) return -1;
      const ssize_t n = ::send(fd_, ptr + done, size - done, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) return -1;
      done += static_cast<size_t>(n);
    }
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { address_of(fd_, true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address_of(fd_, false, ip, port); }
  socket_t socket() const override { return fd_; }

 private:
  int fd_;
  int write_ms_;
  Clock::time_point deadline_ = Clock::now();
  char buf_[4096];
  size_t pos_ = 0, end_ = 0;
};

// cpp-httplib's server with its connections read through ConnStream: a
// request's deadline, bounded writes, and an idle connection closed after
// the keep-alive timeout (or at once when the server stops).
class HttpServer final : public httplib::Server {
 public:
  explicit HttpServer(int timeout_s) : timeout_(std::chrono::seconds(timeout_s)) {}

 private:
  bool process_and_close_socket(socket_t sock) override {
    ConnStream strm(sock, static_cast<int>(timeout_.count()) * 1000);
    bool ok = false;
    for (size_t left = keep_alive_max_count_; left > 0; --left) {
      const auto idle_until = Clock::now() + std::chrono::seconds(keep_alive_timeout_sec_);
      bool ready = strm.buffered();  // the next request waits: in 0.1 s slices, so that stop() ends the wait
      while (!ready && svr_sock_ != INVALID_SOCKET && Clock::now() < idle_until)
        ready = wait_for(sock, POLLIN, std::min(100, std::max(1, ms_until(idle_until))));
      if (!ready || svr_sock_ == INVALID_SOCKET) break;
      strm.set_deadline(Clock::now() + timeout_);
      bool closed = false;
      ok = process_request(strm, left == 1, closed, nullptr);
      if (!ok || closed) break;
    }
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    return ok;
  }

  std::chrono::seconds timeout_;
};

}  // namespace

Server::Server(runtime::Session& session, ServeOptions o) : session_(session), o_(std::move(o)) {
  check_serve_options(o_);
  if (o_.model_id.empty()) o_.model_id = model_id(session_.config().run.model);
  try {
    session_.check_chat_template("/v1/chat/completions");
  } catch (const Error& e) {
    chat_error_ = e.what();
  }
  started_ = static_cast<int64_t>(std::time(nullptr));
  http_ = std::make_unique<HttpServer>(o_.timeout_s);
  // A thread per connection being answered: every request the engine may hold, and a few for /health, /metrics.
  const size_t threads = static_cast<size_t>(session_.config().sequences + o_.max_queue + 4);
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_->set_payload_max_length(o_.max_body);
  http_->set_keep_alive_timeout(5);  // reads and writes: HttpServer's timeout
  routes();
}

Server::~Server() {
  stop(0.5);
}

void Server::count_status(int status) {
  MutexLock lock(mu_);
  ++responses_[status];
}

int Server::bind() {
  int port = o_.port;
  if (port == 0) {
    port = http_->bind_to_any_port(o_.host);
    if (port < 0) throw Error(o_.host + ": cannot bind a port (not an address of this machine?)");
  } else if (!http_->bind_to_port(o_.host, port)) {
    throw Error(o_.host + ":" + std::to_string(port) + ": cannot bind (in use, or not an address of this machine)");
  }
  listener_ = std::thread([this] { http_->listen_after_bind(); });
  return port;
}

void Server::ready() {
  engine_ = std::make_unique<Engine>(session_, EngineOptions{o_.max_queue});
  ready_.store(true);
}

void Server::stop(double grace_s) {
  if (stopping_.exchange(true)) return;
  if (engine_) engine_->stop();  // every job ends now (cancelled): handlers and streams finish their responses
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
  while (open_responses_.load() > 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  http_->stop();
  if (listener_.joinable()) listener_.join();
}

std::string Server::metrics_text() const {
  std::string out;
  char line[256];
  auto metric = [&](const char* name, const char* type, const char* help, double v) {
    std::snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
    out += line;
  };
  metric("redwood_ready", "gauge", "1 once the model is loaded and requests are answered", ready_.load() ? 1 : 0);
  {
    MutexLock lock(mu_);
    out += "# HELP redwood_http_responses_total HTTP responses by status code\n"
           "# TYPE redwood_http_responses_total counter\n";
    for (const auto& [status, n] : responses_) {
      std::snprintf(line, sizeof line, "redwood_http_responses_total{code=\"%d\"} %" PRId64 "\n", status, n);
      out += line;
    }
  }
  const EngineMetrics m = engine_ && ready_.load() ? engine_->metrics() : EngineMetrics{};
  metric("redwood_requests_submitted_total", "counter", "generation requests queued", double(m.submitted));
  metric("redwood_requests_finished_total", "counter", "generation requests ended (any way)", double(m.finished));
  metric("redwood_requests_cancelled_total", "counter", "requests ended by a client leaving or a shutdown",
         double(m.cancelled));
  metric("redwood_requests_rejected_total", "counter", "requests refused with 429 (queue full) or 503",
         double(m.rejected));
  metric("redwood_requests_failed_total", "counter", "requests that failed in the engine", double(m.failed));
  metric("redwood_requests_in_flight", "gauge", "requests holding a sequence in the model", double(m.in_flight));
  metric("redwood_queue_depth", "gauge", "requests waiting for a sequence", double(m.queued));
  metric("redwood_prompt_tokens_total", "counter", "prompt tokens of ended requests", double(m.prompt_tokens));
  metric("redwood_completion_tokens_total", "counter", "tokens generated for ended requests",
         double(m.completion_tokens));
  metric("redwood_passes_total", "counter", "target forward passes", double(m.passes));
  metric("redwood_pass_tokens_total", "counter", "tokens over all target passes (prompt and generated)",
         double(m.pass_tokens));
  metric("redwood_pass_decode_tokens_total", "counter", "generated-token slots over all target passes",
         double(m.decode_tokens));
  metric("redwood_tokens_per_pass", "gauge", "generated tokens per target pass, so far",
         m.passes ? double(m.decode_tokens) / double(m.passes) : 0.0);
  metric("redwood_pass_seconds_total", "counter",
         "seconds inside target passes (shared passes), or in whole generations (one request at a time)",
         m.pass_seconds);
  metric("redwood_draft_seconds_total", "counter", "seconds of the draft's work: its passes and tree building",
         m.draft_seconds);
  metric("redwood_io_wait_seconds_total", "counter",
         "seconds target passes waited for streamed layers (0 when every layer is resident)", m.io_wait_seconds);
  return out;
}

void Server::routes() {
  httplib::Server& h = *http_;
  h.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
    if (!o_.api_key.empty()) {
      const std::string auth = req.get_header_value("Authorization");
      const std::string prefix = "Bearer ";
      if (auth.compare(0, prefix.size(), prefix) != 0 || !same_key(auth.substr(prefix.size()), o_.api_key)) {
        send_error(res, ApiError(401, "missing or wrong API key: send 'Authorization: Bearer KEY'", {},
                                 "invalid_api_key"));
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    if ((!ready_.load() || stopping_.load()) && req.path != "/metrics") {
      res.set_header("Retry-After", "5");
      send_error(res, ApiError(503, stopping_.load() ? "the server is shutting down" : "the model is loading", {},
                               {}, "server_error"));
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  h.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.body.empty())  // httplib's own refusals (404, 413, 400 ...): in the API's shape
      send_error(res, ApiError(res.status, status_message(res.status), {}, {},
                               res.status >= 500 ? "server_error" : "invalid_request_error"));
  });
  h.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, ApiError(500, what, {}, {}, "server_error"));
  });
  h.set_post_routing_handler([this](const httplib::Request&, httplib::Response& res) { count_status(res.status); });

  h.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const bool up = ready_.load() && !stopping_.load();
    res.status = up ? 200 : 503;
    res.set_content(json{{"status", up ? "ok" : stopping_.load() ? "stopping" : "loading"}}.dump(),
                    "application/json");
  });
  h.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_text(), "text/plain; version=0.0.4");
  });
  h.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    const json model = {{"id", o_.model_id}, {"object", "model"}, {"created", started_}, {"owned_by", "redwood"}};
    res.set_content(dump(json{{"object", "list"}, {"data", json::array({model})}}), "application/json");
  });
  h.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
    if (req.matches[1] != o_.model_id) {
      send_error(res, ApiError(404, "The model '" + std::string(req.matches[1]) + "' does not exist", "model",
                               "model_not_found"));
      return;
    }
    res.set_content(dump(json{{"id", o_.model_id}, {"object", "model"}, {"created", started_}, {"owned_by", "redwood"}}),
                    "application/json");
  });
  for (const Endpoint e : {Endpoint::chat, Endpoint::completion}) {
    h.Post(e == Endpoint::chat ? "/v1/chat/completions" : "/v1/completions",
           [this, e](const httplib::Request& req, httplib::Response& res) {
             try {
               generate(req, res, e);
             } catch (const ApiError& err) {
               send_error(res, err);
             }
           });
  }
}

namespace {

// One response being written: the job's text as SSE chunks (stream) or, at
// its end, the whole JSON. Every second without output it writes a blank
// (an SSE comment, or JSON's leading whitespace), so a client that left is
// noticed and its job cancelled.
struct Reply {
  std::shared_ptr<Job> job;
  ApiRequest r;
  ResponseMeta meta;
  bool first = true;
  std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();
};

bool provide(Reply& st, httplib::DataSink& sink) {
  using namespace std::chrono;
  std::string text, out;
  const bool done = st.job->wait_text(&text, milliseconds(200));
  const auto now = steady_clock::now();
  if (st.r.stream) {
    if (st.first && st.r.endpoint == Endpoint::chat) out += sse_event(chunk_json(st.r, st.meta, "", true, ""));
    st.first = false;
    if (!text.empty()) out += sse_event(chunk_json(st.r, st.meta, text, false, ""));
    if (done) {
      const spec::Generation& g = st.job->result();
      if (!st.job->error().empty())
        out += sse_event(error_json(ApiError(500, st.job->error(), {}, {}, "server_error")));
      else
        out += sse_event(chunk_json(st.r, st.meta, "", false, finish_reason(g)));
      if (st.r.include_usage) out += sse_event(usage_chunk_json(st.r, st.meta, st.job->prompt_tokens(), g.tokens.size()));
      out += "data: [DONE]\n\n";
    } else if (out.empty() && now - st.last_write > seconds(1)) {
      out = ": keep-alive\n\n";
    }
  } else if (done) {
    out = st.job->error().empty()
              ? dump(completion_json(st.r, st.meta, st.job->result(), st.job->prompt_tokens()))
              : dump(error_json(ApiError(500, st.job->error(), {}, {}, "server_error")));
  } else if (now - st.last_write > seconds(1)) {
    out = " ";
  }
  if (!out.empty()) {
    if (!sink.write(out.data(), out.size())) {
      st.job->cancel();
      return false;
    }
    st.last_write = now;
  }
  if (done) {
    sink.done();
    return true;
  }
  return true;
}

}  // namespace

void Server::generate(const httplib::Request& req, httplib::Response& res, Endpoint e) {
  ApiRequest r = parse_request(req.body, e, o_.model_id);
  if (e == Endpoint::chat && !chat_error_.empty()) throw ApiError(400, chat_error_ + "; use /v1/completions", "messages");
  const SamplingParams& base = session_.config().sampling;
  if (session_.draft() && r.temperature && (*r.temperature <= 0) != base.greedy())
    throw ApiError(400,
                   std::string("temperature: this server's draft tree was set up for ") +
                       (base.greedy() ? "greedy decoding (temperature 0)" : "sampling (temperature > 0)") +
                       "; restart it with another --temperature to change that",
                   "temperature");
  std::vector<int32_t> tokens;
  try {
    tokens = session_.prepare_prompt(r.prompt, {o_.ctx, "the server's --ctx", r.max_tokens.value_or(1),
                                                "max_tokens", /*ctx_holds_tree=*/false});
  } catch (const runtime::PromptError& err) {
    throw ApiError(400, err.what(), e == Endpoint::chat ? "messages" : "prompt");
  }
  const int max_tokens = r.max_tokens ? *r.max_tokens : std::min(o_.max_tokens, o_.ctx - static_cast<int>(tokens.size()));
  const uint64_t seed = r.seed                ? *r.seed
                        : o_.default_seed ? *o_.default_seed
                                          : (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  spec::GenerationRequest g = session_.request({}, max_tokens, r.stop);
  g.sampling = request_sampling(r, base, seed);
  try {
    validate(g.sampling);
  } catch (const Error& err) {
    throw ApiError(400, err.what());
  }
  auto job = std::make_shared<Job>(std::move(tokens), g);
  if (!engine_->submit(job)) {
    if (stopping_.load()) throw ApiError(503, "the server is shutting down", {}, {}, "server_error");
    res.set_header("Retry-After", "1");
    throw ApiError(429,
                   "the server is busy (" + std::to_string(engine_->capacity()) +
                       " requests running or queued): retry later",
                   {}, "queue_full", "rate_limit_error");
  }
  char id[64];
  std::snprintf(id, sizeof id, "%s%" PRIx64 "%06" PRIx64, e == Endpoint::chat ? "chatcmpl-" : "cmpl-",
                static_cast<uint64_t>(started_), next_id_.fetch_add(1));
  auto reply = std::make_shared<Reply>(Reply{job, std::move(r), {id, static_cast<int64_t>(std::time(nullptr)), o_.model_id}});
  if (reply->r.stream) res.set_header("Cache-Control", "no-cache");
  ++open_responses_;
  res.set_chunked_content_provider(
      reply->r.stream ? "text/event-stream" : "application/json",
      [reply](size_t, httplib::DataSink& sink) { return provide(*reply, sink); },
      [this, job](bool ok) {
        if (!ok) job->cancel();  // the client left (or the server closes): the sequence is freed at the next pass
        --open_responses_;
      });
}

}  // namespace redwood::server
