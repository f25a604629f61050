// The dynamic-tree profile --tree auto searches over (optimizer.h's
// DynamicCandidate): each candidate policy's trees grown with the real draft
// at real text positions, and the profile's cache file (JSON).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "src/engine/sampler.h"
#include "src/engine/transformer.h"
#include "src/planner/optimizer.h"
#include "src/speculative/verify.h"

namespace redwood::planner {

// The draft's mean probability of its rank-1 child over the texts' positions
// (the same positions spec::measure_acceptance uses without a continuation),
// per scheme: greedy, max q under the T = 1 softmax; Sequoia's sampled
// children, E_{y~q} q(y) = sum q^2 under the run's filtering; target-sample
// (the top children of OPT-Tree/SpecExec), max q under the run's filtering.
struct RankOneQ {
  double greedy_max = 0, sampled_sum_sq = 0, sampled_max = 0;
  double for_verifier(spec::Verifier v) const {
    if (v == spec::Verifier::kGreedy) return greedy_max;
    if (v == spec::Verifier::kTargetSample) return sampled_max;
    return sampled_sum_sq;
  }
};
RankOneQ mean_rank1_q(Transformer& draft, int vocab, const std::vector<std::vector<int32_t>>& texts,
                      const SamplingParams& sp);

// Grows every candidate's tree with the real draft at `positions` positions of
// the texts (spread evenly over each text, root = the text's token there, its
// prefix committed) and fills the candidates' samples: verified nodes, draft
// pass widths and calibrated_tokens with alpha(verifier).
void measure_dynamic(Transformer& draft, int vocab, const std::vector<std::vector<int32_t>>& texts,
                     const SamplingParams& sp, int positions, const std::function<double(spec::Verifier)>& alpha,
                     std::vector<DynamicCandidate>& cands);

// The cache file: the denominators and the candidates with their samples.
std::string dynamic_json(const RankOneQ& denominators, bool greedy, const std::vector<DynamicCandidate>& cands);
// Reads dynamic_json's file; redwood::Error naming the path when it is not one.
std::vector<DynamicCandidate> read_dynamic(const std::string& path);

}  // namespace redwood::planner
