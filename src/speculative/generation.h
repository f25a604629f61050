// One prompt -> text: autoregressive decoding, or speculative decoding when a
// draft is given. Shared by `redwood generate` (streams to stdout) and
// `redwood batch` (one JSONL line per prompt). Stops at the model's
// end-of-generation token, at a stop string, at max_tokens, or when cancelled
// (a signal asked the job to stop: the caller drops the unfinished result).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "src/engine/sampler.h"
#include "src/engine/transformer.h"
#include "src/model/model_desc.h"
#include "src/speculative/speculate.h"
#include "src/tokenizer/tokenizer.h"

namespace redwood::spec {

struct GenerationRequest {
  std::span<const int32_t> prompt;
  SamplingParams sampling;
  int max_tokens = 128;
  int prefill_chunk = 512;
  // The text is cut before the first stop string; the tokens keep the ones
  // that completed it (they were generated and paid for).
  std::vector<std::string> stop;
};

// A resident draft model and its tree/verifier settings (the sampling
// parameters come from the request).
struct DraftSetup {
  Transformer* draft = nullptr;
  const ModelDesc* target_desc = nullptr;
  const ModelDesc* draft_desc = nullptr;
  SpecConfig config;
};

struct Generation {
  std::vector<int32_t> tokens;
  std::string text;
  std::string finish;  // "stop" (end of generation or a stop string), "length", "cancelled"
  double prefill_seconds = 0;
  double decode_seconds = 0;
  std::optional<SpecStats> spec;  // speculative decoding only
  double s_per_token() const { return tokens.empty() ? 0.0 : decode_seconds / static_cast<double>(tokens.size()); }
};

// KV capacity a request needs (prompt + new tokens + one tree when speculating).
int generation_capacity(const GenerationRequest& req, const DraftSetup* draft);

// on_text receives the text as it becomes final (never a part that a stop
// string may still remove); cancelled() is polled between steps.
Generation generate(Transformer& target, const Tokenizer& tok, const GenerationRequest& req, const DraftSetup* draft,
                    const std::function<void(std::string_view)>& on_text = {},
                    const std::function<bool()>& cancelled = {});

}  // namespace redwood::spec
