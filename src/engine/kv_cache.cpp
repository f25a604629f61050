#include "src/engine/kv_cache.h"

#include <cstring>

#include "src/util/error.h"

namespace redwood {

KvCache::KvCache(int n_layers, int kv_dim, int capacity) : kv_dim_(kv_dim), capacity_(capacity) {
  if (n_layers <= 0 || kv_dim <= 0 || capacity <= 0) throw Error("invalid KV cache shape");
  k_.resize(n_layers);
  v_.resize(n_layers);
  for (int l = 0; l < n_layers; ++l) {
    k_[l].assign(static_cast<size_t>(capacity) * kv_dim, 0.0f);
    v_[l].assign(static_cast<size_t>(capacity) * kv_dim, 0.0f);
  }
}

uint64_t KvCache::bytes() const { return 2ull * k_.size() * capacity_ * kv_dim_ * sizeof(float); }

void KvCache::append_pending(std::span<const int32_t> parents) {
  if (committed_ + pending() + static_cast<int>(parents.size()) > capacity_)
    throw Error("KV cache: pending block past capacity");
  block_parent_.insert(block_parent_.end(), parents.begin(), parents.end());
}

void KvCache::commit_prefix(int n) {
  if (n < 0 || n > pending()) throw Error("KV cache: commit_prefix beyond the pending block");
  committed_ += n;
  block_parent_.clear();
}

void KvCache::commit_path(std::span<const int32_t> rows) {
  int prev = -1;
  for (int32_t r : rows) {
    if (r <= prev || r >= pending()) throw Error("KV cache commit_path: rows must ascend within the pending block");
    prev = r;
  }
  const size_t row = static_cast<size_t>(kv_dim_) * sizeof(float);
  for (size_t l = 0; l < k_.size(); ++l)
    for (size_t j = 0; j < rows.size(); ++j) {
      if (rows[j] == static_cast<int32_t>(j)) continue;
      const size_t dst = static_cast<size_t>(committed_ + j) * kv_dim_;
      const size_t src = static_cast<size_t>(committed_ + rows[j]) * kv_dim_;
      memmove(k_[l].data() + dst, k_[l].data() + src, row);
      memmove(v_[l].data() + dst, v_[l].data() + src, row);
    }
  committed_ += static_cast<int>(rows.size());
  block_parent_.clear();
}

void KvCache::truncate(int n) {
  if (n < 0 || n > committed_) throw Error("KV cache truncate out of range");
  committed_ = n;
  block_parent_.clear();
}

}  // namespace redwood
