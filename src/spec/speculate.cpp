#include "src/spec/speculate.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

#include "src/util/error.h"

namespace redwood::spec {

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

int parse_positive(const std::string& s, const std::string& spec) {
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end || v < 1 || v > 4096) throw Error("--tree '" + spec + "': bad number '" + s + "'");
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
    return kary_tree(parse_positive(arg.substr(0, x), spec), parse_positive(arg.substr(x + 1), spec));
  }
  if (kind == "sequoia") {
    if (!arg.empty()) return read_tree_file(arg);
    if (budget < 1) throw Error("--tree sequoia needs --budget N (nodes per target pass, root included)");
    std::vector<double> acc;
    if (!acceptance_file.empty()) {
      std::ifstream in(acceptance_file);
      if (!in) throw Error(acceptance_file + ": cannot open");
      nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
      if (j.is_discarded() || !j.contains("acceptance") || !j["acceptance"].is_array())
        throw Error(acceptance_file + ": expected a JSON object with an \"acceptance\" array");
      for (const auto& v : j["acceptance"]) {
        if (!v.is_number()) throw Error(acceptance_file + ": acceptance values must be numbers");
        acc.push_back(v.get<double>());
      }
    } else {
      acc = default_acceptance(16);
    }
    return sequoia_tree(acc, budget, depth);
  }
  throw Error("unknown --tree '" + spec + "' (chain:K, kary:WxD, sequoia, sequoia:FILE)");
}

SpecDecoder::SpecDecoder(Transformer& target, Transformer& draft, const ModelDesc& td, const ModelDesc& dd,
                         SpecConfig cfg, int capacity)
    : target_(target),
      draft_(draft),
      cfg_(std::move(cfg)),
      vocab_(td.hp.vocab),
      tkv_(target.make_cache(capacity)),
      dkv_(draft.make_cache(capacity)),
      rng_(cfg_.sampling.seed) {
  if (td.hp.vocab != dd.hp.vocab || td.tokenizer.tokens != dd.tokenizer.tokens)
    throw Error("the draft model's vocabulary differs from the target's (" + dd.path + " vs " + td.path + ")");
  validate(cfg_.sampling);
  if (cfg_.sampling.greedy() && cfg_.verifier != Verifier::kGreedy)
    throw Error(std::string("--verify ") + verifier_name(cfg_.verifier) +
                " samples: it needs --temperature > 0 (use --verify greedy at temperature 0)");
  if (!cfg_.sampling.greedy() && cfg_.verifier == Verifier::kGreedy)
    throw Error("--verify greedy is for --temperature 0 (use sequoia or specinfer when sampling)");
  const auto& s = cfg_.shape;
  if (s.size() < 1 || s.parent[0] != -1) throw Error("tree shape must start with its root");
  children_.assign(s.size(), {});
  for (int i = 1; i < s.size(); ++i) {
    if (s.parent[i] < 0 || s.parent[i] >= i) throw Error("tree shape: parents must precede children");
    children_[s.parent[i]].push_back(i);
  }
  for (auto& c : children_)
    std::stable_sort(c.begin(), c.end(), [&](int a, int b) { return s.rank[a] < s.rank[b]; });
  stats_.accepted_by_depth.assign(s.max_depth() + 1, 0);
}

void SpecDecoder::dist(std::span<const float> logits, std::vector<float>& out) const {
  probs(cfg_.sampling, logits, out);
}

void SpecDecoder::start(std::span<const int32_t> prompt) {
  if (prompt.empty()) throw Error("empty prompt");
  if (prompt.size() > 1) {
    const auto head = prompt.first(prompt.size() - 1);
    std::vector<float> lg(vocab_);
    prefill(target_, tkv_, head, cfg_.prefill_chunk, lg);
    prefill(draft_, dkv_, head, cfg_.prefill_chunk, lg);
  }
  root_ = prompt.back();
  draft_todo_ = {root_};
}

std::vector<int32_t> SpecDecoder::step() {
  const auto& S = cfg_.shape;
  const int L = tkv_.committed();  // root position
  const double t0 = now();

  // ---- draft: level 0 = the draft's unprocessed tokens, ending at the root ----
  const int m = static_cast<int>(draft_todo_.size());
  std::vector<float> dlog(vocab_);  // kLast: the root's row only
  {
    ChainBatch b(draft_todo_, dkv_.committed());
    draft_.forward(b.view(), dkv_, dlog, LogitsRows::kLast);
    stats_.draft_passes++;
  }
  // Runtime tree: node 0 = root; shape node -> runtime node (or -1 if pruned).
  std::vector<int32_t> tok = {root_}, par = {-1}, dep = {0}, shape_of = {0};
  std::vector<int32_t> rt_of(S.size(), -1);
  rt_of[0] = 0;
  std::vector<int32_t> draft_row = {m - 1};  // draft block row per runtime node (-1: not run)
  std::vector<std::vector<float>> q;         // draft distribution per runtime node (empty: not expanded)
  q.emplace_back();
  std::vector<int32_t> frontier = {0};  // runtime nodes whose children are drawn next (all expanded)
  auto set_q = [&](int node, std::span<const float> lg) {
    if (cfg_.verifier == Verifier::kGreedy) {
      SamplingParams t1;
      t1.temperature = 1.0f;  // greedy drafts use the draft's top-k under its own softmax
      probs(t1, lg, q[node]);
    } else {
      dist(lg, q[node]);
    }
  };
  set_q(0, dlog);
  int block_rows = m;
  while (!frontier.empty()) {
    std::vector<int32_t> next;  // new runtime nodes that expand further
    for (int32_t u : frontier) {
      const auto& kids = children_[shape_of[u]];
      if (kids.empty()) continue;
      auto drawn = sample_children(cfg_.verifier, q[u], static_cast<int>(kids.size()), rng_);
      for (size_t c = 0; c < drawn.size() && c < kids.size(); ++c) {
        const int32_t sn = kids[c];
        rt_of[sn] = static_cast<int32_t>(tok.size());
        tok.push_back(drawn[c]);
        par.push_back(u);
        dep.push_back(dep[u] + 1);
        shape_of.push_back(sn);
        draft_row.push_back(-1);
        q.emplace_back();
        if (!children_[sn].empty()) next.push_back(rt_of[sn]);
      }
    }
    if (next.empty()) break;
    // One batched draft pass over the level's expanding nodes.
    std::vector<int32_t> bt, bp, bpar;
    for (int32_t v : next) {
      bt.push_back(tok[v]);
      bp.push_back(L + dep[v]);
      bpar.push_back(draft_row[par[v]]);
    }
    std::vector<float> lg(next.size() * static_cast<size_t>(vocab_));
    draft_.forward(Batch{bt, bp, bpar}, dkv_, lg, LogitsRows::kAll);
    stats_.draft_passes++;
    for (size_t i = 0; i < next.size(); ++i) {
      draft_row[next[i]] = block_rows + static_cast<int32_t>(i);
      set_q(next[i], std::span<const float>(lg).subspan(i * vocab_, vocab_));
    }
    block_rows += static_cast<int>(next.size());
    frontier = std::move(next);
  }
  const double t1 = now();

  // ---- target: ONE pass over [root + tree], runtime order (ancestors first) ----
  const int n = static_cast<int>(tok.size());
  // Reorder depth-first by the shape's order so attention blocks stay dense.
  std::vector<int32_t> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](int a, int b) { return shape_of[a] < shape_of[b]; });
  std::vector<int32_t> pos_in(n);
  for (int i = 0; i < n; ++i) pos_in[order[i]] = i;
  std::vector<int32_t> tt(n), tp(n), tpar(n);
  for (int i = 0; i < n; ++i) {
    const int v = order[i];
    tt[i] = tok[v];
    tp[i] = L + dep[v];
    tpar[i] = par[v] < 0 ? -1 : pos_in[par[v]];
  }
  std::vector<float> tlog(static_cast<size_t>(n) * vocab_);
  target_.forward(Batch{tt, tp, tpar}, tkv_, tlog, LogitsRows::kAll);
  stats_.target_passes++;

  // ---- verify: verifier ids = runtime nodes 1..n-1 shifted to 0..n-2 ----
  std::vector<int32_t> vpar(n - 1), vtok(n - 1);
  for (int v = 1; v < n; ++v) {
    vpar[v - 1] = par[v] - 1;  // root (0) -> -1
    vtok[v - 1] = tok[v];
  }
  std::vector<std::vector<float>> pcache(n);
  DistFn target_dist = [&](int32_t u) -> std::span<const float> {
    const int v = u + 1;
    if (pcache[v].empty())
      dist(std::span<const float>(tlog).subspan(static_cast<size_t>(pos_in[v]) * vocab_, vocab_), pcache[v]);
    return pcache[v];
  };
  DistFn draft_dist = [&](int32_t u) -> std::span<const float> { return q[u + 1]; };
  VerifyResult vr = verify_tree(cfg_.verifier, TreeView{vpar, vtok}, target_dist, draft_dist, rng_);

  // ---- keep the accepted path in both caches ----
  std::vector<int32_t> out;
  std::vector<int32_t> trows = {pos_in[0]};
  std::vector<int32_t> drows;
  for (int i = 0; i < m; ++i) drows.push_back(i);
  std::vector<int32_t> todo;
  for (int32_t a : vr.accepted) {
    const int v = a + 1;
    out.push_back(tok[v]);
    trows.push_back(pos_in[v]);
    if (draft_row[v] >= 0 && todo.empty())
      drows.push_back(draft_row[v]);
    else
      todo.push_back(tok[v]);
  }
  tkv_.commit_path(trows);
  dkv_.commit_path(drows);
  out.push_back(vr.bonus);
  todo.push_back(vr.bonus);
  draft_todo_ = std::move(todo);
  root_ = vr.bonus;

  const size_t k = vr.accepted.size();
  if (k >= stats_.accepted_by_depth.size()) stats_.accepted_by_depth.resize(k + 1, 0);
  stats_.accepted_by_depth[k]++;
  stats_.emitted += static_cast<int64_t>(out.size());
  stats_.draft_seconds += t1 - t0;
  stats_.verify_seconds += now() - t1;
  return out;
}

}  // namespace redwood::spec
