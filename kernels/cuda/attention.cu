// Tree-masked attention over [committed prefix | block], flash-style: one pass
// over the keys with an online softmax (math::online_softmax_add/merge, shared
// with the CPU tests), no score matrix and no dense n x n mask in memory. The
// mask is the CSR ancestor list the forward pass builds from the parent array:
// token i reads the n_past committed rows and then its ancestors' block rows;
// with several sequences (a.seq set) its own sequence's, through its block
// table (kv_row). Under a sliding window (a.window > 0) the committed rows
// start at window_start(pos[i], window) (kernels/backend.h); the forward pass
// has already dropped the ancestors the window masks.
//
// One block per (token, query head), kWarps warps; warp w takes keys w, w +
// kWarps, ...; lane l owns head dimensions l, l + 32, ... (E per lane), so a
// key's score is one warp reduction. The warps' partial states merge at the end.
#include <string>

#include "kernels/common/math.h"
#include "kernels/cuda/common.cuh"
#include "src/util/error.h"

namespace redwood::cuda {
namespace {

constexpr int kWarps = 4;

// A KV element widened to float: float, IEEE half or bfloat16 bits, or a
// Q8_0 row's element (blocks of 32, math::BlockQ8_0; head_dim a multiple of
// 32, so a head's slice is whole blocks): the same conversions as the CPU
// backend's. load<T>(base, e) reads element e of the cache (row-major rows).
struct Half {
  uint16_t bits;
};
struct Bf16 {
  uint16_t bits;
};
struct Q8 {};  // tag: the cache holds math::BlockQ8_0 blocks
__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(Half x) { return math::f16_to_f32(x.bits); }
__device__ __forceinline__ float widen(Bf16 x) { return math::bf16_to_f32(x.bits); }
template <class T>
__device__ __forceinline__ float load(const void* base, int64_t e) {
  return widen(static_cast<const T*>(base)[e]);
}
template <>
__device__ __forceinline__ float load<Q8>(const void* base, int64_t e) {
  return math::dequant_q8_0(static_cast<const math::BlockQ8_0*>(base)[e / 32], static_cast<int>(e % 32));
}

template <int E, class T>
__global__ void tree_attention_kernel(AttentionArgs a) {
  const int i = blockIdx.x / a.n_heads;
  const int h = blockIdx.x % a.n_heads;
  const int kh = h / (a.n_heads / a.n_kv_heads);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int hd = a.head_dim;
  const int64_t q_stride = static_cast<int64_t>(a.n_heads) * hd;
  const int64_t kv_stride = static_cast<int64_t>(a.n_kv_heads) * hd;
  if (a.n_past_at) a.n_past = *a.n_past_at;  // a is this thread's copy
  const int32_t* table = nullptr;
  if (a.seq) {
    const int s = a.seq[i];
    a.n_past = a.seq_past[s];
    table = a.table + static_cast<int64_t>(s) * a.table_stride;
  }
  const int32_t* anc = a.anc + a.anc_off[i];
  const int lo = a.window > 0 ? min(a.n_past, window_start(a.pos[i], a.window)) : 0;
  const int past = a.n_past - lo;  // committed keys: positions lo .. n_past - 1
  const int len = past + (a.anc_off[i + 1] - a.anc_off[i]);

  float q[E], acc[E];
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int d = lane + 32 * e;
    q[e] = d < hd ? a.q[i * q_stride + h * hd + d] : 0.0f;
    acc[e] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int j = warp; j < len; j += kWarps) {
    const int64_t row = kv_row(table, a.block_rows, j < past ? lo + j : a.n_past + anc[j - past]);
    const int64_t at = row * kv_stride + kh * hd;  // the head's first element in K and V
    float s = 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int d = lane + 32 * e;
      if (d < hd) s += q[e] * load<T>(a.k, at + d);
    }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    float scale_old, w_new;
    math::online_softmax_add(m, l, s * a.scale, scale_old, w_new);
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int d = lane + 32 * e;
      acc[e] = acc[e] * scale_old + (d < hd ? w_new * load<T>(a.v, at + d) : 0.0f);
    }
  }

  __shared__ float sm_m[kWarps], sm_l[kWarps];
  __shared__ float sm_acc[kWarps][32 * E];
  if (lane == 0) sm_m[warp] = m, sm_l[warp] = l;
#pragma unroll
  for (int e = 0; e < E; ++e) sm_acc[warp][lane + 32 * e] = acc[e];
  __syncthreads();
  if (warp != 0) return;
  for (int w = 1; w < kWarps; ++w) {
    float s1, s2;
    math::online_softmax_merge(m, l, sm_m[w], sm_l[w], s1, s2);
#pragma unroll
    for (int e = 0; e < E; ++e) acc[e] = acc[e] * s1 + sm_acc[w][lane + 32 * e] * s2;
  }
  float* out = a.out + i * q_stride + h * hd;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int d = lane + 32 * e;
    if (d < hd) out[d] = acc[e] / l;
  }
}

}  // namespace

void attention(cudaStream_t st, const AttentionArgs& a) {
  if (a.n <= 0) return;
  if (a.head_dim <= 0 || a.head_dim > 256) throw Error("CUDA attention: head_dim must be in [1, 256]");
  if (a.n_kv_heads <= 0 || a.n_heads % a.n_kv_heads != 0)
    throw Error("CUDA attention: n_heads must be a multiple of n_kv_heads");
  if (a.kv_type != DType::F32 && a.kv_type != DType::F16 && a.kv_type != DType::BF16 && a.kv_type != DType::Q8_0)
    throw Error("CUDA attention: the KV cache type must be F32, F16, BF16 or Q8_0");
  if (a.kv_type == DType::Q8_0 && a.head_dim % 32 != 0)
    throw Error("CUDA attention: Q8_0 KV rows need a head_dim that is a multiple of 32, got " +
                std::to_string(a.head_dim));
  if (a.seq && (!a.seq_past || !a.table || a.block_rows <= 0))
    throw Error("CUDA attention: several sequences need their committed lengths, block tables and block size");
  if (a.window > 0 && !a.pos) throw Error("CUDA attention: a sliding window needs the tokens' positions");
  const unsigned grid = static_cast<unsigned>(a.n) * static_cast<unsigned>(a.n_heads);
  const unsigned threads = 32 * kWarps;
  switch ((a.head_dim + 31) / 32) {
#define RD_ATT_CASE(E)                                                \
  case E:                                                             \
    if (a.kv_type == DType::F16)                                      \
      tree_attention_kernel<E, Half><<<grid, threads, 0, st>>>(a);   \
    else if (a.kv_type == DType::BF16)                                \
      tree_attention_kernel<E, Bf16><<<grid, threads, 0, st>>>(a);   \
    else if (a.kv_type == DType::Q8_0)                                \
      tree_attention_kernel<E, Q8><<<grid, threads, 0, st>>>(a);     \
    else                                                              \
      tree_attention_kernel<E, float><<<grid, threads, 0, st>>>(a);  \
    break;
    RD_ATT_CASE(1)
    RD_ATT_CASE(2)
    RD_ATT_CASE(3)
    RD_ATT_CASE(4)
    RD_ATT_CASE(5)
    RD_ATT_CASE(6)
    RD_ATT_CASE(7)
    RD_ATT_CASE(8)
#undef RD_ATT_CASE
  }
  RD_CUDA_LAUNCHED("tree_attention_kernel");
}

}  // namespace redwood::cuda
