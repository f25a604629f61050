// Writes GGUF v3 files derived from an existing one: its metadata (with
// overrides) and a subset of its tensors, whose bytes are copied by extent.
// Used by `redwood make-draft`. Output follows src/util/output_path.h: never
// the source file or a non-regular file; temp file, fsync, rename.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "src/model/gguf.h"

namespace redwood {

// `tensor_names` are read from `src`; `out_names`, when not empty (same length),
// are the names they get in the output (make-draft renumbers kept blocks).
void write_gguf_subset(const GgufFile& src, const std::string& out_path,
                       const std::map<std::string, GgufValue>& overrides, const std::vector<std::string>& tensor_names,
                       const std::vector<std::string>& out_names = {});

// A self-draft: the given blocks of `from` (ascending, no repeats), renumbered
// 0..k-1, plus embeddings, final norm and LM head.
void make_self_draft(const std::string& from, const std::vector<int>& blocks, const std::string& out_path);
// The first `layers` blocks.
void make_self_draft(const std::string& from, int layers, const std::string& out_path);

// Parses a block list such as "0-7,24-29" or "0,2,4" against a model of
// `n_blocks` blocks: ascending, in range, no repeats, otherwise an Error.
std::vector<int> parse_block_list(const std::string& spec, int n_blocks);

}  // namespace redwood
