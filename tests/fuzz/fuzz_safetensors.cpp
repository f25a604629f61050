// libFuzzer target: Hugging Face checkpoints. The first input byte picks the
// file of a tiny valid model directory that the remaining bytes replace
// (0 model.safetensors, 1 config.json, 2 model.safetensors.index.json,
// 3 tokenizer.json); then read_safetensors_header / load_model_desc run on it.
// redwood::Error is the only allowed outcome besides success.
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "tests/fuzz/fuzz_harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    redwood::fuzz::run_safetensors(data, size);
  } catch (const std::exception& e) {
    fprintf(stderr, "fuzz_safetensors: exception other than redwood::Error: %s\n", e.what());
    abort();
  }
  return 0;
}
