// A model's identity by content, cheap for any size: batch jobs store it with
// every result line, so that resuming with another checkpoint under the same
// file name (another quantization, another fine-tune) is refused instead of
// mixing two models' outputs in one file, while a copy of the same model
// under another path still resumes.
#pragma once
#include <string>

#include "src/model/model_desc.h"

namespace redwood {

// 16 hex digits of XXH3-64 over: the data files' sizes; the
// hyperparameters; the tokenizer's tokens; every tensor's name, type, shape,
// offset and size; and the first bytes (up to 256) of every tensor's data.
// Reads a few hundred bytes per tensor (70B: ~720 small reads, well under a
// second on an SSD). What is hashed is the model as Redwood reads it, so an
// edit of the file's metadata that moves the tensors changes it too. Throws
// redwood::Error when a file cannot be read.
std::string model_fingerprint(const ModelDesc& m);

}  // namespace redwood
