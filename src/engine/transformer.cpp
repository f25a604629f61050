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
  return KvCache(hp_.n_layers, hp_.n_kv_heads * hp_.head_dim, capacity);
}

void Transformer::ensure_scratch(int n) {
  if (n <= cap_n_) return;
  const size_t N = static_cast<size_t>(n);
  x_.resize(N * hp_.dim);
  xn_.resize(N * hp_.dim);
  q_.resize(N * hp_.n_heads * hp_.head_dim);
  k_.resize(N * hp_.n_kv_heads * hp_.head_dim);
  v_.resize(N * hp_.n_kv_heads * hp_.head_dim);
  att_.resize(N * hp_.n_heads * hp_.head_dim);
  gate_.resize(N * hp_.ffn_dim);
  up_.resize(N * hp_.ffn_dim);
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

  const int dim = hp_.dim, hd = hp_.head_dim;
  const int kv_dim = hp_.n_kv_heads * hd;
  const auto& g = w_.globals();
  w_.begin_pass();
  be_.embed(g.tok_embd, b.tokens.data(), n, x_.data());

  for (int l = 0; l < hp_.n_layers; ++l) {
    const LayerWeights& L = w_.acquire(l);
    // attention block
    be_.rmsnorm(x_.data(), L.attn_norm, n, dim, hp_.rms_eps, xn_.data());
    be_.matmul(L.wq, xn_.data(), n, q_.data());
    be_.matmul(L.wk, xn_.data(), n, k_.data());
    be_.matmul(L.wv, xn_.data(), n, v_.data());
    be_.rope(q_.data(), n, hp_.n_heads, hd, b.positions.data(), hp_.rope_base, hp_.rope_mode);
    be_.rope(k_.data(), n, hp_.n_kv_heads, hd, b.positions.data(), hp_.rope_base, hp_.rope_mode);
    float* kc = kv.k(l) + static_cast<size_t>(n_past + pend) * kv_dim;
    float* vc = kv.v(l) + static_cast<size_t>(n_past + pend) * kv_dim;
    memcpy(kc, k_.data(), sizeof(float) * n * kv_dim);
    memcpy(vc, v_.data(), sizeof(float) * n * kv_dim);
    AttentionArgs a;
    a.q = q_.data();
    a.k = kv.k(l);
    a.v = kv.v(l);
    a.out = att_.data();
    a.n = n;
    a.n_past = n_past;
    a.n_heads = hp_.n_heads;
    a.n_kv_heads = hp_.n_kv_heads;
    a.head_dim = hd;
    a.parents = block_parents_.data();
    a.anc_off = anc_off_.data();
    a.anc = anc_.data();
    a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
    be_.attention(a);
    be_.matmul(L.wo, att_.data(), n, xn_.data());
    be_.add(x_.data(), xn_.data(), static_cast<size_t>(n) * dim);
    // feed-forward block
    be_.rmsnorm(x_.data(), L.ffn_norm, n, dim, hp_.rms_eps, xn_.data());
    be_.matmul(L.w_gate, xn_.data(), n, gate_.data());
    be_.matmul(L.w_up, xn_.data(), n, up_.data());
    be_.swiglu(gate_.data(), up_.data(), static_cast<size_t>(n) * hp_.ffn_dim);
    be_.matmul(L.w_down, gate_.data(), n, xn_.data());
    be_.add(x_.data(), xn_.data(), static_cast<size_t>(n) * dim);
    w_.release(l);
  }
  kv.append_pending(b.parents);

  const float* last = x_.data() + (rows == LogitsRows::kAll ? 0 : static_cast<size_t>(n - 1) * dim);
  const int m = static_cast<int>(out_rows);
  be_.rmsnorm(last, g.output_norm, m, dim, hp_.rms_eps, xn_.data());
  be_.matmul(g.lm_head, xn_.data(), m, logits.data());
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
