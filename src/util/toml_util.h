// Small helpers for TOML readers (the planner's hardware profiles and model
// configs), on top of src/util/toml_section.h's Section.
#pragma once
#include <cstdint>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>

#include "src/util/error.h"
#include "src/util/io.h"
#include "src/util/size.h"
#include "src/util/toml_section.h"

namespace redwood::config {

// "file: missing required key 'k'" for the first absent key.
inline void require(const std::string& file, const Section& s, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (!s.has(k)) throw Error(file + ": missing required key '" + k + "'");
}

// A memory size written as a string ("48GB", "44GiB") or a number of bytes.
inline void size(const std::string& file, const toml::table& t, const Section& s, const char* key, uint64_t& out) {
  const toml::node* n = t.get(key);
  if (!n) return;
  if (n->is_integer()) {
    const int64_t v = n->as_integer()->get();
    if (v < 0) s.fail(key, *n, "must not be negative, got " + std::to_string(v));
    out = static_cast<uint64_t>(v);
    return;
  }
  if (!n->is_string()) s.wrong_type(key, *n, "a size string (\"48GB\", \"44GiB\") or a number of bytes");
  const std::string v = *n->value<std::string>();
  try {
    out = parse_size(v, key);
  } catch (const Error&) {
    s.fail(key, *n, "invalid size '" + v + "' (expected e.g. \"48GB\", \"44GiB\", \"512MiB\")");
  }
}

}  // namespace redwood::config
