// Redwood's one error type: a one-line, user-facing message. Every parser and
// loader throws redwood::Error; the CLI prints "redwood: <message>" and exits 1.
// Messages often quote user input (keys, ids, paths), so control characters
// are escaped here: a message is one line by construction.
#pragma once
#include <cstdio>
#include <stdexcept>
#include <string>

namespace redwood {

inline std::string one_line(const std::string& s) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += ch;
    }
  }
  return out;
}

// A number for a message: at most 6 significant digits ("1e+300", "0.25",
// "inf"), never std::to_string's 300 digits or fixed six decimals.
inline std::string short_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(one_line(msg)) {}
};

}  // namespace redwood
