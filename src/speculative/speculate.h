// The speculative step loop. The draft (resident) builds a token tree with
// batched draft passes, driven by a TreePolicy (tree_policy.h): a static shape
// (one pass per level) or a dynamic tree built from the draft's own
// probabilities (DySpec, OPT-Tree, SpecExec); the target scores the whole tree
// in ONE pass; the verifier returns the accepted path plus a bonus token; both
// KV caches keep the accepted path (compacted in place, nothing recomputed) and
// drop the rest.
//
// Per step the tree's root is the newest token (last step's bonus), which
// neither model has processed yet: the target pass covers [root + tree], the
// draft's first pass covers its unprocessed tokens ending at the root.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "src/engine/sampler.h"
#include "src/engine/transformer.h"
#include "src/speculative/sequoia_dp.h"
#include "src/speculative/tree_policy.h"
#include "src/speculative/verify.h"

namespace redwood::spec {

// One batched draft pass over tree nodes whose parents already ran (or are the
// root): the `forward` that grow_tree calls, shared by SpecDecoder::step and
// the dynamic-tree profiler (src/planner/dynamic_profile.cpp). Node v runs at
// position root_pos + depth(v), attending to its parent's block row rows[parent]
// (-1: the committed prefix); the nodes get block rows block, block + 1, ...
// (rows grows to t.size(), -1 for nodes not run; block advances), and each
// node's distribution is to_dist(its logits row). vocab: the draft's rows
// (tokens past them run as draft_token()). lg: scratch.
void draft_level_pass(Transformer& draft, KvCache& kv, DraftTree& t, std::span<const int32_t> nodes, int root_pos,
                      int vocab, std::vector<int32_t>& rows, int& block, std::vector<float>& lg,
                      const std::function<void(std::span<const float>, std::vector<float>&)>& to_dist);

// The token the draft reads for a token of the target's vocabulary: itself,
// or, for an id the draft has no row for (a padding row of a larger target
// embedding, draft_vocab_mismatch() in model_desc.h, which only the target can
// emit), the draft's last row. Only what the draft proposes next depends on it,
// never the emitted law: verification uses the draft's distributions as they are.
inline int32_t draft_token(int32_t token, int draft_vocab) { return token < draft_vocab ? token : draft_vocab - 1; }

// Parses a static --tree: "chain:K", "kary:WxD", "sequoia:FILE", or "sequoia"
// (DP with budget = nodes per target pass, root included, and max depth;
// acceptance vector from a JSON file {"acceptance": [...]} or
// default_acceptance()). Dynamic trees (dyspec, opt-tree, specexec) have no
// shape: make_spec_config handles every tree.
StaticTree make_tree_shape(const std::string& spec, int budget, int depth, const std::string& acceptance_file);

// kStatic for chain:/kary:/sequoia[:FILE], else the dynamic tree's kind;
// throws redwood::Error (listing the valid trees) for anything else.
TreeKind parse_tree_kind(const std::string& spec);

struct SpecConfig {
  StaticTree shape;  // tree.kind == kStatic
  TreeParams tree;   // the kind, and the dynamic trees' parameters
  Verifier verifier = Verifier::kGreedy;
  VerifyOptions verify_options;
  SamplingParams sampling;
  int prefill_chunk = 0;  // prompt passes of at most this many tokens (0 = one pass)
  // Most nodes one target pass verifies, root included (KV capacity: callers
  // add this to prompt + new tokens).
  int max_tree_nodes() const { return tree.kind == TreeKind::kStatic ? shape.size() : tree.budget; }
};

// The tree and verifier settings as plain values: the `generate` flags and a
// batch job's [speculation] keys configure the same thing through this.
struct TreeOptions {
  std::string tree = "sequoia";     // chain:K | kary:WxD | sequoia | sequoia:FILE | dyspec | opt-tree | specexec
  int budget = 64;                  // sequoia, dynamic trees: nodes per target pass, root included
  int depth = 8;                    // sequoia, dynamic trees: max depth in levels, root included
  std::optional<double> threshold;  // dyspec only: 0 = heap variant (default), (0, 1) = layer-wise
  std::optional<double> delta;      // opt-tree only: gain threshold (default 0.5)
  std::optional<int> width;         // specexec only: children per expanded node (default 4)
  std::string verifier;             // "" = greedy at temperature 0, else sequoia (static, dyspec) or
                                    // target-sample (opt-tree, specexec)
  std::string acceptance;           // sequoia: acceptance vector JSON
  std::optional<int> is_alphabet;   // multidraft-is only: alphabet truncation (Omega0 size)
};

// Validates everything (ranges, parameters given for a tree that does not use
// them, verifier vs tree vs temperature) with one-line redwood::Error messages
// that name the flag; returns the config with `sampling` set.
SpecConfig make_spec_config(const TreeOptions& o, const SamplingParams& sampling);
// The verifier/tree/temperature checks alone (SpecDecoder runs them too).
void check_verifier(const SpecConfig& c);

struct SpecStats {
  int target_passes = 0;
  int draft_passes = 0;
  int64_t emitted = 0;
  double draft_seconds = 0;                // draft passes + child sampling
  double verify_seconds = 0;               // target pass + verification + KV compaction
  std::vector<int64_t> accepted_by_depth;  // [k] = steps that accepted k drafted tokens
  std::vector<int32_t> tree_nodes;         // per step: nodes the target verified, root included
  int64_t draft_tokens = 0;                // tree nodes run through the draft (pruned ones too)
};

// One step's target pass over [root + tree] (SpecDecoder::draft_tree): pass
// order (depth-first), absolute positions, parents as pass rows (-1: the
// committed prefix), so it is also the step's block of pending KV rows.
struct TreePass {
  std::vector<int32_t> tokens, positions, parents;
  int size() const { return static_cast<int>(tokens.size()); }
};

class SpecDecoder {
 public:
  // Where the target's KV rows live: the decoder's own cache (step() does the
  // whole step), or the caller's (a shared KvPool: the caller prefills the
  // prompt's head, runs draft_tree()'s pass in its own pass and commits
  // accept()'s rows).
  enum class TargetCache { kOwn, kCaller };
  // Where the draft's KV rows live: the decoder's own cache, or the caller's
  // (a shared KvPool: the caller runs draft_begin()/draft_next()'s passes,
  // several sequences' in one, and commits accept()'s draft rows).
  enum class DraftCache { kOwn, kCaller };
  // Checks the vocabularies pair (draft_vocab_mismatch) and the verifier suits the sampling parameters
  // and the tree. capacity: the target cache (committed tokens + one tree);
  // the draft cache adds the policy's extra draft rows (pruned nodes).
  SpecDecoder(Transformer& target, Transformer& draft, const ModelDesc& target_desc, const ModelDesc& draft_desc,
              SpecConfig cfg, int capacity, TargetCache where = TargetCache::kOwn,
              DraftCache draft_where = DraftCache::kOwn);
  ~SpecDecoder();
  SpecDecoder(const SpecDecoder&) = delete;
  SpecDecoder& operator=(const SpecDecoder&) = delete;

  // Processes the prompt (all but its last token are prefilled into the draft
  // cache, and into the target cache, each when the decoder owns it; the
  // caller's draft cache gets the prompt in the first draft pass, or before
  // it through draft_catch_up()).
  void start(std::span<const int32_t> prompt);
  // One speculative step: returns the emitted tokens (accepted path + bonus).
  // REQUIRES: TargetCache::kOwn.
  std::vector<int32_t> step();

  // step() in two halves around the target's pass.
  // The draft builds this step's tree; the target pass over [root + tree] with
  // the root at position root_pos (the target's committed rows). A root-only
  // tree (set_shape of one node) runs no draft pass: the draft catches up on
  // the tokens it skipped at its next tree.
  // REQUIRES: DraftCache::kOwn.
  const TreePass& draft_tree(int root_pos);

  // draft_tree() pass by pass, for a caller that owns the draft's rows
  // (DraftCache::kCaller) and runs several sequences' draft passes as one.
  // A draft pass over the draft's sequence: parents block-relative (its
  // pending rows, then earlier tokens of the pass), as Batch's.
  struct DraftPass {
    std::vector<int32_t> tokens, positions, parents;
    bool last_only = false;  // logits of the last token only (the first pass), else of every token
    int logit_rows() const { return last_only ? 1 : static_cast<int>(tokens.size()); }
  };
  // Starts the step's tree with the root at target position root_pos; the
  // draft's sequence holds draft_committed rows. Returns the first draft pass,
  // or null when the tree is the root alone (no draft pass this step).
  const DraftPass* draft_begin(int root_pos, int draft_committed);
  // logits: the last pass's logit_rows() rows (x the draft's vocabulary). Returns the next
  // draft pass, or null when the tree is built.
  const DraftPass* draft_next(std::span<const float> logits);
  // For a caller that bounds its draft passes: up to max_tokens of the tokens
  // the draft has not run, before the root (a new sequence: its prompt), as a
  // chain at the draft's committed position draft_committed, with no logits
  // (empty when only the root is pending). The caller runs it, commits its
  // rows and calls draft_caught_up(tokens.size(), the pass's seconds);
  // draft_begin()'s first pass then carries only the rest. REQUIRES:
  // DraftCache::kCaller, no tree growing.
  DraftPass draft_catch_up(int draft_committed, int max_tokens) const;
  // Counts the catch-up pass in stats() (a draft pass, its seconds as draft time).
  // REQUIRES: 0 <= n < draft_pending_tokens().size() (the root stays pending).
  void draft_caught_up(int n, double seconds = 0);
  // The target's pass over [root + tree]. REQUIRES: draft_begin() or
  // draft_next() returned null.
  const TreePass& draft_end();

  // logits: the pass's rows in pass order (size x vocab). Verifies, keeps the
  // accepted path in the draft cache and returns the emitted tokens;
  // target_rows: the pass rows to keep (root first, then the accepted path),
  // for the target's commit_path. draft_rows (DraftCache::kCaller only, and
  // then required): the draft's pending rows to keep, for its commit_path
  // (empty: the draft ran no pass this step and has none).
  // REQUIRES: draft_tree() or draft_end() before, once.
  std::vector<int32_t> accept(std::span<const float> logits, std::vector<int32_t>& target_rows,
                              std::vector<int32_t>* draft_rows = nullptr);
  // The static tree for the next steps (the node budget's choice per pass).
  // REQUIRES: a static tree config; shape.size() <= the config's shape size.
  void set_shape(const StaticTree& shape);

  const SpecStats& stats() const { return stats_; }
  KvCache& target_cache();  // REQUIRES: TargetCache::kOwn
  KvCache& draft_cache();   // REQUIRES: DraftCache::kOwn
  int32_t root() const { return root_; }
  // Tokens the draft has not processed yet (ends with root()).
  const std::vector<int32_t>& draft_pending_tokens() const { return draft_todo_; }

 private:
  // The target's filtered distribution for one row of logits (the run's sampling).
  void target_probs(std::span<const float> logits, std::vector<float>& out) const;
  // The draft's: the same, except greedy runs (the draft's T = 1 softmax).
  void draft_probs(std::span<const float> logits, std::vector<float>& out) const;

  struct Step;  // between draft_tree() and accept()

  Transformer& target_;
  Transformer& draft_;
  SpecConfig cfg_;
  int vocab_;        // the target's rows: every distribution the verifier sees has this size
  int draft_vocab_;  // the draft's rows (<= vocab_)
  std::unique_ptr<TreePolicy> policy_;  // before the caches: it sizes the draft's
  std::optional<KvCache> tkv_;          // TargetCache::kOwn only
  std::optional<KvCache> dkv_;          // DraftCache::kOwn only
  Rng rng_;
  int32_t root_ = -1;                // newest token, not yet processed by the target
  std::vector<int32_t> draft_todo_;  // tokens the draft has not processed (ends with root_)
  DraftTree tree_;
  std::unique_ptr<Step> step_;
  SpecStats stats_;
};

}  // namespace redwood::spec
