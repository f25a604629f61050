#include "src/engine/transformer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <tuple>

#include "src/util/error.h"

namespace redwood {

ChainBatch::ChainBatch(std::span<const int32_t> toks, int start) : tokens(toks.begin(), toks.end()) {
  for (size_t i = 0; i < toks.size(); ++i) {
    positions.push_back(start + static_cast<int32_t>(i));
    parents.push_back(static_cast<int32_t>(i) - 1);
  }
}

Transformer::Transformer(const ModelDesc& m, WeightSource& w, Backend& be) : hp_(m.hp), w_(w), be_(be) {
  const std::vector<double> f = rope_inv_freqs(hp_);
  rope_inv_freq_ = BackendBuffer(be_, f.size() * sizeof(double));
  be_.upload(rope_inv_freq_.as<void>(), f.data(), f.size() * sizeof(double));
}

void check_kv_support(DType t, const LlamaHParams& hp, const Backend& be, const std::string& model) {
  check_kv_type(t);
  check_kv_head_dim(t, hp.head_dim, model);
  if (!be.supports_kv_type(t))
    throw Error("--kv-type " + kv_type_name(t) + " is not supported on the " + be.name() +
                " backend (f32, f16 and bf16 are)");
}

void Transformer::set_kv_type(DType t) {
  check_kv_support(t, hp_, be_, "the model");
  kv_type_ = t;
}

KvCache Transformer::make_cache(int capacity) const {
  return KvCache(be_, hp_.n_layers, hp_.n_kv_heads * hp_.head_dim, capacity, kv_type_);
}

void Transformer::ensure_meta_dev(size_t ints) {
  if (meta_dev_.size() >= ints * sizeof(int32_t)) return;
  drop_recordings();  // recorded passes point into the old buffer
  meta_dev_ = BackendBuffer(be_, std::max(ints, static_cast<size_t>(4096)) * 2 * sizeof(int32_t));
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
  drop_recordings();  // recorded passes point into the old scratch
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
  // token's ancestor list (block rows, ascending, self included; under a
  // sliding window only those within it, by their positions): CSR.
  block_parents_ = kv.block_parents();
  block_parents_.insert(block_parents_.end(), b.parents.begin(), b.parents.end());
  block_pos_ = kv.block_positions();
  block_pos_.insert(block_pos_.end(), b.positions.begin(), b.positions.end());
  build_ancestors(n, [&](int i, int window) { add_ancestors(block_parents_, block_pos_, pend + i, window); });

  // Index arrays into backend memory, at offsets that depend
  // only on the scratch size and the cache capacity (so a recorded pass finds
  // them where it recorded them): header [committed, committed + pending] |
  // tokens | positions | block parents | ancestor offsets (windowed, full) |
  // ancestors.
  const size_t cap_n = static_cast<size_t>(cap_n_), cap_block = static_cast<size_t>(kv.capacity());
  const size_t o_tok = 2, o_pos = o_tok + cap_n, o_par = o_pos + cap_n, o_off = o_par + cap_block,
               o_off_full = o_off + cap_n + 1, o_anc = o_off_full + cap_n + 1;
  // Only the used parts are written and uploaded (two copies): the gaps left
  // for larger batches and blocks are never read.
  const size_t used_head = o_par + static_cast<size_t>(pend + n), total = o_anc + anc_.size();
  if (meta_.size() < total) meta_.resize(total);
  meta_[0] = n_past;
  meta_[1] = n_past + pend;
  std::copy(b.tokens.begin(), b.tokens.end(), meta_.begin() + o_tok);
  std::copy(b.positions.begin(), b.positions.end(), meta_.begin() + o_pos);
  std::copy(block_parents_.begin(), block_parents_.end(), meta_.begin() + o_par);
  std::copy(anc_off_.begin(), anc_off_.end(), meta_.begin() + o_off);
  std::copy(anc_off_full_.begin(), anc_off_full_.end(), meta_.begin() + o_off_full);
  std::copy(anc_.begin(), anc_.end(), meta_.begin() + o_anc);
  ensure_meta_dev(total);
  auto* dev = meta_dev_.as<int32_t>();
  be_.upload(dev, meta_.data(), used_head * sizeof(int32_t));
  be_.upload(dev + o_off, meta_.data() + o_off, (total - o_off) * sizeof(int32_t));
  const int32_t* d = meta_dev_.as<const int32_t>();
  PassPointers pp{d, d + o_tok, d + o_pos, d + o_par, d + o_off, d + o_anc};
  if (hp_.mixed_window()) pp.anc_off_full = d + o_off_full;

  // Logits land in the caller's buffer when it is backend memory (CPU), else
  // in logits_ and are downloaded once.
  float* out = be_.host_memory() ? logits.data() : logits_.as<float>();
  const int m = static_cast<int>(out_rows);
  w_.begin_pass();
  run_pass(RecordKey{n, m, kv.id(), false}, pp, n, m, PassKv{&kv, nullptr}, out);
  kv.append_pending(b.parents, b.positions);
  if (!be_.host_memory()) be_.download(logits.data(), logits_.as(), sizeof(float) * out_rows * hp_.vocab);
  w_.end_pass();
  PassStats s;
  s.n_tokens = n;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

void Transformer::add_ancestors(std::span<const int32_t> parents, std::span<const int32_t> positions, int row,
                                int window) {
  const size_t first = anc_.size();
  const int32_t qp = positions[static_cast<size_t>(row)];
  for (int j = row; j >= 0; j = parents[static_cast<size_t>(j)])
    if (window <= 0 || qp - positions[static_cast<size_t>(j)] < window) anc_.push_back(j);
  std::reverse(anc_.begin() + static_cast<std::ptrdiff_t>(first), anc_.end());
}

void Transformer::build_ancestors(int n, const std::function<void(int, int)>& add) {
  anc_.clear();
  anc_off_.assign(static_cast<size_t>(n) + 1, 0);
  for (int i = 0; i < n; ++i) {
    add(i, hp_.sliding_window);
    anc_off_[static_cast<size_t>(i) + 1] = static_cast<int32_t>(anc_.size());
  }
  anc_off_full_.clear();
  if (!hp_.mixed_window()) return;
  anc_off_full_.assign(static_cast<size_t>(n) + 1, static_cast<int32_t>(anc_.size()));
  for (int i = 0; i < n; ++i) {
    add(i, 0);
    anc_off_full_[static_cast<size_t>(i) + 1] = static_cast<int32_t>(anc_.size());
  }
}

// The backend ops: recorded once per shape and replayed where the backend
// records (CUDA graphs) and the weights never move; else issued directly.
// Every pointer a recording holds is fixed for its key: the scratch and the
// index arrays (dropped when they move), the cache's or pool's stores.
void Transformer::run_pass(const RecordKey& key, const PassPointers& pp, int n, int m, PassKv kv, float* out) {
  bool done = false;
  if (be_.can_record() && w_.fixed_pointers()) {
    auto it = recordings_.find(key);
    if (it != recordings_.end() && it->second >= 0) {
      be_.replay(it->second);
      done = true;
    } else if (it != recordings_.end() && it->second == kSeenOnce) {
      // Second pass of this shape: record it (scratch and cuBLAS workspace are
      // sized by the first), then replay the recording to run it.
      if (recordings_.size() > kMaxRecordings) drop_recordings();
      be_.begin_record();
      bool failed = false;
      try {
        issue_ops(pp, n, m, kv, out);
      } catch (...) {
        // An op that cannot be recorded, or any other error: whatever was
        // recorded is dropped and the ops are issued again unrecorded (so a
        // real error surfaces there).
        failed = true;
      }
      int id = be_.end_record();
      if (failed && id >= 0) {
        be_.drop_recordings(&id, 1);
        id = -1;
      }
      recordings_[key] = id >= 0 ? id : kNoRecording;
      if (id >= 0) {
        be_.replay(id);
        done = true;
      }
    } else if (it == recordings_.end()) {
      recordings_[key] = kSeenOnce;
    }
  }
  if (!done) issue_ops(pp, n, m, kv, out);
}

void Transformer::drop_recordings() {
  std::vector<int> ids;
  for (const auto& [key, id] : recordings_)
    if (id >= 0) ids.push_back(id);
  be_.drop_recordings(ids.data(), ids.size());
  recordings_.clear();
}

Transformer::~Transformer() {
  drop_recordings();
}

void Transformer::issue_ops(const PassPointers& p, int n, int m, PassKv kv, float* logits) {
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
  const DType kv_type = kv.cache ? kv.cache->type() : kv.pool->type();
  be_.embed(g.tok_embd, p.tokens, n, x);

  for (int l = 0; l < hp_.n_layers; ++l) {
    const LayerWeights& L = w_.acquire(l);
    // attention block
    be_.rmsnorm(x, L.attn_norm, n, dim, hp_.rms_eps, xn);
    be_.matmul(L.wq, xn, n, q);
    be_.matmul(L.wk, xn, n, k);
    be_.matmul(L.wv, xn, n, v);
    if (L.bq) {  // the family's data (LlamaHParams::qkv_bias, qk_norm): null pointers skip
      be_.add_bias(q, L.bq, n, hp_.n_heads * hd);
      be_.add_bias(k, L.bk, n, kv_dim);
      be_.add_bias(v, L.bv, n, kv_dim);
    }
    if (L.q_norm) {  // per head: [n * heads] rows of head_dim, in place
      be_.rmsnorm(q, L.q_norm, n * hp_.n_heads, hd, hp_.rms_eps, q);
      be_.rmsnorm(k, L.k_norm, n * hp_.n_kv_heads, hd, hp_.rms_eps, k);
    }
    be_.rope(q, n, hp_.n_heads, hd, p.positions, rope_inv_freq_.as<const double>(), hp_.rope_mode);
    be_.rope(k, n, hp_.n_kv_heads, hd, p.positions, rope_inv_freq_.as<const double>(), hp_.rope_mode);
    void* kl = kv.cache ? kv.cache->k(l) : kv.pool->k(l);
    void* vl = kv.cache ? kv.cache->v(l) : kv.pool->v(l);
    AttentionArgs a;
    if (kv.cache) {
      be_.write_rows(kl, kv_type, p.header + 1, k, n, kv_dim);  // rows committed + pending ...
      be_.write_rows(vl, kv_type, p.header + 1, v, n, kv_dim);
      a.n_past = kv.cache->committed();
      a.n_past_at = p.header;
    } else {
      be_.write_rows_at(kl, kv_type, p.rows, k, n, kv_dim);  // each token's next position in its sequence
      be_.write_rows_at(vl, kv_type, p.rows, v, n, kv_dim);
      a.seq = p.seq;
      a.seq_past = p.seq_past;
      a.table = p.table;
      a.table_stride = kv.pool->table_stride();
      a.block_rows = kv.pool->block_rows();
    }
    a.q = q;
    a.k = kl;
    a.v = vl;
    a.kv_type = kv_type;
    a.out = att;
    a.n = n;
    a.n_heads = hp_.n_heads;
    a.n_kv_heads = hp_.n_kv_heads;
    a.head_dim = hd;
    a.parents = p.parents;
    a.anc_off = p.anc_off;
    a.anc = p.anc;
    a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
    a.pos = p.positions;
    a.window = hp_.window_of(l);
    if (a.window == 0 && p.anc_off_full) a.anc_off = p.anc_off_full;
    be_.attention(a);
    be_.matmul(L.wo, att, n, xn);
    // residual, then the feed-forward block's norm (one fused op)
    be_.add_rmsnorm(x, xn, L.ffn_norm, n, dim, hp_.rms_eps, xn);
    be_.matmul(L.w_gate, xn, n, gate);
    be_.matmul(L.w_up, xn, n, up);
    be_.swiglu(gate, up, static_cast<size_t>(n) * hp_.ffn_dim);
    be_.matmul(L.w_down, gate, n, xn);
    be_.add(x, xn, static_cast<size_t>(n) * dim);
    w_.release(l);
  }
  if (m == 0) return;
  if (p.out_ids) {
    // The chosen tokens' rows: every row normed, then gathered (an F32 embed
    // copies rows exactly) into x, which the pass no longer needs.
    be_.rmsnorm(x, g.output_norm, n, dim, hp_.rms_eps, xn);
    be_.embed(WeightView{DType::F32, n, dim, xn}, p.out_ids, m, x);
    be_.matmul(g.lm_head, x, m, logits);
    return;
  }
  const float* last = x + static_cast<size_t>(n - m) * dim;
  be_.rmsnorm(last, g.output_norm, m, dim, hp_.rms_eps, xn);
  be_.matmul(g.lm_head, xn, m, logits);
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
