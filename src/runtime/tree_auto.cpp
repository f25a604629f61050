// Timing passes and --tree auto (see tree_auto.h).
#include "src/runtime/tree_auto.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>

#include "src/planner/dynamic_profile.h"
#include "src/planner/profile_cache.h"
#include "src/speculative/acceptance_measure.h"
#include "src/speculative/speculate.h"
#include "src/util/cache_dir.h"
#include "src/util/clock.h"
#include "src/util/error.h"
#include "src/util/io.h"
#include "src/util/output_path.h"

namespace redwood::runtime {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Text for the acceptance measurement when no prompt set is given: positions
// over these passages (real text, one target and one draft pass each).
const char* const kBuiltinText[] = {
    "The river rises in the hills to the north and flows for nearly two hundred miles before it reaches the sea. "
    "Along its banks are small towns, farms and, near the coast, a busy port where ships load grain and timber.",
    "To make bread, mix flour, water, salt and yeast into a soft dough. Knead it for ten minutes, let it rise "
    "until it has doubled in size, shape it into a loaf and bake it in a hot oven for about forty minutes.",
    "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n"
    "print([fibonacci(i) for i in range(10)])\n",
    "The committee met on Tuesday to discuss the budget for next year. After a long debate, the members agreed "
    "to increase spending on schools and roads, and to review the plan again in six months.",
    "Question: A train travels 60 miles in 1.5 hours. What is its average speed? Answer: The average speed is "
    "the distance divided by the time, so 60 / 1.5 = 40 miles per hour.",
    "In the early morning the city was quiet. A few shops were opening, a bus passed slowly down the main street, "
    "and the smell of fresh coffee came from the small cafe on the corner.",
};

// The seed of every profile --tree auto measures (never the run's).
constexpr uint64_t kProfileSeed = 1;

}  // namespace

void measure_hardware(LoadedModel& m, LoadedModel& d, const HardwareRun& r, planner::MeasuredProfile& prof) {
  if (r.sizes.empty() || r.widths.empty()) throw Error("profile-hardware: empty size or width grid");
  const int max_n = std::max(r.sizes.back(), r.widths.back());
  const int ctx = r.prefix + max_n + 1;
  prof.ctx = ctx;
  prof.prefix = r.prefix;
  prof.warmup = r.warmup;
  prof.repeats = r.repeats;
  prof.threads = cpu_threads();
  if (m.plan) {
    prof.layers_resident = m.plan->count(offload::Tier::kDevice);
    prof.layers_host = m.plan->count(offload::Tier::kHost);
    prof.layers_streamed = m.plan->count(offload::Tier::kStorage);
  } else {
    prof.layers_resident = static_cast<int>(m.desc.layers.size());
  }
  // The draft may have fewer rows than the target (padding: draft_vocab_mismatch).
  const int V = m.desc.hp.vocab, Vd = std::min(V, d.desc.hp.vocab);
  std::vector<int32_t> pre(static_cast<size_t>(r.prefix));
  for (int i = 0; i < r.prefix; ++i) pre[static_cast<size_t>(i)] = (i * 7919) % Vd;  // ids both models have
  std::vector<float> logits(static_cast<size_t>(max_n + r.prefix) * static_cast<size_t>(V));

  // Target passes: a random tree of n nodes over the prefix, all logits rows.
  KvCache tkv = m.transformer->make_cache(ctx);
  if (r.prefix > 0) {
    m.transformer->forward(ChainBatch(pre, 0).view(), tkv, logits, LogitsRows::kLast);
    tkv.commit_prefix(r.prefix);
  }
  for (int n : r.sizes) {
    const TreeBatch b = random_tree(n, r.prefix, V);
    std::vector<double> t;
    for (int k = 0; k < r.warmup + r.repeats; ++k) {
      const double t0 = now_seconds();
      m.transformer->forward(b.view(), tkv, logits, LogitsRows::kAll);
      if (k >= r.warmup) t.push_back(now_seconds() - t0);
      tkv.discard();
    }
    prof.target_pass.x.push_back(n);
    prof.target_pass.seconds.push_back(median(t));
    if (!r.quiet) std::fprintf(stderr, "target pass n=%d: %.4f s (median of %d)\n", n, median(t), r.repeats);
  }
  // Draft levels: w siblings after the prefix, then each node's distribution
  // (what expanding a level costs in the step loop: the pass and the softmaxes).
  KvCache dkv = d.transformer->make_cache(ctx);
  if (r.prefix > 0) {
    d.transformer->forward(ChainBatch(pre, 0).view(), dkv, logits, LogitsRows::kLast);
    dkv.commit_prefix(r.prefix);
  }
  SamplingParams sp;
  sp.temperature = 1.0f;
  std::vector<float> q;
  for (int w : r.widths) {
    TreeBatch b;
    for (int i = 0; i < w; ++i) {
      b.tokens.push_back((i * 104729 + 17) % Vd);
      b.positions.push_back(r.prefix);
      b.parents.push_back(-1);
    }
    std::vector<double> t;
    for (int k = 0; k < r.warmup + r.repeats; ++k) {
      const double t0 = now_seconds();
      d.transformer->forward(b.view(), dkv, logits, LogitsRows::kAll);
      for (int i = 0; i < w; ++i)
        probs(sp, std::span<const float>(logits).subspan(static_cast<size_t>(i) * Vd, static_cast<size_t>(Vd)), q);
      if (k >= r.warmup) t.push_back(now_seconds() - t0);
      dkv.discard();
    }
    prof.draft_level.x.push_back(w);
    prof.draft_level.seconds.push_back(median(t));
    if (!r.quiet) std::fprintf(stderr, "draft level w=%d: %.4f s (median of %d)\n", w, median(t), r.repeats);
  }
}

std::optional<double> rank1_acceptance(const spec::AcceptanceProfile& acc, spec::Verifier v, bool greedy) {
  for (const spec::AcceptanceVector& x : acc.vectors)
    if (x.verifier == v && !x.acceptance.empty()) return x.acceptance[0];
  if (acc.vectors.empty() && !acc.acceptance.empty() &&
      v == (greedy ? spec::Verifier::kGreedy : spec::Verifier::kSequoia))
    return acc.acceptance[0];
  return std::nullopt;
}

namespace {

// One verifier scheme a Sequoia tree is optimised for: the verifier and its
// measured acceptance vector.
using VerifierScheme = std::pair<spec::Verifier, std::vector<double>>;

// The profile's verifier schemes for the run's sampling mode (T > 0: Sequoia's
// without replacement and SpecInfer's i.i.d. children; T = 0: greedy). The
// target-sample vector (the draft's distinct top-W children) describes the
// dynamic trees only: a static tree verified by target-sample draws its
// children i.i.d., so it is not a scheme here. Throws when there is none
// (`acc_name` names the profile, measured at another temperature).
std::vector<VerifierScheme> verifier_schemes(const spec::AcceptanceProfile& acc, const SamplingParams& sampling,
                                             const std::string& acc_name) {
  std::vector<VerifierScheme> schemes;
  for (const spec::AcceptanceVector& v : acc.vectors)
    if ((v.verifier == spec::Verifier::kGreedy) == sampling.greedy() && v.verifier != spec::Verifier::kTargetSample)
      schemes.emplace_back(v.verifier, spec::non_increasing(v.acceptance));
  if (acc.vectors.empty())  // a bare {"acceptance": [...]} file: the default verifier
    schemes.emplace_back(sampling.greedy() ? spec::Verifier::kGreedy : spec::Verifier::kSequoia, acc.acceptance);
  if (schemes.empty()) {
    char temperature[64];
    std::snprintf(temperature, sizeof temperature, "%.6g", acc.temperature);
    throw Error(acc_name + " was measured at temperature " + temperature +
                (sampling.greedy() ? "; this run is greedy: profile again with --temperature 0"
                                   : "; this run samples: profile again at its --temperature"));
  }
  return schemes;
}

// The fastest predicted Sequoia tree over the schemes, with the scheme it was
// optimised for (choice stays plain decoding when no tree beats it; verifier
// is then the first scheme's and acceptance empty).
struct SequoiaPick {
  planner::TreeChoice choice;
  spec::Verifier verifier;
  std::vector<double> acceptance;
};

// One optimisation per scheme, each with its own acceptance vector (`in`
// gives the caps and the pass times); the fastest predicted (verifier, n, d).
SequoiaPick best_sequoia(planner::OptimizerInput in, const std::vector<VerifierScheme>& schemes,
                         const planner::TreeChoice& plain) {
  SequoiaPick best{plain, schemes.front().first, {}};
  for (const auto& [verifier, acceptance] : schemes) {
    in.acceptance = acceptance;
    const planner::TreeChoice choice = planner::optimize_tree(in);
    if (choice.tokens_per_second() > best.choice.tokens_per_second()) best = {choice, verifier, acceptance};
  }
  return best;
}

// The fastest predicted dynamic candidate (candidate null: there is none).
struct DynamicPick {
  const planner::DynamicCandidate* candidate = nullptr;
  planner::TreeChoice choice;
};

// One line on `log`: what each family's best is predicted to do.
void log_predictions(std::FILE* log, const planner::TreeChoice& plain, const SequoiaPick& sequoia,
                     const DynamicPick& dynamic, bool skipped_topn) {
  std::string line = "redwood: --tree auto: predicted s/token: plain decoding ";
  char part[160];
  std::snprintf(part, sizeof part, "%.4f", plain.seconds_per_token());
  line.append(part);
  if (sequoia.choice.depth > 1) {
    std::snprintf(part, sizeof part, "; sequoia budget %d depth %d, verify %s %.4f (%.2f tokens/pass)",
                  sequoia.choice.budget, sequoia.choice.depth, spec::verifier_name(sequoia.verifier),
                  sequoia.choice.seconds_per_token(), sequoia.choice.tokens);
    line.append(part);
  } else {
    line.append("; no sequoia tree beats plain decoding");
  }
  if (const planner::DynamicCandidate* candidate = dynamic.candidate) {
    line.append("; ").append(planner::describe_tree(candidate->params));
    double nodes = 0;
    for (const auto& sample : candidate->samples) nodes += sample.nodes;
    nodes /= static_cast<double>(candidate->samples.size());
    std::snprintf(part, sizeof part, ", verify %s %.4f (%.2f tokens/pass, %.1f nodes)",
                  spec::verifier_name(candidate->verifier), dynamic.choice.seconds_per_token(), dynamic.choice.tokens,
                  nodes);
    line.append(part);
  }
  if (skipped_topn) line.append(" (opt-tree and specexec not searched: no target-sample acceptance measured)");
  std::fprintf(log, "%s\n", line.c_str());
}

// Sets res to run the Sequoia pick: its tree is built from the acceptance
// vector of the scheme it was optimised for.
void adopt_sequoia(const SequoiaPick& sequoia, const SamplingParams& sampling, AutoTreeResult& res) {
  res.best = sequoia.choice;
  spec::TreeOptions options;
  options.tree = "sequoia";
  options.budget = res.best.budget;
  options.depth = res.best.depth;
  options.verifier = spec::verifier_name(sequoia.verifier);
  res.config = spec::make_spec_config(options, sampling);  // the default acceptance vector's tree, replaced below
  res.config->shape = spec::sequoia_tree(sequoia.acceptance, res.best.budget, res.best.depth);
  res.acceptance = sequoia.acceptance;
  char choice[96];
  std::snprintf(choice, sizeof choice, "sequoia budget %d depth %d", res.best.budget, res.best.depth);
  res.choice = choice;
}

// Sets res to run the dynamic pick with its parameters and verifier.
void adopt_dynamic(const DynamicPick& dynamic, const SamplingParams& sampling, AutoTreeResult& res) {
  const planner::DynamicCandidate& candidate = *dynamic.candidate;
  res.best = dynamic.choice;
  spec::TreeOptions options;
  options.tree = spec::tree_kind_name(candidate.params.kind);
  options.budget = candidate.params.budget;
  options.depth = candidate.params.depth;
  if (candidate.params.kind == spec::TreeKind::kDySpec && candidate.params.threshold > 0)
    options.threshold = candidate.params.threshold;
  if (candidate.params.kind == spec::TreeKind::kOptTree) options.delta = candidate.params.delta;
  if (candidate.params.kind == spec::TreeKind::kSpecExec) options.width = candidate.params.width;
  options.verifier = spec::verifier_name(candidate.verifier);
  res.config = spec::make_spec_config(options, sampling);
  res.choice = planner::describe_tree(candidate.params);
}

}  // namespace

AutoTreeResult choose_tree(const spec::AcceptanceProfile& acc, const planner::MeasuredProfile& hw,
                           const std::vector<planner::DynamicCandidate>& dyn, const SamplingParams& sampling,
                           int max_budget, int max_depth, std::FILE* log, const std::string& acc_name,
                           bool skipped_topn) {
  // One optimisation per measured verifier scheme, each with its own
  // acceptance vector, and the dynamic candidates by their samples; the
  // fastest predicted wins.
  planner::OptimizerInput in;
  in.max_budget = max_budget;
  in.max_depth = max_depth;
  in.target_s = [&](int n) { return hw.target_pass.at(n); };
  in.draft_step_s = [&](int w) { return hw.draft_level.at(w); };
  AutoTreeResult res;
  res.target_pass = hw.target_pass;
  res.draft_level = hw.draft_level;
  res.autoregressive = planner::evaluate_tree(1, 1, 1.0, hw.target_pass.at(1), in.draft_step_s);
  res.best = res.autoregressive;
  const SequoiaPick sequoia = best_sequoia(in, verifier_schemes(acc, sampling, acc_name), res.autoregressive);

  DynamicPick dynamic;
  const int dynamic_index = planner::best_dynamic(dyn, in.target_s, in.draft_step_s, &dynamic.choice);
  if (dynamic_index >= 0) dynamic.candidate = &dyn[static_cast<size_t>(dynamic_index)];

  // Say what each family's best is predicted to do, then pick the fastest.
  if (log) log_predictions(log, res.autoregressive, sequoia, dynamic, skipped_topn);
  const double r_plain = res.autoregressive.tokens_per_second();
  const double r_seq = sequoia.choice.depth > 1 ? sequoia.choice.tokens_per_second() : 0.0;
  const double r_dyn = dynamic.candidate ? dynamic.choice.tokens_per_second() : 0.0;
  if (r_plain >= r_seq && r_plain >= r_dyn) {
    res.choice = "autoregressive";
    if (log)
      std::fprintf(log,
                   "redwood: --tree auto: plain decoding is predicted fastest here (%.4f s/token; acceptance "
                   "%.3f for the draft's first child)\n",
                   res.autoregressive.seconds_per_token(), acc.acceptance.empty() ? 0.0 : acc.acceptance[0]);
    return res;
  }
  const bool sequoia_wins = r_seq >= r_dyn;
  if (sequoia_wins)
    adopt_sequoia(sequoia, sampling, res);
  else
    adopt_dynamic(dynamic, sampling, res);
  const spec::Verifier verifier = sequoia_wins ? sequoia.verifier : dynamic.candidate->verifier;
  if (log)
    std::fprintf(log,
                 "redwood: --tree auto: %s, verify %s: predicted %.2f tokens/pass, %.4f s/token (plain decoding "
                 "%.4f s/token)\n",
                 res.choice.c_str(), spec::verifier_name(verifier), res.best.tokens, res.best.seconds_per_token(),
                 res.autoregressive.seconds_per_token());
  return res;
}

namespace {

// What the profile steps of --tree auto share: the model pair, the run's
// sampling and caps, and where the profiles are cached.
struct AutoTreeRun {
  LoadedModel& target;
  LoadedModel& draft;
  const SamplingParams& sampling;
  SamplingParams measuring;  // sampling with kProfileSeed: what the profiles are measured with
  int max_budget, max_depth;
  std::FILE* log;  // progress lines (null: none)
  int max_pass;    // t(n) is timed up to this pass (>= max_budget)
  std::string cache_dir;
  std::vector<std::string> files;  // the target's files, then the draft's (the cache keys' models)
};

// The built-in passages, tokenised with the target's tokenizer.
std::vector<std::vector<int32_t>> builtin_prompts(const LoadedModel& target) {
  std::vector<std::vector<int32_t>> prompts;
  for (const char* text : kBuiltinText) prompts.push_back(target.tokenizer->encode(text, /*add_special=*/true, false));
  return prompts;
}

// The acceptance profile cached at acc_path; measured over the built-in
// passages (and cached) when missing.
spec::AcceptanceProfile cached_acceptance(const AutoTreeRun& auto_run, const std::string& acc_path) {
  if (std::filesystem::exists(acc_path)) return spec::read_acceptance_profile(acc_path);
  if (auto_run.log)
    std::fprintf(auto_run.log,
                 "redwood: --tree auto: no acceptance profile for this model pair at %s yet; measuring it "
                 "(cached in %s)\n",
                 planner::sampling_key(auto_run.sampling).c_str(), acc_path.c_str());
  spec::AcceptanceRun measurement;
  measurement.sampling = auto_run.measuring;
  measurement.count = 256;
  measurement.repeats = 2;
  measurement.max_tokens = 0;
  measurement.chain_depth = 0;
  measurement.quiet = true;
  const LoadedModel& target = auto_run.target;
  const LoadedModel& draft = auto_run.draft;
  spec::AcceptanceProfile acc;
  acc.target = spec::identify_files(target.desc.path, target.desc.files);
  acc.draft = spec::identify_files(draft.desc.path, draft.desc.files);
  acc.prompts = {"builtin", 0, "0000000000000000"};
  acc.temperature = auto_run.sampling.temperature;
  acc.top_p = auto_run.sampling.top_p;
  acc.top_k = auto_run.sampling.top_k;
  acc.seed = auto_run.measuring.seed;
  acc.repeats = measurement.repeats;
  measure_acceptance({*target.transformer, target.desc, *target.tokenizer, *draft.transformer, draft.desc},
                     builtin_prompts(target), measurement, acc);
  write_output_file(acc_path, spec::profile_json(acc));
  return acc;
}

// Whether a profile was measured for this model pair, by content (a model of
// the same size is not the same model); the pair's files are identified once,
// when first asked.
struct PairIdentity {
  const LoadedModel& target;
  const LoadedModel& draft;
  std::optional<spec::FileIdentity> target_id, draft_id;

  bool same_models(const spec::FileIdentity& profile_target, const spec::FileIdentity& profile_draft) {
    if (!target_id) target_id = spec::identify_files(target.desc.path, target.desc.files);
    if (!draft_id) draft_id = spec::identify_files(draft.desc.path, draft.desc.files);
    return profile_target.bytes == target_id->bytes && profile_target.xxh3 == target_id->xxh3 &&
           profile_draft.bytes == draft_id->bytes && profile_draft.xxh3 == draft_id->xxh3;
  }
};

// The hardware profile given with its file, used as it is: warns on `warn`
// when it was measured for other models or another memory plan.
planner::MeasuredProfile given_hardware(const AutoTreeRun& auto_run, const std::string& hardware_file,
                                        PairIdentity& pair, std::FILE* warn) {
  planner::MeasuredProfile hw = planner::read_measured(hardware_file);
  const LoadedModel& target = auto_run.target;
  const int resident =
      target.plan ? target.plan->count(offload::Tier::kDevice) : static_cast<int>(target.desc.layers.size());
  if (!pair.same_models(hw.target, hw.draft))
    std::fprintf(warn,
                 "redwood: warning: %s was measured for %s + %s, not these models: its pass times are another "
                 "pair's; using it anyway\n",
                 hardware_file.c_str(), hw.target.path.c_str(), hw.draft.path.c_str());
  else if (hw.layers_resident != resident)
    std::fprintf(warn,
                 "redwood: warning: %s was measured for another memory plan (%d resident layers there, %d here); "
                 "using it anyway\n",
                 hardware_file.c_str(), hw.layers_resident, resident);
  return hw;
}

// The sizes and widths a missing hardware profile is timed at: powers of two
// up to the budget cap (sizes) and to a depth-2 tree's level of cap - 1 nodes
// (widths).
HardwareRun hardware_grid(int max_budget) {
  HardwareRun grid;
  for (int n = 1; n < max_budget; n *= 2) grid.sizes.push_back(n);
  grid.sizes.push_back(max_budget);
  for (int w = 1; w < max_budget - 1; w *= 2) grid.widths.push_back(w);
  grid.widths.push_back(std::max(1, max_budget - 1));  // a d = 2 tree's level: n - 1 nodes
  if (grid.widths.size() > 1 && grid.widths[grid.widths.size() - 2] >= grid.widths.back()) grid.widths.pop_back();
  grid.quiet = true;
  return grid;
}

// The hardware profile cached at hw_path; timed (and cached) when missing.
planner::MeasuredProfile cached_hardware(const AutoTreeRun& auto_run, const RunOptions& run,
                                         const std::string& hw_path) {
  if (std::filesystem::exists(hw_path)) return planner::read_measured(hw_path);
  if (auto_run.log)
    std::fprintf(auto_run.log,
                 "redwood: --tree auto: no hardware profile for this configuration yet; timing passes "
                 "(cached in %s)\n",
                 hw_path.c_str());
  LoadedModel& target = auto_run.target;
  LoadedModel& draft = auto_run.draft;
  planner::MeasuredProfile hw;
  hw.target = spec::identify_files(target.desc.path, target.desc.files);
  hw.draft = spec::identify_files(draft.desc.path, draft.desc.files);
  hw.device_mem = run.device_mem;
  hw.host_mem = run.host_mem;
  hw.ring = run.ring;
  measure_hardware(target, draft, hardware_grid(auto_run.max_pass), hw);
  write_output_file(hw_path, planner::measured_json(hw));
  return hw;
}

// The dynamic policies' parameter grid, less the candidates whose verifier has
// no measured rank-1 acceptance to calibrate them by (skipped_topn: some were
// left out; a profile given with --acceptance from before the target-sample
// scheme leaves OPT-Tree and SpecExec out at temperature > 0).
std::vector<planner::DynamicCandidate> calibratable_candidates(const AutoTreeRun& auto_run,
                                                               const spec::AcceptanceProfile& acc, bool& skipped_topn) {
  const bool greedy = auto_run.sampling.greedy();
  std::vector<planner::DynamicCandidate> dyn;
  for (planner::DynamicCandidate& candidate : planner::dynamic_grid(auto_run.max_budget, auto_run.max_depth, greedy)) {
    if (!rank1_acceptance(acc, candidate.verifier, greedy)) {
      skipped_topn = true;
      continue;
    }
    dyn.push_back(std::move(candidate));
  }
  return dyn;
}

// The text positions the dynamic trees are grown at.
constexpr int kDynamicPositions = 16;

// Fills the dynamic candidates' samples: trees grown with the draft at real
// text positions, their expected tokens calibrated by the profile's measured
// rank-1 acceptance in each verifier's scheme (planner::calibration_scale).
// Cached, keyed by those acceptances too.
void measure_dynamic_candidates(const AutoTreeRun& auto_run, const spec::AcceptanceProfile& acc,
                                std::vector<planner::DynamicCandidate>& dyn) {
  const bool greedy = auto_run.sampling.greedy();
  auto rank1 = [&](spec::Verifier v) { return rank1_acceptance(acc, v, greedy); };
  std::string rank1_key;
  for (const spec::Verifier v : {spec::Verifier::kGreedy, spec::Verifier::kSequoia, spec::Verifier::kTargetSample})
    if (const auto a1 = rank1(v)) {
      char part[64];
      std::snprintf(part, sizeof part, "|%s=%.9g", spec::verifier_name(v), *a1);
      rank1_key += part;
    }
  const std::string dyn_path =
      planner::dynamic_cache_path(auto_run.cache_dir, auto_run.files, auto_run.sampling, auto_run.max_budget,
                                  auto_run.max_depth, kDynamicPositions, rank1_key);
  if (std::filesystem::exists(dyn_path)) {
    dyn = planner::read_dynamic(dyn_path);
    return;
  }
  if (auto_run.log)
    std::fprintf(auto_run.log,
                 "redwood: --tree auto: measuring %zu dynamic-tree candidates with the draft at %d text "
                 "positions (cached in %s)\n",
                 dyn.size(), kDynamicPositions, dyn_path.c_str());
  const LoadedModel& draft = auto_run.draft;
  std::vector<std::vector<int32_t>> texts = builtin_prompts(auto_run.target);  // the target's tokenizer
  for (auto& text : texts)
    for (int32_t& t : text) t = spec::draft_token(t, draft.desc.hp.vocab);
  const planner::RankOneQ denom =
      planner::mean_rank1_q(*draft.transformer, draft.desc.hp.vocab, texts, auto_run.measuring);
  auto alpha = [&](spec::Verifier v) { return planner::calibration_scale(*rank1(v), denom.for_verifier(v)); };
  planner::measure_dynamic(*draft.transformer, draft.desc.hp.vocab, texts, auto_run.measuring, kDynamicPositions, alpha,
                           dyn);
  write_output_file(dyn_path, planner::dynamic_json(denom, greedy, dyn));
}

}  // namespace

int auto_tree_load_pass_tokens(const LoadedModel& m) {
  size_t most = static_cast<size_t>(HardwareRun{}.prefix);
  for (const auto& p : builtin_prompts(m)) most = std::max(most, p.size());
  return static_cast<int>(most);
}

AutoTreeResult choose_tree_auto(LoadedModel& m, LoadedModel& d, const RunOptions& run, const SamplingParams& sampling,
                                int max_budget, int max_depth, std::FILE* log, const std::string& acceptance_file,
                                const std::string& hardware_file, const SharedPasses& shared) {
  // The profiles describe the models, the sampling parameters and the
  // machine, not one run's draws: they are measured with a fixed seed, so a
  // run with another --seed finds them in the cache (keyed without it).
  AutoTreeRun auto_run{m, d, sampling, sampling, max_budget, max_depth, log, std::max(max_budget, shared.max_pass),
                       make_cache_dir(), m.desc.files};
  auto_run.measuring.seed = kProfileSeed;
  auto_run.files.insert(auto_run.files.end(), d.desc.files.begin(), d.desc.files.end());
  const std::string acc_path = planner::acceptance_cache_path(auto_run.cache_dir, auto_run.files, sampling);
  const std::string hw_path = planner::hardware_cache_path(
      auto_run.cache_dir, auto_run.files,
      {run.backend, run.device_mem, run.host_mem, run.ring, cpu_threads(), auto_run.max_pass,
       m.plan ? &*m.plan : nullptr, run.kv_type});
  const spec::AcceptanceProfile acc =
      acceptance_file.empty() ? cached_acceptance(auto_run, acc_path) : spec::read_acceptance_profile(acceptance_file);
  // Profiles given explicitly are used as they are (they change which tree is
  // chosen, so the speed, never the output's law): say so on stderr, even in a
  // quiet run, when they were measured for other models or another memory plan.
  std::FILE* warn = log ? log : stderr;
  PairIdentity pair{m, d, std::nullopt, std::nullopt};
  if (!acceptance_file.empty() && acc.target.bytes != 0 && !pair.same_models(acc.target, acc.draft))
    std::fprintf(warn, "redwood: warning: %s was measured for %s + %s, not these models; using it anyway\n",
                 acceptance_file.c_str(), acc.target.path.c_str(), acc.draft.path.c_str());
  const planner::MeasuredProfile hw = hardware_file.empty() ? cached_hardware(auto_run, run, hw_path)
                                                            : given_hardware(auto_run, hardware_file, pair, warn);
  // The dynamic policies: only those whose verifier's rank-1 acceptance was
  // measured are searched (the rest are said to be left out).
  bool skipped_topn = false;
  std::vector<planner::DynamicCandidate> dyn;
  if (!shared.static_only) dyn = calibratable_candidates(auto_run, acc, skipped_topn);
  if (!dyn.empty()) measure_dynamic_candidates(auto_run, acc, dyn);
  return choose_tree(acc, hw, dyn, sampling, max_budget, max_depth, log,
                     acceptance_file.empty() ? acc_path : acceptance_file, skipped_topn);
}

}  // namespace redwood::runtime
