// The job's output: one JSON object per line per finished prompt, appended
// with a single write() each and fsync'ed every few lines, so a crash loses at
// most the lines since the last fsync (which a re-run regenerates) and a kill
// leaves at most one torn last line. Resuming reads the file back: complete
// lines are done, a torn tail is cut off, anything else is an error.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

namespace redwood::jobs {

struct ResumeState {
  std::unordered_set<std::string> done;  // ids (PromptItem::key) already in the file
  int64_t lines = 0;                     // complete result lines
  int64_t torn_bytes = 0;                // bytes of a torn last line that were dropped
};

// Checks an existing output file and truncates a torn last line (no newline,
// or not a result object). A bad line before the last is an error: something
// other than redwood wrote the file. A missing file is an empty state.
ResumeState prepare_output(const std::string& path);

// A result line must be an object with "id" and "finish_reason".
bool is_result_line(const nlohmann::json& j);

class ResultWriter {
 public:
  // Opens for appending (creates the file, fsyncs its directory).
  ResultWriter(const std::string& path, int fsync_every);
  ~ResultWriter();  // fsyncs; errors there are ignored (call close() to see them)
  ResultWriter(const ResultWriter&) = delete;
  ResultWriter& operator=(const ResultWriter&) = delete;

  // Appends j as one line with one write(); on a short write or error the
  // partial line is cut off again and redwood::Error is thrown.
  void append(const nlohmann::ordered_json& j);
  void sync();
  void close();

 private:
  std::string path_;
  int fd_ = -1;
  int every_ = 1;
  int unsynced_ = 0;
};

// Summary statistics over result lines.
struct Percentiles {
  double p50 = 0, p90 = 0, p99 = 0, mean = 0;
};
// Nearest-rank percentiles (empty input: zeros).
Percentiles percentiles(std::vector<double> v);

// Reads every result line of an output file (after prepare_output).
std::vector<nlohmann::json> read_results(const std::string& path);

}  // namespace redwood::jobs
