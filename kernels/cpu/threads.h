// Thread control for the CPU backend: one process-wide oneTBB limit, declared
// with the backend interface (set_cpu_threads, cpu_threads in kernels/backend.h).
#pragma once
#include "kernels/backend.h"
