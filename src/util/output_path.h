// The one output-path policy of every writer (model files, profiles, traces,
// logits, batch summaries, suite reports, the batch results file):
//  * a destination that is (after links and "..", or by device + inode) one of
//    the run's inputs is refused, and so is one inside an input directory
//    (a safetensors model);
//  * a destination that exists and is not a regular file (a device node, a
//    directory, a socket) is refused — except a FIFO where the caller streams
//    (fifo_ok: --trace), which is then written directly, never by rename; a
//    FIFO with no reader is waited for a few seconds, then an error;
//  * another run's output is never replaced: a file that another redwood run
//    holds (a batch job's lock on its results, results.h) or that holds a
//    batch job's results (its first line is a result line) is refused by
//    every writer but the job that appends to it (appends_results);
//  * symbolic links are written THROUGH, never replaced: a link to a regular
//    file is resolved (all links) and the file it leads to is replaced by the
//    rename below, beside it, under that file's own checks; a link to a FIFO
//    or device is that FIFO or device (streamed where allowed, else refused:
//    `--out /dev/stdout` onto a terminal or pipe is refused); a link whose
//    target does not exist is refused; a link through an open descriptor
//    (/dev/stdout, /dev/fd/N, /proc/PID/fd/N) to a regular file (`> FILE`) is
//    refused too (the descriptor would keep the replaced file, and what else
//    the process prints would vanish with it), except for the batch results
//    file, which is appended to in place;
//  * a regular file is written to a temp file in the destination's directory,
//    fsync'ed and renamed over it (the directory fsync'ed too), so a failure
//    leaves no partial output. The temp file has no name while it is written
//    (O_TMPFILE): a writer killed by SIGKILL or the OOM killer leaves nothing.
//    It is linked in (OUT.tmp.PID) only for the rename. Where the file system
//    lacks O_TMPFILE it is the named OUT.tmp.PID from the start (removed on
//    errors and on SIGINT/SIGTERM/SIGHUP, temp_files.h), and a writer clears
//    the OUT.tmp.PID files of processes that are gone (PID dead, untouched for
//    ten minutes; regular files only, never through a link).
// Callers check before any work starts (check_output_path); the writers check
// again just before the rename.
#pragma once
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "src/util/error.h"
#include "src/util/temp_files.h"

namespace redwood {

// Whether a and b name the same file: by device + inode when both exist, else
// by their paths with links and ".." resolved.
bool same_file(const std::string& a, const std::string& b);

// Whether `out` exists and is a FIFO.
bool is_fifo(const std::string& out);

// The file a write of `out` replaces: `out` itself, or, when `out` is a
// symbolic link to a regular file, that file (every link resolved); "" when
// `out` is a link to nothing (dangling).
std::string output_target(const std::string& out);

// Whether `out` leads through /proc: an open descriptor (/dev/stdout, /dev/fd/1).
bool through_descriptor(const std::string& out);

// How every line of a batch job's results file starts (src/jobs/results.h
// writes them; the mark lives here so that every writer can recognise one).
inline constexpr std::string_view kResultLineStart = "{\"id\":";

// "" unless `out` is a regular file that another redwood run holds (its lock,
// results.h), the summary name (X.summary.json) of a file X another run holds,
// or a file that holds a batch job's results; else the problem, naming it.
std::string output_owner_problem(const std::string& out);

// Whether another redwood run holds the job lock on `path` (this process's own
// OutputLocks excepted).
bool held_by_another_run(const std::string& path);

// The job lock (results.h: OutputLock) this process holds on fd's file, taken
// (held) or released: such a file and its summary name are this run's own.
void note_own_lock(int fd, bool held);

// "" when `out` may be written under the policy, else the problem, naming the
// path ("'P' is the input 'Q' (...)", "'P' exists and is not a regular file ...").
// appends_results: the batch job's own results file (its lock and resume
// checks stand in for the owner checks).
std::string output_path_problem(const std::string& out, const std::vector<std::string>& inputs, bool fifo_ok = false,
                                bool appends_results = false);

// Throws redwood::Error("WHAT: problem") when output_path_problem finds one.
void check_output_path(const std::string& out, const std::vector<std::string>& inputs, const std::string& what,
                       bool fifo_ok = false);

// The name beside `out` that a temp file has while it is renamed (and all the
// time where O_TMPFILE is not supported).
inline std::string output_tmp_path(const std::string& out) { return out + ".tmp." + std::to_string(::getpid()); }

// Renames the finished temp file over `out` (the file a link at `out` leads
// to), after checking again that it is not (by now) something other than a
// regular file nor another run's output, then fsyncs the directory; the temp
// file is removed on failure.
void rename_output_into_place(const std::string& tmp, const std::string& out);

// The temp file of one write of `out`, in the directory of the file it will
// replace (output_target): unnamed (O_TMPFILE) where the file system allows,
// else created empty and exclusively as OUT.tmp.PID (a file or link already
// at that name is unlinked first, never written through) and registered for
// removal on a fatal signal (temp_files.h) before it exists. Removed when the
// TempOutput goes away uncommitted (an error, an exception). commit() fsyncs,
// links it in and renames it over the destination. Errors name `out`, not the
// temp file. Two at once for one output in one process is an error, not a
// silent clash.
class TempOutput {
 public:
  explicit TempOutput(const std::string& out, int access = O_WRONLY);
  ~TempOutput();
  TempOutput(const TempOutput&) = delete;
  TempOutput& operator=(const TempOutput&) = delete;

  int fd() const { return fd_; }
  // A name this process and its children can open the temp file by (to read
  // back what was written, or to let a child program write it):
  // /proc/PID/fd/N while it is unnamed, else OUT.tmp.PID.
  const std::string& path() const { return path_; }
  const std::string& out() const { return out_; }
  bool named() const { return named_; }  // the fallback without O_TMPFILE (tests)

  void commit();

  // Tests: make every later TempOutput use the named fallback.
  static void force_named_for_tests(bool on);

 private:
  class Claim {  // this process's destinations being written now
   public:
    Claim(const std::string& dest, const std::string& out);
    ~Claim();
    Claim(const Claim&) = delete;
    Claim& operator=(const Claim&) = delete;

   private:
    std::string dest_;
  };

  std::string out_, dest_, tmp_, path_;
  Claim claim_;
  std::optional<TempFileGuard> guard_;  // while tmp_ names it: before the file exists, after it is gone
  int fd_ = -1;
  bool named_ = false;   // tmp_ was created as a name (the fallback)
  bool linked_ = false;  // tmp_ names the file now
  bool committed_ = false;
};

namespace output_path_detail {
void write_all_fd(int fd, const std::string& out, const std::string& bytes);
}  // namespace output_path_detail

// Writes `bytes` to `out` under the policy: a regular file atomically (temp
// file in the same directory, fsync, rename); a FIFO directly when fifo_ok.
// The caller has checked the inputs (check_output_path) before its work.
void write_output_file(const std::string& out, const std::string& bytes, bool fifo_ok = false);

// Opens the FIFO `out` for writing, waiting up to `wait_ms` for a reader
// (never forever): no reader by then is a redwood::Error naming it. The
// descriptor returned blocks on writes as usual.
int open_fifo_for_writing(const std::string& out, int wait_ms = 5000);

}  // namespace redwood
