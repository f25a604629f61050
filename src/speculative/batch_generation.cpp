#include "src/speculative/batch_generation.h"

#include <algorithm>
#include <string>

#include "src/util/clock.h"
#include "src/util/error.h"

namespace redwood::spec {

struct BatchGenerator::Seq {
  Seq(const Tokenizer& tok, const GenerationRequest& r, std::function<void(std::string_view)> on_text)
      : prompt(r.prompt.begin(), r.prompt.end()),
        max_tokens(r.max_tokens),
        sampler(r.sampling),
        out(tok, r.max_tokens, r.stop, std::move(on_text)) {}
  uint64_t ticket = 0;
  std::vector<int32_t> prompt;
  int max_tokens;
  Sampler sampler;
  OutputStream out;
  int id = -1;              // the pool's sequence (-1: queued)
  int prefilled = 0;        // prompt tokens in the pool
  bool has_logits = false;  // logits hold the row for the next token
  bool cancelled = false;
  std::string error;  // non-finite logits ended it
  std::vector<float> logits;
  double admitted_at = 0, decode_from = 0;
};

BatchGenerator::BatchGenerator(Transformer& target, const Tokenizer& tok, KvPool& pool, BatchLimits limits)
    : target_(target), tok_(tok), pool_(pool), limits_(limits) {
  if (limits.max_sequences < 1 || limits.pass_tokens < 1)
    throw Error("batched generation: max_sequences and pass_tokens must be >= 1");
  if (pool.live_sequences() != 0) throw Error("batched generation: the KV pool already holds sequences");
  const auto& hp = target.hparams();
  if (pool.n_layers() != hp.n_layers || pool.kv_dim() != hp.n_kv_heads * hp.head_dim)
    throw Error("batched generation: the KV pool's shape is not the model's");
}

BatchGenerator::~BatchGenerator() {
  for (auto& s : live_) pool_.free_sequence(s->id);
}

int BatchGenerator::blocks_for(const Seq& s) const {
  const int rows = static_cast<int>(s.prompt.size()) + s.max_tokens + 1;
  return (rows + pool_.block_rows() - 1) / pool_.block_rows();
}

uint64_t BatchGenerator::submit(const GenerationRequest& req, std::function<void(std::string_view)> on_text) {
  check_request(req);
  auto s = std::make_unique<Seq>(tok_, req, std::move(on_text));
  const int rows = static_cast<int>(s->prompt.size()) + s->max_tokens + 1;
  if (rows > pool_.max_rows() || blocks_for(*s) > pool_.n_blocks())
    throw Error("the prompt (" + std::to_string(s->prompt.size()) + " tokens) and max_tokens " +
                std::to_string(s->max_tokens) + " need " + std::to_string(rows) +
                " KV positions; a sequence may hold " +
                std::to_string(std::min(pool_.max_rows(), pool_.n_blocks() * pool_.block_rows())));
  s->ticket = next_ticket_++;
  queue_.push_back(std::move(s));
  return queue_.back()->ticket;
}

void BatchGenerator::cancel(uint64_t ticket) {
  for (auto& s : queue_)
    if (s->ticket == ticket) s->cancelled = true;
  for (auto& s : live_)
    if (s->ticket == ticket) s->cancelled = true;
}

void BatchGenerator::admit() {
  while (!queue_.empty() && static_cast<int>(live_.size()) < limits_.max_sequences) {
    Seq& s = *queue_.front();
    if (!s.cancelled && promised_blocks_ + blocks_for(s) > pool_.n_blocks()) break;  // first come, first served
    auto seq = std::move(queue_.front());
    queue_.pop_front();
    seq->admitted_at = now_seconds();
    if (!seq->cancelled) {
      seq->id = pool_.add_sequence();
      promised_blocks_ += blocks_for(*seq);
    }
    live_.push_back(std::move(seq));
  }
  stats_.max_in_flight = std::max(stats_.max_in_flight, static_cast<int>(live_.size()));
}

void BatchGenerator::finish(Seq& s, std::vector<Done>& done) {
  s.out.finish();
  Generation& g = s.out.generation();
  if (s.cancelled) g.finish = "cancelled";
  if (!s.error.empty()) {  // as generate() throwing: no tokens
    g.finish = "error";
    g.tokens.clear();
    g.text.clear();
  }
  if (s.decode_from > 0) g.decode_seconds = now_seconds() - s.decode_from;
  if (s.id >= 0) {
    pool_.free_sequence(s.id);
    promised_blocks_ -= blocks_for(s);
  }
  s.id = -1;
  done.push_back(Done{s.ticket, std::move(g), s.error});
}

std::vector<BatchGenerator::Done> BatchGenerator::step() {
  std::vector<Done> done;
  admit();
  // The pass: one next token per decoding sequence (sampled from its last
  // row, exactly as generate() does), then prompt chunks in admission order.
  std::vector<int32_t> seqs, tokens, positions, parents, logit_rows;
  std::vector<Seq*> row_owner;  // whose logits each logits row is
  std::vector<std::pair<Seq*, int>> in_pass;  // sequence, tokens it has in the pass
  for (auto& p : live_) {
    Seq& s = *p;
    if (s.cancelled || !s.has_logits) continue;
    s.has_logits = false;
    int32_t t = 0;
    try {
      t = s.sampler.sample(s.logits);
    } catch (const NonFiniteLogits& e) {
      s.error = e.what();
      continue;  // ended: finished below
    }
    if (!s.out.emit(t)) continue;  // ended: finished below
    const int pos = pool_.committed(s.id);
    logit_rows.push_back(static_cast<int32_t>(tokens.size()));
    row_owner.push_back(&s);
    seqs.push_back(s.id), tokens.push_back(t), positions.push_back(pos), parents.push_back(-1);
    in_pass.emplace_back(&s, 1);
  }
  const int decode_tokens = static_cast<int>(tokens.size());
  for (auto& p : live_) {
    Seq& s = *p;
    const int left = static_cast<int>(s.prompt.size()) - s.prefilled;
    const int room = limits_.pass_tokens - static_cast<int>(tokens.size());
    if (s.cancelled || left == 0) continue;
    if (room <= 0) break;
    const int take = std::min(left, room);
    const int base = static_cast<int>(tokens.size());
    for (int i = 0; i < take; ++i) {
      seqs.push_back(s.id);
      tokens.push_back(s.prompt[static_cast<size_t>(s.prefilled + i)]);
      positions.push_back(s.prefilled + i);
      parents.push_back(i == 0 ? -1 : i - 1);
    }
    s.prefilled += take;
    if (s.prefilled == static_cast<int>(s.prompt.size())) {
      logit_rows.push_back(static_cast<int32_t>(base + take - 1));
      row_owner.push_back(&s);
    }
    in_pass.emplace_back(&s, take);
  }
  if (!tokens.empty()) {
    const size_t vocab = static_cast<size_t>(target_.hparams().vocab);
    logits_.resize(logit_rows.size() * vocab);
    const PassStats st =
        target_.forward(SeqBatch{seqs, tokens, positions, parents}, pool_, logits_, logit_rows);
    for (auto [s, n] : in_pass) pool_.commit_prefix(s->id, n);
    for (size_t r = 0; r < row_owner.size(); ++r) {
      Seq& s = *row_owner[r];
      s.logits.assign(logits_.begin() + static_cast<std::ptrdiff_t>(r * vocab),
                      logits_.begin() + static_cast<std::ptrdiff_t>((r + 1) * vocab));
      if (!s.has_logits && s.decode_from == 0) {  // the prompt's last row: decoding starts
        s.out.generation().prefill_seconds = now_seconds() - s.admitted_at;
        s.decode_from = now_seconds();
      }
      s.has_logits = true;
    }
    ++stats_.passes;
    stats_.pass_tokens += static_cast<int64_t>(tokens.size());
    stats_.decode_tokens += decode_tokens;
    stats_.pass_seconds += st.seconds;
  }
  // Sequences that ended (a stop, the length, cancelled) leave now.
  std::vector<std::unique_ptr<Seq>> kept;
  for (auto& p : live_) {
    Seq& s = *p;
    const bool ended = s.cancelled || (!s.has_logits && s.prefilled == static_cast<int>(s.prompt.size()) &&
                                       s.decode_from > 0);
    if (ended)
      finish(s, done);
    else
      kept.push_back(std::move(p));
  }
  live_ = std::move(kept);
  std::sort(done.begin(), done.end(), [](const Done& a, const Done& b) { return a.ticket < b.ticket; });
  return done;
}

}  // namespace redwood::spec
