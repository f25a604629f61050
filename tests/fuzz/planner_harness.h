// One fuzz input -> one planner TOML reader call, shared by the libFuzzer
// target (fuzz_planner.cpp) and tests/test_planner.cpp, which replays
// tests/fuzz/corpus/planner/. The first byte picks the reader (even: a model
// config, `redwood plan --model-config`; odd: a hardware profile, `--hardware`);
// the rest is its text.
//
// Contract: a config, or redwood::Error with a one-line message. run_planner
// returns false for an error with a line break in it, swallows other
// redwood::Errors and lets every other exception out.
#pragma once
#include <cstdint>
#include <string_view>

#include "src/planner/hardware.h"
#include "src/planner/model_config.h"
#include "src/util/error.h"

namespace redwood::fuzz {

// The reader call alone (throws what it throws).
inline void run_planner_or_throw(const uint8_t* data, size_t size) {
  if (size == 0) return;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0)
    (void)planner::model_desc_from_config(planner::parse_model_config(text, "model.toml"));
  else
    (void)planner::parse_hardware(text, "hw.toml");
}

inline bool run_planner(const uint8_t* data, size_t size) {
  try {
    run_planner_or_throw(data, size);
  } catch (const Error& e) {
    return std::string_view(e.what()).find('\n') == std::string_view::npos;
  }
  return true;
}

}  // namespace redwood::fuzz
