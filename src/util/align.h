// Rounding to alignment boundaries (buffer layouts, O_DIRECT ranges).
#pragma once
#include <cstdint>

namespace redwood {

inline constexpr uint64_t align_down(uint64_t x, uint64_t a) {
  return x / a * a;
}
inline constexpr uint64_t align_up(uint64_t x, uint64_t a) {
  return (x + a - 1) / a * a;
}

}  // namespace redwood
