// A batch job: one TOML file names the models, memory budgets, the tree policy
// and verifier, sampling, the prompt file and the output. Everything is
// checked here, before any model loads; each error names the file, the line
// and the key ("job.toml:12: sampling.temperature: expected a number").
//
//   name = "smoke"                       # optional
//   [model]       target = "models/x.gguf"   draft = "models/d.gguf"
//   [memory]      device = "1GiB" (or "80MiB+draft")  host = "4GiB"  ring = 2  ctx = 2048  threads = 0
//                 verify_io = false  (checksum every streamed layer against the first read: generate --verify-io)
//                 kv_type = "f32" | "f16" | "bf16" | "q8_0"  (KV cache element type: generate --kv-type)
//   [speculation] tree = "sequoia"  verify = "greedy"  budget = 64  depth = 8
//                 threshold = 0.001  delta = 0.5  width = 8  acceptance = "acc.json"
//                 is_alphabet = 64   (multidraft-is: alphabet truncation)
//                 tree = "auto": the optimizer picks a Sequoia or dynamic tree (budget, depth: caps) or none
//                 prefill_chunk = 512
//   [sampling]    temperature = 0.0  top_p = 1.0  top_k = 0  seed = 0
//                 max_tokens = 128  stop = ["\n\n"]
//   [batch]       sequences = 1 | N | "auto"   (prompts sharing each target pass; with a draft, static trees;
//                               "auto": as many as the prompts and the memory budget allow, up to 64)
//                 pass_tokens = 64  (tokens in one shared pass: decode tokens, then prompt chunks)
//                 shard = "K/N"  (run shard K of N of the prompts, src/jobs/shard.h; batch --shard wins)
//   [input]       prompts = "prompts.jsonl"  chat = false  on_bad_line = "fail"
//   [output]      path = "out.jsonl"  summary = "out.summary.json"
//                 fsync_every = 16  progress_every = 10.0
//
// Relative paths are relative to the current directory (where redwood runs),
// so the same job works from the repository root as in the examples.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "src/engine/sampler.h"
#include "src/jobs/shard.h"

namespace redwood::jobs {

struct JobConfig {
  std::string file;  // the job file (for messages)
  std::string name;
  // [model]
  std::string target, draft;
  // [memory] (empty: no budget)
  std::string device_mem, host_mem;
  int ring = 2;
  int ctx = 2048;  // KV capacity per prompt: prompt + max_tokens must fit
  int threads = 0;
  bool verify_io = false;  // RunOptions::verify_io (streamed layers only)
  std::string kv_type = "f32";  // RunOptions::kv_type
  // [speculation] (used when draft is set)
  std::string tree = "sequoia", verify;  // verify empty: greedy at T = 0, else the tree's default
  int budget = 64, depth = 8;
  std::optional<double> threshold, delta;
  std::optional<int> width, is_alphabet;
  std::string acceptance;
  int prefill_chunk = 512;
  // [batch]
  int sequences = 1;
  bool sequences_auto = false;  // sequences = "auto": the runner chooses (at most kAutoSequences)
  int pass_tokens = 64;
  Shard shard;  // batch.shard or --shard (shard.h); check_job puts it into the output names
  bool outputs_sharded = false;  // check_job did
  // [sampling]
  SamplingParams sampling;
  int max_tokens = 128;
  std::vector<std::string> stop;
  // [input]
  std::string prompts;
  bool chat = false;  // wrap "prompt" strings in the model's chat template
  bool skip_bad_lines = false;
  // [output]
  std::string output, summary;
  int fsync_every = 16;        // lines between fsyncs (and always at the end)
  double progress_every = 10;  // seconds between progress lines when not on a terminal

  // "file:line: key" for messages about a key's value (line 0 when the key
  // was not in the file, e.g. a default or a command-line override).
  std::string where(const std::string& key) const;
  std::map<std::string, int> lines;  // dotted key -> line in the file (-1: set by --prompts/--output)
  std::map<std::string, std::string> key_names;  // a job made from a bench suite: job key -> the suite's key
};

// Parses and type-checks TOML text (no file system access). Throws
// redwood::Error "name:line: key: message" on syntax errors, unknown sections
// or keys, wrong types and values out of range.
JobConfig parse_job_text(std::string_view text, const std::string& name);

// Reads the file and parses it.
JobConfig parse_job_file(const std::string& path);

// Where a job or suite names a model: "" when `path` can be one (a regular
// file, taken for GGUF, or a directory with config.json, Hugging Face
// safetensors), else what is wrong, naming the path ("no such file 'P'",
// "'P' is a directory without config.json (...)"); the loader checks the rest
// before any weight is read.
std::string model_path_problem(const std::string& path);
// A model path's last component: "m/x.gguf" -> "x.gguf", "m/hf/" -> "hf".
std::string model_file_name(const std::string& path);

// Command-line overrides, applied before check_job.
struct JobOverrides {
  std::string prompts, output;
  int threads = -1;  // < 0: keep the job's
  std::string shard;  // "K/N" (--shard), replacing batch.shard
};
void apply_overrides(JobConfig& job, const JobOverrides& o);

// The checks that need the file system: required keys present, model, draft,
// acceptance and prompt files readable, the output not the prompt file, and
// the output's directory creatable. A shard's outputs get their shard's
// names (shard_output_path) first. Fills in the summary path default
// (<output>.summary.json). Throws redwood::Error with file:line: key.
void check_job(JobConfig& job);

// Makes the folders of output.path and output.summary (after check_job, when
// the job runs).
void create_output_dirs(const JobConfig& job);

}  // namespace redwood::jobs
