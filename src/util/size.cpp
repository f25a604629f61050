#include "src/util/size.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>

#include "src/util/error.h"

namespace redwood {

namespace {

// Multiplier for a unit (already lower-cased); 0 = unknown unit. k/m/g/t,
// ki/mi/gi/ti and kib/mib/gib/tib are binary; kb/mb/gb/tb decimal; "" and "b" bytes.
uint64_t unit_multiplier(const std::string& u) {
  if (u.empty() || u == "b") return 1;
  const size_t power = std::string_view("kmgt").find(u[0]);
  if (power == std::string_view::npos) return 0;
  uint64_t binary = 1, decimal = 1;
  for (size_t i = 0; i <= power; ++i) binary <<= 10, decimal *= 1000;
  const std::string rest = u.substr(1);
  if (rest.empty() || rest == "i" || rest == "ib") return binary;
  return rest == "b" ? decimal : 0;
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

DeviceBudget parse_device_budget(const std::string& s, const char* what) {
  static const std::string kSuffix = "+draft";
  const bool on_top = s.size() > kSuffix.size() && s.compare(s.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0;
  DeviceBudget b;
  b.bytes = parse_size(on_top ? s.substr(0, s.size() - kSuffix.size()) : s, what);
  if (b.bytes == 0)  // 0 is the planner's "no limit": leave the budget out for that
    throw Error(std::string(what) + ": a device budget of 0 bytes cannot hold anything (leave it out for no limit)");
  b.draft_on_top = on_top;
  return b;
}

}  // namespace redwood
