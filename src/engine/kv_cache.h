// Per-model KV cache: for each layer, K and V rows [capacity][n_kv_heads * head_dim]
// of the cache's element type (F32, F16, BF16 or Q8_0 blocks: kv_row_bytes), in backend memory (VRAM on the CUDA backend). Rows 0..committed()-1 hold the committed sequence. After
// them lies the pending block: rows written by passes since the last commit (a draft tree grows level by level over
// several passes). A pass over n new tokens appends rows committed()+pending()..+n-1; its parents index the whole block
// (block-relative). commit_prefix(n) (a chain: prefill, decode) or commit_path(rows) (the accepted path of a tree,
// compacted in place) makes rows part of the sequence and clears the block; discard() drops it.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "src/engine/kv_type.h"

namespace redwood {

class KvCache {
 public:
  KvCache(Backend& be, int n_layers, int kv_dim, int capacity, DType type = DType::F32);
  // Throws unless t is a KV type (check_kv_type: F32, F16, BF16 or Q8_0).
  static void check_type(DType t);
  // A deep copy (new backend memory, contents copied); moves transfer it.
  KvCache(const KvCache& o);
  KvCache& operator=(const KvCache&) = delete;
  KvCache(KvCache&&) noexcept = default;
  KvCache& operator=(KvCache&&) noexcept = default;

  int capacity() const { return capacity_; }
  // Unique per cache object (copies get their own): what recorded passes are keyed by.
  uint64_t id() const { return id_; }
  int committed() const { return committed_; }
  int pending() const { return static_cast<int>(block_parent_.size()); }
  // Parent of each pending row (block-relative, -1 = attends to the prefix only).
  const std::vector<int32_t>& block_parents() const { return block_parent_; }
  // Position of each pending row (what a sliding window masks by; committed
  // row r is position r).
  const std::vector<int32_t>& block_positions() const { return block_pos_; }
  // Called by the forward pass after writing n rows: their parents and
  // positions (equal lengths, else throws).
  void append_pending(std::span<const int32_t> parents, std::span<const int32_t> positions);
  int kv_dim() const { return kv_dim_; }
  DType type() const { return type_; }
  int n_layers() const { return static_cast<int>(k_.size()); }
  uint64_t bytes() const;

  // Backend memory, rows of type() elements (kv_row_bytes(type(), kv_dim()) bytes each).
  void* k(int layer) { return k_[layer].as(); }
  void* v(int layer) { return v_[layer].as(); }

  // Commit the first n pending rows (a chain) and drop the rest of the block.
  void commit_prefix(int n);
  // Commit pending rows rows[0] < rows[1] < ... (block indices) as consecutive
  // positions: rows are moved down in place, the rest dropped.
  void commit_path(std::span<const int32_t> rows);
  void discard() { clear_block(); }
  // Forget everything from position n on.
  void truncate(int n);

 private:
  static uint64_t next_id();
  void clear_block() { block_parent_.clear(), block_pos_.clear(); }
  Backend* be_;
  uint64_t id_ = next_id();
  int kv_dim_, capacity_;
  DType type_ = DType::F32;
  int committed_ = 0;
  std::vector<int32_t> block_parent_, block_pos_;
  std::vector<BackendBuffer> k_, v_;
};

}  // namespace redwood
