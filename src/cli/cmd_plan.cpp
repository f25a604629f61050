// redwood plan: predicted memory plan, target pass time t(n), the Sequoia tree
// the hardware-aware optimizer picks, and seconds per token, against plain
// offloading, from a hardware profile and model configs. Runs nothing.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>

#include "offload/size.h"
#include "src/cli/commands.h"
#include "src/cli/common.h"
#include "src/planner/hardware.h"
#include "src/planner/model_config.h"
#include "src/planner/predict.h"
#include "src/spec/sequoia_dp.h"
#include "src/util/error.h"

namespace redwood::cli {

namespace {

struct PredictCli {
  std::string model_config, draft_config, draft_type, hardware, acceptance, device_mem;
  planner::PredictOptions o;
  bool json = false;
  bool past_given = false;
};

int run_predict(const PredictCli& c) {
  const planner::HardwareProfile hw = planner::load_hardware(c.hardware);
  const ModelDesc target = planner::model_desc_from_config(planner::load_model_config(c.model_config));
  // A requantized copy of a model as the draft: its config (the target's unless --draft-config
  // says otherwise) with every matrix, embedding and LM head stored as --draft-type.
  if (c.draft_config.empty() && c.draft_type.empty())
    throw Error("give --draft-config, or --draft-type for a requantized copy of the target as the draft");
  planner::ModelConfig dc = planner::load_model_config(c.draft_config.empty() ? c.model_config : c.draft_config);
  if (!c.draft_type.empty()) {
    std::optional<DType> t;
    for (const auto& i : kDTypes)
      if (i.name == c.draft_type) t = i.type;
    if (!t) throw Error("--draft-type '" + c.draft_type + "' is not a weight type (F16, Q8_0, Q4_0, Q3_K, Q2_K, ...)");
    dc.dtype = dc.embedding_dtype = *t;
    dc.name += " (" + c.draft_type + ")";
  }
  const ModelDesc draft = planner::model_desc_from_config(dc);
  planner::PredictOptions o = c.o;
  // The default --past (256) follows a smaller --ctx; a --past given beyond it is an error (predict()).
  if (!c.past_given) o.n_past = std::min(o.n_past, o.ctx);
  o.acceptance = c.acceptance.empty() ? spec::default_acceptance(16) : spec::read_acceptance_file(c.acceptance);
  if (!c.device_mem.empty()) {
    o.device_budget = offload::parse_size(c.device_mem, "--device-mem");
    if (o.device_budget == 0) throw Error("--device-mem must be positive (omit it to use the hardware's memory)");
    if (o.device_budget > hw.device_memory)
      throw Error("--device-mem " + c.device_mem + " exceeds the " + hw.name + "'s " +
                  offload::format_size(hw.device_memory));
  }
  const planner::Prediction p = planner::predict(hw, target, draft, o);
  if (c.json)
    std::puts(planner::prediction_json(p).dump(2).c_str());
  else
    std::fputs(planner::prediction_table(p).c_str(), stdout);
  return 0;
}

}  // namespace

Runner add_plan(CLI::App& app) {
  auto c = std::make_shared<PredictCli>();
  auto* s = app.add_subcommand(
      "plan",
      "Predict the memory plan, pass times, best Sequoia tree and s/token on a hardware profile (runs nothing)");
  s->add_option("--model-config", c->model_config, "Target model config (configs/models/*.toml)")->required();
  s->add_option("--draft-config", c->draft_config, "Draft model config (configs/models/*.toml)");
  s->add_option("--draft-type", c->draft_type,
                "The draft stored as this type (Q2_K, Q3_K, Q4_0, ...); without --draft-config, a requantized "
                "copy of the target");
  s->add_option("--hardware", c->hardware, "Hardware profile (configs/hardware/*.toml)")->required();
  s->add_option("--acceptance", c->acceptance,
                "Acceptance vector JSON {\"acceptance\": [p1, p2, ...]} (default: a power law over 16)");
  s->add_option("--device-mem", c->device_mem, "Device budget (default: the profile's device memory - reserved)");
  s->add_option("--ctx", c->o.ctx, "KV cache capacity in tokens")->transform(int_range(1, 1 << 24));
  auto* past = s->add_option("--past", c->o.n_past,
                             "Tokens already in the KV cache when attention is costed (default 256, at most --ctx)")
                   ->transform(int_range(0, 1 << 24));
  s->add_option("--max-budget", c->o.max_budget, "Largest tree budget n considered (root included)")
      ->transform(int_range(1, 4096));
  s->add_option("--max-depth", c->o.max_depth, "Largest tree depth d considered (levels, root included)")
      ->transform(int_range(1, 128));
  s->add_flag("--json", c->json, "JSON output");
  return [c, past] {
    c->past_given = past->count() > 0;
    return run_predict(*c);
  };
}

}  // namespace redwood::cli
