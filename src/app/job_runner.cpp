#include "src/app/job_runner.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <unordered_set>
#include <vector>

#include "offload/placement.h"
#include "src/engine/sampler.h"
#include "src/jobs/progress.h"
#include "src/jobs/prompts.h"
#include "src/jobs/results.h"
#include "src/jobs/shard.h"
#include "src/jobs/summary.h"
#include "src/model/fingerprint.h"
#include "src/runtime/session.h"
#include "src/util/clock.h"
#include "src/util/error.h"
#include "src/util/file_version.h"
#include "src/util/io.h"
#include "src/util/output_path.h"

namespace redwood::app {

using namespace runtime;
using nlohmann::json;

namespace {

// Per-prompt seed: the job's seed mixed with the id, so a prompt's sample does
// not depend on which prompts ran before it (resumed == uninterrupted).
uint64_t prompt_seed(uint64_t seed, const std::string& key) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  uint64_t z = seed ^ h;  // splitmix64 finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A float setting as the decimal the user wrote (0.9, not 0.8999999761581421).
double short_float(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.7g", static_cast<double>(v));
  return std::strtod(buf, nullptr);
}

// What shapes a line's text, stored in every line so that a resumed run never
// mixes two configurations in one file (jobs::prepare_output). The target is
// known by its file name (for the reader) and by its content's fingerprint (a
// copy elsewhere resumes; another quantization or fine-tune under the same
// name does not). The draft and tree are not here: they change the speed, not
// the distribution of the text.
nlohmann::json output_settings(const jobs::JobConfig& job, const ModelDesc& target) {
  nlohmann::json s = {{"target", jobs::model_file_name(job.target)},
          {"target_fingerprint", model_fingerprint(target)},
          {"max_tokens", job.max_tokens},
          {"temperature", short_float(job.sampling.temperature)},
          {"top_p", short_float(job.sampling.top_p)},
          {"top_k", job.sampling.top_k},
          {"seed", job.sampling.seed},
          {"stop", job.stop},
          {"chat", job.chat}};
  // An F16/BF16 KV cache changes the logits (slightly): such lines do not
  // resume an F32 run's, nor the other way round. F32 is not written, so
  // outputs of redwood before --kv-type resume as before.
  if (job.kv_type != "f32") s["kv_type"] = job.kv_type;
  // A shard's lines are its own (src/jobs/shard.h): no other shard, nor the
  // whole job, resumes into its output. Not written unsharded, as before.
  if (job.shard.active()) s["shard"] = job.shard.str();
  return s;
}

// A job whose every check passed: its session (no weights yet), the model
// files as loaded, and the usable prompts with their tokens.
struct CheckedJob {
  std::optional<Session> session;
  std::vector<FileVersion> model_files;
  jobs::PromptFile pf;  // pf.bad: the lines skipped (input.on_bad_line = "skip")
  std::vector<jobs::PromptItem> items;
  std::vector<std::vector<int32_t>> tokens;  // per item
  int batch_tokens = 0;
  std::vector<int> item_rows;  // per item: KV positions the prompt, its tokens and one tree take (as admitted)
  int rows = 0;  // the most of item_rows (a shared pass's pool: per sequence)
};

// The most sequences batch.sequences = "auto" runs at once.
constexpr int kAutoSequences = 64;

// Continuous batching: a session for sequences > 1 whose plan fits. Throws on
// an explicit count that does not fit (its pool: sequences x the longest
// prompt's rows). "auto": up to kAutoSequences (no more than the prompts) in
// flight, and a KV pool of the most positions the budgets hold, up to what
// that many of the longest prompts need: each sequence is promised its own
// rows when admitted, so short prompts leave room for more of them. Positions
// take device memory from resident layers; on a streamed pass a sequence's
// rows cost a small share of the pass's bytes while each sequence adds its
// tokens to the pass, so the pool takes all it can use. Fewer sequences
// (halved) when not even one longest prompt's rows fit beside that many
// sequences' pass; 1 when none fits.
void choose_sequences(const jobs::JobConfig& job, CheckedJob& c) {
  Session& session = *c.session;
  const char* key = job.device_mem.empty() ? "memory.host" : "memory.device";
  if (!job.sequences_auto) {
    if (session.config().sequences < 2) return;
    try {
      session.check_plan(c.rows, c.batch_tokens);
    } catch (const SetupError& e) {
      throw Error(job.where(key) + ": " + e.what() + " (for batch.sequences = " +
                  std::to_string(session.config().sequences) + ")");
    }
    return;
  }
  std::vector<int> need = c.item_rows;  // longest first
  std::sort(need.begin(), need.end(), std::greater<>());
  const int block = offload::RunShape{}.kv_block_rows;  // the pool's
  const int first = std::min({kAutoSequences, static_cast<int>(c.items.size()), session.max_shared_sequences()});
  for (int b = first; b > 1; b /= 2) {
    session.set_sequences(b);
    int64_t most = 0;  // the b longest prompts' rows, each in whole blocks
    for (int i = 0; i < b; ++i) most += offload::kv_block_aligned_rows(need[static_cast<size_t>(i)], block);
    if (session.fit_kv_rows(c.rows, c.batch_tokens, std::max<int64_t>(most, c.rows)) > 0) return;
  }
  session.set_kv_rows(0);
  session.set_sequences(1);
  try {
    session.check_plan(job.ctx, c.batch_tokens);
  } catch (const SetupError& e) {
    throw Error(job.where(key) + ": " + e.what());
  }
}

// Everything that can be wrong is found before the weights load.
CheckedJob check_job_run(const jobs::JobConfig& job, const JobHooks& hooks) {
  CheckedJob c;
  c.pf = jobs::read_prompts(job.prompts, job.skip_bad_lines);
  jobs::keep_shard(c.pf.items, job.shard);  // a shard's prompts only (by id: src/jobs/shard.h)
  reset_peak_rss();
  try {
    c.session.emplace(session_config(job));
  } catch (const SetupError& e) {
    if (e.key() == "draft") throw Error(job.where("model.draft") + ": " + e.what());
    if (e.key() == "batch") throw Error(job.where("batch.sequences") + ": " + e.what());
    if (e.key() == "tree" && job.tree == "auto") throw Error(job.where("speculation.tree") + ": " + e.what());
    throw Error(job.where("speculation") + ": " + e.what());
  }
  Session& session = *c.session;
  // The model files as loaded: checked again before each prompt and before
  // its line is written (a file changed under the job stops it).
  for (const std::string& f : session.target().desc.files) c.model_files.push_back(file_version(f));
  if (const LoadedModel* d = session.draft())
    for (const std::string& f : d->desc.files) c.model_files.push_back(file_version(f));
  bool chat_needed = job.chat;
  for (const auto& it : c.pf.items) chat_needed |= !it.messages.empty();
  if (chat_needed) session.check_chat_template(job.prompts + ": a chat prompt");
  // Tokenize every prompt: too long for memory.ctx is a bad line.
  const PromptRoom room{job.ctx, "memory.ctx =", job.max_tokens, "max_tokens", /*ctx_holds_tree=*/true};
  for (auto& it : c.pf.items) {
    std::vector<int32_t> t;
    try {
      t = session.prepare_prompt({it.prompt, it.messages, job.chat, {}, "id " + it.id.dump() + ": the prompt"}, room);
    } catch (const PromptError& e) {
      const std::string err = job.prompts + ":" + std::to_string(it.line) + ": " + e.what();
      if (!job.skip_bad_lines) throw Error(err + " (raise memory.ctx, or set input.on_bad_line = \"skip\")");
      c.pf.bad.push_back(err);
      continue;
    }
    // The prompt, its tokens and one step's pending rows (a tree with a draft).
    c.item_rows.push_back(static_cast<int>(t.size()) + job.max_tokens + std::max(1, session.tree_nodes()));
    c.rows = std::max(c.rows, c.item_rows.back());
    c.tokens.push_back(std::move(t));
    c.items.push_back(std::move(it));
  }
  RunOptions run = session.config().run;
  apply_run_options(run);
  c.batch_tokens = std::min(job.ctx, job.prefill_chunk);
  c.rows = std::max(c.rows, 16);
  try {  // (batch.sequences = "auto": choose_sequences checks what it chooses)
    if (session.config().sequences < 2 && !job.sequences_auto) session.check_plan(job.ctx, c.batch_tokens);
  } catch (const SetupError& e) {
    throw Error(job.where(job.device_mem.empty() ? "memory.host" : "memory.device") + ": " + e.what());
  }
  choose_sequences(job, c);
  for (const auto& b : c.pf.bad) std::fprintf(hooks.log, "redwood: skipped %s\n", b.c_str());
  return c;
}

// What the output already holds (this run alone writes it): the prompts left to run.
struct ResumePoint {
  nlohmann::json settings;  // every line's (output_settings)
  jobs::PromptHashes prompt_hashes;
  std::vector<size_t> todo;  // indices into CheckedJob::items
  int64_t already = 0;       // prompts done by earlier runs
};

ResumePoint resume_output(const jobs::JobConfig& job, const CheckedJob& c, const JobHooks& hooks) {
  ResumePoint r;
  r.settings = output_settings(job, c.session->target().desc);
  for (const auto& it : c.items) r.prompt_hashes.emplace(it.key, jobs::prompt_hash(it, job.chat));
  const jobs::ResumeState rs = jobs::prepare_output(job.output, r.settings, {"target_fingerprint"}, &r.prompt_hashes);
  if (rs.torn_bytes > 0)  // even when quiet: the file was changed
    std::fprintf(hooks.log, "redwood: %s: dropped a torn last line (%lld bytes) left by an interrupted run\n",
                 job.output.c_str(), static_cast<long long>(rs.torn_bytes));
  if (rs.partly_checked > 0)
    std::fprintf(hooks.log, "redwood: %s: %lld lines from an older redwood do not record %s; checked on the rest\n",
                 job.output.c_str(), static_cast<long long>(rs.partly_checked), rs.missing_keys.c_str());
  if (rs.unchecked > 0)
    std::fprintf(hooks.log,
                 "redwood: %s: %lld lines from an older redwood carry no settings; assuming they match this job's\n",
                 job.output.c_str(), static_cast<long long>(rs.unchecked));
  if (rs.no_prompt_hash > 0)
    std::fprintf(hooks.log,
                 "redwood: %s: %lld lines from an older redwood carry no prompt hash; not checked against the "
                 "prompts\n",
                 job.output.c_str(), static_cast<long long>(rs.no_prompt_hash));
  if (rs.foreign > 0)
    std::fprintf(hooks.log,
                 "redwood: %s: %lld lines have ids that are not in %s (among its usable prompts); kept, not counted as "
                 "done\n",
                 job.output.c_str(), static_cast<long long>(rs.foreign), job.prompts.c_str());
  for (size_t i = 0; i < c.items.size(); ++i)
    if (!rs.done.count(c.items[i].key)) r.todo.push_back(i);
  r.already = static_cast<int64_t>(c.items.size() - r.todo.size());
  if (r.already > 0 && !hooks.quiet)
    std::fprintf(hooks.log, "redwood: resuming %s: %lld of %zu prompts already done\n", job.output.c_str(),
                 static_cast<long long>(r.already), c.items.size());
  return r;
}

// One prompt's metrics line: its times and memory; what streaming cost its
// target passes (their difference from `io_before`, `passes_before`); the
// speculation's statistics.
nlohmann::ordered_json prompt_metrics(const LoadedModel& m, const spec::Generation& g, size_t prompt_tokens,
                                      const offload::PassIo& io_before, int passes_before) {
  nlohmann::ordered_json metrics = {{"prompt_tokens", prompt_tokens},
                                    {"prefill_seconds", g.prefill_seconds},
                                    {"seconds", g.decode_seconds},
                                    {"s_per_token", g.s_per_token()},
                                    {"peak_rss_bytes", peak_rss()}};  // since the job started
  if (m.streamed) {  // this prompt's target passes (prefill included): their wait for streamed layers,
                     // wall, compute, the I/O thread's busy time and the bytes read for them
    const offload::PassIo& now = m.streamed->totals();
    metrics["streamed_passes"] = m.streamed->passes() - passes_before;
    metrics["stall_seconds"] = now.stall_seconds - io_before.stall_seconds;
    metrics["stream_wall_seconds"] = now.wall_seconds - io_before.wall_seconds;
    metrics["stream_compute_seconds"] = now.compute_seconds - io_before.compute_seconds;
    metrics["io_seconds"] = now.io_seconds - io_before.io_seconds;
    metrics["storage_bytes"] = now.storage_bytes - io_before.storage_bytes;
    metrics["host_bytes"] = now.host_bytes - io_before.host_bytes;
  }
  if (g.spec) {
    metrics["target_passes"] = g.spec->target_passes;
    metrics["mean_accepted"] =
        g.spec->target_passes ? static_cast<double>(g.spec->emitted) / g.spec->target_passes : 0.0;
    int64_t nodes = 0;
    for (const int32_t n : g.spec->tree_nodes) nodes += n;
    metrics["mean_tree_nodes"] = g.spec->tree_nodes.empty()
                                     ? 0.0
                                     : static_cast<double>(nodes) / static_cast<double>(g.spec->tree_nodes.size());
    metrics["draft_seconds"] = g.spec->draft_seconds;
    metrics["verify_seconds"] = g.spec->verify_seconds;
  }
  return metrics;
}

// What running the prompts left to do came to.
struct RunTally {
  jobs::ProgressState ps;
  bool interrupted = false;
  double t_start = 0;
  std::string auto_choice;  // what tree = "auto" chose (summary)
  std::optional<spec::BatchStats> shared;  // continuous batching's passes
};

// Writes the prompts' lines as they end, keeps the progress display, and
// stops before a line when a model file changed under the job.
class LineSink {
 public:
  LineSink(const jobs::JobConfig& job, const CheckedJob& c, const ResumePoint& r, const jobs::OutputLock& lock,
           const JobHooks& hooks, RunTally& tally)
      : job_(job), c_(c), r_(r), hooks_(hooks), tally_(tally), writer_(job.output, job.fsync_every, &lock),
        progress_(hooks.log, hooks.tty, job.progress_every) {
    tally_.ps.total = static_cast<int64_t>(c.items.size());
    tally_.ps.done = r.already;
    tally_.t_start = now_seconds();
  }
  bool cancelled() const { return hooks_.cancelled && hooks_.cancelled(); }
  // Tokens per target pass for the progress line (accepted per pass, or sequences per shared pass).
  void count_passes(int64_t passes, int64_t tokens) { passes_ += passes, pass_tokens_ += tokens; }
  void refresh(bool force) {
    if (hooks_.quiet) return;
    jobs::ProgressState& ps = tally_.ps;
    ps.seconds = now_seconds() - tally_.t_start;
    ps.accepted_per_pass = passes_ ? static_cast<double>(pass_tokens_) / static_cast<double>(passes_) : 0.0;
    progress_.update(ps, force);
  }
  // A model file changed since it was loaded: stop before writing item i's line.
  void check_model_files(size_t i) const {
    for (const FileVersion& v : c_.model_files)
      if (const std::string what = file_change(v); !what.empty())
        throw Error(v.path + ": the model file changed while the job ran (" + what + "); stopped before writing id " +
                    c_.items[i].id.dump() + " (this run wrote " + std::to_string(tally_.ps.done_this_run) +
                    " of its lines)");
  }
  // Item i's line: its tokens, or the error that ended it (non-finite logits:
  // a broken model is the prompt's error, the job goes on and exits 1).
  void line(size_t i, const spec::Generation& g, const std::string& error, nlohmann::ordered_json metrics) {
    const jobs::PromptItem& it = c_.items[i];
    if (!error.empty())
      std::fprintf(hooks_.log, "redwood: %s: id %s: %s\n", job_.prompts.c_str(), it.id.dump().c_str(), error.c_str());
    check_model_files(i);
    nlohmann::ordered_json line{{"id", it.id},
                                {"text", g.text},
                                {"tokens", g.tokens},
                                {"n_tokens", g.tokens.size()},
                                {"finish_reason", g.finish}};
    if (!error.empty()) line["error"] = error;
    line["metrics"] = std::move(metrics);
    line["prompt_hash"] = r_.prompt_hashes.at(it.key);
    line["settings"] = r_.settings;
    writer_.append(line);
    jobs::ProgressState& ps = tally_.ps;
    ps.done++;
    ps.done_this_run++;
    ps.tokens += static_cast<int64_t>(g.tokens.size());
    refresh(false);
  }
  void close() {
    writer_.close();
    if (!hooks_.quiet) {
      tally_.ps.seconds = now_seconds() - tally_.t_start;
      progress_.finish(tally_.ps);
    }
  }

 private:
  const jobs::JobConfig& job_;
  const CheckedJob& c_;
  const ResumePoint& r_;
  const JobHooks& hooks_;
  RunTally& tally_;
  jobs::ResultWriter writer_;
  jobs::Progress progress_;
  int64_t passes_ = 0, pass_tokens_ = 0;
};

// One prompt at a time through Session::generate (plain or speculative).
void run_one_at_a_time(const jobs::JobConfig& job, CheckedJob& c, const ResumePoint& r, LineSink& sink,
                       RunTally& tally) {
  Session& session = *c.session;
  const LoadedModel& m = session.target();
  for (size_t i : r.todo) {
    sink.check_model_files(i);
    spec::GenerationRequest req = session.request(c.tokens[i], job.max_tokens, job.stop);
    req.sampling.seed = prompt_seed(job.sampling.seed, c.items[i].key);
    const offload::PassIo io_before = m.streamed ? m.streamed->totals() : offload::PassIo{};
    const int passes_before = m.streamed ? m.streamed->passes() : 0;
    spec::Generation g;
    std::string error;
    try {
      g = session.generate(req, {}, [&] {
        sink.refresh(false);
        return sink.cancelled();
      });
    } catch (const NonFiniteLogits& e) {
      error = e.what();
      g.finish = "error";
    }
    if (g.finish == "cancelled") {  // abandoned: nothing of it is written
      tally.interrupted = true;
      break;
    }
    if (g.spec) sink.count_passes(g.spec->target_passes, g.spec->emitted);
    sink.line(i, g, error, prompt_metrics(m, g, c.tokens[i].size(), io_before, passes_before));
    if (sink.cancelled()) {
      tally.interrupted = tally.ps.done < tally.ps.total;
      break;
    }
  }
}

// Continuous batching: the prompts left share target passes (Session::batcher),
// each line written as its prompt ends; a stop abandons the prompts in flight
// (a resume redoes them). Streaming costs are the job's (summary "offload"),
// not split per line.
void run_shared(const jobs::JobConfig& job, CheckedJob& c, const ResumePoint& r, LineSink& sink, RunTally& tally) {
  Session& session = *c.session;
  spec::BatchGenerator& gen = session.batcher();
  std::map<uint64_t, size_t> item_of;  // ticket -> item
  size_t next = 0;                     // into r.todo
  const size_t keep_queued = static_cast<size_t>(session.config().sequences);
  const spec::BatchStats& st = gen.stats();
  int64_t passes_seen = 0, tokens_seen = 0;
  int64_t ended_slots = 0;  // decode slots of the prompts ended (a prompt's first token is its prefill's)
  while (next < r.todo.size() || !gen.idle()) {
    if (sink.cancelled()) {
      tally.interrupted = true;
      break;
    }
    while (next < r.todo.size() && gen.queued() < keep_queued) {  // feed the queue, not the whole job at once
      const size_t i = r.todo[next++];
      spec::GenerationRequest req = session.request(c.tokens[i], job.max_tokens, job.stop);
      req.sampling.seed = prompt_seed(job.sampling.seed, c.items[i].key);
      item_of[gen.submit(req)] = i;
    }
    std::vector<spec::BatchGenerator::Done> ended = gen.step();
    tally.ps.in_flight = static_cast<int64_t>(gen.in_flight());  // the progress line's, with their tokens so far
    for (const auto& d : ended)
      ended_slots += std::max<int64_t>(0, static_cast<int64_t>(d.generation.tokens.size()) - 1);
    tally.ps.tokens_in_flight = std::max<int64_t>(0, st.decode_tokens - ended_slots);
    for (auto& d : ended) {
      const size_t i = item_of.at(d.ticket);
      item_of.erase(d.ticket);
      const spec::Generation& g = d.generation;
      sink.line(i, g, d.error,
                {{"prompt_tokens", c.tokens[i].size()},
                 {"prefill_seconds", g.prefill_seconds},
                 {"seconds", g.decode_seconds},
                 {"s_per_token", g.s_per_token()},
                 {"peak_rss_bytes", peak_rss()},
                 {"shared_pass_sequences", session.config().sequences}});
    }
    sink.count_passes(st.passes - passes_seen, st.decode_tokens - tokens_seen);
    passes_seen = st.passes, tokens_seen = st.decode_tokens;
    sink.refresh(false);
  }
  tally.ps.in_flight = tally.ps.tokens_in_flight = 0;  // abandoned (a stop) or none left
  tally.shared = st;
}

// Loads the weights (when anything is left to do) and writes one line per prompt left.
RunTally run_prompts(const jobs::JobConfig& job, CheckedJob& c, const ResumePoint& r, const jobs::OutputLock& lock,
                     const JobHooks& hooks) {
  Session& session = *c.session;
  const bool shared = session.config().sequences > 1;
  RunTally tally;
  if (!r.todo.empty()) {
    // A shared pass's pool holds what the longest prompt needs, not memory.ctx.
    session.load(shared ? c.rows : job.ctx, c.batch_tokens, hooks.quiet ? nullptr : hooks.log);
    if (const auto& a = session.auto_choice()) tally.auto_choice = a->choice;
  }
  LineSink sink(job, c, r, lock, hooks, tally);
  if (!r.todo.empty()) sink.refresh(true);  // (else the final line below is the only one)
  if (shared && !r.todo.empty())
    run_shared(job, c, r, sink, tally);
  else
    run_one_at_a_time(job, c, r, sink, tally);
  sink.close();
  return tally;
}

// The summary over everything in the output that belongs to this prompt set.
json summarise(const jobs::JobConfig& job, const CheckedJob& c, const ResumePoint& r, const RunTally& tally) {
  std::unordered_set<std::string> wanted;
  for (const auto& it : c.items) wanted.insert(it.key);
  jobs::RunFacts f;
  f.job = job.name.empty() ? job.file : job.name;
  f.output = job.output;
  f.prompts = static_cast<int64_t>(c.items.size());
  f.bad_lines = static_cast<int64_t>(c.pf.bad.size());
  f.done_this_run = tally.ps.done_this_run;
  f.already_done = r.already;
  f.tokens_this_run = tally.ps.tokens;
  f.wall_seconds = now_seconds() - tally.t_start;
  f.interrupted = tally.interrupted;
  const spec::SpecConfig* cfg = c.session->spec_config();
  f.config = {{"target", job.target},
              {"draft", job.draft},
              {"tree", job.draft.empty() ? "" : job.tree},
              {"tree_auto_choice", tally.auto_choice},
              {"verify", cfg ? spec::verifier_name(cfg->verifier) : ""},
              {"budget", job.budget},
              {"temperature", short_float(job.sampling.temperature)},
              {"top_p", short_float(job.sampling.top_p)},
              {"top_k", job.sampling.top_k},
              {"seed", job.sampling.seed},
              {"max_tokens", job.max_tokens},
              {"device_mem", job.device_mem},
              {"host_mem", job.host_mem},
              {"verify_io", job.verify_io},
              {"kv_type", job.kv_type},
              {"sequences", c.session->config().sequences},
              {"pass_tokens", job.pass_tokens}};
  if (c.session->config().sequences > 1) {  // the paged KV pool's positions, all sequences together
    offload::RunShape pool;
    pool.sequences = c.session->config().sequences;
    pool.ctx = c.rows;
    pool.kv_rows = c.session->config().kv_rows;
    f.config["kv_pool_rows"] = offload::kv_pool_blocks(pool) * pool.kv_block_rows;
  }
  if (job.shard.active()) f.config["shard"] = job.shard.str();
  json s = jobs::summary_json(jobs::total_results(job.output, wanted), f);
  if (c.session->target().streamed) s["offload"] = offload_stats(c.session->target());
  if (tally.shared) {
    const spec::BatchStats& b = *tally.shared;
    s["shared_passes"] = {{"passes", b.passes},
                          {"tokens_per_pass", b.passes ? static_cast<double>(b.pass_tokens) / b.passes : 0.0},
                          {"decode_tokens_per_pass", b.passes ? static_cast<double>(b.decode_tokens) / b.passes : 0.0},
                          {"pass_seconds", b.pass_seconds},
                          {"max_pass_tokens", b.max_pass_tokens},
                          {"max_in_flight", b.max_in_flight}};
    if (c.session->spec_config()) {
      // Trees in the shared passes: drafted nodes per tree step, tokens per decode slot.
      s["shared_passes"]["tree_steps"] = b.tree_steps;
      s["shared_passes"]["tree_nodes_per_step"] = b.tree_steps ? static_cast<double>(b.tree_nodes) / b.tree_steps : 0.0;
      s["shared_passes"]["tokens_per_decode_slot"] =
          b.decode_tokens ? static_cast<double>(b.emitted) / b.decode_tokens : 0.0;
      // The draft's passes: each carries every tree's nodes of one level.
      s["shared_passes"]["draft_passes"] = b.draft_passes;
      s["shared_passes"]["draft_tokens_per_pass"] =
          b.draft_passes ? static_cast<double>(b.draft_tokens) / b.draft_passes : 0.0;
      s["shared_passes"]["draft_seconds"] = b.draft_seconds;
      s["shared_passes"]["max_draft_pass_tokens"] = b.max_draft_pass_tokens;
    }
  }
  return s;
}

}  // namespace

JobOutcome run_job(const jobs::JobConfig& job, const JobHooks& hooks) {
  CheckedJob c = check_job_run(job, hooks);
  jobs::create_output_dirs(job);
  const jobs::OutputLock lock(job.output);
  const ResumePoint r = resume_output(job, c, hooks);
  const RunTally tally = run_prompts(job, c, r, lock, hooks);
  json s = summarise(job, c, r, tally);
  write_output_file(job.summary, s.dump(2) + "\n");
  return {std::move(s), tally.interrupted};
}

JobEnd job_end(const jobs::JobConfig& job, const JobOutcome& out, int sig, const char* sig_name) {
  const json& p = out.summary["prompts"];
  const long long done = p["done"].get<long long>();
  char buf[256];
  if (out.interrupted) {
    std::snprintf(buf, sizeof buf, "interrupted by %s: %lld of %lld prompts done in ", sig_name, done,
                  p["total"].get<long long>());
    return {buf + job.output + "; run the same command again to resume", 128 + (sig ? sig : SIGINT)};
  }
  if (const json& reasons = out.summary["finish_reasons"]; reasons.contains("error")) {
    std::snprintf(buf, sizeof buf, "%lld of %lld prompts failed (finish_reason \"error\" in ",
                  reasons["error"].get<long long>(), done);
    return {buf + job.output + ": their lines say why); summary " + job.summary, 1};
  }
  std::snprintf(buf, sizeof buf, "%lld prompts done (%lld this run, %lld bad lines skipped) -> ", done,
                p["done_this_run"].get<long long>(), p["bad_lines"].get<long long>());
  return {buf + job.output + "; summary " + job.summary, 0};
}

}  // namespace redwood::app
