// The backend boundary. The forward pass (src/engine/) calls these operations
// and nothing else; the CPU backend (kernels/cpu/) implements them with oneTBB,
// the CUDA backend (kernels/cuda/) with cuBLAS and fused kernels. All pointers
// are backend memory; activations are float32; weights keep their stored type.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/common/dtype.h"
#include "kernels/common/hd.h"

namespace redwood {

// A weight tensor in backend memory: [rows][cols], cols contiguous, stored type.
struct WeightView {
  DType type = DType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* data = nullptr;
};

// Tree-masked attention over [committed prefix | block]. The block holds rows
// written since the last commit (earlier passes of a tree step) followed by
// this pass's n tokens. Token i (0..n-1) attends to every committed position
// 0..n_past-1 and to the block rows listed in anc[anc_off[i] .. anc_off[i+1])
// (its ancestors plus itself, ascending); block row j is cache row n_past + j.
//
// Several sequences in one pass (a paged KV cache, src/engine/kv_pool.h): when
// seq is set, token i belongs to sequence seq[i] (an index into seq_past and
// table): it attends to that sequence's committed positions 0..seq_past[seq[i]]-1
// and to its ancestors in that sequence's block (anc as above; block row j is
// position seq_past[seq[i]] + j); n_past and n_past_at are unused. Position r
// of sequence s is cache row kv_row(table + s * table_stride, block_rows, r).
// One sequence with seq unset is the case where position r is cache row r.
//
// Sliding-window attention (window > 0, Mistral 7B v0.1): token i, at
// position pos[i], does not attend to a key at position kp when
// pos[i] - kp >= window (llama.cpp's LLAMA_SWA_TYPE_STANDARD, is_masked_swa;
// Hugging Face's sliding_window_overlay agrees: a token sees itself and the
// window - 1 positions before it). Committed position r is key position r, so
// token i reads committed positions max(0, pos[i] - window + 1) .. past - 1;
// anc lists only the block rows it attends to (the forward pass drops the
// ancestors the window masks, by their own positions). window 0: no window
// (pos unused).
// Every token's arithmetic is the same whatever else shares the pass: its
// keys, and the order it sums them in, depend only on its own position,
// prefix and ancestors (so a window changes no reduction order where it masks
// nothing).
struct AttentionArgs {
  const float* q = nullptr;  // [n][n_heads * head_dim] (RoPE applied)
  const void* k = nullptr;  // [>= n_past + n][n_kv_heads * head_dim] of kv_type
  const void* v = nullptr;
  float* out = nullptr;  // [n][n_heads * head_dim]
  int n = 0, n_past = 0;
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;
  const int32_t* parents = nullptr;  // [block size], block-relative, -1 = root (for kernels that walk the tree)
  const int32_t* anc_off = nullptr;  // [n + 1]
  const int32_t* anc = nullptr;
  float scale = 1.0f;
  // When set, the committed length is *n_past_at (backend memory), read when
  // the op executes: a recorded pass (CUDA graph) replays for any prefix length.
  const int32_t* n_past_at = nullptr;
  DType kv_type = DType::F32;  // the element type of k and v: F32, F16, BF16 or Q8_0 (head_dim a multiple of 32)
  // Several sequences (see above); all in backend memory, read when the op executes.
  const int32_t* seq = nullptr;       // [n]: the sequence of each token
  const int32_t* seq_past = nullptr;  // [sequences]: committed positions of each
  const int32_t* table = nullptr;     // [sequences][table_stride]: block ids
  int table_stride = 0, block_rows = 0;
  // Sliding window (see above): each token's position ([n], backend memory,
  // read when the op executes) and the window in positions (0: none).
  const int32_t* pos = nullptr;
  int window = 0;
};

// The first committed position a token at position qp attends to under a
// sliding window of `window` positions (0: none): qp - window + 1, at least 0.
RD_HD int window_start(int qp, int window) {
  return window > 0 && qp - window + 1 > 0 ? qp - window + 1 : 0;
}

// The cache row of position r of a sequence whose block table is `table`
// (blocks of block_rows rows); table null: row r.
RD_HD int64_t kv_row(const int32_t* table, int block_rows, int64_t r) {
  return table ? static_cast<int64_t>(table[r / block_rows]) * block_rows + r % block_rows : r;
}

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // ---- memory ----
  // True when backend memory is host memory (the CPU backend): callers may then
  // pass host pointers straight to the ops and skip upload/download.
  virtual bool host_memory() const = 0;
  // Backend memory of `bytes` (64-byte aligned at least; contents undefined).
  // Throws redwood::Error when it cannot be had.
  virtual void* alloc(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  // Host -> backend, backend -> host (returns when dst holds the data), and
  // backend -> backend. Ordered with the ops like a single stream.
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  virtual void download(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  // Waits for every op issued so far (a no-op on the CPU backend).
  virtual void synchronize() {}
  // The CUDA stream the ops run on (cudaStream_t), for the offload engine's
  // slot link to order copies against; null on the CPU backend.
  virtual void* stream() { return nullptr; }

  // ---- ops ----

  // y[t][r] = sum_c W[r][c] * x[t][c] for t < n. Dequantizes on the fly.
  virtual void matmul(const WeightView& w, const float* x, int n, float* y) = 0;
  // out[t] = row ids[t] of E (dequantized).
  virtual void embed(const WeightView& e, const int32_t* ids, int n, float* out) = 0;
  // out[t] = x[t] / rms(x[t]) * w, w a float vector of length dim. out may be
  // x (in place; per-head norms run it on [n * heads] rows of head_dim).
  virtual void rmsnorm(const float* x, const float* w, int n, int dim, float eps, float* out) = 0;
  // The residual add fused with the next RMSNorm: x[t] += y[t], then
  // out[t] = x[t] / rms(x[t]) * w. out may be y.
  virtual void add_rmsnorm(float* x, const float* y, const float* w, int n, int dim, float eps, float* out) = 0;
  // Rotates each head of x[t] (n_heads * head_dim floats) by position pos[t]:
  // pair i by pos[t] * inv_freq[i] (head_dim / 2 doubles in backend memory,
  // math::rope_inv_freq).
  virtual void rope(float* x, int n, int n_heads, int head_dim, const int32_t* pos, const double* inv_freq,
                    RopeMode mode) = 0;
  virtual void attention(const AttentionArgs& a) = 0;
  // Whether attention and write_rows take KV rows of type t: F32, F16 and
  // BF16 on every backend, Q8_0 where a backend says so (the CPU's and CUDA's). The
  // engine refuses the others when a run chooses its KV type.
  virtual bool supports_kv_type(DType t) const { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }
  // base[(first + r) * row_floats + c] = src[r * row_floats + c] for r < rows,
  // with first = *first_row_at (backend memory, read when the op executes):
  // the KV cache append. base holds elements of `type` (F32, F16, BF16 or
  // Q8_0); F16/BF16 round to nearest even (math::f32_to_f16 / f32_to_bf16),
  // the same bits on every backend; Q8_0 quantizes each row's blocks of 32 on
  // their own (math::quantize_q8_0; row_floats a multiple of 32): row r's
  // blocks start at byte (first + r) * row_floats / 32 * 34.
  virtual void write_rows(void* base, DType type, const int32_t* first_row_at, const float* src, int rows,
                          int row_floats) = 0;
  // The same rounding, row r to base row row_at[r] (backend memory, read when
  // the op executes): the paged KV cache append. REQUIRES: distinct rows.
  virtual void write_rows_at(void* base, DType type, const int32_t* row_at, const float* src, int rows,
                             int row_floats) = 0;
  // gate[i] = silu(gate[i]) * up[i]
  virtual void swiglu(float* gate, const float* up, size_t count) = 0;
  // x[i] += y[i]
  virtual void add(float* x, const float* y, size_t count) = 0;
  // x[t][c] += b[c] for t < n, c < width: a bias row added to every token's row.
  virtual void add_bias(float* x, const float* b, int n, int width) = 0;

  // ---- recorded passes (CUDA graphs) ----
  // A backend that can record may capture the ops issued between
  // begin_record() and end_record() instead of running them, and replay them
  // later: same kernels, pointers and sizes, with whatever values backend
  // memory holds at replay time. Recording must not allocate or synchronise.
  virtual bool can_record() const { return false; }
  virtual void begin_record() {}
  // The recording's handle for replay(), or -1 if recording failed (nothing
  // ran: the caller issues the ops again, unrecorded).
  virtual int end_record() { return -1; }
  virtual void replay(int recording) { (void)recording; }
  // Frees these recordings (their pointers are about to change, or their
  // owner goes). Ids are never reused.
  virtual void drop_recordings(const int* recordings, size_t count) { (void)recordings, (void)count; }
};

// Backend memory owned RAII-style (move-only).
class BackendBuffer {
 public:
  BackendBuffer() = default;
  BackendBuffer(Backend& be, size_t bytes) : be_(&be), p_(bytes ? be.alloc(bytes) : nullptr), n_(bytes) {}
  BackendBuffer(BackendBuffer&& o) noexcept : be_(o.be_), p_(o.p_), n_(o.n_) { o.p_ = nullptr, o.n_ = 0; }
  BackendBuffer& operator=(BackendBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      be_ = o.be_, p_ = o.p_, n_ = o.n_;
      o.p_ = nullptr, o.n_ = 0;
    }
    return *this;
  }
  BackendBuffer(const BackendBuffer&) = delete;
  BackendBuffer& operator=(const BackendBuffer&) = delete;
  ~BackendBuffer() { reset(); }
  void reset() {
    if (p_) be_->release(p_);
    p_ = nullptr, n_ = 0;
  }
  template <class T = void>
  T* as() const {
    return static_cast<T*>(p_);
  }
  size_t size() const { return n_; }

 private:
  Backend* be_ = nullptr;
  void* p_ = nullptr;
  size_t n_ = 0;
};

// ---- kernel workspace ----
// What a backend's kernels take of its memory besides the caller's buffers
// (weights, KV cache, activations, logits), for passes of up to max_tokens
// tokens. Answered from shapes alone, without a backend or a device, so that
// the memory planner (offload/placement.h) can size a run for a backend this
// machine does not have.
struct WorkspaceShape {
  std::vector<WeightView> matrices;  // every matrix the passes multiply by (type, rows, cols; data unused)
  int n_heads = 0, n_kv_heads = 0;   // attention: query heads per KV head
  int ctx = 0;                       // KV cache capacity in tokens
  int max_tokens = 0;                // most tokens in one pass
  int threads = 1;                   // CPU workers
};
// The CPU backend's, all worker threads together (kernels/cpu/workspace.cpp).
uint64_t cpu_workspace_bytes(const WorkspaceShape& s);
// The CUDA backend's, per backend instance (kernels/cuda/workspace.cpp; built
// with or without CUDA).
uint64_t cuda_workspace_bytes(const WorkspaceShape& s);

// The CPU backend (oneTBB, AVX2/FMA/F16C when compiled for it, scalar otherwise).
std::unique_ptr<Backend> make_cpu_backend();

// The CUDA backend on device `device` (kernels/cuda/backend.cu; cuBLAS and
// fused kernels). Throws redwood::Error when it was not built or no device is
// usable.
std::unique_ptr<Backend> make_cuda_backend(int device = 0);
// Whether make_cuda_backend can succeed (built with CUDA and a device present).
bool cuda_backend_available();
// The instruction set the CPU backend's kernels run, by name (kernels/cpu/
// matmul.h: the best this CPU has, or REDWOOD_ISA's); throws redwood::Error
// when REDWOOD_ISA names one this CPU lacks.
const char* cpu_kernel_isa();

// ---- process-wide settings and queries (callers ask here, not a backend's own headers) ----
// CPU worker threads for the CPU backend's ops, one process-wide limit (n <= 0:
// all hardware threads; OpenBLAS is pinned to one thread, oneTBB owns parallelism).
void set_cpu_threads(int n);
int cpu_threads();
// Batch-invariant CPU matmuls, one process-wide setting (default off). On:
// every pass, whatever its number of tokens, takes the batched kernel
// (kernels/cpu/matmul.cpp's n > 8 entry), whose output for a token does not
// depend on the pass's other tokens; with the attention's (always invariant)
// each sequence's logits in a shared pass are then bit-identical to its
// passes alone. Off: passes of up to 8 tokens take the GEMV kernels (several
// times faster at one token), which sum in other orders, so a token's logits
// differ in the last bits between pass sizes. The scalar build (no AVX2)
// multiplies with OpenBLAS and is not batch-invariant either way.
void set_cpu_batch_invariant(bool on);
bool cpu_batch_invariant();
// Host -> device copy bandwidth (bytes/s) of the current CUDA device from
// pinned memory, best of a few copies of `bytes`: the link a streamed layer
// crosses. 0 when built without CUDA.
double host_to_device_bandwidth(size_t bytes);

}  // namespace redwood
