// CPU matrix kernels: y[t][r] = sum_c W[r][c] x[t][c], weights in stored type.
//  - n <= kGemvMaxN: fused dequantize-dot; each weight row is read once for all n tokens
//    (memory-bound: the decode and small-tree case).
//    Quantized types use integer dot products where the CPU has a kernel for
//    them (AVX-512 VNNI: Q4_0/Q4_1/Q5_0/Q5_1/Q8_0, IQ4_NL/IQ4_XS, Q2_K..Q6_K;
//    AVX2 VPMADDWD: Q4_0/Q4_1/Q8_0, IQ4_NL/IQ4_XS at one token) over
//    activations rounded to 2^-21..2^-24 of each lane's largest element.
//  - larger n (compute-bound: prefill and large trees): a fused dequantize + GEMM
//    (rows dequantized per 256-column chunk, activations transposed into
//    token panels, a register-blocked FMA micro-kernel; 512-bit with AVX-512,
//    256-bit with AVX2). Each output is one sequential FMA chain over the
//    columns, so results do not depend on n (batch-invariant). Without AVX2: a
//    block of rows is dequantized to float once, then multiplied by all n tokens
//    with OpenBLAS sgemm.
// Which kernel runs for a (type, n) on which instruction set is the table in
// matmul.cpp; one build holds the AVX2 and AVX-512 kernels and picks the best
// set the CPU has, once, at the first call (REDWOOD_ISA picks a lower one).
// Row blocks run in parallel on oneTBB; OpenBLAS runs single-threaded inside a task.
#pragma once
#include <cstdint>

#include "kernels/backend.h"

namespace redwood::cpu {

constexpr int kGemvMaxN = 8;

void matmul(const WeightView& w, const float* x, int n, float* y);
// Reference: dequantize-then-dot in double precision, single thread (tests only).
void matmul_reference(const WeightView& w, const float* x, int n, float* y);
// Dequantize rows [r0, r0 + nrows) of w into out[nrows][cols].
void dequantize_rows(const WeightView& w, int64_t r0, int64_t nrows, float* out);

// The instruction sets of the CPU kernels, lowest first. avx512: F, BW, DQ,
// VL, CD (x86-64-v4); avx512_vnni: also VNNI and VBMI (Ice Lake, Zen 4 and later).
enum class Isa { scalar, avx2, avx512, avx512_vnni };
// "scalar", "avx2", "avx512", "avx512vnni": the names REDWOOD_ISA takes.
const char* isa_name(Isa isa);
// The best set both this build and this CPU have.
Isa best_isa();
// The set the kernels use: best_isa(), or the one the environment variable
// REDWOOD_ISA names (throws Error if it is unknown or above best_isa()).
// Chosen once, at the first call.
Isa kernel_isa();
// The kernel that matmul runs for weights of type t and n tokens on `isa`
// (the dispatch table's entry), e.g. "intdot_avx512_vnni" or "gemm_avx2".
const char* matmul_kernel(DType t, int n, Isa isa);

}  // namespace redwood::cpu
