// Bench suites (see suite_runner.h).
#include "src/app/suite_runner.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "src/jobs/suite_config.h"
#include "src/app/job_runner.h"
#include "src/speculative/speculate.h"
#include "src/util/error.h"
#include "src/util/io.h"
#include "src/util/output_path.h"

extern char** environ;

namespace redwood::app {

using nlohmann::json;

namespace {

namespace fs = std::filesystem;

// Series colours, in policy order; the baseline is dark grey. The bench test
// looks for these exact colours in the PNG.
constexpr const char* kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
                                    "#e377c2", "#17becf", "#bcbd22", "#000080", "#ff1493", "#8fbc8f"};
constexpr const char* kBaselineColour = "#444444";

struct Row {
  jobs::SuiteCell cell;
  json summary;
  double s_per_token = 0, tokens_per_pass = 0, tree_nodes = 0, draft_share = 0;
  double stall_per_pass = 0;  // target passes' wait for streamed layers (prefill passes included)
  uint64_t peak_rss = 0;      // the cell's peak resident set
  int64_t tokens = 0, prompts = 0;
  double job_tokens_per_s = 0;  // the whole job's generated tokens per second of wall time (this run)
  // Where a streamed cell's time goes: per step (a target pass and the drafting
  // before it; one token for plain decoding), and per streamed pass (prefill
  // passes included) its wall time, the I/O thread's busy time, the compute
  // and the compute's wait for layers, and the reads' rate.
  bool streamed = false;
  double step_s = 0, draft_step_s = 0, pass_s = 0, io_pass_s = 0, compute_pass_s = 0, read_gbps = 0;
};

// A cell's labels in both tables: its tree (or autoregressive), budget (or
// "-"), device memory (or resident) and the prompt set's file stem.
struct Labels {
  std::string tree, budget, mem, prompts;
};
Labels labels(const jobs::SuiteCell& c) {
  return {c.tree.empty() ? "autoregressive" : c.tree, c.tree.empty() ? "-" : std::to_string(c.budget),
          c.device_mem.empty() ? "resident" : c.device_mem, fs::path(c.prompts).stem().string()};
}

// Fills a row's time split from its job summary: the sums of its result
// lines (every run of a resumed cell; the passes --tree auto times while it
// loads are not a prompt's and are left out). Nothing when no layer streamed.
void time_split(Row& row) {
  const json& sm = row.summary;
  const json st = sm.value("streamed", json::object());
  const double passes = sm.value("streamed_passes", 0.0);
  if (passes <= 0 || st.value("storage_bytes", 0.0) + st.value("host_bytes", 0.0) <= 0) return;
  row.streamed = true;
  const int64_t tp = sm.value("target_passes", int64_t{0});
  const double steps = static_cast<double>(tp > 0 ? tp : row.tokens);
  if (steps > 0) {
    row.step_s = sm.value("decode_seconds", 0.0) / steps;
    row.draft_step_s = sm.value("draft_seconds", 0.0) / steps;
  }
  const double io = st.value("io_seconds", 0.0);
  row.pass_s = st.value("wall_seconds", 0.0) / passes;
  row.io_pass_s = io / passes;
  row.compute_pass_s = st.value("compute_seconds", 0.0) / passes;
  row.read_gbps = io > 0 ? st.value("storage_bytes", 0.0) / io / 1e9 : 0.0;
}

// The first `limit` prompt lines of a set, written once per suite directory.
std::string prompt_subset(const std::string& src, int limit, const std::string& dir) {
  if (limit <= 0) return src;
  require_regular_input(src, "the prompt file");
  std::ifstream in(src, std::ios::binary);
  if (!in) throw Error(src + ": cannot open the prompt file");
  std::string line, text;
  int n = 0;
  while (n < limit && std::getline(in, line))
    if (line.find_first_not_of(" \t\r") != std::string::npos) {
      text += line + "\n";
      ++n;
    }
  const std::string out =
      dir + "/prompts/" + fs::path(src).stem().string() + ".first" + std::to_string(limit) + ".jsonl";
  check_output_path(out, {src}, "prompts");
  std::ifstream old(out, std::ios::binary);
  std::ostringstream cur;
  if (old) cur << old.rdbuf();
  if (!old || cur.str() != text) write_output_file(out, text);
  return out;
}

std::string num(double v, const char* f = "%.6g") {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string o = "\"";
  for (char c : s) o += c == '"' ? std::string("\"\"") : std::string(1, c);
  return o + "\"";
}

// Runs gnuplot on a script; false (and a message) when it is not installed.
bool run_gnuplot(const std::string& script) {
  pid_t pid = 0;
  std::string prog = "gnuplot";
  char* argv[] = {prog.data(), const_cast<char*>(script.c_str()), nullptr};
  if (posix_spawnp(&pid, "gnuplot", nullptr, nullptr, argv, environ) != 0) return false;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw Error("gnuplot: waitpid failed");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw Error("gnuplot failed on " + script + " (exit " + std::to_string(WEXITSTATUS(status)) + ")");
  return true;
}

std::string gp_quote(const std::string& s) {
  std::string o = "'";
  for (char c : s) o += c == '\'' ? std::string("''") : std::string(1, c);
  return o + "'";
}

// One PNG per group; returns the PNG paths written (empty when no gnuplot).
std::vector<std::string> plot(const std::vector<Row>& rows, const std::vector<std::string>& policies,
                              const std::string& dir, bool& have_gnuplot) {
  std::map<std::string, std::vector<const Row*>> groups;
  for (const Row& r : rows) groups[r.cell.group()].push_back(&r);
  std::vector<std::string> pngs;
  std::error_code ec;
  fs::create_directories(dir + "/plots", ec);
  if (ec) throw Error(dir + "/plots: cannot create the directory: " + ec.message());
  for (const auto& [g, rs] : groups) {
    const Row* base = nullptr;
    for (const Row* r : rs)
      if (r->cell.tree.empty()) base = r;
    std::string gp = "set terminal pngcairo size 1200,560 font ',10'\n";
    const std::string png = dir + "/plots/" + g + ".png";
    // Created here (gnuplot would follow a link planted at a name), filled by
    // gnuplot through its /proc name, removed when it fails or on a kill.
    std::optional<TempOutput> out;
    if (have_gnuplot) out.emplace(png);
    gp += "set output " + gp_quote(out ? out->path() : png) + "\n";
    gp += "set multiplot layout 1,2 title " + gp_quote(g) + " noenhanced\n";
    gp += "set key below noenhanced\nset grid\nset xlabel 'tree budget (nodes per target pass)'\nset logscale x 2\n";
    std::set<int> budgets;  // one budget alone: an explicit range (gnuplot warns of an empty x range)
    for (const Row* r : rs)
      if (!r->cell.tree.empty()) budgets.insert(r->cell.budget);
    if (budgets.size() == 1)
      gp += "set xrange [" + num(*budgets.begin() / 1.5) + ":" + num(*budgets.begin() * 1.5) + "]\n";
    // Data: one block per policy (index i), budget vs metric.
    std::string dat;
    std::vector<size_t> present;
    for (size_t i = 0; i < policies.size(); ++i) {
      std::string block;
      for (const Row* r : rs)
        if (r->cell.tree == policies[i])
          block += std::to_string(r->cell.budget) + " " + num(r->s_per_token) + " " + num(r->tokens_per_pass) + "\n";
      if (block.empty()) continue;
      dat += "# " + policies[i] + "\n" + block + "\n\n";
      present.push_back(i);
    }
    const std::string datf = dir + "/plots/" + g + ".dat";
    write_output_file(datf, dat);
    for (int panel = 0; panel < 2; ++panel) {
      gp += panel == 0 ? "set ylabel 's/token'\nset yrange [0:*]\n"
                       : "set ylabel 'tokens per target pass'\nset yrange [0:*]\n";
      std::string cmd = "plot ";
      for (size_t k = 0; k < present.size(); ++k) {
        const size_t i = present[k];
        cmd += gp_quote(datf) + " index " + std::to_string(k) + " using 1:" + (panel == 0 ? "2" : "3") +
               " with linespoints lw 2 pt 7 lc rgb '" + kColours[i % std::size(kColours)] + "' title " +
               gp_quote(policies[i]) + ", ";
      }
      const double y = base ? (panel == 0 ? base->s_per_token : 1.0) : NAN;
      if (base)
        cmd += num(y) + " with lines dt 2 lw 2 lc rgb '" + kBaselineColour + "' title 'autoregressive'";
      else if (!present.empty())
        cmd.resize(cmd.size() - 2);
      if (present.empty() && !base) continue;
      gp += cmd + "\n";
    }
    gp += "unset multiplot\nset output\n";
    const std::string gpf = dir + "/plots/" + g + ".gp";
    write_output_file(gpf, gp);
    if (!out) continue;
    if (!run_gnuplot(gpf)) {
      have_gnuplot = false;
      continue;
    }
    out->commit();
    pngs.push_back(png);
  }
  return pngs;
}

// The output-path policy (src/util/output_path.h) for the suite's reports,
// before any folder is made (the inputs are the suite file, its prompt sets
// and models); then the folders and each prompt set's subset: prompt set ->
// the file its cells read.
std::map<std::string, std::string> prepare_suite_output(const jobs::SuiteConfig& s, const SuiteRun& o) {
  std::vector<std::string> inputs = {o.suite};
  inputs.insert(inputs.end(), s.prompts.begin(), s.prompts.end());
  for (const auto& m : s.models) {
    inputs.push_back(m.target);
    if (!m.draft.empty()) inputs.push_back(m.draft);
  }
  for (const char* f : {"/results.csv", "/results.md", "/results.json"}) check_output_path(o.out + f, inputs, "--out");
  for (const char* sub : {"/cells", "/prompts"}) {
    std::error_code ec;
    fs::create_directories(o.out + sub, ec);
    if (ec) throw Error(o.out + sub + ": cannot create the directory: " + ec.message());
  }
  std::map<std::string, std::string> prompt_file;
  for (const auto& p : s.prompts) prompt_file[p] = prompt_subset(p, s.limit, o.out);
  return prompt_file;
}

// Every cell's job, checked before any runs (a tree's settings named at matrix.trees).
std::vector<jobs::JobConfig> cell_jobs(const jobs::SuiteConfig& s, const std::vector<jobs::SuiteCell>& cells,
                                       const SuiteRun& o, const std::map<std::string, std::string>& prompt_file) {
  std::vector<jobs::JobConfig> jobs_;
  for (const auto& c : cells) {
    jobs::JobConfig j = jobs::cell_job(s, c, o.out, prompt_file.at(c.prompts));
    if (o.threads >= 0) j.threads = o.threads;
    jobs::check_job(j);
    if (!c.tree.empty() && j.tree != "auto") {  // (auto: the job checks its caps; the choice is made at run time)
      try {
        (void)spec::make_spec_config(spec::TreeOptions{j.tree, j.budget, j.depth, j.threshold, j.delta, j.width,
                                                       j.verify, j.acceptance, j.is_alphabet},
                                     j.sampling);
      } catch (const Error& e) {
        const auto at = s.lines.find("matrix.trees");
        throw Error(s.file + ":" + std::to_string(at == s.lines.end() ? 0 : at->second) + ": matrix.trees: cell " +
                    c.id() + ": " + e.what());
      }
    }
    jobs_.push_back(std::move(j));
  }
  return jobs_;
}

// A cell's row from its job's summary.
Row cell_row(const jobs::SuiteCell& cell, const JobOutcome& r) {
  Row row;
  row.cell = cell;
  row.summary = r.summary;
  row.tokens = r.summary["tokens"].get<int64_t>();
  row.prompts = r.summary["prompts"]["done"].get<int64_t>();
  row.s_per_token = r.summary["s_per_token_overall"].get<double>();
  row.job_tokens_per_s = r.summary.value("tokens_per_second_this_run", 0.0);
  row.tokens_per_pass = r.summary["mean_accepted"].is_number() ? r.summary["mean_accepted"].get<double>() : 1.0;
  row.tree_nodes = r.summary["mean_tree_nodes"].is_number() ? r.summary["mean_tree_nodes"].get<double>() : 1.0;
  const double dsec = r.summary["draft_seconds"].get<double>(), vsec = r.summary["verify_seconds"].get<double>();
  row.draft_share = dsec + vsec > 0 ? dsec / (dsec + vsec) : 0.0;
  if (const int64_t sp = r.summary.value("streamed_passes", int64_t{0}); sp > 0)
    row.stall_per_pass = r.summary.value("stall_seconds", 0.0) / static_cast<double>(sp);
  row.peak_rss = r.summary.value("peak_rss_bytes", uint64_t{0});
  time_split(row);
  return row;
}

// The reports' text: results.csv, the markdown table (with where the time
// goes, for cells that streamed) and results.json's cells.
struct SuiteTables {
  std::string csv, md;
  json cells;
};

SuiteTables suite_tables(const std::vector<Row>& rows) {
  std::map<std::string, double> base_spt;
  for (const Row& r : rows)
    if (r.cell.tree.empty()) base_spt[r.cell.group()] = r.s_per_token;
  std::string csv =
      "model,device_mem,tree,budget,temperature,prompts,n_prompts,tokens,s_per_token,s_per_token_p50,s_per_token_p90,"
      "tokens_per_pass,tree_nodes,target_passes,draft_share,stall_s_per_pass,peak_rss_mib,speedup_vs_ar,sequences,"
      "job_tokens_per_s\n";
  std::string md =
      "| model | device mem | tree | budget | T | prompts | s/token | tokens/pass | tree nodes | draft share | stall "
      "s/pass | peak RSS MiB | vs AR | sequences | job tok/s |\n"
      "|---|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  json all = json::array();
  for (const Row& r : rows) {
    const double b = base_spt.count(r.cell.group()) ? base_spt[r.cell.group()] : 0.0;
    const double speedup = r.s_per_token > 0 && b > 0 ? b / r.s_per_token : 0.0;
    const Labels l = labels(r.cell);
    csv += csv_field(r.cell.model) + "," + csv_field(l.mem) + "," + csv_field(l.tree) + "," +
           std::to_string(r.cell.budget) + "," + num(r.cell.temperature) + "," + csv_field(l.prompts) + "," +
           std::to_string(r.prompts) + "," + std::to_string(r.tokens) + "," + num(r.s_per_token) + "," +
           num(r.summary["s_per_token"]["p50"].get<double>()) + "," +
           num(r.summary["s_per_token"]["p90"].get<double>()) + "," + num(r.tokens_per_pass) + "," + num(r.tree_nodes) +
           "," + std::to_string(r.summary["target_passes"].get<int64_t>()) + "," + num(r.draft_share) + "," +
           num(r.stall_per_pass) + "," + num(static_cast<double>(r.peak_rss) / (1 << 20), "%.1f") + "," + num(speedup) +
           "," + std::to_string(r.cell.sequences) + "," + num(r.job_tokens_per_s) + "\n";
    md += "| " + r.cell.model + " | " + l.mem + " | " + l.tree + " | " + l.budget + " | " + num(r.cell.temperature) +
          " | " + l.prompts + " | " + num(r.s_per_token, "%.4f") + " | " + num(r.tokens_per_pass, "%.2f") + " | " +
          num(r.tree_nodes, "%.1f") + " | " + num(r.draft_share, "%.2f") + " | " + num(r.stall_per_pass, "%.3f") +
          " | " + num(static_cast<double>(r.peak_rss) / (1 << 20), "%.0f") + " | " + num(speedup, "%.2f") + " | " +
          std::to_string(r.cell.sequences) + " | " + num(r.job_tokens_per_s, "%.2f") + " |\n";
    all.push_back({{"id", r.cell.id()},
                   {"model", r.cell.model},
                   {"device_mem", r.cell.device_mem},
                   {"tree", r.cell.tree},
                   {"budget", r.cell.budget},
                   {"temperature", r.cell.temperature},
                   {"prompts", r.cell.prompts},
                   {"s_per_token", r.s_per_token},
                   {"tokens_per_pass", r.tokens_per_pass},
                   {"tree_nodes", r.tree_nodes},
                   {"draft_share", r.draft_share},
                   {"stall_s_per_pass", r.stall_per_pass},
                   {"peak_rss_bytes", r.peak_rss},
                   {"speedup_vs_ar", speedup},
                   {"sequences", r.cell.sequences},
                   {"job_tokens_per_s", r.job_tokens_per_s},
                   {"summary", r.summary}});
    if (r.streamed)  // the stall per pass is the cell's stall_s_per_pass
      all.back()["time_split"] = {{"step_s", r.step_s},
                                  {"draft_s_per_step", r.draft_step_s},
                                  {"pass_s", r.pass_s},
                                  {"io_busy_s_per_pass", r.io_pass_s},
                                  {"compute_s_per_pass", r.compute_pass_s},
                                  {"read_gb_per_s", r.read_gbps}};
  }
  // Where the time goes, for the cells that streamed layers.
  std::string split;
  for (const Row& r : rows) {
    if (!r.streamed) continue;
    const Labels l = labels(r.cell);
    split += "| " + r.cell.model + " | " + l.mem + " | " + l.tree + " | " + l.budget + " | " + l.prompts + " | " +
             num(r.cell.temperature) + " | " + num(r.step_s, "%.3f") + " | " + num(r.draft_step_s, "%.3f") + " | " +
             num(r.pass_s, "%.3f") + " | " + num(r.io_pass_s, "%.3f") + " | " + num(r.compute_pass_s, "%.3f") +
             " | " + num(r.stall_per_pass, "%.3f") + " | " + num(r.read_gbps, "%.2f") + " |\n";
  }
  if (!split.empty())
    md += "\nWhere the time goes: per step (drafting, then one target pass; for autoregressive, decoding time per "
          "token, the first of which comes from the prefill), and per streamed pass (prefill passes included) its "
          "wall time, the I/O thread's busy time, the compute, the compute's wait for layers (stall) and the reads' "
          "rate.\n\n"
          "| model | device mem | tree | budget | prompts | T | s/step | draft s/step | pass s | I/O busy s/pass | "
          "compute s/pass | stall s/pass | read GB/s |\n"
          "|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n" +
          split;
  return {std::move(csv), std::move(md), std::move(all)};
}

}  // namespace

SuiteReport run_suite(const SuiteRun& o) {
  const jobs::SuiteConfig s = jobs::parse_suite_file(o.suite);
  if (o.out.empty()) throw Error("the output directory is empty");
  SuiteReport rep;
  rep.cells = 0;
  // A cell that is already complete generates nothing when the suite runs
  // again: its job's tokens/s is the one the last report had.
  std::map<std::string, double> earlier_tps;
  if (std::ifstream f(o.out + "/results.json"); f) try {
      const json earlier = json::parse(f);
      for (const json& c : earlier.at("cells"))
        if (c.contains("id") && c.contains("job_tokens_per_s"))
          earlier_tps[c["id"].get<std::string>()] = c["job_tokens_per_s"].get<double>();
    } catch (const std::exception&) {  // an unreadable report: nothing carried over
    }
  const std::map<std::string, std::string> prompt_file = prepare_suite_output(s, o);
  const auto cells = jobs::suite_cells(s);
  const std::vector<jobs::JobConfig> jobs_ = cell_jobs(s, cells, o, prompt_file);
  rep.cells = cells.size();
  JobHooks hooks;
  hooks.quiet = true;
  hooks.cancelled = o.cancelled;
  std::vector<Row> rows;
  for (size_t i = 0; i < cells.size(); ++i) {
    std::fprintf(stderr, "bench: cell %zu/%zu %s ... ", i + 1, cells.size(), cells[i].id().c_str());
    std::fflush(stderr);
    const JobOutcome r = run_job(jobs_[i], hooks);
    if (r.interrupted) {
      rep.interrupted = true;
      rep.cells_done = i;
      return rep;
    }
    Row row = cell_row(cells[i], r);
    if (r.summary.value("tokens_this_run", int64_t{0}) == 0 && earlier_tps.count(cells[i].id()))
      row.job_tokens_per_s = earlier_tps[cells[i].id()];
    std::fprintf(stderr, "%.4f s/token, %.2f tokens/pass\n", row.s_per_token, row.tokens_per_pass);
    rows.push_back(std::move(row));
  }
  const SuiteTables t = suite_tables(rows);
  const std::string& md = t.md;
  write_output_file(o.out + "/results.csv", t.csv);
  write_output_file(o.out + "/results.md", "# " + (s.name.empty() ? o.suite : s.name) + "\n\n" + md);
  bool have_gnuplot = true;
  std::vector<std::string> series;  // every tree entry in first-seen order: its colour index
  for (const Row& r : rows)
    if (!r.cell.tree.empty() && std::find(series.begin(), series.end(), r.cell.tree) == series.end())
      series.push_back(r.cell.tree);
  const auto pngs = plot(rows, series, o.out, have_gnuplot);
  json doc = {{"suite", s.name.empty() ? o.suite : s.name}, {"file", o.suite}, {"cells", t.cells}, {"plots", pngs}};
  write_output_file(o.out + "/results.json", doc.dump(2) + "\n");
  rep.cells_done = rows.size();
  rep.markdown = md;
  rep.pngs = pngs;
  rep.have_gnuplot = have_gnuplot;
  return rep;
}

}  // namespace redwood::app
