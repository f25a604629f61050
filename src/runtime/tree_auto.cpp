// Timing passes and --tree auto (see tree_auto.h).
#include "src/runtime/tree_auto.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>

#include "src/planner/dynamic_profile.h"
#include "src/planner/profile_cache.h"
#include "src/speculative/acceptance_measure.h"
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
  const int V = m.desc.hp.vocab;
  std::vector<int32_t> pre(static_cast<size_t>(r.prefix));
  for (int i = 0; i < r.prefix; ++i) pre[static_cast<size_t>(i)] = (i * 7919) % V;
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
      b.tokens.push_back((i * 104729 + 17) % V);
      b.positions.push_back(r.prefix);
      b.parents.push_back(-1);
    }
    std::vector<double> t;
    for (int k = 0; k < r.warmup + r.repeats; ++k) {
      const double t0 = now_seconds();
      d.transformer->forward(b.view(), dkv, logits, LogitsRows::kAll);
      for (int i = 0; i < w; ++i)
        probs(sp, std::span<const float>(logits).subspan(static_cast<size_t>(i) * V, static_cast<size_t>(V)), q);
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

AutoTreeResult choose_tree(const spec::AcceptanceProfile& acc, const planner::MeasuredProfile& hw,
                           const std::vector<planner::DynamicCandidate>& dyn, const SamplingParams& sampling,
                           int max_budget, int max_depth, std::FILE* log, const std::string& acc_name,
                           bool skipped_topn) {
  // One optimisation per measured verifier scheme (T > 0: Sequoia's without
  // replacement and SpecInfer's i.i.d. children; T = 0: greedy), each with its
  // own acceptance vector; the fastest predicted (verifier, n, d) wins. The
  // target-sample vector (the draft's distinct top-W children) describes the
  // dynamic trees only: a static tree verified by target-sample draws its
  // children i.i.d., so it is not a scheme here.
  planner::OptimizerInput in;
  in.max_budget = max_budget;
  in.max_depth = max_depth;
  in.target_s = [&](int n) { return hw.target_pass.at(n); };
  in.draft_step_s = [&](int w) { return hw.draft_level.at(w); };
  AutoTreeResult res;
  res.autoregressive = planner::evaluate_tree(1, 1, 1.0, hw.target_pass.at(1), in.draft_step_s);
  res.best = res.autoregressive;
  std::vector<std::pair<spec::Verifier, std::vector<double>>> schemes;
  for (const spec::AcceptanceVector& v : acc.vectors)
    if ((v.verifier == spec::Verifier::kGreedy) == sampling.greedy() && v.verifier != spec::Verifier::kTargetSample)
      schemes.emplace_back(v.verifier, spec::non_increasing(v.acceptance));
  if (acc.vectors.empty())  // a bare {"acceptance": [...]} file: the default verifier
    schemes.emplace_back(sampling.greedy() ? spec::Verifier::kGreedy : spec::Verifier::kSequoia, acc.acceptance);
  if (schemes.empty()) {
    char t[64];
    std::snprintf(t, sizeof t, "%.6g", acc.temperature);
    throw Error(acc_name + " was measured at temperature " + t +
                (sampling.greedy() ? "; this run is greedy: profile again with --temperature 0"
                                   : "; this run samples: profile again at its --temperature"));
  }
  spec::Verifier best_v = schemes.front().first;
  std::vector<double> best_acc;
  planner::TreeChoice seq_best = res.autoregressive;
  for (const auto& [v, a] : schemes) {
    in.acceptance = a;
    const planner::TreeChoice c = planner::optimize_tree(in);
    if (c.tokens_per_second() > seq_best.tokens_per_second()) {
      seq_best = c;
      best_v = v;
      best_acc = a;
    }
  }

  planner::TreeChoice dyn_best;
  const int di = planner::best_dynamic(dyn, in.target_s, in.draft_step_s, &dyn_best);

  // Say what each family's best is predicted to do, then pick the fastest.
  if (log) {
    std::string line = "redwood: --tree auto: predicted s/token: plain decoding ";
    char b[160];
    std::snprintf(b, sizeof b, "%.4f", res.autoregressive.seconds_per_token());
    line.append(b);
    if (seq_best.depth > 1) {
      std::snprintf(b, sizeof b, "; sequoia budget %d depth %d, verify %s %.4f (%.2f tokens/pass)", seq_best.budget,
                    seq_best.depth, spec::verifier_name(best_v), seq_best.seconds_per_token(), seq_best.tokens);
      line.append(b);
    } else {
      line.append("; no sequoia tree beats plain decoding");
    }
    if (di >= 0) {
      const auto& c = dyn[static_cast<size_t>(di)];
      line.append("; ").append(planner::describe_tree(c.params));
      double nodes = 0;
      for (const auto& x : c.samples) nodes += x.nodes;
      nodes /= static_cast<double>(c.samples.size());
      std::snprintf(b, sizeof b, ", verify %s %.4f (%.2f tokens/pass, %.1f nodes)", spec::verifier_name(c.verifier),
                    dyn_best.seconds_per_token(), dyn_best.tokens, nodes);
      line.append(b);
    }
    if (skipped_topn) line.append(" (opt-tree and specexec not searched: no target-sample acceptance measured)");
    std::fprintf(log, "%s\n", line.c_str());
  }
  const double r_plain = res.autoregressive.tokens_per_second();
  const double r_seq = seq_best.depth > 1 ? seq_best.tokens_per_second() : 0.0;
  const double r_dyn = di >= 0 ? dyn_best.tokens_per_second() : 0.0;
  if (r_plain >= r_seq && r_plain >= r_dyn) {
    res.choice = "autoregressive";
    if (log)
      std::fprintf(log,
                   "redwood: --tree auto: plain decoding is predicted fastest here (%.4f s/token; acceptance "
                   "%.3f for the draft's first child)\n",
                   res.autoregressive.seconds_per_token(), acc.acceptance.empty() ? 0.0 : acc.acceptance[0]);
    return res;
  }
  spec::TreeOptions t;
  if (r_seq >= r_dyn) {
    res.best = seq_best;
    t.tree = "sequoia";
    t.budget = res.best.budget;
    t.depth = res.best.depth;
    t.verifier = spec::verifier_name(best_v);
    res.config = spec::make_spec_config(t, sampling);  // the default acceptance vector's tree, replaced below
    res.config->shape = spec::sequoia_tree(best_acc, res.best.budget, res.best.depth);
    char b[96];
    std::snprintf(b, sizeof b, "sequoia budget %d depth %d", res.best.budget, res.best.depth);
    res.choice = b;
  } else {
    const planner::DynamicCandidate& c = dyn[static_cast<size_t>(di)];
    res.best = dyn_best;
    t.tree = spec::tree_kind_name(c.params.kind);
    t.budget = c.params.budget;
    t.depth = c.params.depth;
    if (c.params.kind == spec::TreeKind::kDySpec && c.params.threshold > 0) t.threshold = c.params.threshold;
    if (c.params.kind == spec::TreeKind::kOptTree) t.delta = c.params.delta;
    if (c.params.kind == spec::TreeKind::kSpecExec) t.width = c.params.width;
    t.verifier = spec::verifier_name(c.verifier);
    res.config = spec::make_spec_config(t, sampling);
    res.choice = planner::describe_tree(c.params);
    best_v = c.verifier;
  }
  if (log)
    std::fprintf(log,
                 "redwood: --tree auto: %s, verify %s: predicted %.2f tokens/pass, %.4f s/token (plain decoding "
                 "%.4f s/token)\n",
                 res.choice.c_str(), spec::verifier_name(best_v), res.best.tokens, res.best.seconds_per_token(),
                 res.autoregressive.seconds_per_token());
  return res;
}

AutoTreeResult choose_tree_auto(LoadedModel& m, LoadedModel& d, const RunOptions& run, const SamplingParams& sampling,
                                int max_budget, int max_depth, std::FILE* log, const std::string& acceptance_file,
                                const std::string& hardware_file) {
  std::vector<std::string> files = m.desc.files;
  files.insert(files.end(), d.desc.files.begin(), d.desc.files.end());
  const std::string dir = make_cache_dir();
  const std::string sampling_key = planner::sampling_key(sampling);
  // The profiles describe the models, the sampling parameters and the
  // machine, not one run's draws: they are measured with a fixed seed, so a
  // run with another --seed finds them in the cache (keyed without it).
  SamplingParams measuring = sampling;
  measuring.seed = kProfileSeed;
  const std::string acc_path = planner::acceptance_cache_path(dir, files, sampling);
  const std::string hw_path = planner::hardware_cache_path(
      dir, files, {run.backend, run.device_mem, run.host_mem, run.ring, cpu_threads(), max_budget,
                   m.plan ? &*m.plan : nullptr});
  spec::AcceptanceProfile acc;
  if (!acceptance_file.empty()) {
    acc = spec::read_acceptance_profile(acceptance_file);
  } else if (std::filesystem::exists(acc_path)) {
    acc = spec::read_acceptance_profile(acc_path);
  } else {
    if (log)
      std::fprintf(log,
                   "redwood: --tree auto: no acceptance profile for this model pair at %s yet; measuring it "
                   "(cached in %s)\n",
                   sampling_key.c_str(), acc_path.c_str());
    std::vector<std::vector<int32_t>> prompts;
    for (const char* t : kBuiltinText) prompts.push_back(m.tokenizer->encode(t, /*add_special=*/true, false));
    spec::AcceptanceRun r;
    r.sampling = measuring;
    r.count = 256;
    r.repeats = 2;
    r.max_tokens = 0;
    r.chain_depth = 0;
    r.quiet = true;
    acc.target = spec::identify_files(m.desc.path, m.desc.files);
    acc.draft = spec::identify_files(d.desc.path, d.desc.files);
    acc.prompts = {"builtin", 0, "0000000000000000"};
    acc.temperature = sampling.temperature;
    acc.top_p = sampling.top_p;
    acc.top_k = sampling.top_k;
    acc.seed = measuring.seed;
    acc.repeats = r.repeats;
    measure_acceptance({*m.transformer, m.desc, *m.tokenizer, *d.transformer, d.desc}, prompts, r, acc);
    write_output_file(acc_path, spec::profile_json(acc));
  }
  // Profiles given explicitly are used as they are (they change which tree is
  // chosen, so the speed, never the output's law): say so on stderr, even in a
  // quiet run, when they were measured for other models (by content: a model of
  // the same size is not the same model) or another memory plan.
  std::FILE* warn = log ? log : stderr;
  std::optional<spec::FileIdentity> target_id, draft_id;
  auto same_models = [&](const spec::FileIdentity& t, const spec::FileIdentity& dr) {
    if (!target_id) target_id = spec::identify_files(m.desc.path, m.desc.files);
    if (!draft_id) draft_id = spec::identify_files(d.desc.path, d.desc.files);
    return t.bytes == target_id->bytes && t.xxh3 == target_id->xxh3 && dr.bytes == draft_id->bytes &&
           dr.xxh3 == draft_id->xxh3;
  };
  if (!acceptance_file.empty() && acc.target.bytes != 0 && !same_models(acc.target, acc.draft))
    std::fprintf(warn, "redwood: warning: %s was measured for %s + %s, not these models; using it anyway\n",
                 acceptance_file.c_str(), acc.target.path.c_str(), acc.draft.path.c_str());
  planner::MeasuredProfile hw;
  if (!hardware_file.empty()) {
    hw = planner::read_measured(hardware_file);
    const int resident = m.plan ? m.plan->count(offload::Tier::kDevice) : static_cast<int>(m.desc.layers.size());
    if (!same_models(hw.target, hw.draft))
      std::fprintf(warn,
                   "redwood: warning: %s was measured for %s + %s, not these models: its pass times are another "
                   "pair's; using it anyway\n",
                   hardware_file.c_str(), hw.target.path.c_str(), hw.draft.path.c_str());
    else if (hw.layers_resident != resident)
      std::fprintf(warn,
                   "redwood: warning: %s was measured for another memory plan (%d resident layers there, %d here); "
                   "using it anyway\n",
                   hardware_file.c_str(), hw.layers_resident, resident);
  } else if (std::filesystem::exists(hw_path)) {
    hw = planner::read_measured(hw_path);
  } else {
    if (log)
      std::fprintf(log,
                   "redwood: --tree auto: no hardware profile for this configuration yet; timing passes "
                   "(cached in %s)\n",
                   hw_path.c_str());
    HardwareRun r;
    for (int n = 1; n < max_budget; n *= 2) r.sizes.push_back(n);
    r.sizes.push_back(max_budget);
    for (int w = 1; w < max_budget - 1; w *= 2) r.widths.push_back(w);
    r.widths.push_back(std::max(1, max_budget - 1));  // a d = 2 tree's level: n - 1 nodes
    if (r.widths.size() > 1 && r.widths[r.widths.size() - 2] >= r.widths.back()) r.widths.pop_back();
    r.quiet = true;
    hw.target = spec::identify_files(m.desc.path, m.desc.files);
    hw.draft = spec::identify_files(d.desc.path, d.desc.files);
    hw.device_mem = run.device_mem;
    hw.host_mem = run.host_mem;
    hw.ring = run.ring;
    measure_hardware(m, d, r, hw);
    write_output_file(hw_path, planner::measured_json(hw));
  }
  // The dynamic policies: trees grown with the draft at real text positions,
  // their expected tokens calibrated by the profile's measured rank-1
  // acceptance in each verifier's scheme (planner::calibration_scale). Only
  // pairs with such a measurement are searched (a profile given with
  // --acceptance from before the target-sample scheme leaves OPT-Tree and
  // SpecExec out at temperature > 0, and says so).
  auto rank1 = [&](spec::Verifier v) { return rank1_acceptance(acc, v, sampling.greedy()); };
  std::vector<planner::DynamicCandidate> grid = planner::dynamic_grid(max_budget, max_depth, sampling.greedy());
  std::vector<planner::DynamicCandidate> dyn;
  bool skipped_topn = false;
  std::string a1_key;
  for (auto& c : grid) {
    const auto a1 = rank1(c.verifier);
    if (!a1) {
      skipped_topn = true;
      continue;
    }
    dyn.push_back(std::move(c));
  }
  for (const spec::Verifier v : {spec::Verifier::kGreedy, spec::Verifier::kSequoia, spec::Verifier::kTargetSample})
    if (const auto a1 = rank1(v)) {
      char b[64];
      std::snprintf(b, sizeof b, "|%s=%.9g", spec::verifier_name(v), *a1);
      a1_key += b;
    }
  constexpr int kDynamicPositions = 16;
  if (!dyn.empty()) {
    const std::string dyn_path =
        planner::dynamic_cache_path(dir, files, sampling, max_budget, max_depth, kDynamicPositions, a1_key);
    if (std::filesystem::exists(dyn_path)) {
      dyn = planner::read_dynamic(dyn_path);
    } else {
      if (log)
        std::fprintf(log,
                     "redwood: --tree auto: measuring %zu dynamic-tree candidates with the draft at %d text "
                     "positions (cached in %s)\n",
                     dyn.size(), kDynamicPositions, dyn_path.c_str());
      std::vector<std::vector<int32_t>> texts;
      for (const char* t : kBuiltinText) texts.push_back(m.tokenizer->encode(t, /*add_special=*/true, false));
      const planner::RankOneQ denom = planner::mean_rank1_q(*d.transformer, d.desc.hp.vocab, texts, measuring);
      auto alpha = [&](spec::Verifier v) { return planner::calibration_scale(*rank1(v), denom.for_verifier(v)); };
      planner::measure_dynamic(*d.transformer, d.desc.hp.vocab, texts, measuring, kDynamicPositions, alpha, dyn);
      write_output_file(dyn_path, planner::dynamic_json(denom, sampling.greedy(), dyn));
    }
  }
  return choose_tree(acc, hw, dyn, sampling, max_budget, max_depth, log,
                     acceptance_file.empty() ? acc_path : acceptance_file, skipped_topn);
}

}  // namespace redwood::runtime
