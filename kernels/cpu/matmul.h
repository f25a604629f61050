// CPU matrix kernels: y[t][r] = sum_c W[r][c] x[t][c], weights in stored type.
//  - n <= kGemvMaxN: fused dequantize-dot; each weight row is read once for all n tokens
//    (memory-bound: the decode and small-tree case).
//  - larger n (compute-bound: prefill and large trees): with AVX-512, a fused
//    dequantize + GEMM (row tiles dequantized per 256-column chunk, activations
//    transposed into 64-token panels, a register-blocked 512-bit FMA micro-kernel).
//    Each output is one sequential FMA chain over the columns, so results do not
//    depend on n (batch-invariant). Without AVX-512: a block of rows is dequantized
//    to float once, then multiplied by all n tokens with OpenBLAS sgemm.
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
