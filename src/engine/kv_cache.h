// Per-model KV cache: for each layer, K and V rows [capacity][n_kv_heads * head_dim]
// (float32). Rows 0..committed()-1 hold the committed sequence; a pass over n new
// tokens writes rows committed()..committed()+n-1, which stay uncommitted until
// commit_prefix(n) (a chain, e.g. prefill or decode) or commit_path(rows) (the
// accepted path of a tree, compacted in place) makes them part of the sequence.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace redwood {

class KvCache {
 public:
  KvCache(int n_layers, int kv_dim, int capacity);

  int capacity() const { return capacity_; }
  int committed() const { return committed_; }
  int kv_dim() const { return kv_dim_; }
  int n_layers() const { return static_cast<int>(k_.size()); }
  uint64_t bytes() const;

  float* k(int layer) { return k_[layer].data(); }
  float* v(int layer) { return v_[layer].data(); }

  // Commit the first n new rows (chain).
  void commit_prefix(int n);
  // Commit new rows rows[0] < rows[1] < ... (indices among the new block) as
  // consecutive positions: rows are moved down in place, the rest dropped.
  void commit_path(std::span<const int32_t> rows);
  // Forget everything from position n on.
  void truncate(int n);

 private:
  int kv_dim_, capacity_;
  int committed_ = 0;
  std::vector<std::vector<float>> k_, v_;
};

}  // namespace redwood
