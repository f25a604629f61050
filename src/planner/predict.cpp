#include "src/planner/predict.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "src/speculative/sequoia_dp.h"
#include "src/util/error.h"
#include "src/util/size.h"

namespace redwood::planner {

namespace {

using offload::Tier;

offload::MemoryPlan make_plan(const HardwareProfile& hw, const ModelDesc& target, const ModelDesc* draft,
                              uint64_t device, int max_tokens, const PredictOptions& o) {
  offload::Budgets b;
  b.device = device;
  b.host = hw.host_memory;
  b.backend = hw.backend;
  offload::RunShape s;
  s.ctx = o.ctx;
  s.max_tokens = max_tokens;
  s.threads = o.threads;
  s.kv_type = o.kv_type;
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
  if (target.hp.vocab != draft.hp.vocab)
    throw Error("the draft config's vocabulary (" + std::to_string(draft.hp.vocab) + " tokens, " + draft.name +
                ") differs from the target's (" + std::to_string(target.hp.vocab) + " tokens, " + target.name +
                "): speculative decoding needs the same vocabulary");
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
  return out;
}

nlohmann::json prediction_json(const Prediction& p) {
  nlohmann::json j;
  j["hardware"] = p.hardware;
  j["target"] = p.target;
  j["draft"] = p.draft;
  j["acceptance"] = p.options.acceptance;
  j["ctx"] = p.options.ctx;
  j["kv_type"] = std::string(dtype_name(p.options.kv_type));
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
  return j;
}

}  // namespace redwood::planner
