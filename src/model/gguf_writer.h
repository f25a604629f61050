// Writes GGUF v3 files derived from an existing one: its metadata (with
// overrides) and a list of tensors, each copied by extent from the source or
// produced by a function (requantized weights). Used by `redwood make-draft`
// and `redwood quantize`. Output follows src/util/output_path.h: never the
// source file or a non-regular file; temp file, fsync, rename.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "src/model/gguf.h"

namespace redwood {

// One tensor of the output. With `fill` empty, its bytes are those of the
// source tensor `src_name`; otherwise `fill(dst)` writes exactly `bytes` bytes
// (ggml_type and ne describe them).
struct GgufOutTensor {
  std::string name, src_name;
  uint32_t ggml_type = 0;
  uint32_t n_dims = 0;
  uint64_t ne[4] = {1, 1, 1, 1};
  uint64_t bytes = 0;
  std::function<void(uint8_t* dst)> fill;
};
// `progress(done, total)` (optional) after each tensor.
void write_gguf(const GgufFile& src, const std::string& out_path, const std::map<std::string, GgufValue>& overrides,
                const std::vector<GgufOutTensor>& tensors,
                const std::function<void(size_t, size_t)>& progress = {});
// The output tensor that copies `t` under `name`.
GgufOutTensor copy_of(const GgufTensorInfo& t, const std::string& name);

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
