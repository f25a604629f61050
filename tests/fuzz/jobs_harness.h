// One fuzz input -> one job-parser call, shared by the libFuzzer target
// (fuzz_jobs.cpp) and tests/test_jobs.cpp, which replays tests/fuzz/corpus/jobs/.
// The first byte picks the parser (0 job TOML, then the same text as a serve
// file (serve_config.h), 1 bench-suite TOML, 2 one JSONL
// prompt line, 3 the suite's tree-for-budget rule); the rest is its input.
//
// Contract: a config, or redwood::Error with a one-line message. run_jobs
// returns false for an error with a line break in it, swallows other
// redwood::Errors and lets every other exception out.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "src/jobs/job.h"
#include "src/jobs/prompts.h"
#include "src/jobs/serve_config.h"
#include "src/jobs/suite_config.h"
#include "src/util/error.h"

namespace redwood::fuzz {

inline bool run_jobs(const uint8_t* data, size_t size) {
  if (size == 0) return true;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (data[0] % 4) {
      case 0:
        try {
          (void)jobs::parse_job_text(text, "job.toml");
        } catch (const Error& e) {
          if (std::string_view(e.what()).find('\n') != std::string_view::npos) return false;
        }
        (void)jobs::parse_serve_text(text, "serve.toml");
        break;
      case 1: (void)jobs::parse_suite_text(text, "suite.toml"); break;
      case 2: (void)jobs::parse_prompt_line(text); break;
      default: (void)jobs::tree_for_budget(std::string(text), 64); break;
    }
  } catch (const Error& e) {
    return std::string_view(e.what()).find('\n') == std::string_view::npos;
  }
  return true;
}

}  // namespace redwood::fuzz
