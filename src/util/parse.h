// A whole string as a number, with a message naming what it is: the parsing of
// option values that are kept as text until a command runs (--budget, --seed).
#pragma once
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>

#include "src/util/error.h"

namespace redwood {

// An integer in [lo, hi]; throws redwood::Error "WHAT: expected an integer in
// [lo, hi], got 'x'".
inline int parse_int_arg(const std::string& s, const char* what, int lo, int hi) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno != 0 || v < lo || v > hi)
    throw Error(std::string(what) + ": expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                "], got '" + s + "'");
  return static_cast<int>(v);
}

// A finite number; throws redwood::Error "WHAT: expected a number, got 'x'".
inline double parse_double_arg(const std::string& s, const char* what) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || errno != 0 || !std::isfinite(v))
    throw Error(std::string(what) + ": expected a number, got '" + s + "'");
  return v;
}

}  // namespace redwood
