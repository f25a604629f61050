// Device decoder of packed-weight chunks (see wpack.h). One block of kThreads
// per chunk: thread t owns the elements wpack::segment(n, kThreads, t) and
// takes the three steps of the shared plan (kernels/common/wpack.h), with a
// barrier between them; wpack::decode_in_parts is the same plan run on the
// host, which the CPU tests check against the reference decoder.
#include "kernels/common/wpack.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/wpack.h"

namespace redwood::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void unpack_kernel(const UnpackJob* jobs, int* status) {
  __shared__ uint64_t first[kThreads + 1];
  const UnpackJob job = jobs[blockIdx.x];
  const int t = threadIdx.x;
  // Every thread reads the head (72 bytes, cached) and reaches the same verdict.
  wpack::ChunkView view;
  if (!wpack::chunk_view(job.chunk, job.stored, job.n, static_cast<int>(job.w), &view)) {
    if (t == 0) atomicExch(status, 1);
    return;
  }
  const uint64_t n = job.n;
  const int w = static_cast<int>(job.w);
  if (view.codec == wpack::kRaw) {
    for (uint64_t i = t; i < n * w; i += kThreads) job.out[i] = view.raw[i];
    return;
  }
  uint64_t i0, i1;
  wpack::segment(n, kThreads, t, &i0, &i1);
  first[t] = wpack::count_escapes(view.codes, view.k, i0, i1);  // 1. escapes per segment
  __syncthreads();
  if (t == 0) {  // 2. exclusive prefix sum (256 adds: negligible beside the decode)
    uint64_t sum = 0;
    for (int j = 0; j < kThreads; ++j) {
      const uint64_t c = first[j];
      first[j] = sum;
      sum += c;
    }
    first[kThreads] = sum;
  }
  __syncthreads();
  if (first[kThreads] != view.n_exc) {
    if (t == 0) atomicExch(status, 1);
    return;
  }
  uint64_t used = first[t];  // 3. this segment from its first exception on
  if (!wpack::decode_range(view.table, view.k, view.n_exc, view.codes, view.exc, view.planes, job.out, i0, i1, n, w,
                           &used))
    atomicExch(status, 1);
}

}  // namespace

void unpack_chunks(void* stream, const UnpackJob* jobs, int count, int* status) {
  if (count <= 0) return;
  unpack_kernel<<<count, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(jobs, status);
  RD_CUDA_LAUNCHED("unpack_kernel");
}

}  // namespace redwood::cuda
