#include "src/engine/transformer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "src/util/error.h"

namespace redwood {

ChainBatch::ChainBatch(std::span<const int32_t> toks, int start) : tokens(toks.begin(), toks.end()) {
  for (size_t i = 0; i < toks.size(); ++i) {
    positions.push_back(start + static_cast<int32_t>(i));
    parents.push_back(static_cast<int32_t>(i) - 1);
  }
}

Transformer::Transformer(const ModelDesc& m, WeightSource& w, Backend& be) : hp_(m.hp), w_(w), be_(be) {}

KvCache Transformer::make_cache(int capacity) const {
  return KvCache(be_, hp_.n_layers, hp_.n_kv_heads * hp_.head_dim, capacity);
}

void Transformer::ensure_scratch(int n) {
  if (n <= cap_n_) return;
  const size_t N = static_cast<size_t>(n) * sizeof(float);
  x_ = BackendBuffer(be_, N * hp_.dim);
  xn_ = BackendBuffer(be_, N * hp_.dim);
  q_ = BackendBuffer(be_, N * hp_.n_heads * hp_.head_dim);
  k_ = BackendBuffer(be_, N * hp_.n_kv_heads * hp_.head_dim);
  v_ = BackendBuffer(be_, N * hp_.n_kv_heads * hp_.head_dim);
  att_ = BackendBuffer(be_, N * hp_.n_heads * hp_.head_dim);
  gate_ = BackendBuffer(be_, N * hp_.ffn_dim);
  up_ = BackendBuffer(be_, N * hp_.ffn_dim);
  if (!be_.host_memory()) logits_ = BackendBuffer(be_, N * hp_.vocab);
  cap_n_ = n;
}

PassStats Transformer::forward(const Batch& b, KvCache& kv, std::span<float> logits, LogitsRows rows) {
  const auto t0 = std::chrono::steady_clock::now();
  const int n = static_cast<int>(b.tokens.size());
  if (n == 0) throw Error("forward pass with no tokens");
  if (b.positions.size() != b.tokens.size() || b.parents.size() != b.tokens.size())
    throw Error("forward pass: tokens, positions and parents differ in length");
  const int n_past = kv.committed();
  const int pend = kv.pending();
  if (n_past + pend + n > kv.capacity())
    throw Error("forward pass: " + std::to_string(n_past + pend + n) + " tokens exceed the KV cache capacity " +
                std::to_string(kv.capacity()));
  const size_t out_rows = rows == LogitsRows::kAll ? n : 1;
  if (logits.size() < out_rows * hp_.vocab) throw Error("forward pass: logits buffer too small");
  for (int i = 0; i < n; ++i) {
    if (b.tokens[i] < 0 || b.tokens[i] >= hp_.vocab)
      throw Error("forward pass: token id " + std::to_string(b.tokens[i]) + " out of range");
    if (b.parents[i] < -1 || b.parents[i] >= pend + i)
      throw Error("forward pass: parent of token " + std::to_string(i) + " must be -1 or an earlier token");
    if (b.positions[i] < 0) throw Error("forward pass: negative position");
  }
  ensure_scratch(n);

  // Parents of the whole block (pending rows, then this batch) and each new
  // token's ancestor list (block rows, ascending, self included): CSR.
  block_parents_ = kv.block_parents();
  block_parents_.insert(block_parents_.end(), b.parents.begin(), b.parents.end());
  anc_off_.assign(n + 1, 0);
  anc_.clear();
  std::vector<int32_t> path;
  for (int i = 0; i < n; ++i) {
    path.clear();
    for (int j = pend + i; j >= 0; j = block_parents_[j]) path.push_back(j);
    anc_.insert(anc_.end(), path.rbegin(), path.rend());
    anc_off_[i + 1] = static_cast<int32_t>(anc_.size());
  }

  // Index arrays into backend memory in one upload.
  const int n_block = pend + n;
  meta_.clear();
  meta_.insert(meta_.end(), b.tokens.begin(), b.tokens.end());
  meta_.insert(meta_.end(), b.positions.begin(), b.positions.end());
  meta_.insert(meta_.end(), block_parents_.begin(), block_parents_.end());
  meta_.insert(meta_.end(), anc_off_.begin(), anc_off_.end());
  meta_.insert(meta_.end(), anc_.begin(), anc_.end());
  if (meta_dev_.size() < meta_.size() * sizeof(int32_t))
    meta_dev_ = BackendBuffer(be_, std::max(meta_.size(), static_cast<size_t>(4096)) * 2 * sizeof(int32_t));
  be_.upload(meta_dev_.as(), meta_.data(), meta_.size() * sizeof(int32_t));
  const int32_t* d_tokens = meta_dev_.as<const int32_t>();
  const int32_t* d_pos = d_tokens + n;
  const int32_t* d_parents = d_pos + n;
  const int32_t* d_anc_off = d_parents + n_block;
  const int32_t* d_anc = d_anc_off + n + 1;

  float* x = x_.as<float>();
  float* xn = xn_.as<float>();
  float* q = q_.as<float>();
  float* k = k_.as<float>();
  float* v = v_.as<float>();
  float* att = att_.as<float>();
  float* gate = gate_.as<float>();
  float* up = up_.as<float>();
  const int dim = hp_.dim, hd = hp_.head_dim;
  const int kv_dim = hp_.n_kv_heads * hd;
  const auto& g = w_.globals();
  w_.begin_pass();
  be_.embed(g.tok_embd, d_tokens, n, x);

  for (int l = 0; l < hp_.n_layers; ++l) {
    const LayerWeights& L = w_.acquire(l);
    // attention block
    be_.rmsnorm(x, L.attn_norm, n, dim, hp_.rms_eps, xn);
    be_.matmul(L.wq, xn, n, q);
    be_.matmul(L.wk, xn, n, k);
    be_.matmul(L.wv, xn, n, v);
    be_.rope(q, n, hp_.n_heads, hd, d_pos, hp_.rope_base, hp_.rope_mode);
    be_.rope(k, n, hp_.n_kv_heads, hd, d_pos, hp_.rope_base, hp_.rope_mode);
    float* kc = kv.k(l) + static_cast<size_t>(n_past + pend) * kv_dim;
    float* vc = kv.v(l) + static_cast<size_t>(n_past + pend) * kv_dim;
    be_.copy(kc, k, sizeof(float) * n * kv_dim);
    be_.copy(vc, v, sizeof(float) * n * kv_dim);
    AttentionArgs a;
    a.q = q;
    a.k = kv.k(l);
    a.v = kv.v(l);
    a.out = att;
    a.n = n;
    a.n_past = n_past;
    a.n_heads = hp_.n_heads;
    a.n_kv_heads = hp_.n_kv_heads;
    a.head_dim = hd;
    a.parents = d_parents;
    a.anc_off = d_anc_off;
    a.anc = d_anc;
    a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
    be_.attention(a);
    be_.matmul(L.wo, att, n, xn);
    be_.add(x, xn, static_cast<size_t>(n) * dim);
    // feed-forward block
    be_.rmsnorm(x, L.ffn_norm, n, dim, hp_.rms_eps, xn);
    be_.matmul(L.w_gate, xn, n, gate);
    be_.matmul(L.w_up, xn, n, up);
    be_.swiglu(gate, up, static_cast<size_t>(n) * hp_.ffn_dim);
    be_.matmul(L.w_down, gate, n, xn);
    be_.add(x, xn, static_cast<size_t>(n) * dim);
    w_.release(l);
  }
  kv.append_pending(b.parents);

  const float* last = x + (rows == LogitsRows::kAll ? 0 : static_cast<size_t>(n - 1) * dim);
  const int m = static_cast<int>(out_rows);
  be_.rmsnorm(last, g.output_norm, m, dim, hp_.rms_eps, xn);
  if (be_.host_memory()) {
    be_.matmul(g.lm_head, xn, m, logits.data());
  } else {
    be_.matmul(g.lm_head, xn, m, logits_.as<float>());
    be_.download(logits.data(), logits_.as(), sizeof(float) * m * hp_.vocab);
  }
  w_.end_pass();
  PassStats s;
  s.n_tokens = n;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

void prefill(Transformer& tf, KvCache& kv, std::span<const int32_t> tokens, int chunk, std::span<float> logits) {
  const size_t step = chunk > 0 ? static_cast<size_t>(chunk) : tokens.size();
  for (size_t i = 0; i < tokens.size(); i += step) {
    const auto part = tokens.subspan(i, std::min(step, tokens.size() - i));
    ChainBatch b(part, kv.committed());
    tf.forward(b.view(), kv, logits, LogitsRows::kLast);
    kv.commit_prefix(static_cast<int>(part.size()));
  }
}

}  // namespace redwood
