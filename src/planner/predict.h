// `redwood plan`: the predicted performance of speculative decoding with layer
// streaming on a hardware profile, from model configs and an acceptance
// vector, without running anything. Four scenarios, each a memory plan from
// the placement planner and the cost model's times:
//   sequoia           target + resident draft; Sequoia tree chosen by the optimizer
//   sequoia_min       the same at the planner's minimum device budget (for big
//                     targets: 0 resident layers), to show what residency buys
//   autoregressive    plain offloading, no draft, one token per pass
//   autoregressive_min  the same at its minimum device budget
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "offload/placement.h"
#include "src/model/model_desc.h"
#include "src/planner/cost_model.h"
#include "src/planner/hardware.h"
#include "src/planner/optimizer.h"

namespace redwood::planner {

struct PredictOptions {
  std::vector<double> acceptance;         // p_1 >= p_2 >= ... (Sequoia's positional acceptance)
  std::optional<uint64_t> device_budget;  // default: the profile's device_memory - device_reserved
  int ctx = 2048;                         // KV capacity (tokens) for the memory plan
  int n_past = 256;                       // tokens in the KV cache when attention is costed
  int max_budget = 1024;                  // optimizer grid: n in [1, max_budget]
  int max_depth = 32;                     // d in [1, max_depth]
  int threads = 2;                        // CPU kernel workspace (planner accounting)
  DType kv_type = DType::F32;             // KV cache element type (memory plan and attention reads)
  // Shared passes: one row per count B of sequences sharing each pass (each
  // holding ctx positions in a paged KV pool); empty: none.
  std::vector<int> sequences;
};

// B sequences sharing every pass: plain (B tokens per pass) and with trees
// (the node budget rule of src/speculative/node_budget.h splitting up to
// max_budget nodes per pass under the predicted t(n) and c(w)).
struct SequencesRow {
  int sequences = 1;
  std::string does_not_fit;  // non-empty: the plan's error (KV of B x ctx beyond the budget)
  int resident_layers = 0;
  double plain_pass_s = 0, plain_tokens_per_s = 0;
  int tree_nodes = 1;        // per sequence, root included (the most any sequence gets)
  int pass_tokens = 0;       // the trees' pass
  double tree_pass_s = 0, draft_s = 0, tree_tokens = 0, tree_tokens_per_s = 0;
};

struct Scenario {
  std::string label;
  offload::MemoryPlan plan;
  TreeChoice choice;                   // autoregressive: n = d = 1, tokens = 1
  int tree_nodes = 1, tree_depth = 1;  // the chosen tree as built (may be smaller than n)
  PassCost pass;                       // the target pass at n
};

struct Prediction {
  std::string hardware, target, draft;
  PredictOptions options;
  Scenario sequoia, sequoia_min, autoregressive, autoregressive_min;
  std::vector<std::pair<int, PassCost>> t_n;       // t(n) under the sequoia plan, a few n
  std::vector<std::pair<int, double>> draft_step;  // c(w), a few widths
  std::vector<SequencesRow> sequences;             // PredictOptions::sequences
};

Prediction predict(const HardwareProfile& hw, const ModelDesc& target, const ModelDesc& draft, const PredictOptions& o);

std::string prediction_table(const Prediction& p);
nlohmann::json prediction_json(const Prediction& p);

}  // namespace redwood::planner
