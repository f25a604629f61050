#include "src/jobs/results.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "src/util/error.h"

namespace redwood::jobs {

using nlohmann::json;

namespace {

std::string read_all(const std::string& path, bool& exists) {
  std::ifstream in(path, std::ios::binary);
  exists = static_cast<bool>(in);
  if (!in) return {};
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error(path + ": read error");
  return ss.str();
}

std::string sys_error(const std::string& what) { return what + ": " + std::strerror(errno); }

}  // namespace

bool is_result_line(const json& j) {
  return j.is_object() && j.contains("id") && (j["id"].is_string() || j["id"].is_number_integer()) &&
         j.contains("finish_reason") && j["finish_reason"].is_string();
}

ResumeState prepare_output(const std::string& path) {
  ResumeState st;
  bool exists = false;
  const std::string data = read_all(path, exists);
  if (!exists) return st;
  size_t pos = 0, good_end = 0;
  int64_t line_no = 0;
  while (pos < data.size()) {
    const size_t nl = data.find('\n', pos);
    ++line_no;
    const bool complete = nl != std::string::npos;
    const std::string_view line(data.data() + pos, (complete ? nl : data.size()) - pos);
    const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    const bool ok = complete && !j.is_discarded() && is_result_line(j);
    const bool last = !complete || nl + 1 == data.size();
    if (!ok) {
      if (!last)
        throw Error(path + ":" + std::to_string(line_no) +
                    ": not a result line, and not the last line (the file was changed by something other than "
                    "this job); fix or move it before resuming");
      break;  // torn tail: dropped below
    }
    st.done.insert(j["id"].dump());
    ++st.lines;
    pos = nl + 1;
    good_end = pos;
  }
  if (good_end < data.size()) {
    st.torn_bytes = static_cast<int64_t>(data.size() - good_end);
    if (::truncate(path.c_str(), static_cast<off_t>(good_end)) != 0)
      throw Error(sys_error(path + ": cannot cut off the torn last line"));
  }
  return st;
}

ResultWriter::ResultWriter(const std::string& path, int fsync_every) : path_(path), every_(std::max(1, fsync_every)) {
  const bool existed = std::filesystem::exists(path);
  fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error(sys_error(path + ": cannot open for writing"));
  if (!existed) {  // make the new file's name durable too
    std::string dir = std::filesystem::path(path).parent_path().string();
    if (dir.empty()) dir = ".";
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      (void)::fsync(dfd);
      ::close(dfd);
    }
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
  std::string line = j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  line += '\n';
  const off_t before = ::lseek(fd_, 0, SEEK_END);
  const ssize_t w = ::write(fd_, line.data(), line.size());
  if (w != static_cast<ssize_t>(line.size())) {
    const std::string why = w < 0 ? std::strerror(errno) : "short write (disk full?)";
    if (before >= 0) (void)::ftruncate(fd_, before);  // never leave a partial line behind
    throw Error(path_ + ": cannot write a result line: " + why);
  }
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
