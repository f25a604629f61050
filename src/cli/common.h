// Shared pieces of the CLI subcommands: model loading, sizes, output files.
#pragma once
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "kernels/backend.h"
#include "src/engine/transformer.h"
#include "src/engine/weights.h"
#include "src/model/model_desc.h"
#include "src/tokenizer/tokenizer.h"

namespace redwood::cli {

// Everything needed to run a model on the CPU backend.
struct LoadedModel {
  ModelDesc desc;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<WeightSource> weights;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Transformer> transformer;
};

// The default model: $REDWOOD_MODEL, else models/SmolLM2-135M-Instruct.Q4_1.gguf
// under the current directory or the source tree the binary was built from.
std::string default_model_path();
LoadedModel load_model(const std::string& path, bool with_weights = true);

// Options every model-running command shares.
struct RunOptions {
  std::string model;
  int threads = 0;
};
void add_run_options(CLI::App* app, RunOptions& o);
void apply_run_options(RunOptions& o);

// Parses "1,2,3" into token ids.
std::vector<int32_t> parse_int_list(const std::string& s, const char* what);

// Writes a file atomically: a temp file in the same directory, fsync, rename.
// A failure leaves no partial output file.
void write_file_atomic(const std::string& path, const std::string& bytes);

// A .npy (v1.0) of float32 [rows][cols].
std::string npy_f32(const float* data, size_t rows, size_t cols);

}  // namespace redwood::cli
