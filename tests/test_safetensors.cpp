// Hugging Face safetensors checkpoints: header parsing and model descriptions
// built from tiny synthetic directories written here (config.json, a minimal
// byte-level BPE tokenizer.json, one or more .safetensors shards).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "src/model/model_desc.h"
#include "src/model/safetensors.h"
#include "src/util/error.h"
#include "tests/fuzz/tiny_hf.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace redwood {
namespace {

using tiny::make_safetensors;
using tiny::raw_safetensors;
using tiny::read_all;
using tiny::TensorSpec;
using tiny::Tiny;
using tiny::tiny_config;
using tiny::tiny_tensors;
using tiny::tiny_tokenizer_json;

void write_file(const fs::path& p, const std::string& bytes) {
  tiny::write_text(p.string(), bytes);
}
std::string read_file(const fs::path& p) {
  return read_all(p.string());
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "redwood_st_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  // Writes a model directory; `shards` > 1 splits the tensors round-robin and
  // writes model.safetensors.index.json (if `index`).
  fs::path write_model(const std::string& name, const Tiny& t, int shards = 1, bool index = true) {
    fs::path dir = root_ / name;
    fs::create_directories(dir);
    tiny::write_tiny_model(dir.string(), t, shards, index);
    return dir;
  }

  fs::path root_;
};

// Expects load_model_desc(p) to throw redwood::Error containing `needle`.
void expect_error(const std::string& p, const std::string& needle) {
  try {
    load_model_desc(p);
    ADD_FAILURE() << "no error for " << p << " (expected '" << needle << "')";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what();
  }
}

void expect_header_error(const std::string& p, const std::string& needle) {
  try {
    read_safetensors_header(p);
    ADD_FAILURE() << "no error for " << p << " (expected '" << needle << "')";
  } catch (const Error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find(needle), std::string::npos) << "message: " << w;
    EXPECT_NE(w.find(p), std::string::npos) << "message does not name the file: " << w;
  }
}

uint32_t first_u32(const ModelDesc& m, const TensorExtent& e) {
  const std::string bytes = read_file(m.files.at(e.file));
  uint32_t v = 0;
  EXPECT_LE(e.offset + e.bytes, bytes.size());
  memcpy(&v, bytes.data() + e.offset, 4);
  return v;
}

// ---- headers -----------------------------------------------------------------------------

TEST_F(SafetensorsTest, HeaderParsesEntries) {
  const fs::path p = root_ / "a.safetensors";
  write_file(p, make_safetensors({{"x", "F32", {2, 3}}, {"y", "BF16", {5}}, {"z", "F16", {4, 0}}}));
  auto ts = read_safetensors_header(p.string());
  ASSERT_EQ(ts.size(), 3u);
  std::map<std::string, SafetensorsTensor> by;
  for (auto& t : ts) by[t.name] = t;
  EXPECT_EQ(by["x"].type, DType::F32);
  EXPECT_EQ(by["x"].shape, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(by["x"].bytes, 24u);
  EXPECT_EQ(by["y"].type, DType::BF16);
  EXPECT_EQ(by["y"].bytes, 10u);
  EXPECT_EQ(by["z"].type, DType::F16);
  EXPECT_EQ(by["z"].bytes, 0u);
  const std::string bytes = read_file(p);
  uint32_t v = 0;
  memcpy(&v, bytes.data() + by["y"].offset, 4);
  EXPECT_EQ(v, 1u);  // y was written second
  EXPECT_EQ(by["x"].offset % 8, 0u);
}

TEST_F(SafetensorsTest, HeaderScalarAndMetadataOnly) {
  const fs::path p = root_ / "s.safetensors";
  write_file(p, raw_safetensors(R"({"__metadata__":{"a":"b"},"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})",
                                std::string(4, '\0')));
  auto ts = read_safetensors_header(p.string());
  ASSERT_EQ(ts.size(), 1u);
  EXPECT_EQ(ts[0].bytes, 4u);
  write_file(p, raw_safetensors(R"({"__metadata__":{}})", ""));
  EXPECT_TRUE(read_safetensors_header(p.string()).empty());
}

// A config.json that is a directory is named as such, not reported missing (issue 32).
TEST_F(SafetensorsTest, ConfigJsonThatIsADirectoryIsNamed) {
  const fs::path dir = root_ / "config-is-dir";
  fs::create_directories(dir / "config.json");
  expect_error(dir.string(), "config.json: is a directory, not the model's config.json");
}

TEST_F(SafetensorsTest, HeaderErrors) {
  const std::string p = (root_ / "bad.safetensors").string();
  const std::string ok_entry = R"("dtype":"F32","shape":[2],"data_offsets":[0,8])";
  auto with = [&](const std::string& header, const std::string& data = std::string(8, '\0')) {
    write_file(p, raw_safetensors(header, data));
  };

  write_file(p, "abc");
  expect_header_error(p, "truncated");

  std::string huge(8, '\0');
  huge[7] = 0x7f;
  write_file(p, huge + "{}");
  expect_header_error(p, "absurd");

  std::string past(8, '\0');
  past[0] = 100;
  write_file(p, past + "{}");
  expect_header_error(p, "past the end");

  with("{\"t\":{" + ok_entry);
  expect_header_error(p, "invalid JSON");
  with("[1,2,3]");
  expect_header_error(p, "not a JSON object");
  with(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})");
  expect_header_error(p, "past the end");
  with(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})");
  expect_header_error(p, "< begin");
  with(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})");
  expect_header_error(p, "size mismatch");
  with(R"({"t":{"dtype":"I8","shape":[8],"data_offsets":[0,8]}})");
  expect_header_error(p, "unsupported tensor type I8 for tensor t");
  with(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})");
  expect_header_error(p, "non-negative");
  with(R"({"t":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})");
  expect_header_error(p, "non-negative");
  with(R"({"t":{"dtype":"F32","shape":[1125899906842624],"data_offsets":[0,8]}})");
  expect_header_error(p, "too large");
  with(R"({"t":{"dtype":"F32","shape":[281474976710656,281474976710656],"data_offsets":[0,8]}})");
  expect_header_error(p, "overflows");
  with(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0]}})");
  expect_header_error(p, "data_offsets");
  with(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,-8]}})");
  expect_header_error(p, "non-negative");
  with(R"({"t":{"shape":[2],"data_offsets":[0,8]}})");
  expect_header_error(p, "dtype");
  with(R"({"t":5})");
  expect_header_error(p, "not a JSON object");
  with("{\"t\":{" + ok_entry + "},\"t\":{" + ok_entry + "}}");
  expect_header_error(p, "duplicate tensor 't'");
  with(std::string(200, '[') + std::string(200, ']'));
  expect_header_error(p, "nested too deeply");
  expect_header_error((root_ / "nope.safetensors").string(), "cannot open");
}

// ---- model directories ------------------------------------------------------------------

void check_tiny(const ModelDesc& m, const Tiny& t) {
  EXPECT_EQ(m.format, ModelFormat::kSafetensors);
  EXPECT_EQ(m.hp.n_layers, t.layers);
  EXPECT_EQ(m.hp.dim, t.dim);
  EXPECT_EQ(m.hp.n_heads, t.heads);
  EXPECT_EQ(m.hp.n_kv_heads, t.kv_heads);
  EXPECT_EQ(m.hp.head_dim, t.dim / t.heads);
  EXPECT_EQ(m.hp.ffn_dim, t.ffn);
  EXPECT_EQ(m.hp.vocab, t.vocab);
  EXPECT_EQ(m.hp.ctx_len, 2048);
  EXPECT_FLOAT_EQ(m.hp.rope_base, 500000.0f);
  EXPECT_FLOAT_EQ(m.hp.rms_eps, 1e-5f);
  EXPECT_EQ(m.hp.rope_mode, RopeMode::kHalf);
  EXPECT_EQ(m.hp.tied_lm_head, t.tied);
  ASSERT_EQ(m.layers.size(), static_cast<size_t>(t.layers));
  EXPECT_EQ(m.tok_embd.rows, t.vocab);
  EXPECT_EQ(m.tok_embd.cols, t.dim);
  EXPECT_EQ(m.output_norm.rows, 1);
  EXPECT_EQ(m.output_norm.cols, t.dim);
  const int64_t kv = static_cast<int64_t>(t.dim / t.heads) * t.kv_heads;
  const auto& L = m.layers[1];
  EXPECT_EQ(L.wk.rows, kv);
  EXPECT_EQ(L.wk.cols, t.dim);
  EXPECT_EQ(L.w_down.rows, t.dim);
  EXPECT_EQ(L.w_down.cols, t.ffn);
  EXPECT_EQ(L.w_gate.rows, t.ffn);
  EXPECT_EQ(L.w_gate.cols, t.dim);
  EXPECT_EQ(L.w_up.name, "model.layers.1.mlp.up_proj.weight");
  const DType want = t.dtype == "F32" ? DType::F32 : t.dtype == "F16" ? DType::F16 : DType::BF16;
  EXPECT_EQ(L.wq.type, want);
  EXPECT_EQ(L.wq.bytes, static_cast<uint64_t>(t.dim) * t.dim * (t.dtype == "F32" ? 4 : 2));
  // Every extent points at its own bytes: the first word is the tensor's index
  // in tiny_tensors() order (a per-shard index when sharded, so only check
  // uniqueness per file).
  std::map<std::pair<int, uint32_t>, std::string> seen;
  std::vector<const TensorExtent*> all = {&m.tok_embd, &m.output_norm};
  if (!t.tied) all.push_back(&m.lm_head);
  for (const auto& l : m.layers)
    for (const auto* e : l.tensors()) all.push_back(e);
  for (const auto* e : all) {
    ASSERT_GE(e->file, 0);
    ASSERT_LT(e->file, static_cast<int>(m.files.size()));
    auto key = std::make_pair(e->file, first_u32(m, *e));
    EXPECT_TRUE(seen.emplace(key, e->name).second) << e->name << " aliases " << seen[key];
  }
  EXPECT_FALSE(m.tokenizer.tokens.empty());
  EXPECT_LE(m.tokenizer.tokens.size(), static_cast<size_t>(t.vocab));
}

TEST_F(SafetensorsTest, SingleFileUntiedF32) {
  Tiny t;
  auto dir = write_model("untied", t);
  ModelDesc m = load_model_desc(dir.string());
  check_tiny(m, t);
  ASSERT_EQ(m.files.size(), 1u);
  EXPECT_EQ(m.files[0], (dir / "model.safetensors").string());
  EXPECT_EQ(m.name, "untied");
  EXPECT_EQ(m.lm_head.name, "lm_head.weight");
  EXPECT_NE(m.lm_head.offset, m.tok_embd.offset);
  EXPECT_EQ(first_u32(m, m.tok_embd), 0u);
  EXPECT_EQ(first_u32(m, m.output_norm), 1u);
  EXPECT_EQ(first_u32(m, m.lm_head), 2u);
  EXPECT_EQ(first_u32(m, m.layers[0].attn_norm), 3u);
  EXPECT_EQ(first_u32(m, m.layers[1].w_down), 3u + 9 + 8);
  EXPECT_TRUE(m.chat_template.empty());
  EXPECT_GT(m.total_bytes(), 0u);
}

TEST_F(SafetensorsTest, SingleFileTiedBF16) {
  Tiny t;
  t.tied = true;
  t.dtype = "BF16";
  auto dir = write_model("tied", t);
  ModelDesc m = load_model_desc(dir.string() + "/");  // a trailing slash is fine
  check_tiny(m, t);
  EXPECT_EQ(m.lm_head.offset, m.tok_embd.offset);
  EXPECT_EQ(m.lm_head.file, m.tok_embd.file);
  EXPECT_EQ(m.lm_head.type, DType::BF16);
}

TEST_F(SafetensorsTest, TiedIgnoresPresentLmHead) {
  Tiny t;
  auto dir = write_model("tied2", t);  // lm_head.weight present
  t.tied = true;
  write_file(dir / "config.json", tiny_config(t).dump());
  ModelDesc m = load_model_desc(dir.string());
  EXPECT_TRUE(m.hp.tied_lm_head);
  EXPECT_EQ(m.lm_head.offset, m.tok_embd.offset);
}

TEST_F(SafetensorsTest, ShardedWithIndexF16) {
  Tiny t;
  t.dtype = "F16";
  t.layers = 3;
  auto dir = write_model("sharded", t, 3);
  ModelDesc m = load_model_desc(dir.string());
  check_tiny(m, t);
  ASSERT_EQ(m.files.size(), 3u);
  EXPECT_EQ(m.files[0], (dir / "model-00001-of-00003.safetensors").string());
  EXPECT_EQ(m.files[2], (dir / "model-00003-of-00003.safetensors").string());
  // round-robin: tensor k lives in shard k % 3
  EXPECT_EQ(m.tok_embd.file, 0);
  EXPECT_EQ(m.output_norm.file, 1);
  EXPECT_EQ(m.lm_head.file, 2);
  EXPECT_EQ(m.layers[0].attn_norm.file, 0);
  EXPECT_EQ(first_u32(m, m.layers[0].attn_norm), 1u);  // second tensor of shard 0
}

TEST_F(SafetensorsTest, ShardedWithoutIndexAndFilePath) {
  Tiny t;
  t.tied = true;
  auto dir = write_model("noindex", t, 2, /*index=*/false);
  ModelDesc m = load_model_desc(dir.string());
  check_tiny(m, t);
  EXPECT_EQ(m.files.size(), 2u);
  // Naming one shard loads the whole directory.
  const std::string shard = (dir / "model-00002-of-00002.safetensors").string();
  ModelDesc m2 = load_model_desc(shard);
  EXPECT_EQ(m2.path, shard);
  EXPECT_EQ(m2.files, m.files);
  EXPECT_EQ(m2.layers[1].wv.offset, m.layers[1].wv.offset);
}

TEST_F(SafetensorsTest, ChatTemplateAndDefaults) {
  Tiny t;
  auto dir = write_model("defaults", t);
  json c = tiny_config(t);
  c.erase("num_key_value_heads");
  c.erase("rope_theta");
  c.erase("max_position_embeddings");
  c.erase("architectures");
  c.erase("tie_word_embeddings");
  c["head_dim"] = 4;
  write_file(dir / "config.json", c.dump());
  // KV heads default to the head count, so k/v must be full width.
  t.kv_heads = t.heads;
  write_file(dir / "model.safetensors", make_safetensors(tiny_tensors(t)));
  write_file(dir / "tokenizer_config.json", json{{"chat_template", "{{ messages }}"}, {"add_bos_token", false}}.dump());
  ModelDesc m = load_model_desc(dir.string());
  EXPECT_EQ(m.hp.n_kv_heads, 4);
  EXPECT_FLOAT_EQ(m.hp.rope_base, 10000.0f);
  EXPECT_EQ(m.hp.ctx_len, 0);
  EXPECT_FALSE(m.hp.tied_lm_head);
  EXPECT_EQ(m.chat_template, "{{ messages }}");
}

TEST_F(SafetensorsTest, MistralAndTemplateList) {
  Tiny t;
  auto dir = write_model("mistral", t);
  json c = tiny_config(t);
  c["architectures"] = {"MistralForCausalLM"};
  c["model_type"] = "mistral";
  write_file(dir / "config.json", c.dump());
  write_file(
      dir / "tokenizer_config.json",
      json{{"chat_template", {{{"name", "tool_use"}, {"template", "T"}}, {{"name", "default"}, {"template", "D"}}}}}
          .dump());
  ModelDesc m = load_model_desc(dir.string());
  EXPECT_EQ(m.hp.n_layers, t.layers);
  EXPECT_EQ(m.chat_template, "D");
}

// Issue 42: a tensor the model does not use is an error naming it (a layer
// past num_hidden_layers was silently left out), except those ignored on
// purpose (rotary_emb.inv_freq; lm_head.weight when tied: TiedIgnoresPresentLmHead).
TEST_F(SafetensorsTest, TensorsTheModelDoesNotUseAreAnError) {
  Tiny t;
  auto dir = write_model("extra", t);
  std::vector<TensorSpec> ts = tiny_tensors(t);
  ts.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", "F32", {2}});
  write_file(dir / "model.safetensors", make_safetensors(ts));
  EXPECT_EQ(load_model_desc(dir.string()).hp.n_layers, t.layers);
  json c = tiny_config(t);
  c["num_hidden_layers"] = t.layers - 1;
  write_file(dir / "config.json", c.dump());
  expect_error(dir.string(), "tensor 'model.layers." + std::to_string(t.layers - 1) +
                                 ".input_layernorm.weight' is not used by a " + std::to_string(t.layers - 1) +
                                 "-block llama model");
  ts = tiny_tensors(t);
  ts.push_back({"model.layers.0.self_attn.q_proj.bias", "F32", {static_cast<uint64_t>(t.dim)}});
  write_file(dir / "config.json", tiny_config(t).dump());
  write_file(dir / "model.safetensors", make_safetensors(ts));
  expect_error(dir.string(), "tensor 'model.layers.0.self_attn.q_proj.bias' is not used");
}

// Issue 42/46: a window shorter than the context is the model's window (the
// attention's); use_sliding_window false, a window covering the
// context or none change nothing.
TEST_F(SafetensorsTest, ASlidingWindowShorterThanTheContextIsKept) {
  Tiny t;
  auto dir = write_model("swa", t);
  json c = tiny_config(t);
  c["model_type"] = "mistral";
  c["sliding_window"] = 1024;  // max_position_embeddings 2048
  write_file(dir / "config.json", c.dump());
  EXPECT_EQ(load_model_desc(dir.string()).hp.sliding_window, 1024);
  c["use_sliding_window"] = false;
  write_file(dir / "config.json", c.dump());
  EXPECT_EQ(load_model_desc(dir.string()).hp.sliding_window, 0);
  c.erase("use_sliding_window");
  for (const json& w : {json(2048), json(4096), json(nullptr)}) {
    c["sliding_window"] = w;
    write_file(dir / "config.json", c.dump());
    EXPECT_EQ(load_model_desc(dir.string()).hp.sliding_window, 0) << w;
  }
  // Hugging Face's Llama has no window: its config.json's key changes nothing.
  c["sliding_window"] = 1024;
  c["model_type"] = "llama";
  write_file(dir / "config.json", c.dump());
  EXPECT_EQ(load_model_desc(dir.string()).hp.sliding_window, 0);
  c.erase("model_type");
  c["architectures"] = {"MistralForCausalLM"};
  write_file(dir / "config.json", c.dump());
  EXPECT_EQ(load_model_desc(dir.string()).hp.sliding_window, 1024);
}

// layer_types names the layers the window applies to (the others attend to
// everything); a list of the wrong length or an unknown kind is an error; all
// full is no window. (Qwen2/Qwen3's max_window_layers: test_hf_layout.py.)
TEST_F(SafetensorsTest, LayerTypesNameTheWindowedLayers) {
  Tiny t;  // 2 layers
  auto dir = write_model("swa_layers", t);
  json c = tiny_config(t);
  c["model_type"] = "mistral";
  c["sliding_window"] = 64;
  c["max_window_layers"] = 1;  // Qwen's key: not Mistral's
  write_file(dir / "config.json", c.dump());
  EXPECT_TRUE(load_model_desc(dir.string()).hp.window_layers.empty());
  c["layer_types"] = {"full_attention", "sliding_attention"};
  write_file(dir / "config.json", c.dump());
  LlamaHParams hp = load_model_desc(dir.string()).hp;
  EXPECT_EQ(hp.sliding_window, 64);
  EXPECT_EQ(hp.window_layers, (std::vector<uint8_t>{0, 1}));
  EXPECT_TRUE(hp.mixed_window());
  EXPECT_EQ(hp.window_of(0), 0);
  EXPECT_EQ(hp.window_of(1), 64);
  c["layer_types"] = {"sliding_attention", "sliding_attention"};
  write_file(dir / "config.json", c.dump());
  hp = load_model_desc(dir.string()).hp;
  EXPECT_EQ(hp.sliding_window, 64);
  EXPECT_FALSE(hp.mixed_window());
  c["layer_types"] = {"full_attention", "full_attention"};
  write_file(dir / "config.json", c.dump());
  EXPECT_EQ(load_model_desc(dir.string()).hp.sliding_window, 0);
  c["layer_types"] = {"full_attention"};
  write_file(dir / "config.json", c.dump());
  expect_error(dir.string(), "'layer_types' must be an array of 2 strings");
  c["layer_types"] = {"full_attention", "chunked_attention"};
  write_file(dir / "config.json", c.dump());
  expect_error(dir.string(), "layer_types[1] = \"chunked_attention\" is unsupported");
}

// config.json's rope_scaling as per-pair frequency divisors. The tiny model's
// head dim is 4, so with rope_theta 500000 pair 0 has wavelength 2 pi and
// pair 1 2 pi * 500000^0.5 = 4442.9. Llama 3.1's parameters (factor 8,
// low 1, high 4, original context 8192) leave pair 0 and blend pair 1:
// smooth = (8192 / 4442.88 - 1) / 3 = 0.281283, divisor
// 1 / ((1 - smooth) / 8 + smooth) = 2.69453 (transformers'
// _compute_llama3_parameters, worked by hand).
TEST_F(SafetensorsTest, RopeScaling) {
  Tiny t;
  auto dir = write_model("rope", t);
  auto with = [&](const json& rs) {
    json c = tiny_config(t);
    c["rope_scaling"] = rs;
    write_file(dir / "config.json", c.dump());
    return load_model_desc(dir.string()).hp.rope_freq_factors;
  };
  json l3 = {{"rope_type", "llama3"},
             {"factor", 8.0},
             {"low_freq_factor", 1.0},
             {"high_freq_factor", 4.0},
             {"original_max_position_embeddings", 8192}};
  auto f = with(l3);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_NEAR(f[1], 2.69453f, 1e-5);
  l3["original_max_position_embeddings"] = 1024;  // wavelength 4443 > 1024: slowed by the full factor
  f = with(l3);
  EXPECT_EQ(f, (std::vector<float>{1.0f, 8.0f}));
  l3["original_max_position_embeddings"] = 20000;  // 4443 < 20000 / 4: untouched
  EXPECT_EQ(with(l3), (std::vector<float>{1.0f, 1.0f}));
  EXPECT_EQ(with({{"type", "linear"}, {"factor", 2.0}}), (std::vector<float>{2.0f, 2.0f}));
  EXPECT_TRUE(with({{"rope_type", "default"}}).empty());
  EXPECT_TRUE(with(nullptr).empty());
}

TEST_F(SafetensorsTest, ModelErrors) {
  Tiny t;
  auto dir = write_model("err", t);
  const std::string d = dir.string();
  const json good = tiny_config(t);
  auto config = [&](const std::function<void(json&)>& edit) {
    json c = good;
    edit(c);
    write_file(dir / "config.json", c.dump());
  };

  config([](json& c) {
    c["architectures"] = {"GPT2LMHeadModel"};
    c["model_type"] = "gpt2";
  });
  expect_error(d, "unsupported architecture 'GPT2LMHeadModel'");
  config([](json& c) { c["head_dim"] = 8; });
  expect_error(d, "head_dim");
  config([](json& c) { c["num_key_value_heads"] = 3; });
  expect_error(d, "num_key_value_heads");
  config([](json& c) { c["num_attention_heads"] = 5; });
  expect_error(d, "not a multiple of num_attention_heads");
  config([](json& c) { c["num_hidden_layers"] = "2"; });
  expect_error(d, "expected an integer");
  config([](json& c) { c["num_hidden_layers"] = 0; });
  expect_error(d, "out of range");
  config([](json& c) { c["hidden_size"] = -16; });
  expect_error(d, "out of range");
  config([](json& c) { c.erase("vocab_size"); });
  expect_error(d, "missing 'vocab_size'");
  config([](json& c) { c["vocab_size"] = 300; });
  expect_error(d, "model.embed_tokens.weight");
  config([](json& c) { c["num_hidden_layers"] = 3; });
  expect_error(d, "missing tensor 'model.layers.2.input_layernorm.weight'");
  config([](json& c) { c["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}}; });
  expect_error(d, "'rope_scaling' lacks 'low_freq_factor'");
  config([](json& c) { c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}}; });
  expect_error(d, "rope_scaling type 'yarn' is unsupported");
  config([](json& c) { c["rope_scaling"] = {{"type", "linear"}, {"factor", "2"}}; });
  expect_error(d, "'rope_scaling.factor' must be a number");
  config([](json& c) { c["rope_scaling"] = {{"type", "linear"}, {"factor", -2}}; });
  expect_error(d, "'rope_scaling.factor' = -2 is out of range");
  config([](json& c) { c["rope_scaling"] = 3; });
  expect_error(d, "'rope_scaling' must be an object or null");
  config([](json& c) {
    c["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 8.0},
                         {"low_freq_factor", 4.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 8192}};
  });
  expect_error(d, "must exceed");
  config([](json& c) { c["rms_norm_eps"] = 0; });
  expect_error(d, "rms_norm_eps");
  config([](json& c) { c["tie_word_embeddings"] = 1; });
  expect_error(d, "expected a bool");
  config([](json&) {});
  ASSERT_NO_THROW(load_model_desc(d));

  write_file(dir / "config.json", "{\"architectures\": [");
  expect_error(d, "config.json: invalid JSON");
  write_file(dir / "config.json", "[]");
  expect_error(d, "config.json: not a JSON object");
  fs::remove(dir / "config.json");
  expect_error(d, "no config.json in " + d);
  config([](json&) {});

  // Mis-shaped tensor.
  Tiny bad = t;
  auto ts = tiny_tensors(bad);
  for (auto& x : ts)
    if (x.name == "model.layers.1.self_attn.k_proj.weight") x.shape = {16, 16};
  write_file(dir / "model.safetensors", make_safetensors(ts));
  expect_error(d, "model.layers.1.self_attn.k_proj.weight");
  // 3-D tensor.
  for (auto& x : ts)
    if (x.name == "model.layers.1.self_attn.k_proj.weight") x.shape = {2, 4, 16};
  write_file(dir / "model.safetensors", make_safetensors(ts));
  expect_error(d, "3 dimensions");
  // Unsupported dtype in a required tensor.
  ts = tiny_tensors(bad);
  ts[5].dtype = "I8";
  write_file(dir / "model.safetensors", make_safetensors(ts));
  expect_error(d, "unsupported tensor type I8");
  // Untied but no lm_head.
  ts = tiny_tensors(bad);
  ts.erase(ts.begin() + 2);
  write_file(dir / "model.safetensors", make_safetensors(ts));
  expect_error(d, "missing tensor 'lm_head.weight'");

  write_file(dir / "model.safetensors", make_safetensors(tiny_tensors(t)));
  fs::remove(dir / "tokenizer.json");
  expect_error(d, "no tokenizer.json in " + d);
  write_file(dir / "tokenizer.json", tiny_tokenizer_json());

  fs::remove(dir / "model.safetensors");
  expect_error(d, "no *.safetensors files");
  expect_error((dir / "gone.safetensors").string(), "cannot open");
}

TEST_F(SafetensorsTest, IndexErrors) {
  Tiny t;
  auto dir = write_model("idx", t, 2);
  const std::string d = dir.string();
  const fs::path idx = dir / "model.safetensors.index.json";
  const std::string good = read_file(idx);
  ASSERT_NO_THROW(load_model_desc(d));

  fs::rename(dir / "model-00002-of-00002.safetensors", dir / "moved.safetensors");
  expect_error(d, "missing shard file " + d + "/model-00002-of-00002.safetensors");
  fs::rename(dir / "moved.safetensors", dir / "model-00002-of-00002.safetensors");

  write_file(idx, R"({"weight_map": {"model.norm.weight": "../etc/passwd"}})");
  expect_error(d, "invalid shard file name");
  write_file(idx, R"({"weight_map": {"model.norm.weight": 7}})");
  expect_error(d, "not a string");
  write_file(idx, R"({"weight_map": []})");
  expect_error(d, "weight_map");
  write_file(idx, R"({"weight_map": {}})");
  expect_error(d, "empty weight_map");
  write_file(idx, "{");
  expect_error(d, "index.json: invalid JSON");

  // A tensor present in two shards.
  json wm = json::parse(good);
  write_file(dir / "extra.safetensors", make_safetensors({{"model.norm.weight", "F32", {16}}}));
  wm["weight_map"]["model.norm.weight"] = "extra.safetensors";
  write_file(idx, wm.dump());
  expect_error(d, "duplicate tensor 'model.norm.weight'");
}

}  // namespace
}  // namespace redwood
