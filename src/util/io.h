// Positioned reads that either deliver every byte or throw: the one pread loop
// used by the format readers, the GGUF writer and the weight loader; and whole
// small text files (configs, profiles).
#pragma once
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "src/util/error.h"

namespace redwood {

// An owned file descriptor, closed when it goes away (-1: none).
struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Reads bytes [offset, offset + n) of fd into dst. EINTR/EAGAIN and short reads
// are retried; an I/O error or end of file -> redwood::Error naming the file.
inline void read_exact(int fd, const std::string& path, void* dst, uint64_t n, uint64_t offset) {
  auto* out = static_cast<uint8_t*>(dst);
  uint64_t got = 0;
  while (got < n) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(n - got, uint64_t{1} << 30));
    const ssize_t r = ::pread(fd, out + got, want, static_cast<off_t>(offset + got));
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw Error(path + ": read error at offset " + std::to_string(offset + got) + ": " + strerror(errno));
    }
    if (r == 0)
      throw Error(path + ": unexpected end of file at offset " + std::to_string(offset + got) +
                  " (truncated, or the file shrank while reading)");
    got += static_cast<uint64_t>(r);
  }
}

// What a non-regular file is, for messages ("a FIFO", "a character device").
inline const char* file_kind(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

// Every input file is a regular file: a FIFO would block the open (or the
// read) until some writer appears, a device never ends. Opens `path` for
// reading without blocking, checks it is a regular file and returns the fd
// (blocking again); one-line errors "PATH: cannot open WHAT",
// "PATH: is a FIFO, not WHAT (inputs must be regular files)".
inline int open_input_file(const std::string& path, const char* what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error(path + ": cannot open " + what);
  struct stat sb {};
  if (::fstat(fd, &sb) != 0) {
    const int e = errno;
    ::close(fd);
    throw Error(path + ": cannot stat " + what + ": " + strerror(e));
  }
  if (!S_ISREG(sb.st_mode)) {
    ::close(fd);
    if (S_ISDIR(sb.st_mode)) throw Error(path + ": is a directory, not " + what);
    throw Error(path + ": is " + file_kind(sb.st_mode) + ", not " + what + " (inputs must be regular files)");
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

// The same check for readers that open the file themselves (streams): throws
// unless `path` (links followed) is a regular file; a missing file passes
// (the opener reports it).
inline void require_regular_input(const std::string& path, const char* what) {
  struct stat sb {};
  if (::stat(path.c_str(), &sb) != 0 || S_ISREG(sb.st_mode)) return;
  if (S_ISDIR(sb.st_mode)) throw Error(path + ": is a directory, not " + what);
  throw Error(path + ": is " + file_kind(sb.st_mode) + ", not " + what + " (inputs must be regular files)");
}

// The whole of a small text file (a config, a profile, a JSON or TOML file),
// with one-line errors: "PATH: cannot open WHAT", "PATH: is a directory, not
// WHAT", "PATH: is a FIFO, not WHAT (...)", "PATH: WHAT is larger than N
// bytes", "PATH: read error".
inline std::string read_text_file(const std::string& path, const char* what, uint64_t max_bytes = uint64_t{1} << 30) {
  const int fd = open_input_file(path, what);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw Error(path + ": read error: " + strerror(errno));
    }
    if (r == 0) break;
    if (text.size() + static_cast<size_t>(r) > max_bytes)
      throw Error(path + ": " + what + " is larger than " + std::to_string(max_bytes) + " bytes");
    text.append(buf, static_cast<size_t>(r));
  }
  return text;
}

}  // namespace redwood
