// Builds a TokenizerSpec from a model file's own vocabulary description.
#pragma once
#include <string>

#include "src/model/gguf.h"
#include "src/tokenizer/tokenizer.h"

namespace redwood {

// From GGUF metadata (tokenizer.ggml.*): model "llama" (SPM) or "gpt2" (BPE).
TokenizerSpec tokenizer_spec_from_gguf(const GgufFile& f);

// From a Hugging Face tokenizer.json (BPE model; byte-level or SPM-style with
// byte fallback) plus tokenizer_config.json beside it when present.
TokenizerSpec tokenizer_spec_from_hf_json(const std::string& path);

}  // namespace redwood
