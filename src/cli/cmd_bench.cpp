// redwood bench offload: seconds per streamed forward pass for several batch
// sizes under a device budget, against the floor
//   max(bytes from storage / storage bandwidth, the same pass all-resident),
// with the storage bandwidth measured by the bench itself (sequential
// O_DIRECT reads of the same file, same run) and the peak RSS of the
// streamed phase against the budgets.
// redwood bench run SUITE.toml --out DIR: a matrix of batch jobs, tables and
// plots (src/app/suite_runner.h).
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "src/cli/commands.h"
#include "src/cli/common.h"
#include "src/app/bench_offload.h"
#include "src/app/suite_runner.h"
#include "src/util/error.h"
#include "src/util/size.h"

namespace redwood::cli {

namespace {

struct BenchOffloadOptions {
  RunOptions run;
  std::string tokens = "1,16,64,256,768";
  int repeat = 3;
  int prefix = 32;
  bool json = false;
  bool skip_resident = false;
};

int run_bench_offload(BenchOffloadOptions& o) {
  apply_run_options(o.run);
  check_draft_budget(o.run, "");
  if (o.run.device_mem.empty()) throw Error("bench offload needs --device-mem (the budget to stream under)");
  app::OffloadBench b;
  for (int32_t n : parse_int_list(o.tokens, "--tokens")) {
    if (n < 1 || n > 8192) throw Error("--tokens: each size must be in 1..8192");
    b.sizes.push_back(n);
  }
  if (b.sizes.empty()) throw Error("--tokens: give at least one size");
  b.run = o.run;
  b.repeat = o.repeat;
  b.prefix = o.prefix;
  b.skip_resident = o.skip_resident;
  const nlohmann::json j = app::bench_offload(b);
  if (o.json) {
    std::puts(j.dump().c_str());
    return 0;
  }
  const auto u64 = [&](const char* k) { return j[k].get<uint64_t>(); };
  const uint64_t host = u64("host_budget"), rss = u64("peak_rss");
  std::printf("%s (%s) under --device-mem %s%s: %d resident / %d host / %d streamed layers, ring %d x %s\n",
              j["model_name"].get<std::string>().c_str(), format_size(u64("model_bytes")).c_str(),
              format_size(u64("device_budget")).c_str(), host ? (" --host-mem " + format_size(host)).c_str() : "",
              j["layers_resident"].get<int>(), j["layers_host"].get<int>(), j["layers_streamed"].get<int>(),
              j["ring_slots"].get<int>(), format_size(u64("slot_bytes")).c_str());
  if (const double link = j["link_bandwidth"].get<double>(); link > 0)
    std::printf("backend %s: host -> device %.2f GB/s (pinned)\n", j["backend"].get<std::string>().c_str(), link / 1e9);
  const double over = j["rss_over_budget"].get<double>() / (1 << 20);
  std::printf("storage %.1f MB/s (%s); peak RSS %s, %.1f MiB %s the budget\n",
              j["storage_bandwidth"].get<double>() / 1e6, j["reader"].get<std::string>().c_str(),
              format_size(rss).c_str(), std::abs(over), over > 0 ? "over" : "under");
  std::printf("%6s %9s %11s %8s %9s %9s %9s %9s %6s %8s %8s\n", "n", "pass s", "streamed", "stall s", "I/O floor",
              "resident", "floor", "I/O busy", "ratio", "pipeline", "decode s");
  for (const auto& r : j["passes"])
    std::printf("%6d %9.3f %11s %8.3f %9.3f %9.3f %9.3f %9.3f %6.3f %8.3f %8.3f\n", r["n"].get<int>(),
                r["pass_seconds"].get<double>(), format_size(r["storage_bytes"].get<uint64_t>()).c_str(),
                r["stall_seconds"].get<double>(), r["io_floor_seconds"].get<double>(),
                r["resident_seconds"].get<double>(), r["floor_seconds"].get<double>(), r["io_seconds"].get<double>(),
                r["ratio"].get<double>(), r["pipeline_ratio"].get<double>(), r["decode_seconds"].get<double>());
  return 0;
}

struct SuiteOptions {
  std::string suite, out;
  int threads = -1;
};

int run_bench_suite(SuiteOptions& o) {
  if (o.out.empty()) throw Error("--out DIR is required");
  const app::SuiteRun r{o.suite, o.out, o.threads, [] { return stop_signal() != 0; }};
  install_stop_signals();
  const app::SuiteReport rep = app::run_suite(r);
  if (rep.interrupted) {
    std::fprintf(stderr, "\nredwood: interrupted: %zu of %zu cells done in %s; run the same command again to resume\n",
                 rep.cells_done, rep.cells, o.out.c_str());
    return 128 + stop_signal();
  }
  std::printf("%s", rep.markdown.c_str());
  if (!rep.have_gnuplot)
    std::fprintf(stderr,
                 "redwood: gnuplot not found: plots skipped (install gnuplot-nox, then run gnuplot on %s/plots/*.gp)\n",
                 o.out.c_str());
  std::fprintf(stderr, "redwood: %zu cells -> %s/results.{csv,json,md}, %zu plots\n", rep.cells_done, o.out.c_str(),
               rep.pngs.size());
  return 0;
}

// `bench run`, under `bench`.
Runner add_bench_suite(CLI::App* bench) {
  auto o = std::make_shared<SuiteOptions>();
  auto* c = bench->add_subcommand("run", "Run a bench suite (configs/bench/*.toml): tables and plots in --out DIR");
  c->add_option("suite", o->suite, "Suite file (TOML)")->required();
  c->add_option("--out,-o", o->out, "Output directory (re-running resumes)")->required();
  c->add_option("--threads,-t", o->threads, "CPU threads (default: all cores)")->transform(int_range(0, 4096));
  return [o, c] { return c->parsed() ? run_bench_suite(*o) : -1; };
}

}  // namespace

Runner add_bench(CLI::App& app) {
  auto o = std::make_shared<BenchOffloadOptions>();
  auto* b = app.add_subcommand("bench", "Benchmarks (results for docs/PERFORMANCE.md)");
  b->require_subcommand(1);
  auto* c = b->add_subcommand("offload", "Streamed forward passes under a device budget vs the I/O and compute floor");
  add_run_options(c, o->run);
  c->add_option("--tokens", o->tokens, "Batch sizes (tree nodes per pass), comma-separated");
  c->add_option("--repeat", o->repeat, "Passes per size (the fastest is reported)")->transform(int_range(1, 1000));
  c->add_option("--prefix", o->prefix, "Committed context tokens before the timed passes")
      ->transform(int_range(1, 1 << 16));
  c->add_flag("--skip-resident", o->skip_resident, "Do not time the all-resident passes (model bigger than RAM)");
  c->add_flag("--json", o->json, "Print one JSON object");
  Runner suite = add_bench_suite(b);
  return [o, c, suite] { return c->parsed() ? run_bench_offload(*o) : suite(); };
}

}  // namespace redwood::cli
