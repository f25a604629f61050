// Redwood's one error type: a one-line, user-facing message. Every parser and
// loader throws redwood::Error; the CLI prints "redwood: <message>" and exits 1.
#pragma once
#include <stdexcept>
#include <string>

namespace redwood {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

}  // namespace redwood
