#include "src/jobs/shard.h"

#include <cstdint>
#include <vector>

#include "src/util/error.h"

namespace redwood::jobs {

namespace {

// A decimal number of at most 7 digits (kMaxShards has 7), or -1.
int small_number(std::string_view s) {
  if (s.empty() || s.size() > 7) return -1;
  int v = 0;
  for (const char c : s) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v;
}

}  // namespace

Shard parse_shard(std::string_view text) {
  const size_t slash = text.find('/');
  const int k = slash == std::string_view::npos ? -1 : small_number(text.substr(0, slash));
  const int n = slash == std::string_view::npos ? -1 : small_number(text.substr(slash + 1));
  if (k < 1 || n < 1 || k > n || n > kMaxShards)
    throw Error("expected a shard K/N with 1 <= K <= N <= " + std::to_string(kMaxShards) + " (e.g. 2/8), got '" +
                std::string(text) + "'");
  return {k, n};
}

int shard_of(const std::string& key, int count) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the id's JSON text
  for (const unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;  // splitmix64 finaliser: every bit of the id in the low bits
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
  h ^= h >> 31;
  return static_cast<int>(h % static_cast<uint64_t>(count)) + 1;
}

void keep_shard(std::vector<PromptItem>& items, const Shard& shard) {
  if (!shard.active()) return;
  std::erase_if(items, [&](const PromptItem& it) { return shard_of(it.key, shard.count) != shard.index; });
}

std::string shard_output_path(const std::string& path, const Shard& shard) {
  if (!shard.active() || path.empty()) return path;
  const std::string tag = ".shard-" + std::to_string(shard.index) + "-of-" + std::to_string(shard.count);
  const size_t name = path.rfind('/') == std::string::npos ? 0 : path.rfind('/') + 1;
  const size_t dot = path.rfind('.');
  // An extension: a dot inside the last component, not its first character ("a/.x" has none).
  if (dot != std::string::npos && dot > name) return path.substr(0, dot) + tag + path.substr(dot);
  return path + tag;
}

}  // namespace redwood::jobs
