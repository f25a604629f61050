// profile-acceptance and profile-hardware (see profiles.h).
#include "src/app/profiles.h"

#include <algorithm>

#include "src/runtime/session.h"
#include "src/util/error.h"

namespace redwood::app {

using namespace runtime;

spec::AcceptanceProfile profile_acceptance(const RunOptions& run, const std::string& draft,
                                           const std::string& prompts_file, const jobs::PromptFile& pf, bool chat,
                                           const spec::AcceptanceRun& ar) {
  LoadedModel m = load_model(run.model, /*with_weights=*/false);
  LoadedModel d = load_model(draft, /*with_weights=*/false);
  if (const std::string e = draft_vocab_mismatch(m.desc, d.desc); !e.empty()) throw Error(draft + ": " + e);
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& it : pf.items) {
    prompts.push_back(encode_prompt(m, {it.prompt, it.messages, chat, {}, "the prompt"}));
    if (prompts.back().empty())
      throw Error(prompts_file + ":" + std::to_string(it.line) + ": the prompt encodes to no tokens");
  }
  spec::AcceptanceProfile prof;
  prof.target = spec::identify_files(m.desc.path, m.desc.files);
  prof.draft = spec::identify_files(d.desc.path, d.desc.files);
  prof.prompts = spec::identify_files(prompts_file, {prompts_file});
  prof.temperature = ar.sampling.temperature;
  prof.top_p = ar.sampling.top_p;
  prof.seed = ar.sampling.seed;
  prof.repeats = ar.repeats;

  offload::RunShape shape;
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  shape.ctx = static_cast<int>(longest) + ar.max_tokens + ar.chain_depth + 2;
  shape.max_tokens = shape.ctx;
  load_weights(m, run, shape, &d.desc);
  load_weights(d, resident_run(run), shape);

  spec::measure_acceptance({*m.transformer, m.desc, *m.tokenizer, *d.transformer, d.desc}, prompts, ar, prof);
  return prof;
}

planner::MeasuredProfile profile_hardware(const RunOptions& run, const std::string& draft, const HardwareRun& hr) {
  LoadedModel m = load_model(run.model, /*with_weights=*/false);
  LoadedModel d = load_model(draft, /*with_weights=*/false);
  if (const std::string e = draft_vocab_mismatch(m.desc, d.desc); !e.empty()) throw Error(draft + ": " + e);
  planner::MeasuredProfile prof;
  prof.target = spec::identify_files(m.desc.path, m.desc.files);
  prof.draft = spec::identify_files(d.desc.path, d.desc.files);
  prof.device_mem = run.device_mem;
  prof.host_mem = run.host_mem;
  prof.ring = run.ring;
  const int max_n = std::max(hr.sizes.back(), hr.widths.back());
  offload::RunShape shape;
  shape.ctx = hr.prefix + max_n + 1;
  shape.max_tokens = std::max(max_n, hr.prefix);
  load_weights(m, run, shape, &d.desc);
  load_weights(d, resident_run(run), shape);
  measure_hardware(m, d, hr, prof);
  return prof;
}

}  // namespace redwood::app
