// A model description: Llama-family hyperparameters plus, for every weight, its
// extent on storage (file, offset, bytes, type, shape). Built from a GGUF file or
// a Hugging Face safetensors directory. Nothing is loaded here: the engine (all
// resident) and the offload streamer both read weights by these extents.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/common/dtype.h"
#include "src/tokenizer/tokenizer.h"

namespace redwood {

// The families differ only in data here (no per-family branches in the pass):
// llama (Llama 2/3.x, Mistral converted as llama), qwen2 (q/k/v biases), qwen3
// (per-head RMSNorm of q and k before RoPE; head_dim may differ from dim / heads).
struct LlamaHParams {
  std::string arch = "llama";  // GGUF general.architecture / config.json model_type
  int n_layers = 0;
  int dim = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int ffn_dim = 0;
  int vocab = 0;
  int ctx_len = 0;  // training context; 0 = unknown
  float rope_base = 10000.0f;
  float rms_eps = 1e-5f;
  RopeMode rope_mode = RopeMode::kInterleaved;
  // RoPE frequency scaling: empty, or head_dim / 2 divisors of each pair's
  // frequency (linear scaling: all the factor; Llama 3.x: GGUF's rope_freqs
  // tensor, or computed from config.json's rope_scaling).
  std::vector<float> rope_freq_factors;
  bool tied_lm_head = false;
  // q, k and v projections add a bias vector (Qwen2; LayerDesc::bq/bk/bv).
  bool qkv_bias = false;
  // q and k are RMS-normed per head (weights of head_dim, eps rms_eps) before
  // RoPE (Qwen3; LayerDesc::q_norm/k_norm).
  bool qk_norm = false;
  // Sliding-window attention (Mistral 7B v0.1: 4096; GGUF attention.sliding_window,
  // config.json sliding_window): a token attends to itself and the window - 1
  // positions before it (llama.cpp's convention; the attention kernels mask by
  // position: AttentionArgs::window). 0: none (also a window that covers the
  // training context).
  int sliding_window = 0;
  // The layers the window applies to, one flag a layer (Qwen2/Qwen3 config.json:
  // use_sliding_window from layer max_window_layers on, or layer_types; GGUF
  // attention.sliding_window_pattern): empty = every layer. Set through
  // set_sliding_window, so it is not empty only where the layers differ.
  std::vector<uint8_t> window_layers;

  // The window of layer l: sliding_window, or 0 (full attention).
  int window_of(int l) const {
    return window_layers.empty() || window_layers[static_cast<size_t>(l)] ? sliding_window : 0;
  }
  // Some layers attend within the window and some to everything.
  bool mixed_window() const { return sliding_window > 0 && !window_layers.empty(); }
};

// A window of `window` positions on the layers flagged in `layers` (one flag a
// layer): none flagged (or window 0) is no window, all flagged leaves
// window_layers empty.
void set_sliding_window(LlamaHParams& hp, int window, std::vector<uint8_t> layers);

// The per-pair RoPE inverse frequencies the backends rotate by
// (math::rope_inv_freq with the model's base and scaling factors).
std::vector<double> rope_inv_freqs(const LlamaHParams& hp);

// One weight tensor on storage. Matrices are [rows = out][cols = in] with cols
// contiguous (GGUF ne[0] / HF last dim); vectors have rows = 1.
struct TensorExtent {
  std::string name;
  int file = 0;         // index into ModelDesc::files
  uint64_t offset = 0;  // absolute byte offset in that file
  uint64_t bytes = 0;
  DType type = DType::F32;
  int64_t rows = 1;
  int64_t cols = 0;
  // A packed model's tensor (redwood pack, src/model/packed.h): the
  // `stored_bytes` at `offset` are a coded stream that decodes to the `bytes`
  // above. Read tensors through read_tensor() there, which decodes.
  bool packed = false;
  uint64_t stored_bytes = 0;
  uint64_t stored() const { return packed ? stored_bytes : bytes; }
};

struct LayerDesc {
  TensorExtent attn_norm, wq, wk, wv, wo, ffn_norm, w_gate, w_up, w_down;
  // Vectors some families have (an empty name when absent): the q/k/v biases
  // (LlamaHParams::qkv_bias) and the per-head q/k norm weights (qk_norm).
  TensorExtent bq, bk, bv, q_norm, k_norm;
  uint64_t bytes() const;
  // The nine extents in a fixed order (attn_norm wq wk wv wo ffn_norm gate up
  // down), then the optional vectors present, in the order bq bk bv q_norm
  // k_norm (for loaders and streamers).
  std::vector<const TensorExtent*> tensors() const;
  // The layer's vectors (attn_norm, ffn_norm, then the optional ones present):
  // always held resident as floats, never streamed with the matrices.
  std::vector<const TensorExtent*> vectors() const;
  // The optional vectors, present or not, in the order above (for code that
  // rewrites every extent).
  std::vector<TensorExtent*> optional_vectors();
};

enum class ModelFormat { kGguf, kSafetensors, kPacked };

struct ModelDesc {
  std::string path;  // what the user named (file or directory)
  ModelFormat format = ModelFormat::kGguf;
  std::vector<std::string> files;  // data files the extents point into
  std::string name;                // general.name or directory name
  LlamaHParams hp;
  TensorExtent tok_embd, output_norm, lm_head;  // lm_head == tok_embd when tied
  std::vector<LayerDesc> layers;
  TokenizerSpec tokenizer;
  std::string chat_template;  // may be empty

  uint64_t total_bytes() const;
};

// Loads a description from a GGUF file or a safetensors directory (or a single
// .safetensors file beside config.json). Throws redwood::Error on any problem:
// unknown architecture, missing or mis-shaped tensors, inconsistent hyperparameters.
ModelDesc load_model_desc(const std::string& path);

// What a GGUF architecture name means for the pass: its RoPE pair layout and
// whether its layers carry per-head q/k norms (biases are data: read where
// present). Throws one line naming the architecture, and for a known family
// with a feature Redwood lacks (mixture of experts, ...) that feature.
struct ArchTraits {
  RopeMode rope_mode = RopeMode::kInterleaved;
  bool qk_norm = false;
};
ArchTraits arch_traits(const std::string& arch, const std::string& path);

class GgufFile;
// Delivers a small tensor's bytes (rope_freqs.weight) for a GGUF header whose
// data is not where its offsets say (a packed model).
using GgufTensorReader = std::function<void(const std::string& name, void* dst, uint64_t bytes)>;
// The description of the model a parsed GGUF header holds (load_model_desc's
// GGUF branch; a packed model's loader with its own reader).
ModelDesc model_desc_from_gguf(const GgufFile& f, const std::string& path, const GgufTensorReader& read = {});

// Checks shapes/types against the hyperparameters (used by both loaders).
void validate_model_desc(const ModelDesc& m);

// Whether `draft` can draft for `target` (speculative decoding): "" when it
// can, else why not (one line naming the target; callers prefix the draft's name). Their vocabularies may
// differ only in rows the draft's tokenizer never produces: the draft has at
// most the target's rows (embedding/output), and every token the draft's
// tokenizer lists is the target's token of that id, or, past the end of the
// target's list, a padding entry (type unused: a GGUF converter's "[PAD<id>]").
// So equal lists with more target rows (Qwen2.5-0.5B's 151,936 rows under
// Qwen2.5-72B's 152,064, one tokenizer.json), a draft list that is a prefix of
// the target's (GGUF lists padded to the rows), and a padded GGUF draft under
// an HF target all pair; any token that means something else does not. Model
// configs (no token lists) compare rows only. Ids at or past the draft's rows
// have draft probability 0 (spec::SpecDecoder pads the draft's distributions).
std::string draft_vocab_mismatch(const ModelDesc& target, const ModelDesc& draft);

// Every tensor a model file holds (`names`, less those its loader reads or
// ignores on purpose) must be one of m's: anything else (a block past
// block_count, a bias, an expert) would be silently left out of the pass, so
// it is an error naming it ("tensor 'blk.1.attn_q.weight' is not used by a
// 1-block llama model").
void check_tensors_used(const ModelDesc& m, const std::vector<std::string>& names);

}  // namespace redwood
