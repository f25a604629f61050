// The CPU matmul dispatcher: which kernel family (matmul_kernels.h, one file
// each) runs for a weight type, a number of tokens and the instruction set
// the kernels may use. The policy is the table below; nothing else here
// computes.
#include "kernels/cpu/matmul.h"

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>

#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/simd.h"
#include "src/util/error.h"

namespace redwood::cpu {

namespace {

enum class Kernel {
  scalar_gemv,            // matmul_scalar.cpp
  blas_gemm,              // matmul_scalar.cpp
  gemv_plain_avx2,        // gemv_avx2.cpp
  gemv_dequantized_avx2,  // gemv_avx2.cpp
  gemv_chunked_avx2,      // gemv_avx2.cpp (dequant.cpp's chunked_row_dot)
  intdot_avx2,            // intdot_avx2.cpp
  gemm_avx2,              // gemm_avx2.cpp
  gemv_plain_avx512,      // gemv_avx512.cpp
  intdot_avx512_vnni,     // intdot_avx512_vnni.cpp
  kquant_avx512_vnni,     // intdot_avx512_vnni.cpp
  gemm_avx512,            // gemm_avx512.cpp
};

const char* kernel_name(Kernel k) {
  switch (k) {
    case Kernel::scalar_gemv:
      return "scalar_gemv";
    case Kernel::blas_gemm:
      return "blas_gemm";
    case Kernel::gemv_plain_avx2:
      return "gemv_plain_avx2";
    case Kernel::gemv_dequantized_avx2:
      return "gemv_dequantized_avx2";
    case Kernel::gemv_chunked_avx2:
      return "gemv_chunked_avx2";
    case Kernel::intdot_avx2:
      return "intdot_avx2";
    case Kernel::gemm_avx2:
      return "gemm_avx2";
    case Kernel::gemv_plain_avx512:
      return "gemv_plain_avx512";
    case Kernel::intdot_avx512_vnni:
      return "intdot_avx512_vnni";
    case Kernel::kquant_avx512_vnni:
      return "kquant_avx512_vnni";
    case Kernel::gemm_avx512:
      return "gemm_avx512";
  }
  return "?";
}

// Sets of weight types, one bit per DType.
using Types = uint32_t;
constexpr Types of(std::initializer_list<DType> ts) {
  Types s = 0;
  for (DType t : ts) s |= Types{1} << static_cast<int>(t);
  return s;
}
constexpr Types kPlain = of({DType::F32, DType::F16, DType::BF16});
constexpr Types kQ48 = of({DType::Q8_0, DType::Q4_0, DType::Q4_1});
constexpr Types kIq4 = of({DType::IQ4_NL, DType::IQ4_XS});
constexpr Types kQ5 = of({DType::Q5_0, DType::Q5_1});
constexpr Types kKQuants = of({DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K});
constexpr Types kAll = kPlain | kQ48 | kIq4 | kQ5 | kKQuants;
constexpr Types kChunked = kIq4 | kQ5 | kKQuants;  // dequant.h's is_chunked_type

struct Entry {
  Types types;
  int n_min, n_max;  // tokens
  Isa needs;         // the lowest instruction set the kernel runs on
  Kernel kernel;
};

constexpr int kAnyN = 1 << 30;

// ---- the dispatch table: (type, n, instruction set) -> kernel ------------------
// The first entry whose types hold the weights' type, whose n range holds the
// number of tokens and whose instruction set the kernels may use runs. A
// token's outputs do not depend on n or the other tokens within gemm_avx2 and
// gemm_avx512 (at any n, 1 included: set_cpu_batch_invariant routes every n
// there) and gemv_plain_avx2; gemv_dequantized_avx2 and gemv_chunked_avx2
// keep more accumulators per token at small n, so their sums change at n = 3
// and 5 (for some types at 2); blas_gemm is not invariant. Kernels differ from
// each other only in float summation order and (integer dots) in the
// activations' rounding to 2^-21..2^-24 of a lane's largest.
constexpr Entry kTable[] = {
    // Batched pass (n > 8, compute-bound): one fused dequantize + GEMM for every type.
    {kAll, kGemvMaxN + 1, kAnyN, Isa::avx512, Kernel::gemm_avx512},
    {kAll, kGemvMaxN + 1, kAnyN, Isa::avx2, Kernel::gemm_avx2},
    {kAll, kGemvMaxN + 1, kAnyN, Isa::scalar, Kernel::blas_gemm},  // not batch-invariant
    // GEMV (n <= 8, memory-bound): the least work per weight byte.
    // K-quants on the Q8_0-prepared integer dot where that beats dequantizing
    // to fp32 (gemv_chunked_avx2, below): Q2_K, Q3_K, Q4_K at every n, Q5_K
    // up to 2 tokens, Q6_K for one (4096^2 matrices out of cache).
    {of({DType::Q2_K, DType::Q3_K, DType::Q4_K}), 1, kGemvMaxN, Isa::avx512_vnni, Kernel::kquant_avx512_vnni},
    {of({DType::Q5_K}), 1, 2, Isa::avx512_vnni, Kernel::kquant_avx512_vnni},
    {of({DType::Q6_K}), 1, 1, Isa::avx512_vnni, Kernel::kquant_avx512_vnni},
    // The 4-, 5- and 8-bit block types on VPDPBUSD, 64 byte products per instruction.
    {kQ48 | kQ5 | kIq4, 1, kGemvMaxN, Isa::avx512_vnni, Kernel::intdot_avx512_vnni},
    {kPlain, 1, kGemvMaxN, Isa::avx512, Kernel::gemv_plain_avx512},
    // Without VNNI: one token on VPMADDWD integer dots (IQ4 as Q8_0 blocks after a
    // level lookup); from two tokens, dequantizing each block once to fp32 costs
    // less than an integer dot per token.
    {kQ48 | kIq4, 1, 1, Isa::avx2, Kernel::intdot_avx2},
    {kQ48, 2, kGemvMaxN, Isa::avx2, Kernel::gemv_dequantized_avx2},
    {kPlain, 1, kGemvMaxN, Isa::avx2, Kernel::gemv_plain_avx2},
    {kChunked, 1, kGemvMaxN, Isa::avx2, Kernel::gemv_chunked_avx2},
    // No AVX2: dequantize a row, dot it with each token.
    {kAll, 1, kGemvMaxN, Isa::scalar, Kernel::scalar_gemv},
};

Kernel lookup(DType t, int n, Isa isa) {
  for (const Entry& e : kTable)
    if ((e.types >> static_cast<int>(t) & 1) && n >= e.n_min && n <= e.n_max && e.needs <= isa) return e.kernel;
  return n > kGemvMaxN ? Kernel::blas_gemm : Kernel::scalar_gemv;  // not reached: the scalar entries cover all
}

constexpr int kTypes = static_cast<int>(DType::IQ4_XS) + 1;
// Per type, the kernel for n = 1..kGemvMaxN (index n - 1) and for n > kGemvMaxN (last).
using KernelTable = std::array<std::array<Kernel, kGemvMaxN + 1>, kTypes>;

KernelTable make_table(Isa isa) {
  KernelTable k{};
  for (int t = 0; t < kTypes; ++t)
    for (int n = 1; n <= kGemvMaxN + 1; ++n) k[t][n - 1] = lookup(static_cast<DType>(t), n, isa);
  return k;
}

const KernelTable& kernels() {
  static const KernelTable table = make_table(kernel_isa());
  return table;
}

void run(Kernel k, const WeightView& w, const float* x, int n, float* y) {
  switch (k) {
    case Kernel::scalar_gemv:
      return scalar::gemv(w, x, n, y);
    case Kernel::blas_gemm:
      return scalar::gemm_blas(w, x, n, y);
#ifdef REDWOOD_AVX2
    case Kernel::gemv_plain_avx2:
      return gemv_avx2::gemv_plain(w, x, n, y);
    case Kernel::gemv_dequantized_avx2:
      return gemv_avx2::gemv_dequantized(w, x, n, y);
    case Kernel::gemv_chunked_avx2:
      return gemv_avx2::gemv_chunked(w, x, n, y);
    case Kernel::intdot_avx2:
      return intdot_avx2::gemv(w, x, n, y);
    case Kernel::gemm_avx2:
      return gemm_avx2::gemm(w, x, n, y);
#endif
#ifdef REDWOOD_AVX512_KERNELS
    case Kernel::gemv_plain_avx512:
      return gemv_avx512::gemv_plain(w, x, n, y);
    case Kernel::intdot_avx512_vnni:
      return intdot_avx512_vnni::gemv(w, x, n, y);
    case Kernel::kquant_avx512_vnni:
      return intdot_avx512_vnni::gemv_kquant(w, x, n, y);
    case Kernel::gemm_avx512:
      return gemm_avx512::gemm(w, x, n, y);
#endif
    default:  // a kernel this build does not hold: kernel_isa() never selects it
      throw Error(std::string("CPU kernel ") + kernel_name(k) + " is not in this build");
  }
}

Isa select_isa() {
  const Isa best = best_isa();
  const char* env = std::getenv("REDWOOD_ISA");
  if (!env || !*env) return best;
  for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512, Isa::avx512_vnni})
    if (std::strcmp(env, isa_name(isa)) == 0) {
      if (isa > best)
        throw Error(std::string("REDWOOD_ISA=") + env + ": this CPU or build has only " + isa_name(best));
      return isa;
    }
  throw Error(std::string("REDWOOD_ISA=") + env + ": unknown (scalar, avx2, avx512 or avx512vnni)");
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::scalar:
      return "scalar";
    case Isa::avx2:
      return "avx2";
    case Isa::avx512:
      return "avx512";
    case Isa::avx512_vnni:
      return "avx512vnni";
  }
  return "?";
}

Isa best_isa() {
#if defined(REDWOOD_AVX2) && defined(__x86_64__)
  __builtin_cpu_init();
#ifdef REDWOOD_AVX512_KERNELS
  // What REDWOOD_TARGET_AVX512_BEGIN / _VNNI_BEGIN (simd.h) compile for.
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512cd"))
    return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vbmi") ? Isa::avx512_vnni
                                                                                       : Isa::avx512;
#endif
  return Isa::avx2;  // the build's baseline: nothing runs without it
#else
  return Isa::scalar;
#endif
}

Isa kernel_isa() {
  static const Isa isa = select_isa();
  return isa;
}

const char* matmul_kernel(DType t, int n, Isa isa) {
  return kernel_name(lookup(t, n, isa));
}

namespace {
std::atomic<bool> g_batch_invariant{false};
}  // namespace

void matmul(const WeightView& w, const float* x, int n, float* y) {
  if (n <= 0) return;
  const auto& row = kernels()[static_cast<int>(w.type)];
  const bool batched = g_batch_invariant.load(std::memory_order_relaxed);
  run(row[batched ? kGemvMaxN : std::min(n, kGemvMaxN + 1) - 1], w, x, n, y);
}

void dequantize_rows(const WeightView& w, int64_t r0, int64_t nrows, float* out) {
#ifdef REDWOOD_AVX2
  if (kernel_isa() >= Isa::avx2) {
    for (int64_t i = 0; i < nrows; ++i)
      gemv_avx2::dequant_span(w.type, row_ptr(w, r0 + i), w.cols, out + i * w.cols);
    return;
  }
#endif
  for (int64_t i = 0; i < nrows; ++i) scalar::dequant_row(w.type, row_ptr(w, r0 + i), w.cols, out + i * w.cols);
}

}  // namespace redwood::cpu

namespace redwood {
void set_cpu_batch_invariant(bool on) {
  cpu::g_batch_invariant.store(on, std::memory_order_relaxed);
}
bool cpu_batch_invariant() {
  return cpu::g_batch_invariant.load(std::memory_order_relaxed);
}
}  // namespace redwood
