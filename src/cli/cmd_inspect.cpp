// redwood info | tokenize | logits: look inside models and passes.
#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "src/cli/commands.h"
#include "src/cli/common.h"
#include "src/model/fingerprint.h"
#include "src/util/error.h"
#include "src/util/io.h"

namespace redwood::cli {

namespace {

std::string human(uint64_t b) {
  char buf[64];
  if (b >= (1ull << 30))
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / double(1ull << 30));
  else if (b >= (1ull << 20))
    std::snprintf(buf, sizeof buf, "%.2f MiB", b / double(1ull << 20));
  else
    std::snprintf(buf, sizeof buf, "%.2f KiB", b / 1024.0);
  return buf;
}

int run_info(const std::string& path, bool json) {
  ModelDesc m = load_model_desc(path);
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
  if (json) {
    nlohmann::json j;
    j["path"] = m.path;
    j["format"] = m.format == ModelFormat::kGguf ? "gguf" : "safetensors";
    j["name"] = m.name;
    j["architecture"] = "llama";
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
    std::puts(j.dump(2).c_str());
    return 0;
  }
  std::printf("%s\n", m.path.c_str());
  std::printf("  name          %s\n", m.name.c_str());
  std::printf("  format        %s, architecture llama\n", m.format == ModelFormat::kGguf ? "GGUF" : "safetensors");
  std::printf("  layers        %d\n  dim           %d\n  heads         %d (kv %d, head dim %d)\n", hp.n_layers, hp.dim,
              hp.n_heads, hp.n_kv_heads, hp.head_dim);
  std::printf("  ffn           %d\n  vocab         %d\n  context       %d\n", hp.ffn_dim, hp.vocab, hp.ctx_len);
  std::string scaling;
  if (!hp.rope_freq_factors.empty()) {
    const auto [lo, hi] = std::minmax_element(hp.rope_freq_factors.begin(), hp.rope_freq_factors.end());
    char buf[96];
    std::snprintf(buf, sizeof buf, ", frequencies scaled by 1/%g..1/%g", *lo, *hi);
    scaling = buf;
  }
  std::printf("  rope          base %g, %s layout%s\n  rms eps       %g\n", hp.rope_base,
              hp.rope_mode == RopeMode::kInterleaved ? "interleaved" : "half", scaling.c_str(), hp.rms_eps);
  std::printf("  lm head       %s\n", hp.tied_lm_head ? "tied to token embedding" : "separate");
  std::printf("  tokenizer     %s, %zu tokens\n",
              m.tokenizer.kind == TokenizerKind::kByteLevelBpe ? "byte-level BPE" : "SentencePiece BPE",
              m.tokenizer.tokens.size());
  std::printf("  weights       %s (largest layer %s)\n", human(m.total_bytes()).c_str(), human(max_layer).c_str());
  for (auto& [t, e] : types) std::printf("    %-6s %4d tensors  %s\n", t.c_str(), e.first, human(e.second).c_str());
  std::printf("  fingerprint   %s (what batch jobs compare on resume)\n", model_fingerprint(m).c_str());
  std::printf("                covers %s\n", kFingerprintCovers);
  return 0;
}

int run_tokenize(RunOptions& o, const std::string& text, const std::string& jsonl, bool raw) {
  LoadedModel m = load_model(o.model, /*with_weights=*/false);
  auto enc = [&](const std::string& s) { return nlohmann::json(m.tokenizer->encode(s, !raw, !raw)).dump(); };
  if (!jsonl.empty()) {
    std::istringstream in(read_text_file(jsonl, "the JSONL file", uint64_t{1} << 34));
    std::string line;
    int lineno = 0;
    std::string out;
    while (std::getline(in, line)) {
      ++lineno;
      if (line.empty()) continue;
      nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object() || !j.contains("text") || !j["text"].is_string())
        throw Error(jsonl + ":" + std::to_string(lineno) + ": expected a JSON object with a string \"text\"");
      out += enc(j["text"].get<std::string>()) + "\n";
    }
    std::fputs(out.c_str(), stdout);
    return 0;
  }
  std::puts(enc(text).c_str());
  return 0;
}

int run_logits(RunOptions& o, const std::string& tokens, const std::string& parents_s, const std::string& positions_s,
               const std::string& out) {
  apply_run_options(o);
  check_draft_budget(o, "");
  check_output(out, {o.model.empty() ? default_model_path() : o.model}, "--out");
  LoadedModel m = load_model(o.model, /*with_weights=*/false);
  const auto toks = parse_int_list(tokens, "--tokens");
  if (toks.empty()) throw Error("--tokens is empty");
  offload::RunShape shape;
  shape.ctx = shape.max_tokens = static_cast<int>(toks.size());
  load_weights(m, o, shape);
  ChainBatch chain(toks, 0);
  std::vector<int32_t> parents = chain.parents, positions = chain.positions;
  if (!parents_s.empty()) {
    parents = parse_int_list(parents_s, "--parents");
    if (parents.size() != toks.size()) throw Error("--parents must have one entry per token");
    positions.clear();  // depth in the tree
    for (size_t i = 0; i < parents.size(); ++i) {
      if (parents[i] < -1 || parents[i] >= static_cast<int32_t>(i))
        throw Error("--parents: entry " + std::to_string(i) + " must be -1 or an earlier index");
      positions.push_back(parents[i] < 0 ? 0 : positions[parents[i]] + 1);
    }
  }
  if (!positions_s.empty()) {
    positions = parse_int_list(positions_s, "--positions");
    if (positions.size() != toks.size()) throw Error("--positions must have one entry per token");
  }
  KvCache kv = m.transformer->make_cache(static_cast<int>(toks.size()));
  std::vector<float> logits(toks.size() * m.desc.hp.vocab);
  m.transformer->forward(Batch{toks, positions, parents}, kv, logits, LogitsRows::kAll);
  write_output_file(out, npy_f32(logits.data(), toks.size(), m.desc.hp.vocab));
  finish_run(m, o);
  return 0;
}

}  // namespace

Runner add_info(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto* c = app.add_subcommand("info", "Print a model's architecture, tensor types and sizes");
  c->add_option("path", *path, "GGUF file or safetensors directory")->required();
  c->add_flag("--json", *json, "JSON output");
  return [path, json] { return run_info(*path, *json); };
}

Runner add_tokenize(CLI::App& app) {
  struct O {
    RunOptions run;
    std::string text, jsonl;
    bool raw = false;
  };
  auto o = std::make_shared<O>();
  auto* c = app.add_subcommand("tokenize", "Print token ids as a JSON array");
  c->add_option("--model,-m", o->run.model, "Model (default: SmolLM2-135M)");
  auto* t = c->add_option("--text", o->text, "Text to tokenize");
  auto* j = c->add_option("--jsonl", o->jsonl, "File of {\"text\": ...} lines: one array per line");
  t->excludes(j);
  c->add_flag("--raw", o->raw, "No BOS/EOS and no special-token parsing");
  return [o] { return run_tokenize(o->run, o->text, o->jsonl, o->raw); };
}

Runner add_logits(CLI::App& app) {
  struct O {
    RunOptions run;
    std::string tokens, parents, positions, out;
  };
  auto o = std::make_shared<O>();
  auto* c = app.add_subcommand("logits", "Run one forward pass and write all logits as .npy");
  add_run_options(c, o->run);
  c->add_option("--tokens", o->tokens, "Comma-separated token ids")->required();
  c->add_option("--parents", o->parents, "Tree: parent index per token (-1 = root); default: a chain");
  c->add_option("--positions", o->positions, "Positions per token (default: chain index or tree depth)");
  c->add_option("--out,-o", o->out, "Output .npy file [n, vocab] float32")->required();
  return [o] { return run_logits(o->run, o->tokens, o->parents, o->positions, o->out); };
}

}  // namespace redwood::cli
