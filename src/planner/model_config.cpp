#include "src/planner/model_config.h"

#include <map>

#include "src/util/toml_section.h"
#include "src/util/toml_util.h"
#include "src/util/error.h"

namespace redwood::planner {

namespace {

// Reads key into out if present; a name that is not a weight type is an error.
void dtype_choice(const config::Section& s, const char* key, std::string& out) {
  s.choice(key, out,
           {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
            "IQ4_NL", "IQ4_XS"});
}

DType dtype_from(const config::Section& s, const char* key, const std::string& v) {
  for (const DTypeInfo& i : kDTypes)
    if (i.name == v) return i.type;
  return DType::F32;  // unreachable: choice() checked the name
}

}  // namespace

ModelConfig parse_model_config(std::string_view text, const std::string& name) {
  using config::require, config::Section;
  const toml::table root = config::parse_toml(text, name);
  std::map<std::string, int> lines;
  const Section s(name, lines, &root, "");
  s.only({"name", "source", "architecture", "layers", "dim", "heads", "kv_heads", "head_dim", "ffn", "vocab", "tied",
          "dtype", "embedding_dtype", "context", "rope_base"});
  require(name, s, {"name", "layers", "dim", "heads", "ffn", "vocab", "dtype"});
  ModelConfig c;
  c.file = name;
  s.str("name", c.name);
  s.str("source", c.source);
  auto& hp = c.hp;
  // The family, as a model file names it: qwen2's layers carry q/k/v biases,
  // qwen3's per-head q/k norms (F32 vectors, always resident).
  s.choice("architecture", hp.arch, {"llama", "qwen2", "qwen3"});
  hp.qkv_bias = hp.arch == "qwen2";
  hp.qk_norm = hp.arch == "qwen3";
  s.integer("layers", hp.n_layers, 1, 1024);
  s.integer("dim", hp.dim, 1, 1 << 20);
  s.integer("heads", hp.n_heads, 1, 4096);
  hp.n_kv_heads = hp.n_heads;
  s.integer("kv_heads", hp.n_kv_heads, 1, 4096);
  s.integer("ffn", hp.ffn_dim, 1, 1 << 22);
  s.integer("vocab", hp.vocab, 1, 1 << 24);
  s.integer("context", hp.ctx_len, 0, 1 << 26);
  double rope = hp.rope_base;
  s.number("rope_base", rope, 1, 1e12, true);  // as a model file's (validate_model_desc)
  hp.rope_base = static_cast<float>(rope);
  s.boolean("tied", hp.tied_lm_head);
  if (hp.dim % hp.n_heads != 0 && !s.has("head_dim"))
    s.fail("heads", *root.get("heads"),
           "dim " + std::to_string(hp.dim) + " is not a multiple of " + std::to_string(hp.n_heads) +
               " heads (give head_dim)");
  hp.head_dim = hp.dim / hp.n_heads;
  s.integer("head_dim", hp.head_dim, 1, 1 << 16);
  if (hp.n_heads % hp.n_kv_heads != 0)
    s.fail("kv_heads", *root.get("kv_heads"),
           std::to_string(hp.n_heads) + " heads are not a multiple of " + std::to_string(hp.n_kv_heads) + " KV heads");
  std::string dt, et;
  dtype_choice(s, "dtype", dt);
  c.dtype = dtype_from(s, "dtype", dt);
  c.embedding_dtype = c.dtype;
  dtype_choice(s, "embedding_dtype", et);
  if (!et.empty()) c.embedding_dtype = dtype_from(s, "embedding_dtype", et);
  // Every matrix row must be a whole number of blocks.
  const uint64_t q_dim = static_cast<uint64_t>(hp.n_heads) * hp.head_dim;
  for (uint64_t cols : {static_cast<uint64_t>(hp.dim), q_dim, static_cast<uint64_t>(hp.ffn_dim)})
    if (!row_bytes(c.dtype, cols))
      s.fail("dtype", *root.get("dtype"),
             dt + " needs rows that are a multiple of " + std::to_string(dtype_info(c.dtype).block_elems) +
                 " elements, but a matrix has " + std::to_string(cols) + " columns");
  if (!row_bytes(c.embedding_dtype, static_cast<uint64_t>(hp.dim)))
    s.fail(s.has("embedding_dtype") ? "embedding_dtype" : "dtype",
           *root.get(s.has("embedding_dtype") ? "embedding_dtype" : "dtype"),
           "the embedding's rows of " + std::to_string(hp.dim) + " elements are not whole blocks");
  return c;
}

ModelConfig load_model_config(const std::string& path) {
  return parse_model_config(read_text_file(path, "model config"), path);
}

ModelDesc model_desc_from_config(const ModelConfig& cfg) {
  ModelDesc m;
  m.path = cfg.file.empty() ? cfg.name : cfg.file;
  m.name = cfg.name;
  m.files = {m.path + " (virtual)"};
  m.hp = cfg.hp;
  const auto& hp = m.hp;
  uint64_t off = 0;
  auto tensor = [&](const char* name, DType t, int64_t rows, int64_t cols) {
    TensorExtent e;
    e.name = name, e.type = t, e.rows = rows, e.cols = cols, e.offset = off;
    e.bytes = static_cast<uint64_t>(rows) * *row_bytes(t, static_cast<uint64_t>(cols));
    off += (e.bytes + 31) / 32 * 32;
    return e;
  };
  const int64_t q = static_cast<int64_t>(hp.n_heads) * hp.head_dim;
  const int64_t kv = static_cast<int64_t>(hp.n_kv_heads) * hp.head_dim;
  m.tok_embd = tensor("token_embd.weight", cfg.embedding_dtype, hp.vocab, hp.dim);
  for (int l = 0; l < hp.n_layers; ++l) {
    LayerDesc L;
    L.attn_norm = tensor("attn_norm.weight", DType::F32, 1, hp.dim);
    L.wq = tensor("attn_q.weight", cfg.dtype, q, hp.dim);
    L.wk = tensor("attn_k.weight", cfg.dtype, kv, hp.dim);
    L.wv = tensor("attn_v.weight", cfg.dtype, kv, hp.dim);
    L.wo = tensor("attn_output.weight", cfg.dtype, hp.dim, q);
    L.ffn_norm = tensor("ffn_norm.weight", DType::F32, 1, hp.dim);
    L.w_gate = tensor("ffn_gate.weight", cfg.dtype, hp.ffn_dim, hp.dim);
    L.w_up = tensor("ffn_up.weight", cfg.dtype, hp.ffn_dim, hp.dim);
    L.w_down = tensor("ffn_down.weight", cfg.dtype, hp.dim, hp.ffn_dim);
    if (hp.qkv_bias) {
      L.bq = tensor("attn_q.bias", DType::F32, 1, q);
      L.bk = tensor("attn_k.bias", DType::F32, 1, kv);
      L.bv = tensor("attn_v.bias", DType::F32, 1, kv);
    }
    if (hp.qk_norm) {
      L.q_norm = tensor("attn_q_norm.weight", DType::F32, 1, hp.head_dim);
      L.k_norm = tensor("attn_k_norm.weight", DType::F32, 1, hp.head_dim);
    }
    m.layers.push_back(L);
  }
  m.output_norm = tensor("output_norm.weight", DType::F32, 1, hp.dim);
  m.lm_head = hp.tied_lm_head ? m.tok_embd : tensor("output.weight", cfg.embedding_dtype, hp.vocab, hp.dim);
  validate_model_desc(m);
  return m;
}

uint64_t parameter_count(const ModelDesc& m) {
  auto el = [](const TensorExtent& e) { return static_cast<uint64_t>(e.rows) * static_cast<uint64_t>(e.cols); };
  uint64_t n = el(m.tok_embd) + el(m.output_norm) + (m.hp.tied_lm_head ? 0 : el(m.lm_head));
  for (const LayerDesc& L : m.layers)
    for (const TensorExtent* t : L.tensors()) n += el(*t);
  return n;
}

double packed_ratio(DType t) {
  // Stored / raw size of `redwood pack` on real weights' exponent statistics
  // (SmolLM2 requantized): docs/PERFORMANCE.md, "Packed models".
  switch (t) {
    case DType::BF16:
      return 0.707;
    case DType::F16:
      return 0.883;
    case DType::F32:
      return 0.854;
    default:
      return 1.0;
  }
}

void assume_packed(ModelDesc& m) {
  auto pack = [](TensorExtent& t) {
    t.packed = true;
    t.stored_bytes = static_cast<uint64_t>(static_cast<double>(t.bytes) * packed_ratio(t.type)) + 4096;
  };
  pack(m.tok_embd);
  pack(m.output_norm);
  pack(m.lm_head);
  for (LayerDesc& L : m.layers)
    for (TensorExtent* t : {&L.attn_norm, &L.wq, &L.wk, &L.wv, &L.wo, &L.ffn_norm, &L.w_gate, &L.w_up, &L.w_down})
      pack(*t);
}

}  // namespace redwood::planner
