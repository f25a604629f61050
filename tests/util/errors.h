// Helpers for tests of one-line redwood::Error messages.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "src/util/error.h"

namespace redwood::testutil {

// The message of the redwood::Error f throws, or "(no error)".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// `text` with the first `from` replaced by `to` (a test failure when absent):
// a malformed variant of a known-good file.
inline std::string replace_once(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? text : text.replace(at, from.size(), to);
}

}  // namespace redwood::testutil
