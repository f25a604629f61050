#include "src/speculative/speculate.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "src/util/clock.h"
#include "src/util/error.h"

namespace redwood::spec {

namespace {

constexpr int64_t kMaxTreeNodes = 8192;  // --budget's limit, root included

int parse_positive(const std::string& s, const std::string& spec) {
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end || v < 1 || v > 4096)
    throw Error("--tree '" + spec + "': expected a number from 1 to 4096, got '" + s + "'");
  return static_cast<int>(v);
}

StaticTree chain_tree(int k) {
  StaticTree t;
  for (int i = 0; i <= k; ++i) {
    t.parent.push_back(i - 1);
    t.depth.push_back(i);
    t.rank.push_back(0);
  }
  return t;
}

StaticTree kary_tree(int w, int d) {
  StaticTree t;
  t.parent = {-1};
  t.depth = {0};
  t.rank = {0};
  for (int b = 0; b < w; ++b) {  // depth-first: one whole branch after another
    int prev = 0;
    for (int l = 1; l <= d; ++l) {
      t.parent.push_back(prev);
      t.depth.push_back(l);
      t.rank.push_back(l == 1 ? b : 0);
      prev = t.size() - 1;
    }
  }
  return t;
}

}  // namespace

StaticTree make_tree_shape(const std::string& spec, int budget, int depth, const std::string& acceptance_file) {
  const auto colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  const std::string arg = colon == std::string::npos ? "" : spec.substr(colon + 1);
  if (kind == "chain") return chain_tree(parse_positive(arg, spec));
  if (kind == "kary") {
    const auto x = arg.find('x');
    if (x == std::string::npos) throw Error("--tree kary needs WxD, e.g. kary:4x8");
    const int w = parse_positive(arg.substr(0, x), spec), d = parse_positive(arg.substr(x + 1), spec);
    if (static_cast<int64_t>(w) * d + 1 > kMaxTreeNodes)
      throw Error("--tree '" + spec + "': " + std::to_string(static_cast<int64_t>(w) * d + 1) +
                  " nodes; a tree has at most " + std::to_string(kMaxTreeNodes) + " (as --budget)");
    return kary_tree(w, d);
  }
  if (kind == "sequoia") {
    if (colon != std::string::npos && arg.empty())
      throw Error("--tree '" + spec + "': no tree file after 'sequoia:' (give sequoia:FILE, or sequoia)");
    if (!arg.empty()) return read_tree_file(arg);
    if (budget < 1) throw Error("--tree sequoia needs --budget N (nodes per target pass, root included)");
    const std::vector<double> acc =
        acceptance_file.empty() ? default_acceptance(16) : read_acceptance_file(acceptance_file);
    return sequoia_tree(acc, budget, depth);
  }
  throw Error("unknown --tree '" + spec + "' (chain:K, kary:WxD, sequoia, sequoia:FILE; K, W, D from 1 to 4096)");
}

TreeKind parse_tree_kind(const std::string& spec) {
  const std::string kind = spec.substr(0, spec.find(':'));
  if (spec == "dyspec") return TreeKind::kDySpec;
  if (spec == "opt-tree") return TreeKind::kOptTree;
  if (spec == "specexec") return TreeKind::kSpecExec;
  if (kind == "chain" || kind == "kary" || kind == "sequoia") return TreeKind::kStatic;
  throw Error("unknown --tree '" + spec +
              "' (chain:K, kary:WxD, sequoia, sequoia:FILE, dyspec, opt-tree, specexec, or auto where the optimizer "
              "chooses)");
}

SpecConfig make_spec_config(const TreeOptions& o, const SamplingParams& sampling) {
  validate(sampling);
  SpecConfig c;
  c.sampling = sampling;
  c.tree.kind = parse_tree_kind(o.tree);
  const TreeKind k = c.tree.kind;
  const std::string on = std::string(" (--tree ") + o.tree + ")";
  if (o.threshold && k != TreeKind::kDySpec) throw Error("--threshold is only for --tree dyspec" + on);
  if (o.delta && k != TreeKind::kOptTree) throw Error("--delta is only for --tree opt-tree" + on);
  if (o.width && k != TreeKind::kSpecExec) throw Error("--width is only for --tree specexec" + on);
  if (k == TreeKind::kStatic) {
    // Only the Sequoia DP reads it (chain, kary and sequoia:FILE have their shape).
    if (!o.acceptance.empty() && o.tree != "sequoia") throw Error("--acceptance is only for --tree sequoia" + on);
    c.shape = make_tree_shape(o.tree, o.budget, o.depth, o.acceptance);
  } else {
    if (!o.acceptance.empty()) throw Error("--acceptance is only for --tree sequoia" + on);
    c.tree.budget = o.budget;
    c.tree.depth = o.depth;
    if (o.threshold) c.tree.threshold = *o.threshold;
    if (o.delta) c.tree.delta = *o.delta;
    if (o.width) c.tree.width = *o.width;
    validate_tree_params(c.tree);
  }
  if (!o.verifier.empty())
    c.verifier = parse_verifier(o.verifier);
  else if (sampling.greedy())
    c.verifier = Verifier::kGreedy;
  else
    c.verifier = k == TreeKind::kOptTree || k == TreeKind::kSpecExec ? Verifier::kTargetSample : Verifier::kSequoia;
  if (o.is_alphabet) {
    if (c.verifier != Verifier::kMultiDraftIS)
      throw Error(std::string("--is-alphabet is only for --verify multidraft-is (verifier: ") +
                  verifier_name(c.verifier) + ")");
    if (*o.is_alphabet < 1) throw Error("--is-alphabet must be >= 1, got " + std::to_string(*o.is_alphabet));
    c.verify_options.is_alphabet = *o.is_alphabet;
  }
  check_verifier(c);
  return c;
}

void check_verifier(const SpecConfig& c) {
  if (const std::string e = check_pairing(c.tree.kind, c.verifier); !e.empty()) throw Error(e);
  if (c.sampling.greedy() && c.verifier != Verifier::kGreedy)
    throw Error(std::string("--verify ") + verifier_name(c.verifier) +
                " samples: it needs --temperature > 0 (use --verify greedy at temperature 0)");
  if (!c.sampling.greedy() && c.verifier == Verifier::kGreedy)
    throw Error(std::string("--verify greedy is for --temperature 0 (use ") +
                (c.tree.kind == TreeKind::kStatic   ? "sequoia or specinfer"
                 : c.tree.kind == TreeKind::kDySpec ? "sequoia"
                                                    : "target-sample") +
                " when sampling)");
}

namespace {
std::unique_ptr<TreePolicy> checked_policy(const SpecConfig& c) {
  validate(c.sampling);
  check_verifier(c);
  return make_policy(c.tree, c.shape, c.verifier);
}
}  // namespace

SpecDecoder::SpecDecoder(Transformer& target, Transformer& draft, const ModelDesc& td, const ModelDesc& dd,
                         SpecConfig cfg, int capacity, TargetCache where, DraftCache draft_where)
    : target_(target),
      draft_(draft),
      cfg_(std::move(cfg)),
      vocab_(td.hp.vocab),
      draft_vocab_(dd.hp.vocab),
      policy_(checked_policy(cfg_)),
      tkv_(where == TargetCache::kOwn ? std::optional<KvCache>(target.make_cache(capacity)) : std::nullopt),
      // The draft's pending block holds every node run through the draft,
      // pruned ones included; callers size `capacity` for the verified tree.
      dkv_(draft_where == DraftCache::kOwn
               ? std::optional<KvCache>(
                     draft.make_cache(capacity + std::max(0, policy_->max_draft_rows() - policy_->max_nodes())))
               : std::nullopt),
      rng_(cfg_.sampling.seed) {
  if (const std::string e = draft_vocab_mismatch(td, dd); !e.empty()) throw Error(dd.path + ": " + e);
  stats_.accepted_by_depth.assign(static_cast<size_t>(policy_->max_levels()) + 1, 0);
}

SpecDecoder::~SpecDecoder() = default;

KvCache& SpecDecoder::target_cache() {
  if (!tkv_) throw Error("SpecDecoder: the target's KV rows are the caller's");
  return *tkv_;
}

KvCache& SpecDecoder::draft_cache() {
  if (!dkv_) throw Error("SpecDecoder: the draft's KV rows are the caller's");
  return *dkv_;
}

void SpecDecoder::set_shape(const StaticTree& shape) {
  if (cfg_.tree.kind != TreeKind::kStatic) throw Error("SpecDecoder::set_shape: the tree is not a static shape");
  if (shape.size() < 1 || shape.size() > cfg_.shape.size())
    throw Error("SpecDecoder::set_shape: " + std::to_string(shape.size()) + " nodes, the decoder holds at most " +
                std::to_string(cfg_.shape.size()));
  policy_ = make_policy(cfg_.tree, shape, cfg_.verifier);
}

void SpecDecoder::target_probs(std::span<const float> logits, std::vector<float>& out) const {
  probs(cfg_.sampling, logits, out, "target");
}

void SpecDecoder::draft_probs(std::span<const float> logits, std::vector<float>& out) const {
  if (cfg_.verifier == Verifier::kGreedy) {
    SamplingParams t1;
    t1.temperature = 1.0f;  // greedy drafts use the draft's top-k (and values) under its own softmax
    probs(t1, logits, out, "draft");
  } else {
    probs(cfg_.sampling, logits, out, "draft");
  }
  // A draft with fewer rows than the target (padding rows only: the pair was
  // checked) proposes from the target's vocabulary with probability 0 on ids it
  // lacks. Padding q here, not teaching the verifiers and tree policies two
  // sizes, keeps them exactly as proved: each takes one q over the target's
  // vocabulary that the children were drawn from, and zeros in q are already
  // theirs to handle (top-k and top-p leave them); p never changes.
  out.resize(static_cast<size_t>(vocab_), 0.0f);
}

void SpecDecoder::start(std::span<const int32_t> prompt) {
  if (prompt.empty()) throw Error("empty prompt");
  if (prompt.size() > 1) {
    const auto head = prompt.first(prompt.size() - 1);
    std::vector<float> lg(vocab_);
    if (tkv_) prefill(target_, *tkv_, head, cfg_.prefill_chunk, lg);
    if (dkv_) {
      std::vector<int32_t> dhead(head.begin(), head.end());
      for (int32_t& t : dhead) t = draft_token(t, draft_vocab_);
      prefill(draft_, *dkv_, dhead, cfg_.prefill_chunk, lg);
    }
  }
  root_ = prompt.back();
  if (dkv_)
    draft_todo_ = {root_};
  else
    draft_todo_.assign(prompt.begin(), prompt.end());
}

namespace {

// A draft level's batch: node v at position root_pos + depth(v), its parent's
// block row rows[parent] (-1: the committed prefix); tokens as draft_token().
void level_batch(const DraftTree& t, std::span<const int32_t> nodes, int root_pos, const std::vector<int32_t>& rows,
                 int vocab, std::vector<int32_t>& bt, std::vector<int32_t>& bp, std::vector<int32_t>& bpar) {
  bt.clear(), bp.clear(), bpar.clear();
  for (const int32_t v : nodes) {
    bt.push_back(draft_token(t.token[static_cast<size_t>(v)], vocab));
    bp.push_back(root_pos + t.depth[static_cast<size_t>(v)]);
    bpar.push_back(rows[static_cast<size_t>(t.parent[static_cast<size_t>(v)])]);
  }
}

// The level's logits (one row per node): the nodes get block rows block,
// block + 1, ... and their distributions.
void level_logits(DraftTree& t, std::span<const int32_t> nodes, int vocab, std::span<const float> lg,
                  std::vector<int32_t>& rows, int& block,
                  const std::function<void(std::span<const float>, std::vector<float>&)>& to_dist) {
  rows.resize(static_cast<size_t>(t.size()), -1);
  for (size_t i = 0; i < nodes.size(); ++i) {
    rows[static_cast<size_t>(nodes[i])] = block + static_cast<int32_t>(i);
    to_dist(lg.subspan(i * static_cast<size_t>(vocab), static_cast<size_t>(vocab)), t.set_dist(nodes[i]));
  }
  block += static_cast<int>(nodes.size());
}

}  // namespace

void draft_level_pass(Transformer& draft, KvCache& kv, DraftTree& t, std::span<const int32_t> nodes, int root_pos,
                      int vocab, std::vector<int32_t>& rows, int& block, std::vector<float>& lg,
                      const std::function<void(std::span<const float>, std::vector<float>&)>& to_dist) {
  std::vector<int32_t> bt, bp, bpar;
  level_batch(t, nodes, root_pos, rows, vocab, bt, bp, bpar);
  lg.resize(nodes.size() * static_cast<size_t>(vocab));
  draft.forward(Batch{bt, bp, bpar}, kv, lg, LogitsRows::kAll);
  level_logits(t, nodes, vocab, lg, rows, block, to_dist);
}

namespace {

// The tree the target verifies: the nodes the policy kept, renumbered in id
// order (0 = the root), with their tokens, parents (-1 for the root), depths,
// draft block rows (-1: not run) and children.
struct KeptTree {
  std::vector<int32_t> token, parent, depth, draft_row;
  std::vector<std::vector<int32_t>> children;
  int size() const { return static_cast<int>(token.size()); }
};

KeptTree renumber_kept(const DraftTree& T, const std::vector<int32_t>& keep, const std::vector<int32_t>& draft_row) {
  const int n = static_cast<int>(keep.size());
  if (n < 1 || keep[0] != 0) throw Error("tree policy: the final tree must start with the root");
  std::vector<int32_t> new_id(T.size(), -1);
  for (int i = 0; i < n; ++i) new_id[keep[i]] = i;
  KeptTree k;
  for (auto* field : {&k.token, &k.parent, &k.depth, &k.draft_row}) field->resize(n);
  k.children.resize(n);
  for (int i = 0; i < n; ++i) {
    const int32_t v = keep[i];
    k.token[i] = T.token[v];
    k.depth[i] = T.depth[v];
    k.draft_row[i] = draft_row[v];
    k.parent[i] = i == 0 ? -1 : new_id[T.parent[v]];
    if (i > 0) {
      if (k.parent[i] < 0 || k.parent[i] >= i)
        throw Error("tree policy: the final tree must contain every kept node's parent");
      k.children[k.parent[i]].push_back(i);
    }
  }
  return k;
}

// The order of the target's pass over a kept tree: depth-first, children in
// id (= sampling) order, so attention blocks stay dense; for a static shape
// this is the shape's own (depth-first) order.
std::vector<int32_t> depth_first_order(const KeptTree& k) {
  std::vector<int32_t> order;
  order.reserve(k.size());
  std::vector<int32_t> stack = {0};
  while (!stack.empty()) {
    const int32_t v = stack.back();
    stack.pop_back();
    order.push_back(v);
    for (auto it = k.children[v].rbegin(); it != k.children[v].rend(); ++it) stack.push_back(*it);
  }
  return order;
}

}  // namespace

struct SpecDecoder::Step {
  KeptTree kept;
  std::vector<int32_t> keep, pos_in;
  int m = 0;            // draft tokens processed by the first draft pass (0: the draft did not run)
  double t0 = 0, t1 = 0;
  TreePass pass;
  // While the tree grows (draft_begin .. draft_end):
  int root_pos = 0;
  bool first = false;               // the pending draft pass is the first (the unprocessed tokens)
  std::vector<int32_t> next;        // the nodes of the pending level pass
  std::vector<int32_t> draft_row;   // draft block row per node (-1: not run)
  int block_rows = 0;
  DraftPass work;
};

std::vector<int32_t> SpecDecoder::step() {
  KvCache& kv = target_cache();
  const TreePass& p = draft_tree(kv.committed());
  std::vector<float> tlog(static_cast<size_t>(p.size()) * vocab_);
  target_.forward(Batch{p.tokens, p.positions, p.parents}, kv, tlog, LogitsRows::kAll);
  std::vector<int32_t> rows;
  std::vector<int32_t> out = accept(tlog, rows);
  kv.commit_path(rows);
  return out;
}

const TreePass& SpecDecoder::draft_tree(int root_pos) {
  KvCache& kv = draft_cache();
  std::vector<float> lg;
  for (const DraftPass* w = draft_begin(root_pos, kv.committed()); w; w = draft_next(lg)) {
    lg.resize(static_cast<size_t>(w->logit_rows()) * draft_vocab_);
    draft_.forward(Batch{w->tokens, w->positions, w->parents}, kv, lg,
                   w->last_only ? LogitsRows::kLast : LogitsRows::kAll);
  }
  return draft_end();
}

// The tree grows as grow_tree (tree_policy.cpp) grows it, one draft pass per
// call: the first pass (the draft's unprocessed tokens, ending at the root),
// then one per level the policy asks for.
const SpecDecoder::DraftPass* SpecDecoder::draft_begin(int root_pos, int draft_committed) {
  if (!step_) step_ = std::make_unique<Step>();
  Step& S = *step_;
  S.root_pos = root_pos;
  S.t0 = now_seconds();
  // The verifier reads draft distributions of accepted nodes after the tree is
  // built (greedy and target-sample never do).
  const bool verifier_reads_q = cfg_.verifier != Verifier::kGreedy && cfg_.verifier != Verifier::kTargetSample;
  tree_.reset(root_, verifier_reads_q || policy_->needs_old_dists());
  S.draft_row = {-1};
  S.next.clear();
  if (policy_->max_nodes() <= 1) {
    // A root-only tree: nothing to draft, the draft does not run this step.
    S.m = 0;
    S.keep = {0};
    S.first = false;
    return nullptr;
  }
  S.m = static_cast<int>(draft_todo_.size());
  S.first = true;
  ChainBatch b(draft_todo_, draft_committed);
  for (int32_t& t : b.tokens) t = draft_token(t, draft_vocab_);
  S.work.tokens = std::move(b.tokens);
  S.work.positions = std::move(b.positions);
  S.work.parents = std::move(b.parents);
  S.work.last_only = true;
  return &S.work;
}

SpecDecoder::DraftPass SpecDecoder::draft_catch_up(int draft_committed, int max_tokens) const {
  if (dkv_) throw Error("SpecDecoder::draft_catch_up: the decoder runs its own draft cache");
  if (step_ && (step_->first || !step_->next.empty())) throw Error("SpecDecoder::draft_catch_up while a tree grows");
  DraftPass w;
  const int n = std::min(static_cast<int>(draft_todo_.size()) - 1, max_tokens);
  if (n <= 0) return w;
  ChainBatch b(std::span<const int32_t>(draft_todo_).first(static_cast<size_t>(n)), draft_committed);
  for (int32_t& t : b.tokens) t = draft_token(t, draft_vocab_);
  w.tokens = std::move(b.tokens);
  w.positions = std::move(b.positions);
  w.parents = std::move(b.parents);
  return w;
}

void SpecDecoder::draft_caught_up(int n, double seconds) {
  if (n < 0 || n >= static_cast<int>(draft_todo_.size()))
    throw Error("SpecDecoder::draft_caught_up: " + std::to_string(n) + " of " + std::to_string(draft_todo_.size()) +
                " pending draft tokens (the root stays)");
  draft_todo_.erase(draft_todo_.begin(), draft_todo_.begin() + n);
  stats_.draft_passes++;
  stats_.draft_seconds += seconds;
}

const SpecDecoder::DraftPass* SpecDecoder::draft_next(std::span<const float> lg) {
  if (!step_ || (!step_->first && step_->next.empty())) throw Error("SpecDecoder::draft_next without a draft pass");
  Step& S = *step_;
  DraftTree& T = tree_;
  if (lg.size() != static_cast<size_t>(S.work.logit_rows()) * draft_vocab_)
    throw Error("SpecDecoder::draft_next: " + std::to_string(lg.size()) + " logits for a draft pass of " +
                std::to_string(S.work.logit_rows()) + " rows");
  stats_.draft_passes++;
  const auto to_dist = [this](std::span<const float> row, std::vector<float>& out) { draft_probs(row, out); };
  if (S.first) {
    S.first = false;
    T.begin_batch();
    draft_probs(lg, T.set_dist(0));
    S.draft_row = {S.m - 1};
    S.block_rows = S.m;
    policy_->begin_step();
    const int32_t root = 0;
    S.next = policy_->grow(T, std::span<const int32_t>(&root, 1), rng_);
  } else {
    // One batched draft pass over the nodes the policy asked for; their parents
    // ran in an earlier pass (or are the root), so they index the draft block.
    level_logits(T, S.next, draft_vocab_, lg, S.draft_row, S.block_rows, to_dist);
    stats_.draft_tokens += static_cast<int64_t>(S.next.size());
    for (const int32_t u : S.next)
      if (!T.expanded(u)) throw Error("draft tree: the draft pass left node " + std::to_string(u) + " unexpanded");
    S.next = policy_->grow(T, S.next, rng_);
  }
  if (S.next.empty()) {
    S.keep = policy_->final_nodes(T);
    return nullptr;
  }
  T.begin_batch();
  level_batch(T, S.next, S.root_pos, S.draft_row, draft_vocab_, S.work.tokens, S.work.positions, S.work.parents);
  S.work.last_only = false;
  return &S.work;
}

const TreePass& SpecDecoder::draft_end() {
  if (!step_ || step_->first || !step_->next.empty()) throw Error("SpecDecoder::draft_end before the tree is built");
  Step& S = *step_;
  const DraftTree& T = tree_;
  const int L = S.root_pos;
  std::vector<int32_t>& draft_row = S.draft_row;
  draft_row.resize(T.size(), -1);
  S.t1 = now_seconds();

  // ---- the verified tree: the kept nodes, renumbered in id order ----
  S.kept = renumber_kept(T, S.keep, draft_row);
  const KeptTree& kept = S.kept;
  const int n = kept.size();
  stats_.tree_nodes.push_back(n);

  // ---- the target's pass over [root + tree] in depth-first order ----
  const std::vector<int32_t> order = depth_first_order(kept);
  S.pos_in.assign(static_cast<size_t>(n), 0);  // kept node -> its row in the target's pass
  for (int i = 0; i < n; ++i) S.pos_in[order[i]] = i;
  TreePass& P = S.pass;
  P.tokens.resize(n), P.positions.resize(n), P.parents.resize(n);
  for (int i = 0; i < n; ++i) {
    const int v = order[i];
    P.tokens[i] = kept.token[v];
    P.positions[i] = L + kept.depth[v];
    P.parents[i] = kept.parent[v] < 0 ? -1 : S.pos_in[kept.parent[v]];
  }
  return P;
}

std::vector<int32_t> SpecDecoder::accept(std::span<const float> tlog, std::vector<int32_t>& trows,
                                         std::vector<int32_t>* draft_rows) {
  if (!step_ || step_->pass.tokens.empty()) throw Error("SpecDecoder::accept without draft_tree");
  if (!dkv_ && !draft_rows) throw Error("SpecDecoder::accept: the draft's rows are the caller's to commit");
  Step& S = *step_;
  const KeptTree& kept = S.kept;
  const int n = kept.size();
  if (tlog.size() != static_cast<size_t>(n) * vocab_)
    throw Error("SpecDecoder::accept: " + std::to_string(tlog.size()) + " logits for a pass of " + std::to_string(n) +
                " rows");
  const std::vector<int32_t>& tok = kept.token;
  const std::vector<int32_t>& par = kept.parent;
  stats_.target_passes++;

  // ---- verify: verifier ids = runtime nodes 1..n-1 shifted to 0..n-2 ----
  std::vector<int32_t> verify_parents(n - 1), verify_tokens(n - 1);
  for (int v = 1; v < n; ++v) {
    verify_parents[v - 1] = par[v] - 1;  // root (0) -> -1
    verify_tokens[v - 1] = tok[v];
  }
  std::vector<std::vector<float>> pcache(n);
  DistFn target_dist = [&](int32_t u) -> std::span<const float> {
    const int v = u + 1;
    if (pcache[v].empty())
      target_probs(tlog.subspan(static_cast<size_t>(S.pos_in[v]) * vocab_, vocab_), pcache[v]);
    return pcache[v];
  };
  const DraftTree& T = tree_;
  DistFn draft_dist = [&](int32_t u) -> std::span<const float> { return T.dist(S.keep[u + 1]); };
  VerifyResult vr =
      verify_tree(cfg_.verifier, TreeView{verify_parents, verify_tokens}, target_dist, draft_dist, rng_,
                  cfg_.verify_options);

  // ---- keep the accepted path in both caches ----
  std::vector<int32_t> out;
  trows = {S.pos_in[0]};
  std::vector<int32_t> drows;
  for (int i = 0; i < S.m; ++i) drows.push_back(i);
  std::vector<int32_t> todo;
  for (int32_t a : vr.accepted) {
    const int v = a + 1;
    out.push_back(tok[v]);
    trows.push_back(S.pos_in[v]);
    if (kept.draft_row[v] >= 0 && todo.empty())
      drows.push_back(kept.draft_row[v]);
    else
      todo.push_back(tok[v]);
  }
  out.push_back(vr.bonus);
  if (draft_rows) draft_rows->clear();
  if (S.m == 0) {
    // The draft did not run: it still has its old tokens to process.
    draft_todo_.insert(draft_todo_.end(), todo.begin(), todo.end());
    draft_todo_.push_back(vr.bonus);
  } else {
    if (dkv_)
      dkv_->commit_path(drows);
    else
      *draft_rows = drows;
    todo.push_back(vr.bonus);
    draft_todo_ = std::move(todo);
  }
  root_ = vr.bonus;
  S.pass.tokens.clear();

  const size_t k = vr.accepted.size();
  if (k >= stats_.accepted_by_depth.size()) stats_.accepted_by_depth.resize(k + 1, 0);
  stats_.accepted_by_depth[k]++;
  stats_.emitted += static_cast<int64_t>(out.size());
  stats_.draft_seconds += S.t1 - S.t0;
  stats_.verify_seconds += now_seconds() - S.t1;
  return out;
}

}  // namespace redwood::spec
