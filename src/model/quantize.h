// Requantization: a model's weight matrices written in another storage type
// (`redwood quantize`). Its use here is making a draft from a target one
// has — a lower-bit copy of the target disagrees with it the way a smaller
// sibling does — and the regime bench's reference draft.
//
// Rows are dequantized to fp32 (exactly kernels/common/math.h's values) and
// quantized again per block. Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 follow the
// formats' reference rounding (the gguf Python package's quantizers give the
// same bytes; tests/python/test_quantize.py checks it); Q3_K searches each
// 16-element sub-block's scale for the least squared error, then stores the
// sub-block scales as 6-bit multiples of one f16 super-block scale.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "kernels/common/dtype.h"

namespace redwood {

// Types `quantize_row` writes: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q3_K.
bool can_quantize_to(DType t);
// n floats (a whole number of t's blocks) -> row_bytes(t, n) bytes.
void quantize_row(DType t, const float* x, int64_t n, uint8_t* out);

struct QuantizeStats {
  int converted = 0, kept = 0;  // tensors requantized / copied as they were
  int fallback = 0;             // of those, written as Q4_0: rows not a whole number of 256-element blocks
  uint64_t bytes_in = 0, bytes_out = 0;
};

// Writes `to` = the GGUF model `from` with every weight matrix (2-D tensors
// whose rows are a whole number of `type`'s blocks; embeddings and LM head
// included) stored as `type`; norms and other 1-D tensors are copied as they
// are. A 256-element type (Q3_K) on rows that are not a multiple of 256 long
// writes those matrices as Q4_0 instead (counted in `fallback`). Metadata is kept (general.name gains the type). progress(done, total)
// after each tensor.
QuantizeStats quantize_model(const std::string& from, DType type, const std::string& to,
                             const std::function<void(size_t, size_t)>& progress = {});

}  // namespace redwood
