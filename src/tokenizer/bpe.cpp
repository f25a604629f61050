// Byte-level BPE (GGUF "gpt2"): pre-tokenizer regex chosen by spec.pre, GPT-2
// byte -> unicode mapping, merges applied by rank with a heap over a linked
// list of symbols (O(n log n) per pre-token, so long words cannot blow up).
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "src/tokenizer/hf_punctuation.h"
#include "src/tokenizer/tokenizer_impl.h"
#include "src/tokenizer/unicode_proxies.h"
#include "src/util/error.h"

namespace redwood::tok {
namespace {

constexpr const char* kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Mistral's Tekken (Mistral NeMo, Small 3, Pixtral): its tokenizer.json's
// pattern, letter case runs by category (llama.cpp spells the classes with
// ASCII lookaheads, which its regex engine lacks the categories for).
constexpr const char* kTekkenRegex =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|)"
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|)"
    R"(\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen3.5's tokenizer.json: Qwen2's pattern with combining marks (\p{M}) kept
// in words, so a mark after a letter no longer starts a punctuation piece.
constexpr const char* kQwen35Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Hugging Face's Digits(individual_digits): every \p{N} character (Unicode
// General Category N: Nd, Nl and No, so also ½, ², ①, Ⅻ) is a piece of its own.
constexpr const char* kDigitRegex = R"(\p{N})";

// DeepSeek LLM's and DeepSeek Coder's tokenizer.json: a Sequence of Splits, each
// match isolated: newlines, Latin/Greek/Cyrillic/... letters with an optional
// leading space (LLM: as explicit ranges), punctuation, trailing whitespace
// (LLM), CJK and Hangul runs, digits (LLM: runs; Coder: one each).
constexpr const char* kNewlineRegex = R"([\r\n])";
constexpr const char* kDeepseekLetters =
    R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293})"
    R"(\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C})"
    R"(\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5})"
    R"(\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B})"
    R"(\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45})"
    R"(\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4})"
    R"(\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB})"
    R"(\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115})"
    R"(\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F})"
    R"(\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2})"
    R"(\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E})"
    R"(\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A})"
    R"(\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2})"
    R"(\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)";
constexpr const char* kDeepseekPunct = R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)";
constexpr const char* kTrailingSpaceRegex = R"(\s+$)";
constexpr const char* kCjkRegex = R"([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";
constexpr const char* kDigitRunRegex = R"(\p{N}+)";
// Falcon's: Punctuation (contiguous: runs of what Hugging Face's splits off,
// ASCII punctuation, $+<=>^~|` too, and Unicode 9.0's P; llama.cpp's \p{P}
// also takes punctuation added since), then GPT-2's split, then runs of three
// ASCII digits.
constexpr const char* kFalconPunct = kHfPunctuationRuns;
constexpr const char* kThreeDigits = R"([0-9][0-9][0-9])";
// DeepSeek V3's tokenizer.json: digits in runs of at most three, CJK (Han,
// Hiragana, Katakana) runs, then a Llama-3-like split in which one ASCII
// punctuation character may lead a run of ASCII letters and letters keep their
// combining marks.
constexpr const char* kDigitsUpTo3 = R"(\p{N}{1,3})";
constexpr const char* kDeepseekV3Cjk = R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)";
constexpr const char* kDeepseekV3Regex =
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Every byte-level pre-tokenizer Redwood implements, as data: the names
// (GGUF tokenizer.ggml.pre, llama.cpp's spelling) and the regexes applied in
// order, each splitting every piece the previous ones left (a match and the
// text between matches are pieces), as Hugging Face's Sequence of splits and
// llama.cpp do; then the merges.
struct PreTokenizer {
  std::array<const char*, 4> names;  // unused slots null
  std::array<const char*, 6> stages;  // unused slots null
  bool ignore_merges;  // a piece that is a token is that token (Llama 3's tokenizer.json, llama.cpp)
  bool bos_by_default = false;  // a GGUF without tokenizer.ggml.add_bos_token adds BOS (llama.cpp's default)
};
constexpr PreTokenizer kPreTokenizers[] = {
    // Digits(individual_digits) then ByteLevel: SmolLM, and under their own
    // names in llama.cpp the same scheme for StarCoder, Refact and Command-R.
    {{"smollm", "starcoder", "refact", "command-r"}, {kDigitRegex, kGpt2Regex}, false},
    {{"llama3", "llama-bpe", "llama-v3"}, {kLlama3Regex}, true, true},
    {{"tekken"}, {kTekkenRegex}, true, true},
    {{"qwen2"}, {kQwen2Regex}, false},
    {{"qwen35"}, {kQwen35Regex}, false},
    {{"deepseek-llm"},
     {kNewlineRegex, kDeepseekLetters, kDeepseekPunct, kTrailingSpaceRegex, kCjkRegex, kDigitRunRegex},
     false},
    {{"deepseek-coder"}, {kNewlineRegex, R"(\s?\p{L}+)", R"(\s?\p{P}+)", kCjkRegex, kDigitRegex}, false},
    {{"falcon"}, {kFalconPunct, kGpt2Regex, kThreeDigits}, false},
    {{"deepseek-v3"}, {kDigitsUpTo3, kDeepseekV3Cjk, kDeepseekV3Regex}, false},
    // "gpt-2" is llama.cpp's name; MPT's tokenizer.json is GPT-2's ByteLevel.
    {{"gpt2", "gpt-2", "default", "mpt"}, {kGpt2Regex}, false},
};

// Copies text to copy with every code point of kUnicodeProxies replaced by its
// stand-in (the same UTF-8 length); false (copy untouched) when there is none.
bool with_stand_ins(std::string_view text, std::string& copy) {
  constexpr uint32_t kFirst = kUnicodeProxies[0].lo;
  bool any = false;
  for (size_t i = 0; i < text.size();) {
    const auto lead = static_cast<uint8_t>(text[i]);
    const size_t len = lead < 0xC0 ? 1 : utf8_seq_len(text, i);
    if (len < 2) {
      ++i;
      continue;
    }
    uint32_t cp = lead & (0xFFu >> (len + 1));
    for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<uint8_t>(text[i + k]) & 0x3Fu);
    if (cp >= kFirst) {
      const auto* it = std::upper_bound(std::begin(kUnicodeProxies), std::end(kUnicodeProxies), cp,
                                        [](uint32_t c, const UnicodeProxy& r) { return c < r.lo; });
      if (it != std::begin(kUnicodeProxies) && cp <= (it - 1)->hi) {
        if (!any) copy.assign(text);
        any = true;
        std::string stand_in;
        append_utf8(stand_in, (it - 1)->proxy);
        copy.replace(i, len, stand_in);  // same length by construction
      }
    }
    i += len;
  }
  return any;
}

// tokenizer.json's spelling of a table entry where it is not the entry's
// regexes. A stage after a ByteLevel splits byte-mapped text (a space is Ġ,
// a letter there; bpe_after_byte_level marks it): Falcon's Digits and
// three-digit Split come after its ByteLevel. Its Split sees ASCII digits as
// the text has them; its Digits splits as the entry does on a vocabulary in
// which no token joins a digit-like byte to another character
// (tokenizer_spec.cpp checks), as Falcon's.
constexpr const char* kAfterByteLevel = "<after ByteLevel>";
constexpr const char* kMappedDigitRuns = "<after ByteLevel>\\p{N}+";
constexpr const char* kMappedThreeDigits = "<after ByteLevel>[0-9][0-9][0-9]";
struct JsonForm {
  const char* name;
  std::array<const char*, 6> stages;
};
constexpr JsonForm kJsonForms[] = {
    {"falcon", {kFalconPunct, kGpt2Regex, kMappedDigitRuns, kMappedThreeDigits}},
};

const PreTokenizer* find_pre(std::string_view pre) {
  for (const PreTokenizer& p : kPreTokenizers)
    for (const char* n : p.names)
      if (n && pre == n) return &p;
  return nullptr;
}

// Hugging Face's regexes (Oniguruma) use \s = Unicode White_Space; PCRE2's \s
// in UCP mode also matches U+180E. Spell the class out so both agree: \s and
// \S outside a class become [WS] / [^WS], \s inside a class becomes WS.
constexpr std::string_view kWhiteSpace =
    R"(\t-\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

std::string expand_whitespace(std::string_view pat) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pat.size(); ++i) {
    const char c = pat[i];
    if (c == '\\' && i + 1 < pat.size()) {
      const char d = pat[i + 1];
      ++i;
      if (d == 's') {
        out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      } else if (d == 'S' && !in_class) {
        out += "[^" + std::string(kWhiteSpace) + "]";
      } else {
        out += c;
        out += d;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      if (i + 1 < pat.size() && pat[i + 1] == '^') out += pat[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

// One compiled pattern (UTF + Unicode properties; invalid UTF-8 in a subject is
// never matched, so it ends up in the gaps between matches).
class Regex {
 public:
  explicit Regex(const char* pattern) {
    int err = 0;
    PCRE2_SIZE err_off = 0;
    const std::string pat = expand_whitespace(pattern);
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.data()), pat.size(),
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_off, nullptr);
    if (!code_) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      throw Error(std::string("tokenizer: cannot compile pre-tokenizer regex: ") + reinterpret_cast<char*>(msg));
    }
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // optional: falls back to the interpreter
  }
  ~Regex() { pcre2_code_free(code_); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls emit(piece, matched) for every match and for every gap between
  // matches, in order, covering all of s.
  template <class F>
  void split(std::string_view s, pcre2_match_data* md, F&& emit) const {
    size_t off = 0;
    while (off < s.size()) {
      int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), off, 0, md, nullptr);
      if (rc < 0 && rc != PCRE2_ERROR_NOMATCH)  // JIT stack or match limit: retry interpreted
        rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), off, PCRE2_NO_JIT, md,
                         nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) {
        emit(s.substr(off), false);
        return;
      }
      size_t start, end;
      if (rc < 0) {  // still failing: take one character and go on
        start = off;
        const size_t len = utf8_seq_len(s, off);
        end = off + (len ? len : 1);
      } else {
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        start = ov[0];
        end = ov[1];
        if (end <= start) {  // empty match (not possible with our patterns): one char
          const size_t len = utf8_seq_len(s, start);
          end = start + (len ? len : 1);
        }
      }
      if (start > off) emit(s.substr(off, start - off), false);
      emit(s.substr(start, end - start), rc >= 0);
      off = end;
    }
  }
  pcre2_code* code() const { return code_; }

 private:
  pcre2_code* code_ = nullptr;
};

struct MatchData {
  explicit MatchData(const Regex& re) : md(pcre2_match_data_create_from_pattern(re.code(), nullptr)) {
    if (!md) throw Error("tokenizer: out of memory");
  }
  ~MatchData() { pcre2_match_data_free(md); }
  MatchData(const MatchData&) = delete;
  MatchData& operator=(const MatchData&) = delete;
  pcre2_match_data* md;
};

// A pre-tokenizer's compiled regexes.
class PreSplitter {
 public:
  explicit PreSplitter(std::string_view name) : def_(find_pre(name)) {
    if (!def_)
      throw Error("tokenizer: unknown pre-tokenizer '" + std::string(name) + "' (known: " + known_bpe_pre() + ")");
    for (const char* stage : def_->stages)
      if (stage) stages_.push_back(std::make_unique<Regex>(stage));
  }
  const PreTokenizer& def() const { return *def_; }

  // Calls word(piece) for every piece of text, in order: stage k's regex
  // splits each piece of stage k - 1 (a match and the text between matches
  // are pieces).
  // Code points newer than PCRE2's tables split as their Unicode 16.0
  // category says (as Hugging Face's tokenizers does): the regexes run on a
  // copy with stand-ins of the same category and length, and the pieces are
  // cut from text at the same offsets.
  template <class F>
  void split(std::string_view text, F&& word) const {
    std::vector<std::unique_ptr<MatchData>> mds;
    for (const auto& re : stages_) mds.push_back(std::make_unique<MatchData>(*re));
    std::string copy;
    if (!with_stand_ins(text, copy)) {
      split_stage(text, 0, mds, word);
      return;
    }
    auto original = [&](std::string_view p) { word(text.substr(static_cast<size_t>(p.data() - copy.data()), p.size())); };
    split_stage(copy, 0, mds, original);
  }

 private:
  template <class F>
  void split_stage(std::string_view piece, size_t k, std::vector<std::unique_ptr<MatchData>>& mds, F& word) const {
    if (k == stages_.size()) {
      word(piece);
      return;
    }
    stages_[k]->split(piece, mds[k]->md, [&](std::string_view p, bool) { split_stage(p, k + 1, mds, word); });
  }

  const PreTokenizer* def_;
  std::vector<std::unique_ptr<Regex>> stages_;
};

// GPT-2's reversible byte <-> printable code point mapping.
std::array<uint32_t, 256> byte_to_codepoint() {
  std::array<uint32_t, 256> cp{};
  uint32_t extra = 0;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    cp[b] = printable ? b : 256 + extra++;
  }
  return cp;
}

class BpeTokenizer final : public TokenizerBase {
 public:
  explicit BpeTokenizer(TokenizerSpec spec) : TokenizerBase(std::move(spec)), pre_(spec_.pre) {
    ignore_merges_ = spec_.ignore_merges.value_or(pre_.def().ignore_merges);

    const auto cps = byte_to_codepoint();
    cp_to_byte_.assign(512, -1);
    for (int b = 0; b < 256; ++b) {
      byte_cp_[static_cast<size_t>(b)] = cps[static_cast<size_t>(b)];
      cp_to_byte_[cps[static_cast<size_t>(b)]] = b;
      std::string s;
      append_utf8(s, cps[static_cast<size_t>(b)]);
      byte_id_[static_cast<size_t>(b)] = find_token(s);
      if (byte_id_[static_cast<size_t>(b)] < 0) {  // a byte-fallback token <0xNN>, as some BPE vocabularies have
        static const char* hex = "0123456789ABCDEF";
        byte_id_[static_cast<size_t>(b)] = find_token(std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">");
      }
    }

    merges_ = build_merges();

    // Decoded bytes of every token: undo the byte mapping; characters outside
    // it (and invalid UTF-8) are kept as they are.
    decoded_.resize(spec_.tokens.size());
    for (size_t i = 0; i < spec_.tokens.size(); ++i) {
      const std::string& t = spec_.tokens[i];
      std::string& out = decoded_[i];
      size_t p = 0;
      while (p < t.size()) {
        const size_t len = utf8_seq_len(t, p);
        if (len == 0) {
          out.push_back(t[p++]);
          continue;
        }
        uint32_t cp = static_cast<uint8_t>(t[p]);
        if (len == 2) cp = ((cp & 0x1Fu) << 6) | (static_cast<uint8_t>(t[p + 1]) & 0x3Fu);
        if (len <= 2 && cp < cp_to_byte_.size() && cp_to_byte_[cp] >= 0)
          out.push_back(static_cast<char>(cp_to_byte_[cp]));
        else
          out.append(t, p, len);
        p += len;
      }
    }
  }

 protected:
  void encode_text(std::string_view text, bool, std::vector<int32_t>& out) const override {
    Scratch sc;
    pre_.split(text, [&](std::string_view word) { encode_word(word, sc, out); });
  }

 private:
  struct Sym {
    int32_t id;
    int32_t prev, next;
    bool alive;
  };
  struct Cand {
    int32_t rank, left, right, lid, rid, new_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  struct Scratch {
    std::vector<Sym> syms;
    std::vector<Cand> heap;
    std::string mapped;
  };

  void push_pair(Scratch& sc, int32_t left, int32_t right) const {
    const Sym& l = sc.syms[static_cast<size_t>(left)];
    const Sym& r = sc.syms[static_cast<size_t>(right)];
    if (l.id < 0 || r.id < 0) return;
    auto it = merges_.find(merge_key(l.id, r.id));
    if (it == merges_.end()) return;
    sc.heap.push_back({it->second.rank, left, right, l.id, r.id, it->second.id});
    std::push_heap(sc.heap.begin(), sc.heap.end(), std::greater<>());
  }

  // A byte with neither its mapped character nor a <0xNN> token in the
  // vocabulary (SmolLM2 lacks 0xF5..0xFF, which valid UTF-8 never holds) is an
  // error: llama.cpp and Hugging Face's BPE drop it silently, and the unk id
  // (often <|endoftext|>) would end the text.
  int32_t byte_token(uint8_t b) const {
    const int32_t id = byte_id_[b];
    if (id < 0) {
      static const char* hex = "0123456789abcdef";
      throw Error(std::string("tokenizer: the text holds byte 0x") + hex[b >> 4] + hex[b & 15] +
                  (b >= 0x80 ? " (not valid UTF-8 here)" : "") + ", which this vocabulary has no token for");
    }
    return id;
  }
  static void emit_id(int32_t id, std::vector<int32_t>& out) { out.push_back(id); }

  void encode_word(std::string_view w, Scratch& sc, std::vector<int32_t>& out) const {
    if (w.empty()) return;
    if (w.size() == 1) {
      emit_id(byte_token(static_cast<uint8_t>(w[0])), out);
      return;
    }
    if (ignore_merges_) {
      sc.mapped.clear();
      for (char c : w) append_utf8(sc.mapped, byte_cp_[static_cast<uint8_t>(c)]);
      const int32_t id = find_token(sc.mapped);
      if (id >= 0) {
        out.push_back(id);
        return;
      }
    }
    sc.syms.clear();
    for (char ch : w) {
      const int32_t id = byte_token(static_cast<uint8_t>(ch));
      const auto i = static_cast<int32_t>(sc.syms.size());
      sc.syms.push_back({id, i - 1, -1, true});
      if (i > 0) sc.syms[static_cast<size_t>(i - 1)].next = i;
    }
    const auto n = static_cast<int32_t>(sc.syms.size());
    if (n == 0) return;
    sc.heap.clear();
    for (int32_t i = 0; i + 1 < n; ++i) push_pair(sc, i, i + 1);
    while (!sc.heap.empty()) {
      std::pop_heap(sc.heap.begin(), sc.heap.end(), std::greater<>());
      const Cand c = sc.heap.back();
      sc.heap.pop_back();
      Sym& l = sc.syms[static_cast<size_t>(c.left)];
      if (!l.alive || l.next != c.right || l.id != c.lid) continue;
      Sym& r = sc.syms[static_cast<size_t>(c.right)];
      if (r.id != c.rid) continue;
      l.id = c.new_id;
      l.next = r.next;
      r.alive = false;
      if (l.next >= 0) sc.syms[static_cast<size_t>(l.next)].prev = c.left;
      if (l.prev >= 0) push_pair(sc, l.prev, c.left);
      if (l.next >= 0) push_pair(sc, c.left, l.next);
    }
    for (int32_t i = 0; i >= 0; i = sc.syms[static_cast<size_t>(i)].next) emit_id(sc.syms[static_cast<size_t>(i)].id, out);
  }

  PreSplitter pre_;
  bool ignore_merges_ = false;
  std::array<int32_t, 256> byte_id_{};
  std::array<uint32_t, 256> byte_cp_{};
  std::vector<int> cp_to_byte_;
  std::unordered_map<uint64_t, Merge> merges_;
};

}  // namespace

}  // namespace redwood::tok

namespace redwood {
bool is_known_bpe_pre(std::string_view pre) { return tok::find_pre(pre) != nullptr; }

bool bpe_pre_adds_bos(std::string_view pre) {
  const tok::PreTokenizer* p = tok::find_pre(pre);
  return p && p->bos_by_default;
}

std::string known_bpe_pre() {
  std::string out;
  for (const tok::PreTokenizer& p : tok::kPreTokenizers)
    for (const char* n : p.names)
      if (n) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

std::vector<std::string> bpe_pre_tokenize(std::string_view pre, std::string_view text) {
  std::vector<std::string> pieces;
  tok::PreSplitter(pre).split(text, [&](std::string_view p) { pieces.emplace_back(p); });
  return pieces;
}

namespace {
// A regex as the table writes it: non-ASCII characters as \x{HEX} (upper
// case, no leading zeros), CR, LF and tab as \r \n \t (tokenizer.json holds
// either spelling; PCRE2 reads both alike). A byte that does not begin a
// whole, shortest-form UTF-8 sequence of a scalar value becomes "<byte XX>",
// which no table regex holds, so a malformed pattern never equals an entry (a
// stray 0x80, or the overlong E0 82 80, is not U+0080).
std::string canonical_regex(std::string_view r) {
  std::string out;
  char buf[16];
  for (size_t i = 0; i < r.size();) {
    const auto c = static_cast<unsigned char>(r[i]);
    if (c < 0x80) {
      out += c == '\r' ? "\\r" : c == '\n' ? "\\n" : c == '\t' ? "\\t" : std::string(1, static_cast<char>(c));
      ++i;
      continue;
    }
    const size_t len = c >= 0xF8 ? 0 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    bool whole = len > 0 && i + len <= r.size();
    uint32_t cp = c & (0xFFu >> (len + 1));
    for (size_t k = 1; whole && k < len; ++k) {
      const auto b = static_cast<unsigned char>(r[i + k]);
      whole = (b & 0xC0u) == 0x80u;
      cp = (cp << 6) | (b & 0x3Fu);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are not whole either.
    const uint32_t least = len == 2 ? 0x80u : len == 3 ? 0x800u : 0x10000u;
    if (whole && (cp < least || (cp >= 0xD800u && cp <= 0xDFFFu) || cp > 0x10FFFFu)) whole = false;
    if (!whole) {
      std::snprintf(buf, sizeof buf, "<byte %02X>", c);
      out += buf;
      ++i;
      continue;
    }
    std::snprintf(buf, sizeof buf, "\\x{%X}", cp);
    out += buf;
    i += len;
  }
  return out;
}
}  // namespace

std::string bpe_pre_for_stages(const std::vector<std::string>& stages) {
  auto same = [&](const std::array<const char*, 6>& want) {
    size_t n = 0;
    while (n < want.size() && want[n]) ++n;
    if (n != stages.size()) return false;
    for (size_t i = 0; i < n; ++i)
      if (canonical_regex(stages[i]) != canonical_regex(want[i])) return false;
    return true;
  };
  for (const tok::PreTokenizer& p : tok::kPreTokenizers)
    if (same(p.stages)) return p.names[0];
  for (const tok::JsonForm& f : tok::kJsonForms)
    if (same(f.stages)) return f.name;
  return {};
}

std::string_view bpe_digit_regex(bool individual) { return individual ? tok::kDigitRegex : tok::kDigitRunRegex; }

std::string bpe_after_byte_level(std::string_view stage) { return tok::kAfterByteLevel + std::string(stage); }

std::string_view bpe_punctuation_regex(std::string_view behavior) {
  return behavior == "Contiguous" ? tok::kFalconPunct : std::string_view();
}

std::string_view bpe_byte_level_regex() { return tok::kGpt2Regex; }
}  // namespace redwood

namespace redwood::tok {

std::unique_ptr<Tokenizer> make_bpe(TokenizerSpec spec) { return std::make_unique<BpeTokenizer>(std::move(spec)); }

}  // namespace redwood::tok
