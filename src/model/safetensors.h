// Hugging Face checkpoints: a directory with config.json and one or many
// *.safetensors files (model.safetensors.index.json for sharded models), as
// Llama-2-70b-hf ships. Only headers are parsed; tensor data stays on disk.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "src/model/model_desc.h"

namespace redwood {

struct SafetensorsTensor {
  std::string name;
  DType type = DType::F32;
  std::vector<uint64_t> shape;
  uint64_t offset = 0;  // absolute offset in the file
  uint64_t bytes = 0;
};

// Parses one .safetensors header; validates every extent against the file size.
std::vector<SafetensorsTensor> read_safetensors_header(const std::string& path);

// Builds the model description from a directory (or a .safetensors file whose
// directory holds config.json).
ModelDesc load_safetensors_desc(const std::string& path);

}  // namespace redwood
