// The one output-path policy of every writer (model files, profiles, traces,
// logits, batch summaries, suite reports):
//  * a destination that is (after links and "..", or by device + inode) one of
//    the run's inputs is refused, and so is one inside an input directory
//    (a safetensors model);
//  * a destination that exists and is not a regular file (a device node, a
//    directory, a socket) is refused — except a FIFO where the caller streams
//    (fifo_ok: --trace), which is then written directly, never by rename;
//  * a regular file is written to a temp file beside it, fsync'ed and renamed
//    over the destination, so a failure leaves no partial output.
// Callers check before any work starts (check_output_path); the writers check
// again just before the rename.
#pragma once
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "src/util/error.h"
#include "src/util/temp_files.h"

namespace redwood {

namespace output_path_detail {
inline std::filesystem::path resolved(const std::string& p) {
  std::error_code ec;
  std::filesystem::path r = std::filesystem::weakly_canonical(std::filesystem::absolute(p, ec), ec);
  if (ec) r = std::filesystem::absolute(p, ec).lexically_normal();
  return r;
}
}  // namespace output_path_detail

// Whether a and b name the same file: by device + inode when both exist, else
// by their paths with links and ".." resolved.
inline bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  const bool ea = ::stat(a.c_str(), &sa) == 0, eb = ::stat(b.c_str(), &sb) == 0;
  if (ea && eb) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  if (ea != eb) return false;
  return output_path_detail::resolved(a) == output_path_detail::resolved(b);
}

// Whether `out` exists and is a FIFO.
inline bool is_fifo(const std::string& out) {
  struct stat st {};
  return ::stat(out.c_str(), &st) == 0 && S_ISFIFO(st.st_mode);
}

// "" when `out` may be written under the policy, else the problem, naming the
// path ("'P' is the input 'Q' (...)", "'P' exists and is not a regular file ...").
inline std::string output_path_problem(const std::string& out, const std::vector<std::string>& inputs,
                                       bool fifo_ok = false) {
  if (out.empty()) return "the output path is empty";
  struct stat st {};
  if (::stat(out.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return "'" + out + "' is a directory";
    if (!S_ISREG(st.st_mode) && !(fifo_ok && S_ISFIFO(st.st_mode)))
      return "'" + out + "' exists and is not a regular file (a device, FIFO or socket); refusing to replace it";
  }
  for (const auto& in : inputs) {
    if (in.empty()) continue;
    struct stat si {};
    if (::stat(in.c_str(), &si) == 0 && S_ISDIR(si.st_mode)) {
      const auto d = output_path_detail::resolved(in), o = output_path_detail::resolved(out);
      const auto rel = o.lexically_relative(d);
      if (!rel.empty() && *rel.begin() != "..")
        return "'" + out + "' is inside the input directory '" + in + "'; refusing to write there";
      continue;
    }
    if (same_file(out, in)) return "'" + out + "' is the input '" + in + "'; refusing to overwrite an input";
  }
  return "";
}

// Throws redwood::Error("WHAT: problem") when output_path_problem finds one.
inline void check_output_path(const std::string& out, const std::vector<std::string>& inputs, const std::string& what,
                              bool fifo_ok = false) {
  const std::string p = output_path_problem(out, inputs, fifo_ok);
  if (!p.empty()) throw Error(what + ": " + p);
}

// The temp file beside `out` that a writer fills and renames.
inline std::string output_tmp_path(const std::string& out) { return out + ".tmp." + std::to_string(::getpid()); }

// Renames the finished temp file over `out`, after checking again that `out`
// is not (by now) something other than a regular file; the temp file is
// removed on failure.
inline void rename_output_into_place(const std::string& tmp, const std::string& out) {
  struct stat st {};
  if (::stat(out.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    ::unlink(tmp.c_str());
    throw Error(out + ": exists and is not a regular file; refusing to replace it");
  }
  if (::rename(tmp.c_str(), out.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw Error(out + ": cannot rename into place: " + strerror(e));
  }
}

// The temp file of one write of `out`: created empty and exclusively beside it
// (OUT.tmp.PID; a file or link already at that name is unlinked first, never
// written through), registered for removal on a fatal signal (temp_files.h)
// before it exists, and removed when the TempOutput goes away uncommitted (an
// error, an exception). commit() fsyncs, closes and renames it over `out`.
// Errors name `out`, not the temp file. Two at once for one output in one
// process (they would share the name) is an error, not a silent clash.
class TempOutput {
 public:
  explicit TempOutput(const std::string& out, int access = O_WRONLY)
      : out_(out), tmp_(output_tmp_path(out)), claim_(tmp_, out), guard_(tmp_) {
    ::unlink(tmp_.c_str());  // a stale one (an earlier process with this PID); O_EXCL does not follow links
    fd_ = ::open(tmp_.c_str(), access | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd_ < 0) throw Error(out_ + ": cannot create: " + strerror(errno));
  }
  ~TempOutput() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  TempOutput(const TempOutput&) = delete;
  TempOutput& operator=(const TempOutput&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return tmp_; }  // the temp file (to read back what was written)
  const std::string& out() const { return out_; }

  void commit() {
    if (::fsync(fd_) != 0) throw Error(out_ + ": write failed: " + strerror(errno));
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) throw Error(out_ + ": write failed: " + strerror(errno));
    committed_ = true;  // rename_output_into_place removes the temp file itself when it fails
    rename_output_into_place(tmp_, out_);
  }

 private:
  // This process's temp names in use.
  class Claim {
   public:
    Claim(const std::string& tmp, const std::string& out) : tmp_(tmp) {
      const std::lock_guard lock(mu());
      if (!names().insert(tmp_).second) throw Error(out + ": already being written by this process");
    }
    ~Claim() {
      const std::lock_guard lock(mu());
      names().erase(tmp_);
    }
    Claim(const Claim&) = delete;
    Claim& operator=(const Claim&) = delete;

   private:
    static std::mutex& mu() {
      static std::mutex m;
      return m;
    }
    static std::set<std::string>& names() {
      static std::set<std::string> s;
      return s;
    }
    std::string tmp_;
  };

  std::string out_, tmp_;
  Claim claim_;
  TempFileGuard guard_;  // before the file exists, after it is gone
  int fd_ = -1;
  bool committed_ = false;
};

namespace output_path_detail {
inline void write_all_fd(int fd, const std::string& out, const std::string& bytes) {
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

// Writes `bytes` to `out` under the policy: a regular file atomically (temp
// file in the same directory, fsync, rename); a FIFO directly when fifo_ok.
// The caller has checked the inputs (check_output_path) before its work.
inline void write_output_file(const std::string& out, const std::string& bytes, bool fifo_ok = false) {
  if (const std::string p = output_path_problem(out, {}, fifo_ok); !p.empty()) throw Error(p);
  if (fifo_ok && is_fifo(out)) {
    const int fd = ::open(out.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) throw Error(out + ": cannot open: " + strerror(errno));
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
