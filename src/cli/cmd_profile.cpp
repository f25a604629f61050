// redwood profile-acceptance and profile-hardware: options and the files
// written; the measurements are src/app/profiles.h.
#include <cstdio>
#include <memory>

#include "src/cli/commands.h"
#include "src/cli/common.h"
#include "src/app/profiles.h"
#include "src/util/error.h"

namespace redwood::cli {

namespace {

struct ProfileOptions {
  RunOptions run;
  std::string draft, prompts, out;
  std::string temperature = "0.6", top_p = "1.0", width = "8", count = "256", repeats = "4", max_tokens = "64",
              chain_depth = "6", seed = "1";
  bool chat = true, quiet = false;
};

int run_profile(const ProfileOptions& o) {
  if (o.draft.empty()) throw Error("--draft is required");
  if (o.prompts.empty()) throw Error("--prompts FILE.jsonl is required");
  if (o.out.empty()) throw Error("--out FILE.json is required");
  spec::AcceptanceRun ar;
  SamplingParams& sp = ar.sampling;
  sp.temperature = static_cast<float>(parse_double_arg(o.temperature, "--temperature"));
  sp.top_p = static_cast<float>(parse_double_arg(o.top_p, "--top-p"));
  if (sp.temperature < 0 || sp.temperature > 100) throw Error("--temperature must be in [0, 100]");
  if (!(sp.top_p > 0 && sp.top_p <= 1)) throw Error("--top-p must be in (0, 1]");
  sp.seed = static_cast<uint64_t>(parse_int_arg(o.seed, "--seed", 0, INT32_MAX));
  ar.width = parse_int_arg(o.width, "--width", 1, 64);
  ar.count = parse_int_arg(o.count, "--count", 1, 1 << 24);
  ar.repeats = parse_int_arg(o.repeats, "--repeats", 1, 1024);
  ar.max_tokens = parse_int_arg(o.max_tokens, "--max-tokens", 1, 1 << 16);
  ar.chain_depth = parse_int_arg(o.chain_depth, "--chain-depth", 0, 64);
  ar.quiet = o.quiet;

  // Everything that can be wrong is found before weights load.
  const jobs::PromptFile pf = jobs::read_prompts(o.prompts, /*skip_bad=*/false, /*fail_hint=*/"");
  if (pf.items.empty()) throw Error(o.prompts + ": no prompts");
  RunOptions run = o.run;
  apply_run_options(run, {o.draft, o.prompts});
  if (run.model.empty()) run.model = default_model_path();
  check_output(o.out, {run.model, o.draft, o.prompts}, "--out");
  const spec::AcceptanceProfile prof = app::profile_acceptance(run, o.draft, o.prompts, pf, o.chat, ar);
  if (prof.positions == 0) throw Error(o.prompts + ": the target produced no continuation to measure on");
  write_output_file(o.out, spec::profile_json(prof));
  const auto& v = prof.vectors[0];
  std::fprintf(stderr, "redwood: %s acceptance over %lld positions:", spec::verifier_name(v.verifier),
               static_cast<long long>(prof.positions));
  for (double a : v.acceptance) std::fprintf(stderr, " %.3f", a);
  std::fprintf(stderr, " (none %.3f) -> %s\n", v.none, o.out.c_str());
  return 0;
}

// ---- profile-hardware ----------------------------------------------------------

struct HardwareOptions {
  RunOptions run;
  std::string draft, out;
  std::string sizes = "1,2,4,8,16,32,64,128,256,512,768,1024", widths = "1,2,4,8,16,32,64";
  int repeats = 3, warmup = 1, prefix = 64;
  bool quiet = false;
};

std::vector<int> grid(const std::string& s, const char* what, int hi) {
  std::vector<int> out;
  for (int32_t v : parse_int_list(s, what)) {
    if (v < 1 || v > hi) throw Error(std::string(what) + ": each value must be in 1.." + std::to_string(hi));
    if (!out.empty() && v <= out.back()) throw Error(std::string(what) + ": values must be increasing");
    out.push_back(v);
  }
  if (out.empty()) throw Error(std::string(what) + ": give at least one value");
  return out;
}

int run_hardware(const HardwareOptions& o) {
  if (o.draft.empty()) throw Error("--draft is required");
  if (o.out.empty()) throw Error("--out FILE.json is required");
  const std::vector<int> sizes = grid(o.sizes, "--sizes", 8192), widths = grid(o.widths, "--widths", 4096);
  RunOptions run = o.run;
  apply_run_options(run, {o.draft});
  if (run.model.empty()) run.model = default_model_path();
  check_output(o.out, {run.model, o.draft}, "--out");
  runtime::HardwareRun hr;
  hr.sizes = sizes;
  hr.widths = widths;
  hr.repeats = o.repeats;
  hr.warmup = o.warmup;
  hr.prefix = o.prefix;
  hr.quiet = o.quiet;
  const planner::MeasuredProfile prof = app::profile_hardware(run, o.draft, hr);
  write_output_file(o.out, planner::measured_json(prof));
  std::fprintf(stderr, "redwood: t(1) = %.4f s, t(%d) = %.4f s; c(1) = %.4f s -> %s\n",
               prof.target_pass.seconds.front(), sizes.back(), prof.target_pass.seconds.back(),
               prof.draft_level.seconds.front(), o.out.c_str());
  return 0;
}

}  // namespace

Runner add_profile_hardware(CLI::App& app) {
  auto o = std::make_shared<HardwareOptions>();
  auto* c = app.add_subcommand("profile-hardware",
                               "Time target passes t(n) and draft levels c(w) in this configuration (budgets, "
                               "streaming) for the tree optimizer");
  c->add_option("--draft", o->draft, "Draft model (resident)")->required();
  c->add_option("--out", o->out, "Profile JSON to write")->required();
  c->add_option("--sizes", o->sizes, "Tree sizes n for target passes, increasing (default 1..1024)");
  c->add_option("--widths", o->widths, "Level widths w for draft passes, increasing (default 1..64)");
  c->add_option("--repeats", o->repeats, "Timed passes per point (the median is kept)")->transform(int_range(1, 1000));
  c->add_option("--warmup", o->warmup, "Untimed passes first")->transform(int_range(0, 100));
  c->add_option("--prefix", o->prefix, "Committed context tokens before the timed passes")
      ->transform(int_range(0, 1 << 16));
  c->add_flag("--quiet,-q", o->quiet, "No per-point lines");
  add_run_options(c, o->run);
  return [o] { return run_hardware(*o); };
}

Runner add_profile_acceptance(CLI::App& app) {
  auto o = std::make_shared<ProfileOptions>();
  auto* c = app.add_subcommand("profile-acceptance",
                               "Measure the draft's positional acceptance vector against the target (Sequoia's "
                               "one-level trees on real text) and chain acceptance by depth");
  c->add_option("--model,-m", o->run.model, "Target model (default: SmolLM2-135M)");
  c->add_option("--draft", o->draft, "Draft model (the target's tokenizer; it may lack padding rows)")->required();
  c->add_option("--prompts", o->prompts, "Prompts, JSONL as in batch jobs ({\"id\", \"prompt\" | \"messages\"})")
      ->required();
  c->add_option("--out", o->out, "Profile JSON to write (usable as --acceptance FILE)")->required();
  c->add_option("--temperature", o->temperature, "Sampling temperature of target and draft (default 0.6; 0: greedy)");
  c->add_option("--top-p", o->top_p, "Top-p of target and draft (default 1)");
  c->add_option("--width", o->width, "Children per one-level tree, W (1..64, default 8)");
  c->add_option("--count", o->count, "Text positions to measure (default 256)");
  c->add_option("--repeats", o->repeats, "Child draws per position (default 4)");
  c->add_option("--max-tokens", o->max_tokens, "Continuation generated per prompt (default 64)");
  c->add_option("--chain-depth", o->chain_depth, "Chain length for the per-depth acceptance (0: skip; default 6)");
  c->add_option("--seed", o->seed, "Random seed (default 1)");
  c->add_flag("!--no-chat", o->chat, "Use \"prompt\" strings as raw text (default: the model's chat template)");
  c->add_flag("--quiet,-q", o->quiet, "No progress");
  add_budget_options(c, o->run);
  return [o] { return run_profile(*o); };
}

}  // namespace redwood::cli
