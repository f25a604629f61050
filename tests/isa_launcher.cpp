// Runs a test binary built for another instruction set (argv[1], with its
// arguments) only where this CPU has that set: otherwise exits 77, which CTest
// reports as skipped (SKIP_RETURN_CODE). Built like the rest of the tree, for
// the machine that runs it.
#include <unistd.h>

#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: isa_launcher avx512 BINARY [ARGS...]\n");
    return 2;
  }
  if (std::strcmp(argv[1], "avx512") != 0) {
    std::fprintf(stderr, "isa_launcher: unknown instruction set '%s'\n", argv[1]);
    return 2;
  }
  __builtin_cpu_init();
  // What tests/CMakeLists.txt builds test_kernels_avx512 for.
  const char* missing = !__builtin_cpu_supports("avx512f")      ? "avx512f"
                        : !__builtin_cpu_supports("avx512bw")   ? "avx512bw"
                        : !__builtin_cpu_supports("avx512dq")   ? "avx512dq"
                        : !__builtin_cpu_supports("avx512vl")   ? "avx512vl"
                        : !__builtin_cpu_supports("avx512cd")   ? "avx512cd"
                        : !__builtin_cpu_supports("avx512vnni") ? "avx512vnni"
                        : !__builtin_cpu_supports("avx512vbmi") ? "avx512vbmi"
                                                                : nullptr;
  if (missing) {
    std::printf("skipped: this CPU has no %s; %s is built for AVX-512 (VNNI, VBMI)\n", missing, argv[2]);
    return 77;
  }
  execv(argv[2], argv + 2);
  std::perror("isa_launcher: exec");
  return 2;
}
