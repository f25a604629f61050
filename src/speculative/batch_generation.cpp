#include "src/speculative/batch_generation.h"

#include <algorithm>
#include <string>

#include "src/engine/kv_type.h"
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
  int did = -1;             // the draft pool's (trees only)
  int prefilled = 0;        // prompt tokens in the pool
  bool has_logits = false;  // logits hold the row for the next token
  bool cancelled = false;
  bool ended = false;       // a stop, the length, or an error: leaves after this step
  std::unique_ptr<SpecDecoder> dec;  // trees (BatchDraft): the prompt's last token is the first root
  int tree_size = 0;                 // nodes of the shape dec has now
  std::string error;  // non-finite logits ended it
  std::vector<float> logits;
  double admitted_at = 0, decode_from = 0;
};

BatchGenerator::BatchGenerator(Transformer& target, const Tokenizer& tok, KvPool& pool, BatchLimits limits,
                               const BatchDraft* draft)
    : target_(target), tok_(tok), pool_(pool), limits_(limits) {
  if (limits.max_sequences < 1 || limits.pass_tokens < 1)
    throw Error("batched generation: max_sequences and pass_tokens must be >= 1");
  if (pool.live_sequences() != 0) throw Error("batched generation: the KV pool already holds sequences");
  const auto& hp = target.hparams();
  if (pool.n_layers() != hp.n_layers || pool.kv_dim() != hp.n_kv_heads * hp.head_dim)
    throw Error("batched generation: the KV pool's shape is not the model's");
  if (draft) {
    if (!draft->draft || !draft->target_desc || !draft->draft_desc)
      throw Error("batched generation: the draft's model and descriptions are required");
    if (draft->config.tree.kind != TreeKind::kStatic)
      throw Error(std::string("trees in shared passes are static (sequoia, chain, kary), not ") +
                  tree_kind_name(draft->config.tree.kind));
    check_verifier(draft->config);
    draft_ = std::make_unique<BatchDraft>(*draft);
    const StaticTree& full = draft->config.shape;
    const int n = full.size();
    if (draft->acceptance.empty() || n == 1) {
      // Smaller trees need the DP's acceptance vector; without one the shape is all there is.
      shapes_ = {full};
      tree_value_ = {draft->acceptance.empty() ? full.expected_tokens : expected_tokens(full, draft->acceptance)};
      tree_widths_ = {level_widths(full)};
    } else {
      // The smaller trees' values from one run of the DP; a tree itself is
      // built when a pass first gives a sequence that many nodes (tree_of):
      // building all of them up to a budget of 768 at depth 32 took seconds.
      // (Trees of fewer than n nodes have fewer than n levels.)
      const int depth = std::min(full.max_depth(), n - 1);
      const std::vector<std::vector<double>> g = sequoia_value_table(draft->acceptance, n - 1, depth);
      shapes_.resize(static_cast<size_t>(n));
      shapes_.back() = full;
      tree_value_.assign(g[static_cast<size_t>(depth)].begin() + 1, g[static_cast<size_t>(depth)].end());
      tree_value_.push_back(expected_tokens(full, draft->acceptance));
      // The draft's passes (the node budget rule's draft time), as `redwood
      // plan --sequences` prices them.
      if (draft->draft_level_seconds)
        tree_widths_ = grid_level_widths(n, [this](int k) { return tree_of(k); });
      else
        tree_widths_.resize(static_cast<size_t>(n));
    }
    min_tree_ = shapes_.size() == 1 ? n : 1;
    // The draft's rows of a sequence never outnumber its target rows' promise
    // (rows_for: its committed tokens, then its unprocessed ones and one
    // tree), so the draft's pool has the target pool's shape: what the
    // planner counts for a pool per model.
    const LlamaHParams& dh = draft->draft->hparams();
    draft_pool_ = std::make_unique<KvPool>(draft->draft->backend(), dh.n_layers, dh.n_kv_heads * dh.head_dim,
                                           pool.n_blocks(), pool.block_rows(), pool.max_rows(),
                                           draft->draft->kv_type());
    if (limits.pass_tokens < limits.max_sequences * min_tree_)
      throw Error("batched generation: a pass of " + std::to_string(limits.pass_tokens) + " tokens cannot hold " +
                  std::to_string(limits.max_sequences) + " trees of " + std::to_string(n) +
                  " nodes (a fixed tree without an acceptance vector is not shrunk)");
  }
}

BatchGenerator::~BatchGenerator() {
  for (auto& s : live_)
    if (s->id >= 0) pool_.free_sequence(s->id);
}

int BatchGenerator::rows_for(const Seq& s) const {
  // The prompt, every token, and the last step's pending rows (a tree).
  return static_cast<int>(s.prompt.size()) + s.max_tokens + (draft_ ? draft_->config.shape.size() : 1);
}

int BatchGenerator::blocks_for(const Seq& s) const {
  return static_cast<int>(kv_blocks(rows_for(s), pool_.block_rows()));
}

const StaticTree& BatchGenerator::tree_of(int k) {
  StaticTree& t = shapes_[static_cast<size_t>(k - 1)];
  if (t.size() == 0) t = sequoia_tree(draft_->acceptance, k, draft_->config.shape.max_depth());
  return t;
}

int BatchGenerator::draft_blocks_for(const Seq& s) const {
  // Its committed tokens (the catch-up chains' among them), then the first
  // draft pass (the tokens it has not run, ending at the root) and the tree's
  // nodes: prompt + tokens emitted + tree - 1 < rows_for.
  return draft_pool_ ? static_cast<int>(kv_blocks(rows_for(s), draft_pool_->block_rows())) : 0;
}

void BatchGenerator::start(Seq& s) {
  SpecConfig cfg = draft_->config;
  cfg.sampling = s.sampler.params();
  s.dec = std::make_unique<SpecDecoder>(target_, *draft_->draft, *draft_->target_desc, *draft_->draft_desc, cfg,
                                        rows_for(s), SpecDecoder::TargetCache::kCaller,
                                        SpecDecoder::DraftCache::kCaller);
  s.dec->start(s.prompt);  // both prefills ride in the passes (the draft's in its first tree's)
  s.did = draft_pool_->add_sequence();
}

bool BatchGenerator::decoding(const Seq& s) const {
  const int target_prompt = static_cast<int>(s.prompt.size()) - (s.dec ? 1 : 0);
  return s.prefilled == target_prompt && (s.dec || s.has_logits);
}

uint64_t BatchGenerator::submit(const GenerationRequest& req, std::function<void(std::string_view)> on_text) {
  check_request(req);
  auto s = std::make_unique<Seq>(tok_, req, std::move(on_text));
  const int rows = rows_for(*s);
  if (rows > pool_.max_rows() || blocks_for(*s) > pool_.n_blocks() ||
      (draft_pool_ && draft_blocks_for(*s) > draft_pool_->n_blocks()))
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
    if (!s.cancelled && (promised_blocks_ + blocks_for(s) > pool_.n_blocks() ||
                         (draft_pool_ && promised_draft_blocks_ + draft_blocks_for(s) > draft_pool_->n_blocks())))
      break;  // first come, first served
    auto seq = std::move(queue_.front());
    queue_.pop_front();
    seq->admitted_at = now_seconds();
    if (!seq->cancelled) {
      seq->id = pool_.add_sequence();
      promised_blocks_ += blocks_for(*seq);
      if (draft_) start(*seq), promised_draft_blocks_ += draft_blocks_for(*seq);
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
  if (s.dec) g.spec = s.dec->stats();
  if (s.id >= 0) {
    pool_.free_sequence(s.id);
    promised_blocks_ -= blocks_for(s);
  }
  s.id = -1;
  if (s.did >= 0) {
    draft_pool_->free_sequence(s.did);
    promised_draft_blocks_ -= draft_blocks_for(s);
  }
  s.did = -1;
  done.push_back(Done{s.ticket, std::move(g), s.error});
}

void BatchGenerator::count_draft_pass(size_t tokens) {
  ++stats_.draft_passes;
  stats_.draft_tokens += static_cast<int64_t>(tokens);
  stats_.max_draft_pass_tokens = std::max(stats_.max_draft_pass_tokens, static_cast<int>(tokens));
}

void BatchGenerator::draft_catch_up(const std::vector<Seq*>& trees) {
  const size_t cap = static_cast<size_t>(limits_.pass_tokens);
  std::vector<int32_t> seqs, tokens, positions, parents;
  std::vector<std::pair<Seq*, int>> ran;
  for (;;) {
    size_t pending = 0;
    for (const Seq* s : trees) pending += s->dec->draft_pending_tokens().size();
    // (cap >= max_sequences >= the roots: while pending > cap, some tree has tokens before its root.)
    if (pending <= cap) return;
    seqs.clear(), tokens.clear(), positions.clear(), parents.clear(), ran.clear();
    for (Seq* s : trees) {
      if (tokens.size() == cap) break;
      const SpecDecoder::DraftPass w =
          s->dec->draft_catch_up(draft_pool_->committed(s->did), static_cast<int>(cap - tokens.size()));
      if (w.tokens.empty()) continue;
      for (size_t j = 0; j < w.tokens.size(); ++j)
        seqs.push_back(s->did), tokens.push_back(w.tokens[j]), positions.push_back(w.positions[j]),
            parents.push_back(w.parents[j]);
      ran.emplace_back(s, static_cast<int>(w.tokens.size()));
    }
    const double t0 = now_seconds();
    draft_->draft->forward(SeqBatch{seqs, tokens, positions, parents}, *draft_pool_, {}, {});
    const double seconds = now_seconds() - t0;
    count_draft_pass(tokens.size());
    ++stats_.draft_catch_up_passes;
    for (auto [s, n] : ran) {
      draft_pool_->commit_prefix(s->did, n);
      s->dec->draft_caught_up(n, seconds);
    }
  }
}

double BatchGenerator::catch_up_seconds(const std::vector<Seq*>& trees) const {
  int64_t pending = 0;
  for (const Seq* s : trees) pending += static_cast<int64_t>(s->dec->draft_pending_tokens().size());
  return catch_up_draft_seconds(pending, static_cast<int>(trees.size()), limits_.pass_tokens,
                                draft_->draft_level_seconds);
}

void BatchGenerator::grow_trees(const std::vector<Seq*>& trees) {
  using DraftPass = SpecDecoder::DraftPass;
  draft_catch_up(trees);
  std::vector<const DraftPass*> work(trees.size());
  for (size_t i = 0; i < trees.size(); ++i)
    work[i] = trees[i]->dec->draft_begin(pool_.committed(trees[i]->id), draft_pool_->committed(trees[i]->did));
  const size_t vocab = static_cast<size_t>(draft_->draft->hparams().vocab);
  std::vector<int32_t> seqs, tokens, positions, parents, logit_rows;
  std::vector<size_t> first_row(trees.size());
  for (;;) {
    seqs.clear(), tokens.clear(), positions.clear(), parents.clear(), logit_rows.clear();
    for (size_t i = 0; i < trees.size(); ++i) {
      const DraftPass* w = work[i];
      if (!w) continue;
      first_row[i] = logit_rows.size();
      const int base = static_cast<int>(tokens.size());
      const int n = static_cast<int>(w->tokens.size());
      for (int j = 0; j < n; ++j) {
        seqs.push_back(trees[i]->did), tokens.push_back(w->tokens[j]);
        positions.push_back(w->positions[j]), parents.push_back(w->parents[j]);
        if (!w->last_only || j == n - 1) logit_rows.push_back(base + j);
      }
    }
    if (tokens.empty()) return;
    draft_logits_.resize(logit_rows.size() * vocab);
    draft_->draft->forward(SeqBatch{seqs, tokens, positions, parents}, *draft_pool_, draft_logits_, logit_rows);
    count_draft_pass(tokens.size());
    for (size_t i = 0; i < trees.size(); ++i) {
      if (!work[i]) continue;
      const std::span<const float> rows(draft_logits_.data() + first_row[i] * vocab,
                                        static_cast<size_t>(work[i]->logit_rows()) * vocab);
      work[i] = trees[i]->dec->draft_next(rows);
    }
  }
}

std::vector<BatchGenerator::Done> BatchGenerator::step() {
  std::vector<Done> done;
  admit();
  // The pass: one next token per plain decoding sequence (sampled from its
  // last row, exactly as generate() does) and the root slot of each tree
  // sequence, then prompt chunks in admission order, then the trees.
  std::vector<int32_t> seqs, tokens, positions, parents, logit_rows;
  std::vector<Seq*> row_owner;                // whose logits each logits row is (plain and prompt rows)
  std::vector<std::pair<Seq*, int>> in_pass;  // sequence, tokens it has in the pass (chains)
  std::vector<Seq*> trees;                    // tree sequences decoding this pass
  for (auto& p : live_) {
    Seq& s = *p;
    if (s.cancelled || s.ended || !decoding(s)) continue;
    if (s.dec) {
      trees.push_back(&s);
      continue;
    }
    s.has_logits = false;
    int32_t t = 0;
    try {
      t = s.sampler.sample(s.logits);
    } catch (const NonFiniteLogits& e) {
      s.error = e.what();
      s.ended = true;
      continue;
    }
    ++stats_.emitted;
    if (!s.out.emit(t)) {
      s.ended = true;
      continue;
    }
    const int pos = pool_.committed(s.id);
    logit_rows.push_back(static_cast<int32_t>(tokens.size()));
    row_owner.push_back(&s);
    seqs.push_back(s.id), tokens.push_back(t), positions.push_back(pos), parents.push_back(-1);
    in_pass.emplace_back(&s, 1);
  }
  const int decode_tokens = static_cast<int>(tokens.size() + trees.size());
  for (auto& p : live_) {
    Seq& s = *p;
    const int target_prompt = static_cast<int>(s.prompt.size()) - (s.dec ? 1 : 0);
    const int left = target_prompt - s.prefilled;
    const int room = limits_.pass_tokens - static_cast<int>(tokens.size() + trees.size() * min_tree_);
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
    if (s.prefilled == target_prompt && !s.dec) {
      logit_rows.push_back(static_cast<int32_t>(base + take - 1));
      row_owner.push_back(&s);
    }
    in_pass.emplace_back(&s, take);
  }
  // The trees: the nodes left under the pass budget, split by the node budget rule.
  std::vector<std::pair<Seq*, int>> tree_rows;  // sequence, its first logits row
  if (!trees.empty()) {
    const int base = static_cast<int>(tokens.size() + trees.size());
    std::function<double(const std::vector<int>&)> draft_s;
    if (draft_->draft_level_seconds)
      // The trees' levels, and the catch-up passes of new sequences' prompts
      // that run before them whatever the split.
      draft_s = [this, catch_up = catch_up_seconds(trees)](const std::vector<int>& ks) {
        return catch_up + shared_draft_seconds(tree_widths_, ks, draft_->draft_level_seconds);
      };
    const std::vector<int> k = split_tree_nodes(static_cast<int>(trees.size()), base, limits_.pass_tokens - base,
                                                tree_value_, draft_->pass_seconds, draft_s);
    for (size_t i = 0; i < trees.size(); ++i) {
      Seq& s = *trees[i];
      if (s.tree_size != k[i]) s.dec->set_shape(tree_of(k[i])), s.tree_size = k[i];
    }
    const double t0 = now_seconds();
    grow_trees(trees);
    stats_.draft_seconds += now_seconds() - t0;
    for (Seq* sp : trees) {
      Seq& s = *sp;
      const TreePass& tp = s.dec->draft_end();
      tree_rows.emplace_back(&s, static_cast<int>(logit_rows.size()));
      for (int j = 0; j < tp.size(); ++j) {
        logit_rows.push_back(static_cast<int32_t>(tokens.size()));
        seqs.push_back(s.id), tokens.push_back(tp.tokens[j]);
        positions.push_back(tp.positions[j]), parents.push_back(tp.parents[j]);
      }
      stats_.tree_nodes += tp.size() - 1;
      stats_.tree_steps += tp.size() > 1 ? 1 : 0;
      if (s.decode_from == 0) {  // the first tree: decoding starts
        s.out.generation().prefill_seconds = now_seconds() - s.admitted_at;
        s.decode_from = now_seconds();
      }
    }
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
    for (size_t i = 0; i < tree_rows.size(); ++i) {
      auto [sp, first] = tree_rows[i];
      Seq& s = *sp;
      const int last = i + 1 < tree_rows.size() ? tree_rows[i + 1].second : static_cast<int>(logit_rows.size());
      const std::span<const float> rows(logits_.data() + static_cast<size_t>(first) * vocab,
                                        static_cast<size_t>(last - first) * vocab);
      std::vector<int32_t> keep, draft_keep;
      std::vector<int32_t> out;
      try {
        out = s.dec->accept(rows, keep, &draft_keep);
      } catch (const NonFiniteLogits& e) {
        s.error = e.what();
        s.ended = true;
        pool_.discard(s.id);
        draft_pool_->discard(s.did);
        continue;
      }
      pool_.commit_path(s.id, keep);
      if (!draft_keep.empty()) draft_pool_->commit_path(s.did, draft_keep);
      for (const int32_t t : out) {
        ++stats_.emitted;
        if (!s.out.emit(t)) {
          s.ended = true;
          break;
        }
      }
    }
    ++stats_.passes;
    stats_.pass_tokens += static_cast<int64_t>(tokens.size());
    stats_.max_pass_tokens = std::max(stats_.max_pass_tokens, static_cast<int>(tokens.size()));
    stats_.decode_tokens += decode_tokens;
    stats_.pass_seconds += st.seconds;
  }
  // Sequences that ended (a stop, the length, an error, cancelled) leave now.
  std::vector<std::unique_ptr<Seq>> kept;
  for (auto& p : live_) {
    Seq& s = *p;
    if (s.cancelled || s.ended)
      finish(s, done);
    else
      kept.push_back(std::move(p));
  }
  live_ = std::move(kept);
  std::sort(done.begin(), done.end(), [](const Done& a, const Done& b) { return a.ticket < b.ticket; });
  return done;
}

}  // namespace redwood::spec
