#include "src/jobs/suite_config.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "src/jobs/job.h"
#include "src/engine/kv_type.h"
#include "src/util/error.h"
#include "src/util/size.h"
#include "src/util/toml_section.h"
#include "src/util/io.h"

namespace redwood::jobs {

using config::Section;

namespace {

std::string safe(const std::string& s) {
  std::string out;
  for (char c : s) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-') ? c : '_';
  return out;
}

std::string fmt_temp(double t) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", t);
  return b;
}

// A suite's cells are told apart by their ids (each cell's results file, its
// plot group, its row in results.md): refuse a matrix list that names a value
// twice, and two different cells whose ids are the same ("a b" and "a_b", two
// prompt sets x/p.jsonl and y/p.jsonl), rather than let one cell's results
// stand for the other's.
void check_cells_distinct(SuiteConfig& s) {
  auto where = [&](const std::string& key) {
    const auto at = s.lines.find(key);
    return s.file + (at == s.lines.end() ? "" : ":" + std::to_string(at->second)) + ": " + key + ": ";
  };
  auto no_repeats = [&](const char* key, const auto& values, auto show) {
    for (size_t i = 0; i < values.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        if (values[i] == values[j]) throw Error(where(key) + show(values[i]) + " is listed twice");
  };
  auto quoted = [](const std::string& v) { return "'" + v + "'"; };
  auto number = [](double v) {  // the shortest text that reads back as v
    char b[32];
    for (int digits = 6; digits <= 17; ++digits)
      if (std::snprintf(b, sizeof b, "%.*g", digits, v); std::strtod(b, nullptr) == v) break;
    return std::string(b);
  };
  no_repeats("matrix.device_mem", s.device_mem, quoted);
  no_repeats("matrix.trees", s.trees, quoted);
  no_repeats("matrix.prompts", s.prompts, quoted);
  no_repeats("matrix.budgets", s.budgets, [](int v) { return std::to_string(v); });
  no_repeats("matrix.temperatures", s.temperatures, number);
  no_repeats("matrix.sequences", s.sequences, [](int v) { return std::to_string(v); });
  // The cells themselves (bounded first: the check walks them all).
  constexpr uint64_t kMaxCells = 100000;
  auto n = [](const auto& v) { return static_cast<double>(v.size()); };
  const double cells = n(s.models) * n(s.device_mem) * n(s.prompts) * n(s.temperatures) * n(s.sequences) *
                       (1 + n(s.trees) * n(s.budgets));
  if (cells > static_cast<double>(kMaxCells))
    throw Error(s.file + ": [matrix]: " + number(cells) + " cells; a suite has at most " + std::to_string(kMaxCells));
  std::map<std::string, SuiteCell> seen;
  for (const SuiteCell& c : suite_cells(s)) {
    const auto [at, fresh] = seen.emplace(c.id(), c);
    if (fresh) continue;
    const SuiteCell& o = at->second;
    std::string key = "matrix.trees", a = quoted(o.tree), b = quoted(c.tree);
    if (o.model != c.model)
      key = "model.name", a = quoted(o.model), b = quoted(c.model);
    else if (o.device_mem != c.device_mem)
      key = "matrix.device_mem", a = quoted(o.device_mem), b = quoted(c.device_mem);
    else if (o.temperature != c.temperature)
      key = "matrix.temperatures", a = number(o.temperature), b = number(c.temperature);
    else if (o.prompts != c.prompts)
      key = "matrix.prompts", a = quoted(o.prompts), b = quoted(c.prompts);
    throw Error(where(key) + a + " and " + b + " give two cells the same id '" + c.id() +
                "' (one results file for both): make them differ in letters or digits");
  }
}

}  // namespace

std::string acceptance_for(const SuiteModel& m, double temperature) {
  std::string a = m.acceptance;
  for (size_t at = a.find("{T}"); at != std::string::npos; at = a.find("{T}", at))
    a.replace(at, 3, fmt_temp(temperature));
  return a;
}

SuiteConfig parse_suite_text(std::string_view text, const std::string& name) {
  SuiteConfig s;
  s.file = name;
  const toml::table root = config::parse_toml(text, name);
  Section top(s.file, s.lines, &root, "");
  top.only({"name", "suite", "model", "matrix"});
  top.str("name", s.name);
  auto table = [&](const char* key) -> const toml::table* {
    const toml::node* n = root.get(key);
    if (n && !n->is_table()) top.wrong_type(key, *n, "a table");
    return n ? n->as_table() : nullptr;
  };
  const Section su(s.file, s.lines, table("suite"), "suite");
  su.only({"max_tokens", "ctx", "limit", "seed", "top_p", "chat", "prefill_chunk", "kv_type"});
  su.choice("kv_type", s.kv_type, kKvTypeNames);
  su.integer("prefill_chunk", s.prefill_chunk, 1, 1 << 20);
  su.boolean("chat", s.chat);
  su.integer("max_tokens", s.max_tokens, 1, 1 << 20);
  su.integer("ctx", s.ctx, 16, 1 << 24);
  su.integer("limit", s.limit, 0, 1 << 30);
  su.integer("seed", s.seed, 0, INT64_MAX);
  su.number("top_p", s.top_p, 0.0, 1.0, /*lo_open=*/true);

  const toml::node* models = root.get("model");
  if (!models) throw Error(name + ": model: missing (at least one [[model]] with name, target and draft)");
  const toml::array* ma = models->as_array();
  if (!ma || ma->empty()) top.wrong_type("model", *models, "an array of tables [[model]]");
  for (const toml::node& n : *ma) {
    if (!n.is_table()) top.wrong_type("model", n, "an array of tables [[model]]");
    const Section m(s.file, s.lines, n.as_table(), "model");
    m.only({"name", "target", "draft", "acceptance"});
    SuiteModel sm;
    m.str("name", sm.name);
    m.str("target", sm.target);
    m.str("draft", sm.draft);
    m.str("acceptance", sm.acceptance);
    const int line = static_cast<int>(n.source().begin.line);
    if (sm.target.empty()) throw Error(name + ":" + std::to_string(line) + ": model.target: missing");
    if (sm.name.empty()) sm.name = std::filesystem::path(model_file_name(sm.target)).stem().string();
    for (const auto& o : s.models)
      if (o.name == sm.name)
        throw Error(name + ":" + std::to_string(line) + ": model.name: '" + sm.name + "' is used twice");
    for (const std::string* p : {&sm.target, &sm.draft}) {
      const std::string problem = p->empty() ? "" : model_path_problem(*p);
      if (!problem.empty())
        throw Error(name + ":" + std::to_string(line) + ": model." + (p == &sm.target ? "target" : "draft") + ": " +
                    problem);
    }

    if (!sm.acceptance.empty() && sm.draft.empty())
      throw Error(name + ":" + std::to_string(line) + ": model.acceptance: the model has no draft");
    s.models.push_back(std::move(sm));
  }

  const Section mx(s.file, s.lines, table("matrix"), "matrix");
  mx.only({"device_mem", "trees", "budgets", "temperatures", "prompts", "sequences"});
  mx.strings("device_mem", s.device_mem);
  mx.strings("trees", s.trees);
  mx.strings("prompts", s.prompts);
  auto numbers = [&](const char* key, auto& out, double lo, double hi) {
    const toml::table* t = table("matrix");
    const toml::node* n = t ? t->get(key) : nullptr;
    if (!n) return;
    const toml::array* a = n->as_array();
    if (!a || a->empty()) mx.wrong_type(key, *n, "a non-empty array of numbers");
    s.lines[std::string("matrix.") + key] = static_cast<int>(n->source().begin.line);
    out.clear();
    for (const toml::node& e : *a) {
      double v = 0;
      if (e.is_integer())
        v = static_cast<double>(e.as_integer()->get());
      else if (e.is_floating_point())
        v = e.as_floating_point()->get();
      else
        mx.wrong_type(key, e, "an array of numbers");
      if (!(v >= lo && v <= hi)) {
        std::ostringstream m;
        m << "values must be in [" << lo << ", " << hi << "], got " << v;
        mx.fail(key, e, m.str());
      }
      if constexpr (std::is_same_v<std::decay_t<decltype(out)>, std::vector<int>>) {
        if (v != static_cast<double>(static_cast<int>(v))) mx.wrong_type(key, e, "an array of integers");
        out.push_back(static_cast<int>(v));
      } else {
        out.push_back(v);
      }
    }
  };
  numbers("budgets", s.budgets, 2, 8192);
  numbers("temperatures", s.temperatures, 0, 100);
  numbers("sequences", s.sequences, 1, 256);
  for (const auto& d : s.device_mem)
    if (!d.empty()) try {
        (void)parse_device_budget(d, "matrix.device_mem");
      } catch (const Error& e) {
        throw Error(s.file + ":" + std::to_string(s.lines["matrix.device_mem"]) + ": matrix.device_mem: " + e.what());
      }
  for (const auto& e : s.trees) {
    const auto slash = e.find('/');
    const std::string v = slash == std::string::npos ? "" : e.substr(slash + 1);
    const bool ok = slash == std::string::npos || v == "greedy" || v == "specinfer" || v == "sequoia" ||
                    v == "target-sample" || v == "spectr" || v == "multidraft-is";
    if (e.empty() || e[0] == '/' || !ok)
      throw Error(s.file + ":" + std::to_string(s.lines["matrix.trees"]) + ": matrix.trees: bad entry '" + e +
                  "' (policy or policy/verifier; verifiers: greedy, specinfer, sequoia, target-sample, spectr, "
                  "multidraft-is)");
  }
  for (const auto& m : s.models)
    for (double t : s.temperatures)
      if (const std::string a = acceptance_for(m, t); !a.empty() && !std::filesystem::is_regular_file(a))
        throw Error(s.file + ":" + std::to_string(s.lines["model.acceptance"]) + ": model.acceptance: no such file '" +
                    a + "'");
  bool any_draft = false;
  for (const auto& m : s.models) any_draft |= !m.draft.empty();
  if (!s.trees.empty() && !any_draft)
    throw Error(s.file + ":" + std::to_string(s.lines["matrix.trees"]) + ": matrix.trees: no [[model]] has a draft");
  if (*std::max_element(s.sequences.begin(), s.sequences.end()) > 1)
    for (const auto& e : s.trees)
      if (const std::string policy = e.substr(0, e.find('/'));
          policy == "dyspec" || policy == "opt-tree" || policy == "specexec")
        throw Error(s.file + ":" + std::to_string(s.lines["matrix.sequences"]) +
                    ": matrix.sequences: several sequences per pass take static trees or auto, not '" + policy +
                    "' (run it in a suite of sequences = [1])");
  if (!s.trees.empty() && s.budgets.empty())
    throw Error(s.file + ":" + std::to_string(s.lines["matrix.trees"]) +
                ": matrix.budgets: missing (tree sizes to sweep)");
  if (s.prompts.empty()) throw Error(s.file + ": matrix.prompts: missing (one or more JSONL prompt files)");
  for (const auto& p : s.prompts)
    if (!std::filesystem::is_regular_file(p))
      throw Error(s.file + ":" + std::to_string(s.lines["matrix.prompts"]) + ": matrix.prompts: no such file '" + p +
                  "'");
  if (s.max_tokens + 2 > s.ctx)
    throw Error(s.file + ": suite.max_tokens: " + std::to_string(s.max_tokens) + " does not fit in suite.ctx");
  check_cells_distinct(s);
  return s;
}

SuiteConfig parse_suite_file(const std::string& path) {
  return parse_suite_text(read_text_file(path, "the suite file"), path);
}

std::string SuiteCell::group() const {
  std::string g = safe(model);
  g.append("_").append(device_mem.empty() ? std::string("resident") : safe(device_mem));
  g.append("_T").append(fmt_temp(temperature));
  g.append("_").append(safe(std::filesystem::path(prompts).stem().string()));
  if (sequences > 1) g.append("_s").append(std::to_string(sequences));  // ids of one-at-a-time cells unchanged
  return g;
}

std::string SuiteCell::id() const {
  std::string s = group();
  if (tree.empty())
    s.append("_ar");
  else
    s.append("_").append(safe(tree)).append("_b").append(std::to_string(budget));
  return s;
}

std::vector<SuiteCell> suite_cells(const SuiteConfig& s) {
  std::vector<SuiteCell> out;
  for (const auto& m : s.models)
    for (const auto& d : s.device_mem)
      for (const auto& p : s.prompts)
        for (double t : s.temperatures)
          for (const int q : s.sequences) {
            out.push_back({m.name, d, "", p, "", 0, t, q});
            if (m.draft.empty()) continue;
            std::set<std::string> seen;  // at T = 0 every verifier is greedy: one cell per policy
            for (const auto& entry : s.trees) {
              const auto slash = entry.find('/');
              const std::string policy = entry.substr(0, slash);
              const std::string verify = slash == std::string::npos || t == 0 ? "" : entry.substr(slash + 1);
              const std::string tree = t == 0 ? policy : entry;
              if (!seen.insert(tree).second) continue;
              for (int b : s.budgets) out.push_back({m.name, d, tree, p, verify, b, t, q});
            }
          }
  return out;
}

std::string tree_for_budget(const std::string& policy, int budget) {
  if (policy == "chain") return "chain:" + std::to_string(budget - 1);
  if (policy.rfind("kary:", 0) == 0 && policy.find('x') == std::string::npos) {
    const int w = std::max(1, std::atoi(policy.c_str() + 5));
    return policy + "x" + std::to_string(std::max(1, (budget - 1) / w));
  }
  return policy;
}

JobConfig cell_job(const SuiteConfig& s, const SuiteCell& c, const std::string& dir, const std::string& prompts) {
  JobConfig j;
  j.file = s.file;
  j.name = c.id();
  for (const auto& m : s.models)
    if (m.name == c.model) {
      j.target = m.target;
      if (!c.tree.empty()) {
        j.draft = m.draft;
        const std::string policy = c.tree.substr(0, c.tree.find('/'));
        if (policy == "sequoia" || policy == "auto") j.acceptance = acceptance_for(m, c.temperature);
      }
    }
  j.device_mem = c.device_mem;
  // Messages about a cell's settings name the suite's keys and lines.
  for (const auto& [job_key, suite_key] : std::map<std::string, std::string>{
           {"memory.device", "matrix.device_mem"}, {"speculation.tree", "matrix.trees"},
           {"speculation.budget", "matrix.budgets"}, {"sampling.temperature", "matrix.temperatures"},
           {"input.prompts", "matrix.prompts"}, {"memory.ctx", "suite.ctx"}, {"memory.kv_type", "suite.kv_type"},
           {"sampling.max_tokens", "suite.max_tokens"}, {"batch.sequences", "matrix.sequences"}}) {
    j.key_names[job_key] = suite_key;
    if (const auto at = s.lines.find(suite_key); at != s.lines.end()) j.lines[job_key] = at->second;
  }
  j.ctx = s.ctx;
  j.kv_type = s.kv_type;
  if (!c.tree.empty()) {
    j.tree = tree_for_budget(c.tree.substr(0, c.tree.find('/')), c.budget);
    j.verify = c.verify;
    j.budget = c.budget;
  }
  j.sequences = c.sequences;
  j.sampling.temperature = static_cast<float>(c.temperature);
  j.sampling.top_p = static_cast<float>(s.top_p);
  j.sampling.seed = s.seed;
  j.max_tokens = s.max_tokens;
  j.prefill_chunk = s.prefill_chunk;
  j.prompts = prompts;
  j.chat = s.chat;
  j.output = dir + "/cells/" + c.id() + ".jsonl";
  j.summary = j.output + ".summary.json";
  j.progress_every = 30;
  return j;
}

}  // namespace redwood::jobs
