// The placement planner: given memory budgets, the target (and draft) model
// and the run shape, decide for every target layer whether it is resident on
// the device, staged in host memory, or streamed from storage every pass, and
// account for everything else that must fit (globals, norms, KV caches,
// activations, workspace, the ring of layer slots, the resident draft).
//
// Greedy and exact about its own accounting: the fixed costs and K ring slots
// come first; then whole layers are made device-resident while the device
// budget lasts, spread evenly over the depth of the model (so that the I/O of
// streamed layers overlaps the compute of resident ones); then host-staged
// while the host budget lasts; the rest streams from storage.
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "src/engine/kv_type.h"
#include "src/model/model_desc.h"
#include "src/util/error.h"

namespace redwood::offload {

enum class Tier { kDevice, kHost, kStorage };
const char* tier_name(Tier t);  // "device", "host", "storage"

enum class BackendKind { kCpu, kCuda };

struct Budgets {
  uint64_t device = 0;  // 0 = no limit: everything resident
  uint64_t host = 0;    // host tier for layers that are not device-resident (0 = none)
  int ring_slots = 2;   // K >= 2 layer slots when anything streams
  BackendKind backend = BackendKind::kCpu;
  // The device budget is the target's: the draft's own costs (weights, KV,
  // activations, extra workspace) are added on top ("SIZE+draft"). Compares
  // runs with and without a draft at the same target residency.
  bool draft_on_top = false;
};

// A device budget as written on the command line or in a config: "SIZE" or
// "SIZE+draft" (see Budgets::draft_on_top). Throws redwood::Error.
void parse_device_budget(const std::string& s, Budgets& b, const char* what = "--device-mem");

// What the run needs besides weights.
struct RunShape {
  int ctx = 2048;       // KV cache capacity in tokens (target and draft)
  int max_tokens = 64;  // most tokens in one pass (prompt chunk, tree size)
  int threads = 2;      // CPU workers (per-thread workspace)
  DType kv_type = DType::F32;  // KV cache element type (F32, F16, BF16, Q8_0: --kv-type)
  // Sequences sharing each pass. 1: one KvCache of ctx rows per model (as
  // always); more: a paged KvPool per model holding `sequences` x ctx rows in
  // blocks of kv_block_rows (kv_pool_bytes), and the pass's block tables.
  int sequences = 1;
  int kv_block_rows = 16;
  // With sequences > 1: positions of the pool for all sequences together
  // (admission promises each sequence its own rows, so short prompts leave
  // room for more); 0 = sequences x ctx, each sequence's ctx in whole blocks.
  // REQUIRES: 0 or >= ctx.
  int kv_rows = 0;
};

// kv_blocks, kv_block_aligned_rows: src/engine/kv_type.h (the pool counts by them too).
using redwood::kv_block_aligned_rows;
using redwood::kv_blocks;

// Blocks of the paged KV pool a shape asks for (its kv_rows, else sequences x ctx).
int64_t kv_pool_blocks(const RunShape& s);

// Bytes of a paged KV pool (src/engine/kv_pool.h) in which each of `sequences`
// sequences may hold `rows` positions: whole blocks of block_rows rows per
// sequence, K and V of every layer. REQUIRES: all counts positive.
uint64_t kv_pool_bytes(const LlamaHParams& hp, int sequences, int rows, DType kv_type, int block_rows);

// One line of the accounting.
struct PlanItem {
  std::string what;  // "globals (embeddings, LM head, final norm)", "layer 3", "KV cache (target)", ...
  Tier tier = Tier::kDevice;
  uint64_t bytes = 0;
};

struct MemoryPlan {
  std::vector<Tier> layer_tier;                 // one per target layer
  int ring_slots = 0;                           // 0 when nothing is streamed or host-staged
  uint64_t slot_bytes = 0;                      // bytes of one ring slot (largest streamed layer's read layout)
  std::vector<PlanItem> items;                  // everything counted, in order
  uint64_t device_budget = 0, host_budget = 0;  // as given (0 = no limit / none)
  uint64_t device_used = 0, host_used = 0;
  // Smallest device budget that runs this shape: fixed + K slots of the largest layer
  // (all streamed), unless keeping some layers resident is cheaper (tiny models).
  uint64_t device_min = 0;
  uint64_t storage_bytes_per_pass = 0;  // read from storage each pass
  uint64_t host_bytes_per_pass = 0;     // copied host -> device each pass

  // Per layer: device-resident matrices (64-byte aligned pieces), or the layer's slot
  // image held in host memory / read from storage each pass.
  std::vector<uint64_t> layer_bytes;
  // Per layer: bytes a pass moves for it (a storage layer's reads, which for a
  // packed layer are its stored streams; a host layer's slot image; 0 when
  // resident), and the bytes a packed storage layer decodes into its slot.
  std::vector<uint64_t> layer_transfer_bytes;
  std::vector<uint64_t> layer_decode_bytes;
  uint64_t fixed_bytes = 0;      // device costs besides target layers and ring slots
  int requested_ring_slots = 0;  // Budgets::ring_slots
  std::string model, draft;      // names for the table/JSON (draft empty: none)
  RunShape shape;
  BackendKind backend = BackendKind::kCpu;

  int count(Tier t) const;
};

// A budget below what the run needs: the one-line message, plus which budget
// ("device" or "host"), what was given and the least that would do, for
// callers that report it in their own form (`plan-memory --json`).
class BudgetError : public Error {
 public:
  BudgetError(const std::string& msg, const char* which, uint64_t given_bytes, uint64_t min_bytes)
      : Error(msg), budget(which), given(given_bytes), minimum(min_bytes) {}
  const char* budget;  // "device" or "host"
  uint64_t given, minimum;
};

// Throws BudgetError when the device budget is below the minimum, naming
// the minimum ("device budget 100.0 MiB is too small for MODEL (ctx 2048, 64
// tokens per pass): at least 143.2 MiB is needed (fixed ... + 2 ring slots of
// ...)") or the host budget below CUDA's pinned staging slots, and
// redwood::Error when ring_slots < 2. draft may be null.
MemoryPlan plan_memory(const ModelDesc& target, const ModelDesc* draft, const Budgets& budgets, const RunShape& shape);

// Human-readable table and JSON of a plan.
std::string plan_table(const MemoryPlan& p);
nlohmann::json plan_json(const MemoryPlan& p);

}  // namespace redwood::offload
