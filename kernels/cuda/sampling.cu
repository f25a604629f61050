// Device sampling (see sampling.h). One block per row for the reductions and
// scans; the sort behind top-k/top-p is CUB's stable segmented radix sort.
#include <cub/cub.cuh>

#include "kernels/common/math.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/sampling.h"
#include "src/util/error.h"

namespace redwood::cuda {
namespace {

constexpr int kThreads = 256;
using BlockReduceF = cub::BlockReduce<float, kThreads>;
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

struct KeyId {
  float key;
  int32_t id;
};
// Larger key first; lower id on ties; id < 0 means none.
__device__ KeyId better(KeyId a, KeyId b) {
  if (a.id < 0) return b;
  if (b.id < 0) return a;
  if (a.key > b.key || (a.key == b.key && a.id < b.id)) return a;
  return b;
}
struct Better {
  __device__ KeyId operator()(const KeyId& a, const KeyId& b) const { return better(a, b); }
};
using BlockReduceK = cub::BlockReduce<KeyId, kThreads>;

__global__ void softmax_kernel(const float* logits, int vocab, float temperature, float* probs) {
  __shared__ typename BlockReduceF::TempStorage tmp;
  __shared__ float bcast;
  const float* x = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  float* p = probs + static_cast<int64_t>(blockIdx.x) * vocab;
  float mx = -INFINITY;
  for (int i = threadIdx.x; i < vocab; i += kThreads) mx = fmaxf(mx, x[i]);
  mx = BlockReduceF(tmp).Reduce(mx, MaxOp());
  if (threadIdx.x == 0) bcast = mx;
  __syncthreads();
  mx = bcast;
  float sum = 0;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float e = math::tempered(x[i], mx, temperature);
    p[i] = e;
    sum += e;
  }
  __syncthreads();
  sum = BlockReduceF(tmp).Sum(sum);
  if (threadIdx.x == 0) bcast = sum;
  __syncthreads();
  const float inv = 1.0f / bcast;
  for (int i = threadIdx.x; i < vocab; i += kThreads) p[i] *= inv;
}

__global__ void argmax_kernel(const float* logits, int vocab, int32_t* ids) {
  __shared__ typename BlockReduceK::TempStorage tmp;
  const float* x = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  KeyId best{-INFINITY, -1};
  for (int i = threadIdx.x; i < vocab; i += kThreads) best = better(best, KeyId{x[i], i});
  best = BlockReduceK(tmp).Reduce(best, Better());
  if (threadIdx.x == 0) ids[blockIdx.x] = best.id < 0 ? 0 : best.id;
}

__global__ void iota_kernel(int32_t* idx, int rows, int vocab, int32_t* offsets) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < static_cast<int64_t>(rows) * vocab) idx[i] = static_cast<int32_t>(i % vocab);
  if (i <= rows) offsets[i] = static_cast<int32_t>(i * vocab);
}

// Per row (one thread): how many sorted entries survive top-k then top-p, and their mass.
__global__ void keep_kernel(const float* sorted, int rows, int vocab, int top_k, float top_p, int32_t* keep,
                            double* mass) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float* s = sorted + static_cast<int64_t>(r) * vocab;
  const int k = (top_k > 0 && top_k < vocab) ? top_k : vocab;
  int n = k;
  double cum = 0;
  if (top_p < 1.0f) {
    for (int i = 0; i < k; ++i) {
      cum += s[i];
      if (cum >= top_p) {
        n = i + 1;
        break;
      }
    }
  }
  double m = 0;
  for (int i = 0; i < n; ++i) m += s[i];
  keep[r] = n;
  mass[r] = m;
}

__global__ void scatter_kept_kernel(const float* sorted, const int32_t* idx, int rows, int vocab, const int32_t* keep,
                                    const double* mass, float* probs) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(rows) * vocab) return;
  const int r = static_cast<int>(i / vocab), j = static_cast<int>(i % vocab);
  if (j < keep[r]) probs[static_cast<int64_t>(r) * vocab + idx[i]] = static_cast<float>(sorted[i] / mass[r]);
}

__global__ void sample_kernel(const float* probs, int vocab, uint64_t seed, int32_t* ids) {
  using Scan = cub::BlockScan<double, kThreads>;
  __shared__ typename Scan::TempStorage tmp;
  __shared__ double carry;
  __shared__ int found, last_pos;
  const float* p = probs + static_cast<int64_t>(blockIdx.x) * vocab;
  const double u = math::counter_uniform(seed, blockIdx.x);
  if (threadIdx.x == 0) carry = 0, found = INT_MAX, last_pos = 0;
  __syncthreads();
  for (int base = 0; base < vocab; base += kThreads) {
    const int i = base + threadIdx.x;
    const double v = (i < vocab && p[i] > 0.0f) ? static_cast<double>(p[i]) : 0.0;
    double incl;
    Scan(tmp).InclusiveSum(v, incl);
    const double cum = carry + incl;
    if (v > 0) {
      if (u < cum) atomicMin(&found, i);
      atomicMax(&last_pos, i);
    }
    __syncthreads();
    if (threadIdx.x == kThreads - 1) carry = cum;
    __syncthreads();
    if (found != INT_MAX) break;
  }
  if (threadIdx.x == 0) ids[blockIdx.x] = found != INT_MAX ? found : last_pos;
}

__global__ void gumbel_kernel(const float* probs, int vocab, int k, uint64_t seed, int32_t* ids) {
  __shared__ typename BlockReduceK::TempStorage tmp;
  __shared__ int32_t chosen[64];
  const float* p = probs + static_cast<int64_t>(blockIdx.x) * vocab;
  const uint64_t row0 = static_cast<uint64_t>(blockIdx.x) * vocab;
  for (int s = 0; s < k; ++s) {
    KeyId best{-INFINITY, -1};
    for (int i = threadIdx.x; i < vocab; i += kThreads) {
      bool taken = false;
      for (int c = 0; c < s; ++c) taken |= chosen[c] == i;
      if (taken) continue;
      // Zero-probability tokens come last, in key order of their uniforms.
      const float u = math::counter_uniform(seed, row0 + i);
      const float key = p[i] > 0.0f ? math::gumbel_key(p[i], u) : -1e30f * (1.0f + u);
      best = better(best, KeyId{key, i});
    }
    best = BlockReduceK(tmp).Reduce(best, Better());
    if (threadIdx.x == 0) {
      chosen[s] = best.id;
      ids[static_cast<int64_t>(blockIdx.x) * k + s] = best.id;
    }
    __syncthreads();
  }
}

}  // namespace

void softmax_rows(void* stream, const float* logits, int rows, int vocab, float temperature, float* probs) {
  if (rows <= 0) return;
  if (!(temperature > 0)) throw Error("softmax_rows: temperature must be > 0");
  softmax_kernel<<<rows, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(logits, vocab, temperature, probs);
  RD_CUDA_LAUNCHED("softmax_kernel");
}

void argmax_rows(void* stream, const float* logits, int rows, int vocab, int32_t* ids) {
  if (rows <= 0) return;
  argmax_kernel<<<rows, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(logits, vocab, ids);
  RD_CUDA_LAUNCHED("argmax_kernel");
}

void top_k_top_p_rows(void* stream, float* probs, int rows, int vocab, int top_k, float top_p) {
  if (rows <= 0) return;
  if (!(top_p > 0 && top_p <= 1) || top_k < 0) throw Error("top_k_top_p_rows: invalid top-k/top-p");
  if ((top_k == 0 || top_k >= vocab) && top_p >= 1.0f) return;
  auto st = static_cast<cudaStream_t>(stream);
  const size_t total = static_cast<size_t>(rows) * vocab;
  float* sorted = nullptr;
  int32_t *idx = nullptr, *idx_sorted = nullptr, *offsets = nullptr, *keep = nullptr;
  double* mass = nullptr;
  void* temp = nullptr;
  size_t temp_bytes = 0;
  // Temporaries for one call (this path runs once per sampled pass, not per layer).
  RD_CUDA_CHECK(cudaMallocAsync(&sorted, total * sizeof(float), st));
  RD_CUDA_CHECK(cudaMallocAsync(&idx, total * sizeof(int32_t), st));
  RD_CUDA_CHECK(cudaMallocAsync(&idx_sorted, total * sizeof(int32_t), st));
  RD_CUDA_CHECK(cudaMallocAsync(&offsets, (rows + 1) * sizeof(int32_t), st));
  RD_CUDA_CHECK(cudaMallocAsync(&keep, rows * sizeof(int32_t), st));
  RD_CUDA_CHECK(cudaMallocAsync(&mass, rows * sizeof(double), st));
  iota_kernel<<<grid_for(std::max<size_t>(total, rows + 1), kThreads), kThreads, 0, st>>>(idx, rows, vocab, offsets);
  RD_CUDA_LAUNCHED("iota_kernel");
  RD_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairsDescending(nullptr, temp_bytes, probs, sorted, idx, idx_sorted,
                                                                   static_cast<int>(total), rows, offsets, offsets + 1,
                                                                   0, 32, st));
  RD_CUDA_CHECK(cudaMallocAsync(&temp, temp_bytes, st));
  RD_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairsDescending(temp, temp_bytes, probs, sorted, idx, idx_sorted,
                                                                   static_cast<int>(total), rows, offsets, offsets + 1,
                                                                   0, 32, st));
  keep_kernel<<<grid_for(rows, 64), 64, 0, st>>>(sorted, rows, vocab, top_k, top_p, keep, mass);
  RD_CUDA_LAUNCHED("keep_kernel");
  RD_CUDA_CHECK(cudaMemsetAsync(probs, 0, total * sizeof(float), st));
  scatter_kept_kernel<<<grid_for(total, kThreads), kThreads, 0, st>>>(sorted, idx_sorted, rows, vocab, keep, mass,
                                                                      probs);
  RD_CUDA_LAUNCHED("scatter_kept_kernel");
  for (void* p : {static_cast<void*>(sorted), static_cast<void*>(idx), static_cast<void*>(idx_sorted),
                  static_cast<void*>(offsets), static_cast<void*>(keep), static_cast<void*>(mass), temp})
    RD_CUDA_CHECK(cudaFreeAsync(p, st));
}

void sample_rows(void* stream, const float* probs, int rows, int vocab, uint64_t seed, int32_t* ids) {
  if (rows <= 0) return;
  sample_kernel<<<rows, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(probs, vocab, seed, ids);
  RD_CUDA_LAUNCHED("sample_kernel");
}

void gumbel_top_k_rows(void* stream, const float* probs, int rows, int vocab, int k, uint64_t seed, int32_t* ids) {
  if (rows <= 0 || k <= 0) return;
  if (k > 64 || k > vocab) throw Error("gumbel_top_k_rows: k must be in [1, min(64, vocab)]");
  gumbel_kernel<<<rows, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(probs, vocab, k, seed, ids);
  RD_CUDA_LAUNCHED("gumbel_kernel");
}

}  // namespace redwood::cuda
