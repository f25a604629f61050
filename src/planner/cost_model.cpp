#include "src/planner/cost_model.h"

#include <algorithm>
#include <deque>

#include "offload/layer_layout.h"
#include "src/engine/kv_type.h"
#include "src/util/error.h"

namespace redwood::planner {

namespace {

double elements(const TensorExtent& e) {
  return static_cast<double>(e.rows) * static_cast<double>(e.cols);
}

// The LM head for n tokens (the embedding lookup reads n rows: negligible).
double head_compute_s(const HardwareProfile& hw, const ModelDesc& m, int n) {
  const double bytes = static_cast<double>(m.lm_head.bytes);
  const double flops = 2 * elements(m.lm_head) * n;
  return std::max(bytes / hw.eff_device_bps(), flops / hw.eff_flops()) + hw.layer_overhead_us * 1e-6;
}

double link_bps(const HardwareProfile& hw, offload::Tier t) {
  const double link = hw.link_bandwidth * 1e9, storage = hw.storage_bandwidth * 1e9;
  if (t == offload::Tier::kHost) return link;
  return hw.backend == offload::BackendKind::kCpu ? storage : std::min(link, storage);
}

}  // namespace

double layer_compute_s(const HardwareProfile& hw, const LlamaHParams& hp, const LayerDesc& L, int n, int n_past,
                       DType kv_type) {
  double bytes = 0, params = 0;
  for (const TensorExtent* t : offload::layer_matrices(L)) {
    bytes += static_cast<double>(t->bytes);
    params += elements(*t);
  }
  const uint64_t kv_row = kv_row_bytes(kv_type, static_cast<int64_t>(hp.n_kv_heads) * hp.head_dim);
  const double q_dim = static_cast<double>(hp.n_heads) * hp.head_dim;
  const double ctx = static_cast<double>(n_past) + n;
  bytes += 2 * ctx * static_cast<double>(kv_row);  // K and V rows read
  const double flops = 2 * params * n + 4.0 * n * ctx * q_dim;
  return std::max(bytes / hw.eff_device_bps(), flops / hw.eff_flops()) + hw.layer_overhead_us * 1e-6;
}

PassCost target_pass(const HardwareProfile& hw, const ModelDesc& target, const offload::MemoryPlan& plan, int n,
                     int n_past) {
  if (plan.layer_tier.size() != target.layers.size() || plan.layer_bytes.size() != target.layers.size())
    throw Error("cost model: the memory plan does not match " + target.name);
  if (n < 1) throw Error("cost model: a pass needs at least 1 token");
  PassCost c;
  const bool sized = plan.layer_transfer_bytes.size() == target.layers.size() &&
                     plan.layer_decode_bytes.size() == target.layers.size();
  const int K = std::max(plan.ring_slots, 1);
  std::deque<double> slot_free;  // compute end of the last K streamed layers
  double link = 0, decoded = 0, done = 0;
  for (size_t i = 0; i < target.layers.size(); ++i) {
    const double comp = layer_compute_s(hw, target.hp, target.layers[i], n, n_past, plan.shape.kv_type);
    c.compute_s += comp;
    double ready = 0;
    if (plan.layer_tier[i] != offload::Tier::kDevice) {
      const uint64_t moved = sized ? plan.layer_transfer_bytes[i] : plan.layer_bytes[i];
      const double tr = static_cast<double>(moved) / link_bps(hw, plan.layer_tier[i]);
      c.transfer_s += tr;
      double start = link;
      if (static_cast<int>(slot_free.size()) == K) {
        start = std::max(start, slot_free.front());
        slot_free.pop_front();
      }
      link = ready = start + tr;
      // A packed layer: its decode stage follows the read, one layer at a time.
      if (const uint64_t dec = sized ? plan.layer_decode_bytes[i] : 0; dec > 0) {
        if (hw.decode_bandwidth <= 0)
          throw Error(hw.file + ": decode_bandwidth is needed to predict a packed model's streamed passes");
        const double d = static_cast<double>(dec) / (hw.decode_bandwidth * 1e9);
        c.decode_s += d;
        decoded = ready = std::max(decoded, link) + d;
      }
    }
    done = std::max(done, ready) + comp;
    if (plan.layer_tier[i] != offload::Tier::kDevice) slot_free.push_back(done);
  }
  const double head = head_compute_s(hw, target, n);
  c.compute_s += head;
  c.seconds = done + head;
  return c;
}

PassCost draft_pass(const HardwareProfile& hw, const ModelDesc& draft, int w, int n_past, DType kv_type) {
  if (w < 1) throw Error("cost model: a draft pass needs at least 1 token");
  PassCost c;
  for (const LayerDesc& L : draft.layers) c.compute_s += layer_compute_s(hw, draft.hp, L, w, n_past, kv_type);
  c.compute_s += head_compute_s(hw, draft, w);
  c.seconds = c.compute_s;
  return c;
}

}  // namespace redwood::planner
