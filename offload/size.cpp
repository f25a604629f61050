#include "offload/size.h"

#include <cctype>
#include <cmath>
#include <cstdio>

#include "src/util/error.h"

namespace redwood::offload {

namespace {

// Multiplier for a unit (already lower-cased); 0 = unknown unit.
uint64_t unit_multiplier(const std::string& u) {
  struct Unit {
    const char* name;
    uint64_t mult;
  };
  static const Unit kUnits[] = {
      {"", 1},
      {"b", 1},
      {"k", 1ull << 10},
      {"ki", 1ull << 10},
      {"kib", 1ull << 10},
      {"m", 1ull << 20},
      {"mi", 1ull << 20},
      {"mib", 1ull << 20},
      {"g", 1ull << 30},
      {"gi", 1ull << 30},
      {"gib", 1ull << 30},
      {"t", 1ull << 40},
      {"ti", 1ull << 40},
      {"tib", 1ull << 40},
      {"kb", 1000ull},
      {"mb", 1000ull * 1000},
      {"gb", 1000ull * 1000 * 1000},
      {"tb", 1000ull * 1000 * 1000 * 1000},
  };
  for (const Unit& x : kUnits)
    if (u == x.name) return x.mult;
  return 0;
}

}  // namespace

uint64_t parse_size(const std::string& s, const char* what) {
  auto bad = [&]() { return Error("invalid size '" + s + "' for " + what + ": expected e.g. 2GiB, 512MiB"); };
  size_t i = 0;
  const size_t n = s.size();
  auto is_digit = [&](size_t k) { return k < n && std::isdigit(static_cast<unsigned char>(s[k])); };
  auto is_space = [&](size_t k) { return k < n && std::isspace(static_cast<unsigned char>(s[k])); };
  while (is_space(i)) ++i;
  if (!is_digit(i)) throw bad();  // also rejects "", "-1", "+1", ".5", "nan"
  uint64_t whole = 0;
  for (; is_digit(i); ++i)
    if (__builtin_mul_overflow(whole, 10u, &whole) || __builtin_add_overflow(whole, uint64_t(s[i] - '0'), &whole))
      throw bad();
  std::string frac;  // digits after the decimal point
  if (i < n && s[i] == '.') {
    ++i;
    if (!is_digit(i)) throw bad();
    for (; is_digit(i); ++i) frac += s[i];
  }
  while (is_space(i)) ++i;
  std::string unit;
  for (; i < n && !std::isspace(static_cast<unsigned char>(s[i])); ++i)
    unit += static_cast<char>(std::tolower(static_cast<unsigned char>(s[i])));
  while (is_space(i)) ++i;
  if (i != n) throw bad();
  const uint64_t mult = unit_multiplier(unit);
  if (mult == 0) throw bad();
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(whole, mult, &bytes)) throw bad();
  if (frac.find_first_not_of('0') != std::string::npos) {
    if (mult == 1) throw bad();  // a fraction of a byte
    // frac < 1 and mult <= 2^40: long double (64-bit mantissa) is exact enough.
    const long double part = std::strtold(("0." + frac).c_str(), nullptr) * static_cast<long double>(mult);
    if (__builtin_add_overflow(bytes, static_cast<uint64_t>(std::llroundl(part)), &bytes)) throw bad();
  }
  return bytes;
}

std::string format_size(uint64_t bytes) {
  static const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  char buf[64];
  if (bytes < 1024) {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
    return buf;
  }
  double v = static_cast<double>(bytes) / 1024.0;
  int u = 0;
  while (v >= 1024.0 && u + 1 < 6) v /= 1024.0, ++u;
  std::snprintf(buf, sizeof buf, v < 100.0 ? "%.2f %s" : "%.1f %s", v, kUnits[u]);
  return buf;
}

}  // namespace redwood::offload
