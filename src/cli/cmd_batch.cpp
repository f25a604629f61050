// redwood batch JOB.toml: config-driven generation over a JSONL prompt file,
// resumable and crash-safe (see src/jobs/results.h); the job runs in
// src/app/job_runner.h.
#include <signal.h>
#include <unistd.h>

#include <cstdio>

#include "src/cli/commands.h"
#include "src/cli/common.h"
#include "src/app/job_runner.h"

namespace redwood::cli {

using nlohmann::json;

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
  app::JobHooks hooks;
  hooks.quiet = o.quiet;
  hooks.tty = ::isatty(STDERR_FILENO) == 1;
  hooks.cancelled = [] { return stop_signal() != 0; };
  install_stop_signals();
  const app::JobOutcome out = app::run_job(job, hooks);
  const json& p = out.summary["prompts"];
  if (out.interrupted) {
    const int sig = stop_signal();
    std::fprintf(stderr,
                 "redwood: interrupted by %s: %lld of %lld prompts done in %s; run the same command again to resume\n",
                 stop_signal_name(), p["done"].get<long long>(), p["total"].get<long long>(),
                 job.output.c_str());
    return 128 + (sig ? sig : SIGINT);
  }
  const json& reasons = out.summary["finish_reasons"];
  if (reasons.contains("error")) {  // each such line says why (and so did the log, when it was written)
    std::fprintf(stderr,
                 "redwood: %lld of %lld prompts failed (finish_reason \"error\" in %s: their lines say why); "
                 "summary %s\n",
                 reasons["error"].get<long long>(), p["done"].get<long long>(), job.output.c_str(),
                 job.summary.c_str());
    return 1;
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
