// redwood batch JOB.toml: config-driven generation over a JSONL prompt file,
// resumable and crash-safe (see src/jobs/results.h).
#include "src/cli/batch.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>

#include "kernels/cpu/threads.h"
#include "src/cli/commands.h"
#include "src/cli/common.h"
#include "src/cli/profiling.h"
#include "src/jobs/progress.h"
#include "src/jobs/prompts.h"
#include "src/jobs/results.h"
#include "src/model/chat_template.h"
#include "src/model/fingerprint.h"
#include "src/spec/generation.h"
#include "src/util/error.h"
#include "src/util/file_version.h"

namespace redwood::cli {

using nlohmann::json;

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

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

std::vector<int32_t> encode_prompt(const jobs::PromptItem& it, const jobs::JobConfig& job, const LoadedModel& m) {
  std::string text = it.prompt;
  if (!it.messages.empty())
    text = apply_chat_template(m.desc.chat_template, it.messages);
  else if (job.chat)
    text = apply_chat_template(m.desc.chat_template, {{"user", it.prompt}});
  return m.tokenizer->encode(text, /*add_special=*/true, /*parse_special=*/true);
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
  return s;
}

}  // namespace

JobOutcome run_job(const jobs::JobConfig& job, const JobHooks& hooks) {
  // ---- everything that can be wrong is found before the weights load ----
  jobs::PromptFile pf = jobs::read_prompts(job.prompts, job.skip_bad_lines);
  reset_peak_rss();
  LoadedModel m = load_model(job.target, /*with_weights=*/false);
  // The model files as loaded: checked again before each prompt and before
  // its line is written (a file changed under the job stops it).
  std::vector<FileVersion> model_files;
  for (const std::string& f : m.desc.files) model_files.push_back(file_version(f));
  std::optional<LoadedModel> d;
  std::optional<spec::DraftSetup> ds;
  const bool auto_tree = !job.draft.empty() && job.tree == "auto";
  std::string auto_choice;  // what --tree auto chose (summary)
  if (!job.draft.empty()) {
    d = load_model(job.draft, /*with_weights=*/false);
    for (const std::string& f : d->desc.files) model_files.push_back(file_version(f));
    if (d->desc.hp.vocab != m.desc.hp.vocab || d->desc.tokenizer.tokens != m.desc.tokenizer.tokens)
      throw Error(job.where("model.draft") + ": the draft's vocabulary differs from the target's");
    ds.emplace();
    ds->target_desc = &m.desc;
    ds->draft_desc = &d->desc;
    if (auto_tree) {
      if (job.threshold || job.delta || job.width || !job.verify.empty() || job.is_alphabet)
        throw Error(job.where("speculation.tree") +
                    ": tree = \"auto\" chooses the tree, its parameters and its verifier; it takes only budget and "
                    "depth (caps) and acceptance (a profile)");
    } else {
      try {
        ds->config = spec::make_spec_config(spec::TreeOptions{job.tree, job.budget, job.depth, job.threshold, job.delta,
                                                              job.width, job.verify, job.acceptance, job.is_alphabet},
                                            job.sampling);
      } catch (const Error& e) {
        throw Error(job.where("speculation") + ": " + e.what());
      }
    }
  }
  bool chat_needed = job.chat;
  for (const auto& it : pf.items) chat_needed |= !it.messages.empty();
  if (chat_needed) {
    try {
      (void)apply_chat_template(m.desc.chat_template, {{"user", "x"}});
    } catch (const Error& e) {
      throw Error(job.prompts + ": prompts need a chat template, but " + m.desc.path + " has none usable (" + e.what() +
                  ")");
    }
  }
  // Tokenize every prompt: too long for memory.ctx is a bad line.
  const int tree_nodes = ds ? (auto_tree ? job.budget : ds->config.max_tree_nodes()) : 0;
  std::vector<std::vector<int32_t>> tokens;
  std::vector<jobs::PromptItem> items;
  for (auto& it : pf.items) {
    // Bounded by bytes first: tokenizing a huge line costs memory in
    // proportion to it, whatever memory.device says.
    size_t bytes = it.prompt.size();
    for (const ChatMessage& msg : it.messages) bytes += msg.role.size() + msg.content.size();
    std::vector<int32_t> t;
    std::string err;
    if (static_cast<int64_t>(bytes) > max_prompt_bytes(job.ctx))
      err = "id " + it.id.dump() + ": the prompt is " + std::to_string(bytes) + " bytes; memory.ctx = " +
            std::to_string(job.ctx) + " allows at most " + std::to_string(kPromptBytesPerToken) +
            " bytes per token (" + std::to_string(max_prompt_bytes(job.ctx)) + "), so it is not tokenized";
    if (err.empty()) {
      t = encode_prompt(it, job, m);
      if (t.empty())
        err = "the prompt encodes to no tokens";
      else if (static_cast<int>(t.size()) + job.max_tokens + tree_nodes + 2 > job.ctx)
        err = "the prompt has " + std::to_string(t.size()) + " tokens; with max_tokens " +
              std::to_string(job.max_tokens) + (tree_nodes ? " and a tree of " + std::to_string(tree_nodes) : "") +
              " it exceeds memory.ctx = " + std::to_string(job.ctx);
    }
    if (!err.empty()) {
      err = job.prompts + ":" + std::to_string(it.line) + ": " + err;
      if (!job.skip_bad_lines) throw Error(err + " (raise memory.ctx, or set input.on_bad_line = \"skip\")");
      pf.bad.push_back(err);
      continue;
    }
    tokens.push_back(std::move(t));
    items.push_back(std::move(it));
  }
  RunOptions run;
  run.model = job.target;
  run.threads = job.threads;
  run.device_mem = job.device_mem;
  run.host_mem = job.host_mem;
  run.ring = job.ring;
  run.verify_io = job.verify_io;
  run.kv_type = job.kv_type;
  offload::RunShape shape;
  shape.ctx = job.ctx;
  shape.kv_type = parse_kv_type(job.kv_type, "memory.kv_type");
  shape.max_tokens = std::max(std::min(job.ctx, job.prefill_chunk), tree_nodes + 1);
  apply_run_options(run);
  if (!job.device_mem.empty() || !job.host_mem.empty()) {
    offload::RunShape s = shape;
    s.threads = cpu_threads();
    try {
      (void)offload::plan_memory(m.desc, d ? &d->desc : nullptr, budgets_from(run), s);
    } catch (const Error& e) {
      throw Error(job.where(job.device_mem.empty() ? "memory.host" : "memory.device") + ": " + e.what());
    }
  }
  for (const auto& b : pf.bad) std::fprintf(hooks.log, "redwood: skipped %s\n", b.c_str());

  // ---- resume: what the output already holds (this run alone writes it) ----
  jobs::create_output_dirs(job);
  const jobs::OutputLock lock(job.output);
  const nlohmann::json settings = output_settings(job, m.desc);
  jobs::PromptHashes prompt_hashes;
  for (const auto& it : items) prompt_hashes.emplace(it.key, jobs::prompt_hash(it, job.chat));
  const jobs::ResumeState rs = jobs::prepare_output(job.output, settings, {"target_fingerprint"}, &prompt_hashes);
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
  std::vector<size_t> todo;
  for (size_t i = 0; i < items.size(); ++i)
    if (!rs.done.count(items[i].key)) todo.push_back(i);
  const int64_t already = static_cast<int64_t>(items.size() - todo.size());
  if (already > 0 && !hooks.quiet)
    std::fprintf(hooks.log, "redwood: resuming %s: %lld of %zu prompts already done\n", job.output.c_str(),
                 static_cast<long long>(already), items.size());

  // ---- load and run ----
  if (!todo.empty()) {
    if (d) {
      load_weights(*d, resident_run(run), offload::RunShape{});
      ds->draft = d->transformer.get();
    }
    load_weights(m, run, shape, d ? &d->desc : nullptr);
    if (auto_tree) {
      const AutoTreeResult a = choose_tree_auto(m, *d, run, job.sampling, job.budget, job.depth,
                                                hooks.quiet ? nullptr : hooks.log, job.acceptance);
      if (a.config) {
        ds->config = *a.config;
        auto_choice = a.choice;
      } else {
        ds.reset();  // plain decoding is predicted faster
        auto_choice = "autoregressive";
      }
    }
  }
  jobs::ResultWriter writer(job.output, job.fsync_every);
  jobs::Progress progress(hooks.log, hooks.tty, job.progress_every);
  jobs::ProgressState ps;
  ps.total = static_cast<int64_t>(items.size());
  ps.done = already;
  int64_t passes = 0, pass_tokens = 0;
  bool interrupted = false;
  const double t_start = now();
  auto refresh = [&](bool force) {
    if (hooks.quiet) return;
    ps.seconds = now() - t_start;
    ps.accepted_per_pass = passes ? static_cast<double>(pass_tokens) / static_cast<double>(passes) : 0.0;
    progress.update(ps, force);
  };
  if (!todo.empty()) refresh(true);  // (else the final line below is the only one)
  // A model file changed since it was loaded: stop before (or instead of)
  // writing prompt `it`'s line; the lines already written stay.
  auto check_model_files = [&](const jobs::PromptItem& it) {
    for (const FileVersion& v : model_files)
      if (const std::string what = file_change(v); !what.empty())
        throw Error(v.path + ": the model file changed while the job ran (" + what + "); stopped before writing id " +
                    it.id.dump() + " (this run wrote " + std::to_string(ps.done_this_run) + " of its lines)");
  };
  for (size_t i : todo) {
    const jobs::PromptItem& it = items[i];
    check_model_files(it);
    spec::GenerationRequest req;
    req.prompt = tokens[i];
    req.sampling = job.sampling;
    req.sampling.seed = prompt_seed(job.sampling.seed, it.key);
    req.max_tokens = job.max_tokens;
    req.prefill_chunk = job.prefill_chunk;
    req.stop = job.stop;
    const double stall_before = m.streamed ? m.streamed->totals().stall_seconds : 0.0;
    const int passes_before = m.streamed ? m.streamed->passes() : 0;
    const spec::Generation g = spec::generate(*m.transformer, *m.tokenizer, req, ds ? &*ds : nullptr, {}, [&] {
      refresh(false);
      return hooks.cancelled && hooks.cancelled();
    });
    if (g.finish == "cancelled") {  // abandoned: nothing of it is written
      interrupted = true;
      break;
    }
    nlohmann::ordered_json metrics = {{"prompt_tokens", tokens[i].size()},
                                      {"prefill_seconds", g.prefill_seconds},
                                      {"seconds", g.decode_seconds},
                                      {"s_per_token", g.s_per_token()},
                                      {"peak_rss_bytes", peak_rss()}};  // since the job started
    if (m.streamed) {  // this prompt's target passes (prefill included) and their wait for streamed layers
      metrics["streamed_passes"] = m.streamed->passes() - passes_before;
      metrics["stall_seconds"] = m.streamed->totals().stall_seconds - stall_before;
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
      passes += g.spec->target_passes;
      pass_tokens += g.spec->emitted;
    }
    check_model_files(it);
    writer.append(nlohmann::ordered_json{{"id", it.id},
                                         {"text", g.text},
                                         {"tokens", g.tokens},
                                         {"n_tokens", g.tokens.size()},
                                         {"finish_reason", g.finish},
                                         {"metrics", std::move(metrics)},
                                         {"prompt_hash", prompt_hashes.at(it.key)},
                                         {"settings", settings}});
    ps.done++;
    ps.done_this_run++;
    ps.tokens += static_cast<int64_t>(g.tokens.size());
    refresh(false);
    if (hooks.cancelled && hooks.cancelled()) {
      interrupted = ps.done < ps.total;
      break;
    }
  }
  writer.close();
  if (!hooks.quiet) {
    ps.seconds = now() - t_start;
    progress.finish(ps);
  }

  // ---- summary over everything in the output that belongs to this prompt set ----
  std::unordered_set<std::string> wanted;
  for (const auto& it : items) wanted.insert(it.key);
  std::vector<double> spt;
  std::map<std::string, int64_t> reasons;
  int64_t n_done = 0, n_tokens = 0, all_passes = 0, all_emitted = 0;
  double decode_s = 0, draft_s = 0, verify_s = 0, all_nodes = 0, stall_s = 0;
  int64_t streamed_passes = 0;
  uint64_t rss = 0;
  for (const json& r : jobs::read_results(job.output)) {
    if (!wanted.count(r["id"].dump())) continue;
    ++n_done;
    reasons[r["finish_reason"].get<std::string>()]++;
    if (r.contains("n_tokens") && r["n_tokens"].is_number_integer()) n_tokens += r["n_tokens"].get<int64_t>();
    const json& mt = r.value("metrics", json::object());
    if (mt.contains("s_per_token") && mt["s_per_token"].is_number() && r.value("n_tokens", 0) > 0)
      spt.push_back(mt["s_per_token"].get<double>());
    decode_s += mt.value("seconds", 0.0);
    draft_s += mt.value("draft_seconds", 0.0);
    verify_s += mt.value("verify_seconds", 0.0);
    stall_s += mt.value("stall_seconds", 0.0);
    streamed_passes += mt.value("streamed_passes", int64_t{0});
    rss = std::max<uint64_t>(rss, mt.value("peak_rss_bytes", uint64_t{0}));
    if (mt.contains("target_passes") && mt["target_passes"].is_number_integer()) {
      all_passes += mt["target_passes"].get<int64_t>();
      // emitted = accepted + bonus per step, as in the line's mean_accepted
      all_emitted += std::llround(mt.value("mean_accepted", 0.0) * mt["target_passes"].get<double>());
      all_nodes += mt.value("mean_tree_nodes", 0.0) * mt["target_passes"].get<double>();
    }
  }
  const jobs::Percentiles pc = jobs::percentiles(spt);
  const double wall = now() - t_start;
  json s = {{"job", job.name.empty() ? job.file : job.name},
            {"output", job.output},
            {"complete", n_done == static_cast<int64_t>(items.size())},
            {"interrupted", interrupted},
            {"prompts",
             {{"total", items.size()},
              {"bad_lines", pf.bad.size()},
              {"done", n_done},
              {"done_this_run", ps.done_this_run},
              {"already_done", already},
              {"remaining", static_cast<int64_t>(items.size()) - n_done}}},
            {"tokens", n_tokens},
            {"tokens_this_run", ps.tokens},
            {"wall_seconds_this_run", wall},
            {"tokens_per_second_this_run", wall > 0 ? static_cast<double>(ps.tokens) / wall : 0.0},
            {"s_per_token", {{"p50", pc.p50}, {"p90", pc.p90}, {"p99", pc.p99}, {"mean", pc.mean}}},
            {"mean_accepted", all_passes ? json(static_cast<double>(all_emitted) / all_passes) : json(nullptr)},
            {"decode_seconds", decode_s},
            {"s_per_token_overall", n_tokens ? decode_s / static_cast<double>(n_tokens) : 0.0},
            {"target_passes", all_passes},
            {"mean_tree_nodes", all_passes ? json(all_nodes / static_cast<double>(all_passes)) : json(nullptr)},
            {"draft_seconds", draft_s},
            {"verify_seconds", verify_s},
            {"streamed_passes", streamed_passes},
            {"stall_seconds", stall_s},
            {"peak_rss_bytes", rss},
            {"finish_reasons", reasons},
            {"config",
             {{"target", job.target},
              {"draft", job.draft},
              {"tree", job.draft.empty() ? "" : job.tree},
              {"tree_auto_choice", auto_choice},
              {"verify", ds ? spec::verifier_name(ds->config.verifier) : ""},
              {"budget", job.budget},
              {"temperature", short_float(job.sampling.temperature)},
              {"top_p", short_float(job.sampling.top_p)},
              {"top_k", job.sampling.top_k},
              {"seed", job.sampling.seed},
              {"max_tokens", job.max_tokens},
              {"device_mem", job.device_mem},
              {"host_mem", job.host_mem},
              {"verify_io", job.verify_io},
              {"kv_type", job.kv_type}}}};
  if (m.streamed) s["offload"] = offload_stats(m);
  write_output_file(job.summary, s.dump(2) + "\n");
  return {std::move(s), interrupted};
}

// ---- the subcommand ----------------------------------------------------------

namespace {

std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void on_stop_signal(int sig) {
  g_signal.store(sig);
}

}  // namespace

void install_stop_signals() {
  // The first SIGINT/SIGTERM finishes cleanly (the line in flight is
  // abandoned, everything written stays); a second one kills at once.
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int stop_signal() {
  return g_signal.load();
}

namespace {

struct BatchOptions {
  std::string job;
  jobs::JobOverrides over;
  bool quiet = false;
};

int run_batch(BatchOptions& o) {
  jobs::JobConfig job = jobs::parse_job_file(o.job);
  jobs::apply_overrides(job, o.over);
  jobs::check_job(job);
  JobHooks hooks;
  hooks.quiet = o.quiet;
  hooks.tty = ::isatty(STDERR_FILENO) == 1;
  hooks.cancelled = [] { return g_signal.load() != 0; };
  install_stop_signals();
  const JobOutcome out = run_job(job, hooks);
  const json& p = out.summary["prompts"];
  if (out.interrupted) {
    const int sig = g_signal.load();
    std::fprintf(stderr,
                 "redwood: interrupted by %s: %lld of %lld prompts done in %s; run the same command again to resume\n",
                 sig == SIGTERM ? "SIGTERM" : "SIGINT", p["done"].get<long long>(), p["total"].get<long long>(),
                 job.output.c_str());
    return 128 + (sig ? sig : SIGINT);
  }
  std::fprintf(stderr, "redwood: %lld prompts done (%lld this run, %lld bad lines skipped) -> %s; summary %s\n",
               p["done"].get<long long>(), p["done_this_run"].get<long long>(), p["bad_lines"].get<long long>(),
               job.output.c_str(), job.summary.c_str());
  return 0;
}

}  // namespace

Runner add_batch(CLI::App& app) {
  auto o = std::make_shared<BatchOptions>();
  auto* c = app.add_subcommand("batch", "Run a TOML job over a JSONL prompt file (resumable; see configs/jobs/)");
  c->add_option("job", o->job, "Job file (TOML)")->required();
  c->add_option("--prompts", o->over.prompts, "Prompt file (JSONL), overriding the job's input.prompts");
  c->add_option("--output,-o", o->over.output, "Output file (JSONL), overriding the job's output.path");
  c->add_option("--threads,-t", o->over.threads, "CPU threads (default: the job's, else all cores)")
      ->transform(int_range(0, 4096));
  c->add_flag("--quiet,-q", o->quiet, "No progress output");
  return [o] { return run_batch(*o); };
}

}  // namespace redwood::cli
