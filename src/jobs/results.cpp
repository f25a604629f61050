#include "src/jobs/results.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "src/util/error.h"
#include "src/util/io.h"
#include "src/util/output_path.h"

namespace redwood::jobs {

using nlohmann::json;

namespace {

std::string sys_error(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

}  // namespace

bool is_result_line(const json& j) {
  return j.is_object() && j.contains("id") && (j["id"].is_string() || j["id"].is_number_integer()) &&
         j.contains("finish_reason") && j["finish_reason"].is_string();
}

std::string settings_diff(const json& was, const json& now) {
  std::string d;
  auto add = [&](const std::string& k, const json& a, const json& b) {
    d += (d.empty() ? "" : ", ") + k + " " + (a.is_null() ? "(none)" : a.dump()) + " -> " +
         (b.is_null() ? "(none)" : b.dump());
  };
  if (!was.is_object() || !now.is_object()) {
    add("settings", was, now);
    return d;
  }
  for (const auto& [k, v] : now.items())
    if (!was.contains(k) || was[k] != v) add(k, was.contains(k) ? was[k] : json(), v);
  for (const auto& [k, v] : was.items())
    if (!now.contains(k)) add(k, v, json());
  return d;
}

ResumeState prepare_output(const std::string& path, const json& settings, const std::vector<std::string>& added_keys,
                           const PromptHashes* prompts) {
  ResumeState st;
  if (!std::filesystem::exists(path)) return st;
  const std::string data = read_text_file(path, "the output file", UINT64_MAX);
  // What every line this job writes starts with (the writer's ordered "id" key).
  static constexpr std::string_view kLineStart = kResultLineStart;
  size_t pos = 0, good_end = 0;
  int64_t line_no = 0;
  std::vector<std::string> missing_keys;
  std::unordered_map<std::string, int64_t> seen;  // id -> its line
  while (pos < data.size()) {
    const size_t nl = data.find('\n', pos);
    ++line_no;
    const bool complete = nl != std::string::npos;
    const std::string_view line(data.data() + pos, (complete ? nl : data.size()) - pos);
    // A torn tail: the start of a line this job was writing (a kill), or a last
    // line with the zeros a crash leaves where bytes not yet fsync'ed never landed.
    const bool last = !complete || nl + 1 == data.size();
    if ((!complete && line.substr(0, kLineStart.size()) == kLineStart.substr(0, line.size())) ||
        (last && line.find('\0') != std::string_view::npos))
      break;  // dropped below
    const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !is_result_line(j))
      throw Error(path + ":" + std::to_string(line_no) +
                  ": not a result line of redwood batch (the file was written or changed by something else); "
                  "choose another output path, or fix or move the file");
    if (!j.contains("settings")) {
      ++st.unchecked;
    } else if (!settings.is_null() && j["settings"] != settings) {
      // Keys this run records that an older redwood did not: compare the rest.
      json now = settings;
      if (j["settings"].is_object() && now.is_object()) {
        bool missing = false;
        for (const std::string& k : added_keys)
          if (now.contains(k) && !j["settings"].contains(k)) {
            now.erase(k);
            missing = true;
            if (std::find(missing_keys.begin(), missing_keys.end(), k) == missing_keys.end()) missing_keys.push_back(k);
          }
        st.partly_checked += missing ? 1 : 0;
      }
      if (j["settings"] != now)
        throw Error(path + ":" + std::to_string(line_no) + ": written with other settings (" +
                    settings_diff(j["settings"], now) +
                    "); resuming would mix them in one file: choose another output path, or remove the file to start "
                    "over");
    }
    const std::string id = j["id"].dump();
    if (const auto [at, fresh] = seen.emplace(id, line_no); !fresh)
      throw Error(path + ":" + std::to_string(line_no) + ": id " + id + " is already on line " +
                  std::to_string(at->second) +
                  " (a duplicated id: the file was changed by hand or by something else); fix or move the file");
    bool counts = true;
    if (prompts) {
      const auto p = prompts->find(id);
      if (p == prompts->end()) {
        ++st.foreign;
        counts = false;
      } else if (!j.contains("prompt_hash")) {
        ++st.no_prompt_hash;
      } else if (!j["prompt_hash"].is_string() || j["prompt_hash"].get<std::string>() != p->second) {
        throw Error(path + ":" + std::to_string(line_no) + ": id " + id +
                    " was answered for another prompt (the prompt with this id was edited since); resuming would "
                    "keep the stale answer: choose another output path, or remove that line");
      }
    }
    if (counts) st.done.insert(id);
    ++st.lines;
    pos = nl + 1;
    good_end = pos;
  }
  for (const std::string& k : missing_keys) st.missing_keys += (st.missing_keys.empty() ? "" : ", ") + k;
  if (good_end < data.size()) {
    st.torn_bytes = static_cast<int64_t>(data.size() - good_end);
    if (::truncate(path.c_str(), static_cast<off_t>(good_end)) != 0)
      throw Error(sys_error(path + ": cannot cut off the torn last line"));
  }
  return st;
}

namespace {

void fsync_parent_dir(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace

namespace {

// Whether fd is still the file `path` names (not unlinked or replaced since it was opened).
bool names_fd(const std::string& path, int fd) {
  struct stat a {
  }, b{};
  return ::fstat(fd, &a) == 0 && a.st_nlink > 0 && ::stat(path.c_str(), &b) == 0 && a.st_dev == b.st_dev &&
         a.st_ino == b.st_ino;
}

bool same_inode(int a, int b) {
  struct stat sa {
  }, sb{};
  return ::fstat(a, &sa) == 0 && ::fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

}  // namespace

OutputLock::OutputLock(const std::string& path) : path_(output_target(path).empty() ? path : output_target(path)) {
  // The lock-file loop: open (or create), lock, and check that the path still
  // names the locked file; a run that released and removed an empty file it
  // had created between our open and our lock makes us start again. Only the
  // holder of the lock ever removes the file.
  for (int attempt = 0;; ++attempt) {
    created_ = false;
    fd_ = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd_ < 0 && errno == ENOENT) {
      fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      created_ = fd_ >= 0;
      if (fd_ < 0 && errno == EEXIST) continue;  // another run just made it: open that one
    }
    if (fd_ < 0) throw Error(sys_error(path + ": cannot open for writing"));
    struct stat sb {};
    if (::fstat(fd_, &sb) != 0 || !S_ISREG(sb.st_mode)) {
      ::close(fd_);
      fd_ = -1;
      throw Error(path + ": not a regular file");
    }
    int locked = ::flock(fd_, LOCK_EX | LOCK_NB);
    // A writer checking whether a run holds this file takes a shared lock for
    // a moment (output_path.h): wait that moment out, not a real holder.
    for (int i = 0; locked != 0 && errno == EWOULDBLOCK && i < 10; ++i) {
      ::usleep(5000);
      locked = ::flock(fd_, LOCK_EX | LOCK_NB);
    }
    if (locked != 0) {
      const int e = errno;
      if (e == ENOSYS || e == EOPNOTSUPP || e == ENOLCK) {  // a file system without flock: go on unlocked
        std::fprintf(stderr, "redwood: %s: cannot lock the output here (%s); do not run this job twice at once\n",
                     path.c_str(), std::strerror(e));
        break;
      }
      ::close(fd_);  // never removed here: whoever holds the lock owns the file
      fd_ = -1;
      throw Error(path + ": " +
                  (e == EWOULDBLOCK
                       ? "another redwood run is writing this file; wait for it, or choose another output path"
                       : std::string("cannot lock it: ") + std::strerror(e)));
    }
    if (names_fd(path_, fd_)) break;
    ::close(fd_);  // locked a file that is gone: start again
    fd_ = -1;
    if (attempt == 100) throw Error(path + ": the file keeps being replaced while locking it");
  }
  if (created_) fsync_parent_dir(path_);  // make the new file's name durable too
  note_own_lock(fd_, true);
}

OutputLock::~OutputLock() {
  if (fd_ < 0) return;
  note_own_lock(fd_, false);
  struct stat sb {};
  if (created_ && ::fstat(fd_, &sb) == 0 && sb.st_size == 0 && names_fd(path_, fd_))
    (void)::unlink(path_.c_str());  // nothing was written (removed while still locked)
  ::close(fd_);                     // releases the lock
}

bool OutputLock::holds(int fd) const {
  return fd_ >= 0 && same_inode(fd_, fd);
}

ResultWriter::ResultWriter(const std::string& path, int fsync_every, const OutputLock* lock)
    : path_(path), every_(std::max(1, fsync_every)) {
  const bool existed = std::filesystem::exists(path);
  fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error(sys_error(path + ": cannot open for writing"));
  if (!existed) fsync_parent_dir(path);
  if (lock && !lock->holds(fd_)) {
    ::close(fd_);
    fd_ = -1;
    throw Error(path + ": the results file was replaced or removed after this run locked it (another program wrote "
                       "there); stopped before writing a line");
  }
}

ResultWriter::~ResultWriter() {
  if (fd_ >= 0) {
    (void)::fsync(fd_);
    ::close(fd_);
  }
}

void ResultWriter::append(const nlohmann::ordered_json& j) {
  if (fd_ < 0) throw Error(path_ + ": writer is closed");
  // Still the file this run opened: another program renaming or removing it
  // under the job must stop the job, not let it report lines nobody can read.
  if (!names_fd(path_, fd_))
    throw Error(path_ + ": the results file was replaced or removed while the job ran (another program wrote there); "
                        "stopped before writing id " + (j.contains("id") ? j["id"].dump() : std::string("?")) +
                " (this run wrote " + std::to_string(appended_) + " lines, in the file that was replaced)");
  std::string line = j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  line += '\n';
  const off_t before = ::lseek(fd_, 0, SEEK_END);
  const ssize_t w = ::write(fd_, line.data(), line.size());
  if (w != static_cast<ssize_t>(line.size())) {
    const std::string why = w < 0 ? std::strerror(errno) : "short write (disk full?)";
    if (before >= 0) (void)::ftruncate(fd_, before);  // never leave a partial line behind
    throw Error(path_ + ": cannot write a result line: " + why);
  }
  ++appended_;
  if (++unsynced_ >= every_) sync();
}

void ResultWriter::sync() {
  if (fd_ < 0 || unsynced_ == 0) return;
  if (::fsync(fd_) != 0) throw Error(sys_error(path_ + ": fsync failed"));
  unsynced_ = 0;
}

void ResultWriter::close() {
  if (fd_ < 0) return;
  unsynced_ = 1;
  sync();
  ::close(fd_);
  fd_ = -1;
}

Percentiles percentiles(std::vector<double> v) {
  Percentiles p;
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  auto rank = [&](double q) {
    const size_t r = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
    return v[std::clamp<size_t>(r, 1, v.size()) - 1];
  };
  p.p50 = rank(0.50);
  p.p90 = rank(0.90);
  p.p99 = rank(0.99);
  double s = 0;
  for (double x : v) s += x;
  p.mean = s / static_cast<double>(v.size());
  return p;
}

std::vector<json> read_results(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<json> out;
  std::string line;
  while (std::getline(in, line)) {
    json j = json::parse(line, nullptr, false);
    if (!j.is_discarded() && is_result_line(j)) out.push_back(std::move(j));
  }
  return out;
}

}  // namespace redwood::jobs
