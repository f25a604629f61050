#include "src/planner/dynamic_profile.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "src/speculative/acceptance_measure.h"
#include "src/speculative/speculate.h"
#include "src/speculative/tree_policy.h"
#include "src/util/error.h"
#include "src/util/io.h"

namespace redwood::planner {

RankOneQ mean_rank1_q(Transformer& draft, int vocab, const std::vector<std::vector<int32_t>>& texts,
                      const SamplingParams& sp) {
  SamplingParams filt = sp;
  if (sp.greedy()) filt.temperature = 1.0f;
  const int V = vocab;
  std::vector<float> q;
  RankOneQ r;
  int64_t n = 0;
  for (const auto& seq : texts) {
    if (seq.size() < 3) continue;
    const size_t first = std::min<size_t>(seq.size() - 2, 4);
    const std::vector<float> ld = spec::all_logits(draft, seq, V);
    for (size_t t = first; t + 1 < seq.size(); ++t, ++n) {
      probs(filt, std::span<const float>(ld).subspan(t * static_cast<size_t>(V), static_cast<size_t>(V)), q);
      double mx = 0, sq = 0;
      for (float v : q) {
        mx = std::max(mx, static_cast<double>(v));
        sq += static_cast<double>(v) * v;
      }
      (sp.greedy() ? r.greedy_max : r.sampled_max) += mx;
      r.sampled_sum_sq += sq;
    }
  }
  if (n == 0) throw Error("--tree auto: no text positions to measure the dynamic trees on");
  r.greedy_max /= static_cast<double>(n);
  r.sampled_max /= static_cast<double>(n);
  r.sampled_sum_sq /= static_cast<double>(n);
  return r;
}

void measure_dynamic(Transformer& draft, int vocab, const std::vector<std::vector<int32_t>>& texts,
                     const SamplingParams& sp, int positions, const std::function<double(spec::Verifier)>& alpha,
                     std::vector<DynamicCandidate>& cands) {
  SamplingParams filt = sp;
  if (sp.greedy()) filt.temperature = 1.0f;  // greedy drafts: the draft's T = 1 softmax (SpecDecoder::draft_probs)
  const int V = vocab;
  std::vector<std::unique_ptr<spec::TreePolicy>> policies;
  int extra = 0;
  for (const auto& c : cands) {
    policies.push_back(spec::make_policy(c.params, spec::StaticTree{}, c.verifier));
    extra = std::max(extra, policies.back()->max_draft_rows() + policies.back()->max_nodes());
  }
  std::vector<size_t> usable;
  for (size_t i = 0; i < texts.size(); ++i)
    if (texts[i].size() >= 6) usable.push_back(i);
  if (usable.empty()) throw Error("--tree auto: no text long enough to measure the dynamic trees on");
  std::vector<float> lg, root_q;
  const auto to_dist = [&filt](std::span<const float> x, std::vector<float>& out) { probs(filt, x, out); };
  spec::DraftTree T;
  int done = 0;
  for (size_t ui = 0; ui < usable.size(); ++ui) {
    const std::vector<int32_t>& seq = texts[usable[ui]];
    const int per = positions / static_cast<int>(usable.size()) +
                    (static_cast<int>(ui) < positions % static_cast<int>(usable.size()) ? 1 : 0);
    if (per <= 0) continue;
    // Roots at positions 4 .. len - 2 (as measure_acceptance), evenly spaced.
    const int lo = 4, hi = static_cast<int>(seq.size()) - 2;
    std::vector<int> roots;
    for (int k = 0; k < per; ++k) roots.push_back(lo + (hi - lo) * (2 * k + 1) / (2 * per));
    KvCache kv = draft.make_cache(static_cast<int>(seq.size()) + extra + 2);
    for (const int r : roots) {
      // Commit the prefix through the root; its last row is the root's distribution.
      const int from = kv.committed();
      if (r + 1 > from) {
        const std::span<const int32_t> chunk(seq.data() + from, static_cast<size_t>(r + 1 - from));
        lg.resize(static_cast<size_t>(V));
        draft.forward(ChainBatch(chunk, from).view(), kv, lg, LogitsRows::kLast);
        kv.commit_prefix(static_cast<int>(chunk.size()));
        probs(filt, lg, root_q);
      }
      for (size_t ci = 0; ci < cands.size(); ++ci) {
        Rng rng(sp.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(r) * 7919 + usable[ui] * 104729 + 3);
        T.reset(seq[static_cast<size_t>(r)], /*retain=*/true);
        T.begin_batch();
        T.set_dist(0) = root_q;
        std::vector<int32_t> row = {-1};  // pending row per node (-1: committed, i.e. the root)
        int block = 0;
        DynamicTreeSample smp;
        auto forward = [&](std::span<const int32_t> nodes) {  // the step loop's draft pass (SpecDecoder)
          spec::draft_level_pass(draft, kv, T, nodes, r, V, row, block, lg, to_dist);
          smp.pass_widths.push_back(static_cast<int>(nodes.size()));
        };
        const std::vector<int32_t> keep = spec::grow_tree(*policies[ci], T, forward, rng);
        kv.discard();
        // The verified tree renumbered, each node's draft probability under its parent.
        std::vector<int32_t> id(static_cast<size_t>(T.size()), -1), par;
        std::vector<double> q;
        for (size_t i = 0; i < keep.size(); ++i) {
          const int32_t v = keep[i];
          id[static_cast<size_t>(v)] = static_cast<int32_t>(i);
          const int32_t u = T.parent[static_cast<size_t>(v)];
          par.push_back(u < 0 ? -1 : id[static_cast<size_t>(u)]);
          q.push_back(u < 0 ? 1.0
                            : std::min(1.0, static_cast<double>(
                                                T.dist(u)[static_cast<size_t>(T.token[static_cast<size_t>(v)])])));
        }
        smp.nodes = static_cast<int>(keep.size());
        smp.tokens = calibrated_tokens(par, q, alpha(cands[ci].verifier));
        cands[ci].samples.push_back(std::move(smp));
      }
      ++done;
    }
  }
  if (done == 0) throw Error("--tree auto: no text positions to measure the dynamic trees on");
}

std::string dynamic_json(const RankOneQ& denominators, bool greedy, const std::vector<DynamicCandidate>& cands) {
  nlohmann::json j;
  j["format"] = "redwood-dynamic-tree-profile";
  j["version"] = 1;
  if (greedy)
    j["mean_rank1_q"] = {{"greedy", denominators.greedy_max}};
  else
    j["mean_rank1_q"] = {{"sequoia", denominators.sampled_sum_sq}, {"target-sample", denominators.sampled_max}};
  nlohmann::json cs = nlohmann::json::array();
  for (const auto& c : cands) {
    nlohmann::json x;
    x["tree"] = spec::tree_kind_name(c.params.kind);
    x["budget"] = c.params.budget;
    x["depth"] = c.params.depth;
    x["threshold"] = c.params.threshold;
    x["delta"] = c.params.delta;
    x["width"] = c.params.width;
    x["verify"] = spec::verifier_name(c.verifier);
    nlohmann::json ss = nlohmann::json::array();
    for (const auto& s : c.samples) ss.push_back({{"nodes", s.nodes}, {"passes", s.pass_widths}, {"tokens", s.tokens}});
    x["samples"] = ss;
    cs.push_back(x);
  }
  j["candidates"] = cs;
  return j.dump(1);
}

std::vector<DynamicCandidate> read_dynamic(const std::string& path) {
  require_regular_input(path, "a cached dynamic-tree profile");
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  std::vector<DynamicCandidate> out;
  try {
    const nlohmann::json j = nlohmann::json::parse(ss.str());
    if (j.at("format") != "redwood-dynamic-tree-profile" || j.at("version") != 1) throw Error("unknown format");
    for (const auto& x : j.at("candidates")) {
      DynamicCandidate c;
      c.params.kind = spec::parse_tree_kind(x.at("tree").get<std::string>());
      c.params.budget = x.at("budget").get<int>();
      c.params.depth = x.at("depth").get<int>();
      c.params.threshold = x.at("threshold").get<double>();
      c.params.delta = x.at("delta").get<double>();
      c.params.width = x.at("width").get<int>();
      c.verifier = spec::parse_verifier(x.at("verify").get<std::string>());
      spec::validate_tree_params(c.params);
      for (const auto& s : x.at("samples")) {
        DynamicTreeSample d;
        d.nodes = s.at("nodes").get<int>();
        d.pass_widths = s.at("passes").get<std::vector<int>>();
        d.tokens = s.at("tokens").get<double>();
        if (d.nodes < 1 || !(d.tokens >= 1) || !std::isfinite(d.tokens)) throw Error("bad sample");
        c.samples.push_back(std::move(d));
      }
      out.push_back(std::move(c));
    }
  } catch (const std::exception& e) {
    throw Error(path + ": not a valid dynamic-tree profile (" + e.what() + "); delete it to measure again");
  }
  return out;
}

}  // namespace redwood::planner
