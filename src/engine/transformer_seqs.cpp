// Transformer::forward over several sequences of a KvPool (one pass, every
// weight once): the batch's checks, its index arrays, its logits rows.
#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "src/engine/transformer.h"
#include "src/util/error.h"

namespace redwood {

PassStats Transformer::forward(const SeqBatch& b, KvPool& pool, std::span<float> logits,
                               std::span<const int32_t> logit_rows) {
  const auto t0 = std::chrono::steady_clock::now();
  const int n = static_cast<int>(b.tokens.size());
  if (n == 0) throw Error("forward pass with no tokens");
  if (b.seqs.size() != b.tokens.size() || b.positions.size() != b.tokens.size() || b.parents.size() != b.tokens.size())
    throw Error("forward pass: sequences, tokens, positions and parents differ in length");
  if (pool.n_layers() != hp_.n_layers || pool.kv_dim() != hp_.n_kv_heads * hp_.head_dim)
    throw Error("forward pass: the KV pool's shape is not this model's");
  const int m = static_cast<int>(logit_rows.size());
  if (logits.size() < static_cast<size_t>(m) * hp_.vocab) throw Error("forward pass: logits buffer too small");
  for (int32_t r : logit_rows)
    if (r < 0 || r >= n) throw Error("forward pass: logits row " + std::to_string(r) + " is not a token of the batch");

  // The pass's sequences in order of first appearance (local index), each
  // with its block's parents (pending rows, then this batch's tokens).
  struct Local {
    int id, committed, pending;
    std::vector<int32_t> parents, positions;  // the whole block's
  };
  std::vector<Local> seqs;
  std::map<int, int> local_of;
  std::vector<int32_t> local(n), block_row(n);  // token i: its sequence (local index), its row of that block
  for (int i = 0; i < n; ++i) {
    const int s = b.seqs[i];
    if (!pool.live(s)) throw Error("forward pass: no sequence " + std::to_string(s) + " in the KV pool");
    auto [it, fresh] = local_of.emplace(s, static_cast<int>(seqs.size()));
    if (fresh)
      seqs.push_back(Local{s, pool.committed(s), pool.pending(s), pool.block_parents(s), pool.block_positions(s)});
    Local& q = seqs[it->second];
    local[i] = it->second;
    block_row[i] = static_cast<int32_t>(q.parents.size());
    if (b.tokens[i] < 0 || b.tokens[i] >= hp_.vocab)
      throw Error("forward pass: token id " + std::to_string(b.tokens[i]) + " out of range");
    if (b.parents[i] < -1 || b.parents[i] >= block_row[i])
      throw Error("forward pass: parent of token " + std::to_string(i) +
                  " must be -1 or an earlier row of its sequence's block");
    if (b.positions[i] < 0) throw Error("forward pass: negative position");
    q.parents.push_back(b.parents[i]);
    q.positions.push_back(b.positions[i]);
  }
  int blocks = 0;
  for (const Local& q : seqs) {
    const int rows = q.committed + static_cast<int>(q.parents.size());
    if (rows > pool.max_rows())
      throw Error("forward pass: sequence " + std::to_string(q.id) + " would hold " + std::to_string(rows) +
                  " positions, more than the KV pool's limit " + std::to_string(pool.max_rows()));
    blocks += pool.blocks_needed(q.id, rows);
  }
  if (blocks > pool.free_blocks())
    throw Error("forward pass: the KV pool has " + std::to_string(pool.free_blocks()) +
                " free blocks, the pass needs " + std::to_string(blocks));
  for (const Local& q : seqs) pool.reserve(q.id, q.committed + static_cast<int>(q.parents.size()));
  ensure_scratch(n);

  // Index arrays at offsets that depend only on the scratch size and the
  // pool's table width (so a recorded pass finds them where it recorded them):
  // tokens | positions | sequence (local) | cache row | logits rows |
  // committed per sequence | block tables | ancestor offsets (windowed, full) |
  // ancestors.
  const size_t cap = static_cast<size_t>(cap_n_), stride = static_cast<size_t>(pool.table_stride());
  const size_t o_tok = 0, o_pos = cap, o_seq = 2 * cap, o_row = 3 * cap, o_ids = 4 * cap, o_past = 5 * cap,
               o_tab = 6 * cap, o_off = o_tab + cap * stride, o_off_full = o_off + cap + 1,
               o_anc = o_off_full + cap + 1;
  build_ancestors(n, [&](int i, int window) {
    const Local& q = seqs[local[static_cast<size_t>(i)]];
    add_ancestors(q.parents, q.positions, block_row[static_cast<size_t>(i)], window);
  });
  const size_t n_seqs = seqs.size(), total = o_anc + anc_.size();
  if (meta_.size() < total) meta_.resize(total);
  std::copy(b.tokens.begin(), b.tokens.end(), meta_.begin() + o_tok);
  std::copy(b.positions.begin(), b.positions.end(), meta_.begin() + o_pos);
  std::copy(local.begin(), local.end(), meta_.begin() + o_seq);
  for (int i = 0; i < n; ++i) {
    const Local& q = seqs[local[i]];
    meta_[o_row + i] = static_cast<int32_t>(pool.row(q.id, q.committed + block_row[i]));
  }
  std::copy(logit_rows.begin(), logit_rows.end(), meta_.begin() + o_ids);
  for (size_t s = 0; s < n_seqs; ++s) {
    meta_[o_past + s] = seqs[s].committed;
    std::copy_n(pool.table(seqs[s].id), stride, meta_.begin() + o_tab + s * stride);
  }
  std::copy(anc_off_.begin(), anc_off_.end(), meta_.begin() + o_off);
  std::copy(anc_off_full_.begin(), anc_off_full_.end(), meta_.begin() + o_off_full);
  std::copy(anc_.begin(), anc_.end(), meta_.begin() + o_anc);
  ensure_meta_dev(total);
  // Only the used parts are uploaded (three copies).
  auto* dev = meta_dev_.as<int32_t>();
  be_.upload(dev, meta_.data(), (o_past + n_seqs) * sizeof(int32_t));
  be_.upload(dev + o_tab, meta_.data() + o_tab, n_seqs * stride * sizeof(int32_t));
  be_.upload(dev + o_off, meta_.data() + o_off, (total - o_off) * sizeof(int32_t));
  const int32_t* d = meta_dev_.as<const int32_t>();
  PassPointers pp{nullptr, d + o_tok, d + o_pos, nullptr, d + o_off, d + o_anc};
  if (hp_.mixed_window()) pp.anc_off_full = d + o_off_full;
  pp.seq = d + o_seq, pp.rows = d + o_row, pp.seq_past = d + o_past, pp.table = d + o_tab, pp.out_ids = d + o_ids;

  float* out = be_.host_memory() ? logits.data() : logits_.as<float>();
  w_.begin_pass();
  run_pass(RecordKey{n, m, pool.id(), true}, pp, n, m, PassKv{nullptr, &pool}, out);
  for (const Local& q : seqs)
    pool.append_pending(q.id, std::span<const int32_t>(q.parents).subspan(static_cast<size_t>(q.pending)),
                        std::span<const int32_t>(q.positions).subspan(static_cast<size_t>(q.pending)));
  if (!be_.host_memory() && m > 0) be_.download(logits.data(), logits_.as(), sizeof(float) * m * hp_.vocab);
  w_.end_pass();
  PassStats st;
  st.n_tokens = n;
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

}  // namespace redwood
