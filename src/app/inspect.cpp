#include "src/app/inspect.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <sstream>

#include "kernels/backend.h"
#include "src/engine/sampler.h"
#include "src/model/fingerprint.h"
#include "src/util/error.h"
#include "src/util/io.h"
#include "src/util/output_path.h"

namespace redwood::app {

using namespace runtime;

std::string version_line() {
  std::string v = "redwood 0.1.0";
  try {
    return v + " (CPU kernels: " + cpu_kernel_isa() + ")";
  } catch (const Error& e) {
    return v + " (" + e.what() + ")";
  }
}

nlohmann::json model_info(const ModelDesc& m) {
  std::map<std::string, std::pair<int, uint64_t>> types;
  auto count = [&](const TensorExtent& t) {
    auto& e = types[std::string(dtype_name(t.type))];
    e.first++;
    e.second += t.bytes;
  };
  count(m.tok_embd);
  count(m.output_norm);
  if (!m.hp.tied_lm_head) count(m.lm_head);
  uint64_t max_layer = 0;
  for (const auto& L : m.layers) {
    for (const auto* t : L.tensors()) count(*t);
    max_layer = std::max(max_layer, L.bytes());
  }
  const auto& hp = m.hp;
  nlohmann::json j;
  j["path"] = m.path;
  j["format"] = m.format == ModelFormat::kGguf ? "gguf" : m.format == ModelFormat::kPacked ? "packed" : "safetensors";
  j["name"] = m.name;
  j["architecture"] = hp.arch;
  j["qkv_bias"] = hp.qkv_bias;
  j["qk_norm"] = hp.qk_norm;
  j["layers"] = hp.n_layers;
  j["dim"] = hp.dim;
  j["heads"] = hp.n_heads;
  j["kv_heads"] = hp.n_kv_heads;
  j["head_dim"] = hp.head_dim;
  j["ffn_dim"] = hp.ffn_dim;
  j["vocab"] = hp.vocab;
  j["context_length"] = hp.ctx_len;
  j["rope_base"] = hp.rope_base;
  j["rms_eps"] = hp.rms_eps;
  j["rope_layout"] = hp.rope_mode == RopeMode::kInterleaved ? "interleaved" : "half";
  if (!hp.rope_freq_factors.empty()) j["rope_freq_factors"] = hp.rope_freq_factors;
  j["tied_lm_head"] = hp.tied_lm_head;
  j["total_bytes"] = m.total_bytes();
  j["fingerprint"] = model_fingerprint(m);
  j["fingerprint_covers"] = kFingerprintCovers;
  j["max_layer_bytes"] = max_layer;
  j["tokenizer"] = m.tokenizer.kind == TokenizerKind::kByteLevelBpe ? "byte-level BPE" : "SentencePiece BPE";
  for (auto& [t, e] : types) j["tensor_types"][t] = {{"count", e.first}, {"bytes", e.second}};
  return j;
}

std::string tokenize_jsonl(const Tokenizer& tok, const std::string& path, bool raw) {
  std::istringstream in(read_text_file(path, "the JSONL file", uint64_t{1} << 34));
  std::string line, out;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("text") || !j["text"].is_string())
      throw Error(path + ":" + std::to_string(lineno) + ": expected a JSON object with a string \"text\"");
    out += nlohmann::json(tok.encode(j["text"].get<std::string>(), !raw, !raw)).dump() + "\n";
  }
  return out;
}

void tree_logits(LoadedModel& m, const std::vector<int32_t>& toks, std::vector<int32_t> parents,
                 std::vector<int32_t> positions, int chunk, const std::function<void(std::span<const float>)>& rows) {
  // Under a sliding window the KV cache masks committed row r as position r,
  // so a chain at other positions runs as a tree does: one pending block,
  // each row masked by its own position.
  std::vector<int32_t> index(toks.size());
  std::iota(index.begin(), index.end(), 0);
  if (parents.empty() && m.desc.hp.sliding_window > 0 && !positions.empty() && positions != index) {
    parents = std::move(index);
    for (int32_t& p : parents) --p;  // a chain: each token's parent the one before
  }
  const bool chain = parents.empty();
  std::vector<int32_t> depth(toks.size());
  for (size_t i = 0; i < toks.size(); ++i) {
    if (chain) {
      depth[i] = static_cast<int32_t>(i);
      continue;
    }
    if (parents[i] < -1 || parents[i] >= static_cast<int32_t>(i))
      throw Error("--parents: entry " + std::to_string(i) + " must be -1 or an earlier index");
    depth[i] = parents[i] < 0 ? 0 : depth[static_cast<size_t>(parents[i])] + 1;
  }
  if (positions.empty()) positions = depth;
  // Passes of at most `chunk` tokens, as generate's prefill: a chain commits
  // each pass (the next attends to it as its prefix); a tree's rows stay one
  // pending block (parents index it whole), so the logits are the same.
  const size_t V = static_cast<size_t>(m.desc.hp.vocab), n = toks.size(), step = static_cast<size_t>(std::max(1, chunk));
  KvCache kv = m.transformer->make_cache(static_cast<int>(n));
  std::vector<float> logits;
  std::vector<int32_t> par;
  for (size_t a = 0; a < n; a += step) {
    const size_t k = std::min(step, n - a);
    par.resize(k);
    for (size_t i = 0; i < k; ++i) par[i] = chain ? static_cast<int32_t>(i) - 1 : parents[a + i];
    logits.resize(k * V);
    m.transformer->forward(Batch{std::span(toks).subspan(a, k), std::span(positions).subspan(a, k), par}, kv, logits,
                           LogitsRows::kAll);
    if (chain) kv.commit_prefix(static_cast<int>(k));
    for (size_t r = 0; r < k; ++r)  // a NaN row is an error, not a file of NaN
      check_finite(std::span<const float>(logits).subspan(r * V, V),
                   ("row " + std::to_string(a + r) + ": model").c_str());
    rows(logits);
  }
}

void write_logits(LoadedModel& m, const RunOptions& o, const std::vector<int32_t>& toks, std::vector<int32_t> parents,
                  std::vector<int32_t> positions, const std::string& out) {
  offload::RunShape shape;
  shape.ctx = static_cast<int>(toks.size());
  shape.max_tokens = std::min(shape.ctx, kLogitsChunk);
  load_weights(m, o, shape);
  if (const std::string p = output_path_problem(out, {}); !p.empty()) throw Error(p);
  TempOutput file(out);  // removed unless committed
  output_path_detail::write_all_fd(file.fd(), out, npy_header(toks.size(), m.desc.hp.vocab));
  tree_logits(m, toks, std::move(parents), std::move(positions), kLogitsChunk, [&](std::span<const float> rows) {
    output_path_detail::write_all_fd(file.fd(), out,
                                     std::string(reinterpret_cast<const char*>(rows.data()), rows.size_bytes()));
  });
  file.commit();
}

std::string npy_header(size_t rows, size_t cols) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                       std::to_string(cols) + "), }";
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::string out = "\x93NUMPY";
  out.push_back(1);
  out.push_back(0);
  const uint16_t hl = static_cast<uint16_t>(header.size());
  out.push_back(static_cast<char>(hl & 0xff));
  out.push_back(static_cast<char>(hl >> 8));
  out += header;
  return out;
}

}  // namespace redwood::app
