// Tokenizer front end: spec validation, special-token splitting, BOS/EOS,
// decode, end-of-generation ids and the streaming UTF-8 decoder.
#include "src/tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <limits>

#include "src/tokenizer/tokenizer_impl.h"
#include "src/util/error.h"

namespace redwood {
namespace tok {

namespace {

enum class Utf8Status { kComplete, kIncomplete, kInvalid };

// Classifies the bytes at s[i]. kComplete: *len is the sequence length.
// kIncomplete: the bytes up to the end of s are a valid prefix of a sequence.
// kInvalid: *len is the length of the maximal valid subpart (>= 1) to replace
// with one U+FFFD (Unicode's "maximal subpart" practice).
Utf8Status utf8_classify(std::string_view s, size_t i, size_t* len) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  size_t n = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 < 0x80) {
    *len = 1;
    return Utf8Status::kComplete;
  } else if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    *len = 1;
    return Utf8Status::kInvalid;
  }
  for (size_t k = 1; k < n; ++k) {
    if (i + k >= s.size()) {
      *len = k;
      return Utf8Status::kIncomplete;
    }
    const auto b = static_cast<uint8_t>(s[i + k]);
    const uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) {
      *len = k;
      return Utf8Status::kInvalid;
    }
  }
  *len = n;
  return Utf8Status::kComplete;
}

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Appends the valid sequences of s to out, invalid subparts as U+FFFD. Returns
// the offset of a trailing incomplete sequence (s.size() when there is none);
// when final, an incomplete tail is replaced too.
size_t utf8_sanitize(std::string_view s, bool final, std::string& out) {
  size_t i = 0;
  while (i < s.size()) {
    size_t len = 0;
    switch (utf8_classify(s, i, &len)) {
      case Utf8Status::kComplete:
        out.append(s.substr(i, len));
        break;
      case Utf8Status::kInvalid:
        out.append(kReplacement);
        break;
      case Utf8Status::kIncomplete:
        if (!final) return i;
        out.append(kReplacement);
        break;
    }
    i += len;
  }
  return s.size();
}

bool is_special_type(TokenType t) { return t == TokenType::kControl || t == TokenType::kUserDefined; }

}  // namespace

size_t utf8_seq_len(std::string_view s, size_t i) {
  size_t len = 0;
  return utf8_classify(s, i, &len) == Utf8Status::kComplete ? len : 0;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

TokenizerBase::TokenizerBase(TokenizerSpec spec) : Tokenizer(std::move(spec)) {
  const size_t n = spec_.tokens.size();
  if (n == 0) throw Error("tokenizer: empty vocabulary");
  if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    throw Error("tokenizer: vocabulary of " + std::to_string(n) + " tokens is too large");
  if (!spec_.scores.empty() && spec_.scores.size() != n)
    throw Error("tokenizer: " + std::to_string(spec_.scores.size()) + " scores for " + std::to_string(n) +
                " tokens");
  if (!spec_.types.empty() && spec_.types.size() != n)
    throw Error("tokenizer: " + std::to_string(spec_.types.size()) + " token types for " +
                std::to_string(n) + " tokens");
  const auto check_id = [&](int32_t id, const char* what) {
    if (id < -1 || id >= static_cast<int32_t>(n))
      throw Error(std::string("tokenizer: ") + what + " id " + std::to_string(id) + " is outside the vocabulary of " +
                  std::to_string(n) + " tokens");
  };
  check_id(spec_.bos_id, "BOS");
  check_id(spec_.eos_id, "EOS");
  check_id(spec_.unk_id, "UNK");
  check_id(spec_.pad_id, "padding");

  if (spec_.types.empty()) {
    // No types: the special ids are the only control tokens.
    types_.assign(n, TokenType::kNormal);
    if (spec_.unk_id >= 0) types_[static_cast<size_t>(spec_.unk_id)] = TokenType::kUnknown;
    for (int32_t id : {spec_.bos_id, spec_.eos_id, spec_.pad_id})
      if (id >= 0) types_[static_cast<size_t>(id)] = TokenType::kControl;
  } else {
    types_ = spec_.types;
    for (size_t i = 0; i < n; ++i) {
      const auto t = static_cast<int32_t>(types_[i]);
      if (t < 0 || t > static_cast<int32_t>(TokenType::kByte))
        throw Error("tokenizer: token " + std::to_string(i) + " has invalid type " + std::to_string(t));
    }
  }

  // Text -> id; for duplicate texts the first id wins. spec_ is never modified
  // after construction, so views into its strings stay valid.
  text_to_id_.reserve(n);
  for (size_t i = 0; i < n; ++i) text_to_id_.emplace(spec_.tokens[i], static_cast<int32_t>(i));

  specials_by_byte_.resize(256);
  for (size_t i = 0; i < n; ++i) {
    const std::string& t = spec_.tokens[i];
    if (t.empty() || !is_special_type(types_[i])) continue;
    if (find_token(t) != static_cast<int32_t>(i)) continue;  // duplicate text
    const bool control = types_[i] == TokenType::kControl;
    specials_by_byte_[static_cast<uint8_t>(t[0])].push_back({t, static_cast<int32_t>(i), control});
    has_user_defined_ |= !control;
  }
  for (auto& bucket : specials_by_byte_)
    std::stable_sort(bucket.begin(), bucket.end(),
                     [](const Special& a, const Special& b) { return a.text.size() > b.text.size(); });
}

std::vector<int32_t> TokenizerBase::encode(std::string_view text, bool add_special, bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special && spec_.add_bos && spec_.bos_id >= 0) out.push_back(spec_.bos_id);
  bool after_special = true;  // start of input counts as "after a special token"
  const auto flush_text = [&](std::string_view run) {
    if (run.empty()) return;
    encode_text(run, after_special, out);
    after_special = false;
  };
  if (!parse_special && !has_user_defined_) {
    flush_text(text);
  } else {
    // Leftmost-longest match of added tokens' texts: user-defined ones always
    // (Hugging Face's added tokens, llama.cpp's tokenizer: GPT-NeoX's runs of
    // spaces, say), control ones only with parse_special.
    size_t run_start = 0, i = 0;
    while (i < text.size()) {
      const auto& bucket = specials_by_byte_[static_cast<uint8_t>(text[i])];
      const Special* hit = nullptr;
      for (const Special& sp : bucket) {
        if (sp.control && !parse_special) continue;
        if (text.substr(i, sp.text.size()) == sp.text) {
          hit = &sp;
          break;
        }
      }
      if (!hit) {
        ++i;
        continue;
      }
      flush_text(text.substr(run_start, i - run_start));
      out.push_back(hit->id);
      after_special = true;
      i += hit->text.size();
      run_start = i;
    }
    flush_text(text.substr(run_start));
  }
  if (add_special && spec_.add_eos && spec_.eos_id >= 0) out.push_back(spec_.eos_id);
  return out;
}

std::string TokenizerBase::token_bytes(int32_t id, bool render_special) const {
  if (id < 0 || id >= vocab_size())
    throw Error("tokenizer: token id " + std::to_string(id) + " is outside the vocabulary of " +
                std::to_string(vocab_size()) + " tokens");
  const auto i = static_cast<size_t>(id);
  switch (types_[i]) {
    case TokenType::kControl:
    case TokenType::kUnknown:
    case TokenType::kUnused:
      return render_special ? spec_.tokens[i] : std::string();
    case TokenType::kUserDefined:
      return spec_.tokens[i];
    default:
      return decoded_[i];
  }
}

std::unordered_map<uint64_t, TokenizerBase::Merge> TokenizerBase::build_merges() const {
  std::unordered_map<uint64_t, Merge> merges;
  merges.reserve(spec_.merges.size());
  std::string joined;
  for (size_t r = 0; r < spec_.merges.size(); ++r) {
    const std::string& m = spec_.merges[r];
    const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    if (sp == std::string::npos)
      throw Error("tokenizer: malformed merge #" + std::to_string(r) + " (no space separator)");
    const std::string_view a = std::string_view(m).substr(0, sp), b = std::string_view(m).substr(sp + 1);
    joined.assign(a);
    joined.append(b);
    const int32_t ia = find_token(a), ib = find_token(b), ic = find_token(joined);
    if (ia < 0 || ib < 0 || ic < 0) continue;  // can never apply
    merges.emplace(merge_key(ia, ib), Merge{static_cast<int32_t>(r), ic});
  }
  return merges;
}

}  // namespace tok

std::unique_ptr<Tokenizer> Tokenizer::create(TokenizerSpec spec) {
  switch (spec.kind) {
    case TokenizerKind::kByteLevelBpe: return tok::make_bpe(std::move(spec));
    case TokenizerKind::kSentencePiece: return tok::make_spm(std::move(spec));
  }
  throw Error("tokenizer: unknown tokenizer kind");
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool render_special) const {
  std::string out;
  for (int32_t id : ids) out += token_bytes(id, render_special);
  // SentencePiece with a space prefix: encode() added one leading space, so a
  // whole-sequence decode drops it again (like HF's Strip decoder and
  // llama.cpp's detokenize). Streaming callers use token_bytes() and keep it.
  if (spec_.kind == TokenizerKind::kSentencePiece && spec_.add_space_prefix && !out.empty() && out[0] == ' ')
    out.erase(0, 1);
  return out;
}

bool Tokenizer::is_eog(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return false;
  if (id == spec_.eos_id) return true;
  const auto i = static_cast<size_t>(id);
  const bool control = spec_.types.empty() ? false : spec_.types[i] == TokenType::kControl;
  if (!control) return false;
  static constexpr std::array<std::string_view, 6> kEog = {"<|im_end|>",    "<|eot_id|>", "<|end_of_text|>",
                                                           "<|endoftext|>", "</s>",       "<end_of_turn>"};
  return std::find(kEog.begin(), kEog.end(), std::string_view(spec_.tokens[i])) != kEog.end();
}

std::string Utf8Stream::push(std::string_view bytes) {
  pending_.append(bytes);
  std::string out;
  const size_t keep = tok::utf8_sanitize(pending_, /*final=*/false, out);
  pending_.erase(0, keep);
  return out;
}

std::string Utf8Stream::flush() {
  std::string out;
  tok::utf8_sanitize(pending_, /*final=*/true, out);
  pending_.clear();
  return out;
}

}  // namespace redwood
