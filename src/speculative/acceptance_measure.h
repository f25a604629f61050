// Measuring an acceptance profile (acceptance_profile.h) with the real models:
// at positions of real text (the target's continuation of each prompt, or the
// prompt text itself), one-level trees of W draft children per verifier
// scheme, and chains of depth D through the speculative decoder. Used by
// `redwood profile-acceptance` and by --tree auto (src/runtime/tree_auto.h).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "src/engine/sampler.h"
#include "src/engine/transformer.h"
#include "src/model/model_desc.h"
#include "src/speculative/acceptance_profile.h"
#include "src/tokenizer/tokenizer.h"

namespace redwood::spec {

struct AcceptanceRun {
  SamplingParams sampling;
  int width = 8, count = 256, repeats = 4;
  int max_tokens = 64;  // continuation per prompt; 0: positions over the prompt text itself
  int chain_depth = 6;  // 0: no chain measurement
  bool quiet = false;   // else progress on stderr
};

// A target and its draft, loaded (vocabularies that pair: draft_vocab_mismatch in model_desc.h).
struct ModelPair {
  Transformer& target;
  const ModelDesc& target_desc;
  const Tokenizer& tokenizer;
  Transformer& draft;
  const ModelDesc& draft_desc;
};

// Fills prof's vectors, positions, prompt_count, chain and acceptance (the
// identities and sampling fields are the caller's).
void measure_acceptance(const ModelPair& models, const std::vector<std::vector<int32_t>>& prompts,
                        const AcceptanceRun& r, AcceptanceProfile& prof);

// The logits of every row of one pass over `seq` (a fresh cache): [seq.size()][vocab].
std::vector<float> all_logits(Transformer& t, std::span<const int32_t> seq, int vocab);

}  // namespace redwood::spec
