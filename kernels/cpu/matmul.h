// CPU matrix kernels: y[t][r] = sum_c W[r][c] x[t][c], weights in stored type.
//  - n <= kGemvMaxN: fused dequantize-dot; each weight row is read once for all n tokens
//    (memory-bound: the decode and small-tree case).
//    Q8_0/Q4_0/Q4_1 (with AVX-512 VNNI also Q5_0/Q5_1, Q2_K..Q6_K, IQ4_NL/IQ4_XS) use integer dot
//    products (AVX-512 VNNI, or AVX2 VPMADDWD) over activations rounded to
//    2^-21..2^-24 of each lane's largest element.
//  - larger n (compute-bound: prefill and large trees): a fused dequantize + GEMM
//    (rows dequantized per 256-column chunk, activations transposed into
//    token panels, a register-blocked FMA micro-kernel; 512-bit with AVX-512,
//    256-bit with AVX2). Each output is one sequential FMA chain over the
//    columns, so results do not depend on n (batch-invariant). Without AVX2: a
//    block of rows is dequantized to float once, then multiplied by all n tokens
//    with OpenBLAS sgemm.
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

}  // namespace redwood::cpu
