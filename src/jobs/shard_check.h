// Checking a sharded job (shard.h) once its shards have run:
// `redwood batch JOB.toml --check-shards N` reads the N shards' outputs
// (the job's output path with each shard's name) and the job's prompt file,
// and finds whether together they answer every usable prompt of the job
// exactly once, each in the shard its id belongs to, with one set of settings
// (the lines' "settings", model fingerprint included, all alike but for the
// shard) and for the prompt as it is now (the lines' "prompt_hash"). Reads
// only: nothing is changed.
#pragma once
#include <string>

#include "src/jobs/job.h"

namespace redwood::jobs {

struct ShardCheck {
  bool ok = false;
  // One line: "N prompts answered once by M shards", or the first problem
  // found ("PATH:LINE: ..." naming the line, or the first prompt no shard
  // answered, naming its id and the shard it belongs to).
  std::string message;
};

// job: parsed, with command-line overrides applied (its own batch.shard is
// ignored: `count` says how many shards there are). Throws redwood::Error
// when the job cannot be checked (no prompt file, a bad prompt line under
// on_bad_line = "fail", an unreadable output).
ShardCheck check_shards(const JobConfig& job, int count);

}  // namespace redwood::jobs
