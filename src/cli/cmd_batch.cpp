// redwood batch JOB.toml: config-driven generation over a JSONL prompt file,
// resumable and crash-safe (see src/jobs/results.h); the job runs in
// src/app/job_runner.h.
#include <unistd.h>

#include <cstdio>

#include "src/app/job_runner.h"
#include "src/jobs/shard_check.h"
#include "src/cli/commands.h"
#include "src/cli/common.h"

namespace redwood::cli {

namespace {

struct BatchOptions {
  std::string job;
  jobs::JobOverrides over;
  bool quiet = false;
  int check_shards = 0;
};

int run_batch(BatchOptions& o) {
  jobs::JobConfig job = jobs::parse_job_file(o.job);
  jobs::apply_overrides(job, o.over);
  if (o.check_shards > 0) {
    const jobs::ShardCheck r = jobs::check_shards(job, o.check_shards);
    std::fprintf(stderr, "redwood: %s\n", r.message.c_str());
    return r.ok ? 0 : 1;
  }
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
  auto* shard =
      c->add_option("--shard", o->over.shard,
                    "Run shard K of N of the prompts (1 <= K <= N, by a hash of each id); outputs get .shard-K-of-N")
          ->check(CLI::Validator(
              [](std::string& s) -> std::string {
                try {
                  return jobs::parse_shard(s), std::string();
                } catch (const Error& e) {
                  return e.what();
                }
              },
              "K/N"));
  c->add_option("--check-shards", o->check_shards,
                "Check that the outputs of N shards answer every prompt exactly once, with one set of settings")
      ->transform(int_range(1, jobs::kMaxShards))
      ->excludes(shard);
  c->add_flag("--quiet,-q", o->quiet, "No progress output");
  return [o] { return run_batch(*o); };
}

}  // namespace redwood::cli
