// libFuzzer target: one packed chunk through the scalar and the AVX-512 decoders
// (differential: same verdict, same bytes, nothing written past the output),
// or raw bytes through the encoder and back (the round trip); see
// fuzz_harness.h run_wpack for the input layout.
// See tests/fuzz/CMakeLists.txt for how to build/run.
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "tests/fuzz/fuzz_harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    redwood::fuzz::run_wpack(data, size);
  } catch (const std::exception& e) {
    fprintf(stderr, "fuzz_wpack: exception other than redwood::Error: %s\n", e.what());
    abort();
  }
  return 0;
}
