// Shared pieces of the CLI subcommands: model loading, sizes, output files.
#pragma once
#include <CLI/CLI.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "kernels/backend.h"
#include "offload/plan.h"
#include "offload/streamer.h"
#include "offload/trace.h"
#include "src/engine/transformer.h"
#include "src/engine/weights.h"
#include "src/model/model_desc.h"
#include "src/tokenizer/tokenizer.h"
#include "src/util/output_path.h"

namespace redwood::cli {

// Everything needed to run a model (on the CPU or the CUDA backend).
struct LoadedModel {
  ModelDesc desc;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<offload::Trace> trace;  // --trace; declared first: it outlives the streamer's I/O thread
  std::unique_ptr<Backend> backend;       // before weights: weights may live in its memory
  std::unique_ptr<WeightSource> weights;
  std::unique_ptr<Transformer> transformer;
  // Set when memory budgets were given (load_model with RunOptions).
  std::optional<offload::MemoryPlan> plan;
  offload::StreamedWeights* streamed = nullptr;  // == weights when layers stream
};

// The default model: $REDWOOD_MODEL, else models/SmolLM2-135M-Instruct.Q4_1.gguf
// under the current directory or the source tree the binary was built from.
std::string default_model_path();
LoadedModel load_model(const std::string& path, bool with_weights = true);

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
  std::string kv_type = "f32";  // --kv-type: f32 | f16 | bf16 (target and draft caches)
};
void add_run_options(CLI::App* app, RunOptions& o);
// "f32" | "f16" | "bf16" as a DType; anything else is a one-line redwood::Error.
DType parse_kv_type(const std::string& s, const char* what = "--kv-type");

// An integer option's range, with a message that says so ("expected an integer
// from 1 to 1048576, got 'abc'"; CLI11's Range and PositiveNumber print their
// limits as doubles, the largest double for "positive").
CLI::Validator int_range(long long lo, long long hi);
// Just --device-mem, --host-mem and --ring (add_run_options includes them).
void add_budget_options(CLI::App* app, RunOptions& o);
// Sets the thread count; checks --trace against the output-path policy
// (src/util/output_path.h) with the model and `inputs` as the run's inputs.
void apply_run_options(RunOptions& o, const std::vector<std::string>& inputs = {});
// The options of a model that stays resident next to `run`'s model (the draft):
// the same backend and threads, no budgets, trace or streaming.
RunOptions resident_run(const RunOptions& run);
// Refuses --device-mem SIZE+draft when `draft` (the --draft path) is empty.
void check_draft_budget(const RunOptions& o, const std::string& draft);
// The budgets named by the options (sizes parsed; throws redwood::Error on a bad size).
offload::Budgets budgets_from(const RunOptions& o);

// Loads m's weights. With --device-mem/--host-mem in run, plans memory for the
// run shape (the draft, if given, stays resident and is counted) and streams
// the layers that do not fit, printing the plan in one line on stderr; without
// them every weight is resident.
void load_weights(LoadedModel& m, const RunOptions& run, const offload::RunShape& shape,
                  const ModelDesc* draft = nullptr);
// What streaming cost so far (JSON), and the --trace file written (atomically).
// Peak resident set (VmHWM) in bytes; reset_peak_rss() restarts it (Linux >= 4.0).
uint64_t peak_rss();
void reset_peak_rss();
nlohmann::json offload_stats(const LoadedModel& m);
void finish_run(const LoadedModel& m, const RunOptions& run);

// Parses a whole option value as an integer in [lo, hi] / a finite number;
// throws redwood::Error naming the option (e.g. "--budget: expected an
// integer in [1, 8192], got 'x'").
// Prompts are bounded by bytes before they are tokenized (tokenizing costs
// memory in proportion to the text): at most kPromptBytesPerToken bytes per
// token of the context. Generous: real text is 3-5 bytes per token.
inline constexpr int64_t kPromptBytesPerToken = 64;
inline int64_t max_prompt_bytes(int ctx) { return kPromptBytesPerToken * static_cast<int64_t>(ctx); }

int parse_int_arg(const std::string& s, const char* what, int lo, int hi);
double parse_double_arg(const std::string& s, const char* what);

// Parses "1,2,3" into token ids.
std::vector<int32_t> parse_int_list(const std::string& s, const char* what);

// Fails now (one-line redwood::Error "OPTION: ...") where writing `path`
// later would: the output-path policy (src/util/output_path.h: an input of
// the run, a non-regular file; a FIFO only with fifo_ok), or a folder where
// the file cannot be created. Files are then written with write_output_file.
void check_output(const std::string& path, const std::vector<std::string>& inputs, const std::string& option,
                  bool fifo_ok = false);

// A reproducible tree of n nodes for timing passes: each node's parent is one
// of the 4 nodes before it (or the root), positions from `start` + depth,
// random tokens.
struct TreeBatch {
  std::vector<int32_t> tokens, positions, parents;
  Batch view() const { return {tokens, positions, parents}; }
};
TreeBatch random_tree(int n, int start, int vocab);

// A .npy (v1.0) of float32 [rows][cols].
std::string npy_f32(const float* data, size_t rows, size_t cols);

}  // namespace redwood::cli
