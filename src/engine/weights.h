// Where the forward pass gets its weights. The pass asks a WeightSource for
// layer i (blocking until it is in backend memory) and releases it when done;
// ResidentWeights keeps everything loaded, the offload engine (offload/)
// implements the same interface by streaming layers through a ring of slots.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "src/model/model_desc.h"
#include "src/util/align.h"

namespace redwood {

struct LayerWeights {
  const float* attn_norm = nullptr;
  const float* ffn_norm = nullptr;
  WeightView wq, wk, wv, wo, w_gate, w_up, w_down;
  // The family's optional vectors as floats (null when the model has none):
  // q/k/v biases, per-head q/k norm weights (LayerDesc's of the same names).
  const float* bq = nullptr;
  const float* bk = nullptr;
  const float* bv = nullptr;
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
};

// The field of `w` that holds the vector `t` of layer `L` (one of
// L.vectors()), for loaders that fill a layer from its extents.
const float*& layer_vector(LayerWeights& w, const LayerDesc& L, const TensorExtent* t);

struct GlobalWeights {
  WeightView tok_embd, lm_head;
  const float* output_norm = nullptr;
};

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual const GlobalWeights& globals() = 0;
  virtual void begin_pass() {}
  // Blocks until layer i is ready; valid until release(i).
  virtual const LayerWeights& acquire(int layer) = 0;
  virtual void release(int layer) {}
  virtual void end_pass() {}
  // True when acquire() returns the same pointers every pass and the pass
  // needs no host work between layers: a backend may then record the pass
  // once and replay it (CUDA graphs).
  virtual bool fixed_pointers() const { return false; }
};

// Aligned host buffer: 64 bytes (or min_align), 2 MiB with huge pages when large.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes, size_t min_align = 64);
  AlignedBuffer(AlignedBuffer&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr, o.n_ = 0; }
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept;
  ~AlignedBuffer();
  uint8_t* data() const { return p_; }
  size_t size() const { return n_; }

 private:
  uint8_t* p_ = nullptr;
  size_t n_ = 0;
};

// Bytes a tensor of `bytes` takes in ResidentWeights' buffers (64-byte aligned
// pieces); the memory planner counts with the same rule.
inline constexpr uint64_t resident_tensor_bytes(uint64_t bytes) {
  return align_up(bytes, 64);
}

// Converts a norm vector (F32/F16/BF16 bytes) to float.
void norm_to_f32(DType t, const void* src, int64_t n, float* dst);

// Every weight loaded into host memory: one contiguous buffer per layer
// (its tensors at 64-byte aligned offsets) plus one for the globals.
// With a keep predicate, layers it rejects get only their vectors loaded (their
// matrix views stay empty): the offload streamer fills those in.
class ResidentWeights final : public WeightSource {
 public:
  explicit ResidentWeights(const ModelDesc& m, const std::function<bool(int)>& keep = {});
  const GlobalWeights& globals() override { return globals_; }
  const LayerWeights& acquire(int layer) override { return layers_[layer]; }
  bool fixed_pointers() const override { return true; }
  uint64_t bytes() const { return bytes_; }

 private:
  GlobalWeights globals_;
  std::vector<LayerWeights> layers_;
  std::vector<AlignedBuffer> buffers_;
  std::vector<std::vector<float>> norms_;
  uint64_t bytes_ = 0;
};

// Copies of host weights in backend memory (VRAM on the CUDA backend), one
// allocation per tensor. Used by DeviceWeights, and by the streamer for the
// parts it keeps resident (globals, resident layers, every layer's norms).
class BackendCopies {
 public:
  BackendCopies(Backend& be, const LlamaHParams& hp) : be_(be), hp_(hp) {}
  // Matrices (views with data) and norms of a host layer; empty views stay empty.
  LayerWeights layer(const LayerWeights& host);
  GlobalWeights globals(const GlobalWeights& host, bool tied_lm_head);
  uint64_t bytes() const { return bytes_; }

  // One tensor: a matrix (empty view -> empty view) or a vector of n floats
  // (null -> null).
  WeightView matrix(const WeightView& host);
  const float* norm(const float* host, int64_t n);

 private:
  Backend& be_;
  LlamaHParams hp_;
  std::vector<BackendBuffer> buffers_;
  uint64_t bytes_ = 0;
};

// Every weight in backend memory: the model is read into host memory layer by
// layer and uploaded (for a backend whose memory is not host memory).
class DeviceWeights final : public WeightSource {
 public:
  DeviceWeights(const ModelDesc& m, Backend& be);
  const GlobalWeights& globals() override { return globals_; }
  const LayerWeights& acquire(int layer) override { return layers_[layer]; }
  bool fixed_pointers() const override { return true; }
  uint64_t bytes() const { return copies_.bytes(); }

 private:
  BackendCopies copies_;
  GlobalWeights globals_;
  std::vector<LayerWeights> layers_;
};

// Every weight resident where `be` reads it: ResidentWeights when backend
// memory is host memory, else DeviceWeights.
std::unique_ptr<WeightSource> make_resident_weights(const ModelDesc& m, Backend& be);

}  // namespace redwood
