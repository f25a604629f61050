// Looking inside models and passes (`redwood info`, `redwood logits`).
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "src/model/model_desc.h"
#include "src/runtime/model.h"

namespace redwood::app {

// A model's description as `redwood info --json` prints it: hyperparameters,
// sizes, tensor types (count and bytes per type), fingerprint, tokenizer.
nlohmann::json model_info(const ModelDesc& m);

// `redwood --version`: the version and the CPU kernels' instruction set
// (REDWOOD_ISA may lower it; an ISA this CPU lacks is said in the line).
std::string version_line();

// `redwood tokenize --jsonl`: one JSON array of token ids per line of the
// file ({"text": ...} objects); raw: no special tokens added or parsed.
std::string tokenize_jsonl(const Tokenizer& tok, const std::string& path, bool raw);

// The logits of every row of a token tree on a fresh cache (parents empty = a
// chain; positions empty = each token's depth in the tree), computed in passes
// of at most `chunk` tokens so memory is bounded by the chunk, not the tree;
// `rows` receives each pass's rows in order ([rows x vocab] floats).
// Throws redwood::Error naming --parents when a parent is not an earlier row,
// NonFiniteLogits naming the row when a row holds NaN or an infinity.
void tree_logits(runtime::LoadedModel& m, const std::vector<int32_t>& toks, std::vector<int32_t> parents,
                 std::vector<int32_t> positions, int chunk, const std::function<void(std::span<const float>)>& rows);

// `redwood logits`: loads m's weights for passes of at most kLogitsChunk tokens
// (o's budgets) and writes every row of tree_logits to `out` as a .npy of
// float32 [tokens][vocab], rows streamed to the file (memory: one chunk's);
// an error leaves no partial file.
inline constexpr int kLogitsChunk = 256;
void write_logits(runtime::LoadedModel& m, const runtime::RunOptions& o, const std::vector<int32_t>& toks,
                  std::vector<int32_t> parents, std::vector<int32_t> positions, const std::string& out);

// The header of a .npy (v1.0) of float32 [rows][cols]; the data follows it.
std::string npy_header(size_t rows, size_t cols);

}  // namespace redwood::app
