// libFuzzer target: arbitrary bytes as a GGUF file -> load_model_desc (which
// runs GgufFile::open, the model description checks and the tokenizer spec),
// then a tokenizer built from the result. redwood::Error is the only allowed
// outcome besides success. See tests/fuzz/CMakeLists.txt for how to build/run.
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "tests/fuzz/fuzz_harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    redwood::fuzz::run_gguf(data, size);
  } catch (const std::exception& e) {
    fprintf(stderr, "fuzz_gguf: exception other than redwood::Error: %s\n", e.what());
    abort();
  }
  return 0;
}
