#include "src/engine/kv_pool.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>

#include "src/engine/kv_cache.h"
#include "src/engine/kv_type.h"
#include "src/util/error.h"

namespace redwood {

namespace {
uint64_t next_pool_id() {
  static std::atomic<uint64_t> n{0};
  return ++n;
}
}  // namespace

KvPool::KvPool(Backend& be, int n_layers, int kv_dim, int n_blocks, int block_rows, int max_rows, DType type)
    : be_(&be),
      id_(next_pool_id()),
      kv_dim_(kv_dim),
      n_blocks_(n_blocks),
      block_rows_(block_rows),
      max_rows_(max_rows),
      stride_(block_rows > 0 ? static_cast<int>(kv_blocks(max_rows, block_rows)) : 0),
      type_(type) {
  if (n_layers <= 0 || kv_dim <= 0 || n_blocks <= 0 || block_rows <= 0 || max_rows <= 0)
    throw Error("invalid KV pool shape");
  KvCache::check_type(type);
  if (static_cast<int64_t>(n_blocks) * block_rows > INT32_MAX) throw Error("KV pool: more than 2^31 rows");
  const size_t bytes = bytes_for(1, kv_dim, n_blocks, block_rows, type) / 2;
  for (int l = 0; l < n_layers; ++l) {
    k_.emplace_back(be, bytes);
    v_.emplace_back(be, bytes);
  }
  for (int b = n_blocks - 1; b >= 0; --b) free_.push_back(b);
}

uint64_t KvPool::bytes_for(int n_layers, int kv_dim, int n_blocks, int block_rows, DType type) {
  return 2ull * n_layers * static_cast<uint64_t>(n_blocks) * block_rows * kv_row_bytes(type, kv_dim);
}

uint64_t KvPool::bytes() const {
  return bytes_for(n_layers(), kv_dim_, n_blocks_, block_rows_, type_);
}

const KvPool::Seq& KvPool::seq(int s) const {
  if (s < 0 || s >= static_cast<int>(seqs_.size()) || !seqs_[s].live)
    throw Error("KV pool: no sequence " + std::to_string(s));
  return seqs_[s];
}

KvPool::Seq& KvPool::seq(int s) {
  return const_cast<Seq&>(static_cast<const KvPool*>(this)->seq(s));
}

int KvPool::add_sequence() {
  int s = 0;
  while (s < static_cast<int>(seqs_.size()) && seqs_[s].live) ++s;
  if (s == static_cast<int>(seqs_.size())) {
    seqs_.emplace_back();
    tables_.resize(seqs_.size() * stride_, -1);
  }
  seqs_[s] = Seq{};
  seqs_[s].live = true;
  return s;
}

void KvPool::free_sequence(int s) {
  seq(s);
  shrink(s, 0);
  seqs_[s] = Seq{};
}

bool KvPool::live(int s) const {
  return s >= 0 && s < static_cast<int>(seqs_.size()) && seqs_[s].live;
}

int KvPool::live_sequences() const {
  int n = 0;
  for (const Seq& q : seqs_) n += q.live;
  return n;
}

int KvPool::committed(int s) const {
  return seq(s).committed;
}

int KvPool::pending(int s) const {
  return static_cast<int>(seq(s).parents.size());
}

const std::vector<int32_t>& KvPool::block_parents(int s) const {
  return seq(s).parents;
}

const std::vector<int32_t>& KvPool::block_positions(int s) const {
  return seq(s).positions;
}

int KvPool::blocks_needed(int s, int rows) const {
  const int want = static_cast<int>(kv_blocks(rows, block_rows_));
  return std::max(0, want - seq(s).blocks);
}

void KvPool::reserve(int s, int rows) {
  Seq& q = seq(s);
  if (rows > max_rows_)
    throw Error("KV pool: sequence " + std::to_string(s) + " needs " + std::to_string(rows) +
                " positions, more than its limit " + std::to_string(max_rows_));
  const int need = blocks_needed(s, rows);
  if (need > free_blocks())
    throw Error("KV pool: sequence " + std::to_string(s) + " needs " + std::to_string(need) + " more blocks, " +
                std::to_string(free_blocks()) + " of " + std::to_string(n_blocks_) + " are free");
  for (int i = 0; i < need; ++i) {
    tables_[static_cast<size_t>(s) * stride_ + q.blocks++] = free_.back();
    free_.pop_back();
  }
}

void KvPool::shrink(int s, int rows) {
  Seq& q = seq(s);
  const int keep = static_cast<int>(kv_blocks(rows, block_rows_));
  while (q.blocks > keep) {
    int32_t& b = tables_[static_cast<size_t>(s) * stride_ + --q.blocks];
    free_.push_back(b);
    b = -1;
  }
}

void KvPool::append_pending(int s, std::span<const int32_t> parents, std::span<const int32_t> positions) {
  Seq& q = seq(s);
  if (positions.size() != parents.size()) throw Error("KV pool: pending rows' parents and positions differ in length");
  const int rows = q.committed + static_cast<int>(q.parents.size() + parents.size());
  if (rows > q.blocks * block_rows_) throw Error("KV pool: pending rows past the reserved blocks");
  q.parents.insert(q.parents.end(), parents.begin(), parents.end());
  q.positions.insert(q.positions.end(), positions.begin(), positions.end());
}

int64_t KvPool::row(int s, int r) const {
  return kv_row(table(s), block_rows_, r);
}

const int32_t* KvPool::table(int s) const {
  seq(s);
  return tables_.data() + static_cast<size_t>(s) * stride_;
}

void KvPool::commit_prefix(int s, int n) {
  Seq& q = seq(s);
  if (n < 0 || n > static_cast<int>(q.parents.size())) throw Error("KV pool: commit_prefix beyond the pending block");
  q.committed += n;
  q.clear_block();
  shrink(s, q.committed);
}

void KvPool::commit_path(int s, std::span<const int32_t> rows) {
  Seq& q = seq(s);
  int prev = -1;
  for (int32_t r : rows) {
    if (r <= prev || r >= static_cast<int>(q.parents.size()))
      throw Error("KV pool commit_path: rows must ascend within the pending block");
    prev = r;
  }
  // Position committed + rows[j] moves down to committed + j (ascending: no
  // row is overwritten before it moves). Rows consecutive in the cache on both
  // sides move as one copy, ordered like the ops.
  const size_t row_bytes = kv_row_bytes(type_, kv_dim_);
  for (size_t j = 0; j < rows.size();) {
    const int64_t dst = row(s, q.committed + static_cast<int>(j)), src = row(s, q.committed + rows[j]);
    size_t e = j + 1;
    while (e < rows.size() && row(s, q.committed + static_cast<int>(e)) == dst + static_cast<int64_t>(e - j) &&
           row(s, q.committed + rows[e]) == src + static_cast<int64_t>(e - j))
      ++e;
    if (dst != src)
      for (size_t l = 0; l < k_.size(); ++l) {
        char* kb = static_cast<char*>(k(static_cast<int>(l)));
        char* vb = static_cast<char*>(v(static_cast<int>(l)));
        be_->copy(kb + dst * row_bytes, kb + src * row_bytes, row_bytes * (e - j));
        be_->copy(vb + dst * row_bytes, vb + src * row_bytes, row_bytes * (e - j));
      }
    j = e;
  }
  q.committed += static_cast<int>(rows.size());
  q.clear_block();
  shrink(s, q.committed);
}

void KvPool::discard(int s) {
  Seq& q = seq(s);
  q.clear_block();
  shrink(s, q.committed);
}

void KvPool::truncate(int s, int n) {
  Seq& q = seq(s);
  if (n < 0 || n > q.committed) throw Error("KV pool truncate out of range");
  q.committed = n;
  q.clear_block();
  shrink(s, n);
}

}  // namespace redwood
