// A file's version without reading it: device, inode, size and modification
// time. A batch job records its model files' versions when it loads them and
// compares before each prompt, so a model rewritten, replaced or resized under
// a running job stops it instead of mixing two models in one output.
#pragma once
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "src/util/error.h"

namespace redwood {

struct FileVersion {
  std::string path;
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  timespec mtime{};
};

// The version of `path` now; redwood::Error "PATH: cannot stat: why".
inline FileVersion file_version(const std::string& path) {
  struct stat sb {};
  if (::stat(path.c_str(), &sb) != 0) throw Error(path + ": cannot stat: " + std::strerror(errno));
  return {path, sb.st_dev, sb.st_ino, sb.st_size, sb.st_mtim};
}

// "" while the file is as recorded, else what changed, in words ("it was
// removed", "it was replaced by another file", "its size changed from A to B
// bytes", "it was modified").
inline std::string file_change(const FileVersion& v) {
  struct stat sb {};
  if (::stat(v.path.c_str(), &sb) != 0) return "it can no longer be read (" + std::string(std::strerror(errno)) + ")";
  if (sb.st_dev != v.dev || sb.st_ino != v.ino) return "it was replaced by another file";
  if (sb.st_size != v.size)
    return "its size changed from " + std::to_string(v.size) + " to " + std::to_string(sb.st_size) + " bytes";
  if (sb.st_mtim.tv_sec != v.mtime.tv_sec || sb.st_mtim.tv_nsec != v.mtime.tv_nsec) return "it was modified";
  return "";
}

}  // namespace redwood
