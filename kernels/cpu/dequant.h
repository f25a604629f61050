// Dequantization and dot products for the block types without an integer dot
// kernel (Q5_0, Q5_1, the K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and the
// non-linear IQ4_NL, IQ4_XS: the types of llama.cpp's Q2_K ... Q6_K and IQ4_*
// files and their fallbacks). Both work
// on 32-element sub-blocks dequantized to fp32 vectors. Values are exactly
// math::dequant_* (kernels/common/math.h), the per-element reference that the
// CUDA backend uses too.
#pragma once
#include <cstdint>

#include "kernels/common/dtype.h"

namespace redwood::cpu {

// True for the types above.
constexpr bool is_chunked_type(DType t) {
  return t == DType::Q5_0 || t == DType::Q5_1 || t == DType::Q2_K || t == DType::Q3_K || t == DType::Q4_K ||
         t == DType::Q5_K || t == DType::Q6_K || t == DType::IQ4_NL || t == DType::IQ4_XS;
}

// Dequantizes `cols` weights from p (a whole number of blocks of a chunked type)
// into out. AVX2 where the build has it, else scalar; the same values either way.
void dequant_chunked(DType t, const uint8_t* p, int64_t cols, float* out);

// True where the single-token chunked_row_dot reads xs (the mins of Q4_K and Q5_K).
constexpr bool needs_sums_of_32(DType t) {
  return t == DType::Q4_K || t == DType::Q5_K;
}

// Dot products of one row of a chunked type with N (1..8) token vectors, ldx
// floats apart: out[k]. Each 32-element sub-block is dequantized once into
// registers (the values above), then takes 4 fp32 FMAs per token. For one
// token, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS take their scales out of the sums instead;
// Q4_K and Q5_K then also read xs, the token's sums over each 32 elements
// (sums_of_32; ignored otherwise). AVX2 builds only.
template <int N>
void chunked_row_dot(DType t, const uint8_t* p, int64_t cols, const float* x, int64_t ldx, const float* xs, float* out);
// xs[b] = x[32 b] + ... + x[32 b + 31] for the cols / 32 groups (AVX2 builds only).
void sums_of_32(const float* x, int64_t cols, float* xs);

// The scalar reference (one element at a time through math::dequant_*).
void dequant_chunked_scalar(DType t, const uint8_t* p, int64_t cols, float* out);

}  // namespace redwood::cpu
