// Many prompts -> texts through shared passes (continuous batching): every
// pass carries one next token of each decoding sequence and, in the room left
// under the pass's token budget, chunks of waiting prompts; a sequence that
// finishes leaves at once and a queued request takes its place. Autoregressive
// decoding only (a draft's trees are generate()'s, one sequence at a time).
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
#include "src/tokenizer/tokenizer.h"

namespace redwood::spec {

struct BatchLimits {
  int max_sequences = 16;  // sequences in flight (decoding or prefilling)
  int pass_tokens = 64;    // prompt tokens fill a pass up to this; every decoding sequence has its token anyway
};

// What the passes so far did (for reports and the scheduler's choices).
struct BatchStats {
  int64_t passes = 0;
  int64_t pass_tokens = 0;    // tokens over all passes (prompt and generated)
  int64_t decode_tokens = 0;  // of which next-token slots of decoding sequences
  double pass_seconds = 0;    // inside Transformer::forward
  int max_in_flight = 0;
};

class BatchGenerator {
 public:
  // REQUIRES: pool was made for target (its layers, kv_dim, element type) and
  // holds no sequence; target, tok and pool outlive the generator;
  // limits positive (else throws redwood::Error).
  BatchGenerator(Transformer& target, const Tokenizer& tok, KvPool& pool, BatchLimits limits);
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
  void admit();
  void finish(Seq& s, std::vector<Done>& done);

  Transformer& target_;
  const Tokenizer& tok_;
  KvPool& pool_;
  BatchLimits limits_;
  uint64_t next_ticket_ = 1;
  std::deque<std::unique_ptr<Seq>> queue_;
  std::vector<std::unique_ptr<Seq>> live_;  // in admission order
  int promised_blocks_ = 0;                 // blocks the live sequences may still take, in all
  std::vector<float> logits_;               // one pass's rows
  BatchStats stats_;
};

}  // namespace redwood::spec
