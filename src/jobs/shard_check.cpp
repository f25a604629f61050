#include "src/jobs/shard_check.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "src/jobs/prompts.h"
#include "src/jobs/results.h"
#include "src/util/error.h"
#include "src/util/io.h"
#include "src/util/output_path.h"

namespace redwood::jobs {

using nlohmann::json;

namespace {

struct Answer {
  std::string where;  // PATH:LINE
};

ShardCheck fail(std::string message) {
  return {false, std::move(message)};
}

}  // namespace

ShardCheck check_shards(const JobConfig& job, int count) {
  if (count < 1 || count > kMaxShards)
    throw Error("--check-shards: expected 1 to " + std::to_string(kMaxShards) + " shards, got " +
                std::to_string(count));
  if (job.prompts.empty())
    throw Error(job.file +
                ": input.prompts: missing (a JSONL file of {\"id\", \"prompt\"|\"messages\"}; or --prompts)");
  if (job.output.empty()) throw Error(job.file + ": output.path: missing (where results go; or --output)");
  const PromptFile pf = read_prompts(job.prompts, job.skip_bad_lines);
  std::unordered_map<std::string, size_t> item_of;  // id -> index in pf.items
  for (size_t i = 0; i < pf.items.size(); ++i) item_of.emplace(pf.items[i].key, i);

  json reference;  // the first line's settings, without "shard"
  std::string reference_at;
  std::unordered_map<std::string, Answer> answered;  // id -> where
  for (int k = 1; k <= count; ++k) {
    const Shard shard{k, count};
    const std::string path = shard_output_path(job.output, shard);
    const std::string name = "shard " + shard.str();
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) continue;  // its prompts are reported below (a shard may have none)
    if (held_by_another_run(path)) return fail(path + ": " + name + " is still running (another redwood run holds it)");
    const std::string data = read_text_file(path, "a shard's output", UINT64_MAX);
    size_t pos = 0;
    for (int64_t line_no = 1; pos < data.size(); ++line_no) {
      const size_t nl = data.find('\n', pos);
      const std::string at = path + ":" + std::to_string(line_no);
      if (nl == std::string::npos)
        return fail(at + ": a torn last line (" + name + " was interrupted): run it again to resume");
      const json j = json::parse(std::string_view(data).substr(pos, nl - pos), nullptr, /*allow_exceptions=*/false);
      pos = nl + 1;
      if (j.is_discarded() || !is_result_line(j)) return fail(at + ": not a result line of redwood batch");
      if (!j.contains("settings") || !j["settings"].is_object())
        return fail(at + ": carries no settings (an older redwood's line); its shard cannot be checked");
      json settings = j["settings"];
      const json tag = settings.contains("shard") ? settings["shard"] : json();
      if (tag != json(shard.str()))
        return fail(at + ": written by " + (tag.is_string() ? "shard " + tag.get<std::string>() : "an unsharded run") +
                    ", in " + name + "'s output");
      settings.erase("shard");
      if (reference.is_null()) {
        reference = settings;
        reference_at = at;
      } else if (settings != reference) {
        return fail(at + ": " + name + " ran with other settings than " + reference_at + " (" +
                    settings_diff(reference, settings) + ")");
      }
      const std::string id = j["id"].dump();
      const auto item = item_of.find(id);
      if (item == item_of.end()) return fail(at + ": id " + id + " is not a prompt of " + job.prompts);
      if (const int owner = shard_of(id, count); owner != k)
        return fail(at + ": id " + id + " belongs to shard " + Shard{owner, count}.str() + ", not " + shard.str());
      if (const auto [was, fresh] = answered.emplace(id, Answer{at}); !fresh)
        return fail(at + ": id " + id + " is answered twice (also at " + was->second.where + ")");
      const PromptItem& it = pf.items[item->second];
      if (j.value("prompt_hash", std::string()) != prompt_hash(it, job.chat))
        return fail(at + ": id " + id + " was answered for another prompt (" + job.prompts + ":" +
                    std::to_string(it.line) + " was edited since, or the line has no prompt_hash)");
      if (j["finish_reason"] == "error")
        return fail(at + ": id " + id + " failed (finish_reason \"error\"; the line says why)");
    }
  }
  for (const PromptItem& it : pf.items)
    if (!answered.count(it.key)) {
      const Shard owner{shard_of(it.key, count), count};
      return fail("id " + it.key + " (" + job.prompts + ":" + std::to_string(it.line) + ") is answered by no shard: " +
                  "shard " + owner.str() + " ('" + shard_output_path(job.output, owner) +
                  "') has no line for it (not run, interrupted, or the prompt was skipped)");
    }
  return {true, std::to_string(pf.items.size()) + " prompts answered once by " + std::to_string(count) + " shards"};
}

}  // namespace redwood::jobs
