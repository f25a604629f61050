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

// One sequence's output as its tokens arrive: max_tokens, the end-of-generation
// token and stop strings end it; text is released to on_text only when no
// stop string can still claim it. The one place these rules live, for the
// single-sequence loop (generate) and the many-sequence one (batch_generation.h).
class OutputStream {
 public:
  // REQUIRES: tok outlives the stream.
  OutputStream(const Tokenizer& tok, int max_tokens, std::vector<std::string> stop,
               std::function<void(std::string_view)> on_text);
  // Takes one sampled token; false when generation must stop (generation().finish
  // says why: "stop" or "length").
  bool emit(int32_t t);
  // Ends the text: flushes a partial UTF-8 character and the held-back tail
  // (unless a stop string already cut it). Call once, when generation ends.
  void finish();
  Generation& generation() { return g_; }

 private:
  // Appends text; true when a stop string was found (the text is cut before it).
  bool push(const std::string& piece);
  void release(size_t upto);
  const Tokenizer& tok_;
  int max_tokens_;
  std::vector<std::string> stop_;
  std::function<void(std::string_view)> on_text_;
  Utf8Stream utf8_;
  Generation g_;
  size_t hold_ = 0, sent_ = 0;
  bool cut_ = false;  // a stop string ended the text
};

// Throws redwood::Error for a request no loop can run (an empty prompt, max_tokens < 1).
void check_request(const GenerationRequest& req);

// KV capacity a request needs (prompt + new tokens + one tree when speculating).
int generation_capacity(const GenerationRequest& req, const DraftSetup* draft);

// on_text receives the text as it becomes final (never a part that a stop
// string may still remove); cancelled() is polled between steps.
Generation generate(Transformer& target, const Tokenizer& tok, const GenerationRequest& req, const DraftSetup* draft,
                    const std::function<void(std::string_view)>& on_text = {},
                    const std::function<bool()>& cancelled = {});

}  // namespace redwood::spec
