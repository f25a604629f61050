// redwood plan-memory: where every layer of a model would live under given
// memory budgets (device-resident, host-staged, streamed from storage), and what
// else takes memory. Reads model descriptions only, never weights.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "kernels/backend.h"
#include "offload/placement.h"
#include "src/cli/commands.h"
#include "src/cli/common.h"

namespace redwood::cli {

namespace {

struct PlanOptions {
  RunOptions run;
  std::string draft;
  offload::RunShape shape;
  bool json = false;
};

int run_plan_memory(const PlanOptions& o) {
  check_draft_budget(o.run, o.draft);
  const ModelDesc target = load_model_desc(o.run.model.empty() ? default_model_path() : o.run.model);
  std::optional<ModelDesc> draft;
  if (!o.draft.empty()) draft = load_model_desc(o.draft);
  offload::MemoryPlan plan;
  try {
    plan = plan_run_memory(target, draft ? &*draft : nullptr, o.run, o.shape);
  } catch (const offload::BudgetError& e) {
    // A script asking "does it fit?" gets its answer on stdout as well; the
    // one-line error and exit code 1 stay as for every other failure.
    if (o.json) {
      const nlohmann::json j = {{"fits", false},
                                {"error", e.what()},
                                {"budget", e.budget},
                                {"given_bytes", e.given},
                                {"min_bytes", e.minimum}};
      std::puts(j.dump(2).c_str());
    }
    throw;
  }
  if (o.json)
    std::puts(offload::plan_json(plan).dump(2).c_str());
  else
    std::fputs(offload::plan_table(plan).c_str(), stdout);
  return 0;
}

}  // namespace

Runner add_plan_memory(CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  auto* c =
      app.add_subcommand("plan-memory", "Show where each layer would live under memory budgets (no weights read)");
  c->add_option("--model,-m", o->run.model, "Model: GGUF file or safetensors directory (default: SmolLM2-135M)");
  c->add_option("--draft", o->draft, "Draft model, kept resident on the device");
  add_budget_options(c, o->run);
  c->add_option("--ctx", o->shape.ctx, "KV cache capacity in tokens (target and draft)")
      ->transform(int_range(1, 1 << 24));
  c->add_option("--tokens", o->shape.max_tokens, "Most tokens in one pass (prompt chunk, tree size)")
      ->transform(int_range(1, 1 << 20));
  c->add_option("--threads,-t", o->run.threads, "CPU threads for kernel workspace (default: all cores)")
      ->transform(int_range(0, 4096));
  c->add_option("--backend", o->run.backend, "cpu | cuda (CUDA adds pinned host staging slots)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  c->add_option("--kv-type", o->run.kv_type, "KV cache element type: f32 (default), f16, bf16 or q8_0")
      ->check(kv_type_check());
  c->add_flag("--json", o->json, "JSON output");
  return [o] { return run_plan_memory(*o); };
}

}  // namespace redwood::cli
