// Tree-masked grouped-query attention on the CPU (see AttentionArgs).
#pragma once
#include <cstdint>

#include "kernels/backend.h"

namespace redwood::cpu {
// Throws unless t is a KV cache element type (is_kv_type).
void check_kv_type(DType t);
void attention(const AttentionArgs& a);
// The KV cache append (Backend::write_rows) into a store of `type`: rows
// first_row .. first_row + rows - 1, F16/BF16 rounded to nearest even, Q8_0
// quantized block by block (math::quantize_q8_0; row_floats a multiple of 32,
// else throws).
void write_kv_rows(void* base, DType type, int64_t first_row, const float* src, int64_t rows, int row_floats);
// The paged append (Backend::write_rows_at): row r to row row_at[r].
void write_kv_rows_at(void* base, DType type, const int32_t* row_at, const float* src, int64_t rows, int row_floats);
// Reference: double precision, single thread (tests). One sequence: a dense
// mask built from parents, assuming an empty pending block (the n new tokens
// are the whole block), and from positions under a sliding window (block row
// j is position pos[j]). Several (seq set): each token's positions listed
// from its ancestor list and mapped through its block table.
void attention_reference(const AttentionArgs& a);
}  // namespace redwood::cpu
