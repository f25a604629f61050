// The measurements behind `redwood profile-acceptance` and `profile-hardware`:
// load the target (under the run's budgets) and the draft (resident), measure,
// and return the profile for the caller to write.
//
// profile-acceptance: the positional acceptance vector of a draft for a
// target, measured Sequoia's way (one-level trees at many positions of real
// text), plus the per-depth acceptance of chains (src/speculative/acceptance_measure.h).
// Text: each prompt (chat template as in batch jobs) continued by the target
// itself at the profile's temperature. One target pass and one draft pass over
// the whole sequence give p and q at every continuation position; each position
// gets `repeats` draws of W children per scheme. Chains: speculative decoding
// with chain:D over the same prompts, counting how deep each step accepted.
#pragma once
#include <string>

#include "src/jobs/prompts.h"
#include "src/planner/measured.h"
#include "src/runtime/model.h"
#include "src/runtime/tree_auto.h"
#include "src/speculative/acceptance_measure.h"
#include "src/speculative/acceptance_profile.h"

namespace redwood::app {

// run.model must be set. Throws redwood::Error (a draft with another
// vocabulary, a prompt that encodes to no tokens) before any weight loads.
spec::AcceptanceProfile profile_acceptance(const runtime::RunOptions& run, const std::string& draft,
                                           const std::string& prompts_file, const jobs::PromptFile& pf, bool chat,
                                           const spec::AcceptanceRun& ar);

planner::MeasuredProfile profile_hardware(const runtime::RunOptions& run, const std::string& draft,
                                          const runtime::HardwareRun& hr);

}  // namespace redwood::app
