// redwood bench run SUITE.toml --out DIR: a matrix of batch jobs, tables and
// plots (src/runtime/bench_suite.h).
#include "src/app/suite_runner.h"

#include <cstdio>

#include "src/cli/commands.h"
#include "src/cli/common.h"

namespace redwood::cli {

namespace {

struct SuiteOptions {
  std::string suite, out;
  int threads = -1;
};

int run_suite(SuiteOptions& o) {
  if (o.out.empty()) throw Error("--out DIR is required");
  app::SuiteRun r;
  r.suite = o.suite;
  r.out = o.out;
  r.threads = o.threads;
  r.cancelled = [] { return stop_signal() != 0; };
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

}  // namespace

Runner add_bench_suite(CLI::App* bench) {
  auto o = std::make_shared<SuiteOptions>();
  auto* c = bench->add_subcommand("run", "Run a bench suite (configs/bench/*.toml): tables and plots in --out DIR");
  c->add_option("suite", o->suite, "Suite file (TOML)")->required();
  c->add_option("--out,-o", o->out, "Output directory (re-running resumes)")->required();
  c->add_option("--threads,-t", o->threads, "CPU threads (default: all cores)")->transform(int_range(0, 4096));
  return [o, c] { return c->parsed() ? run_suite(*o) : -1; };
}

}  // namespace redwood::cli
