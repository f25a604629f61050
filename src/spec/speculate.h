// The speculative step loop. The draft (resident) builds a token tree level by
// level, one batched draft pass per level, following a static tree shape; the
// target scores the whole tree in ONE pass; the verifier returns the accepted
// path plus a bonus token; both KV caches keep the accepted path (compacted in
// place, nothing recomputed) and drop the rest.
//
// Per step the tree's root is the newest token (last step's bonus), which
// neither model has processed yet: the target pass covers [root + tree], the
// draft's first pass covers its unprocessed tokens ending at the root.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "src/engine/sampler.h"
#include "src/engine/transformer.h"
#include "src/spec/sequoia_dp.h"
#include "src/spec/verify.h"

namespace redwood::spec {

// Parses --tree: "chain:K", "kary:WxD", "sequoia:FILE", or "sequoia" (DP with
// budget = nodes per target pass, root included, and max depth; acceptance
// vector from a JSON file {"acceptance": [...]} or default_acceptance()).
StaticTree make_tree_shape(const std::string& spec, int budget, int depth, const std::string& acceptance_file);

struct SpecConfig {
  StaticTree shape;
  Verifier verifier = Verifier::kGreedy;
  SamplingParams sampling;
  int prefill_chunk = 0;  // prompt passes of at most this many tokens (0 = one pass)
};

struct SpecStats {
  int target_passes = 0;
  int draft_passes = 0;
  int64_t emitted = 0;
  double draft_seconds = 0;   // draft passes + child sampling
  double verify_seconds = 0;  // target pass + verification + KV compaction
  std::vector<int64_t> accepted_by_depth;  // [k] = steps that accepted k drafted tokens
};

class SpecDecoder {
 public:
  // Checks vocabularies match and the verifier suits the sampling parameters.
  SpecDecoder(Transformer& target, Transformer& draft, const ModelDesc& target_desc, const ModelDesc& draft_desc,
              SpecConfig cfg, int capacity);

  // Processes the prompt (all but its last token are prefilled into both caches).
  void start(std::span<const int32_t> prompt);
  // One speculative step: returns the emitted tokens (accepted path + bonus).
  std::vector<int32_t> step();

  const SpecStats& stats() const { return stats_; }
  KvCache& target_cache() { return tkv_; }
  KvCache& draft_cache() { return dkv_; }
  int32_t root() const { return root_; }
  // Tokens the draft has not processed yet (ends with root()).
  const std::vector<int32_t>& draft_pending_tokens() const { return draft_todo_; }

 private:
  void dist(std::span<const float> logits, std::vector<float>& out) const;

  Transformer& target_;
  Transformer& draft_;
  SpecConfig cfg_;
  int vocab_;
  KvCache tkv_, dkv_;
  Rng rng_;
  int32_t root_ = -1;                 // newest token, not yet processed by the target
  std::vector<int32_t> draft_todo_;   // tokens the draft has not processed (ends with root_)
  std::vector<std::vector<int32_t>> children_;  // static shape: children of each node in rank order
  SpecStats stats_;
};

}  // namespace redwood::spec
