#include "src/speculative/acceptance_measure.h"

#include <algorithm>
#include <cstdio>

#include "src/speculative/generation.h"
#include "src/speculative/speculate.h"

namespace redwood::spec {

std::vector<float> all_logits(Transformer& t, std::span<const int32_t> seq, int vocab) {
  const int n = static_cast<int>(seq.size());
  KvCache kv = t.make_cache(n);
  std::vector<int32_t> pos(static_cast<size_t>(n)), par(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    pos[static_cast<size_t>(i)] = i;
    par[static_cast<size_t>(i)] = i - 1;
  }
  std::vector<float> logits(static_cast<size_t>(n) * static_cast<size_t>(vocab));
  t.forward(Batch{seq, pos, par}, kv, logits, LogitsRows::kAll);
  return logits;
}

void measure_acceptance(const ModelPair& models, const std::vector<std::vector<int32_t>>& prompts,
                        const AcceptanceRun& r, AcceptanceProfile& prof) {
  const SamplingParams& sp = r.sampling;
  const bool greedy = sp.greedy();
  std::vector<AcceptanceCounter> counters;
  if (greedy) {
    counters.emplace_back(Verifier::kGreedy, r.width);
  } else {
    counters.emplace_back(Verifier::kSequoia, r.width);
    counters.emplace_back(Verifier::kSpecInfer, r.width);
    counters.emplace_back(Verifier::kTargetSample, r.width);
  }
  // Greedy drafts take the draft's top-W under its T = 1 softmax (as the runtime does).
  SamplingParams filt = sp;
  if (greedy) filt.temperature = 1.0f;
  Rng rng(sp.seed * 0x9E3779B97F4A7C15ull + 1);
  std::vector<float> p, q;
  const int V = models.target_desc.hp.vocab, Vd = models.draft_desc.hp.vocab;  // Vd <= V (draft_vocab_mismatch)
  int64_t positions = 0;
  std::vector<size_t> used;  // the prompts measured (the chains run on the same ones)
  for (size_t i = 0; i < prompts.size() && positions < r.count; ++i) {
    GenerationRequest req;
    req.prompt = prompts[i];
    req.sampling = sp;
    req.sampling.seed = sp.seed + i;
    req.max_tokens = r.max_tokens;
    std::vector<int32_t> seq = prompts[i];
    size_t first = 0;  // first measured position
    if (r.max_tokens > 0) {
      const Generation g = generate(models.target, models.tokenizer, req, nullptr);
      seq.insert(seq.end(), g.tokens.begin(), g.tokens.end());
      if (g.tokens.size() < 2) continue;
      first = prompts[i].size() - 1;
    } else {
      if (seq.size() < 3) continue;
      first = std::min<size_t>(seq.size() - 2, 4);  // skip the first few (little context)
    }
    std::vector<int32_t> dseq = seq;
    for (int32_t& x : dseq) x = draft_token(x, Vd);
    const std::vector<float> lt = all_logits(models.target, seq, V), ld = all_logits(models.draft, dseq, Vd);
    // Position t predicts seq[t + 1]: the continuation's positions, each with the real prefix.
    for (size_t t = first; t + 1 < seq.size() && positions < r.count; ++t, ++positions) {
      probs(filt, std::span<const float>(lt).subspan(t * static_cast<size_t>(V), static_cast<size_t>(V)), p);
      probs(filt, std::span<const float>(ld).subspan(t * static_cast<size_t>(Vd), static_cast<size_t>(Vd)), q);
      q.resize(static_cast<size_t>(V), 0.0f);  // ids the draft lacks: probability 0 (as SpecDecoder::draft_probs)
      for (auto& c : counters)
        for (int k = 0; k < r.repeats; ++k) c.add(p, q, rng);
    }
    used.push_back(i);
    if (!r.quiet) std::fprintf(stderr, "\rprofile: %lld/%d positions", static_cast<long long>(positions), r.count);
  }
  if (!r.quiet) std::fprintf(stderr, "\n");
  prof.positions = positions;
  prof.prompt_count = static_cast<int>(used.size());
  for (const auto& c : counters) prof.vectors.push_back(c.result());
  prof.acceptance = non_increasing(prof.vectors[0].acceptance);

  // Chains of depth D over the same prompts.
  prof.chain.depth = r.chain_depth;
  prof.chain.reached.assign(static_cast<size_t>(r.chain_depth) + 1, 0);
  if (r.chain_depth > 0 && r.max_tokens > 0) {
    DraftSetup ds;
    ds.draft = &models.draft;
    ds.target_desc = &models.target_desc;
    ds.draft_desc = &models.draft_desc;
    ds.config =
        make_spec_config(TreeOptions{"chain:" + std::to_string(r.chain_depth), 64, 8, {}, {}, {}, "", "", {}}, sp);
    for (const size_t i : used) {
      GenerationRequest req;
      req.prompt = prompts[i];
      req.sampling = sp;
      req.sampling.seed = sp.seed + i;
      req.max_tokens = r.max_tokens;
      const Generation g = generate(models.target, models.tokenizer, req, &ds);
      const auto& hist = g.spec->accepted_by_depth;  // [k] = steps that accepted k drafted tokens
      for (size_t k = 0; k < hist.size(); ++k)
        for (size_t j = 0; j <= std::min(k, static_cast<size_t>(r.chain_depth)); ++j) prof.chain.reached[j] += hist[k];
    }
  }
}

}  // namespace redwood::spec
