// libFuzzer target: arbitrary bytes as a packed model file (`redwood pack`) -> load_model_desc
// (head, index, the GGUF header inside), then every tensor read and decoded
// (stream heads, chunk directories, chunks) and a tokenizer built. Checksums
// are not enforced in the fuzzing build (src/model/packed.cpp), so mutations
// reach the parsers behind them. redwood::Error is the only allowed outcome
// besides success.
// See tests/fuzz/CMakeLists.txt for how to build/run.
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "tests/fuzz/fuzz_harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    redwood::fuzz::run_packed(data, size);
  } catch (const std::exception& e) {
    fprintf(stderr, "fuzz_packed: exception other than redwood::Error: %s\n", e.what());
    abort();
  }
  return 0;
}
