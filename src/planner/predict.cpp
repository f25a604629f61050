#include "src/planner/predict.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "src/engine/kv_type.h"
#include "src/speculative/node_budget.h"
#include "src/speculative/sequoia_dp.h"
#include "src/util/error.h"
#include "src/util/size.h"

namespace redwood::planner {

namespace {

using offload::Tier;

offload::MemoryPlan make_plan(const HardwareProfile& hw, const ModelDesc& target, const ModelDesc* draft,
                              uint64_t device, int max_tokens, const PredictOptions& o, int sequences = 1) {
  offload::Budgets b;
  b.device = device;
  b.host = hw.host_memory;
  b.backend = hw.backend;
  offload::RunShape s;
  s.ctx = o.ctx;
  s.max_tokens = max_tokens;
  s.threads = o.threads;
  s.kv_type = o.kv_type;
  s.sequences = sequences;
  return offload::plan_memory(target, draft, b, s);
}

Scenario sequoia_scenario(const std::string& label, const HardwareProfile& hw, const ModelDesc& target,
                          const ModelDesc& draft, uint64_t device, const PredictOptions& o) {
  Scenario sc;
  sc.label = label;
  sc.plan = make_plan(hw, target, &draft, device, o.max_budget, o);
  OptimizerInput in;
  in.acceptance = o.acceptance;
  in.max_budget = o.max_budget;
  in.max_depth = o.max_depth;
  in.target_s = [&](int n) { return target_pass(hw, target, sc.plan, n, o.n_past).seconds; };
  in.draft_step_s = [&](int w) { return draft_pass(hw, draft, w, o.n_past, o.kv_type).seconds; };
  sc.choice = optimize_tree(in);
  const spec::StaticTree tree = spec::sequoia_tree(o.acceptance, sc.choice.budget, sc.choice.depth);
  sc.tree_nodes = tree.size();
  sc.tree_depth = tree.max_depth();
  sc.pass = target_pass(hw, target, sc.plan, sc.choice.budget, o.n_past);
  return sc;
}

Scenario ar_scenario(const std::string& label, const HardwareProfile& hw, const ModelDesc& target, uint64_t device,
                     const PredictOptions& o) {
  Scenario sc;
  sc.label = label;
  sc.plan = make_plan(hw, target, nullptr, device, 1, o);
  sc.pass = target_pass(hw, target, sc.plan, 1, o.n_past);
  sc.choice.target_s = sc.pass.seconds;
  return sc;
}

// Shared passes of B sequences (Prediction::sequences): the trees of k = 1..K
// nodes the DP builds, their expected tokens and draft seconds, then per B the
// plan, the plain pass and the node budget rule's trees.
std::vector<SequencesRow> sequences_rows(const HardwareProfile& hw, const ModelDesc& target, const ModelDesc& draft,
                                         uint64_t device, const PredictOptions& o) {
  // f(k) for every k from one run of the DP; the draft's seconds from the
  // trees themselves at a grid of k (linear between: building every tree up
  // to a budget of 1024 would take minutes).
  if (o.sequences.empty()) return {};
  const int per_sequence = o.max_budget;  // the largest tree one sequence gets
  const int depth = std::min(o.max_depth, per_sequence);
  const std::vector<std::vector<double>> g = spec::sequoia_value_table(o.acceptance, per_sequence, depth);
  std::vector<double> f(g[static_cast<size_t>(depth)].begin() + 1, g[static_cast<size_t>(depth)].end());
  const auto c = [&](int w) { return draft_pass(hw, draft, w, o.n_past, o.kv_type).seconds; };
  const std::vector<std::vector<int>> widths = spec::grid_level_widths(
      per_sequence, [&](int k) { return spec::sequoia_tree(o.acceptance, k, depth); });
  // The trees of the sequences in one pass grow together: one draft pass per level.
  const auto draft_s = [&](const std::vector<int>& ks) { return spec::shared_draft_seconds(widths, ks, c); };
  std::vector<SequencesRow> rows;
  for (const int B : o.sequences) {
    SequencesRow r;
    r.sequences = B;
    const int budget = std::max(B, o.max_budget);
    offload::MemoryPlan plan;
    try {
      plan = make_plan(hw, target, &draft, device, budget, o, B);
    } catch (const Error& e) {
      r.does_not_fit = e.what();
      rows.push_back(r);
      continue;
    }
    r.resident_layers = plan.count(Tier::kDevice);
    const auto t = [&](int n) { return target_pass(hw, target, plan, n, o.n_past).seconds; };
    r.plain_pass_s = t(B);
    r.plain_tokens_per_s = B / r.plain_pass_s;
    const std::vector<int> k = spec::split_tree_nodes(B, B, budget - B, f, t, draft_s);
    r.pass_tokens = 0;
    for (const int x : k) {
      r.pass_tokens += x;
      r.tree_tokens += f[static_cast<size_t>(x - 1)];
      r.tree_nodes = std::max(r.tree_nodes, x);
    }
    r.draft_s = draft_s(k);
    r.tree_pass_s = t(r.pass_tokens);
    r.tree_tokens_per_s = r.tree_tokens / (r.tree_pass_s + r.draft_s);
    rows.push_back(r);
  }
  return rows;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

nlohmann::json scenario_json(const Scenario& s) {
  const auto& p = s.plan;
  nlohmann::json j;
  j["memory_plan"] = {{"device_budget", p.device_budget},
                      {"device_used", p.device_used},
                      {"device_min", p.device_min},
                      {"host_used", p.host_used},
                      {"resident_layers", p.count(Tier::kDevice)},
                      {"host_layers", p.count(Tier::kHost)},
                      {"storage_layers", p.count(Tier::kStorage)},
                      {"ring_slots", p.ring_slots},
                      {"slot_bytes", p.slot_bytes},
                      {"host_bytes_per_pass", p.host_bytes_per_pass},
                      {"storage_bytes_per_pass", p.storage_bytes_per_pass},
                      {"items", offload::plan_json(p)["items"]}};
  j["budget"] = s.choice.budget;
  j["depth"] = s.choice.depth;
  j["tree_nodes"] = s.tree_nodes;
  j["tree_depth"] = s.tree_depth;
  j["tokens_per_pass"] = s.choice.tokens;
  j["target_pass_s"] = s.choice.target_s;
  j["target_compute_s"] = s.pass.compute_s;
  j["target_transfer_s"] = s.pass.transfer_s;
  j["target_decode_s"] = s.pass.decode_s;
  j["draft_s"] = s.choice.draft_s;
  j["s_per_token"] = s.choice.seconds_per_token();
  j["tokens_per_s"] = s.choice.tokens_per_second();
  return j;
}

}  // namespace

Prediction predict(const HardwareProfile& hw, const ModelDesc& target, const ModelDesc& draft,
                   const PredictOptions& o) {
  if (o.n_past < 0) throw Error("n_past must not be negative");
  if (o.n_past > o.ctx)
    throw Error("--past " + std::to_string(o.n_past) + " exceeds --ctx " + std::to_string(o.ctx) +
                " (the KV cache holds at most ctx tokens)");
  if (draft.hp.vocab > target.hp.vocab)  // configs: rows only (draft_vocab_mismatch with no token lists)
    throw Error("the draft config's vocabulary (" + std::to_string(draft.hp.vocab) + " tokens, " + draft.name +
                ") is larger than the target's (" + std::to_string(target.hp.vocab) + " tokens, " + target.name +
                "): the draft could propose tokens the target does not have");
  Prediction p;
  p.hardware = hw.name;
  p.target = target.name;
  p.draft = draft.name;
  p.options = o;
  const uint64_t device = o.device_budget ? *o.device_budget : hw.device_budget();
  p.sequoia = sequoia_scenario("sequoia", hw, target, draft, device, o);
  p.sequoia_min = sequoia_scenario("sequoia_min", hw, target, draft, p.sequoia.plan.device_min, o);
  p.autoregressive = ar_scenario("autoregressive", hw, target, device, o);
  p.autoregressive_min = ar_scenario("autoregressive_min", hw, target, p.autoregressive.plan.device_min, o);
  for (int n : {1, 16, 64, 128, 256, 512, 768, 1024})
    if (n <= o.max_budget) p.t_n.emplace_back(n, target_pass(hw, target, p.sequoia.plan, n, o.n_past));
  for (int w : {1, 8, 32, 64, 128, 256})
    if (w <= o.max_budget) p.draft_step.emplace_back(w, draft_pass(hw, draft, w, o.n_past, o.kv_type).seconds);
  p.sequences = sequences_rows(hw, target, draft, device, o);
  return p;
}

std::string prediction_table(const Prediction& p) {
  std::string out;
  auto line = [&out](const std::string& s) { out += s + "\n"; };
  line("predicted: " + p.target + " with draft " + p.draft + " on " + p.hardware);
  line("  (ctx " + std::to_string(p.options.ctx) + ", attention over " + std::to_string(p.options.n_past) +
       " past tokens, trees n <= " + std::to_string(p.options.max_budget) +
       ", d <= " + std::to_string(p.options.max_depth) + ")");
  line("");
  line("  t(n), target pass under the sequoia plan:");
  line("  " + std::string("       n    pass s   compute s  transfer s"));
  for (const auto& [n, c] : p.t_n) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "  %8d  %8.3f  %10.3f  %10.3f", n, c.seconds, c.compute_s, c.transfer_s);
    line(buf);
  }
  std::string ds = "  draft step c(w):";
  for (const auto& [w, s] : p.draft_step) ds += " w=" + std::to_string(w) + " " + fmt("%.1f ms", s * 1e3) + ";";
  ds.pop_back();
  line(ds);
  line("");
  char buf[512];
  std::snprintf(buf, sizeof buf, "  %-20s %8s %8s %8s %11s %5s %6s %8s %8s %8s %9s %8s", "scenario", "device",
                "resident", "streamed", "per pass", "n", "d", "tok/pass", "pass s", "draft s", "s/token", "tok/s");
  line(buf);
  const double ar = p.autoregressive.choice.seconds_per_token();
  for (const Scenario* s : {&p.sequoia, &p.sequoia_min, &p.autoregressive, &p.autoregressive_min}) {
    const auto& pl = s->plan;
    std::snprintf(buf, sizeof buf, "  %-20s %8s %8d %8d %11s %5d %6d %8.2f %8.3f %8.3f %9.3f %8.3f", s->label.c_str(),
                  format_size(pl.device_used).c_str(), pl.count(Tier::kDevice),
                  pl.count(Tier::kHost) + pl.count(Tier::kStorage),
                  format_size(pl.host_bytes_per_pass + pl.storage_bytes_per_pass).c_str(), s->choice.budget,
                  s->choice.depth, s->choice.tokens, s->choice.target_s, s->choice.draft_s,
                  s->choice.seconds_per_token(), s->choice.tokens_per_second());
    line(buf);
  }
  line("");
  line("  sequoia tree: budget " + std::to_string(p.sequoia.choice.budget) + ", depth " +
       std::to_string(p.sequoia.choice.depth) + " -> " + std::to_string(p.sequoia.tree_nodes) + " nodes, " +
       std::to_string(p.sequoia.tree_depth) + " levels");
  line("  speedup over plain offloading: " + fmt("%.2fx", ar / p.sequoia.choice.seconds_per_token()) +
       "; resident layers buy " +
       fmt("%.2fx", p.sequoia_min.choice.seconds_per_token() / p.sequoia.choice.seconds_per_token()) +
       " with the draft (" + std::to_string(p.sequoia.plan.count(Tier::kDevice)) + " vs " +
       std::to_string(p.sequoia_min.plan.count(Tier::kDevice)) + " resident layers), " +
       fmt("%.2fx", p.autoregressive_min.choice.seconds_per_token() / ar) + " without (" +
       std::to_string(p.autoregressive.plan.count(Tier::kDevice)) + " vs " +
       std::to_string(p.autoregressive_min.plan.count(Tier::kDevice)) + ")");
  if (!p.sequences.empty()) {
    line("");
    line("  shared passes: B sequences of " + std::to_string(p.options.ctx) +
         " positions each in one paged KV pool; trees: the node budget rule over up to " +
         std::to_string(p.options.max_budget) + " nodes per pass (the trees grow together: one draft pass per level)");
    std::snprintf(buf, sizeof buf, "  %5s %8s %12s %11s %9s %11s %8s %8s %9s %8s %10s", "B", "resident", "plain pass s",
                  "plain tok/s", "nodes/seq", "pass tokens", "pass s", "draft s", "tok/pass", "tok/s", "vs sequoia");
    line(buf);
    const double one = p.sequoia.choice.tokens_per_second();
    for (const SequencesRow& r : p.sequences) {
      if (!r.does_not_fit.empty()) {
        line("  " + fmt("%5.0f", r.sequences) + "  does not fit: " + r.does_not_fit);
        continue;
      }
      std::snprintf(buf, sizeof buf, "  %5d %8d %12.3f %11.2f %9d %11d %8.3f %8.3f %9.2f %8.2f %9.2fx", r.sequences,
                    r.resident_layers, r.plain_pass_s, r.plain_tokens_per_s, r.tree_nodes, r.pass_tokens,
                    r.tree_pass_s, r.draft_s, r.tree_tokens, r.tree_tokens_per_s,
                    std::max(r.tree_tokens_per_s, r.plain_tokens_per_s) / one);
      line(buf);
    }
    line("  (published, other model and hardware: FlexGen runs OPT-175B on one 16 GB T4 at 0.69 tokens/s with a");
    line("   large batch, against 0.01 for DeepSpeed ZeRO-Inference and Accelerate; Sheng et al., ICML 2023)");
  }
  return out;
}

nlohmann::json prediction_json(const Prediction& p) {
  nlohmann::json j;
  j["hardware"] = p.hardware;
  j["target"] = p.target;
  j["draft"] = p.draft;
  j["acceptance"] = p.options.acceptance;
  j["ctx"] = p.options.ctx;
  j["kv_type"] = kv_type_name(p.options.kv_type);
  j["n_past"] = p.options.n_past;
  j["max_budget"] = p.options.max_budget;
  j["max_depth"] = p.options.max_depth;
  for (const Scenario* s : {&p.sequoia, &p.sequoia_min, &p.autoregressive, &p.autoregressive_min})
    j[s->label] = scenario_json(*s);
  j["speedup_vs_autoregressive"] = p.autoregressive.choice.seconds_per_token() / p.sequoia.choice.seconds_per_token();
  j["residency_gain_sequoia"] = p.sequoia_min.choice.seconds_per_token() / p.sequoia.choice.seconds_per_token();
  j["residency_gain_autoregressive"] =
      p.autoregressive_min.choice.seconds_per_token() / p.autoregressive.choice.seconds_per_token();
  j["t_n"] = nlohmann::json::array();
  for (const auto& [n, c] : p.t_n)
    j["t_n"].push_back({{"n", n}, {"s", c.seconds}, {"compute_s", c.compute_s}, {"transfer_s", c.transfer_s}});
  j["draft_step"] = nlohmann::json::array();
  for (const auto& [w, s] : p.draft_step) j["draft_step"].push_back({{"width", w}, {"s", s}});
  if (!p.sequences.empty()) {
    j["sequences"] = nlohmann::json::array();
    for (const SequencesRow& r : p.sequences) {
      nlohmann::json x = {{"sequences", r.sequences}};
      if (!r.does_not_fit.empty()) {
        x["does_not_fit"] = r.does_not_fit;
      } else {
        x.update({{"resident_layers", r.resident_layers}, {"plain_pass_s", r.plain_pass_s},
                  {"plain_tokens_per_s", r.plain_tokens_per_s}, {"tree_nodes_per_sequence", r.tree_nodes},
                  {"tree_pass_tokens", r.pass_tokens}, {"tree_pass_s", r.tree_pass_s}, {"draft_s", r.draft_s},
                  {"tree_tokens_per_pass", r.tree_tokens}, {"tree_tokens_per_s", r.tree_tokens_per_s}});
      }
      j["sequences"].push_back(x);
    }
  }
  return j;
}

}  // namespace redwood::planner
