// The measured cost model (`redwood profile-hardware`): target pass time t(n)
// over trees of n tokens and draft level time c(w) (one draft pass over w
// tokens plus the child sampling of those w nodes), timed in the ACTUAL
// configuration (backend, memory budgets, residency, streaming) on this
// machine: warm-up passes first, then several repeats, the median kept.
// The curves are made non-decreasing (running maximum over the grid: a larger
// pass never costs less), are linear between grid points, continue the last
// segment's (non-negative) slope beyond the last point and take the first
// value before the first.
//
// The profile file (JSON) names both models (sizes, XXH3 hashes) and the
// configuration, so a cached profile is only reused for the same setup.
#pragma once
#include <string>
#include <vector>

#include "src/speculative/acceptance_profile.h"

namespace redwood::planner {

struct CostCurve {
  std::vector<int> x;           // strictly increasing, >= 1
  std::vector<double> seconds;  // same size, > 0
  double at(double x) const;    // see above; throws redwood::Error when empty
};

struct MeasuredProfile {
  spec::FileIdentity target, draft;
  // The configuration the times hold for.
  std::string backend = "cpu", device_mem, host_mem;
  int ring = 2, threads = 0, ctx = 0, prefix = 0;
  int layers_resident = 0, layers_host = 0, layers_streamed = 0;
  int warmup = 1, repeats = 3;
  CostCurve target_pass;  // x = tree nodes n (root included)
  CostCurve draft_level;  // x = level width w
};

std::string measured_json(const MeasuredProfile& p);
MeasuredProfile parse_measured(const std::string& text, const std::string& name);  // throws redwood::Error
MeasuredProfile read_measured(const std::string& path);

}  // namespace redwood::planner
