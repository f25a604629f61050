// Running a batch job (src/jobs/job.h): validate everything, load the models
// once, generate one result line per prompt not already in the output, write
// a summary. Used by `redwood batch` and by the bench suites (each matrix cell
// is a job).
#pragma once
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "src/jobs/job.h"

namespace redwood::cli {

struct JobHooks {
  std::function<bool()> cancelled;  // polled between decoding steps (a signal arrived)
  bool tty = false;                 // progress bar in place (else plain lines)
  bool quiet = false;               // no progress output at all
  std::FILE* log = stderr;
};

struct JobOutcome {
  nlohmann::json summary;  // also written to job.summary
  bool interrupted = false;
};

// SIGINT/SIGTERM handlers for long runs: the first signal asks to stop (see
// stop_signal), a second one kills at once.
void install_stop_signals();
int stop_signal();  // 0 while none arrived, else the signal number

// job must have passed check_job. Throws redwood::Error on invalid input
// (with file:line: key), before any model weights load.
JobOutcome run_job(const jobs::JobConfig& job, const JobHooks& hooks);

}  // namespace redwood::cli
