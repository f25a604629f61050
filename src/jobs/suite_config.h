// A bench suite: a matrix of models x memory budgets x tree policies x tree
// budgets x temperatures x prompt sets. Each cell runs as a batch job (so a
// suite resumes cell by cell), plus one autoregressive baseline per model,
// budget, temperature and prompt set.
//
//   name = "smoke"
//   [suite]   max_tokens = 32  ctx = 1024  seed = 1  top_p = 1.0  limit = 4  chat = true  prefill_chunk = 64
//             kv_type = "f32" | "f16" | "bf16" | "q8_0"
//   [[model]] name = "smollm2"  target = "models/x.gguf"  draft = "models/d.gguf"
//             acceptance = "acc-T{T}.json"  # optional: the draft's profile per temperature, for sequoia and auto
//   [matrix]  device_mem = ["", "360MiB", "80MiB+draft"]   # "" = no budget; +draft: the draft on top
//             trees = ["chain", "sequoia", "kary:4/spectr"]  # policy[/verifier], see tree_for_budget
//                                           # (at temperature 0 the verifier is greedy: one cell per policy)
//             budgets = [4, 8, 16]          # nodes per target pass, root included
//             temperatures = [0.0, 0.6]
//             prompts = ["configs/jobs/prompts-smoke.jsonl"]
//             sequences = [1, 4, 16]        # prompts sharing each target pass (batch.sequences)
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "src/jobs/job.h"

namespace redwood::jobs {

struct SuiteModel {
  std::string name, target, draft;
  std::string acceptance;  // optional profile (profile-acceptance), given to sequoia and auto cells;
                           // "{T}" stands for the cell's temperature ("acc-T{T}.json" -> acc-T0.6.json)
};
// The model's acceptance profile for a temperature ("" when it has none).
std::string acceptance_for(const SuiteModel& m, double temperature);

struct SuiteConfig {
  std::string file, name;
  int max_tokens = 32, ctx = 1024, limit = 0;  // limit: first N prompts of each set (0 = all)
  std::string kv_type = "f32";                 // every cell's KV cache type
  int prefill_chunk = 512;                     // prompt passes of at most this many tokens
  uint64_t seed = 0;
  double top_p = 1.0;
  bool chat = true;  // "prompt" strings go through the model's chat template
  std::vector<SuiteModel> models;
  std::vector<std::string> device_mem = {""};
  std::vector<std::string> trees;
  std::vector<int> budgets;
  std::vector<double> temperatures = {0.0};
  std::vector<std::string> prompts;
  std::vector<int> sequences = {1};  // batch.sequences of every cell
  std::map<std::string, int> lines;
};

// Parses and validates (types, ranges, unknown keys, files exist). Throws
// redwood::Error "file:line: key: message".
SuiteConfig parse_suite_text(std::string_view text, const std::string& name);
SuiteConfig parse_suite_file(const std::string& path);

// One matrix cell (tree empty: the autoregressive baseline). tree is the
// matrix entry ("policy" or "policy/verifier"); verify is empty at T = 0.
struct SuiteCell {
  std::string model, device_mem, tree, prompts, verify;
  int budget = 0;
  double temperature = 0;
  int sequences = 1;          // prompts sharing each pass
  std::string id() const;     // file-name safe, unique within a suite
  std::string group() const;  // cells that share a plot: model, memory, temperature, prompt set, sequences
};

// Baselines first, then every combination, in a stable order.
std::vector<SuiteCell> suite_cells(const SuiteConfig& s);

// The batch job for a cell: output under dir/cells/<id>.jsonl; the prompt
// set is `prompts` (the caller writes the first `limit` lines there).
JobConfig cell_job(const SuiteConfig& s, const SuiteCell& c, const std::string& dir, const std::string& prompts);

// The tree option for a policy at a budget (nodes per pass, root included):
// "chain" -> "chain:<budget - 1>", "kary:W" -> "kary:Wx<(budget - 1) / W>",
// anything else unchanged (it takes the budget as speculation.budget).
std::string tree_for_budget(const std::string& policy, int budget);

}  // namespace redwood::jobs
