// The Llama forward pass, tree-ready. One call takes n new tokens, each with a
// position and a parent among the n (-1: attends only to the committed prefix).
// Token i attends to the committed KV prefix plus its ancestors (and itself);
// on a layer with a sliding window (LlamaHParams::window_of) only to those
// whose position is within the window of its own (committed row r is
// position r).
// Prefill is a chain (parents i-1), decoding n = 1, verification a tree.
// A pass over a KvPool takes tokens of several sequences at once (SeqBatch):
// every weight is acquired once per pass and multiplied against all of them.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/backend.h"
#include "src/engine/kv_cache.h"
#include "src/engine/kv_pool.h"
#include "src/engine/weights.h"
#include "src/model/model_desc.h"

namespace redwood {

// n new tokens. parents are block-relative: the KV cache's pending block (rows
// written since the last commit) comes first, then this batch; so parents[i] is
// -1 or < pending + i. With an empty pending block this is simply "an earlier
// token of this batch".
struct Batch {
  std::span<const int32_t> tokens;
  std::span<const int32_t> positions;
  std::span<const int32_t> parents;
};

// A chain batch for tokens at positions start, start+1, ... (prefill/decode).
struct ChainBatch {
  std::vector<int32_t> tokens, positions, parents;
  ChainBatch(std::span<const int32_t> toks, int start);
  Batch view() const { return {tokens, positions, parents}; }
};

// Tokens of several sequences of one KvPool. Token i extends sequence seqs[i]
// (in any order; a sequence's tokens need not be adjacent). parents[i] is
// relative to that sequence's block: its pending rows, then its earlier tokens
// in this batch; -1 or earlier. A prefill chunk is a chain, decoding one token,
// a speculative step a tree: all of them may share a pass.
struct SeqBatch {
  std::span<const int32_t> seqs;
  std::span<const int32_t> tokens;
  std::span<const int32_t> positions;
  std::span<const int32_t> parents;
};

enum class LogitsRows { kAll, kLast };

struct PassStats {
  double seconds = 0;
  int n_tokens = 0;
};

// Throws a one-line redwood::Error unless a model of hp (`model` names it in
// the message) can keep KV rows of t on be: a KV type (check_kv_type), heads
// whose head_dim suits it (check_kv_head_dim: Q8_0 needs a multiple of 32)
// and a backend that takes it (Backend::supports_kv_type). What a run checks
// before its weights load.
void check_kv_support(DType t, const LlamaHParams& hp, const Backend& be, const std::string& model);

class Transformer {
 public:
  Transformer(const ModelDesc& m, WeightSource& w, Backend& be);
  ~Transformer();
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  const LlamaHParams& hparams() const { return hp_; }
  Backend& backend() const { return be_; }
  // The element type of the KV caches make_cache() returns: F32 (default),
  // F16, BF16 or Q8_0 (throws check_kv_support's error on any other, or on a
  // type the model or backend cannot keep). Rows are rounded to it when
  // written, so every pass shape (chain, tree) sees the same values.
  void set_kv_type(DType t);
  DType kv_type() const { return kv_type_; }
  KvCache make_cache(int capacity) const;

  // Runs one pass. K/V of new token i are written to cache row
  // committed() + pending() + i and become pending rows; nothing is committed
  // (the caller commits a prefix or a path). Writes vocab floats per selected
  // row to logits (n rows for kAll, 1 for kLast).
  // Throws redwood::Error on an invalid batch (bad parents, tokens, capacity).
  PassStats forward(const Batch& b, KvCache& kv, std::span<float> logits, LogitsRows rows = LogitsRows::kAll);

  // Runs one pass over tokens of several sequences of `pool` (transformer_seqs.cpp).
  // Token i's K/V go to the next position of sequence seqs[i] and become
  // pending there, as forward(Batch) does per cache; it attends to its own
  // sequence's committed rows and its ancestors only, so each sequence's
  // logits are what a pass over its tokens alone computes with the same
  // kernels (see the determinism note in docs/ARCHITECTURE.md). Takes the
  // blocks the new positions need from the pool. Writes vocab floats for each
  // of tokens logit_rows[0], logit_rows[1], ... (in that order; none: no
  // logits) to logits.
  // REQUIRES: live sequences, each within pool.max_rows(); enough free blocks;
  // positions >= 0; tokens in the vocabulary; logit_rows in [0, n). Otherwise
  // throws redwood::Error before anything runs or is taken.
  PassStats forward(const SeqBatch& b, KvPool& pool, std::span<float> logits, std::span<const int32_t> logit_rows);

 private:
  // Backend pointers to the pass's index arrays (see forward()); seq .. out_ids
  // only for a pool pass.
  struct PassPointers {
    // anc_off indexes anc as the window masks it; anc_off_full, where some
    // layers attend to everything (LlamaHParams::mixed_window), without it.
    const int32_t *header, *tokens, *positions, *parents, *anc_off, *anc;
    const int32_t *seq = nullptr, *rows = nullptr, *seq_past = nullptr, *table = nullptr, *out_ids = nullptr;
    const int32_t* anc_off_full = nullptr;
  };
  // Where a pass's K/V rows go: one cache, or a pool (exactly one is set).
  struct PassKv {
    KvCache* cache = nullptr;
    KvPool* pool = nullptr;
  };
  // Recorded passes by shape: (n, logits rows, the cache's or pool's id, a
  // pool?) -> a recording id, or seen once / not recordable.
  using RecordKey = std::tuple<int, int, uint64_t, bool>;
  void ensure_scratch(int n);
  // meta_dev_ holds at least `ints` int32s (a new buffer drops the recordings).
  void ensure_meta_dev(size_t ints);
  // Issues (or records, or replays) one pass's ops; m logits rows: the last m
  // tokens', or with p.out_ids those tokens'.
  void run_pass(const RecordKey& key, const PassPointers& p, int n, int m, PassKv kv, float* logits);
  // Every backend op of one pass, from the embedding to the LM head.
  void issue_ops(const PassPointers& p, int n, int m, PassKv kv, float* logits);
  void drop_recordings();
  // Appends to anc_ the ancestors of block row `row` (root first, the row
  // itself last) under the block's parents; under a window > 0 only those
  // whose position is within the window of the row's (AttentionArgs::window).
  void add_ancestors(std::span<const int32_t> parents, std::span<const int32_t> positions, int row, int window);
  // anc_off_ and anc_ for the pass's n tokens (add(i, window) appends token
  // i's list through add_ancestors): the lists under hp_.sliding_window, then
  // where hp_.mixed_window() the full ones, whose offsets (anc_off_full_)
  // index the same anc_.
  void build_ancestors(int n, const std::function<void(int, int)>& add);

  LlamaHParams hp_;
  DType kv_type_ = DType::F32;
  WeightSource& w_;
  Backend& be_;
  BackendBuffer rope_inv_freq_;  // head_dim / 2 doubles (rope_inv_freqs)
  // Activation scratch in backend memory, sized for the largest n seen.
  int cap_n_ = 0;
  BackendBuffer x_, xn_, q_, k_, v_, att_, gate_, up_, logits_;
  // The pass's index arrays (host), and their copy in backend memory:
  // tokens | positions | block parents | ancestor offsets (windowed, full) |
  // ancestors.
  std::vector<int32_t> anc_off_, anc_off_full_, anc_, block_parents_, block_pos_, meta_;
  BackendBuffer meta_dev_;
  static constexpr int kSeenOnce = -1, kNoRecording = -2;
  static constexpr size_t kMaxRecordings = 256;
  std::map<RecordKey, int> recordings_;
};

// Runs a prompt chain through the model in passes of at most `chunk` tokens
// (0 = one pass), committing each; `logits` receives the last token's row.
// Bounds the activations of long prompts (the planner's tokens per pass).
void prefill(Transformer& tf, KvCache& kv, std::span<const int32_t> tokens, int chunk, std::span<float> logits);

}  // namespace redwood
