// TokenizerSpec from GGUF metadata (tokenizer.ggml.*) or from a Hugging Face
// tokenizer.json (+ tokenizer_config.json beside it).
#include "src/model/tokenizer_spec.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>
#include <unordered_map>

#include "src/util/error.h"
#include "src/util/io.h"

namespace redwood {

namespace {

constexpr int64_t kMaxVocab = int64_t{1} << 24;  // 16M tokens: far beyond any real vocabulary

// A special-token id key: missing -> -1; -1 (signed) or an all-ones unsigned
// value -> -1 (llama.cpp's "no token"); otherwise must name a token.
int32_t gguf_token_id(const GgufFile& f, const std::string& key, size_t n_vocab) {
  const GgufValue* v = f.find(key);
  if (!v) return -1;
  if (!v->is_int())
    throw Error(f.path() + ": metadata key '" + key + "' has type " + gguf_type_name(v->type) +
                ", expected an integer");
  int64_t id = 0;
  if (v->type == GgufType::U32 && v->u == 0xFFFFFFFFu) return -1;
  if (v->type == GgufType::U64 && v->u == std::numeric_limits<uint64_t>::max()) return -1;
  if (v->u > static_cast<uint64_t>(kMaxVocab)) {
    id = kMaxVocab;  // certainly out of range; reported below
  } else {
    id = v->u ? static_cast<int64_t>(v->u) : v->i;
  }
  if (id == -1) return -1;
  if (id < 0 || id >= static_cast<int64_t>(n_vocab))
    throw Error(f.path() + ": metadata key '" + key + "' = " + (v->u ? std::to_string(v->u) : std::to_string(v->i)) +
                " is outside the vocabulary of " + std::to_string(n_vocab) + " tokens");
  return static_cast<int32_t>(id);
}

}  // namespace

TokenizerSpec tokenizer_spec_from_gguf(const GgufFile& f) {
  TokenizerSpec spec;
  if (!f.find("tokenizer.ggml.tokens")) throw Error(f.path() + ": model has no tokenizer (tokenizer.ggml.tokens missing)");
  spec.tokens = f.get_string_array("tokenizer.ggml.tokens");
  const size_t n = spec.tokens.size();
  if (n == 0) throw Error(f.path() + ": tokenizer.ggml.tokens is empty");
  if (n > static_cast<size_t>(kMaxVocab))
    throw Error(f.path() + ": tokenizer.ggml.tokens has " + std::to_string(n) + " entries (too many)");
  spec.merges = f.get_string_array("tokenizer.ggml.merges");

  const std::optional<std::string> model = f.get_string("tokenizer.ggml.model");
  if (!model) {
    // No model name: merges mean byte-level BPE, otherwise SentencePiece.
    spec.kind = spec.merges.empty() ? TokenizerKind::kSentencePiece : TokenizerKind::kByteLevelBpe;
  } else if (*model == "gpt2") {
    spec.kind = TokenizerKind::kByteLevelBpe;
  } else if (*model == "llama") {
    spec.kind = TokenizerKind::kSentencePiece;
  } else {
    throw Error(f.path() + ": unsupported tokenizer model '" + *model + "' (supported: llama, gpt2)");
  }
  const bool spm = spec.kind == TokenizerKind::kSentencePiece;
  spec.pre = f.get_string("tokenizer.ggml.pre").value_or("default");

  if (f.find("tokenizer.ggml.scores")) {
    const std::vector<double> scores = f.get_float_array("tokenizer.ggml.scores");
    if (scores.size() != n)
      throw Error(f.path() + ": tokenizer.ggml.scores has " + std::to_string(scores.size()) + " entries for " +
                  std::to_string(n) + " tokens");
    spec.scores.assign(scores.begin(), scores.end());
  }
  if (f.find("tokenizer.ggml.token_type")) {
    const std::vector<int64_t> types = f.get_int_array("tokenizer.ggml.token_type");
    if (types.size() != n)
      throw Error(f.path() + ": tokenizer.ggml.token_type has " + std::to_string(types.size()) + " entries for " +
                  std::to_string(n) + " tokens");
    spec.types.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      if (types[i] < 0 || types[i] > static_cast<int64_t>(TokenType::kByte))
        throw Error(f.path() + ": tokenizer.ggml.token_type[" + std::to_string(i) + "] = " +
                    std::to_string(types[i]) + " is not a token type");
      spec.types.push_back(static_cast<TokenType>(types[i]));
    }
  }

  spec.bos_id = gguf_token_id(f, "tokenizer.ggml.bos_token_id", n);
  spec.eos_id = gguf_token_id(f, "tokenizer.ggml.eos_token_id", n);
  spec.unk_id = gguf_token_id(f, "tokenizer.ggml.unknown_token_id", n);
  spec.pad_id = gguf_token_id(f, "tokenizer.ggml.padding_token_id", n);
  spec.add_bos = f.get_bool("tokenizer.ggml.add_bos_token").value_or(spm || bpe_pre_adds_bos(spec.pre));
  spec.add_eos = f.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  spec.add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix").value_or(spm);
  if (!spm) {  // (an SPM vocabulary has no pre-tokenizer: the key is not read, as in llama.cpp)
    if (!is_known_bpe_pre(spec.pre))
      throw Error(f.path() + ": tokenizer.ggml.pre = '" + spec.pre + "' is a pre-tokenizer Redwood does not implement (" +
                  known_bpe_pre() + ")");
    if (spec.merges.empty()) throw Error(f.path() + ": tokenizer.ggml.merges is missing for a BPE vocabulary");
  }
  return spec;
}

// ---- Hugging Face tokenizer.json ---------------------------------------------------

namespace {

using nlohmann::json;

// Bounded JSON reading: real tokenizer files are tens of MiB at most and a few
// levels deep; anything beyond is hostile (a huge allocation or deep recursion).
constexpr std::streamoff kMaxJsonBytes = std::streamoff{256} << 20;
constexpr int kMaxJsonDepth = 64;

json read_json(const std::string& path) {
  require_regular_input(path, "a JSON file");
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw Error(path + ": cannot open");
  const std::streamoff size = in.tellg();
  if (size > kMaxJsonBytes) throw Error(path + ": file too large for a tokenizer description");
  in.seekg(0);
  std::stringstream ss;
  ss << in.rdbuf();
  json::parser_callback_t cb = [&](int depth, json::parse_event_t, json&) -> bool {
    if (depth > kMaxJsonDepth) throw Error(path + ": JSON nested too deeply");
    return true;
  };
  json j = json::parse(ss.str(), cb, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw Error(path + ": malformed JSON");
  return j;
}

// True when j (a component or a Sequence of them, at any depth) has type t.
bool has_component(const json& j, const std::string& t) {
  if (!j.is_object()) return false;
  const auto it = j.find("type");
  if (it != j.end() && it->is_string() && *it == t) return true;
  for (const char* list : {"pretokenizers", "decoders", "normalizers", "processors"}) {
    const auto l = j.find(list);
    if (l != j.end() && l->is_array())
      for (const auto& c : *l)
        if (has_component(c, t)) return true;
  }
  return false;
}

// Calls fn(component) for j and every component nested in Sequences.
template <class F>
void for_each_component(const json& j, F&& fn) {
  if (!j.is_object()) return;
  fn(j);
  for (const char* list : {"pretokenizers", "decoders", "normalizers", "processors"}) {
    const auto l = j.find(list);
    if (l != j.end() && l->is_array())
      for (const auto& c : *l) for_each_component(c, fn);
  }
}

std::string component_regex(const json& c) {
  const auto p = c.find("pattern");
  if (p == c.end() || !p->is_object()) return {};
  const auto r = p->find("Regex");
  return r != p->end() && r->is_string() ? r->get<std::string>() : std::string();
}

// Name of the byte-level pre-tokenizer that Redwood knows, from its structure:
// the regexes its components apply in order (Split: its pattern, isolated;
// Digits; Punctuation, contiguous; ByteLevel with use_regex, Hugging Face's
// default: GPT-2's split) matched against Redwood's table. Empty: a component
// or a sequence Redwood does not implement (another split would give other
// tokens), also a pre_tokenizer that does not split at all. None (null):
// GPT-2's, as before. *mapped_digits: a Digits runs on byte-mapped text (it
// comes after a ByteLevel).
std::string byte_level_pre_name(const json& pre, bool* mapped_digits) {
  std::vector<std::string> stages;
  bool unknown = false, byte_level = false;
  *mapped_digits = false;
  // A stage after a ByteLevel splits byte-mapped text: marked, so that it
  // matches only a table form written for that (bpe_after_byte_level).
  auto stage = [&](std::string_view regex) {
    stages.push_back(byte_level ? bpe_after_byte_level(regex) : std::string(regex));
  };
  for_each_component(pre, [&](const json& c) {
    const std::string t = c.value("type", "");
    if (t == "Sequence") return;
    if (t == "Split") {
      const std::string regex = component_regex(c);
      const std::string behavior = c.value("behavior", "Isolated");
      if (regex.empty() || behavior != "Isolated" || c.value("invert", false)) unknown = true;
      stage(regex);
    } else if (t == "Digits") {
      stage(bpe_digit_regex(c.value("individual_digits", false)));
      *mapped_digits = *mapped_digits || byte_level;
    } else if (t == "Punctuation") {
      const std::string_view regex = bpe_punctuation_regex(c.value("behavior", "Isolated"));
      if (regex.empty()) unknown = true;
      stage(regex);
    } else if (t == "ByteLevel") {
      byte_level = true;
      if (c.value("use_regex", true)) stages.emplace_back(bpe_byte_level_regex());
    } else {
      unknown = true;  // Whitespace, Metaspace, ...
    }
  });
  if (unknown) return {};
  if (stages.empty()) return pre.is_null() ? "gpt2" : "";
  return bpe_pre_for_stages(stages);
}

// Digits after a ByteLevel splits the byte-mapped text, where 0-9 and the bytes
// B2 B3 B9 BC BD BE (mapped to ² ³ ¹ ¼ ½ ¾) are digits; Redwood splits text, not
// mapped bytes, which gives the same tokens only where no token joins such a
// character to another one (as in Falcon's vocabulary, whose trainer split so).
void check_mapped_digits(const std::string& path, const TokenizerSpec& spec) {
  auto digit = [](uint32_t cp) {
    return (cp >= '0' && cp <= '9') || cp == 0xB2 || cp == 0xB3 || cp == 0xB9 || (cp >= 0xBC && cp <= 0xBE);
  };
  for (size_t id = 0; id < spec.tokens.size(); ++id) {
    if (spec.types[id] != TokenType::kNormal) continue;
    const std::string& t = spec.tokens[id];
    bool digits = false, other = false;
    for (size_t i = 0; i < t.size();) {  // the mapped characters are U+0021..U+0143: one or two bytes
      const auto c = static_cast<uint8_t>(t[i]);
      const size_t len = c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
      uint32_t cp = c;
      if (len == 2 && i + 1 < t.size()) cp = ((c & 0x1Fu) << 6) | (static_cast<uint8_t>(t[i + 1]) & 0x3Fu);
      (len <= 2 && digit(cp) ? digits : other) = true;
      i += len;
    }
    if (digits && other)
      throw Error(path + ": the pre_tokenizer's Digits after ByteLevel splits byte-mapped text, which Redwood "
                         "implements only for a vocabulary in which no token joins a digit (0-9 ² ³ ¹ ¼ ½ ¾) to "
                         "another character; token " + std::to_string(id) + " does");
  }
}

// "<s>" or {"content": "<s>", ...}; empty when absent/null.
std::string token_text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object()) {
    const auto c = v.find("content");
    if (c != v.end() && c->is_string()) return c->get<std::string>();
  }
  return {};
}

}  // namespace

namespace {

// A token's id by its text, -1 when empty or not in the vocabulary.
using TokenLookup = std::function<int32_t(const std::string&)>;

// model.vocab and added_tokens -> spec.tokens and spec.types (ids nearly dense).
void read_vocab(const std::string& path, const json& j, const json& model, TokenizerSpec& spec) {
  const auto vocab_it = model.find("vocab");
  if (vocab_it == model.end() || !vocab_it->is_object() || vocab_it->empty())
    throw Error(path + ": missing or empty 'model.vocab'");
  std::vector<std::pair<int64_t, std::string>> entries;
  int64_t max_id = -1;
  for (const auto& [text, idv] : vocab_it->items()) {
    if (!idv.is_number_integer()) throw Error(path + ": model.vocab entry '" + text + "' has a non-integer id");
    const auto id = idv.get<int64_t>();
    if (id < 0 || id >= kMaxVocab) throw Error(path + ": model.vocab entry '" + text + "' has id " + std::to_string(id) + " out of range");
    entries.emplace_back(id, text);
    max_id = std::max(max_id, id);
  }
  struct Added {
    int64_t id;
    std::string text;
    bool special;
  };
  std::vector<Added> added;
  const auto added_it = j.find("added_tokens");
  if (added_it != j.end() && !added_it->is_null()) {
    if (!added_it->is_array()) throw Error(path + ": 'added_tokens' is not an array");
    for (const auto& a : *added_it) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
          !a["content"].is_string())
        throw Error(path + ": malformed entry in 'added_tokens'");
      const auto id = a["id"].get<int64_t>();
      if (id < 0 || id >= kMaxVocab) throw Error(path + ": added token id " + std::to_string(id) + " out of range");
      added.push_back({id, a["content"].get<std::string>(), a.value("special", false)});
      max_id = std::max(max_id, id);
    }
  }
  // Ids must be (nearly) dense: a few unnamed ids are tolerated, a sparse id
  // space (e.g. one token with id 16,000,000) would only allocate a huge table.
  const int64_t named = static_cast<int64_t>(entries.size() + added.size());
  if (max_id + 1 > 2 * named + 1024)
    throw Error(path + ": token ids are sparse (largest id " + std::to_string(max_id) + " for " +
                std::to_string(named) + " tokens)");
  const auto n = static_cast<size_t>(max_id + 1);
  spec.tokens.assign(n, std::string());
  spec.types.assign(n, TokenType::kUnused);  // ids nobody names stay unused, decode to ""
  for (auto& [id, text] : entries) {
    spec.tokens[static_cast<size_t>(id)] = std::move(text);
    spec.types[static_cast<size_t>(id)] = TokenType::kNormal;
  }
  for (auto& a : added) {
    spec.tokens[static_cast<size_t>(a.id)] = a.text;
    spec.types[static_cast<size_t>(a.id)] = a.special ? TokenType::kControl : TokenType::kUserDefined;
  }

}

// model.merges (strings "a b" or pairs ["a", "b"]) -> spec.merges.
void read_merges(const std::string& path, const json& model, TokenizerSpec& spec) {
  const auto merges_it = model.find("merges");
  if (merges_it != model.end() && !merges_it->is_null()) {
    if (!merges_it->is_array()) throw Error(path + ": 'model.merges' is not an array");
    spec.merges.reserve(merges_it->size());
    for (const auto& m : *merges_it) {
      if (m.is_string()) {
        spec.merges.push_back(m.get<std::string>());
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        spec.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
      } else {
        throw Error(path + ": malformed entry in 'model.merges'");
      }
    }
  }
}

// The tokenizer's kind (byte-level or SentencePiece-style BPE), its
// pre-tokenizer, space prefix, byte tokens and unknown token.
void read_kind(const std::string& path, const json& j, const json& model, TokenizerSpec& spec,
               const TokenLookup& lookup) {
  const size_t n = spec.tokens.size();
  const json null_json;
  const json& pre = j.contains("pre_tokenizer") ? j["pre_tokenizer"] : null_json;
  const json& dec = j.contains("decoder") ? j["decoder"] : null_json;
  const json& norm = j.contains("normalizer") ? j["normalizer"] : null_json;
  const bool byte_level = has_component(pre, "ByteLevel") || has_component(dec, "ByteLevel");
  if (byte_level) {
    spec.kind = TokenizerKind::kByteLevelBpe;
    bool mapped_digits = false;
    spec.pre = byte_level_pre_name(pre, &mapped_digits);
    if (spec.pre.empty())
      throw Error(path +
                  ": the pre_tokenizer is not one Redwood implements (its Split, Digits, Punctuation and ByteLevel "
                  "stages in order, a ByteLevel splitting unless use_regex is false, must be GPT-2's, SmolLM's, "
                  "Llama 3's, Qwen2's, Qwen3.5's, Tekken's, Falcon's or DeepSeek LLM's, Coder's or V3's)");
    if (mapped_digits) check_mapped_digits(path, spec);
    if (const auto im = model.find("ignore_merges"); im != model.end() && !im->is_null()) {
      if (!im->is_boolean()) throw Error(path + ": 'model.ignore_merges' is not a bool");
      spec.ignore_merges = im->get<bool>();
    } else {
      spec.ignore_merges = false;  // Hugging Face's default
    }
  } else {
    // SentencePiece-style BPE (Llama-2 family): ▁ for spaces, <0xNN> byte fallback.
    spec.kind = TokenizerKind::kSentencePiece;
    spec.pre = "default";
    bool prefix = false;
    for_each_component(norm, [&](const json& c) {
      if (c.value("type", "") == "Prepend") prefix = true;
    });
    for_each_component(pre, [&](const json& c) {
      if (c.value("type", "") != "Metaspace") return;
      if (c.value("add_prefix_space", false)) prefix = true;
      const std::string scheme = c.value("prepend_scheme", "");
      if (scheme == "always" || scheme == "first") prefix = true;
    });
    spec.add_space_prefix = prefix;
    for (size_t i = 0; i < n; ++i) {
      const std::string& t = spec.tokens[i];
      if (spec.types[i] == TokenType::kNormal && t.size() == 6 && t.starts_with("<0x") && t[5] == '>')
        spec.types[i] = TokenType::kByte;
    }
  }
  if (model.contains("unk_token")) {
    spec.unk_id = lookup(token_text(model["unk_token"]));
    if (spec.unk_id >= 0 && spec.types[static_cast<size_t>(spec.unk_id)] == TokenType::kNormal)
      spec.types[static_cast<size_t>(spec.unk_id)] = TokenType::kUnknown;
  }

}

// BOS/EOS: the post-processor template first, tokenizer_config.json beside
// `path` overrides.
void read_bos_eos(const std::string& path, const json& j, TokenizerSpec& spec, const TokenLookup& lookup) {
  const json null_json;
  // BOS/EOS: the post-processor template first, tokenizer_config.json overrides.
  for_each_component(j.contains("post_processor") ? j["post_processor"] : null_json, [&](const json& c) {
    if (c.value("type", "") != "TemplateProcessing" || !c.contains("single") || !c["single"].is_array()) return;
    const json& single = c["single"];
    const auto special_of = [&](const json& piece) -> int32_t {
      if (!piece.is_object() || !piece.contains("SpecialToken")) return -1;
      const json& st = piece["SpecialToken"];
      return st.is_object() && st.contains("id") && st["id"].is_string() ? lookup(st["id"].get<std::string>()) : -1;
    };
    if (!single.empty()) {
      if (const int32_t b = special_of(single.front()); b >= 0) {
        spec.bos_id = b;
        spec.add_bos = true;
      }
      if (const int32_t e = special_of(single.back()); e >= 0 && single.size() > 1) {
        spec.eos_id = e;
        spec.add_eos = true;
      }
    }
  });
  const std::filesystem::path cfg_path = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (std::filesystem::exists(cfg_path, ec)) {
    const std::string cp = cfg_path.string();
    const json cfg = read_json(cp);
    if (!cfg.is_object()) throw Error(cp + ": top level is not an object");
    for (const auto& [key, out, flag, flag_out] :
         {std::tuple{"bos_token", &spec.bos_id, "add_bos_token", &spec.add_bos},
          std::tuple{"eos_token", &spec.eos_id, "add_eos_token", &spec.add_eos}}) {
      if (cfg.contains(key) && !cfg[key].is_null()) {
        const std::string t = token_text(cfg[key]);
        const int32_t id = lookup(t);
        if (id < 0) throw Error(cp + ": " + key + " '" + t + "' is not in the vocabulary");
        *out = id;
      }
      if (cfg.contains(flag)) {
        if (!cfg[flag].is_boolean()) throw Error(cp + ": '" + flag + "' is not a boolean");
        *flag_out = cfg[flag].get<bool>();
      }
    }
    if (cfg.contains("pad_token") && !cfg["pad_token"].is_null()) spec.pad_id = lookup(token_text(cfg["pad_token"]));
  }
}

}  // namespace

// A function-try-block: nlohmann's accessors (value(), get<>(), operator[])
// throw json::exception on a wrong type; those become redwood::Error here.
TokenizerSpec tokenizer_spec_from_hf_json(const std::string& path) try {
  const json j = read_json(path);
  if (!j.is_object()) throw Error(path + ": not a tokenizer.json (top level is not an object)");
  const auto model_it = j.find("model");
  if (model_it == j.end() || !model_it->is_object()) throw Error(path + ": missing 'model'");
  const json& model = *model_it;
  const std::string type = model.value("type", model.contains("merges") ? "BPE" : "");
  if (type != "BPE")
    throw Error(path + ": unsupported tokenizer model type '" + type + "' (only BPE is supported)");
  TokenizerSpec spec;
  read_vocab(path, j, model, spec);
  read_merges(path, model, spec);
  const size_t n = spec.tokens.size();
  std::unordered_map<std::string, int32_t> ids;
  ids.reserve(n);
  for (size_t i = 0; i < n; ++i)
    if (spec.types[i] != TokenType::kUnused) ids.emplace(spec.tokens[i], static_cast<int32_t>(i));
  const auto lookup = [&](const std::string& t) -> int32_t {
    if (t.empty()) return -1;
    auto it = ids.find(t);
    return it == ids.end() ? -1 : it->second;
  };

  read_kind(path, j, model, spec, lookup);
  read_bos_eos(path, j, spec, lookup);
  // The special tokens must be control tokens so that they decode to "" and
  // are recognised in text with parse_special.
  for (int32_t id : {spec.bos_id, spec.eos_id})
    if (id >= 0 && spec.types[static_cast<size_t>(id)] == TokenType::kNormal)
      spec.types[static_cast<size_t>(id)] = TokenType::kControl;
  return spec;
} catch (const nlohmann::json::exception& e) {
  throw Error(path + ": malformed tokenizer.json or tokenizer_config.json: " + e.what());
}

}  // namespace redwood
