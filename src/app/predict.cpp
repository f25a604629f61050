#include "src/app/predict.h"

#include <algorithm>
#include <optional>

#include "src/util/size.h"
#include "src/planner/hardware.h"
#include "src/planner/model_config.h"
#include "src/speculative/sequoia_dp.h"
#include "src/util/error.h"

namespace redwood::app {

planner::Prediction predict_run(const PredictRun& c) {
  planner::HardwareProfile hw = planner::load_hardware(c.hardware);
  if (c.decode_bandwidth > 0) hw.decode_bandwidth = c.decode_bandwidth;
  ModelDesc target = planner::model_desc_from_config(planner::load_model_config(c.model_config));
  if (c.packed) {
    planner::assume_packed(target);
    target.name += " (packed)";
  }
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
    o.device_budget = parse_size(c.device_mem, "--device-mem");
    if (o.device_budget == 0) throw Error("--device-mem must be positive (omit it to use the hardware's memory)");
    if (o.device_budget > hw.device_memory)
      throw Error("--device-mem " + c.device_mem + " exceeds the " + hw.name + "'s " +
                  format_size(hw.device_memory));
  }
  return planner::predict(hw, target, draft, o);
}

}  // namespace redwood::app
