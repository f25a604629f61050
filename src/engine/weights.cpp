#include "src/engine/weights.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>

#include "kernels/common/math.h"
#include "src/model/packed.h"
#include "src/util/error.h"
#include "src/util/io.h"

namespace redwood {

AlignedBuffer::AlignedBuffer(size_t bytes, size_t min_align) : n_(bytes) {
  // Large buffers are 2 MiB aligned and their whole 2 MiB pages advised to use
  // transparent huge pages (kernels stream through gigabytes of weights and
  // 4 KiB pages cost TLB misses). The size is NOT rounded up to 2 MiB: the tail
  // stays in small pages, so memory use is what the planner counts.
  constexpr size_t kHuge = 2u << 20;
  const size_t small = std::max<size_t>(min_align, 64);
  const size_t align = bytes >= kHuge ? kHuge : small;
  const size_t rounded = std::max<size_t>(align_up(bytes, small), small);
  void* p = nullptr;
  if (posix_memalign(&p, align, rounded) != 0 || !p)
    throw Error("out of memory allocating " + std::to_string(bytes) + " bytes");
  p_ = static_cast<uint8_t*>(p);
  if (align == kHuge) (void)madvise(p_, bytes / kHuge * kHuge, MADV_HUGEPAGE);  // advisory; failure is harmless
}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& o) noexcept {
  if (this != &o) {
    std::free(p_);
    p_ = o.p_, n_ = o.n_;
    o.p_ = nullptr, o.n_ = 0;
  }
  return *this;
}

AlignedBuffer::~AlignedBuffer() {
  std::free(p_);
}

void norm_to_f32(DType t, const void* src, int64_t n, float* dst) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    switch (t) {
      case DType::F32:
        memcpy(&dst[i], p + 4 * i, 4);
        break;
      case DType::F16:
        memcpy(&h, p + 2 * i, 2);
        dst[i] = math::f16_to_f32(h);
        break;
      case DType::BF16:
        memcpy(&h, p + 2 * i, 2);
        dst[i] = math::bf16_to_f32(h);
        break;
      default:
        throw Error("norm weights must be F32/F16/BF16");
    }
  }
}

const float*& layer_vector(LayerWeights& w, const LayerDesc& L, const TensorExtent* t) {
  if (t == &L.attn_norm) return w.attn_norm;
  if (t == &L.ffn_norm) return w.ffn_norm;
  if (t == &L.bq) return w.bq;
  if (t == &L.bk) return w.bk;
  if (t == &L.bv) return w.bv;
  if (t == &L.q_norm) return w.q_norm;
  if (t == &L.k_norm) return w.k_norm;
  throw Error("layer_vector: '" + t->name + "' is not one of the layer's vectors");
}

namespace {

struct Files {
  std::vector<int> fds;
  ~Files() {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  }
};

}  // namespace

ResidentWeights::ResidentWeights(const ModelDesc& m, const std::function<bool(int)>& keep) {
  Files files;
  for (const auto& f : m.files) {
    const int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error(f + ": cannot open: " + strerror(errno));
    files.fds.push_back(fd);
  }
  // Loads a list of extents into one buffer; returns views in the same order.
  auto load_group = [&](const std::vector<const TensorExtent*>& ts) {
    uint64_t total = 0;
    for (const auto* t : ts) total += resident_tensor_bytes(t->bytes);
    AlignedBuffer buf(total);
    std::vector<const uint8_t*> ptrs;
    uint64_t off = 0;
    for (const auto* t : ts) {
      read_tensor(files.fds.at(t->file), m.files[t->file], *t, buf.data() + off);
      ptrs.push_back(buf.data() + off);
      off += resident_tensor_bytes(t->bytes);
    }
    bytes_ += total;
    buffers_.push_back(std::move(buf));
    return ptrs;
  };
  auto view = [](const TensorExtent& t, const uint8_t* p) { return WeightView{t.type, t.rows, t.cols, p}; };
  auto norm = [&](const TensorExtent& t, const uint8_t* p) {
    norms_.emplace_back(t.cols);
    norm_to_f32(t.type, p, t.cols, norms_.back().data());
    return norms_.back().data();
  };

  std::vector<const TensorExtent*> g = {&m.tok_embd, &m.output_norm};
  if (!m.hp.tied_lm_head) g.push_back(&m.lm_head);
  auto gp = load_group(g);
  globals_.tok_embd = view(m.tok_embd, gp[0]);
  globals_.output_norm = norm(m.output_norm, gp[1]);
  globals_.lm_head = m.hp.tied_lm_head ? globals_.tok_embd : view(m.lm_head, gp[2]);

  layers_.resize(m.layers.size());
  for (size_t i = 0; i < m.layers.size(); ++i) {
    const auto& L = m.layers[i];
    auto& W = layers_[i];
    if (keep && !keep(static_cast<int>(i))) {
      const auto vs = L.vectors();
      auto p = load_group(vs);
      for (size_t j = 0; j < vs.size(); ++j) layer_vector(W, L, vs[j]) = norm(*vs[j], p[j]);
      continue;
    }
    // order: attn_norm wq wk wv wo ffn_norm gate up down, then the optional vectors
    const auto ts = L.tensors();
    auto p = load_group(ts);
    W.attn_norm = norm(L.attn_norm, p[0]);
    W.wq = view(L.wq, p[1]);
    W.wk = view(L.wk, p[2]);
    W.wv = view(L.wv, p[3]);
    W.wo = view(L.wo, p[4]);
    W.ffn_norm = norm(L.ffn_norm, p[5]);
    W.w_gate = view(L.w_gate, p[6]);
    W.w_up = view(L.w_up, p[7]);
    W.w_down = view(L.w_down, p[8]);
    for (size_t j = 9; j < ts.size(); ++j) layer_vector(W, L, ts[j]) = norm(*ts[j], p[j]);
  }
}

WeightView BackendCopies::matrix(const WeightView& host) {
  if (!host.data) return host;
  const uint64_t bytes = static_cast<uint64_t>(host.rows) * *row_bytes(host.type, host.cols);
  buffers_.emplace_back(be_, bytes);
  be_.upload(buffers_.back().as(), host.data, bytes);
  bytes_ += bytes;
  WeightView v = host;
  v.data = buffers_.back().as();
  return v;
}

const float* BackendCopies::norm(const float* host, int64_t n) {
  if (!host) return nullptr;
  const size_t bytes = sizeof(float) * static_cast<size_t>(n);
  buffers_.emplace_back(be_, bytes);
  be_.upload(buffers_.back().as(), host, bytes);
  bytes_ += bytes;
  return buffers_.back().as<const float>();
}

namespace {
// A layer's tensors mapped one by one: Src is LayerWeights (host views) or the
// model's per-layer extents; both name their fields alike. norm(field, floats)
// maps a vector (an absent one, a null pointer or an unnamed extent, to null).
template <class Src, class Matrix, class Norm>
LayerWeights map_layer(const Src& s, const LlamaHParams& hp, Matrix&& matrix, Norm&& norm) {
  const int64_t q_dim = static_cast<int64_t>(hp.n_heads) * hp.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(hp.n_kv_heads) * hp.head_dim;
  LayerWeights d;
  d.attn_norm = norm(s.attn_norm, hp.dim);
  d.ffn_norm = norm(s.ffn_norm, hp.dim);
  d.bq = norm(s.bq, q_dim);
  d.bk = norm(s.bk, kv_dim);
  d.bv = norm(s.bv, kv_dim);
  d.q_norm = norm(s.q_norm, hp.head_dim);
  d.k_norm = norm(s.k_norm, hp.head_dim);
  d.wq = matrix(s.wq);
  d.wk = matrix(s.wk);
  d.wv = matrix(s.wv);
  d.wo = matrix(s.wo);
  d.w_gate = matrix(s.w_gate);
  d.w_up = matrix(s.w_up);
  d.w_down = matrix(s.w_down);
  return d;
}
}  // namespace

LayerWeights BackendCopies::layer(const LayerWeights& h) {
  return map_layer(
      h, hp_, [&](const WeightView& v) { return matrix(v); },
      [&](const float* v, int64_t n) { return norm(v, n); });
}

GlobalWeights BackendCopies::globals(const GlobalWeights& h, bool tied_lm_head) {
  GlobalWeights d;
  d.tok_embd = matrix(h.tok_embd);
  d.output_norm = norm(h.output_norm, hp_.dim);
  d.lm_head = tied_lm_head ? d.tok_embd : matrix(h.lm_head);
  return d;
}

DeviceWeights::DeviceWeights(const ModelDesc& m, Backend& be) : copies_(be, m.hp) {
  Files files;
  for (const auto& f : m.files) {
    const int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error(f + ": cannot open: " + strerror(errno));
    files.fds.push_back(fd);
  }
  // One tensor at a time through a host buffer (reused: uploads are ordered and
  // the backend copies the source before returning).
  AlignedBuffer tmp;
  std::vector<float> normv;
  auto upload_view = [&](const TensorExtent& t) {
    if (tmp.size() < t.bytes) tmp = AlignedBuffer(t.bytes);
    read_tensor(files.fds.at(t.file), m.files[t.file], t, tmp.data());
    return copies_.matrix(WeightView{t.type, t.rows, t.cols, tmp.data()});
  };
  auto upload_norm = [&](const TensorExtent& t, int64_t n) -> const float* {
    if (t.name.empty()) return nullptr;  // an optional vector this model lacks
    if (tmp.size() < t.bytes) tmp = AlignedBuffer(t.bytes);
    read_tensor(files.fds.at(t.file), m.files[t.file], t, tmp.data());
    normv.resize(static_cast<size_t>(t.cols));
    norm_to_f32(t.type, tmp.data(), t.cols, normv.data());
    return copies_.norm(normv.data(), n);
  };
  globals_.tok_embd = upload_view(m.tok_embd);
  globals_.output_norm = upload_norm(m.output_norm, m.hp.dim);
  globals_.lm_head = m.hp.tied_lm_head ? globals_.tok_embd : upload_view(m.lm_head);
  for (const auto& L : m.layers) layers_.push_back(map_layer(L, m.hp, upload_view, upload_norm));
  be.synchronize();
}

std::unique_ptr<WeightSource> make_resident_weights(const ModelDesc& m, Backend& be) {
  if (be.host_memory()) return std::make_unique<ResidentWeights>(m);
  return std::make_unique<DeviceWeights>(m, be);
}

}  // namespace redwood
