// redwood plan: options and output; the prediction is src/app/predict.h.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "src/cli/commands.h"
#include "src/cli/common.h"
#include "src/app/predict.h"

namespace redwood::cli {

namespace {

struct PredictCli {
  app::PredictRun r;
  std::string kv_type = "f32";
  bool json = false;
};

int run_predict(PredictCli& c) {
  c.r.o.kv_type = kv_type_from_name(c.kv_type);
  const planner::Prediction p = app::predict_run(c.r);
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
  s->add_option("--model-config", c->r.model_config, "Target model config (configs/models/*.toml)")->required();
  s->add_option("--draft-config", c->r.draft_config, "Draft model config (configs/models/*.toml)");
  s->add_option("--draft-type", c->r.draft_type,
                "The draft stored as this type (Q2_K, Q3_K, Q4_0, ...); without --draft-config, a requantized "
                "copy of the target");
  s->add_option("--hardware", c->r.hardware, "Hardware profile (configs/hardware/*.toml)")->required();
  s->add_option("--acceptance", c->r.acceptance,
                "Acceptance vector JSON {\"acceptance\": [p1, p2, ...]} (default: a power law over 16)");
  s->add_option("--device-mem", c->r.device_mem, "Device budget (default: the profile's device memory - reserved)");
  s->add_option("--ctx", c->r.o.ctx, "KV cache capacity in tokens")->transform(int_range(1, 1 << 24));
  auto* past = s->add_option("--past", c->r.o.n_past,
                             "Tokens already in the KV cache when attention is costed (default 256, at most --ctx)")
                   ->transform(int_range(0, 1 << 24));
  s->add_option("--max-budget", c->r.o.max_budget, "Largest tree budget n considered (root included)")
      ->transform(int_range(1, 4096));
  s->add_option("--max-depth", c->r.o.max_depth, "Largest tree depth d considered (levels, root included)")
      ->transform(int_range(1, 128));
  s->add_option("--kv-type", c->kv_type, "KV cache element type: f32 (default), f16, bf16 or q8_0")
      ->check(kv_type_check());
  s->add_flag("--packed", c->r.packed,
              "The target packed by redwood pack (stored sizes per type as measured: BF16 0.707, F16 0.883, F32 "
              "0.854 of raw; decoded at the profile's decode_bandwidth)");
  s->add_option("--decode-bandwidth", c->r.decode_bandwidth,
                "GB/s of decoded weights the decode stage delivers (default: the hardware profile's)")
      ->check(CLI::PositiveNumber);
  s->add_option("--sequences", c->r.o.sequences,
                "Shared passes: predicted throughput for these counts of sequences per pass (e.g. 1,2,4,8,16,32,64), "
                "plain and with trees")
      ->delimiter(',')
      ->check(CLI::Range(1, 256));
  s->add_flag("--json", c->json, "JSON output");
  return [c, past] {
    c->r.past_given = past->count() > 0;
    return run_predict(*c);
  };
}

}  // namespace redwood::cli
