#include "src/model/model_desc.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <unordered_set>

#include "kernels/common/math.h"
#include "src/model/gguf.h"
#include "src/model/packed.h"
#include "src/model/safetensors.h"
#include "src/model/tokenizer_spec.h"
#include "src/util/error.h"
#include "src/util/io.h"

namespace redwood {

uint64_t LayerDesc::bytes() const {
  uint64_t b = 0;
  for (const auto* t : tensors()) b += t->bytes;
  return b;
}

std::vector<const TensorExtent*> LayerDesc::tensors() const {
  std::vector<const TensorExtent*> v = {&attn_norm, &wq, &wk, &wv, &wo, &ffn_norm, &w_gate, &w_up, &w_down};
  for (const TensorExtent* t : {&bq, &bk, &bv, &q_norm, &k_norm})
    if (!t->name.empty()) v.push_back(t);
  return v;
}

std::vector<const TensorExtent*> LayerDesc::vectors() const {
  std::vector<const TensorExtent*> v = {&attn_norm, &ffn_norm};
  for (const TensorExtent* t : {&bq, &bk, &bv, &q_norm, &k_norm})
    if (!t->name.empty()) v.push_back(t);
  return v;
}

std::vector<TensorExtent*> LayerDesc::optional_vectors() {
  return {&bq, &bk, &bv, &q_norm, &k_norm};
}

void set_sliding_window(LlamaHParams& hp, int window, std::vector<uint8_t> layers) {
  const bool any = std::any_of(layers.begin(), layers.end(), [](uint8_t w) { return w != 0; });
  const bool all = std::all_of(layers.begin(), layers.end(), [](uint8_t w) { return w != 0; });
  hp.sliding_window = window > 0 && any ? window : 0;
  hp.window_layers.clear();
  if (hp.sliding_window > 0 && !all) hp.window_layers = std::move(layers);
}

std::vector<double> rope_inv_freqs(const LlamaHParams& hp) {
  const int half = hp.head_dim / 2;
  std::vector<double> f(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i)
    f[i] = math::rope_inv_freq(i, hp.head_dim, hp.rope_base,
                               hp.rope_freq_factors.empty() ? 1.0 : static_cast<double>(hp.rope_freq_factors[i]));
  return f;
}

uint64_t ModelDesc::total_bytes() const {
  uint64_t b = tok_embd.bytes + output_norm.bytes + (hp.tied_lm_head ? 0 : lm_head.bytes);
  for (const auto& l : layers) b += l.bytes();
  return b;
}

namespace {

void check_shape(const ModelDesc& m, const TensorExtent& t, int64_t rows, int64_t cols) {
  if (t.rows != rows || t.cols != cols)
    throw Error(m.path + ": tensor '" + t.name + "' has shape [" + std::to_string(t.rows) + " x " +
                std::to_string(t.cols) + "], expected [" + std::to_string(rows) + " x " + std::to_string(cols) + "]");
}

void check_vector(const ModelDesc& m, const TensorExtent& t, int64_t n) {
  check_shape(m, t, 1, n);
  if (t.type != DType::F32 && t.type != DType::F16 && t.type != DType::BF16)
    throw Error(m.path + ": vector tensor '" + t.name + "' must be F32/F16/BF16, not " + std::string(dtype_name(t.type)));
}

// An optional vector: present exactly when `wanted` (the family's flag).
void check_optional(const ModelDesc& m, const TensorExtent& t, bool wanted, int64_t n, const char* what) {
  if (!wanted) {
    if (!t.name.empty()) throw Error(m.path + ": tensor '" + t.name + "' (" + what + ") is not used by this model");
    return;
  }
  if (t.name.empty()) throw Error(m.path + ": a layer lacks its " + std::string(what));
  check_vector(m, t, n);
}

TensorExtent extent_from_gguf(const GgufFile& f, const std::string& name) {
  const GgufTensorInfo* ti = f.find_tensor(name);
  if (!ti) throw Error(f.path() + ": missing tensor '" + name + "'");
  if (ti->n_dims > 2 && (ti->ne[2] != 1 || ti->ne[3] != 1))
    throw Error(f.path() + ": tensor '" + name + "' has more than 2 dimensions");
  TensorExtent e;
  e.name = name;
  e.file = 0;
  e.offset = ti->offset;
  e.bytes = ti->bytes;
  e.type = ti->type;
  e.cols = static_cast<int64_t>(ti->ne[0]);
  e.rows = static_cast<int64_t>(ti->ne[1]);
  return e;
}

int positive_int(const GgufFile& f, const std::string& key, std::optional<uint64_t> v, uint64_t max) {
  if (!v) throw Error(f.path() + ": missing metadata key '" + key + "'");
  if (*v == 0 || *v > max)
    throw Error(f.path() + ": metadata key '" + key + "' = " + std::to_string(*v) + " is out of range (1.." +
                std::to_string(max) + ")");
  return static_cast<int>(*v);
}

// RoPE frequency scaling of a GGUF model: Llama 3.x's per-pair divisors
// (tensor rope_freqs.weight, F32, head_dim / 2 values) times the linear factor
// (rope.scaling.factor or the older rope.scale_linear, unless
// rope.scaling.type is "none"). Empty when neither is present.
std::vector<float> gguf_rope_factors(const GgufFile& f, const std::string& p, int head_dim,
                                     const GgufTensorReader& read) {
  const size_t half = static_cast<size_t>(head_dim / 2);
  std::vector<float> out;
  if (const GgufTensorInfo* t = f.find_tensor("rope_freqs.weight")) {
    if (t->type != DType::F32 || t->ne[0] != half || t->n_elements() != half)
      throw Error(f.path() + ": tensor 'rope_freqs.weight' must be an F32 vector of " + std::to_string(half) +
                  " values (head dim / 2), not " + std::string(dtype_name(t->type)) + " with " +
                  std::to_string(t->n_elements()));
    out.resize(half);
    if (read) {
      read("rope_freqs.weight", out.data(), half * sizeof(float));
    } else {
      std::ifstream in(f.path(), std::ios::binary);
    in.seekg(static_cast<std::streamoff>(t->offset));
    in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(half * sizeof(float)));
      if (!in) throw Error(f.path() + ": cannot read tensor 'rope_freqs.weight'");
    }
  }  // the values are bounded by validate_model_desc, whatever their source
  // As llama.cpp reads them: the factor from rope.scaling.factor, else the
  // older rope.scale_linear; 0 or absent means none; the type defaults to
  // linear, and "none" switches the factor off.
  const std::string type = f.get_string(p + "rope.scaling.type").value_or("linear");
  if (type != "linear" && type != "none")
    throw Error(f.path() + ": RoPE scaling '" + type +
                "' is unsupported (supported: none, linear, Llama 3 rope_freqs)");
  // A factor of 0 is "unscaled", as llama.cpp reads it (the reference this
  // follows); any other written factor must be finite and in 1e-6..1e6, as
  // config.json's rope_scaling.
  double linear = f.get_float(p + "rope.scaling.factor").value_or(f.get_float(p + "rope.scale_linear").value_or(1.0));
  if (linear == 0.0 || type == "none") linear = 1.0;
  if (!(linear >= 1e-6 && linear <= 1e6))
    throw Error(f.path() + ": RoPE scaling factor " + short_number(linear) + " is out of range (1e-6 .. 1e6)");
  if (linear != 1.0) {
    if (out.empty()) out.assign(half, 1.0f);
    for (float& v : out) v = static_cast<float>(v * linear);
  }
  return out;
}

}  // namespace

ArchTraits arch_traits(const std::string& arch, const std::string& path) {
  if (arch == "llama") return {RopeMode::kInterleaved, false};  // the converter permutes Wq/Wk
  if (arch == "qwen2") return {RopeMode::kHalf, false};
  if (arch == "qwen3") return {RopeMode::kHalf, true};
  // Known families with a feature Redwood does not implement: say which.
  static const std::pair<const char*, const char*> kMissing[] = {
      {"qwen2moe", "mixture-of-experts feed-forward layers"},
      {"qwen3moe", "mixture-of-experts feed-forward layers"},
      {"qwen35moe", "mixture-of-experts feed-forward layers"},
      {"llama4", "mixture-of-experts feed-forward layers and chunked attention"},
      {"mixtral", "mixture-of-experts feed-forward layers"},
      {"qwen2vl", "multimodal rotary embeddings (M-RoPE)"},
      {"qwen3vl", "multimodal rotary embeddings (M-RoPE)"},
      {"qwen3next", "linear-attention (gated delta net) layers"},
      {"qwen35", "linear-attention (gated delta net) layers"},
      {"gemma", "Gemma's scaled embeddings and GELU feed-forward"},
      {"gemma2", "Gemma's logit soft-capping and sliding-window layers"},
      {"gemma3", "Gemma's sliding-window layers and GELU feed-forward"},
      {"phi3", "fused QKV and gate-up projections"},
  };
  for (const auto& [name, missing] : kMissing)
    if (arch == name)
      throw Error(path + ": architecture '" + arch + "' needs " + missing + ", which Redwood does not implement");
  throw Error(path + ": unsupported architecture '" + arch + "' (supported: llama, qwen2, qwen3)");
}

ModelDesc model_desc_from_gguf(const GgufFile& f, const std::string& path, const GgufTensorReader& read) {
  ModelDesc m;
  m.path = path;
  m.format = ModelFormat::kGguf;
  m.files = {path};
  const std::string arch = f.get_string("general.architecture").value_or("");
  if (arch.empty()) throw Error(path + ": missing metadata key 'general.architecture'");
  const ArchTraits traits = arch_traits(arch, path);
  m.name = f.get_string("general.name").value_or("");
  const std::string p = arch + ".";
  auto& hp = m.hp;
  hp.arch = arch;
  hp.qk_norm = traits.qk_norm;
  if (auto ne = f.get_uint(p + "expert_count"); ne && *ne > 0)
    throw Error(path + ": architecture '" + arch + "' with " + std::to_string(*ne) +
                " experts: mixture-of-experts feed-forward layers are not supported");
  hp.n_layers = positive_int(f, p + "block_count", f.get_uint(p + "block_count"), 4096);
  hp.dim = positive_int(f, p + "embedding_length", f.get_uint(p + "embedding_length"), 1 << 17);
  hp.n_heads = positive_int(f, p + "attention.head_count", f.get_uint(p + "attention.head_count"), 4096);
  auto kv = f.get_uint(p + "attention.head_count_kv");
  hp.n_kv_heads = kv ? positive_int(f, p + "attention.head_count_kv", kv, 4096) : hp.n_heads;
  hp.ffn_dim = positive_int(f, p + "feed_forward_length", f.get_uint(p + "feed_forward_length"), 1 << 20);
  hp.ctx_len = static_cast<int>(f.get_uint(p + "context_length").value_or(0) & 0x7fffffff);
  hp.rope_base = static_cast<float>(f.get_float(p + "rope.freq_base").value_or(10000.0));
  hp.rms_eps = static_cast<float>(f.get_float(p + "attention.layer_norm_rms_epsilon").value_or(1e-5));
  if (!(hp.rope_base > 1.0f) || !(hp.rms_eps > 0.0f) || !(hp.rms_eps < 1.0f))
    throw Error(path + ": invalid rope.freq_base or layer_norm_rms_epsilon");
  // The head size: attention.key_length when written (Qwen3: q heads * head
  // size need not be the embedding length), else embedding_length / head_count.
  if (auto kl = f.get_uint(p + "attention.key_length")) {
    hp.head_dim = positive_int(f, p + "attention.key_length", kl, 1 << 16);
  } else {
    if (hp.dim % hp.n_heads != 0) throw Error(path + ": embedding_length is not a multiple of head_count");
    hp.head_dim = hp.dim / hp.n_heads;
  }
  if (auto vl = f.get_uint(p + "attention.value_length"); vl && *vl != static_cast<uint64_t>(hp.head_dim))
    throw Error(path + ": attention.value_length " + std::to_string(*vl) + " != key_length " +
                std::to_string(hp.head_dim) + " is not supported");
  if (auto rd = f.get_uint(p + "rope.dimension_count"); rd && *rd != static_cast<uint64_t>(hp.head_dim))
    throw Error(path + ": partial RoPE (rope.dimension_count != head dim) is not supported");
  if (hp.n_heads % hp.n_kv_heads != 0) throw Error(path + ": head_count is not a multiple of head_count_kv");
  if (hp.head_dim % 2 != 0) throw Error(path + ": head dimension must be even");
  // A window that covers the training context changes nothing; a shorter one
  // is the attention's (AttentionArgs::window).
  const auto sw = f.get_uint(p + "attention.sliding_window");  // 0: none
  if (sw && *sw != 0 && !(hp.ctx_len > 0 && *sw >= static_cast<uint64_t>(hp.ctx_len)))
    hp.sliding_window = static_cast<int>(std::min<uint64_t>(*sw, uint64_t{1} << 30));
  // The layers it applies to (llama.cpp's attention.sliding_window_pattern, as
  // its converter writes it from config.json's layer_types): one bool a layer.
  // The integer form's first layer differs by architecture in llama.cpp, so
  // it is refused rather than guessed.
  if (const GgufValue* pat = f.find(p + "attention.sliding_window_pattern")) {
    if (pat->type != GgufType::ARRAY || pat->elem != GgufType::BOOL ||
        pat->arr.size() != static_cast<size_t>(hp.n_layers))
      throw Error(path + ": " + p + "attention.sliding_window_pattern is unsupported unless an array of one bool a "
                  "layer (" + std::to_string(hp.n_layers) + ")");
    std::vector<uint8_t> layers;
    for (const GgufValue& e : pat->arr) layers.push_back(e.u != 0 ? 1 : 0);
    set_sliding_window(hp, hp.sliding_window, std::move(layers));
  }
  hp.rope_mode = traits.rope_mode;
  hp.rope_freq_factors = gguf_rope_factors(f, p, hp.head_dim, read);

  m.tok_embd = extent_from_gguf(f, "token_embd.weight");
  hp.vocab = static_cast<int>(m.tok_embd.rows);
  if (auto vs = f.get_uint(p + "vocab_size"); vs && *vs != static_cast<uint64_t>(hp.vocab))
    throw Error(path + ": vocab_size " + std::to_string(*vs) + " disagrees with token_embd rows " +
                std::to_string(hp.vocab));
  m.output_norm = extent_from_gguf(f, "output_norm.weight");
  if (f.find_tensor("output.weight")) {
    m.lm_head = extent_from_gguf(f, "output.weight");
  } else {
    m.lm_head = m.tok_embd;
    hp.tied_lm_head = true;
  }
  m.layers.resize(hp.n_layers);
  for (int i = 0; i < hp.n_layers; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    auto& L = m.layers[i];
    L.attn_norm = extent_from_gguf(f, b + "attn_norm.weight");
    L.wq = extent_from_gguf(f, b + "attn_q.weight");
    L.wk = extent_from_gguf(f, b + "attn_k.weight");
    L.wv = extent_from_gguf(f, b + "attn_v.weight");
    L.wo = extent_from_gguf(f, b + "attn_output.weight");
    L.ffn_norm = extent_from_gguf(f, b + "ffn_norm.weight");
    L.w_gate = extent_from_gguf(f, b + "ffn_gate.weight");
    L.w_up = extent_from_gguf(f, b + "ffn_up.weight");
    L.w_down = extent_from_gguf(f, b + "ffn_down.weight");
    // Biases: data, in any family (llama.cpp reads them where present); all
    // layers or none (validate_model_desc).
    if (f.find_tensor(b + "attn_q.bias") || f.find_tensor(b + "attn_k.bias") || f.find_tensor(b + "attn_v.bias")) {
      L.bq = extent_from_gguf(f, b + "attn_q.bias");
      L.bk = extent_from_gguf(f, b + "attn_k.bias");
      L.bv = extent_from_gguf(f, b + "attn_v.bias");
      if (i == 0) hp.qkv_bias = true;
    }
    if (hp.qk_norm) {
      L.q_norm = extent_from_gguf(f, b + "attn_q_norm.weight");
      L.k_norm = extent_from_gguf(f, b + "attn_k_norm.weight");
    }
  }
  std::vector<std::string> names;
  for (const GgufTensorInfo& t : f.tensors())
    if (t.name != "rope_freqs.weight") names.push_back(t.name);  // read by gguf_rope_factors
  check_tensors_used(m, names);
  m.tokenizer = tokenizer_spec_from_gguf(f);
  m.chat_template = f.get_string("tokenizer.chat_template").value_or("");
  validate_model_desc(m);
  return m;
}

namespace {

bool is_dir(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

void validate_model_desc(const ModelDesc& m) {
  const auto& hp = m.hp;
  if (!std::isfinite(hp.rope_base) || !(hp.rope_base > 1.0f))  // GGUF rope.freq_base, config.json rope_theta
    throw Error(m.path + ": the RoPE base (rope.freq_base, rope_theta) must be a finite number greater than 1, got " +
                short_number(hp.rope_base));
  const int64_t q_dim = static_cast<int64_t>(hp.n_heads) * hp.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(hp.n_kv_heads) * hp.head_dim;
  check_shape(m, m.tok_embd, hp.vocab, hp.dim);
  check_vector(m, m.output_norm, hp.dim);
  check_shape(m, m.lm_head, hp.vocab, hp.dim);
  for (const auto& L : m.layers) {
    // The attention widths follow the head size (key_length / head_dim), say so.
    using Width = std::pair<const TensorExtent*, int>;
    for (const auto& [t, heads] : {Width{&L.wq, hp.n_heads}, Width{&L.wk, hp.n_kv_heads}, Width{&L.wv, hp.n_kv_heads}})
      if (t->rows != static_cast<int64_t>(heads) * hp.head_dim)
        throw Error(m.path + ": tensor '" + t->name + "' has " + std::to_string(t->rows) + " rows, expected " +
                    std::to_string(heads) + " heads x head_dim " + std::to_string(hp.head_dim));
    check_vector(m, L.attn_norm, hp.dim);
    check_vector(m, L.ffn_norm, hp.dim);
    check_shape(m, L.wq, q_dim, hp.dim);
    check_shape(m, L.wk, kv_dim, hp.dim);
    check_shape(m, L.wv, kv_dim, hp.dim);
    check_shape(m, L.wo, hp.dim, q_dim);
    check_shape(m, L.w_gate, hp.ffn_dim, hp.dim);
    check_shape(m, L.w_up, hp.ffn_dim, hp.dim);
    check_shape(m, L.w_down, hp.dim, hp.ffn_dim);
    check_optional(m, L.bq, hp.qkv_bias, q_dim, "q bias");
    check_optional(m, L.bk, hp.qkv_bias, kv_dim, "k bias");
    check_optional(m, L.bv, hp.qkv_bias, kv_dim, "v bias");
    check_optional(m, L.q_norm, hp.qk_norm, hp.head_dim, "q norm");
    check_optional(m, L.k_norm, hp.qk_norm, hp.head_dim, "k norm");
  }
  if (!hp.rope_freq_factors.empty()) {
    if (hp.rope_freq_factors.size() != static_cast<size_t>(hp.head_dim / 2))
      throw Error(m.path + ": " + std::to_string(hp.rope_freq_factors.size()) +
                  " RoPE frequency factors, expected head dim / 2 = " + std::to_string(hp.head_dim / 2));
    for (float v : hp.rope_freq_factors)  // bounded: a tiny divisor would overflow the angles to inf
      if (!(v >= 1e-6f && v <= 1e6f))
        throw Error(m.path + ": RoPE frequency factor " + short_number(v) + " is out of range (1e-6..1e6)");
  }
  if (!m.tokenizer.tokens.empty() && static_cast<int>(m.tokenizer.tokens.size()) > hp.vocab)
    throw Error(m.path + ": tokenizer has " + std::to_string(m.tokenizer.tokens.size()) +
                " tokens but the model's vocabulary is " + std::to_string(hp.vocab));
}

std::string draft_vocab_mismatch(const ModelDesc& target, const ModelDesc& draft) {
  if (draft.hp.vocab > target.hp.vocab)
    return "the draft's vocabulary (" + std::to_string(draft.hp.vocab) + " rows) is larger than the target's (" +
           std::to_string(target.hp.vocab) + " rows, " + target.path +
           "): the draft could propose tokens the target does not have";
  const std::vector<std::string>& dt = draft.tokenizer.tokens;
  const std::vector<std::string>& tt = target.tokenizer.tokens;
  if (dt.empty() || tt.empty()) return "";  // a model config: rows only
  const std::vector<TokenType>& types = draft.tokenizer.types;
  const auto shown = [](std::string t) {  // one line whatever the token holds
    for (char& c : t)
      if (static_cast<unsigned char>(c) < 0x20) c = '?';
    return "'" + t + "'";
  };
  for (size_t i = 0; i < dt.size(); ++i) {
    if (i < tt.size()) {
      if (dt[i] != tt[i])
        return "the draft's vocabulary differs from the target's (" + target.path + "): token " + std::to_string(i) +
               " is " + shown(dt[i]) + " in the draft, " + shown(tt[i]) + " in the target";
    } else if (i >= types.size() || types[i] != TokenType::kUnused) {
      return "the draft's vocabulary differs from the target's (" + target.path + "): the draft's token " +
             std::to_string(i) + " (" + shown(dt[i]) + ") is past the target's " + std::to_string(tt.size()) +
             " tokens and is not padding";
    }
  }
  return "";
}

void check_tensors_used(const ModelDesc& m, const std::vector<std::string>& names) {
  std::unordered_set<std::string> used = {m.tok_embd.name, m.output_norm.name, m.lm_head.name};
  for (const auto& L : m.layers)
    for (const TensorExtent* t : L.tensors()) used.insert(t->name);
  for (const std::string& n : names)
    if (!used.count(n))
      throw Error(m.path + ": tensor '" + n + "' is not used by a " + std::to_string(m.hp.n_layers) + "-block " +
                  m.hp.arch + " model");
}

ModelDesc load_model_desc(const std::string& path) {
  if (is_dir(path)) return load_safetensors_desc(path);
  require_regular_input(path, "a model");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open: " + strerror(errno));
  char magic[4] = {};
  in.read(magic, 4);
  if (in.gcount() == 4 && memcmp(magic, "GGUF", 4) == 0) return model_desc_from_gguf(GgufFile::open(path), path);
  if (in.gcount() == 4 && memcmp(magic, kPackMagic, 4) == 0) return load_packed_desc(path);
  if (path.size() > 12 && path.ends_with(".safetensors")) return load_safetensors_desc(path);
  throw Error(path + ": not a GGUF file (bad magic), not a packed model (redwood pack) and not a safetensors directory");
}

}  // namespace redwood
