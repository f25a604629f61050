#include "src/jobs/job.h"

#include <nlohmann/json.hpp>
#include <toml++/toml.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "src/engine/kv_type.h"
#include "src/jobs/run_sections.h"
#include "src/util/error.h"
#include "src/util/io.h"
#include "src/util/output_path.h"
#include "src/util/size.h"
#include "src/util/toml_section.h"

namespace redwood::jobs {

namespace fs = std::filesystem;

using config::Section;

namespace {

void check_size(const JobConfig& job, const std::string& key, const std::string& v) {
  if (v.empty()) return;
  try {
    if (key == "memory.device")
      (void)parse_device_budget(v, "memory.device");
    else
      (void)parse_size(v);
  } catch (const Error& e) {
    throw Error(job.where(key) + ": " + e.what());
  }
}

}  // namespace

std::string JobConfig::where(const std::string& key) const {
  const auto it = lines.find(key);
  if (it != lines.end() && it->second < 0) {  // a command-line override
    if (key == "input.prompts") return "--prompts";
    if (key == "output.path") return "--output";
    if (key == "batch.shard") return "--shard";
  }
  std::string out = file;
  if (it != lines.end()) out.append(":").append(std::to_string(it->second));
  const auto alias = key_names.find(key);
  out.append(": ").append(alias == key_names.end() ? key : alias->second);
  return out;
}

void read_run_sections(const toml::table& root, JobConfig& job, FileKind kind) {
  const bool is_job = kind == FileKind::job;
  Section top(job.file, job.lines, &root, "");
  if (is_job)
    top.only({"name", "model", "memory", "speculation", "batch", "sampling", "input", "output"});
  else
    top.only({"model", "memory", "speculation", "batch", "sampling", "server"});
  top.str("name", job.name);
  auto section = [&](const char* key) -> Section {
    const toml::node* n = root.get(key);
    if (n && !n->is_table()) top.wrong_type(key, *n, "a table");
    if (n) job.lines[key] = static_cast<int>(n->source().begin.line);
    return Section(job.file, job.lines, n ? n->as_table() : nullptr, key);
  };

  const Section model = section("model");
  model.only({"target", "draft"});
  model.str("target", job.target);
  model.str("draft", job.draft);

  const Section mem = section("memory");
  mem.only({"device", "host", "ring", "ctx", "threads", "verify_io", "kv_type"});
  mem.str("device", job.device_mem);
  mem.str("host", job.host_mem);
  mem.integer("ring", job.ring, 2, 64);
  mem.integer("ctx", job.ctx, 16, 1 << 24);
  mem.integer("threads", job.threads, 0, 1024);
  mem.boolean("verify_io", job.verify_io);
  mem.choice("kv_type", job.kv_type, kKvTypeNames);
  check_size(job, "memory.device", job.device_mem);
  check_size(job, "memory.host", job.host_mem);
  if (job.verify_io && job.device_mem.empty() && job.host_mem.empty())
    throw Error(job.where("memory.verify_io") +
                ": checks streamed layers, and without memory.device or memory.host nothing is streamed");

  const Section sp = section("speculation");
  sp.only({"tree", "verify", "budget", "depth", "threshold", "delta", "width", "acceptance", "prefill_chunk",
           "is_alphabet"});
  sp.str("tree", job.tree);
  sp.choice("verify", job.verify, {"greedy", "specinfer", "sequoia", "target-sample", "spectr", "multidraft-is"});
  sp.integer("budget", job.budget, 1, 8192);
  sp.integer("depth", job.depth, 1, 1024);
  sp.number("threshold", job.threshold, 0.0, 1.0, /*lo_open=*/true);
  sp.number("delta", job.delta, 0.0, 1e9);
  sp.integer("width", job.width, 1, 1024);
  sp.integer("is_alphabet", job.is_alphabet, 1, 1 << 24);
  sp.str("acceptance", job.acceptance);
  sp.integer("prefill_chunk", job.prefill_chunk, 1, 1 << 20);
  if (job.tree.empty()) throw Error(job.where("speculation.tree") + ": must not be empty");

  const Section ba = section("batch");
  if (is_job)
    ba.only({"sequences", "pass_tokens", "shard"});
  else
    ba.only({"sequences", "pass_tokens"});
  ba.integer_or_word("sequences", job.sequences, 1, 256, "auto", job.sequences_auto);
  if (job.sequences_auto && !is_job)
    throw Error(job.where("batch.sequences") + ": \"auto\" is for batch jobs; a server takes a number");
  ba.integer("pass_tokens", job.pass_tokens, 1, 8192);
  if (std::string shard; ba.has("shard")) {
    ba.str("shard", shard);
    try {
      job.shard = parse_shard(shard);
    } catch (const Error& e) {
      throw Error(job.where("batch.shard") + ": " + e.what());
    }
  }

  const Section sa = section("sampling");
  if (is_job)
    sa.only({"temperature", "top_p", "top_k", "seed", "max_tokens", "stop"});
  else  // stop strings are each request's
    sa.only({"temperature", "top_p", "top_k", "seed", "max_tokens"});
  double temp = job.sampling.temperature, top_p = job.sampling.top_p;
  sa.number("temperature", temp, 0.0, 100.0);
  sa.number("top_p", top_p, 0.0, 1.0, /*lo_open=*/true);
  job.sampling.temperature = static_cast<float>(temp);
  job.sampling.top_p = static_cast<float>(top_p);
  sa.integer("top_k", job.sampling.top_k, 0, 1 << 24);
  sa.integer("seed", job.sampling.seed, 0, INT64_MAX);
  sa.integer("max_tokens", job.max_tokens, 1, 1 << 20);
  sa.strings("stop", job.stop);
  for (const auto& s : job.stop)
    if (s.empty()) throw Error(job.where("sampling.stop") + ": stop strings must not be empty");
}

JobConfig parse_job_text(std::string_view text, const std::string& name) {
  JobConfig job;
  job.file = name;
  toml::table root = config::parse_toml(text, name);
  read_run_sections(root, job, FileKind::job);
  Section top(job.file, job.lines, &root, "");
  auto section = [&](const char* key) -> Section {
    const toml::node* n = root.get(key);
    if (n && !n->is_table()) top.wrong_type(key, *n, "a table");
    if (n) job.lines[key] = static_cast<int>(n->source().begin.line);
    return Section(job.file, job.lines, n ? n->as_table() : nullptr, key);
  };
  const Section in = section("input");
  in.only({"prompts", "chat", "on_bad_line"});
  in.str("prompts", job.prompts);
  in.boolean("chat", job.chat);
  std::string bad = "fail";
  in.choice("on_bad_line", bad, {"skip", "fail"});
  job.skip_bad_lines = bad == "skip";

  const Section out = section("output");
  out.only({"path", "summary", "fsync_every", "progress_every"});
  out.str("path", job.output);
  out.str("summary", job.summary);
  out.integer("fsync_every", job.fsync_every, 1, 1 << 20);
  out.number("progress_every", job.progress_every, 0.0, 86400.0, /*lo_open=*/true);

  if (job.target.empty())
    throw Error(job.file + ": model.target: missing (the target model's path, e.g. target = \"models/x.gguf\")");
  if (!job.draft.empty() && job.draft == job.target)
    throw Error(job.where("model.draft") + ": the draft must be a different (smaller) model than the target");
  if (job.draft.empty() && root.contains("speculation"))
    throw Error(job.where("speculation") + ": [speculation] needs model.draft (a draft model to speculate with)");
  if (job.max_tokens + 2 > job.ctx)
    throw Error(job.where("sampling.max_tokens") + ": " + std::to_string(job.max_tokens) +
                " tokens do not fit in memory.ctx = " + std::to_string(job.ctx) + " with a prompt");
  return job;
}

JobConfig parse_job_file(const std::string& path) {
  return parse_job_text(read_text_file(path, "the job file"), path);
}

void apply_overrides(JobConfig& job, const JobOverrides& o) {
  if (!o.prompts.empty()) {
    job.prompts = o.prompts;
    job.lines["input.prompts"] = -1;  // where() says --prompts
  }
  if (!o.output.empty()) {
    job.output = o.output;
    job.lines["output.path"] = -1;                                // where() says --output
    if (!job.lines.count("output.summary")) job.summary.clear();  // follows the new output
  }
  if (o.threads >= 0) job.threads = o.threads;
  if (!o.shard.empty()) {
    job.lines["batch.shard"] = -1;  // where() says --shard
    try {
      job.shard = parse_shard(o.shard);
    } catch (const Error& e) {
      throw Error(job.where("batch.shard") + ": " + e.what());
    }
  }
}

namespace {

// The "output" a batch summary at `path` names ("" when the file is not one).
std::string summary_output(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec) || fs::file_size(path, ec) > (1u << 20) || ec) return "";
  std::ifstream f(path);
  const nlohmann::json j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("output") || !j["output"].is_string() || !j.contains("prompts")) return "";
  return j["output"].get<std::string>();
}

// The folders of output.path and output.summary, with their keys (for messages).
std::vector<std::pair<std::string, fs::path>> output_dirs(const JobConfig& job) {
  return {{"output.path", fs::path(job.output).parent_path()}, {"output.summary", fs::path(job.summary).parent_path()}};
}

}  // namespace

std::string model_path_problem(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return "";
  if (!fs::is_directory(path, ec)) return "no such file '" + path + "'";
  if (!fs::is_regular_file(fs::path(path) / "config.json", ec))
    return "'" + path + "' is a directory without config.json (a model is a GGUF file or a Hugging Face safetensors " +
           "directory)";
  return "";
}

std::string model_file_name(const std::string& path) {
  fs::path t = fs::path(path).lexically_normal();
  if (t.filename().empty()) t = t.parent_path();  // a directory given as "dir/"
  return t.filename().string();
}

void check_job(JobConfig& job) {
  auto readable = [&](const std::string& key, const std::string& path, const char* what) {
    std::error_code ec;
    const auto st = fs::status(path, ec);
    if (ec || !fs::exists(st)) throw Error(job.where(key) + ": no such file '" + path + "' (" + what + ")");
    if (!fs::is_regular_file(st)) throw Error(job.where(key) + ": '" + path + "' is not a regular file");
    std::ifstream f(path, std::ios::binary);
    if (!f) throw Error(job.where(key) + ": cannot open '" + path + "'");
  };
  auto model = [&](const std::string& key, const std::string& path, const char* what) {
    std::error_code ec;
    if (!fs::is_directory(path, ec)) return readable(key, path, what);
    const std::string problem = model_path_problem(path);
    if (!problem.empty()) throw Error(job.where(key) + ": " + problem);
  };
  model("model.target", job.target, "the target model");
  if (!job.draft.empty()) model("model.draft", job.draft, "the draft model");
  if (!job.acceptance.empty()) readable("speculation.acceptance", job.acceptance, "an acceptance vector JSON");
  if (job.prompts.empty())
    throw Error(job.file +
                ": input.prompts: missing (a JSONL file of {\"id\", \"prompt\"|\"messages\"}; or --prompts)");
  readable("input.prompts", job.prompts, "the prompt file");
  if (job.output.empty()) throw Error(job.file + ": output.path: missing (where results go; or --output)");
  if (job.shard.active() && !job.outputs_sharded) {  // each shard its own results and summary
    job.output = shard_output_path(job.output, job.shard);
    job.summary = shard_output_path(job.summary, job.shard);  // "" stays "": the default follows the output
    job.outputs_sharded = true;
  }
  if (job.summary.empty()) {  // beside the file a link at output.path leads to (output_path.h), not in /dev
    const std::string t = output_target(job.output);
    job.summary = (t.empty() ? job.output : t) + ".summary.json";
  }
  // The output-path policy (src/util/output_path.h): neither output is an
  // input of the job (by device + inode, or with links and ".." resolved) nor
  // an existing non-regular file, and the summary is not the results file.
  if (same_file(job.output, job.prompts))
    throw Error(job.where("output.path") + ": is the prompt file itself; refusing to write into it");
  std::vector<std::string> inputs = {job.file, job.target, job.draft, job.acceptance, job.prompts};
  if (job.tree.rfind("sequoia:", 0) == 0) inputs.push_back(job.tree.substr(8));
  if (const std::string p = output_path_problem(job.output, inputs, false, /*appends_results=*/true); !p.empty())
    throw Error(job.where("output.path") + ": " + p);
  if (held_by_another_run(job.output))  // before its summary name, which that run holds too
    throw Error(job.output + ": another redwood run is writing this file; wait for it, or choose another output path");
  if (same_file(job.summary, job.output))
    throw Error(job.where("output.summary") + ": '" + job.summary + "' is the results file '" + job.output +
                "' (output.path); the summary must differ from it");
  if (const std::string p = output_path_problem(job.summary, inputs); !p.empty())
    throw Error(job.where("output.summary") + ": " + p);
  // Another job's summary is that job's record: not replaced (the job's own
  // summary, or one under its default name, is rewritten as always).
  if (const std::string other = summary_output(job.summary);
      !other.empty() && other != job.output && !same_file(other, job.output) &&
      !same_file(job.summary, job.output + ".summary.json"))
    throw Error(job.where("output.summary") + ": '" + job.summary + "' is the summary of another job's results '" +
                other + "'; refusing to replace it (choose another path, or move the file)");
  std::error_code ec;
  // The output folders are made when the job runs (create_output_dirs), so a
  // job that fails validation leaves nothing behind; here the nearest existing
  // folder must be one this process can write into.
  for (const auto& [key, d] : output_dirs(job)) {
    const fs::path dir = d.empty() ? fs::path(".") : d;
    fs::path at = dir;
    while (!at.empty() && !fs::exists(at, ec)) at = at.parent_path();
    if (at.empty()) at = ".";
    if (at == dir && fs::is_directory(at, ec) && ::access(at.c_str(), W_OK | X_OK) != 0)
      throw Error(job.where(key) + ": the directory '" + dir.string() + "' exists but is not writable");
    if (!fs::is_directory(at, ec) || ::access(at.c_str(), W_OK | X_OK) != 0)
      throw Error(job.where(key) + ": cannot create directory '" + dir.string() + "' ('" + at.string() +
                  "' is not a writable directory)");
  }
}

void create_output_dirs(const JobConfig& job) {
  for (const auto& [key, dir] : output_dirs(job)) {
    if (dir.empty()) continue;
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec || !fs::is_directory(dir))
      throw Error(job.where(key) + ": cannot create directory '" + dir.string() + "'" +
                  (ec ? ": " + ec.message() : ""));
  }
}

}  // namespace redwood::jobs
