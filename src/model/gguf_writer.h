// Writes GGUF v3 files derived from an existing one: its metadata (with
// overrides) and a subset of its tensors, whose bytes are copied by extent.
// Used by `redwood make-draft`. Output is atomic: temp file, fsync, rename.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "src/model/gguf.h"

namespace redwood {

void write_gguf_subset(const GgufFile& src, const std::string& out_path,
                       const std::map<std::string, GgufValue>& overrides,
                       const std::vector<std::string>& tensor_names);

// A self-draft: the first `layers` blocks plus embeddings, final norm and LM head.
void make_self_draft(const std::string& from, int layers, const std::string& out_path);

}  // namespace redwood
