// Thread control for the CPU backend: one process-wide oneTBB limit.
#pragma once

namespace redwood {
// n <= 0: all hardware threads. Also pins OpenBLAS to one thread (TBB owns parallelism).
void set_cpu_threads(int n);
int cpu_threads();
}  // namespace redwood
