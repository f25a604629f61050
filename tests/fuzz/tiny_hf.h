// Writers for tiny synthetic Hugging Face checkpoints (config.json, a minimal
// byte-level BPE tokenizer.json, safetensors shards). Shared by
// tests/test_safetensors.cpp, tests/test_hostile.cpp and the fuzz harness.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace redwood::tiny {

struct TensorSpec {
  std::string name;
  std::string dtype;  // "F32", "F16", "BF16", or anything else (written as 2 bytes/elem)
  std::vector<uint64_t> shape;
};

inline uint64_t st_elem_size(const std::string& dt) { return dt == "F32" ? 4 : 2; }

inline uint64_t numel(const std::vector<uint64_t>& s) {
  uint64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

inline void write_bytes(const std::string& path, const void* data, size_t size) {
  FILE* f = fopen(path.c_str(), "wb");
  if (!f) throw std::runtime_error("cannot write " + path);
  const size_t w = size ? fwrite(data, 1, size, f) : 0;
  const bool ok = fclose(f) == 0 && w == size;
  if (!ok) throw std::runtime_error("cannot write " + path);
}

inline void write_text(const std::string& path, const std::string& s) { write_bytes(path, s.data(), s.size()); }

inline std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Raw safetensors: 8-byte LE header length, header text, data.
inline std::string raw_safetensors(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

// Each tensor's first 4 data bytes hold its index in `ts` (as uint32), so tests
// can check that extents point at the right bytes.
inline std::string make_safetensors(const std::vector<TensorSpec>& ts) {
  nlohmann::json h = nlohmann::json::object();
  h["__metadata__"] = {{"format", "pt"}};
  std::string data;
  uint32_t idx = 0;
  for (const auto& t : ts) {
    const uint64_t bytes = numel(t.shape) * st_elem_size(t.dtype);
    std::string blob(bytes, '\0');
    if (bytes >= 4) memcpy(blob.data(), &idx, 4);
    ++idx;
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + bytes}}};
    data += blob;
  }
  std::string header = h.dump();
  while (header.size() % 8 != 0) header += ' ';
  return raw_safetensors(header, data);
}

// GPT-2's byte -> printable code point mapping, UTF-8 encoded.
inline std::vector<std::string> byte_level_alphabet() {
  std::vector<std::string> out;
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const int cp = printable ? b : 256 + extra++;
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    out.push_back(s);
  }
  return out;
}

// 256 byte tokens + 3 merges + "<|endoftext|>" = 260 tokens.
inline std::string tiny_tokenizer_json() {
  using nlohmann::json;
  json vocab = json::object();
  int id = 0;
  for (const auto& s : byte_level_alphabet()) vocab[s] = id++;
  vocab["he"] = id++;
  vocab["ll"] = id++;
  vocab["hell"] = id++;
  const int eos = id++;
  json j = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens",
       {{{"id", eos}, {"content", "<|endoftext|>"}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
         {"normalized", false}, {"special", true}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                         {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false}, {"vocab", vocab},
        {"merges", {"h e", "l l", "he ll"}}}}};
  return j.dump();
}

struct Tiny {
  int layers = 2, dim = 16, heads = 4, kv_heads = 2, ffn = 32, vocab = 264;
  std::string dtype = "F32";
  bool tied = false;
};

inline std::vector<TensorSpec> tiny_tensors(const Tiny& t) {
  const uint64_t d = t.dim, hd = t.dim / t.heads, kv = hd * t.kv_heads, f = t.ffn, v = t.vocab;
  std::vector<TensorSpec> ts = {{"model.embed_tokens.weight", t.dtype, {v, d}}, {"model.norm.weight", t.dtype, {d}}};
  if (!t.tied) ts.push_back({"lm_head.weight", t.dtype, {v, d}});
  for (int i = 0; i < t.layers; ++i) {
    const std::string b = "model.layers." + std::to_string(i) + ".";
    ts.push_back({b + "input_layernorm.weight", t.dtype, {d}});
    ts.push_back({b + "self_attn.q_proj.weight", t.dtype, {d, d}});
    ts.push_back({b + "self_attn.k_proj.weight", t.dtype, {kv, d}});
    ts.push_back({b + "self_attn.v_proj.weight", t.dtype, {kv, d}});
    ts.push_back({b + "self_attn.o_proj.weight", t.dtype, {d, d}});
    ts.push_back({b + "post_attention_layernorm.weight", t.dtype, {d}});
    ts.push_back({b + "mlp.gate_proj.weight", t.dtype, {f, d}});
    ts.push_back({b + "mlp.up_proj.weight", t.dtype, {f, d}});
    ts.push_back({b + "mlp.down_proj.weight", t.dtype, {d, f}});
  }
  return ts;
}

inline nlohmann::json tiny_config(const Tiny& t) {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"num_hidden_layers", t.layers},
          {"hidden_size", t.dim},
          {"num_attention_heads", t.heads},
          {"num_key_value_heads", t.kv_heads},
          {"intermediate_size", t.ffn},
          {"vocab_size", t.vocab},
          {"rope_theta", 500000.0},
          {"rms_norm_eps", 1e-5},
          {"max_position_embeddings", 2048},
          {"tie_word_embeddings", t.tied},
          {"hidden_act", "silu"},
          {"rope_scaling", nullptr},
          {"torch_dtype", "float32"}};
}

// Writes a complete model directory `dir` (which must exist). shards > 1 splits
// the tensors round-robin into model-0000k-of-0000n.safetensors and, if
// `index`, writes model.safetensors.index.json.
inline void write_tiny_model(const std::string& dir, const Tiny& t, int shards = 1, bool index = true) {
  write_text(dir + "/config.json", tiny_config(t).dump(2));
  write_text(dir + "/tokenizer.json", tiny_tokenizer_json());
  auto ts = tiny_tensors(t);
  if (shards <= 1) {
    write_text(dir + "/model.safetensors", make_safetensors(ts));
    return;
  }
  std::vector<std::vector<TensorSpec>> parts(shards);
  for (size_t i = 0; i < ts.size(); ++i) parts[i % shards].push_back(ts[i]);
  nlohmann::json wm = nlohmann::json::object();
  for (int s = 0; s < shards; ++s) {
    char fname[64];
    snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", s + 1, shards);
    write_text(dir + "/" + fname, make_safetensors(parts[s]));
    for (const auto& x : parts[s]) wm[x.name] = fname;
  }
  if (index)
    write_text(dir + "/model.safetensors.index.json",
               nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", wm}}.dump());
}

}  // namespace redwood::tiny
