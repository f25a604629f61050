// Environment variables that tune a run (measurement knobs such as
// REDWOOD_DECODE_THREADS): unset or empty means the default; any other value
// must parse, or a one-line redwood::Error names the variable. Never ignored.
#pragma once
#include <cerrno>
#include <cstdlib>
#include <optional>
#include <string>

#include "src/util/error.h"

namespace redwood {

// $name as an integer in [lo, hi]; nullopt when unset or empty.
inline std::optional<long long> env_int(const char* name, long long lo, long long hi) {
  const char* e = std::getenv(name);
  if (!e || !*e) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(e, &end, 10);
  if (*end != '\0' || errno != 0 || v < lo || v > hi)
    throw Error(std::string(name) + "=" + e + ": expected an integer from " + std::to_string(lo) + " to " +
                std::to_string(hi));
  return v;
}

// The streaming knobs: the packed decode stage's threads (1..64) and the I/O
// thread's raised priority (0 | 1). The streamer reads them; the CLI checks
// them at start, so a bad value is an error in every run, streamed or not.
inline std::optional<long long> env_decode_threads() { return env_int("REDWOOD_DECODE_THREADS", 1, 64); }
inline std::optional<long long> env_io_priority() { return env_int("REDWOOD_IO_PRIORITY", 0, 1); }

}  // namespace redwood
