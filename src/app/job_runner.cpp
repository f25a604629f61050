#include "src/app/job_runner.h"

#include <algorithm>
#include <cstdlib>
#include <unordered_set>

#include "src/jobs/progress.h"
#include "src/jobs/prompts.h"
#include "src/jobs/results.h"
#include "src/jobs/summary.h"
#include "src/model/chat_template.h"
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
  std::optional<Session> session;
  try {
    session.emplace(session_config(job));
  } catch (const SetupError& e) {
    if (e.key() == "draft") throw Error(job.where("model.draft") + ": " + e.what());
    if (e.key() == "tree" && job.tree == "auto") throw Error(job.where("speculation.tree") + ": " + e.what());
    throw Error(job.where("speculation") + ": " + e.what());
  }
  LoadedModel& m = session->target();
  // The model files as loaded: checked again before each prompt and before
  // its line is written (a file changed under the job stops it).
  std::vector<FileVersion> model_files;
  for (const std::string& f : m.desc.files) model_files.push_back(file_version(f));
  if (const LoadedModel* d = session->draft())
    for (const std::string& f : d->desc.files) model_files.push_back(file_version(f));
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
  const int tree_nodes = session->tree_nodes();
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
      err = "id " + it.id.dump() + ": the prompt is " + std::to_string(bytes) +
            " bytes; memory.ctx = " + std::to_string(job.ctx) + " allows at most " +
            std::to_string(kPromptBytesPerToken) + " bytes per token (" + std::to_string(max_prompt_bytes(job.ctx)) +
            "), so it is not tokenized";
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
  RunOptions run = session->config().run;
  apply_run_options(run);
  const int batch_tokens = std::min(job.ctx, job.prefill_chunk);
  try {
    session->check_plan(job.ctx, batch_tokens);
  } catch (const SetupError& e) {
    throw Error(job.where(job.device_mem.empty() ? "memory.host" : "memory.device") + ": " + e.what());
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
  std::string auto_choice;  // what tree = "auto" chose (summary)
  if (!todo.empty()) {
    session->load(job.ctx, batch_tokens, hooks.quiet ? nullptr : hooks.log);
    if (const auto& a = session->auto_choice()) auto_choice = a->choice;
  }
  jobs::ResultWriter writer(job.output, job.fsync_every);
  jobs::Progress progress(hooks.log, hooks.tty, job.progress_every);
  jobs::ProgressState ps;
  ps.total = static_cast<int64_t>(items.size());
  ps.done = already;
  int64_t passes = 0, pass_tokens = 0;
  bool interrupted = false;
  const double t_start = now_seconds();
  auto refresh = [&](bool force) {
    if (hooks.quiet) return;
    ps.seconds = now_seconds() - t_start;
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
    const offload::PassIo io_before = m.streamed ? m.streamed->totals() : offload::PassIo{};
    const int passes_before = m.streamed ? m.streamed->passes() : 0;
    const spec::Generation g = session->generate(req, {}, [&] {
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
    ps.seconds = now_seconds() - t_start;
    progress.finish(ps);
  }

  // ---- summary over everything in the output that belongs to this prompt set ----
  std::unordered_set<std::string> wanted;
  for (const auto& it : items) wanted.insert(it.key);
  jobs::RunFacts f;
  f.job = job.name.empty() ? job.file : job.name;
  f.output = job.output;
  f.prompts = static_cast<int64_t>(items.size());
  f.bad_lines = static_cast<int64_t>(pf.bad.size());
  f.done_this_run = ps.done_this_run;
  f.already_done = already;
  f.tokens_this_run = ps.tokens;
  f.wall_seconds = now_seconds() - t_start;
  f.interrupted = interrupted;
  const spec::SpecConfig* cfg = session->spec_config();
  f.config = {{"target", job.target},
              {"draft", job.draft},
              {"tree", job.draft.empty() ? "" : job.tree},
              {"tree_auto_choice", auto_choice},
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
              {"kv_type", job.kv_type}};
  json s = jobs::summary_json(jobs::total_results(job.output, wanted), f);
  if (m.streamed) s["offload"] = offload_stats(m);
  write_output_file(job.summary, s.dump(2) + "\n");
  return {std::move(s), interrupted};
}

}  // namespace redwood::app
