// libFuzzer target: the batch-job text parsers (see jobs_harness.h).
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "tests/fuzz/jobs_harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    if (!redwood::fuzz::run_jobs(data, size)) {
      fprintf(stderr, "fuzz_jobs: an error message with a line break\n");
      abort();
    }
  } catch (const std::exception& e) {
    fprintf(stderr, "fuzz_jobs: exception other than redwood::Error: %s\n", e.what());
    abort();
  }
  return 0;
}
