// A batch job's summary: totals over the result lines of an output file that
// belong to the job's prompt set (read back from the file, so a resumed job
// sums every run's lines), and the summary JSON `redwood batch` writes.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_set>

#include "src/jobs/results.h"

namespace redwood::jobs {

struct ResultTotals {
  int64_t done = 0, tokens = 0;
  std::map<std::string, int64_t> finish_reasons;
  Percentiles s_per_token;  // over lines with tokens
  double decode_seconds = 0, draft_seconds = 0, verify_seconds = 0, stall_seconds = 0;
  int64_t streamed_passes = 0;
  // Streamed passes (prefill included): wall, compute, the I/O thread's busy
  // time, bytes read from storage and copied from host memory.
  double stream_wall_seconds = 0, stream_compute_seconds = 0, io_seconds = 0;
  uint64_t storage_bytes = 0, host_bytes = 0;
  uint64_t peak_rss_bytes = 0;
  // Speculative lines: target passes, tokens they emitted, tree nodes verified.
  int64_t target_passes = 0, emitted = 0;
  double tree_nodes = 0;
};

// Sums the lines of `output` whose id (JSON text) is in `wanted`.
ResultTotals total_results(const std::string& output, const std::unordered_set<std::string>& wanted);

// What the summary says about one run of a job besides the totals.
struct RunFacts {
  std::string job, output;
  int64_t prompts = 0, bad_lines = 0, done_this_run = 0, already_done = 0, tokens_this_run = 0;
  double wall_seconds = 0;
  bool interrupted = false;
  nlohmann::json config;  // the settings in effect
};
nlohmann::json summary_json(const ResultTotals& t, const RunFacts& f);

}  // namespace redwood::jobs
