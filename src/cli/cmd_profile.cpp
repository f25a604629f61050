// redwood profile-acceptance: the positional acceptance vector of a draft for a
// target, measured Sequoia's way (one-level trees at many positions of real
// text), plus the per-depth acceptance of chains. See src/spec/acceptance_profile.h.
//
// Text: each prompt (chat template as in batch jobs) continued by the target
// itself at the profile's temperature. One target pass and one draft pass over
// the whole sequence give p and q at every continuation position; each position
// gets --repeats draws of W children per scheme. Chains: speculative decoding
// with chain:D over the same prompts, counting how deep each step accepted.
#include <cstdio>
#include <memory>

#include "kernels/cpu/threads.h"
#include "src/cli/commands.h"
#include "src/cli/common.h"
#include "src/jobs/prompts.h"
#include "src/model/chat_template.h"
#include "src/spec/acceptance_profile.h"
#include "src/spec/generation.h"
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

// The logits of every row of one pass over `seq` (a fresh cache).
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

int run_profile(const ProfileOptions& o) {
  if (o.draft.empty()) throw Error("--draft is required");
  if (o.prompts.empty()) throw Error("--prompts FILE.jsonl is required");
  if (o.out.empty()) throw Error("--out FILE.json is required");
  SamplingParams sp;
  sp.temperature = static_cast<float>(parse_double_arg(o.temperature, "--temperature"));
  sp.top_p = static_cast<float>(parse_double_arg(o.top_p, "--top-p"));
  if (sp.temperature < 0 || sp.temperature > 100) throw Error("--temperature must be in [0, 100]");
  if (!(sp.top_p > 0 && sp.top_p <= 1)) throw Error("--top-p must be in (0, 1]");
  sp.seed = static_cast<uint64_t>(parse_int_arg(o.seed, "--seed", 0, INT32_MAX));
  const int width = parse_int_arg(o.width, "--width", 1, 64);
  const int count = parse_int_arg(o.count, "--count", 1, 1 << 24);
  const int repeats = parse_int_arg(o.repeats, "--repeats", 1, 1024);
  const int max_tokens = parse_int_arg(o.max_tokens, "--max-tokens", 1, 1 << 16);
  const int chain_depth = parse_int_arg(o.chain_depth, "--chain-depth", 0, 64);

  // Everything that can be wrong is found before weights load.
  const jobs::PromptFile pf = jobs::read_prompts(o.prompts, /*skip_bad=*/false);
  if (pf.items.empty()) throw Error(o.prompts + ": no prompts");
  RunOptions run = o.run;
  apply_run_options(run);
  LoadedModel m = load_model(run.model.empty() ? default_model_path() : run.model, /*with_weights=*/false);
  LoadedModel d = load_model(o.draft, /*with_weights=*/false);
  if (d.desc.hp.vocab != m.desc.hp.vocab || d.desc.tokenizer.tokens != m.desc.tokenizer.tokens)
    throw Error(o.draft + ": the draft's vocabulary differs from the target's");
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& it : pf.items) {
    std::string text = it.prompt;
    if (!it.messages.empty())
      text = apply_chat_template(m.desc.chat_template, it.messages);
    else if (o.chat)
      text = apply_chat_template(m.desc.chat_template, {{"user", it.prompt}});
    prompts.push_back(m.tokenizer->encode(text, /*add_special=*/true, /*parse_special=*/true));
    if (prompts.back().empty()) throw Error(o.prompts + ":" + std::to_string(it.line) + ": the prompt encodes to no tokens");
  }
  spec::AcceptanceProfile prof;
  prof.target = spec::identify_files(m.desc.path, m.desc.files);
  prof.draft = spec::identify_files(d.desc.path, d.desc.files);
  prof.prompts = spec::identify_files(o.prompts, {o.prompts});
  prof.temperature = sp.temperature;
  prof.top_p = sp.top_p;
  prof.seed = sp.seed;
  prof.repeats = repeats;

  offload::RunShape shape;
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  shape.ctx = static_cast<int>(longest) + max_tokens + chain_depth + 2;
  shape.max_tokens = shape.ctx;
  load_weights(m, run, shape, &d.desc);
  load_weights(d, RunOptions{}, shape);

  const bool greedy = sp.greedy();
  std::vector<spec::AcceptanceCounter> counters;
  if (greedy) {
    counters.emplace_back(spec::Verifier::kGreedy, width);
  } else {
    counters.emplace_back(spec::Verifier::kSequoia, width);
    counters.emplace_back(spec::Verifier::kSpecInfer, width);
  }
  // Greedy drafts take the draft's top-W under its T = 1 softmax (as the runtime does).
  SamplingParams filt = sp;
  if (greedy) filt.temperature = 1.0f;
  Rng rng(sp.seed * 0x9E3779B97F4A7C15ull + 1);
  std::vector<float> p, q;
  const int V = m.desc.hp.vocab;
  int64_t positions = 0;
  int used_prompts = 0;
  for (size_t i = 0; i < prompts.size() && positions < count; ++i) {
    spec::GenerationRequest req;
    req.prompt = prompts[i];
    req.sampling = sp;
    req.sampling.seed = sp.seed + i;
    req.max_tokens = max_tokens;
    const spec::Generation g = spec::generate(*m.transformer, *m.tokenizer, req, nullptr);
    std::vector<int32_t> seq = prompts[i];
    seq.insert(seq.end(), g.tokens.begin(), g.tokens.end());
    if (g.tokens.size() < 2) continue;
    const std::vector<float> lt = all_logits(*m.transformer, seq, V), ld = all_logits(*d.transformer, seq, V);
    // Position t predicts seq[t + 1]: the continuation's positions, each with the real prefix.
    for (size_t t = prompts[i].size() - 1; t + 1 < seq.size() && positions < count; ++t, ++positions) {
      probs(filt, std::span<const float>(lt).subspan(t * static_cast<size_t>(V), static_cast<size_t>(V)), p);
      probs(filt, std::span<const float>(ld).subspan(t * static_cast<size_t>(V), static_cast<size_t>(V)), q);
      for (auto& c : counters)
        for (int r = 0; r < repeats; ++r) c.add(p, q, rng);
    }
    ++used_prompts;
    if (!o.quiet) std::fprintf(stderr, "\rprofile: %lld/%d positions", static_cast<long long>(positions), count);
  }
  if (!o.quiet) std::fprintf(stderr, "\n");
  if (positions == 0) throw Error(o.prompts + ": the target produced no continuation to measure on");
  prof.positions = positions;
  prof.prompt_count = used_prompts;
  for (const auto& c : counters) prof.vectors.push_back(c.result());
  prof.acceptance = spec::non_increasing(prof.vectors[0].acceptance);

  // Chains of depth D over the same prompts.
  prof.chain.depth = chain_depth;
  prof.chain.reached.assign(static_cast<size_t>(chain_depth) + 1, 0);
  if (chain_depth > 0) {
    spec::DraftSetup ds;
    ds.draft = d.transformer.get();
    ds.target_desc = &m.desc;
    ds.draft_desc = &d.desc;
    ds.config = spec::make_spec_config(
        spec::TreeOptions{"chain:" + std::to_string(chain_depth), 64, 8, {}, {}, {}, "", "", {}}, sp);
    for (int i = 0; i < used_prompts; ++i) {
      spec::GenerationRequest req;
      req.prompt = prompts[static_cast<size_t>(i)];
      req.sampling = sp;
      req.sampling.seed = sp.seed + static_cast<uint64_t>(i);
      req.max_tokens = max_tokens;
      const spec::Generation g = spec::generate(*m.transformer, *m.tokenizer, req, &ds);
      const auto& hist = g.spec->accepted_by_depth;  // [k] = steps that accepted k drafted tokens
      for (size_t k = 0; k < hist.size(); ++k)
        for (size_t j = 0; j <= std::min(k, static_cast<size_t>(chain_depth)); ++j) prof.chain.reached[j] += hist[k];
    }
  }
  write_file_atomic(o.out, spec::profile_json(prof));
  const auto& v = prof.vectors[0];
  std::fprintf(stderr, "redwood: %s acceptance over %lld positions:", spec::verifier_name(v.verifier),
               static_cast<long long>(positions));
  for (double a : v.acceptance) std::fprintf(stderr, " %.3f", a);
  std::fprintf(stderr, " (none %.3f) -> %s\n", v.none, o.out.c_str());
  return 0;
}

}  // namespace

Runner add_profile_acceptance(CLI::App& app) {
  auto o = std::make_shared<ProfileOptions>();
  auto* c = app.add_subcommand("profile-acceptance",
                               "Measure the draft's positional acceptance vector against the target (Sequoia's "
                               "one-level trees on real text) and chain acceptance by depth");
  c->add_option("--model,-m", o->run.model, "Target model (default: SmolLM2-135M)");
  c->add_option("--draft", o->draft, "Draft model (same vocabulary)")->required();
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
