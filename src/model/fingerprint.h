// A model's identity by content: batch jobs store it with
// every result line, so that resuming with another checkpoint under the same
// file name (another quantization, another fine-tune) is refused instead of
// mixing two models' outputs in one file, while a copy of the same model
// under another path still resumes.
#pragma once
#include <cstdint>
#include <string>

#include "src/model/model_desc.h"

namespace redwood {

// 16 hex digits of XXH3-64 over: every byte of every data file (so every
// byte of every tensor, and the file's metadata); the hyperparameters; the
// tokenizer's tokens; every tensor's name, type, shape, file, offset and size.
// A file's content hash is cached in the user's cache directory
// (src/util/cache_dir.h) under its path, size, mtime, ctime, inode and device,
// so a model is read whole only the first time (or after it changed).
// Throws redwood::Error when a file cannot be read.
std::string model_fingerprint(const ModelDesc& m);

// One file's size and XXH3-64 of all its bytes, from the same cache (read
// whole only the first time, or after the file changed).
struct FileHash {
  uint64_t bytes = 0, xxh3 = 0;
};
FileHash file_content_hash(const std::string& path);

}  // namespace redwood

namespace redwood {
// What the fingerprint covers, in words (redwood info).
inline constexpr const char* kFingerprintCovers =
    "every byte of every tensor + metadata (whole-file XXH3, cached by path, size, mtime, inode)";
}  // namespace redwood
