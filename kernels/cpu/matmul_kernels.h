// The CPU matmul kernel families, one file each, behind matmul.cpp's dispatch
// table (internal to kernels/cpu):
//   matmul_scalar.cpp       scalar reference, scalar GEMV, OpenBLAS GEMM      any CPU
//   gemv_avx2.cpp           plain-type GEMV, dequantize-then-FMA GEMV,        AVX2
//                           the chunked types' GEMV (dequant.cpp), dequant_span
//   gemv_avx512.cpp         plain-type GEMV, 512-bit                          AVX-512
//   intdot_avx2.cpp         quantized single-token GEMV, integer dot VPMADDWD AVX2
//   intdot_avx512_vnni.cpp  quantized GEMV (Q4/Q5/Q8/IQ4 and K-quants),       AVX-512 VNNI + VBMI
//                           integer dot VPDPBUSD
//   gemm_avx2.cpp           fused dequantize + GEMM, 256-bit                  AVX2
//   gemm_avx512.cpp         fused dequantize + GEMM, 512-bit                  AVX-512
// The AVX-512 files are compiled for their instruction set between
// REDWOOD_TARGET_AVX512_BEGIN/END (simd.h) whatever the build's baseline, and
// are called only where the CPU has it. Every family's gemv entry takes
// 1 <= n <= kGemvMaxN tokens, x[n][cols], y[n][rows].
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/backend.h"
#include "kernels/common/dtype.h"
#include "kernels/cpu/simd.h"

namespace redwood::cpu {

// Rows longer than this (in columns) are processed several at a time at n = 1
// (eight with AVX-512, four with AVX2: an activation vector that long does not
// stay in L1 while one row's weights stream past).
constexpr int64_t kLongRow = 4096;

// Rows per oneTBB task of a GEMV: about 16k weights. Single-token passes over
// long rows, or on an integer dot kernel (which reads rows in groups), take at
// least 16 (blocked_range splits down to [grain/2, grain] rows: groups of
// eight or four stay whole).
inline int64_t gemv_grain(int64_t cols, int n, bool grouped_rows) {
  int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1));
  if (n == 1 && (cols > kLongRow || grouped_rows)) grain = std::max<int64_t>(grain, 16);
  return grain;
}

inline const uint8_t* row_ptr(const WeightView& w, int64_t r) {
  return static_cast<const uint8_t*>(w.data) + static_cast<uint64_t>(r) * *row_bytes(w.type, w.cols);
}

// Where a software prefetch `ahead` bytes further along a row's stream lands
// when R rows (row_bytes apart, consecutive) are read side by side, R at a
// time: that row's stream continues in the same row of the next R rows, not
// in the next row, which the same call is already reading. at(offset) is the
// distance from the byte at `offset` in row r to the byte `ahead` further in
// row r's stream: offset + ahead within the row, else (R - 1) rows further
// per row boundary crossed. One division per call. Used by every GEMV that
// reads rows side by side (gemv_avx2, gemv_avx512, intdot_avx2, intdot_avx512_vnni).
template <int R>
struct RowStreamAhead {
  size_t near, wrap_rows_bytes, wrap_from;
  RowStreamAhead(size_t ahead, size_t rb) {
    if (R == 1 || rb == 0) {
      near = ahead;
      wrap_rows_bytes = 0;
      wrap_from = ~size_t{0};
    } else {  // ahead = q rows + rem bytes: q whole rows of the stream are q * R rows in memory
      const size_t q = ahead / rb, rem = ahead % rb;
      near = rem + q * R * rb;
      wrap_rows_bytes = (R - 1) * rb;
      wrap_from = rb - rem;  // offsets from here on cross one more row boundary
    }
  }
  size_t at(size_t offset) const { return near + (offset >= wrap_from ? wrap_rows_bytes : 0); }
};

// Calls f.template operator()<N>() with N = n, for 1 <= n <= 8 (kGemvMaxN).
template <class F>
void with_tokens(int n, F&& f) {
  switch (n) {
    case 1:
      return f.template operator()<1>();
    case 2:
      return f.template operator()<2>();
    case 3:
      return f.template operator()<3>();
    case 4:
      return f.template operator()<4>();
    case 5:
      return f.template operator()<5>();
    case 6:
      return f.template operator()<6>();
    case 7:
      return f.template operator()<7>();
    default:
      return f.template operator()<8>();
  }
}

#ifdef REDWOOD_AVX2
// Hardware (F16C) half -> float for block scales; bit-identical to math::f16_to_f32.
inline float h2f(const uint8_t* p) {
  uint16_t h;
  memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}
// The same for a half with at least two more readable bytes after it (a block
// scale followed by the block's quants): one 32-bit load into the vector
// register, where a 16-bit one is an insert (two operations, without
// AVX512-FP16's VMOVW) in every block of the dequantizing loops.
inline float h2f_in_block(const uint8_t* p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(v))));
}
#endif

// ---- scalar reference and fallback (matmul_scalar.cpp) --------------------------
namespace scalar {
// One row of any type dequantized, element by element (math::dequant_*).
void dequant_row(DType t, const uint8_t* p, int64_t cols, float* out);
// Dequantized row dotted with each token (simd.h's dot).
void gemv(const WeightView& w, const float* x, int n, float* y);
// Blocks of rows dequantized to fp32, then OpenBLAS sgemm (not batch-invariant).
void gemm_blas(const WeightView& w, const float* x, int n, float* y);
}  // namespace scalar

#ifdef REDWOOD_AVX2
// ---- AVX2 (gemv_avx2.cpp, intdot_avx2.cpp, gemm_avx2.cpp) ------------------------
namespace gemv_avx2 {
// F32, F16, BF16: fp32 FMAs on the converted weights.
void gemv_plain(const WeightView& w, const float* x, int n, float* y);
// Q8_0, Q4_0, Q4_1 at 2..8 tokens: each block dequantized once, fp32 FMAs per token.
void gemv_dequantized(const WeightView& w, const float* x, int n, float* y);
// The chunked types (dequant.h): dequant.cpp's chunked_row_dot, row by row.
void gemv_chunked(const WeightView& w, const float* x, int n, float* y);
// `cols` weights from p (a whole number of blocks) as fp32: scalar::dequant_row's values.
void dequant_span(DType t, const uint8_t* p, int64_t cols, float* out);
}  // namespace gemv_avx2
namespace intdot_avx2 {
// Q8_0, Q4_0, Q4_1, IQ4_NL, IQ4_XS, one token (n = 1).
void gemv(const WeightView& w, const float* x, int n, float* y);
}  // namespace intdot_avx2
namespace gemm_avx2 {
void gemm(const WeightView& w, const float* x, int n, float* y);
}  // namespace gemm_avx2
#endif

#ifdef REDWOOD_AVX512_KERNELS
// ---- AVX-512 (gemv_avx512.cpp, intdot_avx512_vnni.cpp, gemm_avx512.cpp) ---------
namespace gemv_avx512 {
// F32, F16, BF16.
void gemv_plain(const WeightView& w, const float* x, int n, float* y);
}  // namespace gemv_avx512
namespace intdot_avx512_vnni {
// Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS.
void gemv(const WeightView& w, const float* x, int n, float* y);
// Q2_K, Q3_K, Q4_K, Q5_K, Q6_K.
void gemv_kquant(const WeightView& w, const float* x, int n, float* y);
}  // namespace intdot_avx512_vnni
namespace gemm_avx512 {
void gemm(const WeightView& w, const float* x, int n, float* y);
}  // namespace gemm_avx512
#endif

}  // namespace redwood::cpu
