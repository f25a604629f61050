// The sections a batch job (job.h) and a serve file (serve_config.h) share:
// [model], [memory], [speculation], [batch] and [sampling], read by one
// function so that a key means the same thing in both.
#pragma once
#include <toml++/toml.h>

#include "src/jobs/job.h"

namespace redwood::jobs {

enum class FileKind { job, serve };

// Reads the shared sections of `root` into `job` (job.file names the file;
// job.lines gets every key's line). The top level may hold only those
// sections and, for a job, name, [input] and [output]; for a serve file,
// [server] (read by the caller). A serve file leaves out what belongs to a
// job's prompts (batch.shard, sequences = "auto", sampling.stop: each request
// has its own). Throws redwood::Error "file:line: key: message".
void read_run_sections(const toml::table& root, JobConfig& job, FileKind kind);

}  // namespace redwood::jobs
