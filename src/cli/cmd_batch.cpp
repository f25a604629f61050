// redwood batch JOB.toml: config-driven generation over a JSONL prompt file,
// resumable and crash-safe (see src/jobs/results.h); the job runs in
// src/app/job_runner.h.
#include <unistd.h>

#include <cstdio>

#include "src/app/job_runner.h"
#include "src/cli/commands.h"
#include "src/cli/common.h"

namespace redwood::cli {

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
  const app::JobEnd end = app::job_end(job, out, stop_signal(), stop_signal_name());
  std::fprintf(stderr, "redwood: %s\n", end.message.c_str());
  return end.exit_code;
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
