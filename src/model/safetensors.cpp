#include "src/model/safetensors.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "kernels/common/math.h"
#include "src/model/tokenizer_spec.h"
#include "src/util/error.h"
#include "src/util/io.h"

namespace redwood {

namespace {

using nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;   // what the reference implementation allows
constexpr uint64_t kMaxJsonFileBytes = 64ull << 20;  // config.json, index, tokenizer_config.json
constexpr uint64_t kMaxDim = 1ull << 48;
constexpr size_t kMaxRank = 8;
constexpr int kMaxJsonDepth = 64;

bool is_dir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// A regular file; a FIFO, device or socket under that name is an error
// (never opened: a FIFO would block), a directory or nothing is false.
bool is_file(const std::string& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return false;
  if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) require_regular_input(p, "a model file");
  return S_ISREG(st.st_mode);
}

// Opens a regular file for reading; returns its size.
uint64_t open_regular(const std::string& path, Fd& fd) {
  // O_NONBLOCK: a FIFO must not block the open (it is refused below).
  fd.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd.fd < 0) throw Error(path + ": cannot open: " + strerror(errno));
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) throw Error(path + ": cannot stat: " + strerror(errno));
  if (!S_ISREG(st.st_mode))
    throw Error(path + ": not a regular file (" + file_kind(st.st_mode) + "; a model must be a regular file)");
  return static_cast<uint64_t>(st.st_size);
}

// Parses JSON text; any syntax error, or nesting deeper than kMaxJsonDepth, is a
// redwood::Error naming `path`. If `dup_key_what` is set, a repeated key in the
// top-level object is an error ("duplicate <what> 'key'").
json parse_json(const std::string& text, const std::string& path, const char* dup_key_what = nullptr) {
  std::set<std::string> top_keys;
  json::parser_callback_t cb = [&](int depth, json::parse_event_t event, json& parsed) -> bool {
    if (depth > kMaxJsonDepth) throw Error(path + ": JSON nested too deeply");
    if (dup_key_what && event == json::parse_event_t::key && depth == 1) {
      const std::string& k = parsed.get_ref<const std::string&>();
      if (!top_keys.insert(k).second) throw Error(path + ": duplicate " + dup_key_what + " '" + k + "'");
    }
    return true;
  };
  try {
    return json::parse(text, cb);
  } catch (const json::exception& e) {
    // Drop nlohmann's "[json.exception.parse_error.101] " prefix.
    std::string what = e.what();
    if (what.starts_with("[json.exception.")) {
      const auto close = what.find("] ");
      if (close != std::string::npos) what.erase(0, close + 2);
    }
    throw Error(path + ": invalid JSON: " + what);
  }
}

json read_json_file(const std::string& path) {
  Fd fd;
  const uint64_t size = open_regular(path, fd);
  if (size > kMaxJsonFileBytes) throw Error(path + ": file too large (" + std::to_string(size) + " bytes)");
  std::string text(size, '\0');
  read_exact(fd.fd, path, text.data(), size, 0);
  return parse_json(text, path);
}

std::string json_kind(const json& j) {
  return j.type_name();
}

std::optional<DType> dtype_from_safetensors(const std::string& s) {
  if (s == "F32") return DType::F32;
  if (s == "F16") return DType::F16;
  if (s == "BF16") return DType::BF16;
  return std::nullopt;
}

// ---- config.json accessors --------------------------------------------------------

struct Config {
  const json& j;
  const std::string& path;

  const json* find(const char* key) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return nullptr;
    return &*it;
  }

  std::optional<int64_t> get_int(const char* key, int64_t max) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_number_integer())
      throw Error(path + ": '" + key + "' has type " + json_kind(*v) + ", expected an integer");
    if (v->is_number_unsigned()) {
      const uint64_t u = v->get<uint64_t>();
      if (u == 0 || u > static_cast<uint64_t>(max))
        throw Error(path + ": '" + key + "' = " + std::to_string(u) + " is out of range (1.." + std::to_string(max) +
                    ")");
      return static_cast<int64_t>(u);
    }
    throw Error(path + ": '" + key + "' = " + std::to_string(v->get<int64_t>()) + " is out of range (1.." +
                std::to_string(max) + ")");
  }

  int require_int(const char* key, int64_t max) const {
    auto v = get_int(key, max);
    if (!v) throw Error(path + ": missing '" + key + "'");
    return static_cast<int>(*v);
  }

  std::optional<double> get_float(const char* key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_number()) throw Error(path + ": '" + key + "' has type " + json_kind(*v) + ", expected a number");
    return v->get<double>();
  }

  std::optional<bool> get_bool(const char* key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) throw Error(path + ": '" + key + "' has type " + json_kind(*v) + ", expected a bool");
    return v->get<bool>();
  }

  std::optional<std::string> get_string(const char* key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_string()) throw Error(path + ": '" + key + "' has type " + json_kind(*v) + ", expected a string");
    return v->get<std::string>();
  }
};

// Sliding-window attention (Mistral 7B v0.1; Qwen2/Qwen3 with
// use_sliding_window, which Hugging Face defaults to false for them; Hugging
// Face's Llama has none, whatever its config.json says): a window that covers
// the training context changes nothing; a shorter one is the attention's
// (LlamaHParams::sliding_window), on the layers layer_types names
// "sliding_attention", else (Qwen2/Qwen3) those from max_window_layers on
// (Hugging Face's default 28), else every layer.
void read_sliding_window(const Config& c, LlamaHParams& hp) {
  const bool qwen = hp.arch == "qwen2" || hp.arch == "qwen3";
  const std::string mt = c.get_string("model_type").value_or("");
  bool mistral = mt == "mistral";
  if (const json* a = c.find("architectures"); mt.empty() && a && a->is_array())
    for (const auto& e : *a) mistral = mistral || (e.is_string() && e.get<std::string>() == "MistralForCausalLM");
  if (!qwen && !mistral) return;
  const auto sw = c.get_int("sliding_window", int64_t{1} << 40);
  if (!sw || !c.get_bool("use_sliding_window").value_or(!qwen) || (hp.ctx_len > 0 && *sw >= hp.ctx_len)) return;
  std::vector<uint8_t> layers(static_cast<size_t>(hp.n_layers), 1);
  if (const json* t = c.find("layer_types")) {
    if (!t->is_array() || t->size() != layers.size())
      throw Error(c.path + ": 'layer_types' must be an array of " + std::to_string(hp.n_layers) + " strings");
    for (size_t l = 0; l < layers.size(); ++l) {
      const std::string kind = (*t)[l].is_string() ? (*t)[l].get<std::string>() : std::string();
      if (kind != "sliding_attention" && kind != "full_attention")
        throw Error(c.path + ": layer_types[" + std::to_string(l) + "] = " + (*t)[l].dump() +
                    " is unsupported (supported: \"full_attention\", \"sliding_attention\")");
      layers[l] = kind == "sliding_attention";
    }
  } else if (qwen) {
    int64_t from = 28;
    if (const json* m = c.find("max_window_layers")) {
      if (!m->is_number_integer() || m->get<int64_t>() < 0)
        throw Error(c.path + ": 'max_window_layers' must be a non-negative integer");
      from = m->get<int64_t>();
    }
    for (size_t l = 0; l < layers.size(); ++l) layers[l] = static_cast<int64_t>(l) >= from;
  }
  set_sliding_window(hp, static_cast<int>(std::min<int64_t>(*sw, int64_t{1} << 30)), std::move(layers));
}

// The family config.json names (model_type, else the architectures list), as
// LlamaHParams::arch: llama (mistral is the llama layout), qwen2, qwen3. A known
// family with a feature Redwood lacks is a one-line error naming it.
std::string check_architecture(const Config& c) {
  std::string seen, arch;
  if (const json* a = c.find("architectures")) {
    if (!a->is_array()) throw Error(c.path + ": 'architectures' must be an array of strings");
    for (const auto& e : *a) {
      if (!e.is_string()) throw Error(c.path + ": 'architectures' must be an array of strings");
      const std::string s = e.get<std::string>();
      if (seen.empty()) seen = s;
      if (s == "LlamaForCausalLM" || s == "MistralForCausalLM") arch = "llama";
      if (s == "Qwen2ForCausalLM") arch = "qwen2";
      if (s == "Qwen3ForCausalLM") arch = "qwen3";
    }
  }
  const std::string mt = c.get_string("model_type").value_or("");
  if (mt == "llama" || mt == "mistral") arch = "llama";
  if (mt == "qwen2" || mt == "qwen3") arch = mt;
  if (mt == "qwen2_moe" || mt == "qwen3_moe" || mt == "mixtral")
    throw Error(c.path + ": model_type '" + mt +
                "' needs mixture-of-experts feed-forward layers, which Redwood does not implement");
  if (seen.empty()) seen = mt;
  if (arch.empty())
    throw Error(c.path + ": unsupported architecture '" + (seen.empty() ? std::string("unknown") : seen) +
                "' (supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM; model_type "
                "llama/mistral/qwen2/qwen3)");
  return arch;
}

// config.json's rope_scaling as per-pair divisors of the RoPE frequencies
// (LlamaHParams::rope_freq_factors): "linear" divides every frequency by
// `factor`; "llama3" (Llama 3.1+) leaves the high frequencies, divides those
// whose wavelength exceeds original_max_position_embeddings / low_freq_factor
// by `factor`, and blends the band between (transformers'
// _compute_llama3_parameters). Other types are refused.
std::vector<float> rope_scaling_factors(const Config& c, const LlamaHParams& hp) {
  const json* rs = c.find("rope_scaling");
  if (!rs) return {};
  if (!rs->is_object()) throw Error(c.path + ": 'rope_scaling' must be an object or null");
  auto str = [&](const char* key) -> std::string {
    auto it = rs->find(key);
    if (it == rs->end() || it->is_null()) return "";
    if (!it->is_string()) throw Error(c.path + ": 'rope_scaling." + key + "' must be a string");
    return it->get<std::string>();
  };
  auto num = [&](const char* key, double lo, double hi) {
    auto it = rs->find(key);
    if (it == rs->end() || it->is_null()) throw Error(c.path + ": 'rope_scaling' lacks '" + key + "'");
    if (!it->is_number()) throw Error(c.path + ": 'rope_scaling." + key + "' must be a number");
    const double v = it->get<double>();
    if (!(v >= lo && v <= hi))
      throw Error(c.path + ": 'rope_scaling." + key + "' = " + it->dump() + " is out of range");
    return v;
  };
  std::string type = str("rope_type");
  if (type.empty()) type = str("type");
  if (type.empty() || type == "default") return {};
  const size_t half = static_cast<size_t>(hp.head_dim / 2);
  const double factor = num("factor", 1e-6, 1e6);
  if (type == "linear") return std::vector<float>(half, static_cast<float>(factor));
  if (type != "llama3")
    throw Error(c.path + ": rope_scaling type '" + type + "' is unsupported (supported: default, linear, llama3)");
  const double low = num("low_freq_factor", 1e-6, 1e6);
  const double high = num("high_freq_factor", 1e-6, 1e6);
  const double old_ctx = num("original_max_position_embeddings", 1, 1e9);
  if (!(high > low)) throw Error(c.path + ": 'rope_scaling.high_freq_factor' must exceed 'low_freq_factor'");
  const double pi = 3.14159265358979323846;
  std::vector<float> out(half);
  for (size_t i = 0; i < half; ++i) {
    const double wavelen = 2 * pi / math::rope_inv_freq(static_cast<int>(i), hp.head_dim, hp.rope_base, 1.0);
    double f = 1.0;
    if (wavelen > old_ctx / low) {
      f = factor;
    } else if (wavelen >= old_ctx / high) {
      const double smooth = (old_ctx / wavelen - low) / (high - low);
      f = 1.0 / ((1 - smooth) / factor + smooth);
    }
    out[i] = static_cast<float>(f);
  }
  return out;
}

LlamaHParams read_hparams(const Config& c, const std::string& arch) {
  LlamaHParams hp;
  hp.arch = arch;
  hp.qk_norm = arch == "qwen3";
  hp.qkv_bias = arch == "qwen2";  // Qwen2's q/k/v projections always carry a bias (no config key)
  hp.n_layers = c.require_int("num_hidden_layers", 4096);
  hp.dim = c.require_int("hidden_size", 1 << 17);
  hp.n_heads = c.require_int("num_attention_heads", 4096);
  hp.n_kv_heads = static_cast<int>(c.get_int("num_key_value_heads", 4096).value_or(hp.n_heads));
  hp.ffn_dim = c.require_int("intermediate_size", 1 << 20);
  hp.vocab = c.require_int("vocab_size", 1 << 24);
  hp.ctx_len = static_cast<int>(c.get_int("max_position_embeddings", 1ll << 30).value_or(0));
  hp.rope_base = static_cast<float>(c.get_float("rope_theta").value_or(10000.0));
  hp.rms_eps = static_cast<float>(c.get_float("rms_norm_eps").value_or(1e-6));
  hp.tied_lm_head = c.get_bool("tie_word_embeddings").value_or(false);
  hp.rope_mode = RopeMode::kHalf;
  if (!(hp.rope_base > 1.0f) || !std::isfinite(hp.rope_base))
    throw Error(c.path + ": rope_theta must be a finite number greater than 1");
  if (!(hp.rms_eps > 0.0f) || !(hp.rms_eps < 1.0f)) throw Error(c.path + ": rms_norm_eps must be in (0, 1)");
  // head_dim when given (Qwen3, Mistral Nemo: heads x head_dim need not be hidden_size).
  if (auto hd = c.get_int("head_dim", 1 << 16); hd && *hd > 0) {
    hp.head_dim = static_cast<int>(*hd);
  } else {
    if (hp.dim % hp.n_heads != 0) throw Error(c.path + ": hidden_size is not a multiple of num_attention_heads");
    hp.head_dim = hp.dim / hp.n_heads;
  }
  if (hp.n_heads % hp.n_kv_heads != 0)
    throw Error(c.path + ": num_attention_heads is not a multiple of num_key_value_heads");
  if (hp.head_dim % 2 != 0) throw Error(c.path + ": head dimension must be even");
  hp.rope_freq_factors = rope_scaling_factors(c, hp);
  // attention_bias in llama/qwen3 also biases o_proj, which Redwood lacks.
  if ((arch != "qwen2" && c.get_bool("attention_bias").value_or(false)) || c.get_bool("mlp_bias").value_or(false))
    throw Error(c.path + ": attention_bias / mlp_bias are unsupported");
  if (auto act = c.get_string("hidden_act"); act && *act != "silu")
    throw Error(c.path + ": hidden_act '" + *act + "' is unsupported (supported: silu)");
  read_sliding_window(c, hp);
  return hp;
}

// A shard file name from the index must be a plain file name in the directory.
void check_shard_name(const std::string& index_path, const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos)
    throw Error(index_path + ": invalid shard file name '" + name + "'");
}

std::vector<std::string> list_safetensors(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) throw Error(dir + ": cannot list directory: " + strerror(errno));
  while (const dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n.size() > 12 && n.ends_with(".safetensors")) out.push_back(n);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::string base_name(const std::string& dir) {
  const auto slash = dir.find_last_of('/');
  return slash == std::string::npos ? dir : dir.substr(slash + 1);
}

}  // namespace

std::vector<SafetensorsTensor> read_safetensors_header(const std::string& path) {
  Fd fd;
  const uint64_t size = open_regular(path, fd);
  if (size < 8) throw Error(path + ": truncated safetensors file (" + std::to_string(size) + " bytes)");
  unsigned char lenbuf[8];
  read_exact(fd.fd, path, lenbuf, 8, 0);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | lenbuf[i];
  if (n > kMaxHeaderBytes)
    throw Error(path + ": safetensors header length " + std::to_string(n) + " is absurd (limit " +
                std::to_string(kMaxHeaderBytes) + ")");
  if (n > size - 8)
    throw Error(path + ": safetensors header length " + std::to_string(n) + " extends past the end of the file (" +
                std::to_string(size) + " bytes)");
  std::string text(n, '\0');
  read_exact(fd.fd, path, text.data(), n, 8);
  const json h = parse_json(text, path, "tensor");
  if (!h.is_object()) throw Error(path + ": safetensors header is not a JSON object");

  const uint64_t data_start = 8 + n;
  const uint64_t data_size = size - data_start;
  std::vector<SafetensorsTensor> out;
  out.reserve(h.size());
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") continue;
    const json& e = it.value();
    const std::string where = path + ": tensor '" + name + "'";
    if (!e.is_object()) throw Error(where + ": entry is not a JSON object");
    auto dt = e.find("dtype");
    auto sh = e.find("shape");
    auto off = e.find("data_offsets");
    if (dt == e.end() || !dt->is_string()) throw Error(where + ": missing or non-string 'dtype'");
    if (sh == e.end() || !sh->is_array()) throw Error(where + ": missing or non-array 'shape'");
    if (off == e.end() || !off->is_array() || off->size() != 2)
      throw Error(where + ": 'data_offsets' must be an array [begin, end]");

    SafetensorsTensor t;
    t.name = name;
    const std::string dts = dt->get<std::string>();
    auto type = dtype_from_safetensors(dts);
    if (!type) throw Error(path + ": unsupported tensor type " + dts + " for tensor " + name);
    t.type = *type;

    if (sh->size() > kMaxRank) throw Error(where + ": too many dimensions (" + std::to_string(sh->size()) + ")");
    uint64_t elems = 1;
    for (const auto& d : *sh) {
      if (!d.is_number_unsigned()) throw Error(where + ": shape dimensions must be non-negative integers");
      const uint64_t v = d.get<uint64_t>();
      if (v > kMaxDim) throw Error(where + ": dimension " + std::to_string(v) + " is too large");
      t.shape.push_back(v);
    }
    // Product with overflow detection (a zero dimension makes the product zero).
    const uint64_t esize = dtype_info(t.type).block_bytes;
    const bool empty = std::find(t.shape.begin(), t.shape.end(), uint64_t{0}) != t.shape.end();
    if (!empty) {
      for (uint64_t v : t.shape) {
        if (elems > UINT64_MAX / v) throw Error(where + ": element count overflows");
        elems *= v;
      }
      if (elems > UINT64_MAX / esize) throw Error(where + ": element count overflows");
    } else {
      elems = 0;
    }
    const uint64_t want = elems * esize;

    const json& b = (*off)[0];
    const json& en = (*off)[1];
    if (!b.is_number_unsigned() || !en.is_number_unsigned())
      throw Error(where + ": data_offsets must be non-negative integers");
    const uint64_t begin = b.get<uint64_t>();
    const uint64_t end = en.get<uint64_t>();
    if (end < begin)
      throw Error(where + ": data_offsets end " + std::to_string(end) + " < begin " + std::to_string(begin));
    if (end > data_size)
      throw Error(where + ": data (offsets " + std::to_string(begin) + ".." + std::to_string(end) +
                  ") extends past the end of the file (truncated?)");
    if (end - begin != want)
      throw Error(where + ": data is " + std::to_string(end - begin) + " bytes but shape and dtype need " +
                  std::to_string(want) + " (size mismatch)");
    t.offset = data_start + begin;
    t.bytes = want;
    out.push_back(std::move(t));
  }
  return out;
}

ModelDesc load_safetensors_desc(const std::string& path) {
  std::string dir = path;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (!is_dir(dir)) {
    if (!is_file(dir)) throw Error(path + ": no such file or directory");
    const auto slash = dir.find_last_of('/');
    dir = slash == std::string::npos ? std::string(".") : (slash == 0 ? std::string("/") : dir.substr(0, slash));
  }
  const std::string prefix = dir == "/" ? dir : dir + "/";

  ModelDesc m;
  m.path = path;
  m.format = ModelFormat::kSafetensors;
  m.name = base_name(dir);

  // ---- config.json ----
  const std::string config_path = prefix + "config.json";
  if (!is_file(config_path)) {
    std::error_code ec;
    if (::access(dir.c_str(), R_OK | X_OK) != 0)
      throw Error(path + ": cannot read the directory: " + std::strerror(errno));
    if (std::filesystem::is_directory(config_path, ec))
      throw Error(config_path + ": is a directory, not the model's config.json");
    throw Error(path + ": no config.json in " + dir);
  }
  const json cj = read_json_file(config_path);
  if (!cj.is_object()) throw Error(config_path + ": not a JSON object");
  const Config cfg{cj, config_path};
  m.hp = read_hparams(cfg, check_architecture(cfg));
  auto& hp = m.hp;

  // ---- shards ----
  std::vector<std::string> shard_names;
  const std::string index_path = prefix + "model.safetensors.index.json";
  if (is_file(index_path)) {
    const json idx = read_json_file(index_path);
    if (!idx.is_object()) throw Error(index_path + ": not a JSON object");
    auto wm = idx.find("weight_map");
    if (wm == idx.end() || !wm->is_object()) throw Error(index_path + ": missing or non-object 'weight_map'");
    std::set<std::string> names;
    for (const auto& [tensor, file] : wm->items()) {
      if (!file.is_string()) throw Error(index_path + ": weight_map entry for '" + tensor + "' is not a string");
      const std::string f = file.get<std::string>();
      check_shard_name(index_path, f);
      names.insert(f);
    }
    if (names.empty()) throw Error(index_path + ": empty weight_map");
    shard_names.assign(names.begin(), names.end());
    for (const auto& s : shard_names)
      if (!is_file(prefix + s)) throw Error(index_path + ": missing shard file " + prefix + s);
  } else if (is_file(prefix + "model.safetensors")) {
    shard_names = {"model.safetensors"};
  } else {
    shard_names = list_safetensors(dir);
    if (shard_names.empty()) throw Error(path + ": no *.safetensors files in " + dir);
  }

  struct Found {
    int file;
    SafetensorsTensor t;
  };
  std::map<std::string, Found> all;
  for (size_t i = 0; i < shard_names.size(); ++i) {
    const std::string shard = prefix + shard_names[i];
    m.files.push_back(shard);
    for (auto& t : read_safetensors_header(shard)) {
      std::string n = t.name;
      auto [it, inserted] = all.emplace(n, Found{static_cast<int>(i), std::move(t)});
      if (!inserted) throw Error(shard + ": duplicate tensor '" + n + "' (also in " + m.files[it->second.file] + ")");
    }
  }

  auto extent = [&](const std::string& name) {
    auto it = all.find(name);
    if (it == all.end()) throw Error(path + ": missing tensor '" + name + "'");
    const Found& f = it->second;
    TensorExtent e;
    e.name = name;
    e.file = f.file;
    e.offset = f.t.offset;
    e.bytes = f.t.bytes;
    e.type = f.t.type;
    if (f.t.shape.size() == 1) {
      e.rows = 1;
      e.cols = static_cast<int64_t>(f.t.shape[0]);
    } else if (f.t.shape.size() == 2) {
      e.rows = static_cast<int64_t>(f.t.shape[0]);
      e.cols = static_cast<int64_t>(f.t.shape[1]);
    } else {
      throw Error(m.files[f.file] + ": tensor '" + name + "' has " + std::to_string(f.t.shape.size()) +
                  " dimensions (expected 1 or 2)");
    }
    return e;
  };

  m.tok_embd = extent("model.embed_tokens.weight");
  m.output_norm = extent("model.norm.weight");
  if (hp.tied_lm_head) {
    m.lm_head = m.tok_embd;
  } else {
    m.lm_head = extent("lm_head.weight");
  }
  m.layers.resize(hp.n_layers);
  for (int i = 0; i < hp.n_layers; ++i) {
    const std::string b = "model.layers." + std::to_string(i) + ".";
    auto& L = m.layers[i];
    L.attn_norm = extent(b + "input_layernorm.weight");
    L.wq = extent(b + "self_attn.q_proj.weight");
    L.wk = extent(b + "self_attn.k_proj.weight");
    L.wv = extent(b + "self_attn.v_proj.weight");
    L.wo = extent(b + "self_attn.o_proj.weight");
    L.ffn_norm = extent(b + "post_attention_layernorm.weight");
    L.w_gate = extent(b + "mlp.gate_proj.weight");
    L.w_up = extent(b + "mlp.up_proj.weight");
    L.w_down = extent(b + "mlp.down_proj.weight");
    if (hp.qkv_bias) {
      L.bq = extent(b + "self_attn.q_proj.bias");
      L.bk = extent(b + "self_attn.k_proj.bias");
      L.bv = extent(b + "self_attn.v_proj.bias");
    }
    if (hp.qk_norm) {
      L.q_norm = extent(b + "self_attn.q_norm.weight");
      L.k_norm = extent(b + "self_attn.k_norm.weight");
    }
  }

  std::vector<std::string> names;
  for (const auto& [name, found] : all) {
    // Ignored as the reference ignores them: RoPE's inverse frequencies (computed
    // from config.json), and lm_head.weight under tie_word_embeddings (tied to
    // the embedding, whatever the file holds).
    if (name.ends_with(".self_attn.rotary_emb.inv_freq") || (hp.tied_lm_head && name == "lm_head.weight")) continue;
    names.push_back(name);
  }
  check_tensors_used(m, names);

  // ---- tokenizer ----
  const std::string tok_path = prefix + "tokenizer.json";
  if (!is_file(tok_path)) throw Error(path + ": no tokenizer.json in " + dir);
  m.tokenizer = tokenizer_spec_from_hf_json(tok_path);
  const std::string tc_path = prefix + "tokenizer_config.json";
  if (is_file(tc_path)) {
    const json tc = read_json_file(tc_path);
    if (!tc.is_object()) throw Error(tc_path + ": not a JSON object");
    auto ct = tc.find("chat_template");
    if (ct != tc.end() && ct->is_string()) {
      m.chat_template = ct->get<std::string>();
    } else if (ct != tc.end() && ct->is_array()) {
      // Newer configs: [{"name": "default", "template": "..."}, ...]
      for (const auto& e : *ct) {
        if (!e.is_object()) continue;
        auto nm = e.find("name");
        auto tp = e.find("template");
        if (nm != e.end() && *nm == "default" && tp != e.end() && tp->is_string())
          m.chat_template = tp->get<std::string>();
      }
    }
  }

  validate_model_desc(m);
  return m;
}

}  // namespace redwood
