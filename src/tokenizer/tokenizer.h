// Native tokenizers. This folder knows vocabularies and merges, nothing about
// model files: loaders in src/model/ fill a TokenizerSpec from GGUF metadata or
// a Hugging Face tokenizer.json, and Tokenizer is built from the spec.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace redwood {

enum class TokenizerKind {
  kSentencePiece,  // GGUF "llama": SPM-style BPE by scores, byte fallback <0xNN>
  kByteLevelBpe,   // GGUF "gpt2": byte-level BPE with merges + pre-tokenizer regex
};

// Token types as GGUF stores them (tokenizer.ggml.token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct TokenizerSpec {
  TokenizerKind kind = TokenizerKind::kByteLevelBpe;
  std::string pre;  // pre-tokenizer name ("smollm", "llama3", "gpt2", "default", ...)
  std::vector<std::string> tokens;       // id -> token text as stored
  std::vector<float> scores;             // SPM merge scores (may be empty for BPE)
  std::vector<TokenType> types;          // may be empty (all normal)
  std::vector<std::string> merges;       // "a b" pairs, in rank order (BPE)
  int32_t bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;  // SPM: prepend a space (U+2581) to the text
  // BPE: a pre-token that is a token is that token, merges not applied
  // (tokenizer.json's model.ignore_merges); unset: the pre-tokenizer's
  // llama.cpp default (Llama 3's and Tekken's ignore them).
  std::optional<bool> ignore_merges;
};

// Whether a byte-level BPE pre-tokenizer name (GGUF tokenizer.ggml.pre) is one
// Redwood implements (known_bpe_pre() lists them: smollm and the same scheme
// under StarCoder's, Refact's and Command-R's names, llama3 (llama-bpe,
// llama-v3), qwen2, qwen35, tekken, deepseek-llm, deepseek-coder, deepseek-v3, falcon, gpt2 (gpt-2)
// and default (the GPT-2 pattern, also MPT's)). Any
// other name is an error, as in llama.cpp: its pattern is not GPT-2's, and
// tokens would silently differ.
bool is_known_bpe_pre(std::string_view pre);
std::string known_bpe_pre();  // the names, comma-separated
// Whether a GGUF naming this pre-tokenizer without tokenizer.ggml.add_bos_token
// adds BOS (llama.cpp's defaults: Llama 3's and Tekken's do).
bool bpe_pre_adds_bos(std::string_view pre);
// The pieces a byte-level BPE pre-tokenizer splits text into, before merges
// (throws redwood::Error for an unknown name).
std::vector<std::string> bpe_pre_tokenize(std::string_view pre, std::string_view text);
// The pre-tokenizer whose stages are `stages`, the regexes a Hugging Face
// pre_tokenizer applies in order (each Split's pattern, Digits and a
// ByteLevel that splits as their regexes: bpe_digit_regex,
// bpe_byte_level_regex); literal non-ASCII characters and \r \n \t compare
// equal to their escapes. Empty when none is.
std::string bpe_pre_for_stages(const std::vector<std::string>& stages);
// Digits(individual_digits) as a regex: every \p{N} alone (else runs: \p{N}+).
std::string_view bpe_digit_regex(bool individual);
// ByteLevel(use_regex = true) as a regex: GPT-2's split.
std::string_view bpe_byte_level_regex();
// A stage after a ByteLevel, which splits the byte-mapped text (a space is Ġ,
// a letter there; 0-9 and the bytes B2 B3 B9 BC BD BE, mapped to ² ³ ¹ ¼ ½ ¾,
// are digits): its regex marked so, a stage name that only Falcon's
// tokenizer.json form (Digits and a three-digit Split there) matches.
std::string bpe_after_byte_level(std::string_view stage);
// Punctuation(behavior) as a regex: "Contiguous" (runs of Unicode P and ASCII
// punctuation, Falcon's); empty for a behavior Redwood does not implement.
std::string_view bpe_punctuation_regex(std::string_view behavior);

class Tokenizer {
 public:
  // Validates the spec (ids in range, merges name known tokens, ...) and builds
  // the lookup tables. Throws redwood::Error on an invalid spec.
  static std::unique_ptr<Tokenizer> create(TokenizerSpec spec);
  virtual ~Tokenizer() = default;

  // Encode UTF-8 text. add_special: prepend BOS (and append EOS) when the spec
  // says so. parse_special: recognise control token texts such as
  // "<|im_start|>" in the input and emit their ids directly. User-defined
  // tokens' texts are recognised either way, as Hugging Face and llama.cpp do.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special,
                                      bool parse_special) const = 0;
  // The raw bytes of one token (byte-level mapping and <0xNN> undone). Control
  // tokens decode to their text only if render_special.
  virtual std::string token_bytes(int32_t id, bool render_special = false) const = 0;
  std::string decode(std::span<const int32_t> ids, bool render_special = false) const;

  int32_t vocab_size() const { return static_cast<int32_t>(spec_.tokens.size()); }
  const TokenizerSpec& spec() const { return spec_; }
  int32_t bos() const { return spec_.bos_id; }
  int32_t eos() const { return spec_.eos_id; }
  bool is_eog(int32_t id) const;  // end of generation: EOS or <|im_end|>/<|eot_id|>-like control

 protected:
  explicit Tokenizer(TokenizerSpec spec) : spec_(std::move(spec)) {}
  TokenizerSpec spec_;
};

// Streaming decode: feed token bytes, get back only complete UTF-8 sequences;
// an incomplete multi-byte character is held until its remaining bytes arrive.
class Utf8Stream {
 public:
  std::string push(std::string_view bytes);
  std::string flush();  // whatever is left (invalid tails as U+FFFD)
 private:
  std::string pending_;
};

}  // namespace redwood
