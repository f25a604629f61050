#include "kernels/cpu/threads.h"

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/info.h>

#include <memory>

extern "C" void openblas_set_num_threads(int);

namespace redwood {
namespace {
std::unique_ptr<tbb::global_control> g_control;
int g_threads = 0;
}  // namespace

void set_cpu_threads(int n) {
  openblas_set_num_threads(1);
  if (n <= 0) n = tbb::info::default_concurrency();
  g_control = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, n);
  g_threads = n;
}

int cpu_threads() {
  return g_threads > 0 ? g_threads : tbb::info::default_concurrency();
}
}  // namespace redwood
