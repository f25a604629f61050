// A model ready to run (description, tokenizer, backend, weights, forward
// pass) and the options that decide how it is loaded: backend, threads,
// memory budgets (resident or streamed layers), trace. Used by every command
// that runs a model (src/cli) and by Session (session.h).
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "offload/placement.h"
#include "offload/streamer.h"
#include "offload/trace.h"
#include "src/engine/transformer.h"
#include "src/engine/weights.h"
#include "src/model/model_desc.h"
#include "src/tokenizer/tokenizer.h"

namespace redwood::runtime {

// Everything needed to run a model (on the CPU or the CUDA backend).
struct LoadedModel {
  ModelDesc desc;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<offload::Trace> trace;  // declared first: it outlives the streamer's I/O thread
  std::unique_ptr<Backend> backend;       // before weights: weights may live in its memory
  std::unique_ptr<WeightSource> weights;
  std::unique_ptr<Transformer> transformer;
  // Set when memory budgets were given (load_weights with budgets).
  std::optional<offload::MemoryPlan> plan;
  offload::StreamedWeights* streamed = nullptr;  // == weights when layers stream
};

// Options every model-running command shares.
struct RunOptions {
  std::string model;
  std::string backend = "cpu";  // cpu | cuda (kernels/backend.h)
  int threads = 0;
  // Offload: memory budgets ("2GiB", "512MiB"; empty = no limit / no host tier),
  // ring slots, a Chrome trace of the layer pipeline, checksums of streamed layers.
  std::string device_mem, host_mem;
  int ring = 2;
  std::string trace;
  bool verify_io = false;
  std::string kv_type = "f32";  // --kv-type: f32 | f16 | bf16 | q8_0 (target and draft caches)
};
// The default model: $REDWOOD_MODEL, else models/SmolLM2-135M-Instruct.Q4_1.gguf
// under the current directory or the parent of the binary's folder (the
// checkout, for build/redwood).
std::string default_model_path();
// path empty: the default model.
LoadedModel load_model(const std::string& path, bool with_weights = true);

// Sets the thread count; checks the trace file against the output-path policy
// (src/util/output_path.h) with the model and `inputs` as the run's inputs.
void apply_run_options(RunOptions& o, const std::vector<std::string>& inputs = {});
// The options of a model that stays resident next to `run`'s model (the draft):
// the same backend and threads, no budgets, trace or streaming.
RunOptions resident_run(const RunOptions& run);
// Refuses --device-mem SIZE+draft when `draft` (the draft's path) is empty.
void check_draft_budget(const RunOptions& o, const std::string& draft);
// The budgets named by the options (sizes parsed; throws redwood::Error on a bad size).
offload::Budgets budgets_from(const RunOptions& o);
// Where `target`'s layers would live for a run of `shape` (its ctx and pass
// size) under `run`'s budgets and backend, with `draft` (if any) resident:
// threads are run.threads (else all), the KV type run.kv_type. Reads no
// weights; throws offload::BudgetError below the minimum.
offload::MemoryPlan plan_run_memory(const ModelDesc& target, const ModelDesc* draft, const RunOptions& run,
                                    offload::RunShape shape);

// Loads m's weights. With device_mem/host_mem in run, plans memory for the
// run shape (the draft, if given, stays resident and is counted) and streams
// the layers that do not fit, printing the plan in one line on stderr; without
// them every weight is resident.
void load_weights(LoadedModel& m, const RunOptions& run, const offload::RunShape& shape,
                  const ModelDesc* draft = nullptr);
// Peak resident set (VmHWM) in bytes; reset_peak_rss() restarts it (Linux >= 4.0).
uint64_t peak_rss();
void reset_peak_rss();
// What streaming cost so far (JSON; null when nothing streams), and the trace
// file written (atomically).
nlohmann::json offload_stats(const LoadedModel& m);
void finish_run(const LoadedModel& m, const RunOptions& run);

// Fails now (one-line redwood::Error "OPTION: ...") where writing `path`
// later would: the output-path policy (src/util/output_path.h: an input of
// the run, a non-regular file; a FIFO only with fifo_ok), or a folder where
// the file cannot be created. Files are then written with write_output_file.
void check_output(const std::string& path, const std::vector<std::string>& inputs, const std::string& option,
                  bool fifo_ok = false);

// Prompts are bounded by bytes before they are tokenized (tokenizing costs
// memory in proportion to the text): at most kPromptBytesPerToken bytes per
// token of the context. Generous: real text is 3-5 bytes per token.
inline constexpr int64_t kPromptBytesPerToken = 64;
inline int64_t max_prompt_bytes(int ctx) {
  return kPromptBytesPerToken * static_cast<int64_t>(ctx);
}

// A reproducible tree of n nodes for timing passes: each node's parent is one
// of the 4 nodes before it (or the root), positions from `start` + depth,
// random tokens.
struct TreeBatch {
  std::vector<int32_t> tokens, positions, parents;
  Batch view() const { return {tokens, positions, parents}; }
};
TreeBatch random_tree(int n, int start, int vocab);

}  // namespace redwood::runtime
