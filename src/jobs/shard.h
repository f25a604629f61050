// One shard of a batch job's prompts, for a job split across machines by a
// scheduler (a Slurm job array, a Kubernetes indexed job, Ray tasks):
// `redwood batch JOB.toml --shard K/N` (or `[batch] shard = "K/N"`) runs the
// prompts whose id falls in shard K of N, 1 <= K <= N. A prompt's shard is a
// hash of its id (the id as JSON text, PromptItem::key) modulo N, so it
// depends on the id alone: appending, removing or reordering prompts never
// moves a prompt to another shard. A shard's output is the job's output path
// with ".shard-K-of-N" inserted before its extension (out.jsonl ->
// out.shard-2-of-8.jsonl; an explicit output.summary likewise), a normal
// resumable job output whose lines record "shard": "K/N" among their
// settings, so that no other shard (nor an unsharded run) resumes into it.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "src/jobs/prompts.h"

namespace redwood::jobs {

struct Shard {
  int index = 0;  // K, 1-based
  int count = 0;  // N; 0: the whole job (no shard)
  bool active() const { return count > 0; }
  std::string str() const { return std::to_string(index) + "/" + std::to_string(count); }  // "K/N"
};

inline constexpr int kMaxShards = 1 << 20;

// Parses "K/N" (decimal digits, 1 <= K <= N <= kMaxShards); throws
// redwood::Error naming the text and the form expected (no key prefix).
Shard parse_shard(std::string_view text);

// The shard (1..count) of the prompt whose id is `key` (PromptItem::key).
int shard_of(const std::string& key, int count);

// Keeps the items of `shard` (all when it is not active), in their order.
void keep_shard(std::vector<PromptItem>& items, const Shard& shard);

// `path` with ".shard-K-of-N" inserted before the extension of its last
// component ("out/r.jsonl" -> "out/r.shard-2-of-8.jsonl", "r" -> "r.shard-2-of-8");
// `path` itself when the shard is not active or `path` is empty.
std::string shard_output_path(const std::string& path, const Shard& shard);

}  // namespace redwood::jobs
