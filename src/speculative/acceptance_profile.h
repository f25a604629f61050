// Measured acceptance, Sequoia's way (Sequoia §3.1, shared/papers/NOTES-sequoia.md):
// at many positions of real text, a one-level tree of W draft children is
// verified against the target; the positional acceptance vector is
// a_k = P(the k-th child, in sampling order, is the accepted one), k = 1..W,
// plus P(none accepted). Measured for the verifier's own sampling scheme:
// Sequoia (children without replacement), SpecInfer (i.i.d., with
// replacement), greedy (the draft's top-W, temperature 0) or target-sample
// (the draft's top-W children, the target's own sample accepted if it is one:
// how OPT-Tree and SpecExec trees are verified when sampling).
//
// Per position and draw of the children, the acceptance probabilities are
// computed exactly from the verifier's arithmetic (NodeVerifier), not by
// drawing the uniforms: a_k = prod_{j<k} (1 - r_j) * r_k with r_j the
// acceptance probability of child j after children 1..j-1 were rejected. The
// mean over trials is then unbiased with lower variance; the confidence
// interval is the normal interval of that mean (1.96 standard errors).
//
// The profile file (JSON) carries the vectors with counts and intervals, the
// identities of both models (file sizes and XXH3-64 hashes), the sampling
// parameters and the prompt set. Its top-level "acceptance" is the vector the
// Sequoia DP takes (--acceptance FILE): the Sequoia (or greedy) measurement,
// made non-increasing by pooling adjacent violators (sampling noise can break
// the order the DP requires).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "src/engine/sampler.h"
#include "src/speculative/verify.h"

namespace redwood::spec {

struct AcceptanceVector {
  Verifier verifier = Verifier::kSequoia;  // kSequoia, kSpecInfer, kGreedy or kTargetSample
  int width = 0;
  int64_t trials = 0;
  std::vector<double> acceptance;  // a_1..a_W
  double none = 0;                 // 1 - sum
  std::vector<double> ci95_low, ci95_high;  // per k
  std::vector<double> expected_counts;      // trials * a_k
};

// Accumulates one-level-tree trials.
class AcceptanceCounter {
 public:
  AcceptanceCounter(Verifier v, int width);  // v: kSequoia | kSpecInfer | kGreedy | kTargetSample; width >= 1
  // One trial: draws W children from q with the verifier's scheme, then adds the
  // exact per-rank acceptance probabilities against p. p and q: filtered
  // distributions as the runtime uses them (for greedy: the T = 1 softmaxes).
  void add(std::span<const float> p, std::span<const float> q, Rng& rng);
  // Adds a trial's per-rank probabilities directly (tests, merging).
  void add_probabilities(std::span<const double> a);
  AcceptanceVector result() const;
  int64_t trials() const { return trials_; }

 private:
  Verifier v_;
  int width_;
  int64_t trials_ = 0;
  std::vector<double> sum_, sum_sq_, scratch_;
  NodeVerifier nv_;
};

// Chains (vanilla speculative decoding of depth D): steps[k] = steps that
// accepted at least k drafted tokens (steps[0] = all steps); the per-depth
// acceptance is steps[k] / steps[k - 1].
struct ChainProfile {
  int depth = 0;                 // drafted tokens per chain
  std::vector<int64_t> reached;  // size depth + 1
  std::vector<double> depth_acceptance() const;
};

struct FileIdentity {
  std::string path;
  uint64_t bytes = 0;
  std::string xxh3;  // hex, XXH3-64 of the bytes (several files: of their hashes in order)
};
// Hashes the files (a GGUF, or a safetensors directory's data files).
FileIdentity identify_files(const std::string& name, const std::vector<std::string>& files);

struct AcceptanceProfile {
  FileIdentity target, draft, prompts;
  int prompt_count = 0;
  int64_t positions = 0;  // text positions measured
  int repeats = 1;        // child draws per position
  double temperature = 0, top_p = 1;
  int top_k = 0;
  uint64_t seed = 0;
  std::vector<AcceptanceVector> vectors;  // T = 0: greedy; else sequoia and specinfer
  ChainProfile chain;
  std::vector<double> acceptance;  // the DP's input (see the file comment)
};

// Non-increasing least-squares fit (pool adjacent violators), clamped to >= 0.
std::vector<double> non_increasing(const std::vector<double>& a);

std::string profile_json(const AcceptanceProfile& p);  // pretty JSON text
// Reads and validates a profile (or any {"acceptance": [...]} file for the
// acceptance field alone: other fields are then left default). Throws
// redwood::Error naming the file and the problem.
AcceptanceProfile read_acceptance_profile(const std::string& path);
AcceptanceProfile parse_acceptance_profile(const std::string& text, const std::string& name);

}  // namespace redwood::spec
