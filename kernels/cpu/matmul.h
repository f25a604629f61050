// CPU matrix kernels: y[t][r] = sum_c W[r][c] x[t][c], weights in stored type.
//  - n <= kGemvMaxN: fused dequantize-dot; each weight row is read once for all n tokens
//    (memory-bound: the decode and small-tree case).
//  - larger n: a block of rows is dequantized to float once, then multiplied by all
//    n tokens with OpenBLAS sgemm (compute-bound: prefill and large trees).
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
