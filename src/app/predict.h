// `redwood plan`: the predicted memory plan, target pass time t(n), the
// Sequoia tree the hardware-aware optimizer picks, and seconds per token,
// against plain offloading, from a hardware profile and model configs
// (src/planner/predict.h). Runs nothing.
#pragma once
#include <string>

#include "src/planner/predict.h"

namespace redwood::app {

struct PredictRun {
  std::string model_config;  // the target's (configs/models/*.toml)
  // The draft: its config, or (draft_type without draft_config) a copy of the
  // target requantized; draft_type also re-types a draft config's weights.
  std::string draft_config, draft_type;
  std::string hardware;    // configs/hardware/*.toml
  std::string acceptance;  // empty: a power law over 16
  std::string device_mem;  // empty: the profile's device memory
  planner::PredictOptions o;
  bool past_given = false;  // o.n_past was given (else it follows a smaller ctx)
  bool packed = false;      // the target packed by redwood pack (planner::assume_packed)
  double decode_bandwidth = 0;  // GB/s; > 0 overrides the hardware profile's
};

// Throws redwood::Error naming the option at fault (--draft-type, --device-mem).
planner::Prediction predict_run(const PredictRun& c);

}  // namespace redwood::app
