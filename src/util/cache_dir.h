// The user's cache directory: $REDWOOD_CACHE_DIR, else $XDG_CACHE_HOME/redwood,
// else ~/.cache/redwood (else ./.redwood-cache). Holds what is measured or
// computed once per model and reused: --tree auto's profiles, the models'
// content hashes (src/model/fingerprint.cpp).
#pragma once
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#include "src/util/error.h"

namespace redwood {

// The directory's path, without creating it.
inline std::string cache_dir_path() {
  if (const char* e = std::getenv("REDWOOD_CACHE_DIR"); e && *e) return e;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/redwood";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/redwood";
  return ".redwood-cache";
}

// The directory, created if missing; redwood::Error "cannot create the cache
// DIR: why" when it cannot be.
inline std::string make_cache_dir() {
  const std::string dir = cache_dir_path();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error("cannot create the cache " + dir + ": " + ec.message());
  return dir;
}

}  // namespace redwood
