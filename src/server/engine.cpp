#include "src/server/engine.h"

#include <exception>
#include <map>

#include "offload/streamer.h"

namespace redwood::server {

Job::Job(std::vector<int32_t> tokens, spec::GenerationRequest req) : tokens_(std::move(tokens)), req_(std::move(req)) {
  req_.prompt = tokens_;
}

void Job::append(std::string_view text) {
  MutexLock lock(mu_);
  text_.append(text);
  cv_.notify_all();
}

void Job::finish(spec::Generation g, std::string error) {
  MutexLock lock(mu_);
  if (done_) return;
  result_ = std::move(g);
  error_ = std::move(error);
  done_ = true;
  cv_.notify_all();
}

bool Job::wait_text(std::string* text, std::chrono::milliseconds timeout) {
  MutexLock lock(mu_);
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (text_.empty() && !done_ && std::chrono::steady_clock::now() < until) cv_.wait_until(lock, until);
  text->append(text_);
  text_.clear();
  return done_;
}

void Job::wait_done() {
  MutexLock lock(mu_);
  while (!done_) cv_.wait(lock);
}

Engine::Engine(runtime::Session& session, EngineOptions o)
    : session_(session), opt_(o), sequences_(session.config().sequences) {
  if (sequences_ > 1) (void)session_.batcher();  // made here: its errors are the caller's
  thread_ = std::thread([this] { sequences_ > 1 ? run_shared() : run_solo(); });
}

Engine::~Engine() {
  stop();
}

bool Engine::submit(const std::shared_ptr<Job>& job) {
  MutexLock lock(mu_);
  if (stopping_ || outstanding_ >= capacity()) {
    ++m_.rejected;
    return false;
  }
  ++outstanding_;
  ++m_.submitted;
  inbox_.push_back(job);
  cv_.notify_all();
  return true;
}

void Engine::stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
    stop_.store(true);
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

EngineMetrics Engine::metrics() const {
  MutexLock lock(mu_);
  EngineMetrics m = m_;
  m.queued = outstanding_ - running_;
  m.in_flight = running_;
  return m;
}

void Engine::ended(Job& job, spec::Generation g, std::string error) {
  {
    MutexLock lock(mu_);
    --outstanding_;
    ++m_.finished;
    if (g.finish == "cancelled") ++m_.cancelled;
    if (!error.empty()) ++m_.failed;
    m_.prompt_tokens += static_cast<int64_t>(job.prompt_tokens());
    m_.completion_tokens += static_cast<int64_t>(g.tokens.size());
  }
  job.finish(std::move(g), std::move(error));
}

std::vector<std::shared_ptr<Job>> Engine::take(bool busy, bool one) {
  MutexLock lock(mu_);
  while (!busy && inbox_.empty() && !stopping_) cv_.wait(lock);
  std::vector<std::shared_ptr<Job>> jobs;
  while (!inbox_.empty() && (!one || jobs.empty())) {
    jobs.push_back(std::move(inbox_.front()));
    inbox_.pop_front();
  }
  return jobs;
}

// The streamer's totals are the model thread's (this one's) to read.
double Engine::io_wait_seconds() const {
  const offload::StreamedWeights* sw = session_.target().streamed;
  return sw ? sw->totals().stall_seconds : 0.0;
}

// The batcher's loop: submit what arrived, cancel what was cancelled, one pass.
void Engine::run_shared() {
  spec::BatchGenerator& gen = session_.batcher();
  std::map<uint64_t, std::shared_ptr<Job>> live;  // ticket -> job (queued in the batcher or running)
  for (;;) {
    for (auto& job : take(!gen.idle(), false)) {
      try {
        auto* j = job.get();
        live[gen.submit(job->request(), [j](std::string_view s) { j->append(s); })] = job;
      } catch (const std::exception& e) {
        spec::Generation g;
        g.finish = "error";
        ended(*job, std::move(g), e.what());
      }
    }
    const bool stopping = stop_.load();
    for (auto& [ticket, job] : live)
      if (stopping || job->cancelled()) gen.cancel(ticket);
    if (gen.idle()) {
      MutexLock lock(mu_);
      if (stopping_ && inbox_.empty()) return;
      continue;
    }
    std::vector<spec::BatchGenerator::Done> done;
    try {
      done = gen.step();
    } catch (const std::exception& e) {  // the generator must not be used again: fail everything
      {
        MutexLock lock(mu_);
        stopping_ = true;
        stop_.store(true);
      }
      spec::Generation failed;
      failed.finish = "error";
      for (auto& [ticket, job] : live) ended(*job, failed, e.what());
      for (auto& job : take(true, false)) ended(*job, failed, e.what());
      return;
    }
    {
      MutexLock lock(mu_);
      const spec::BatchStats& st = gen.stats();
      m_.passes = st.passes;
      m_.pass_tokens = st.pass_tokens;
      m_.decode_tokens = st.decode_tokens;
      m_.pass_seconds = st.pass_seconds;
      m_.draft_seconds = st.draft_seconds;
      m_.io_wait_seconds = io_wait_seconds();
      running_ = static_cast<int64_t>(gen.in_flight());
    }
    for (auto& d : done) {
      auto it = live.find(d.ticket);
      if (it == live.end()) continue;
      ended(*it->second, std::move(d.generation), std::move(d.error));
      live.erase(it);
    }
  }
}

// One job at a time through Session::generate (speculative trees, or one sequence).
void Engine::run_solo() {
  for (;;) {
    auto jobs = take(false, true);
    if (jobs.empty()) return;  // stopping and nothing left
    Job& job = *jobs.front();
    spec::Generation g;
    std::string error;
    if (stop_.load()) {
      g.finish = "cancelled";
    } else {
      {
        MutexLock lock(mu_);
        running_ = 1;
      }
      try {
        g = session_.generate(
            job.request(), [&job](std::string_view s) { job.append(s); },
            [this, &job] { return job.cancelled() || stop_.load(); });
      } catch (const std::exception& e) {
        g.finish = "error";
        error = e.what();
      }
      MutexLock lock(mu_);
      running_ = 0;
      // Target passes: a tree's verifications, or one per token plus the prompt's chunks.
      m_.passes += g.spec ? g.spec->target_passes : static_cast<int64_t>(g.tokens.size()) + 1;
      m_.decode_tokens += static_cast<int64_t>(g.tokens.size());
      m_.pass_tokens += static_cast<int64_t>(g.tokens.size() + job.prompt_tokens());
      m_.pass_seconds += g.prefill_seconds + g.decode_seconds;
      if (g.spec) m_.draft_seconds += g.spec->draft_seconds;
      m_.io_wait_seconds = io_wait_seconds();
    }
    ended(job, std::move(g), std::move(error));
  }
}

}  // namespace redwood::server
