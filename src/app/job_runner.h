// Running a batch job (src/jobs/job.h): validate everything, load the models
// once (a Session), generate one result line per prompt not already in the
// output, write a summary. Used by `redwood batch` and by the bench suites
// (each matrix cell is a job).
#pragma once
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>

#include "src/jobs/job.h"

namespace redwood::app {

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

// What `redwood batch` says when the job ends (one line, no prefix) and its
// exit code: interrupted by signal `sig` (128 + sig; SIGINT when 0), lines
// that record an error (1), or done (0).
struct JobEnd {
  std::string message;
  int exit_code = 0;
};
JobEnd job_end(const jobs::JobConfig& job, const JobOutcome& out, int sig, const char* sig_name);

// job must have passed check_job. Throws redwood::Error on invalid input
// (with file:line: key), before any model weights load.
JobOutcome run_job(const jobs::JobConfig& job, const JobHooks& hooks);

}  // namespace redwood::app
