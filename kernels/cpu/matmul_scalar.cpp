// Scalar reference and fallback kernels: any CPU. Rows are dequantized element
// by element (math::dequant_*, the values every other kernel reproduces);
// GEMV dots them with each token (simd.h's dot), GEMM multiplies blocks of
// them by all tokens with OpenBLAS sgemm, single-threaded inside a oneTBB task.
#include <cblas.h>
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/common/math.h"
#include "kernels/cpu/dequant.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_kernels.h"

namespace redwood::cpu {

using namespace redwood::math;

namespace scalar {

void dequant_row(DType t, const uint8_t* p, int64_t cols, float* out) {
  switch (t) {
    case DType::F32:
      memcpy(out, p, cols * 4);
      break;
    case DType::F16:
      for (int64_t c = 0; c < cols; ++c) {
        uint16_t h;
        memcpy(&h, p + 2 * c, 2);
        out[c] = f16_to_f32(h);
      }
      break;
    case DType::BF16:
      for (int64_t c = 0; c < cols; ++c) {
        uint16_t h;
        memcpy(&h, p + 2 * c, 2);
        out[c] = bf16_to_f32(h);
      }
      break;
    case DType::Q8_0:
      for (int64_t b = 0; b < cols / 32; ++b) {
        BlockQ8_0 blk;
        memcpy(&blk, p + b * sizeof(blk), sizeof(blk));
        for (int j = 0; j < 32; ++j) out[b * 32 + j] = dequant_q8_0(blk, j);
      }
      break;
    case DType::Q4_0:
      for (int64_t b = 0; b < cols / 32; ++b) {
        BlockQ4_0 blk;
        memcpy(&blk, p + b * sizeof(blk), sizeof(blk));
        for (int j = 0; j < 32; ++j) out[b * 32 + j] = dequant_q4_0(blk, j);
      }
      break;
    case DType::Q4_1:
      for (int64_t b = 0; b < cols / 32; ++b) {
        BlockQ4_1 blk;
        memcpy(&blk, p + b * sizeof(blk), sizeof(blk));
        for (int j = 0; j < 32; ++j) out[b * 32 + j] = dequant_q4_1(blk, j);
      }
      break;
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::IQ4_NL:
    case DType::IQ4_XS:
      dequant_chunked_scalar(t, p, cols, out);
      break;
  }
}

void gemv(const WeightView& w, const float* x, int n, float* y) {
  const int64_t cols = w.cols, rows = w.rows;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1));
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, rows, grain), [&](const tbb::blocked_range<int64_t>& r) {
    std::vector<float> tmp(cols);
    for (int64_t i = r.begin(); i < r.end(); ++i) {
      dequant_row(w.type, row_ptr(w, i), cols, tmp.data());
      for (int k = 0; k < n; ++k) y[k * rows + i] = dot(tmp.data(), x + k * cols, cols);
    }
  });
}

void gemm_blas(const WeightView& w, const float* x, int n, float* y) {
  const int64_t cols = w.cols, rows = w.rows;
  // Rows per block: sgemm repacks the activations once per call, so tiles are
  // large (about 2 MiB of floats, L3-resident) while leaving >= 4 tiles per thread.
  const int64_t tile_rows = std::clamp<int64_t>((2 << 20) / 4 / cols, 16, 512);
  const int64_t rb = std::max<int64_t>(16, std::min(tile_rows, rows / 8 / 16 * 16));
  tbb::enumerable_thread_specific<std::vector<float>> tiles;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, (rows + rb - 1) / rb, 1), [&](const tbb::blocked_range<int64_t>& r) {
    auto& tile = tiles.local();
    tile.resize(rb * cols);
    for (int64_t blk = r.begin(); blk < r.end(); ++blk) {
      const int64_t r0 = blk * rb;
      const int64_t nr = std::min(rb, rows - r0);
      const float* wt;
      if (w.type == DType::F32) {
        wt = static_cast<const float*>(w.data) + r0 * cols;
      } else {
        dequantize_rows(w, r0, nr, tile.data());
        wt = tile.data();
      }
      // y[:, r0:r0+nr] = x (n x cols) * wt^T (cols x nr)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, static_cast<int>(nr), static_cast<int>(cols), 1.0f, x,
                  static_cast<int>(cols), wt, static_cast<int>(cols), 0.0f, y + r0, static_cast<int>(rows));
    }
  });
}

}  // namespace scalar

void matmul_reference(const WeightView& w, const float* x, int n, float* y) {
  std::vector<float> row(w.cols);
  for (int64_t r = 0; r < w.rows; ++r) {
    scalar::dequant_row(w.type, row_ptr(w, r), w.cols, row.data());
    for (int t = 0; t < n; ++t) {
      double s = 0;
      for (int64_t c = 0; c < w.cols; ++c) s += static_cast<double>(row[c]) * x[t * w.cols + c];
      y[t * w.rows + r] = static_cast<float>(s);
    }
  }
}

}  // namespace redwood::cpu
