// Typed, line-aware access to one TOML table, shared by the TOML readers (job
// and bench suite files in src/jobs, hardware profiles and model configs in
// src/planner). Every getter records the key's line; errors read
// "file:line: section.key: message".
#pragma once
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <toml++/toml.h>
#include <vector>

#include "src/util/error.h"

namespace redwood::config {

inline const char* type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a number";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    default: return "a date/time";
  }
}

// One [section] of the job: typed getters that record the key's line and
// reject everything the schema does not name.
class Section {
 public:
  Section(const std::string& file, std::map<std::string, int>& lines, const toml::table* t, std::string name)
      : file_(file), lines_(lines), t_(t), name_(std::move(name)) {}

  // Every key in the section must be one of `known`.
  void only(std::initializer_list<const char*> known) const {
    if (!t_) return;
    const std::set<std::string> ok(known.begin(), known.end());
    for (auto&& [k, v] : *t_) {
      if (ok.count(std::string(k.str()))) continue;
      std::string list;
      for (const char* s : known) list += (list.empty() ? "" : ", ") + std::string(s);
      throw Error(file_ + ":" + std::to_string(k.source().begin.line) + ": unknown key '" + dotted(k.str()) +
                  "' (known in " + (name_.empty() ? "the top level" : "[" + name_ + "]") + ": " + list + ")");
    }
  }

  bool has(const char* key) const { return t_ && t_->contains(key); }

  void str(const char* key, std::string& out) const {
    if (const toml::node* n = node(key)) {
      if (!n->is_string()) wrong_type(key, *n, "a string");
      out = *n->value<std::string>();
    }
  }
  template <class Int>
  void integer(const char* key, Int& out, int64_t lo, int64_t hi) const {
    if (const toml::node* n = node(key)) {
      if (!n->is_integer()) wrong_type(key, *n, "an integer");
      const int64_t v = n->as_integer()->get();
      if (v < lo || v > hi)
        fail(key, *n, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + std::to_string(v));
      out = static_cast<Int>(v);
    }
  }
  template <class Int>
  void integer(const char* key, std::optional<Int>& out, int64_t lo, int64_t hi) const {
    if (!has(key)) return;
    Int v{};
    integer(key, v, lo, hi);
    out = v;
  }
  // A number (integer or float); `lo_open` excludes lo itself.
  void number(const char* key, double& out, double lo, double hi, bool lo_open = false) const {
    if (const toml::node* n = node(key)) {
      double v = 0;
      if (n->is_integer())
        v = static_cast<double>(n->as_integer()->get());
      else if (n->is_floating_point())
        v = n->as_floating_point()->get();
      else
        wrong_type(key, *n, "a number");
      if (!std::isfinite(v) || v < lo || v > hi || (lo_open && v == lo)) {
        std::ostringstream m;
        m << "must be in " << (lo_open ? "(" : "[") << lo << ", " << hi << "], got " << v;
        fail(key, *n, m.str());
      }
      out = v;
    }
  }
  void number(const char* key, std::optional<double>& out, double lo, double hi, bool lo_open = false) const {
    if (!has(key)) return;
    double v = 0;
    number(key, v, lo, hi, lo_open);
    out = v;
  }
  void boolean(const char* key, bool& out) const {
    if (const toml::node* n = node(key)) {
      if (!n->is_boolean()) wrong_type(key, *n, "true or false");
      out = n->as_boolean()->get();
    }
  }
  void strings(const char* key, std::vector<std::string>& out) const {
    if (const toml::node* n = node(key)) {
      const toml::array* a = n->as_array();
      if (!a) wrong_type(key, *n, "an array of strings");
      out.clear();
      for (const toml::node& e : *a) {
        if (!e.is_string()) wrong_type(key, e, "an array of strings");
        out.push_back(*e.value<std::string>());
      }
    }
  }
  // A string from a fixed set.
  void choice(const char* key, std::string& out, std::initializer_list<const char*> allowed) const {
    choice(key, out, std::span<const char* const>(allowed.begin(), allowed.size()));
  }
  void choice(const char* key, std::string& out, std::span<const char* const> allowed) const {
    str(key, out);
    if (!has(key)) return;
    for (const char* a : allowed)
      if (out == a) return;
    std::string list;
    for (const char* a : allowed) list += (list.empty() ? "" : " | ") + std::string(a);
    fail(key, *node(key), "expected " + list + ", got '" + out + "'");
  }

  [[noreturn]] void fail(const char* key, const toml::node& n, const std::string& msg) const {
    throw Error(file_ + ":" + std::to_string(n.source().begin.line) + ": " + dotted(key) + ": " + msg);
  }
  [[noreturn]] void wrong_type(const char* key, const toml::node& n, const char* expected) const {
    fail(key, n, std::string("expected ") + expected + ", got " + type_name(n));
  }

 private:
  std::string dotted(std::string_view key) const {
    return name_.empty() ? std::string(key) : name_ + "." + std::string(key);
  }
  const toml::node* node(const char* key) const {
    if (!t_) return nullptr;
    const toml::node* n = t_->get(key);
    if (n) lines_[dotted(key)] = static_cast<int>(n->source().begin.line);
    return n;
  }

  const std::string& file_;
  std::map<std::string, int>& lines_;
  const toml::table* t_;
  std::string name_;
};


// Parses TOML text; syntax errors become "name:line: description".
inline toml::table parse_toml(std::string_view text, const std::string& name) {
  try {
    return toml::parse(text, name);
  } catch (const toml::parse_error& e) {
    throw Error(name + ":" + std::to_string(e.source().begin.line) + ": " + std::string(e.description()));
  }
}

}  // namespace redwood::config
