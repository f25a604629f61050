// redwood info | tokenize | logits: look inside models and passes.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "src/cli/commands.h"
#include "src/cli/common.h"
#include "src/app/inspect.h"
#include "src/util/error.h"
#include "src/util/io.h"
#include "src/util/output_path.h"

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
  const ModelDesc m = load_model_desc(path);
  const nlohmann::json j = app::model_info(m);
  if (json) {
    std::puts(j.dump(2).c_str());
    return 0;
  }
  const uint64_t max_layer = j["max_layer_bytes"].get<uint64_t>();
  const auto& hp = m.hp;
  std::printf("%s\n", m.path.c_str());
  std::printf("  name          %s\n", m.name.c_str());
  std::printf("  format        %s, architecture %s\n",
              m.format == ModelFormat::kGguf     ? "GGUF"
              : m.format == ModelFormat::kPacked ? "packed (redwood pack)"
                                                 : "safetensors",
              hp.arch.c_str());
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
  if (hp.qkv_bias || hp.qk_norm)
    std::printf("  attention     %s%s%s\n", hp.qkv_bias ? "q/k/v biases" : "", hp.qkv_bias && hp.qk_norm ? ", " : "",
                hp.qk_norm ? "per-head q/k RMSNorm" : "");
  std::printf("  lm head       %s\n", hp.tied_lm_head ? "tied to token embedding" : "separate");
  std::printf("  tokenizer     %s, %zu tokens\n",
              m.tokenizer.kind == TokenizerKind::kByteLevelBpe ? "byte-level BPE" : "SentencePiece BPE",
              m.tokenizer.tokens.size());
  std::printf("  weights       %s (largest layer %s)\n", human(m.total_bytes()).c_str(), human(max_layer).c_str());
  for (const auto& [t, e] : j["tensor_types"].items())
    std::printf("    %-6s %4d tensors  %s\n", t.c_str(), e["count"].get<int>(),
                human(e["bytes"].get<uint64_t>()).c_str());
  std::printf("  fingerprint   %s (what batch jobs compare on resume)\n", j["fingerprint"].get<std::string>().c_str());
  std::printf("                covers %s\n", j["fingerprint_covers"].get<std::string>().c_str());
  return 0;
}

int run_tokenize(RunOptions& o, const std::string& text, const std::string& jsonl, bool raw) {
  LoadedModel m = load_model(o.model, /*with_weights=*/false);
  if (!jsonl.empty()) {
    std::fputs(app::tokenize_jsonl(*m.tokenizer, jsonl, raw).c_str(), stdout);
    return 0;
  }
  std::puts(nlohmann::json(m.tokenizer->encode(text, !raw, !raw)).dump().c_str());
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
  auto per_token = [&](const std::string& list, const char* what) {  // empty, or one entry per token
    std::vector<int32_t> v = list.empty() ? std::vector<int32_t>{} : parse_int_list(list, what);
    if (!v.empty() && v.size() != toks.size()) throw Error(std::string(what) + " must have one entry per token");
    return v;
  };
  app::write_logits(m, o, toks, per_token(parents_s, "--parents"), per_token(positions_s, "--positions"), out);
  finish_run(m, o);
  return 0;
}

}  // namespace

Runner add_info(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto* c = app.add_subcommand("info", "Print a model's architecture, tensor types and sizes");
  c->add_option("path,-m,--model", *path, "GGUF file, packed model or safetensors directory (as the path, or -m like the other commands)")->required();
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
