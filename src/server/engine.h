// The scheduler between HTTP handler threads and one Session: handlers submit
// jobs to a bounded inbox and wait on each job's own state; ONE scheduler
// thread owns the model. With sequences > 1 it owns the Session's
// BatchGenerator (continuous batching: each request's output what it is
// alone) and calls step(); otherwise (one sequence, or a draft's trees) it
// runs jobs one at a time through Session::generate.
//
//   Engine engine(session, {.max_queue = 64});   // REQUIRES: session loaded
//   auto job = std::make_shared<Job>(tokens, request);
//   if (!engine.submit(job)) reply 429;
//   while (!job->wait_text(&text, 100ms)) ...    // streamed text, then the end
//   job->cancel();                               // the client left: freed at the next pass
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "src/runtime/session.h"
#include "src/speculative/batch_generation.h"
#include "src/speculative/generation.h"
#include "src/util/thread_annotations.h"

namespace redwood::server {

// One request between a handler thread and the scheduler.
class Job {
 public:
  // `req.prompt` is replaced by a view of `tokens` (the job keeps them).
  Job(std::vector<int32_t> tokens, spec::GenerationRequest req);
  const spec::GenerationRequest& request() const { return req_; }
  size_t prompt_tokens() const { return tokens_.size(); }

  // Asks the scheduler to end the job (finish "cancelled") at its next step.
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

  // The scheduler's side: text as it becomes final, then the end.
  void append(std::string_view text) EXCLUDES(mu_);
  void finish(spec::Generation g, std::string error) EXCLUDES(mu_);

  // Waits up to `timeout` for new text or the end: moves the text not yet
  // taken into *text and returns true when the job has ended (then result()).
  bool wait_text(std::string* text, std::chrono::milliseconds timeout) EXCLUDES(mu_);
  // Waits until the job has ended. REQUIRES for result(): wait_text returned true or wait_done().
  void wait_done() EXCLUDES(mu_);
  const spec::Generation& result() const { return result_; }
  const std::string& error() const { return error_; }  // non-empty: the request failed inside the engine

 private:
  std::vector<int32_t> tokens_;
  spec::GenerationRequest req_;
  std::atomic<bool> cancelled_{false};
  Mutex mu_;
  CondVar cv_;
  std::string text_ GUARDED_BY(mu_);
  bool done_ GUARDED_BY(mu_) = false;
  // Written once by finish() before done_ is set (under mu_), read only after done_ is seen.
  spec::Generation result_;
  std::string error_;
};

struct EngineOptions {
  int max_queue = 64;  // jobs waiting beyond those in flight (sequences); more: submit() refuses
};

// Counters for /metrics (a consistent snapshot).
struct EngineMetrics {
  int64_t submitted = 0, finished = 0, cancelled = 0, rejected = 0, failed = 0;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  int64_t in_flight = 0, queued = 0;  // running in the model; waiting for a sequence
  int64_t passes = 0, pass_tokens = 0, decode_tokens = 0;
  double pass_seconds = 0;  // inside the target's forward passes (shared passes), or whole generations (solo)
  double draft_seconds = 0;    // the draft's work: its passes and tree building (with a draft)
  double io_wait_seconds = 0;  // target passes waiting for streamed layers (0 when every layer is resident)
};

class Engine {
 public:
  // REQUIRES: session loaded and outliving the engine. Starts the scheduler thread.
  Engine(runtime::Session& session, EngineOptions o);
  ~Engine();  // stop()
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a job; false (nothing queued) when the queue is full or the engine stops.
  bool submit(const std::shared_ptr<Job>& job) EXCLUDES(mu_);
  // Refuses new jobs, cancels every queued and running one (each ends with
  // finish "cancelled" at the next pass) and joins the scheduler. Idempotent.
  void stop() EXCLUDES(mu_);
  EngineMetrics metrics() const EXCLUDES(mu_);
  int capacity() const { return sequences_ + opt_.max_queue; }

 private:
  void run_shared();
  void run_solo();
  double io_wait_seconds() const;  // REQUIRES: the scheduler thread
  void ended(Job& job, spec::Generation g, std::string error) EXCLUDES(mu_);
  // Next jobs from the inbox: waits while there is nothing to do.
  std::vector<std::shared_ptr<Job>> take(bool busy, bool one) EXCLUDES(mu_);

  runtime::Session& session_;
  EngineOptions opt_;
  const int sequences_;
  mutable Mutex mu_;
  CondVar cv_;
  std::deque<std::shared_ptr<Job>> inbox_ GUARDED_BY(mu_);
  int64_t outstanding_ GUARDED_BY(mu_) = 0;  // submitted and not ended
  int64_t running_ GUARDED_BY(mu_) = 0;      // handed to the model (batcher or generate)
  EngineMetrics m_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::atomic<bool> stop_{false};  // stopping_, for the solo loop's cancelled() poll
  std::thread thread_;
};

}  // namespace redwood::server
