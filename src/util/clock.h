// Elapsed time for measurements and progress: seconds on the monotonic clock.
// Only differences mean anything (t1 - t0); wall-clock dates are not here.
#pragma once
#include <chrono>

namespace redwood {

inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace redwood
