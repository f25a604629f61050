// A paged KV cache shared by many sequences of different lengths: a pool of
// n_blocks blocks of block_rows rows; per layer one K and one V store
// [n_blocks * block_rows][kv_dim] of the element type (F32, F16, BF16 or Q8_0) in
// backend memory. A sequence owns a block table: its position r is cache row
// table[r / block_rows] * block_rows + r % block_rows (kv_row in
// kernels/backend.h), so no sequence reserves a context's rows up front.
//
// Per sequence the life cycle is KvCache's (kv_cache.h): a pass
// (Transformer::forward(const SeqBatch&, ...)) appends pending rows after the
// committed ones, their parents block-relative; commit_prefix / commit_path
// (accepted rows moved down in place) / discard / truncate end the block.
// Blocks are taken from the free list when a pass needs rows (reserve) and
// returned as soon as no position of the sequence lies in them (commit, discard,
// truncate, free_sequence).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/backend.h"

namespace redwood {

class KvPool {
 public:
  // REQUIRES: n_layers, kv_dim, n_blocks, block_rows, max_rows > 0; type F32, F16, BF16 or Q8_0
  // (else throws redwood::Error). max_rows: the most positions one sequence may hold.
  KvPool(Backend& be, int n_layers, int kv_dim, int n_blocks, int block_rows, int max_rows, DType type = DType::F32);
  KvPool(const KvPool&) = delete;
  KvPool& operator=(const KvPool&) = delete;

  // Backend bytes of a pool of this shape (K and V of every layer).
  static uint64_t bytes_for(int n_layers, int kv_dim, int n_blocks, int block_rows, DType type);
  uint64_t bytes() const;

  // A new empty sequence; its id (ids of freed sequences are reused).
  int add_sequence();
  // Returns every block of s to the pool; s is no longer live.
  void free_sequence(int s);
  bool live(int s) const;
  int live_sequences() const;

  // Per sequence; REQUIRES: live(s) (else throws redwood::Error).
  int committed(int s) const;
  int pending(int s) const;
  // Parent of each pending row (block-relative, -1 = attends to the committed rows only).
  const std::vector<int32_t>& block_parents(int s) const;
  // Position of each pending row (what a sliding window masks by; committed
  // position r is position r).
  const std::vector<int32_t>& block_positions(int s) const;
  // Backs positions 0..rows-1 of s with blocks. Throws redwood::Error, taking
  // nothing, when rows > max_rows() or the pool lacks free blocks.
  void reserve(int s, int rows);
  // Blocks s would have to take for rows positions (0 if it has them).
  int blocks_needed(int s, int rows) const;
  // Called by the forward pass after writing s's rows: their parents and
  // positions (equal lengths, else throws).
  // REQUIRES: committed + pending + parents.size() positions reserved.
  void append_pending(int s, std::span<const int32_t> parents, std::span<const int32_t> positions);
  // The cache row of position r of s. REQUIRES: r reserved.
  int64_t row(int s, int r) const;
  // The block table of s: table_stride() entries, -1 past its blocks.
  const int32_t* table(int s) const;

  // Commit the first n pending rows (a chain) and drop the rest of the block.
  void commit_prefix(int s, int n);
  // Commit pending rows rows[0] < rows[1] < ... (block indices) as consecutive
  // positions: rows are moved down in place, the rest dropped.
  void commit_path(int s, std::span<const int32_t> rows);
  void discard(int s);
  // Forget everything of s from position n on.
  void truncate(int s, int n);

  int n_blocks() const { return n_blocks_; }
  int free_blocks() const { return static_cast<int>(free_.size()); }
  int block_rows() const { return block_rows_; }
  int max_rows() const { return max_rows_; }
  int table_stride() const { return stride_; }
  int kv_dim() const { return kv_dim_; }
  DType type() const { return type_; }
  int n_layers() const { return static_cast<int>(k_.size()); }
  // Unique per pool object: what recorded passes are keyed by.
  uint64_t id() const { return id_; }
  // Backend memory, rows of type() elements (kv_row_bytes(type(), kv_dim()) bytes each).
  void* k(int layer) { return k_[layer].as(); }
  void* v(int layer) { return v_[layer].as(); }

 private:
  struct Seq {
    bool live = false;
    int committed = 0, blocks = 0;
    std::vector<int32_t> parents, positions;  // pending rows' parents and positions
    void clear_block() { parents.clear(), positions.clear(); }
  };
  const Seq& seq(int s) const;
  Seq& seq(int s);
  // Returns the blocks of s past those holding its first `rows` positions.
  void shrink(int s, int rows);

  Backend* be_;
  uint64_t id_;
  int kv_dim_, n_blocks_, block_rows_, max_rows_, stride_;
  DType type_;
  std::vector<Seq> seqs_;
  std::vector<int32_t> tables_;  // [seqs_.size()][stride_]
  std::vector<int32_t> free_;    // free block ids (taken from the back)
  std::vector<BackendBuffer> k_, v_;
};

}  // namespace redwood
