// The Llama forward pass, tree-ready. One call takes n new tokens, each with a
// position and a parent among the n (-1: attends only to the committed prefix).
// Token i attends to the committed KV prefix plus its ancestors (and itself).
// Prefill is a chain (parents i-1), decoding n = 1, verification a tree.
#pragma once
#include <cstdint>
#include <map>
#include <span>
#include <tuple>
#include <vector>

#include "kernels/backend.h"
#include "src/engine/kv_cache.h"
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

enum class LogitsRows { kAll, kLast };

struct PassStats {
  double seconds = 0;
  int n_tokens = 0;
};

class Transformer {
 public:
  Transformer(const ModelDesc& m, WeightSource& w, Backend& be);
  ~Transformer();
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  const LlamaHParams& hparams() const { return hp_; }
  // The element type of the KV caches make_cache() returns: F32 (default),
  // F16 or BF16 (throws on any other). Rows are rounded to it when written,
  // so every pass shape (chain, tree) sees the same values.
  void set_kv_type(DType t);
  DType kv_type() const { return kv_type_; }
  KvCache make_cache(int capacity) const;

  // Runs one pass. K/V of new token i are written to cache row
  // committed() + pending() + i and become pending rows; nothing is committed
  // (the caller commits a prefix or a path). Writes vocab floats per selected
  // row to logits (n rows for kAll, 1 for kLast).
  // Throws redwood::Error on an invalid batch (bad parents, tokens, capacity).
  PassStats forward(const Batch& b, KvCache& kv, std::span<float> logits, LogitsRows rows = LogitsRows::kAll);

 private:
  // Backend pointers to the pass's index arrays (see forward()).
  struct PassPointers {
    const int32_t *header, *tokens, *positions, *parents, *anc_off, *anc;
  };
  void ensure_scratch(int n);
  // Every backend op of one pass, from the embedding to the LM head.
  void issue_ops(const PassPointers& p, int n, LogitsRows rows, KvCache& kv, float* logits);
  void drop_recordings();

  LlamaHParams hp_;
  DType kv_type_ = DType::F32;
  WeightSource& w_;
  Backend& be_;
  BackendBuffer rope_inv_freq_;  // head_dim / 2 doubles (rope_inv_freqs)
  // Activation scratch in backend memory, sized for the largest n seen.
  int cap_n_ = 0;
  BackendBuffer x_, xn_, q_, k_, v_, att_, gate_, up_, logits_;
  // The pass's index arrays (host), and their copy in backend memory:
  // tokens | positions | block parents | ancestor offsets | ancestors.
  std::vector<int32_t> anc_off_, anc_, block_parents_, meta_;
  BackendBuffer meta_dev_;
  // Recorded passes by shape: (n, all rows?, the cache's id) -> a recording
  // id, or seen once / not recordable.
  using RecordKey = std::tuple<int, bool, uint64_t>;
  static constexpr int kSeenOnce = -1, kNoRecording = -2;
  static constexpr size_t kMaxRecordings = 256;
  std::map<RecordKey, int> recordings_;
};

// Runs a prompt chain through the model in passes of at most `chunk` tokens
// (0 = one pass), committing each; `logits` receives the last token's row.
// Bounds the activations of long prompts (the planner's tokens per pass).
void prefill(Transformer& tf, KvCache& kv, std::span<const int32_t> tokens, int chunk, std::span<float> logits);

}  // namespace redwood
