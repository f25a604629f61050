// Positioned reads that either deliver every byte or throw: the one pread loop
// used by the format readers, the GGUF writer and the weight loader.
#pragma once
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "src/util/error.h"

namespace redwood {

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

}  // namespace redwood
