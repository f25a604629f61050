// The KV cache element types a run chooses by name (--kv-type; kv_type in jobs
// and suites), apart from the cache itself (kv_cache.h): config readers check
// the name without the backend. Defined in kv_cache.cpp.
#pragma once
#include <cstdint>
#include <string>

#include "kernels/common/dtype.h"

namespace redwood {

// q8_0: ggml's Q8_0 blocks (kernels/common/math.h quantize_q8_0), 32
// elements in 34 bytes, each row quantized on its own when written.
inline constexpr const char* kKvTypeNames[] = {"f32", "f16", "bf16", "q8_0"};
// The type a name in kKvTypeNames stands for; anything else is a one-line
// redwood::Error naming `what` if not null ("--kv-type: expected f32 | f16 | bf16 | q8_0, got 'x'").
DType kv_type_from_name(const std::string& name, const char* what = "--kv-type");
// kKvTypeNames joined by `sep` ("f32 | f16 | bf16 | q8_0"), for messages and help.
std::string kv_type_list(const char* sep);
// The name in kKvTypeNames of a KV type ("q8_0"); dtype_name for any other.
std::string kv_type_name(DType t);
// Throws a one-line redwood::Error unless t is a KV cache type.
void check_kv_type(DType t);
// Bytes of one KV row of kv_dim elements of type t: 4 per element for F32, 2
// for F16 and BF16, 34 per 32 for Q8_0. Every count of KV memory (caches,
// pools, the memory plan, the cost model) goes through it. Throws a one-line
// redwood::Error unless t is a KV type and kv_dim > 0 a whole number of its
// blocks.
uint64_t kv_row_bytes(DType t, int64_t kv_dim);
// Throws a one-line redwood::Error naming `model` unless KV rows of t suit
// heads of head_dim elements: Q8_0 needs a multiple of 32 (each head's slice
// of a row is whole blocks).
void check_kv_head_dim(DType t, int head_dim, const std::string& model);

// The blocks of block_rows rows that hold `rows` positions (rounded up): how
// the pool (KvPool), admission and the planner count a sequence's rows.
// REQUIRES: rows >= 0, block_rows > 0.
constexpr int64_t kv_blocks(int64_t rows, int block_rows) {
  return (rows + block_rows - 1) / block_rows;
}
// `rows` rounded up to whole blocks: the rows a sequence of `rows` positions
// takes from the pool. REQUIRES: as kv_blocks.
constexpr int64_t kv_block_aligned_rows(int64_t rows, int block_rows) {
  return kv_blocks(rows, block_rows) * block_rows;
}

}  // namespace redwood
