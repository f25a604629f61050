// Many prompts -> texts through shared passes (continuous batching): every
// pass carries one next token of each decoding sequence and, in the room left
// under the pass's token budget, chunks of waiting prompts; a sequence that
// finishes leaves at once and a queued request takes its place.
//
// With a resident draft (BatchDraft) each decoding sequence may also get a
// speculative tree in the pass: one node budget per pass (pass_tokens) holds
// every decoding sequence's next-token slot and the prompt chunks, and the
// nodes left go to trees, as many per sequence as the node budget rule says
// (BatchDraft: fixed, or chosen from the pass's measured cost t(n) and the
// trees' expected accepted tokens). One sequence alone is speculative
// decoding; many with no room left are plain batching. The trees grow level
// by level together: one draft pass per level carries every sequence's nodes
// of that level (the draft's rows live in the generator's own KvPool), so the
// draft's weights are read once per level, not once per sequence.
//
// Each request's output is what generate() gives it alone: its own sampler
// (its seed), the same stop rules (OutputStream), and logits that do not depend
// on which other tokens share the pass (Transformer::forward(SeqBatch) over a
// KvPool; the determinism note in docs/ARCHITECTURE.md).
//
//   BatchGenerator gen(target, tok, pool, {.max_sequences = 16, .pass_tokens = 64});
//   auto a = gen.submit(req_a), b = gen.submit(req_b);
//   while (!gen.idle()) for (auto& done : gen.step()) use(done.ticket, done.generation);
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "src/engine/kv_pool.h"
#include "src/engine/sampler.h"
#include "src/engine/transformer.h"
#include "src/speculative/generation.h"
#include "src/speculative/node_budget.h"
#include "src/speculative/speculate.h"
#include "src/tokenizer/tokenizer.h"

namespace redwood::spec {

struct BatchLimits {
  int max_sequences = 16;  // sequences in flight (decoding or prefilling)
  // Prompt tokens fill a pass up to this; every decoding sequence has its token
  // anyway (with trees, pass_tokens >= max_sequences x the smallest tree: no
  // target pass exceeds it). The draft's passes hold at most this too: a new
  // tree sequence's prompt reaches the draft in chunks.
  int pass_tokens = 64;
};

// Trees in shared passes. The tree is a static Sequoia tree: config.shape is
// the largest a sequence gets (its verifier and sampling mode are the run's;
// each request brings its own seed); smaller ones are the Sequoia DP's best
// trees of k nodes under `acceptance` and config.shape's depth.
struct BatchDraft {
  Transformer* draft = nullptr;
  const ModelDesc* target_desc = nullptr;
  const ModelDesc* draft_desc = nullptr;
  SpecConfig config;                // static tree
  std::vector<double> acceptance;   // the DP's acceptance vector (p_1 >= p_2 >= ...)
  // The target pass's cost in seconds for n tokens (the hardware profile's
  // t(n)). Empty: fixed trees (every decoding sequence gets config.shape, the
  // DP's smaller trees split evenly when the pass has no room for them all).
  // Set: per pass, the split of the room that maximises expected emitted
  // tokens / (t(pass tokens) + the trees' draft time), root-only trees (plain
  // batching) included.
  std::function<double(int)> pass_seconds;
  // One draft pass over w tokens (the hardware profile's c(w)); the trees'
  // draft time is one pass per level that has children, carrying every
  // sequence's nodes of that level (shared_draft_seconds), after the passes
  // that catch the draft up on new sequences' prompts. Empty: the draft's
  // time is not counted.
  std::function<double(int)> draft_level_seconds;
};

// What the passes so far did (for reports and the scheduler's choices).
struct BatchStats {
  int64_t passes = 0;
  int64_t pass_tokens = 0;    // tokens over all passes (prompt and generated)
  int64_t decode_tokens = 0;  // of which next-token slots of decoding sequences
  double pass_seconds = 0;    // inside Transformer::forward
  double draft_seconds = 0;   // the draft's work: its passes (prefills included) and the trees it builds
  int max_in_flight = 0;
  int64_t tree_nodes = 0;     // drafted nodes verified (roots excluded)
  int64_t tree_steps = 0;     // sequence steps that had a tree of more than the root
  int64_t emitted = 0;        // tokens the decode slots and trees emitted
  int64_t draft_passes = 0;   // draft passes (each carries every tree's nodes of one level)
  int64_t draft_catch_up_passes = 0;  // of which chains of prompts before the trees' first level
  int64_t draft_tokens = 0;   // tokens over all draft passes (prompts, catch-up and tree nodes)
  // The largest target pass: at most BatchLimits::pass_tokens where that is at
  // least max_sequences (always with trees; Session::batcher() makes it so),
  // else every decoding sequence's token still rides.
  int max_pass_tokens = 0;
  int max_draft_pass_tokens = 0;  // the largest draft pass (at most BatchLimits::pass_tokens)
};

class BatchGenerator {
 public:
  // REQUIRES: pool was made for target (its layers, kv_dim, element type) and
  // holds no sequence; target, tok and pool outlive the generator;
  // limits positive (else throws redwood::Error). draft: trees in the passes
  // (a static tree; checked as SpecDecoder checks it); null: plain decoding.
  // With a draft the generator allocates the draft's KvPool, of pool's
  // blocks in the draft's rows (the planner's "KV pool per model").
  BatchGenerator(Transformer& target, const Tokenizer& tok, KvPool& pool, BatchLimits limits,
                 const BatchDraft* draft = nullptr);
  ~BatchGenerator();
  BatchGenerator(const BatchGenerator&) = delete;
  BatchGenerator& operator=(const BatchGenerator&) = delete;

  // Queues a request (its prompt and stop strings are copied) and returns its
  // ticket (1, 2, ... in submission order). Throws redwood::Error, queuing
  // nothing, when the request can never run: an empty prompt, max_tokens < 1,
  // or more positions (prompt + max_tokens + 1) than one sequence of the pool
  // may hold or than the whole pool has. on_text as generate()'s.
  uint64_t submit(const GenerationRequest& req, std::function<void(std::string_view)> on_text = {});
  // The request ends at the next step with finish "cancelled" (queued or in
  // flight); an unknown or finished ticket is ignored.
  void cancel(uint64_t ticket);

  size_t queued() const { return queue_.size(); }
  size_t in_flight() const { return live_.size(); }
  bool idle() const { return queue_.empty() && live_.empty(); }

  struct Done {
    uint64_t ticket;
    Generation generation;
    std::string error;  // set (finish "error") when the request's logits held NaN or an infinity
  };
  // Admits queued requests (first come, first served) while a sequence slot and
  // the pool's blocks for the request's whole length are free, runs at most one
  // pass, and returns the requests that ended in this step, in ticket order.
  // Non-finite logits end their request alone (finish "error", Done::error:
  // the NonFiniteLogits message); the others go on.
  // A request whose pass throws is not retried: the error propagates and the
  // generator must not be used again.
  std::vector<Done> step();

  const BatchStats& stats() const { return stats_; }

 private:
  struct Seq;
  int blocks_for(const Seq& s) const;
  int rows_for(const Seq& s) const;
  void admit();
  void start(Seq& s);
  bool decoding(const Seq& s) const;
  void finish(Seq& s, std::vector<Done>& done);
  int draft_blocks_for(const Seq& s) const;
  // The tree of k nodes (built on first use; k = shapes_.size(): the config's).
  const StaticTree& tree_of(int k);
  // Grows the trees of these sequences level by level, one draft pass per level.
  void grow_trees(const std::vector<Seq*>& trees);
  // Runs the tokens the draft has not run before these trees' roots (a new
  // sequence: its prompt) in passes of at most pass_tokens, until the trees'
  // first draft pass (their pending tokens, roots included) fits one.
  void draft_catch_up(const std::vector<Seq*>& trees);
  // What draft_catch_up(trees) will take, by BatchDraft::draft_level_seconds.
  // REQUIRES: draft_->draft_level_seconds set.
  double catch_up_seconds(const std::vector<Seq*>& trees) const;
  void count_draft_pass(size_t tokens);

  Transformer& target_;
  const Tokenizer& tok_;
  KvPool& pool_;
  BatchLimits limits_;
  std::unique_ptr<BatchDraft> draft_;  // null: plain decoding
  std::unique_ptr<KvPool> draft_pool_;  // the draft's rows of every tree sequence
  int promised_draft_blocks_ = 0;
  std::vector<float> draft_logits_;
  std::vector<StaticTree> shapes_;     // [k - 1]: the tree of k nodes (empty until tree_of(k))
  std::vector<double> tree_value_;     // [k - 1]: its expected emitted tokens
  std::vector<std::vector<int>> tree_widths_;  // [k - 1]: its levels with children (draft passes)
  int min_tree_ = 1;                   // nodes a tree sequence takes at least (a fixed shape: all of it)
  uint64_t next_ticket_ = 1;
  std::deque<std::unique_ptr<Seq>> queue_;
  std::vector<std::unique_ptr<Seq>> live_;  // in admission order
  int promised_blocks_ = 0;                 // blocks the live sequences may still take, in all
  std::vector<float> logits_;               // one pass's rows
  BatchStats stats_;
};

}  // namespace redwood::spec
