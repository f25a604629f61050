// The job's output: one JSON object per line per finished prompt, appended
// with a single write() each and fsync'ed every few lines, so a crash loses at
// most the lines since the last fsync (which a re-run regenerates) and a kill
// leaves at most one torn last line. Resuming reads the file back: complete
// lines are done, a torn tail is cut off, anything else is an error. Each line
// carries the settings that shape its text ("settings"); resuming with other
// settings is an error, so one file never mixes two configurations. One run at
// a time holds the file (OutputLock).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace redwood::jobs {

struct ResumeState {
  std::unordered_set<std::string> done;  // ids (PromptItem::key) already in the file
  int64_t lines = 0;                     // complete result lines
  int64_t torn_bytes = 0;                // bytes of a torn last line that were dropped
  int64_t unchecked = 0;                 // result lines without "settings" (an older redwood's)
  // Result lines whose settings lack some of prepare_output's added_keys (an
  // older redwood's): checked on the keys they have.
  int64_t partly_checked = 0;
  std::string missing_keys;  // those keys, comma-separated
  // With prepare_output's `prompts`: lines without "prompt_hash" (an older
  // redwood's; not checked against the prompts), and lines whose id is not
  // among the prompts (kept, not in `done`).
  int64_t no_prompt_hash = 0;
  int64_t foreign = 0;
};

// This run's prompts: id (PromptItem::key) -> prompt_hash().
using PromptHashes = std::unordered_map<std::string, std::string>;

// Checks an existing output file and truncates a torn last line: the start of
// a result line ('{"id":...') with no newline, as a kill mid-write leaves it.
// Any other line that is not a result line is an error (something other than
// this job wrote the file: it is left as it is), and so is a result line whose
// "settings" differ from `settings` (the error names the keys that differ).
// `added_keys`: keys of `settings` that an older redwood did not record; a
// line without one of them is checked on the rest (ResumeState::partly_checked).
// An id on two lines is an error. With `prompts`: a line whose "prompt_hash"
// differs from its id's prompt's now is an error (the prompt was edited since
// it was answered); a line without one, or whose id is not among the prompts,
// is counted (no_prompt_hash, foreign). Errors leave the file as it is.
// A missing file is an empty state.
ResumeState prepare_output(const std::string& path, const nlohmann::json& settings = nlohmann::json(),
                           const std::vector<std::string>& added_keys = {}, const PromptHashes* prompts = nullptr);

// An exclusive advisory lock (flock) on the output file, held for one run of a
// job, so that two runs never append to one file: a second run fails at once
// with a one-line error, and every other writer refuses the file while it is
// held (src/util/output_path.h). Creates the file (and makes its name
// durable); a file it created that is still empty when the lock is released is
// removed again. A symbolic link is locked (and written) through.
class OutputLock {
 public:
  explicit OutputLock(const std::string& path);
  ~OutputLock();
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;

  // Whether fd is the locked file (not one put at its path since).
  bool holds(int fd) const;

 private:
  std::string path_;
  int fd_ = -1;
  bool created_ = false;
};

// "key a -> b, ..." for the settings that differ between a line (`was`) and a run (`now`).
std::string settings_diff(const nlohmann::json& was, const nlohmann::json& now);

// A result line must be an object with "id" and "finish_reason".
bool is_result_line(const nlohmann::json& j);

class ResultWriter {
 public:
  // Opens for appending (creates the file, fsyncs its directory). With
  // `lock`: the file must be the one locked (else redwood::Error).
  ResultWriter(const std::string& path, int fsync_every, const OutputLock* lock = nullptr);
  ~ResultWriter();  // fsyncs; errors there are ignored (call close() to see them)
  ResultWriter(const ResultWriter&) = delete;
  ResultWriter& operator=(const ResultWriter&) = delete;

  // Appends j as one line with one write(); on a short write or error the
  // partial line is cut off again and redwood::Error is thrown. First checks
  // that `path` still names the file opened (device + inode, not unlinked):
  // a file replaced or removed under the job is a redwood::Error, and nothing
  // is written.
  void append(const nlohmann::ordered_json& j);
  void sync();
  void close();

 private:
  std::string path_;
  int fd_ = -1;
  int every_ = 1;
  int unsynced_ = 0;
  int64_t appended_ = 0;
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
