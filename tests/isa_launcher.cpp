// Runs a test binary (argv[2], with its arguments) with the CPU kernels
// restricted to one instruction set: sets REDWOOD_ISA=argv[1] (scalar, avx2,
// avx512 or avx512vnni; kernels/cpu/matmul.h) for it and its children. Where
// this CPU or build lacks that set, exits 77, which CTest reports as skipped
// (SKIP_RETURN_CODE).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/matmul.h"

using redwood::cpu::Isa;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: isa_launcher scalar|avx2|avx512|avx512vnni BINARY [ARGS...]\n");
    return 2;
  }
  const Isa best = redwood::cpu::best_isa();
  for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512, Isa::avx512_vnni}) {
    if (std::strcmp(argv[1], redwood::cpu::isa_name(isa)) != 0) continue;
    if (isa > best) {
      std::printf("skipped: this CPU or build has only %s, not %s\n", redwood::cpu::isa_name(best), argv[1]);
      return 77;
    }
    setenv("REDWOOD_ISA", argv[1], 1);
    execv(argv[2], argv + 2);
    std::perror("isa_launcher: exec");
    return 2;
  }
  std::fprintf(stderr, "isa_launcher: unknown instruction set '%s'\n", argv[1]);
  return 2;
}
