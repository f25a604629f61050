// The CUDA backend: the Backend interface on one device and one stream.
// Element-wise and row-wise ops are here; matmul (cuBLAS + dequantizing GEMV)
// and tree attention have their own files. Per-element math is shared with the
// CPU backend (kernels/common/math.h), so the CPU tests cover it.
//
// Every op is asynchronous on the backend's stream; download() and
// synchronize() are the only host waits. Memory is cudaMalloc'd VRAM.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/common/math.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cublas_api.h"
#include "kernels/cuda/device.h"
#include "src/util/error.h"

namespace redwood::cuda {

void fail(const char* what, const char* call, const char* file, int line) {
  // Clear the thread's last error: a caller that catches this must not see it
  // again as the "result" of its next, unrelated launch check.
  (void)cudaGetLastError();
  std::string msg = "CUDA: ";
  msg.append(call).append(" failed: ").append(what);
  if (file) msg.append(" (").append(file).append(":").append(std::to_string(line)).append(")");
  throw Error(msg);
}

const char* cublas_status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    default:
      return "cuBLAS error";
  }
}

void* Scratch::get(size_t n, cudaStream_t st) {
  if (n <= bytes) return p;
  // The old buffer is retired, not freed: recorded passes (CUDA graphs) may
  // still point at it. Scratch only grows, so this happens a few times.
  if (p) retired.push_back(p);
  p = nullptr;
  const size_t want = geometric ? std::max(n, 2 * bytes) : n;
  RD_CUDA_CHECK(cudaMalloc(&p, want));
  bytes = want;
  return p;
}

void Scratch::free() {
  if (p) cudaFree(p);
  for (void* r : retired) cudaFree(r);
  retired.clear();
  p = nullptr;
  bytes = 0;
}

namespace {

constexpr unsigned kThreads = 256;

__device__ float block_sum(float v, float* shared) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  v = threadIdx.x < warps ? shared[threadIdx.x] : 0.0f;
  if (warp == 0)
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x == 0) shared[0] = v;
  __syncthreads();
  v = shared[0];
  __syncthreads();
  return v;
}

// One block per row.
__global__ void rmsnorm_kernel(const float* x, const float* w, int dim, float eps, float* out) {
  __shared__ float red[32];
  const float* xi = x + static_cast<int64_t>(blockIdx.x) * dim;
  float* o = out + static_cast<int64_t>(blockIdx.x) * dim;
  float ss = 0;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += xi[i] * xi[i];
  const float s = math::rms_scale(block_sum(ss, red), dim, eps);
  for (int i = threadIdx.x; i < dim; i += blockDim.x) o[i] = xi[i] * s * w[i];
}

// x += y, then out = rmsnorm(x) * w; one block per row. y is read only in
// the first loop and out written only after the reduction's barriers, so out
// may alias y.
__global__ void add_rmsnorm_kernel(float* x, const float* y, const float* w, int dim, float eps, float* out) {
  __shared__ float red[32];
  float* xi = x + static_cast<int64_t>(blockIdx.x) * dim;
  const float* yi = y + static_cast<int64_t>(blockIdx.x) * dim;
  float* o = out + static_cast<int64_t>(blockIdx.x) * dim;
  float ss = 0;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    const float v = xi[i] + yi[i];
    xi[i] = v;
    ss += v * v;
  }
  const float s = math::rms_scale(block_sum(ss, red), dim, eps);
  for (int i = threadIdx.x; i < dim; i += blockDim.x) o[i] = xi[i] * s * w[i];
}

// One thread per (token, head, pair).
__global__ void rope_kernel(float* x, int n, int n_heads, int head_dim, const int32_t* pos, const double* inv_freq,
                            int half_mode) {
  const int half = head_dim / 2;
  const int64_t id = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t total = static_cast<int64_t>(n) * n_heads * half;
  if (id >= total) return;
  const int i = static_cast<int>(id % half);
  const int64_t th = id / half;  // token * n_heads + head
  const int t = static_cast<int>(th / n_heads);
  float* v = x + th * head_dim;
  const float theta = math::rope_theta(pos[t], inv_freq[i]);
  float s, c;
  sincosf(theta, &s, &c);
  if (half_mode)
    math::rope_rotate(v[i], v[i + half], c, s);
  else
    math::rope_rotate(v[2 * i], v[2 * i + 1], c, s);
}

// The KV cache append; F16/BF16 round to nearest even with the shared math
// (bit-identical to the CPU backend's rows).
// Rows go to *first_row_at + r, or (row_at set) to row_at[r].
__global__ void write_rows_kernel(void* base, int type, const int32_t* first_row_at, const int32_t* row_at,
                                  const float* src, size_t count, int row_floats) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const size_t r = i / row_floats, c = i % row_floats;
  const size_t row = row_at ? static_cast<size_t>(row_at[r]) : static_cast<size_t>(*first_row_at) + r;
  const size_t at = row * row_floats + c;
  if (type == 1)
    static_cast<uint16_t*>(base)[at] = math::f32_to_f16(src[i]);
  else if (type == 2)
    static_cast<uint16_t*>(base)[at] = math::f32_to_bf16(src[i]);
  else
    static_cast<float*>(base)[at] = src[i];
}

// The Q8_0 KV append: one thread per block of 32 floats, quantized on its own
// with the shared math::quantize_q8_0 (the CPU backend's bytes). row_blocks:
// blocks per row.
__global__ void write_rows_q8_0_kernel(void* base, const int32_t* first_row_at, const int32_t* row_at,
                                       const float* src, size_t blocks, int row_blocks) {
  const size_t b = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= blocks) return;
  const size_t r = b / row_blocks, c = b % row_blocks;
  const size_t row = row_at ? static_cast<size_t>(row_at[r]) : static_cast<size_t>(*first_row_at) + r;
  math::quantize_q8_0(src + 32 * b, static_cast<math::BlockQ8_0*>(base)[row * row_blocks + c]);
}

__global__ void swiglu_kernel(float* gate, const float* up, size_t count) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) gate[i] = math::silu(gate[i]) * up[i];
}

__global__ void add_kernel(float* x, const float* y, size_t count) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) x[i] += y[i];
}

// x[t][c] += b[c]: one thread per element.
__global__ void add_bias_kernel(float* x, const float* b, size_t count, int width) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) x[i] += b[i % width];
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    RD_CUDA_CHECK(cudaSetDevice(device));
    RD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    RD_CUDA_CHECK(cublas().create(&mm_.blas));
    RD_CUDA_CHECK(cublas().set_stream(mm_.blas, stream_));
    // An explicit workspace: cuBLAS must not allocate while a pass is recorded.
    RD_CUDA_CHECK(cudaMalloc(&blas_workspace_, kBlasWorkspace));
    RD_CUDA_CHECK(cublas().set_workspace(mm_.blas, blas_workspace_, kBlasWorkspace));
    mm_.stream = stream_;
    mm_.acts.geometric = true;
    // REDWOOD_CUDA_GEMM: fp16 (default: tensor cores for n > 8) or fp32 (exact
    // mode, see MatmulContext::exact).
    if (const char* g = std::getenv("REDWOOD_CUDA_GEMM")) {
      const std::string mode = g;
      if (mode == "fp32")
        mm_.exact = true;
      else if (mode != "fp16" && !mode.empty())
        throw Error("REDWOOD_CUDA_GEMM: expected fp16 or fp32, got '" + mode + "'");
    }
  }
  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);  // teardown: no op may outlive its buffers
    for (cudaGraphExec_t g : graphs_)
      if (g) cudaGraphExecDestroy(g);
    if (blas_workspace_) cudaFree(blas_workspace_);
    mm_.weights.free();
    mm_.acts.free();
    if (mm_.blas) cublas().destroy(mm_.blas);
    cudaStreamDestroy(stream_);
  }

  const char* name() const override { return "cuda"; }
  bool host_memory() const override { return false; }
  bool supports_kv_type(DType t) const override {
    return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::Q8_0;
  }

  void* alloc(size_t bytes) override {
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      throw Error("CUDA: cannot allocate " + std::to_string(bytes >> 20) + " MiB of device memory (" +
                  std::to_string(free_b >> 20) + " MiB free of " + std::to_string(total_b >> 20) +
                  "): " + cudaGetErrorString(e));
    }
    return p;
  }
  void release(void* p) override {
    // cudaFree waits for the device; buffers are released between passes.
    if (p) cudaFree(p);
  }
  void upload(void* dst, const void* src, size_t bytes) override {
    // Pageable sources are staged by the driver before this returns, so the
    // caller may reuse src at once; pinned sources are copied asynchronously.
    RD_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
  }
  void download(void* dst, const void* src, size_t bytes) override {
    RD_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    RD_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (dst == src || bytes == 0) return;
    auto* d = static_cast<uint8_t*>(dst);
    const auto* s = static_cast<const uint8_t*>(src);
    // cudaMemcpyAsync does not allow overlap: an overlapping move (the KV
    // cache's compaction) goes in chunks no longer than the distance, in the
    // direction that never overwrites bytes still to be read.
    const size_t dist = d < s ? static_cast<size_t>(s - d) : static_cast<size_t>(d - s);
    if (dist >= bytes) {
      RD_CUDA_CHECK(cudaMemcpyAsync(d, s, bytes, cudaMemcpyDeviceToDevice, stream_));
    } else if (d < s) {
      for (size_t off = 0; off < bytes; off += dist)
        RD_CUDA_CHECK(
            cudaMemcpyAsync(d + off, s + off, std::min(dist, bytes - off), cudaMemcpyDeviceToDevice, stream_));
    } else {
      for (size_t end = bytes; end > 0;) {
        const size_t len = std::min(dist, end);
        end -= len;
        RD_CUDA_CHECK(cudaMemcpyAsync(d + end, s + end, len, cudaMemcpyDeviceToDevice, stream_));
      }
    }
  }
  void synchronize() override { RD_CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  void* stream() override { return stream_; }

  void matmul(const WeightView& w, const float* x, int n, float* y) override { cuda::matmul(mm_, w, x, n, y); }
  void embed(const WeightView& e, const int32_t* ids, int n, float* out) override {
    cuda::embed(stream_, e, ids, n, out);
  }

  void rmsnorm(const float* x, const float* w, int n, int dim, float eps, float* out) override {
    if (n <= 0) return;
    rmsnorm_kernel<<<n, kThreads, 0, stream_>>>(x, w, dim, eps, out);
    RD_CUDA_LAUNCHED("rmsnorm_kernel");
  }
  void add_rmsnorm(float* x, const float* y, const float* w, int n, int dim, float eps, float* out) override {
    if (n <= 0) return;
    add_rmsnorm_kernel<<<n, kThreads, 0, stream_>>>(x, y, w, dim, eps, out);
    RD_CUDA_LAUNCHED("add_rmsnorm_kernel");
  }
  void rope(float* x, int n, int n_heads, int head_dim, const int32_t* pos, const double* inv_freq,
            RopeMode mode) override {
    const size_t total = static_cast<size_t>(n) * n_heads * (head_dim / 2);
    if (total == 0) return;
    rope_kernel<<<grid_for(total, kThreads), kThreads, 0, stream_>>>(x, n, n_heads, head_dim, pos, inv_freq,
                                                                     mode == RopeMode::kHalf ? 1 : 0);
    RD_CUDA_LAUNCHED("rope_kernel");
  }
  void attention(const AttentionArgs& a) override { cuda::attention(stream_, a); }
  void write_rows(void* base, DType type, const int32_t* first_row_at, const float* src, int rows,
                  int row_floats) override {
    store_rows(base, type, first_row_at, nullptr, src, rows, row_floats);
  }
  void write_rows_at(void* base, DType type, const int32_t* row_at, const float* src, int rows,
                     int row_floats) override {
    store_rows(base, type, nullptr, row_at, src, rows, row_floats);
  }
  void store_rows(void* base, DType type, const int32_t* first_row_at, const int32_t* row_at, const float* src,
                  int rows, int row_floats) {
    const size_t count = static_cast<size_t>(rows) * row_floats;
    if (count == 0) return;
    if (type == DType::Q8_0) {
      if (row_floats % 32 != 0)
        throw Error("KV rows of Q8_0 need a multiple of 32 floats, got " + std::to_string(row_floats));
      const size_t blocks = count / 32;
      write_rows_q8_0_kernel<<<grid_for(blocks, kThreads), kThreads, 0, stream_>>>(base, first_row_at, row_at, src,
                                                                                  blocks, row_floats / 32);
      RD_CUDA_LAUNCHED("write_rows_q8_0_kernel");
      return;
    }
    if (type != DType::F32 && type != DType::F16 && type != DType::BF16)
      throw Error("CUDA write_rows: the KV cache type must be F32, F16, BF16 or Q8_0");
    const int t = type == DType::F16 ? 1 : type == DType::BF16 ? 2 : 0;
    write_rows_kernel<<<grid_for(count, kThreads), kThreads, 0, stream_>>>(base, t, first_row_at, row_at, src, count,
                                                                           row_floats);
    RD_CUDA_LAUNCHED("write_rows_kernel");
  }
  void swiglu(float* gate, const float* up, size_t count) override {
    if (count == 0) return;
    swiglu_kernel<<<grid_for(count, kThreads), kThreads, 0, stream_>>>(gate, up, count);
    RD_CUDA_LAUNCHED("swiglu_kernel");
  }
  void add(float* x, const float* y, size_t count) override {
    if (count == 0) return;
    add_kernel<<<grid_for(count, kThreads), kThreads, 0, stream_>>>(x, y, count);
    RD_CUDA_LAUNCHED("add_kernel");
  }
  void add_bias(float* x, const float* b, int n, int width) override {
    const size_t count = static_cast<size_t>(n) * static_cast<size_t>(width);
    if (count == 0) return;
    add_bias_kernel<<<grid_for(count, kThreads), kThreads, 0, stream_>>>(x, b, count, width);
    RD_CUDA_LAUNCHED("add_bias_kernel");
  }

  // CUDA graphs: stream capture (thread-local mode: other threads' CUDA calls,
  // such as the offload I/O thread's, are not affected), instantiated once,
  // launched on the stream.
  bool can_record() const override { return true; }
  void begin_record() override { RD_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal)); }
  int end_record() override {
    cudaGraph_t g = nullptr;
    const cudaError_t e = cudaStreamEndCapture(stream_, &g);
    if (e != cudaSuccess || !g) {
      (void)cudaGetLastError();
      if (g) cudaGraphDestroy(g);
      return -1;
    }
    cudaGraphExec_t exec = nullptr;
    const cudaError_t ie = cudaGraphInstantiate(&exec, g, 0);
    cudaGraphDestroy(g);
    if (ie != cudaSuccess) {
      (void)cudaGetLastError();
      return -1;
    }
    graphs_.push_back(exec);
    return static_cast<int>(graphs_.size()) - 1;
  }
  void replay(int recording) override {
    if (recording < 0 || recording >= static_cast<int>(graphs_.size()) || !graphs_[recording])
      throw Error("CUDA: replay of an unknown recording");
    RD_CUDA_CHECK(cudaGraphLaunch(graphs_[recording], stream_));
  }
  void drop_recordings(const int* ids, size_t count) override {
    if (count == 0) return;
    cudaStreamSynchronize(stream_);  // a launched graph may still run
    for (size_t i = 0; i < count; ++i) {
      const int id = ids[i];
      if (id >= 0 && id < static_cast<int>(graphs_.size()) && graphs_[id]) {
        cudaGraphExecDestroy(graphs_[id]);
        graphs_[id] = nullptr;  // ids are never reused
      }
    }
  }

 private:
  static constexpr size_t kBlasWorkspace = kBlasWorkspaceBytes;
  int device_;
  cudaStream_t stream_ = nullptr;
  MatmulContext mm_;
  void* blas_workspace_ = nullptr;
  std::vector<cudaGraphExec_t> graphs_;
};

}  // namespace
}  // namespace redwood::cuda

namespace redwood {

bool cuda_backend_available() {
  return cuda::device_count() > 0;
}

std::unique_ptr<Backend> make_cuda_backend(int device) {
  const int n = cuda::device_count();
  if (n == 0) throw Error("--backend cuda: no CUDA device is available (no driver or no GPU)");
  if (device < 0 || device >= n)
    throw Error("--backend cuda: device " + std::to_string(device) + " does not exist (" + std::to_string(n) +
                " found)");
  return std::make_unique<cuda::CudaBackend>(device);
}

}  // namespace redwood
