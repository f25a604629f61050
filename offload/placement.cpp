#include "offload/placement.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "kernels/backend.h"
#include "offload/layer_layout.h"
#include "src/engine/kv_type.h"
#include "src/engine/weights.h"
#include "src/util/error.h"
#include "src/util/size.h"

namespace redwood::offload {

const char* tier_name(Tier t) {
  switch (t) {
    case Tier::kDevice:
      return "device";
    case Tier::kHost:
      return "host";
    case Tier::kStorage:
      return "storage";
  }
  return "?";
}

int MemoryPlan::count(Tier t) const {
  return static_cast<int>(std::count(layer_tier.begin(), layer_tier.end(), t));
}

namespace {

constexpr uint64_t kF32 = sizeof(float);

// One layer's seven matrices held resident: 64-byte aligned pieces, as ResidentWeights lays them out.
uint64_t layer_matrix_bytes(const LayerDesc& L) {
  uint64_t b = 0;
  for (const TensorExtent* t : layer_matrices(L)) b += resident_tensor_bytes(t->bytes);
  return b;
}

// Per-layer vectors (norms, and the family's biases and q/k norms), always resident
// (they are not in the slots): as ResidentWeights holds them, the stored vectors in
// 64-byte aligned pieces plus their float copies.
uint64_t layer_norm_bytes(const ModelDesc& m) {
  uint64_t b = 0;
  for (const LayerDesc& L : m.layers)
    for (const TensorExtent* t : L.vectors())
      b += resident_tensor_bytes(t->bytes) + static_cast<uint64_t>(t->cols) * kF32;
  return b;
}

// Globals as ResidentWeights holds them: one buffer of token embedding, final norm (as
// stored) and untied LM head in 64-byte aligned pieces, plus the final norm as float.
uint64_t global_bytes(const ModelDesc& m) {
  uint64_t b = resident_tensor_bytes(m.tok_embd.bytes) + resident_tensor_bytes(m.output_norm.bytes) +
               static_cast<uint64_t>(m.hp.dim) * kF32;
  if (!m.hp.tied_lm_head) b += resident_tensor_bytes(m.lm_head.bytes);
  return b;
}

// Every weight resident (the draft), exactly like ResidentWeights.
uint64_t resident_model_bytes(const ModelDesc& m) {
  uint64_t b = global_bytes(m) + layer_norm_bytes(m);
  for (const LayerDesc& L : m.layers) b += layer_matrix_bytes(L);
  return b;
}

// KvCache: K and V, [ctx][n_kv_heads * head_dim] of the KV type per layer.
uint64_t kv_bytes(const LlamaHParams& hp, int ctx, DType kv_type) {
  return static_cast<uint64_t>(hp.n_layers) * 2 * static_cast<uint64_t>(ctx) *
         kv_row_bytes(kv_type, static_cast<int64_t>(hp.n_kv_heads) * hp.head_dim);
}

// The target's or the draft's KV store: one KvCache of ctx rows, or a pool for
// several sequences plus its pass's index arrays (Transformer::forward over a
// pool: six ints per token and a block table row per sequence, at most n).
uint64_t kv_store_bytes(const LlamaHParams& hp, const RunShape& s) {
  if (s.sequences == 1) return kv_bytes(hp, s.ctx, s.kv_type);
  const uint64_t stride = static_cast<uint64_t>(kv_blocks(s.ctx, s.kv_block_rows));
  const uint64_t index = static_cast<uint64_t>(s.max_tokens) * (6 + stride) * sizeof(int32_t);
  return 2ull * hp.n_layers * static_cast<uint64_t>(kv_pool_blocks(s)) * s.kv_block_rows *
             kv_row_bytes(s.kv_type, static_cast<int64_t>(hp.n_kv_heads) * hp.head_dim) +
         index;
}

// Transformer::ensure_scratch for n rows (x, xn, q, k, v, att, gate, up), its ancestor
// lists (CSR: n + 1 offsets, at most n(n+1)/2 entries for a chain, n block parents) and
// the caller's logits for n rows.
uint64_t activation_bytes(const LlamaHParams& hp, int n) {
  const uint64_t N = static_cast<uint64_t>(n);
  const uint64_t q = static_cast<uint64_t>(hp.n_heads) * hp.head_dim;
  const uint64_t kv = static_cast<uint64_t>(hp.n_kv_heads) * hp.head_dim;
  const uint64_t floats = N * (2ull * hp.dim + 2 * q + 2 * kv + 2ull * hp.ffn_dim + hp.vocab);
  const uint64_t ints = (N + 1) + N * (N + 1) / 2 + N;
  return floats * kF32 + ints * sizeof(int32_t);
}

// Kernel workspace (kernels/backend.h: each backend answers for its own
// kernels) for passes over this model's matrices: the CPU backend's for all
// worker threads, the CUDA backend's per backend instance (the target and the
// draft each have one).
uint64_t workspace_bytes(BackendKind backend, const ModelDesc& m, const RunShape& s) {
  WorkspaceShape w;
  auto add = [&](const TensorExtent& t) { w.matrices.push_back(WeightView{t.type, t.rows, t.cols, nullptr}); };
  for (const LayerDesc& L : m.layers)
    for (const TensorExtent* t : layer_matrices(L)) add(*t);
  add(m.hp.tied_lm_head ? m.tok_embd : m.lm_head);
  w.n_heads = m.hp.n_heads, w.n_kv_heads = m.hp.n_kv_heads;
  w.ctx = s.ctx, w.max_tokens = s.max_tokens, w.threads = s.threads;
  return backend == BackendKind::kCuda ? cuda_workspace_bytes(w) : cpu_workspace_bytes(w);
}

std::string model_label(const ModelDesc& m) {
  return m.name.empty() ? m.path : m.name;
}

// Layer i is resident iff floor((i+1)R/n) > floor(iR/n): R layers spread evenly over depth.
std::vector<bool> spread(int n, int r) {
  std::vector<bool> res(n);
  for (int i = 0; i < n; ++i) res[i] = (int64_t(i) + 1) * r / n > int64_t(i) * r / n;
  return res;
}

// Device cost of one choice of resident layers.
struct Config {
  int resident = 0;
  std::vector<bool> is_resident;
  uint64_t resident_bytes = 0;
  int slots = 0;
  uint64_t slot_bytes = 0;
  uint64_t device = 0;  // fixed + resident_bytes + slots * slot_bytes
};

struct LayerCosts {
  std::vector<uint64_t> resident;   // matrices held on device
  std::vector<LayerLayout> layout;  // read layout into a slot
};

Config configure(const LayerCosts& c, uint64_t fixed, int r, int k) {
  const int n = static_cast<int>(c.resident.size());
  Config cfg;
  cfg.resident = r;
  cfg.is_resident = spread(n, r);
  for (int i = 0; i < n; ++i) {
    if (cfg.is_resident[i])
      cfg.resident_bytes += c.resident[i];
    else
      cfg.slot_bytes = std::max(cfg.slot_bytes, c.layout[i].slot_bytes + c.layout[i].staging_bytes);
  }
  cfg.slots = std::min(k, n - r);
  cfg.device = fixed + cfg.resident_bytes + static_cast<uint64_t>(cfg.slots) * cfg.slot_bytes;
  return cfg;
}

std::string describe(const Config& c, uint64_t fixed, int n) {
  std::string s = "fixed " + format_size(fixed);
  if (c.resident == n) return s + " + all " + std::to_string(n) + " layers resident " + format_size(c.resident_bytes);
  if (c.resident > 0) s += " + " + std::to_string(c.resident) + " resident layers of " + format_size(c.resident_bytes);
  return s + " + " + std::to_string(c.slots) + " ring slots of " + format_size(c.slot_bytes);
}

// Consecutive layers with the same tier as one item each ("layers 0-3", "layer 7").
void add_layer_items(MemoryPlan& p) {
  const int n = static_cast<int>(p.layer_tier.size());
  for (int i = 0; i < n;) {
    int j = i;
    uint64_t bytes = 0;
    while (j < n && p.layer_tier[j] == p.layer_tier[i]) bytes += p.layer_bytes[j++];
    const std::string what =
        j - i == 1 ? "layer " + std::to_string(i) : "layers " + std::to_string(i) + "-" + std::to_string(j - 1);
    const char* note = p.layer_tier[i] == Tier::kStorage ? " (read per pass)" : "";
    p.items.push_back({what + note, p.layer_tier[i], bytes});
    i = j;
  }
}

}  // namespace

int64_t kv_pool_blocks(const RunShape& s) {
  if (s.kv_rows > 0) return kv_blocks(s.kv_rows, s.kv_block_rows);
  return s.sequences * kv_blocks(s.ctx, s.kv_block_rows);
}

uint64_t kv_pool_bytes(const LlamaHParams& hp, int sequences, int rows, DType kv_type, int block_rows) {
  const int64_t blocks = sequences * kv_blocks(rows, block_rows);
  return 2ull * hp.n_layers * static_cast<uint64_t>(blocks) * block_rows *
         kv_row_bytes(kv_type, static_cast<int64_t>(hp.n_kv_heads) * hp.head_dim);
}

void parse_device_budget(const std::string& s, Budgets& b, const char* what) {
  const DeviceBudget d = redwood::parse_device_budget(s, what);
  b.device = d.bytes;
  b.draft_on_top = d.draft_on_top;
}

MemoryPlan plan_memory(const ModelDesc& target, const ModelDesc* draft, const Budgets& budgets, const RunShape& shape) {
  if (budgets.ring_slots < 2)
    throw Error("ring slots must be at least 2 (got " + std::to_string(budgets.ring_slots) + ")");
  if (shape.ctx <= 0 || shape.max_tokens <= 0 || shape.threads <= 0)
    throw Error("memory plan: context, tokens per pass and threads must be positive");
  if (shape.sequences <= 0 || shape.kv_block_rows <= 0)
    throw Error("memory plan: sequences and KV block rows must be positive");
  if (shape.kv_rows != 0 && (shape.sequences == 1 || shape.kv_rows < shape.ctx))
    throw Error("memory plan: a KV pool's positions (" + std::to_string(shape.kv_rows) +
                ") are for several sequences and at least one sequence's context (" + std::to_string(shape.ctx) + ")");
  try {
    check_kv_head_dim(shape.kv_type, target.hp.head_dim, model_label(target));
    if (draft) check_kv_head_dim(shape.kv_type, draft->hp.head_dim, model_label(*draft));
  } catch (const Error& e) {
    throw Error(std::string("memory plan: ") + e.what());
  }
  MemoryPlan p;
  p.model = model_label(target);
  if (draft) p.draft = model_label(*draft);
  p.shape = shape;
  p.backend = budgets.backend;
  p.requested_ring_slots = budgets.ring_slots;
  p.host_budget = budgets.host;

  // Fixed device costs: everything but the target's layer matrices.
  const std::string ctx = (shape.sequences == 1 ? ""
                           : shape.kv_rows > 0 ? std::to_string(shape.kv_rows) + " positions for up to " +
                                                     std::to_string(shape.sequences) + " sequences, "
                                               : std::to_string(shape.sequences) + " sequences x ") +
                          "ctx " + std::to_string(shape.ctx) +
                          (shape.kv_type == DType::F32 ? "" : ", " + std::string(dtype_name(shape.kv_type)));
  const char* kv_what = shape.sequences == 1 ? "KV cache" : "KV pool";
  const std::string toks = std::to_string(shape.max_tokens) + " tokens";
  p.items.push_back({"globals (embeddings, LM head, final norm)", Tier::kDevice, global_bytes(target)});
  p.items.push_back({"layer norms", Tier::kDevice, layer_norm_bytes(target)});
  p.items.push_back({std::string(kv_what) + " (target, " + ctx + ")", Tier::kDevice, kv_store_bytes(target.hp, shape)});
  p.items.push_back(
      {"activations + logits (target, " + toks + ")", Tier::kDevice, activation_bytes(target.hp, shape.max_tokens)});
  const bool cuda = budgets.backend == BackendKind::kCuda;
  // The draft's passes are no larger than the target's (shared passes: a
  // prompt reaches the draft in chunks, spec::BatchLimits).
  auto workspace_of = [&](const ModelDesc& m) { return workspace_bytes(budgets.backend, m, shape); };
  uint64_t workspace = workspace_of(target);
  uint64_t device_budget = budgets.device;
  if (draft) {
    const uint64_t target_workspace = workspace;
    const uint64_t weights = resident_model_bytes(*draft), kv = kv_store_bytes(draft->hp, shape),
                   act = activation_bytes(draft->hp, shape.max_tokens);
    p.items.push_back({"draft weights (all resident)", Tier::kDevice, weights});
    p.items.push_back({std::string(kv_what) + " (draft, " + ctx + ")", Tier::kDevice, kv});
    p.items.push_back({"activations + logits (draft, " + toks + ")", Tier::kDevice, act});
    // CPU: the models run one after the other on one thread pool; CUDA: the
    // draft has its own backend instance, with its own workspace.
    workspace = cuda ? workspace + workspace_of(*draft) : std::max(workspace, workspace_of(*draft));
    if (budgets.draft_on_top && device_budget != 0)
      device_budget += weights + kv + act + (workspace - target_workspace);
  }
  p.device_budget = device_budget;
  p.items.push_back({cuda ? std::string(draft ? "kernel workspace (cuBLAS + matmul scratch, target and draft)"
                                              : "kernel workspace (cuBLAS + matmul scratch)")
                          : "kernel workspace (" + std::to_string(shape.threads) + " threads)",
                     Tier::kDevice, workspace});
  for (const PlanItem& it : p.items) p.fixed_bytes += it.bytes;

  const int n = static_cast<int>(target.layers.size());
  LayerCosts costs;
  for (const LayerDesc& L : target.layers) {
    costs.resident.push_back(layer_matrix_bytes(L));
    costs.layout.push_back(layout_layer(L));
  }
  // Every number of resident layers: the cheapest runs at the minimum budget; the
  // plan is the most resident layers that fit.
  std::vector<Config> configs;
  for (int r = 0; r <= n; ++r) configs.push_back(configure(costs, p.fixed_bytes, r, budgets.ring_slots));
  const Config& cheapest =
      *std::min_element(configs.begin(), configs.end(), [](auto& a, auto& b) { return a.device < b.device; });
  p.device_min = cheapest.device;
  if (device_budget != 0 && device_budget < p.device_min)
    throw BudgetError(
        "device budget " + format_size(device_budget) +
            (budgets.draft_on_top && draft ? " (" + format_size(budgets.device) + " + the draft's)" : "") +
            " is too small for " + p.model + (draft ? " with draft " + p.draft : "") + " (" + ctx + ", " + toks +
            " per pass): at least " + format_size(p.device_min) + " (" + std::to_string(p.device_min) +
            " bytes) is needed (" + describe(cheapest, p.fixed_bytes, n) + ")",
        "device", device_budget, p.device_min);
  const Config* chosen = &configs[n];
  if (device_budget != 0)
    while (chosen->device > device_budget) --chosen;  // stops at the cheapest at the latest
  p.ring_slots = chosen->slots;
  p.slot_bytes = chosen->slot_bytes;

  // Host tier for the layers that are not resident; with CUDA, storage reads land in
  // pinned host staging slots first (on the CPU backend straight in the device slot).
  // The host keeps a layer as its slot image (aligned, as read); a pass copies that image.
  uint64_t nonresident_image = 0;
  for (int i = 0; i < n; ++i)
    if (!chosen->is_resident[i])
      nonresident_image += costs.layout[i].packed() ? costs.layout[i].staging_bytes : costs.layout[i].slot_bytes;
  // (A packed model decodes every streamed layer into pinned staging, host-tier ones too.)
  bool packed_streams = false;
  for (int i = 0; i < n; ++i) packed_streams |= !chosen->is_resident[i] && costs.layout[i].packed();
  uint64_t host_left = budgets.host, staging = 0;
  if (budgets.backend == BackendKind::kCuda && p.ring_slots > 0 &&
      (budgets.host < nonresident_image || packed_streams)) {
    staging = static_cast<uint64_t>(p.ring_slots) * p.slot_bytes;
    // A host budget of 0 means no host tier for layers; the staging slots are still needed.
    if (budgets.host != 0 && budgets.host < staging)
      throw BudgetError("host budget " + format_size(budgets.host) + " is too small for CUDA staging: at least " +
                            format_size(staging) + " (" + std::to_string(staging) + " bytes) is needed (" +
                            std::to_string(p.ring_slots) + " pinned slots of " + format_size(p.slot_bytes) + ")",
                        "host", budgets.host, staging);
    host_left = budgets.host == 0 ? 0 : budgets.host - staging;
  }
  for (int i = 0; i < n; ++i) {
    if (chosen->is_resident[i]) {
      p.layer_tier.push_back(Tier::kDevice);
      p.layer_bytes.push_back(costs.resident[i]);
      p.layer_transfer_bytes.push_back(0);
      p.layer_decode_bytes.push_back(0);
      continue;
    }
    const LayerLayout& lay = costs.layout[i];
    // The host keeps the slot image, or a packed layer's stored streams (decoded
    // into the slot every pass).
    const uint64_t host_image = lay.packed() ? lay.staging_bytes : lay.slot_bytes;
    if (host_image <= host_left) {
      host_left -= host_image;
      p.layer_tier.push_back(Tier::kHost);
      p.layer_bytes.push_back(host_image);
      p.host_bytes_per_pass += host_image;  // one contiguous copy of the image
      p.layer_transfer_bytes.push_back(host_image);
      p.layer_decode_bytes.push_back(lay.packed() ? lay.payload_bytes : 0);
    } else {
      p.layer_bytes.push_back(lay.slot_bytes);
      p.layer_tier.push_back(Tier::kStorage);
      p.storage_bytes_per_pass += lay.read_bytes();  // a packed layer's stored streams
      p.layer_transfer_bytes.push_back(lay.read_bytes());
      p.layer_decode_bytes.push_back(lay.packed() ? lay.payload_bytes : 0);
    }
  }
  const bool packed = std::any_of(costs.layout.begin(), costs.layout.end(), [](auto& l) { return l.packed(); });
  if (p.ring_slots > 0)
    p.items.push_back({"ring: " + std::to_string(p.ring_slots) + " slots of " + format_size(p.slot_bytes) +
                           (packed ? " (decoded layer + its packed staging)" : ""),
                       Tier::kDevice, static_cast<uint64_t>(p.ring_slots) * p.slot_bytes});
  if (staging > 0)
    p.items.push_back({"pinned staging: " + std::to_string(p.ring_slots) + " slots of " + format_size(p.slot_bytes),
                       Tier::kHost, staging});
  add_layer_items(p);
  for (const PlanItem& it : p.items) {
    if (it.tier == Tier::kDevice) p.device_used += it.bytes;
    if (it.tier == Tier::kHost) p.host_used += it.bytes;
  }
  return p;
}

std::string plan_table(const MemoryPlan& p) {
  auto budget = [](uint64_t b, const char* zero) { return b == 0 ? std::string(zero) : format_size(b); };
  std::string out;
  auto line = [&out](const char* fmt, auto... args) {
    char buf[512];
    std::snprintf(buf, sizeof buf, fmt, args...);
    out += buf;
  };
  line("memory plan for %s%s%s\n", p.model.c_str(), p.draft.empty() ? "" : " with draft ", p.draft.c_str());
  line("  run shape      %s backend, ctx %d, %d tokens per pass, %d threads\n",
       p.backend == BackendKind::kCuda ? "cuda" : "cpu", p.shape.ctx, p.shape.max_tokens, p.shape.threads);
  line("  device         budget %-12s used %-12s minimum %s\n", budget(p.device_budget, "unlimited").c_str(),
       format_size(p.device_used).c_str(), format_size(p.device_min).c_str());
  line("  host           budget %-12s used %s\n", budget(p.host_budget, "none").c_str(),
       format_size(p.host_used).c_str());
  const std::string ring =
      p.ring_slots == 0 ? "no ring" : "ring " + std::to_string(p.ring_slots) + " slots of " + format_size(p.slot_bytes);
  line("  layers         %d device, %d host, %d storage; %s\n", p.count(Tier::kDevice), p.count(Tier::kHost),
       p.count(Tier::kStorage), ring.c_str());
  line("  per pass       %s from storage, %s host -> device\n\n", format_size(p.storage_bytes_per_pass).c_str(),
       format_size(p.host_bytes_per_pass).c_str());
  size_t width = 4;
  for (const PlanItem& it : p.items) width = std::max(width, it.what.size());
  const int w = static_cast<int>(width);
  line("  %-*s  %-7s  %12s\n", w, "what", "tier", "bytes");
  for (const PlanItem& it : p.items)
    line("  %-*s  %-7s  %12s\n", w, it.what.c_str(), tier_name(it.tier), format_size(it.bytes).c_str());
  return out;
}

nlohmann::json plan_json(const MemoryPlan& p) {
  nlohmann::json j;
  j["fits"] = true;
  j["model"] = p.model;
  j["draft"] = p.draft.empty() ? nlohmann::json(nullptr) : nlohmann::json(p.draft);
  j["backend"] = p.backend == BackendKind::kCuda ? "cuda" : "cpu";
  j["ctx"] = p.shape.ctx;
  if (p.shape.sequences != 1) {
    j["sequences"] = p.shape.sequences, j["kv_block_rows"] = p.shape.kv_block_rows;
    j["kv_pool_rows"] = kv_pool_blocks(p.shape) * p.shape.kv_block_rows;
  }
  j["kv_type"] = std::string(dtype_name(p.shape.kv_type));
  j["max_tokens"] = p.shape.max_tokens;
  j["threads"] = p.shape.threads;
  j["device_budget"] = p.device_budget;
  j["host_budget"] = p.host_budget;
  j["device_used"] = p.device_used;
  j["host_used"] = p.host_used;
  j["device_min"] = p.device_min;
  j["fixed_bytes"] = p.fixed_bytes;
  j["ring_slots"] = p.ring_slots;
  j["requested_ring_slots"] = p.requested_ring_slots;
  j["slot_bytes"] = p.slot_bytes;
  j["storage_bytes_per_pass"] = p.storage_bytes_per_pass;
  j["host_bytes_per_pass"] = p.host_bytes_per_pass;
  for (Tier t : {Tier::kDevice, Tier::kHost, Tier::kStorage}) j["layer_counts"][tier_name(t)] = p.count(t);
  j["items"] = nlohmann::json::array();
  for (const PlanItem& it : p.items)
    j["items"].push_back({{"what", it.what}, {"tier", tier_name(it.tier)}, {"bytes", it.bytes}});
  j["layers"] = nlohmann::json::array();
  for (size_t i = 0; i < p.layer_tier.size(); ++i)
    j["layers"].push_back({{"index", i}, {"tier", tier_name(p.layer_tier[i])}, {"bytes", p.layer_bytes[i]}});
  return j;
}

}  // namespace redwood::offload
