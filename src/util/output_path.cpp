#include "src/util/output_path.h"

#include <dirent.h>
#include <signal.h>
#include <sys/file.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

namespace redwood {

namespace {

std::filesystem::path resolved(const std::string& p) {
  std::error_code ec;
  std::filesystem::path r = std::filesystem::weakly_canonical(std::filesystem::absolute(p, ec), ec);
  if (ec) r = std::filesystem::absolute(p, ec).lexically_normal();
  return r;
}

std::string dir_of(const std::string& path) {
  const std::string d = std::filesystem::path(path).parent_path().string();
  return d.empty() ? "." : d;
}

void fsync_dir_of(const std::string& path) {
  const int dfd = ::open(dir_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

std::atomic<bool> g_force_named{false};

// The OUT.tmp.PID files beside `dest` left by processes that are gone (killed
// where O_TMPFILE is not supported): PID dead, untouched for ten minutes (a
// writer on another machine sharing the folder has another PID space), a
// regular file (lstat: a link there is left alone, never followed).
void clear_stale_temps(const std::string& dest) {
  const std::string dir = dir_of(dest), prefix = std::filesystem::path(dest).filename().string() + ".tmp.";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  const time_t now = ::time(nullptr);
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string pid_s = name.substr(prefix.size());
    if (pid_s.size() > 9 || pid_s.find_first_not_of("0123456789") != std::string::npos) continue;
    const long pid = std::strtol(pid_s.c_str(), nullptr, 10);
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to know)
    const std::string path = dir + "/" + name;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || now - st.st_mtime < 600) continue;
    (void)::unlink(path.c_str());
  }
  ::closedir(d);
}

std::mutex& claims_mu() {
  static std::mutex m;
  return m;
}
std::set<std::string>& claims() {
  static std::set<std::string> s;
  return s;
}
// (device, inode) of the files this process's OutputLocks hold, under claims_mu().
std::set<std::pair<dev_t, ino_t>>& own_locks() {
  static std::set<std::pair<dev_t, ino_t>> s;
  return s;
}

}  // namespace

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  const bool ea = ::stat(a.c_str(), &sa) == 0, eb = ::stat(b.c_str(), &sb) == 0;
  if (ea && eb) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  if (ea != eb) return false;
  return resolved(a) == resolved(b);
}

bool is_fifo(const std::string& out) {
  struct stat st {};
  return ::stat(out.c_str(), &st) == 0 && S_ISFIFO(st.st_mode);
}

std::string output_target(const std::string& out) {
  struct stat lst {};
  if (::lstat(out.c_str(), &lst) != 0 || !S_ISLNK(lst.st_mode)) return out;
  struct stat st {};
  if (::stat(out.c_str(), &st) != 0) return "";  // dangling
  if (!S_ISREG(st.st_mode)) return out;          // a FIFO, a device: opened through the link, never renamed over
  char* r = ::realpath(out.c_str(), nullptr);
  if (!r) return "";  // e.g. /proc/self/fd/N of a deleted file
  std::string s(r);
  std::free(r);
  return s;
}

namespace {
// For OUT = X.summary.json: X when another run holds X's job lock (its
// summary will be written there when it ends), else "".
std::string running_job_of_summary(const std::string& out) {
  constexpr std::string_view kSuffix = ".summary.json";
  if (out.size() <= kSuffix.size() || out.compare(out.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0)
    return "";
  const std::string job_output = out.substr(0, out.size() - kSuffix.size());
  return held_by_another_run(job_output) ? job_output : "";
}
std::string summary_name_problem(const std::string& out, const std::string& job_output) {
  return "'" + out + "' is the summary name of '" + job_output +
         "', which another redwood run is writing; refusing to take it";
}
}  // namespace

bool held_by_another_run(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return false;
  struct stat st {};
  bool held = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (held) {
    const std::lock_guard<std::mutex> g(claims_mu());
    held = !own_locks().count({st.st_dev, st.st_ino});  // this run's own job
  }
  held = held && ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);
  return held;
}

void note_own_lock(int fd, bool held) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return;
  const std::lock_guard<std::mutex> g(claims_mu());
  if (held)
    own_locks().insert({st.st_dev, st.st_ino});
  else
    own_locks().erase({st.st_dev, st.st_ino});
}

std::string output_owner_problem(const std::string& out) {
  if (const std::string job_output = running_job_of_summary(out); !job_output.empty())
    return summary_name_problem(out, job_output);
  const int fd = ::open(out.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return "";
  std::string p;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    // A shared lock fails while a run holds its exclusive one (results.h).
    if (::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
      p = "'" + out + "' is being written by another redwood run (it holds the job lock); refusing to replace it";
    } else {
      // The first line: a result line starts with the mark and names its finish_reason.
      std::string head(static_cast<size_t>(std::min<off_t>(st.st_size, off_t{1} << 20)), '\0');
      const ssize_t n = head.empty() ? 0 : ::pread(fd, head.data(), head.size(), 0);
      head.resize(n > 0 ? static_cast<size_t>(n) : 0);
      const std::string_view first = std::string_view(head).substr(0, head.find('\n'));
      if (first.substr(0, kResultLineStart.size()) == kResultLineStart &&
          (first.size() == head.size() || first.find("\"finish_reason\":") != std::string_view::npos))
        p = "'" + out + "' holds a batch job's results; refusing to replace them (choose another path, or move the file)";
    }
  }
  ::close(fd);  // releases the shared lock
  return p;
}

bool through_descriptor(const std::string& out) {
  std::string p = out;
  for (int hop = 0; hop < 40; ++hop) {
    if (char* d = ::realpath(dir_of(p).c_str(), nullptr)) {
      const bool proc = std::string_view(d).substr(0, 6) == "/proc/";
      std::free(d);
      if (proc) return true;
    }
    struct stat lst {};
    if (::lstat(p.c_str(), &lst) != 0 || !S_ISLNK(lst.st_mode)) return false;
    std::string t(4096, '\0');
    const ssize_t n = ::readlink(p.c_str(), t.data(), t.size());
    if (n <= 0) return false;
    t.resize(static_cast<size_t>(n));
    p = t[0] == '/' ? t : dir_of(p) + "/" + t;
  }
  return false;
}

std::string output_path_problem(const std::string& out, const std::vector<std::string>& inputs, bool fifo_ok,
                                bool appends_results) {
  if (out.empty()) return "the output path is empty";
  if (output_target(out).empty())
    return "'" + out + "' is a symbolic link to nothing; refusing to write through it (give the file's own path)";
  struct stat st {};
  if (::stat(out.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return "'" + out + "' is a directory";
    if (!S_ISREG(st.st_mode) && !(fifo_ok && S_ISFIFO(st.st_mode)))
      return "'" + out + "' exists and is not a regular file (a device, FIFO or socket); refusing to replace it";
    if (S_ISREG(st.st_mode) && !appends_results && through_descriptor(out))
      return "'" + out + "' leads to an open file descriptor (/dev/stdout, /dev/fd/N: a shell redirection), whose "
             "file cannot be replaced by name; give the file's own path";
  }
  for (const auto& in : inputs) {
    if (in.empty()) continue;
    struct stat si {};
    if (::stat(in.c_str(), &si) == 0 && S_ISDIR(si.st_mode)) {
      const auto d = resolved(in), o = resolved(out);
      const auto rel = o.lexically_relative(d);
      if (!rel.empty() && *rel.begin() != "..")
        return "'" + out + "' is inside the input directory '" + in + "'; refusing to write there";
      continue;
    }
    if (same_file(out, in)) return "'" + out + "' is the input '" + in + "'; refusing to overwrite an input";
  }
  if (!appends_results) return output_owner_problem(out);
  // A job's own results file is its to append to (its lock decides), but not
  // the summary name of another run's results.
  if (const std::string job_output = running_job_of_summary(out); !job_output.empty())
    return summary_name_problem(out, job_output);
  return "";
}

void check_output_path(const std::string& out, const std::vector<std::string>& inputs, const std::string& what,
                       bool fifo_ok) {
  const std::string p = output_path_problem(out, inputs, fifo_ok);
  if (!p.empty()) throw Error(what + ": " + p);
}

void rename_output_into_place(const std::string& tmp, const std::string& out) {
  const std::string dest = output_target(out);
  std::string problem;
  struct stat st {};
  if (dest.empty())
    problem = out + ": is (by now) a symbolic link to nothing; refusing to write through it";
  else if (::stat(dest.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    problem = out + ": exists and is not a regular file; refusing to replace it";
  else if (const std::string p = output_owner_problem(dest); !p.empty())
    problem = out + ": " + p;
  if (!problem.empty()) {
    ::unlink(tmp.c_str());
    throw Error(problem);
  }
  if (::rename(tmp.c_str(), dest.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw Error(out + ": cannot rename into place: " + strerror(e));
  }
  fsync_dir_of(dest);
}

TempOutput::Claim::Claim(const std::string& dest, const std::string& out) : dest_(dest) {
  const std::lock_guard lock(claims_mu());
  if (!claims().insert(dest_).second) throw Error(out + ": already being written by this process");
}

TempOutput::Claim::~Claim() {
  const std::lock_guard lock(claims_mu());
  claims().erase(dest_);
}

void TempOutput::force_named_for_tests(bool on) { g_force_named = on; }

namespace {
std::string checked_target(const std::string& out) {
  std::string t = output_target(out);
  if (t.empty()) throw Error(out + ": a symbolic link to nothing; refusing to write through it");
  if (t != out && through_descriptor(out))
    throw Error(out + ": leads to an open file descriptor (a shell redirection); give the file's own path");
  return t;
}
}  // namespace

TempOutput::TempOutput(const std::string& out, int access)
    : out_(out), dest_(checked_target(out)), tmp_(output_tmp_path(dest_)), claim_(dest_, out) {
  clear_stale_temps(dest_);
  // Unnamed while written: a kill of any kind leaves nothing. Needs /proc (for
  // the name path() gives and for linking it in).
  if (!g_force_named && ::access("/proc/self/fd", X_OK) == 0) {
    fd_ = ::open(dir_of(dest_).c_str(), O_TMPFILE | access | O_CLOEXEC, 0644);
    if (fd_ >= 0) {
      path_ = "/proc/" + std::to_string(::getpid()) + "/fd/" + std::to_string(fd_);
      return;
    }
  }
  named_ = true;
  guard_.emplace(tmp_);
  ::unlink(tmp_.c_str());  // a stale one (an earlier process with this PID); O_EXCL does not follow links
  fd_ = ::open(tmp_.c_str(), access | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd_ < 0) throw Error(out_ + ": cannot create: " + strerror(errno));
  path_ = tmp_;
  linked_ = true;
}

TempOutput::~TempOutput() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && linked_) ::unlink(tmp_.c_str());
}

void TempOutput::commit() {
  if (::fsync(fd_) != 0) throw Error(out_ + ": write failed: " + strerror(errno));
  if (!linked_) {  // give the unnamed file its name for the rename
    guard_.emplace(tmp_);
    ::unlink(tmp_.c_str());  // a stale one with this PID (never written through)
    if (::linkat(AT_FDCWD, path_.c_str(), AT_FDCWD, tmp_.c_str(), AT_SYMLINK_FOLLOW) != 0 &&
        ::linkat(fd_, "", AT_FDCWD, tmp_.c_str(), AT_EMPTY_PATH) != 0)
      throw Error(out_ + ": cannot link the written file into place: " + strerror(errno));
    linked_ = true;
  }
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) throw Error(out_ + ": write failed: " + strerror(errno));
  committed_ = true;  // rename_output_into_place removes the temp file itself when it fails
  rename_output_into_place(tmp_, out_);
}

namespace output_path_detail {
void write_all_fd(int fd, const std::string& out, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw Error(out + ": write failed: " + strerror(errno));
    }
    done += static_cast<size_t>(w);
  }
}
}  // namespace output_path_detail

int open_fifo_for_writing(const std::string& out, int wait_ms) {
  // O_NONBLOCK: ENXIO at once while no reader has it open (a plain open
  // would block until one does, forever if none comes).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  for (;;) {
    const int fd = ::open(out.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd >= 0) {
      const int fl = ::fcntl(fd, F_GETFL);
      if (fl >= 0) (void)::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
      return fd;
    }
    if (errno != ENXIO && errno != EINTR) throw Error(out + ": cannot open: " + strerror(errno));
    if (std::chrono::steady_clock::now() >= deadline)
      throw Error(out + ": no reader opened the FIFO within " + std::to_string(wait_ms / 1000) +
                  " s; nothing was written to it");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void write_output_file(const std::string& out, const std::string& bytes, bool fifo_ok) {
  if (const std::string p = output_path_problem(out, {}, fifo_ok); !p.empty()) throw Error(p);
  if (fifo_ok && is_fifo(out)) {
    const int fd = open_fifo_for_writing(out);
    try {
      output_path_detail::write_all_fd(fd, out, bytes);
    } catch (...) {
      ::close(fd);
      throw;
    }
    if (::close(fd) != 0) throw Error(out + ": write failed: " + strerror(errno));
    return;
  }
  TempOutput t(out);
  output_path_detail::write_all_fd(t.fd(), out, bytes);
  t.commit();
}

}  // namespace redwood
