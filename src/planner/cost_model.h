// The predicted cost model: how long a target pass over a tree of n tokens and
// a draft step over w tokens take on a hardware profile, from the placement
// planner's memory plan, without running anything.
//
// Per layer i and pass of n tokens (n_past tokens already in the KV cache):
//   compute_i  = max(bytes_i / (device_bandwidth * bandwidth_efficiency),
//                    flops_i / (tflops * flops_efficiency)) + layer_overhead
//     bytes_i  = the layer's matrices + its KV cache rows read by attention
//     flops_i  = 2 * params_i * n + 4 * n * (n_past + n) * heads * head_dim
//   transfer_i = 0 for device-resident layers; slot bytes / link_bandwidth for
//     host-staged layers; slot bytes / min(link, storage) for layers read from
//     storage (gpu: storage -> pinned staging -> device, the two stages
//     pipelined; cpu: storage -> the slot in RAM, so storage bandwidth alone).
// The pass is the layer pipeline of the offload engine, simulated: one copy
// engine moves streamed layers in order into K ring slots (a slot is free once
// the layer that used it K streamed layers earlier has been computed); layer i
// computes when layer i-1 is done and its weights are in place. Nothing is
// prefetched across passes (conservative: the link idles while the draft runs).
// The LM head (vocab x dim for n tokens) and the embedding lookup close the pass.
// Roughly, a pass is max(sum transfer, sum compute) plus the pipeline's fill.
//
// A draft step of w tokens is the same with every layer resident.
#pragma once
#include <vector>

#include "offload/placement.h"
#include "src/model/model_desc.h"
#include "src/planner/hardware.h"

namespace redwood::planner {

struct PassCost {
  double seconds = 0;     // the simulated pipeline, LM head included
  double compute_s = 0;   // sum of compute over layers + LM head
  double transfer_s = 0;  // sum of transfers (the link's busy time)
  double decode_s = 0;    // sum of a packed model's decode stages (HardwareProfile::decode_bandwidth;
                          // on a CPU the decode thread's cores are the compute's: not modelled)
};

// A target pass of n tokens under `plan` (whose layer tiers and slot bytes it
// reads; plan.layer_tier.size() must equal target.layers.size()).
PassCost target_pass(const HardwareProfile& hw, const ModelDesc& target, const offload::MemoryPlan& plan, int n,
                     int n_past);

// One draft pass over w tokens, the draft entirely resident.
PassCost draft_pass(const HardwareProfile& hw, const ModelDesc& draft, int w, int n_past, DType kv_type = DType::F32);

// Compute time of one layer (exposed for tests).
// kv_type: the KV cache's element type (its rows' bytes: kv_row_bytes).
double layer_compute_s(const HardwareProfile& hw, const LlamaHParams& hp, const LayerDesc& L, int n, int n_past,
                       DType kv_type = DType::F32);

}  // namespace redwood::planner
