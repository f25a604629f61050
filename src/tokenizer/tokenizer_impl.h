// Private to src/tokenizer/: the shared machinery behind both tokenizer kinds
// (validation, text -> id lookup, special-token splitting, BOS/EOS, decoded
// token bytes) and the UTF-8 helpers they use.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "src/tokenizer/tokenizer.h"

namespace redwood::tok {

// Length of the well-formed UTF-8 sequence starting at s[i], or 0 when the
// bytes there are not one (bad lead byte, bad continuation, overlong form,
// surrogate, > U+10FFFF, or truncated by the end of s).
size_t utf8_seq_len(std::string_view s, size_t i);
// Append the UTF-8 encoding of code point cp.
void append_utf8(std::string& out, uint32_t cp);

struct StringViewHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

// Everything common to both kinds. Subclasses encode one run of ordinary text.
class TokenizerBase : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const override;
  std::string token_bytes(int32_t id, bool render_special = false) const override;

 protected:
  // Validates the spec; throws redwood::Error. Builds the text map, types and
  // the special-token matcher. Subclasses then fill decoded_.
  explicit TokenizerBase(TokenizerSpec spec);

  // Encode a run of ordinary text (no special tokens). at_start_or_after_special
  // is true for the first run of the input and for runs following a special
  // token (SPM uses it for the space prefix).
  virtual void encode_text(std::string_view text, bool at_start_or_after_special,
                           std::vector<int32_t>& out) const = 0;

  int32_t find_token(std::string_view text) const {
    auto it = text_to_id_.find(text);
    return it == text_to_id_.end() ? -1 : it->second;
  }
  TokenType type_of(int32_t id) const { return types_[static_cast<size_t>(id)]; }

  // BPE merge table shared by both kinds: pair (left id, right id) -> rank and
  // the merged token's id. Built from spec_.merges ("a b" in rank order):
  // merges whose parts or result are not in the vocabulary can never apply and
  // are skipped; a merge without a separator is an error; for repeated pairs
  // the first (best) rank wins.
  struct Merge {
    int32_t rank;
    int32_t id;
  };
  static uint64_t merge_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  std::unordered_map<uint64_t, Merge> build_merges() const;
  // Decoded bytes of every token (filled by the subclass constructor).
  std::vector<std::string> decoded_;

 private:
  struct Special {
    std::string_view text;
    int32_t id;
    bool control;  // a control token (matched only with parse_special), else user-defined (always)
  };
  std::vector<TokenType> types_;  // spec types, or derived when the spec has none
  std::unordered_map<std::string_view, int32_t, StringViewHash, std::equal_to<>> text_to_id_;
  // Control/user-defined tokens bucketed by first byte, longest first.
  std::vector<std::vector<Special>> specials_by_byte_;
  bool has_user_defined_ = false;  // any user-defined token in specials_by_byte_
};

std::unique_ptr<Tokenizer> make_bpe(TokenizerSpec spec);
std::unique_ptr<Tokenizer> make_spm(TokenizerSpec spec);

}  // namespace redwood::tok
