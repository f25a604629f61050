// libFuzzer target: the planner TOML readers: model configs and hardware profiles (see planner_harness.h).
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "tests/fuzz/planner_harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    if (!redwood::fuzz::run_planner(data, size)) {
      fprintf(stderr, "fuzz_planner: an error message with a line break\n");
      abort();
    }
  } catch (const std::exception& e) {
    fprintf(stderr, "fuzz_planner: exception other than redwood::Error: %s\n", e.what());
    abort();
  }
  return 0;
}
