// Model configs for the predicted cost model (configs/models/*.toml): the
// Llama hyperparameters and storage type of a model that need not exist on
// this machine. A config becomes a ModelDesc with virtual extents (file 0, the
// tensors laid out back to back as in a GGUF file), which is all the placement
// planner and the cost model need: bytes, types and shapes.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "src/model/model_desc.h"

namespace redwood::planner {

struct ModelConfig {
  std::string name, source, file;
  LlamaHParams hp;                     // head_dim defaults to dim / heads, kv_heads to heads
  DType dtype = DType::F16;            // the layer matrices
  DType embedding_dtype = DType::F16;  // token embedding and LM head (default: dtype)
};

// Errors are one line: "file:line: key: message" or "file: missing required key 'x'".
ModelConfig load_model_config(const std::string& path);
ModelConfig parse_model_config(std::string_view toml_text, const std::string& name);

// The description the planner takes: F32 norms, matrices in cfg.dtype, embedding
// and (untied) LM head in cfg.embedding_dtype, extents consecutive in one virtual
// file with 32-byte alignment.
ModelDesc model_desc_from_config(const ModelConfig& cfg);

// The stored / raw size of a tensor of type t in a packed model (redwood pack),
// as measured on real weights (docs/PERFORMANCE.md, "Packed models"): 1 for
// the quantized types (their blocks are stored raw).
double packed_ratio(DType t);
// Marks every tensor of m packed, stored_bytes = bytes x packed_ratio(type)
// (offsets unchanged): what the planner needs to predict a packed model.
void assume_packed(ModelDesc& m);

// Parameters (elements) of the model, embedding and LM head included (counted once when tied).
uint64_t parameter_count(const ModelDesc& m);

}  // namespace redwood::planner
