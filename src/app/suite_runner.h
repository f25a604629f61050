// Bench suites (`redwood bench run SUITE.toml --out DIR`): a matrix of batch
// jobs (src/jobs/suite_config.h), each cell run by run_job, then DIR/results.{csv,
// json,md} plus one PNG per group (model, memory budget, temperature, prompt
// set): s/token and tokens per target pass against the tree budget, one
// series per tree policy, the autoregressive baseline dashed. Plots are drawn
// by gnuplot (a separate program; the script is kept beside the PNG so it can
// be re-run by hand). Cells already complete are not re-run: the suite
// resumes like a job.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace redwood::app {

struct SuiteRun {
  std::string suite, out;  // the suite file, the output directory
  int threads = -1;        // >= 0: overrides every cell's threads
  std::function<bool()> cancelled;
};

struct SuiteReport {
  size_t cells = 0, cells_done = 0;
  bool interrupted = false;  // cancelled during cell cells_done (nothing more written)
  std::string markdown;      // the results table (also in results.md)
  std::vector<std::string> pngs;
  bool have_gnuplot = true;  // false: plots skipped (the .gp scripts are written)
};

// Validates every cell's job, then runs the cells in order (one progress line
// per cell on stderr) and writes the reports. Throws redwood::Error.
SuiteReport run_suite(const SuiteRun& o);

}  // namespace redwood::app
