// CUDA matmuls: y[t][r] = sum_c W[r][c] x[t][c].
// - n <= gemv_max_n: a dequantizing GEMV, one warp per output row, all n tokens
//   at once (weights read once per pass: the memory-bound decode/draft case);
//   each lane takes eight consecutive weights per step (wide loads for the
//   float types, one block lookup for quantized ones).
// - larger n (tree and prefill passes): W dequantized in row chunks to fp16
//   (bf16 for BF16 weights; F16 used in place) and x converted likewise (fp16
//   activations scaled per token by a power of two so they cannot overflow),
//   then cublasGemmEx on tensor cores with fp32 accumulation and fp32 output.
//   F32 weights use cublasGemmEx in fp32.
// Dequantization is math::dequant_* and, eight elements at a time for the
// K types and IQ4_XS, math::dequant8_* (kernels/common/math.h), shared with
// the CPU, whose tests check them.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/common/math.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cublas_api.h"
#include "kernels/cuda/workspace.h"
#include "src/util/error.h"

namespace redwood::cuda {
namespace {

constexpr int kMaxGemvN = kGemvMaxN;
constexpr int kWarpsPerBlock = 4;

template <DType T>
struct Row;  // element access within one weight row

// at(row, c): element c. chunk8(row, c0, v): elements [c0, c0 + 8), c0 a
// multiple of 8. For the float types chunk8 is one or two 16-byte loads (the
// caller checks that rows are 16-byte aligned); for quantized types the eight
// share one block, looked up once.
template <>
struct Row<DType::F32> {
  __device__ static float at(const uint8_t* row, int64_t c) { return reinterpret_cast<const float*>(row)[c]; }
  __device__ static void chunk8(const uint8_t* row, int64_t c0, float* v) {
    const float4* p = reinterpret_cast<const float4*>(row) + (c0 >> 2);
    const float4 a = __ldg(p), b = __ldg(p + 1);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  }
};
template <>
struct Row<DType::F16> {
  __device__ static float at(const uint8_t* row, int64_t c) {
    return math::f16_to_f32(reinterpret_cast<const uint16_t*>(row)[c]);
  }
  __device__ static void chunk8(const uint8_t* row, int64_t c0, float* v) {
    const uint4 u = __ldg(reinterpret_cast<const uint4*>(row) + (c0 >> 3));
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = math::f16_to_f32(static_cast<uint16_t>(w[i] & 0xffffu));
      v[2 * i + 1] = math::f16_to_f32(static_cast<uint16_t>(w[i] >> 16));
    }
  }
};
template <>
struct Row<DType::BF16> {
  __device__ static float at(const uint8_t* row, int64_t c) {
    return math::bf16_to_f32(reinterpret_cast<const uint16_t*>(row)[c]);
  }
  __device__ static void chunk8(const uint8_t* row, int64_t c0, float* v) {
    const uint4 u = __ldg(reinterpret_cast<const uint4*>(row) + (c0 >> 3));
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = __uint_as_float(w[i] << 16);
      v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  }
};

// Block types: at() through the per-element math::dequant_*, chunk8() through
// it too (RD_BLOCK_ROW) or through math::dequant8_* (RD_SUPER_ROW below).
#define RD_BLOCK_AT(BLOCK, ELEMS, FN)                                                                   \
  __device__ static float at(const uint8_t* row, int64_t c) {                                           \
    return math::FN(reinterpret_cast<const math::BLOCK*>(row)[c / ELEMS], static_cast<int>(c % ELEMS)); \
  }
#define RD_BLOCK_ROW(TYPE, BLOCK, ELEMS, FN)                                        \
  template <>                                                                       \
  struct Row<DType::TYPE> {                                                         \
    RD_BLOCK_AT(BLOCK, ELEMS, FN)                                                   \
    __device__ static void chunk8(const uint8_t* row, int64_t c0, float* v) {       \
      const math::BLOCK& b = reinterpret_cast<const math::BLOCK*>(row)[c0 / ELEMS]; \
      const int j0 = static_cast<int>(c0 % ELEMS);                                  \
      _Pragma("unroll") for (int i = 0; i < 8; ++i) v[i] = math::FN(b, j0 + i);     \
    }                                                                               \
  };

// Eight bytes at a 2-aligned address (quantized blocks are only 2-aligned).
__device__ inline uint2 load8_a2(const uint8_t* p) {
  const auto* h = reinterpret_cast<const unsigned short*>(p);
  return make_uint2(static_cast<uint32_t>(__ldg(h)) | static_cast<uint32_t>(__ldg(h + 1)) << 16,
                    static_cast<uint32_t>(__ldg(h + 2)) | static_cast<uint32_t>(__ldg(h + 3)) << 16);
}

// Q8_0, Q4_0 and Q4_1 (the common decode types): chunk8 reads the eight codes
// as four 16-bit loads and unpacks them in registers. Each value is the same
// float expression as math::dequant_* (scale * code [+ min]).
template <>
struct Row<DType::Q8_0> {
  RD_BLOCK_AT(BlockQ8_0, 32, dequant_q8_0)
  __device__ static void chunk8(const uint8_t* row, int64_t c0, float* v) {
    const math::BlockQ8_0& b = reinterpret_cast<const math::BlockQ8_0*>(row)[c0 / 32];
    const uint2 q = load8_a2(reinterpret_cast<const uint8_t*>(b.qs) + c0 % 32);
    const float d = math::f16_to_f32(b.d);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[i] = d * static_cast<float>(static_cast<int8_t>(q.x >> (8 * i)));
      v[4 + i] = d * static_cast<float>(static_cast<int8_t>(q.y >> (8 * i)));
    }
  }
};
// 4-bit blocks: code j < 16 is the low nibble of qs[j], j >= 16 the high
// nibble of qs[j - 16]; eight consecutive codes are one nibble of eight bytes.
template <>
struct Row<DType::Q4_0> {
  RD_BLOCK_AT(BlockQ4_0, 32, dequant_q4_0)
  __device__ static void chunk8(const uint8_t* row, int64_t c0, float* v) {
    const math::BlockQ4_0& b = reinterpret_cast<const math::BlockQ4_0*>(row)[c0 / 32];
    const int j0 = static_cast<int>(c0 % 32);
    const uint2 q = load8_a2(b.qs + (j0 & 15));
    const int sh = j0 & 16 ? 4 : 0;
    const float d = math::f16_to_f32(b.d);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[i] = d * static_cast<float>(static_cast<int>((q.x >> (8 * i + sh)) & 0xfu) - 8);
      v[4 + i] = d * static_cast<float>(static_cast<int>((q.y >> (8 * i + sh)) & 0xfu) - 8);
    }
  }
};
template <>
struct Row<DType::Q4_1> {
  RD_BLOCK_AT(BlockQ4_1, 32, dequant_q4_1)
  __device__ static void chunk8(const uint8_t* row, int64_t c0, float* v) {
    const math::BlockQ4_1& b = reinterpret_cast<const math::BlockQ4_1*>(row)[c0 / 32];
    const int j0 = static_cast<int>(c0 % 32);
    const uint2 q = load8_a2(b.qs + (j0 & 15));
    const int sh = j0 & 16 ? 4 : 0;
    const float d = math::f16_to_f32(b.d), m = math::f16_to_f32(b.m);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[i] = d * static_cast<float>((q.x >> (8 * i + sh)) & 0xfu) + m;
      v[4 + i] = d * static_cast<float>((q.y >> (8 * i + sh)) & 0xfu) + m;
    }
  }
};
RD_BLOCK_ROW(Q5_0, BlockQ5_0, 32, dequant_q5_0)
RD_BLOCK_ROW(Q5_1, BlockQ5_1, 32, dequant_q5_1)
RD_BLOCK_ROW(IQ4_NL, BlockIQ4_NL, 32, dequant_iq4_nl)
#undef RD_BLOCK_ROW

// 256-element super-blocks with per-sub-block scales (the K types, IQ4_XS):
// chunk8 decodes the sub-block's scale once for its eight elements
// (math::dequant8_*, equal to the per-element values bit for bit; CPU-tested),
// where the per-element form unpacked the 6-bit scales eight times.
#define RD_SUPER_ROW(TYPE, BLOCK, FN)                                                                          \
  template <>                                                                                                  \
  struct Row<DType::TYPE> {                                                                                    \
    RD_BLOCK_AT(BLOCK, 256, dequant_##FN)                                                                      \
    __device__ static void chunk8(const uint8_t* row, int64_t c0, float* v) {                                  \
      math::dequant8_##FN(reinterpret_cast<const math::BLOCK*>(row)[c0 / 256], static_cast<int>(c0 % 256), v); \
    }                                                                                                          \
  };
RD_SUPER_ROW(Q2_K, BlockQ2_K, q2_k)
RD_SUPER_ROW(Q3_K, BlockQ3_K, q3_k)
RD_SUPER_ROW(Q4_K, BlockQ4_K, q4_k)
RD_SUPER_ROW(Q5_K, BlockQ5_K, q5_k)
RD_SUPER_ROW(Q6_K, BlockQ6_K, q6_k)
RD_SUPER_ROW(IQ4_XS, BlockIQ4_XS, iq4_xs)
#undef RD_SUPER_ROW
#undef RD_BLOCK_AT

// Sums each token's per-lane partial over the warp; lane 0 writes y[t][r].
template <int N>
__device__ __forceinline__ void warp_sum_store(const float* acc, int lane, float* y, int64_t rows, int64_t r) {
#pragma unroll
  for (int t = 0; t < N; ++t) {
    float v = acc[t];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) y[static_cast<int64_t>(t) * rows + r] = v;
  }
}

// One warp per row r; lanes stride over the columns (consecutive lanes read
// consecutive elements, so quantized blocks are read by whole warps).
template <DType T, int N>
__global__ void gemv_kernel(const uint8_t* w, int64_t rows, int64_t cols, uint64_t row_bytes, const float* x,
                            float* y) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (r >= rows) return;
  const uint8_t* row = w + static_cast<uint64_t>(r) * row_bytes;
  float acc[N];
#pragma unroll
  for (int t = 0; t < N; ++t) acc[t] = 0.0f;
  for (int64_t c = lane; c < cols; c += 32) {
    const float wv = Row<T>::at(row, c);
#pragma unroll
    for (int t = 0; t < N; ++t) acc[t] += wv * x[static_cast<int64_t>(t) * cols + c];
  }
  warp_sum_store<N>(acc, lane, y, rows, r);
}

// The same with eight consecutive elements per lane and step (cols % 8 == 0,
// x 16-byte aligned; for F32/F16/BF16 the rows too): a warp reads 256
// contiguous weights per step as wide loads, x as float4 pairs, and the
// unrolled steps keep several loads in flight (a warp-per-row loop of single
// elements waits on memory latency, not bandwidth).
template <DType T, int N>
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    gemv8_kernel(const uint8_t* __restrict__ w, int64_t rows, int64_t cols, uint64_t row_bytes,
                 const float* __restrict__ x, float* __restrict__ y) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (r >= rows) return;
  const uint8_t* row = w + static_cast<uint64_t>(r) * row_bytes;
  float acc[N];
#pragma unroll
  for (int t = 0; t < N; ++t) acc[t] = 0.0f;
  const int64_t chunks = cols >> 3;
#pragma unroll 4
  for (int64_t ch = lane; ch < chunks; ch += 32) {
    float wv[8];
    Row<T>::chunk8(row, ch << 3, wv);
#pragma unroll
    for (int t = 0; t < N; ++t) {
      const float4* xp = reinterpret_cast<const float4*>(x + static_cast<int64_t>(t) * cols) + (ch << 1);
      const float4 a = __ldg(xp), b = __ldg(xp + 1);
      float s = acc[t];
      s = fmaf(wv[0], a.x, s);
      s = fmaf(wv[1], a.y, s);
      s = fmaf(wv[2], a.z, s);
      s = fmaf(wv[3], a.w, s);
      s = fmaf(wv[4], b.x, s);
      s = fmaf(wv[5], b.y, s);
      s = fmaf(wv[6], b.z, s);
      acc[t] = fmaf(wv[7], b.w, s);
    }
  }
  warp_sum_store<N>(acc, lane, y, rows, r);
}

template <DType T>
void launch_gemv_n(cudaStream_t st, const WeightView& w, const float* x, int n, float* y) {
  const uint64_t rb = *row_bytes(w.type, static_cast<uint64_t>(w.cols));
  const auto* base = static_cast<const uint8_t*>(w.data);
  const unsigned grid = grid_for(static_cast<size_t>(w.rows), kWarpsPerBlock);
  const unsigned threads = 32 * kWarpsPerBlock;
  const bool float_type = T == DType::F32 || T == DType::F16 || T == DType::BF16;
  const bool wide = w.cols % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                    (!float_type || (reinterpret_cast<uintptr_t>(base) % 16 == 0 && rb % 16 == 0));
  // Tokens in groups of up to 8: each group reads the weights once more.
  for (int t0 = 0; t0 < n; t0 += kMaxGemvN) {
    const int m = std::min(kMaxGemvN, n - t0);
    const float* xs = x + static_cast<int64_t>(t0) * w.cols;
    float* ys = y + static_cast<int64_t>(t0) * w.rows;
    switch (m) {
#define RD_GEMV_CASE(K)                                                               \
  case K:                                                                             \
    if (wide)                                                                         \
      gemv8_kernel<T, K><<<grid, threads, 0, st>>>(base, w.rows, w.cols, rb, xs, ys); \
    else                                                                              \
      gemv_kernel<T, K><<<grid, threads, 0, st>>>(base, w.rows, w.cols, rb, xs, ys);  \
    break;
      RD_GEMV_CASE(1)
      RD_GEMV_CASE(2)
      RD_GEMV_CASE(3)
      RD_GEMV_CASE(4)
      RD_GEMV_CASE(5)
      RD_GEMV_CASE(6)
      RD_GEMV_CASE(7)
      RD_GEMV_CASE(8)
#undef RD_GEMV_CASE
    }
    RD_CUDA_LAUNCHED("gemv_kernel");
  }
}

// Dequantize rows [r0, r0 + count) to half / bf16 (Out).
template <DType T, typename Out>
__global__ void dequant_kernel(const uint8_t* w, int64_t r0, int64_t count, int64_t cols, uint64_t row_bytes,
                               Out* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count * cols) return;
  const int64_t r = i / cols, c = i % cols;
  const float v = Row<T>::at(w + static_cast<uint64_t>(r0 + r) * row_bytes, c);
  if constexpr (std::is_same_v<Out, float>)
    out[i] = v;
  else if constexpr (std::is_same_v<Out, __half>)
    out[i] = __float2half_rn(v);
  else
    out[i] = __float2bfloat16_rn(v);
}

// Per token t, a power-of-two scale s_t with max|x_t| / s_t < 2^15: fp16
// activations cannot overflow (|x| > 65504 happens in real models' FFN
// inputs), and dividing by a power of two loses no precision. One block per row.
__global__ void row_scale_kernel(const float* x, int64_t cols, float* scales) {
  __shared__ float red[32];
  const float* xi = x + static_cast<int64_t>(blockIdx.x) * cols;
  float m = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, fabsf(xi[c]));
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (unsigned w = 1; w < (blockDim.x + 31) / 32; ++w) m = fmaxf(m, red[w]);
    m = fmaxf(m, red[0]);
    int e = 0;
    (void)frexpf(m, &e);  // m < 2^e
    scales[blockIdx.x] = (m > 0.0f && isfinite(m)) ? ldexpf(1.0f, e - 15) : 1.0f;
  }
}

template <typename Out>
__global__ void convert_kernel(const float* x, size_t count, int64_t cols, const float* scales, Out* out) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  if constexpr (std::is_same_v<Out, __half>)
    out[i] = __float2half_rn(x[i] / scales[i / cols]);
  else
    out[i] = __float2bfloat16_rn(x[i]);
}

// y[t][r] *= s_t (y is [n][rows]).
__global__ void scale_rows_kernel(float* y, int64_t rows, size_t count, const float* scales) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) y[i] *= scales[i / rows];
}

template <DType T>
__global__ void embed_kernel(const uint8_t* e, int64_t rows, int64_t cols, uint64_t row_bytes, const int32_t* ids,
                             int n, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(n) * cols) return;
  const int64_t t = i / cols, c = i % cols;
  const int32_t id = ids[t];
  // Ids are validated on the host; an out-of-range id writes NaN, never reads out of bounds.
  out[i] =
      (id >= 0 && id < rows) ? Row<T>::at(e + static_cast<uint64_t>(id) * row_bytes, c) : __int_as_float(0x7fc00000);
}

// Runs the statement with constexpr DType T = t (C++17 device code: no template lambdas).
#define RD_DTYPE_DISPATCH(t, ...)        \
  switch (t) {                           \
    case DType::F32: {                   \
      constexpr DType T = DType::F32;    \
      __VA_ARGS__;                       \
    } break;                             \
    case DType::F16: {                   \
      constexpr DType T = DType::F16;    \
      __VA_ARGS__;                       \
    } break;                             \
    case DType::BF16: {                  \
      constexpr DType T = DType::BF16;   \
      __VA_ARGS__;                       \
    } break;                             \
    case DType::Q8_0: {                  \
      constexpr DType T = DType::Q8_0;   \
      __VA_ARGS__;                       \
    } break;                             \
    case DType::Q4_0: {                  \
      constexpr DType T = DType::Q4_0;   \
      __VA_ARGS__;                       \
    } break;                             \
    case DType::Q4_1: {                  \
      constexpr DType T = DType::Q4_1;   \
      __VA_ARGS__;                       \
    } break;                             \
    case DType::Q5_0: {                  \
      constexpr DType T = DType::Q5_0;   \
      __VA_ARGS__;                       \
    } break;                             \
    case DType::Q5_1: {                  \
      constexpr DType T = DType::Q5_1;   \
      __VA_ARGS__;                       \
    } break;                             \
    case DType::Q2_K: {                  \
      constexpr DType T = DType::Q2_K;   \
      __VA_ARGS__;                       \
    } break;                             \
    case DType::Q3_K: {                  \
      constexpr DType T = DType::Q3_K;   \
      __VA_ARGS__;                       \
    } break;                             \
    case DType::Q4_K: {                  \
      constexpr DType T = DType::Q4_K;   \
      __VA_ARGS__;                       \
    } break;                             \
    case DType::Q5_K: {                  \
      constexpr DType T = DType::Q5_K;   \
      __VA_ARGS__;                       \
    } break;                             \
    case DType::Q6_K: {                  \
      constexpr DType T = DType::Q6_K;   \
      __VA_ARGS__;                       \
    } break;                             \
    case DType::IQ4_NL: {                \
      constexpr DType T = DType::IQ4_NL; \
      __VA_ARGS__;                       \
    } break;                             \
    case DType::IQ4_XS: {                \
      constexpr DType T = DType::IQ4_XS; \
      __VA_ARGS__;                       \
    } break;                             \
  }

constexpr unsigned kThreads = 256;
// Rows of W dequantized per cuBLAS call: bounds the fp16 scratch to 64 MiB.
constexpr size_t kScratchElems = kGemmScratchElems;

}  // namespace

void gemv(cudaStream_t st, const WeightView& w, const float* x, int n, float* y) {
  if (n <= 0 || w.rows == 0) return;
  RD_DTYPE_DISPATCH(w.type, launch_gemv_n<T>(st, w, x, n, y));
}

void dequant_rows_half(cudaStream_t st, const WeightView& w, int64_t r0, int64_t count, void* dst) {
  const uint64_t rb = *row_bytes(w.type, static_cast<uint64_t>(w.cols));
  const size_t total = static_cast<size_t>(count) * w.cols;
  if (total == 0) return;
  const auto* base = static_cast<const uint8_t*>(w.data);
  const unsigned grid = grid_for(total, kThreads);
  if (w.type == DType::BF16) {
    dequant_kernel<DType::BF16, __nv_bfloat16>
        <<<grid, kThreads, 0, st>>>(base, r0, count, w.cols, rb, static_cast<__nv_bfloat16*>(dst));
  } else {
    auto* out = static_cast<__half*>(dst);
    RD_DTYPE_DISPATCH(w.type, dequant_kernel<T, __half><<<grid, kThreads, 0, st>>>(base, r0, count, w.cols, rb, out));
  }
  RD_CUDA_LAUNCHED("dequant_kernel");
}

void embed(cudaStream_t st, const WeightView& e, const int32_t* ids, int n, float* out) {
  const size_t total = static_cast<size_t>(n) * e.cols;
  if (total == 0) return;
  const uint64_t rb = *row_bytes(e.type, static_cast<uint64_t>(e.cols));
  const unsigned grid = grid_for(total, kThreads);
  const auto* base = static_cast<const uint8_t*>(e.data);
  RD_DTYPE_DISPATCH(e.type, embed_kernel<T><<<grid, kThreads, 0, st>>>(base, e.rows, e.cols, rb, ids, n, out));
  RD_CUDA_LAUNCHED("embed_kernel");
}

void matmul(MatmulContext& c, const WeightView& w, const float* x, int n, float* y) {
  if (n <= 0 || w.rows == 0) return;
  if (n <= c.gemv_max_n) {
    gemv(c.stream, w, x, n, y);
    return;
  }
  const int rows = static_cast<int>(w.rows), cols = static_cast<int>(w.cols);
  const float alpha = 1.0f, beta = 0.0f;
  if (w.type == DType::F32) {
    RD_CUDA_CHECK(cublas().gemm_ex(c.blas, CUBLAS_OP_T, CUBLAS_OP_N, rows, n, cols, &alpha, w.data, CUDA_R_32F, cols, x,
                               CUDA_R_32F, cols, &beta, y, CUDA_R_32F, rows, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return;
  }
  if (c.exact) {
    // fp32 throughout: dequantize a chunk of rows to fp32, multiply, next chunk.
    const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(rows, static_cast<int64_t>(kScratchElems / cols)));
    auto* w32 = static_cast<float*>(c.weights.get(static_cast<size_t>(chunk) * cols * sizeof(float), c.stream));
    const uint64_t rb = *row_bytes(w.type, static_cast<uint64_t>(w.cols));
    const auto* base = static_cast<const uint8_t*>(w.data);
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
      const int64_t m = std::min<int64_t>(chunk, rows - r0);
      const size_t total = static_cast<size_t>(m) * cols;
      const unsigned grid = grid_for(total, kThreads);
      RD_DTYPE_DISPATCH(w.type,
                        dequant_kernel<T, float><<<grid, kThreads, 0, c.stream>>>(base, r0, m, w.cols, rb, w32));
      RD_CUDA_LAUNCHED("dequant_kernel");
      RD_CUDA_CHECK(cublas().gemm_ex(c.blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(m), n, cols, &alpha, w32,
                                 CUDA_R_32F, cols, x, CUDA_R_32F, cols, &beta, y + r0, CUDA_R_32F, rows,
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
    return;
  }
  // Activations to the weights' 16-bit type: bf16 for BF16 weights (fp32
  // range), else fp16 scaled per token by a power of two (undone on y).
  const bool bf16 = w.type == DType::BF16;
  const cudaDataType_t t16 = bf16 ? CUDA_R_16BF : CUDA_R_16F;
  const size_t xcount = static_cast<size_t>(n) * cols;
  const size_t x16_bytes = (xcount * 2 + 255) / 256 * 256;
  auto* acts = static_cast<uint8_t*>(c.acts.get(x16_bytes + static_cast<size_t>(n) * sizeof(float), c.stream));
  void* x16 = acts;
  float* scales = reinterpret_cast<float*>(acts + x16_bytes);
  if (bf16) {
    convert_kernel<__nv_bfloat16><<<grid_for(xcount, kThreads), kThreads, 0, c.stream>>>(
        x, xcount, cols, nullptr, static_cast<__nv_bfloat16*>(x16));
  } else {
    row_scale_kernel<<<n, kThreads, 0, c.stream>>>(x, cols, scales);
    RD_CUDA_LAUNCHED("row_scale_kernel");
    convert_kernel<__half>
        <<<grid_for(xcount, kThreads), kThreads, 0, c.stream>>>(x, xcount, cols, scales, static_cast<__half*>(x16));
  }
  RD_CUDA_LAUNCHED("convert_kernel");
  if (w.type == DType::F16 || w.type == DType::BF16) {
    RD_CUDA_CHECK(cublas().gemm_ex(c.blas, CUBLAS_OP_T, CUBLAS_OP_N, rows, n, cols, &alpha, w.data, t16, cols, x16, t16,
                               cols, &beta, y, CUDA_R_32F, rows, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  } else {
    // Quantized: dequantize a chunk of rows, multiply it, next chunk.
    const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(rows, static_cast<int64_t>(kScratchElems / cols)));
    void* w16 = c.weights.get(static_cast<size_t>(chunk) * cols * 2, c.stream);
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
      const int64_t m = std::min<int64_t>(chunk, rows - r0);
      dequant_rows_half(c.stream, w, r0, m, w16);
      RD_CUDA_CHECK(cublas().gemm_ex(c.blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(m), n, cols, &alpha, w16, t16, cols,
                                 x16, t16, cols, &beta, y + r0, CUDA_R_32F, rows, CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT));
    }
  }
  if (!bf16) {
    const size_t ycount = static_cast<size_t>(n) * rows;
    scale_rows_kernel<<<grid_for(ycount, kThreads), kThreads, 0, c.stream>>>(y, rows, ycount, scales);
    RD_CUDA_LAUNCHED("scale_rows_kernel");
  }
}

}  // namespace redwood::cuda
