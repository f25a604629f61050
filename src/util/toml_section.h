// Typed, line-aware access to one TOML table, shared by the TOML readers (job
// and bench suite files in src/jobs, hardware profiles and model configs in
// src/planner). Every getter records the key's line; errors read
// "file:line: section.key: message".
#pragma once
#include <cmath>
#include <cstddef>
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
  // An integer in [lo, hi], or the string `word` (then is_word is set and out kept).
  template <typename Int>
  void integer_or_word(const char* key, Int& out, int64_t lo, int64_t hi, const char* word, bool& is_word) const {
    const toml::node* n = node(key);
    if (!n) return;
    if (n->is_string()) {
      if (*n->value<std::string>() != word)
        fail(key, *n, std::string("expected an integer or \"") + word + "\", got '" + *n->value<std::string>() + "'");
      is_word = true;
      return;
    }
    if (!n->is_integer()) wrong_type(key, *n, (std::string("an integer or \"") + word + "\"").c_str());
    is_word = false;
    integer(key, out, lo, hi);
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


// What reaches the TOML library is bounded first: toml++ recurses once per
// level of nesting (dotted keys, table headers, arrays, inline tables), so a
// 100 kB file nested 50,000 deep overflowed the stack. Configuration files
// here are a few kB and a few levels deep.
inline constexpr size_t kMaxTomlBytes = size_t{4} << 20;
inline constexpr int kMaxTomlDepth = 64;

// Refuses text nested deeper than max_depth ("name:line: ..."), counting the
// '.'-separated parts of table headers and dotted keys (a header's from the
// root, a key's from its table) and each array or inline table level. Strings
// and comments are skipped; anything else malformed is left to the parser.
inline void check_toml_depth(std::string_view text, const std::string& name, int max_depth = kMaxTomlDepth) {
  size_t i = 0;
  int line = 1;
  auto too_deep = [&](int depth) {
    if (depth > max_depth)
      throw Error(name + ":" + std::to_string(line) + ": nested more than " + std::to_string(max_depth) +
                  " levels deep (dotted keys, table headers, arrays and inline tables count)");
  };
  // Skips the string that starts at text[i] (a quote), counting its lines.
  auto skip_string = [&] {
    const char q = text[i];
    const std::string_view triple = q == '"' ? R"(""")" : R"(''')";
    const bool multi = text.substr(i, 3) == triple;
    i += multi ? 3 : 1;
    while (i < text.size()) {
      const char c = text[i];
      if (c == '\\' && q == '"') {
        if (i + 1 < text.size() && text[i + 1] == '\n') ++line;
        i += 2;
        continue;
      }
      if (c == '\n') {
        if (!multi) return;  // unterminated: the parser says so
        ++line;
      }
      if (c == q && (!multi || text.substr(i, 3) == triple)) {
        i += multi ? 3 : 1;
        while (multi && i < text.size() && text[i] == q) ++i;  // """a"""" ends with a quote in the content
        return;
      }
      ++i;
    }
  };
  auto skip_to_line_end = [&] {
    while (i < text.size() && text[i] != '\n') ++i;
  };
  // Reads a key (a header's keys) up to one of `ends`, a line end or the end;
  // returns the number of its '.'-separated parts.
  auto key_parts = [&](std::string_view ends) {
    int parts = 1;
    while (i < text.size() && ends.find(text[i]) == std::string_view::npos && text[i] != '\n') {
      if (text[i] == '"' || text[i] == '\'') {
        skip_string();
        continue;
      }
      if (text[i] == '.') ++parts;
      ++i;
    }
    return parts;
  };
  struct Open {
    char kind;  // '[' an array, '{' an inline table
    int depth;  // its own
  };
  std::vector<Open> open;
  int table_depth = 0;  // the current [header]'s
  int value_depth = 0;  // a value starting here
  bool want_key = true;
  while (i < text.size()) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      ++i;
      if (open.empty()) want_key = true;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\r') {
      ++i;
      continue;
    }
    if (c == '#') {
      skip_to_line_end();
      continue;
    }
    if (want_key) {
      if (open.empty() && c == '[') {  // [table] or [[array of tables]]
        const bool array = text.substr(i, 2) == "[[";
        i += array ? 2 : 1;
        table_depth = key_parts("]") + (array ? 1 : 0);
        too_deep(table_depth);
        skip_to_line_end();  // "]" and maybe a comment (the parser checks them)
        continue;
      }
      if (!open.empty() && c == '}') {  // {} or a trailing ", }"
        open.pop_back();
        want_key = false;
        ++i;
        continue;
      }
      value_depth = (open.empty() ? table_depth : open.back().depth) + key_parts("=");
      too_deep(value_depth);
      want_key = false;
      if (i < text.size() && text[i] == '=') ++i;
      continue;
    }
    if (c == '"' || c == '\'') {
      skip_string();
    } else if (c == '[' || c == '{') {
      too_deep(value_depth + 1);
      open.push_back({c, value_depth});
      if (c == '[') ++value_depth;  // its elements
      if (c == '{') want_key = true;
      ++i;
    } else if ((c == ']' || c == '}') && !open.empty()) {
      open.pop_back();
      ++i;
    } else if (c == ',' && !open.empty()) {
      if (open.back().kind == '{')
        want_key = true;
      else
        value_depth = open.back().depth + 1;
      ++i;
    } else {
      ++i;
    }
  }
}

// Parses TOML text; syntax errors become "name:line: description". Every TOML
// reader goes through here: the text is bounded in size and nesting first.
inline toml::table parse_toml(std::string_view text, const std::string& name) {
  if (text.size() > kMaxTomlBytes)
    throw Error(name + ": " + std::to_string(text.size()) + " bytes; a TOML file here has at most " +
                std::to_string(kMaxTomlBytes) + " bytes");
  check_toml_depth(text, name);
  try {
    return toml::parse(text, name);
  } catch (const toml::parse_error& e) {
    throw Error(name + ":" + std::to_string(e.source().begin.line) + ": " + std::string(e.description()));
  }
}

}  // namespace redwood::config
