// Tokenizer tests: hand-built byte-level BPE and SentencePiece vocabularies with
// exact expected ids, the streaming UTF-8 decoder, spec validation, the GGUF
// and tokenizer.json loaders, and the real SmolLM2 tokenizer against ids taken
// from Hugging Face `tokenizers` (tools/oracle/tokenizer_ref.py).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "src/model/gguf.h"
#include "src/model/tokenizer_spec.h"
#include "src/tokenizer/tokenizer.h"
#include "src/util/error.h"
#include "tests/util/errors.h"

namespace redwood {
namespace {

using Ids = std::vector<int32_t>;

// ---- helpers --------------------------------------------------------------------

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// GPT-2's byte -> printable character mapping (independent of the library's).
std::string byte_char(int b) {
  int extra = 0;
  for (int x = 0; x < 256; ++x) {
    const bool printable = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174;
    const uint32_t cp = printable ? static_cast<uint32_t>(x) : static_cast<uint32_t>(256 + extra++);
    if (x == b) return utf8(cp);
  }
  return {};
}

// Byte-level BPE: ids 0..255 are the bytes, 256 is the control token <|end|>.
enum : int32_t {
  kEnd = 256, kHe, kLl, kLlo, kHello, kSpW, kOr, kSpWor, kLd, kSpWorld, kBc, kAb, k12, kSpSp, kSpNl,
};

TokenizerSpec tiny_bpe_spec(const std::string& pre = "gpt2") {
  TokenizerSpec s;
  s.kind = TokenizerKind::kByteLevelBpe;
  s.pre = pre;
  for (int b = 0; b < 256; ++b) s.tokens.push_back(byte_char(b));
  s.tokens.push_back("<|end|>");
  const std::string sp = byte_char(' '), nl = byte_char('\n');
  for (const std::string& t : {std::string("he"), std::string("ll"), std::string("llo"), std::string("hello"),
                               sp + "w", std::string("or"), sp + "wor", std::string("ld"), sp + "world",
                               std::string("bc"), std::string("ab"), std::string("12"), sp + sp, sp + nl})
    s.tokens.push_back(t);
  s.types.assign(s.tokens.size(), TokenType::kNormal);
  s.types[kEnd] = TokenType::kControl;
  s.merges = {"h e",     "l l",   "ll o",      "he llo", sp + " w", "o r",    sp + "w or",
              "l d",     sp + "wor ld", "b c", "a b",    "1 2",     sp + " " + nl, sp + " " + sp};
  s.eos_id = kEnd;
  return s;
}

// SentencePiece: 0 <unk>, 1 <s>, 2 </s>, 3..258 <0xNN>, then pieces with scores.
enum : int32_t { kSpace = 259, kH, kE, kL, kO, kSpH, kHe2, kLl2, kHell, kHello2, kSpHello };
int32_t byte_tok(int b) { return 3 + b; }

TokenizerSpec tiny_spm_spec() {
  TokenizerSpec s;
  s.kind = TokenizerKind::kSentencePiece;
  s.tokens = {"<unk>", "<s>", "</s>"};
  s.types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    s.tokens.push_back(name);
    s.types.push_back(TokenType::kByte);
  }
  const std::string ws = "\xE2\x96\x81";
  const std::vector<std::pair<std::string, float>> pieces = {
      {ws, 0}, {"h", 0}, {"e", 0}, {"l", 0}, {"o", 0}, {ws + "h", -5}, {"he", -1}, {"ll", -2},
      {"hell", -3}, {"hello", -4}, {ws + "hello", -6}};
  s.scores.assign(s.tokens.size(), 0.0f);
  for (const auto& [t, score] : pieces) {
    s.tokens.push_back(t);
    s.types.push_back(TokenType::kNormal);
    s.scores.push_back(score);
  }
  s.unk_id = 0;
  s.bos_id = 1;
  s.eos_id = 2;
  s.add_bos = true;
  s.add_space_prefix = true;
  return s;
}

// ---- byte-level BPE -------------------------------------------------------------

TEST(TokenizerBpe, MergesByRank) {
  auto tok = Tokenizer::create(tiny_bpe_spec());
  EXPECT_EQ(tok->encode("hello world", false, false), (Ids{kHello, kSpWorld}));
  // "b c" (rank 9) beats "a b" (rank 10) although "a b" is further left.
  EXPECT_EQ(tok->encode("abc", false, false), (Ids{'a', kBc}));
  EXPECT_EQ(tok->encode("ab", false, false), (Ids{kAb}));
  EXPECT_EQ(tok->encode("", false, false), Ids{});
  EXPECT_EQ(tok->decode(Ids{kHello, kSpWorld}), "hello world");
  EXPECT_EQ(tok->token_bytes(' '), " ");
  EXPECT_EQ(tok->token_bytes(kSpW), " w");
  EXPECT_EQ(tok->token_bytes('\n'), "\n");
}

TEST(TokenizerBpe, SpecialTokens) {
  auto tok = Tokenizer::create(tiny_bpe_spec());
  EXPECT_EQ(tok->encode("hello<|end|>", false, true), (Ids{kHello, kEnd}));
  EXPECT_EQ(tok->encode("hello<|end|>", false, false), (Ids{kHello, '<', '|', 'e', 'n', 'd', '|', '>'}));
  EXPECT_EQ(tok->encode("<|end|><|end|>", false, true), (Ids{kEnd, kEnd}));
  EXPECT_EQ(tok->encode("<|end", false, true), (Ids{'<', '|', 'e', 'n', 'd'}));
  EXPECT_EQ(tok->token_bytes(kEnd), "");
  EXPECT_EQ(tok->token_bytes(kEnd, true), "<|end|>");
  EXPECT_EQ(tok->decode(Ids{kHello, kEnd}, true), "hello<|end|>");
  EXPECT_TRUE(tok->is_eog(kEnd));
  EXPECT_FALSE(tok->is_eog(kHello));
  EXPECT_FALSE(tok->is_eog(-1));

  TokenizerSpec s = tiny_bpe_spec();
  s.bos_id = kEnd;
  s.add_bos = true;
  s.add_eos = true;
  auto tok2 = Tokenizer::create(s);
  EXPECT_EQ(tok2->encode("hello", true, false), (Ids{kEnd, kHello, kEnd}));
  EXPECT_EQ(tok2->encode("hello", false, false), (Ids{kHello}));
}

// User-defined (added, not control) tokens are matched in the text whether or
// not specials are parsed, as Hugging Face's added tokens and llama.cpp are
// (GPT-NeoX/MPT's runs of spaces); control tokens only when parsed.
TEST(TokenizerBpe, UserDefinedTokensAreAlwaysMatched) {
  TokenizerSpec s = tiny_bpe_spec();
  const int32_t three = static_cast<int32_t>(s.tokens.size());
  s.tokens.push_back("   ");
  s.types.push_back(TokenType::kUserDefined);
  auto tok = Tokenizer::create(s);
  EXPECT_EQ(tok->encode("ab   hello<|end|>", false, false),
            (Ids{kAb, three, kHello, '<', '|', 'e', 'n', 'd', '|', '>'}));
  EXPECT_EQ(tok->encode("ab   hello<|end|>", false, true), (Ids{kAb, three, kHello, kEnd}));
  EXPECT_EQ(tok->encode("ab  hello", false, false), (Ids{kAb, ' ', ' ', kHello}));  // (no "  " + "hello" merge)
  EXPECT_EQ(tok->decode(Ids{kAb, three, kHello}), "ab   hello");
  // The same text when the token is an ordinary one: split by the pre-tokenizer.
  s.types.back() = TokenType::kNormal;
  EXPECT_NE(Tokenizer::create(s)->encode("ab   hello", false, false), (Ids{kAb, three, kHello}));
}

TEST(TokenizerBpe, PreTokenizers) {
  // gpt2 keeps digit runs together; smollm isolates every digit.
  EXPECT_EQ(Tokenizer::create(tiny_bpe_spec("gpt2"))->encode("a12", false, false), (Ids{'a', k12}));
  EXPECT_EQ(Tokenizer::create(tiny_bpe_spec("smollm"))->encode("a12", false, false), (Ids{'a', '1', '2'}));
  // An unknown name is an error (it used to become gpt2's pattern silently);
  // llama.cpp's spelling "gpt-2" is gpt2's pattern.
  EXPECT_NE(testutil::error_of([] { Tokenizer::create(tiny_bpe_spec("no-such-pre")); })
                .find("unknown pre-tokenizer 'no-such-pre'"),
            std::string::npos);
  EXPECT_EQ(Tokenizer::create(tiny_bpe_spec("gpt-2"))->encode("a12", false, false), (Ids{'a', k12}));
  // gpt2: "a", "  ", "\n", "b"; llama3: "a", "  \n", "b" where "Ġ Ċ" outranks "Ġ Ġ".
  EXPECT_EQ(Tokenizer::create(tiny_bpe_spec("gpt2"))->encode("a  \nb", false, false), (Ids{'a', kSpSp, '\n', 'b'}));
  EXPECT_EQ(Tokenizer::create(tiny_bpe_spec("llama3"))->encode("a  \nb", false, false),
            (Ids{'a', ' ', kSpNl, 'b'}));
  // smollm: a digit splits the whitespace run before it exactly like HF's Digits.
  EXPECT_EQ(Tokenizer::create(tiny_bpe_spec("smollm"))->encode("x  1", false, false), (Ids{'x', kSpSp, '1'}));
}

using Pieces = std::vector<std::string>;

// \p{N} is Unicode's General Category N (Nd, Nl and No), as in llama.cpp's
// tables and Hugging Face's regexes: not only ASCII digits but ½ (No),
// ² (No), ① (No), Ⅻ (Nl), 〇 (Nl), Arabic-Indic ٣ (Nd), 𝟙 (Nd); not ° (So),
// ª (Lo) or the Arabic decimal separator ٫ (Po).
TEST(TokenizerBpe, NumberClassIsUnicodeCategoryN) {
  // llama.cpp's own case (ggml-vocab-*.gguf.inp): Digits then ByteLevel.
  EXPECT_EQ(bpe_pre_tokenize("smollm", "ied 4 \u00BD months"),
            (Pieces{"ied", " ", "4", " ", "\u00BD", " months"}));
  EXPECT_EQ(bpe_pre_tokenize("starcoder", "x\u00B2\u2460\u216B\u3007\u0663\U0001D7D9y"),
            (Pieces{"x", "\u00B2", "\u2460", "\u216B", "\u3007", "\u0663", "\U0001D7D9", "y"}));
  // Not numbers: ° and ٫ stay punctuation glued to what follows, ª is a letter.
  EXPECT_EQ(bpe_pre_tokenize("smollm", "1\u00B0!\u0661\u066B\u0662 \u00AAb"),
            (Pieces{"1", "\u00B0!", "\u0661", "\u066B", "\u0662", " \u00AAb"}));
  // GPT-2: a number run ends at punctuation; Llama 3: runs of at most three.
  EXPECT_EQ(bpe_pre_tokenize("gpt2", "\u00BD\u00B2!"), (Pieces{"\u00BD\u00B2", "!"}));
  EXPECT_EQ(bpe_pre_tokenize("llama3", "\u00BD\u00B2\u2460\u216B\u0663"),
            (Pieces{"\u00BD\u00B2\u2460", "\u216B\u0663"}));
  EXPECT_EQ(bpe_pre_tokenize("qwen2", "a\u00BD\u0663"), (Pieces{"a", "\u00BD", "\u0663"}));
}

// Code points that Unicode 15.0-16.0 added are unassigned to PCRE2 10.42
// (Unicode 14.0); they split by their 16.0 category, as Hugging Face's
// tokenizers (Unicode 16.0) splits them. Pieces as the tokenizers package
// gives them for Llama 3's pattern: Kawi U+11F04 (15.0) and Garay U+10D4A
// (16.0) are letters, Nag Mundari U+1E4F0 (15.0) and the outlined digit
// U+1CCF0 (16.0) are digits, the ideographic description U+2FFC (15.1) is a
// symbol, as is a code point still unassigned (U+1FFFE): one may lead a word.
TEST(TokenizerBpe, CodePointsNewerThanPcre2SplitByTheirCategory) {
  EXPECT_EQ(bpe_pre_tokenize("llama3", "x\U00011F04y \U00010D4Ab"), (Pieces{"x\U00011F04y", " \U00010D4Ab"}));
  EXPECT_EQ(bpe_pre_tokenize("llama3", "x\U0001E4F0y\U0001CCF0"), (Pieces{"x", "\U0001E4F0", "y", "\U0001CCF0"}));
  EXPECT_EQ(bpe_pre_tokenize("llama3", "x\u2FFCy"), (Pieces{"x", "\u2FFCy"}));
  EXPECT_EQ(bpe_pre_tokenize("llama3", "x\U0001FFFEy"), (Pieces{"x", "\U0001FFFEy"}));
  // The stand-ins only decide where pieces end: the pieces are the text's bytes.
  EXPECT_EQ(bpe_pre_tokenize("qwen2", "\U00031350\U00031351 \U0001E4F0"),
            (Pieces{"\U00031350\U00031351", " ", "\U0001E4F0"}));
  // Case-insensitive contractions fold as Unicode does (so does tokenizers;
  // llama.cpp folds ASCII only): long s U+017F is an s.
  EXPECT_EQ(bpe_pre_tokenize("llama3", "it'\u017f ok"), (Pieces{"it", "'\u017f", " ok"}));
}

// DeepSeek LLM and Coder, Falcon and MPT (issue 46): their stages in order
// (llama.cpp's ggml-vocab tests check whole texts: oracle_llamacpp_vocab).
TEST(Tokenizer, DeepseekFalconMptPreTokenizers) {
  // Coder: letters with one leading space, digits one each, CJK runs apart.
  EXPECT_EQ(bpe_pre_tokenize("deepseek-coder", "Hello 123\n\u4f60\u597d!"),
            (Pieces{"Hello", " ", "1", "2", "3", "\n", "\u4f60\u597d", "!"}));
  // LLM: digit runs whole, trailing whitespace its own piece.
  EXPECT_EQ(bpe_pre_tokenize("deepseek-llm", "ab 2024,  "), (Pieces{"ab", " ", "2024", ",", "  "}));
  // Falcon: punctuation first (also $ and +), then GPT-2's split, then three digits at a time.
  EXPECT_EQ(bpe_pre_tokenize("falcon", "a$+b 12345"), (Pieces{"a", "$+", "b", " ", "123", "45"}));
  // Punctuation as Hugging Face's counts it: Unicode 9.0's (U+2E42, added in
  // 7.0, is one; U+2E44, added in 10.0, is not, so GPT-2's split keeps it
  // with the space before it); pieces as tokens the tokenizers package gives.
  EXPECT_EQ(bpe_pre_tokenize("falcon", "x \u2E42 y a \u2E44 b"),
            (Pieces{"x", " ", "\u2E42", " y", " a", " \u2E44", " b"}));
  EXPECT_EQ(bpe_pre_tokenize("mpt", "it's 12"), bpe_pre_tokenize("gpt2", "it's 12"));
  // V3 (its real tokenizer.json, pieces as the tokenizers package gives them):
  // digits three at a time, CJK runs apart, one punctuation character may lead
  // ASCII letters, but a space starts a punctuation run first.
  EXPECT_EQ(bpe_pre_tokenize("deepseek-v3", "Hello, 12345 \u4e16\u754c! ,abc \u00bd \u2460"),
            (Pieces{"Hello", ",", " ", "123", "45", " ", "\u4e16\u754c", "!", " ,", "abc", " ", "\u00bd", " ", "\u2460"}));
  for (const char* n : {"deepseek-llm", "deepseek-coder", "deepseek-v3", "falcon", "mpt"})
    EXPECT_TRUE(is_known_bpe_pre(n)) << n;
}

// Mistral's Tekken (tokenizer.ggml.pre "tekken"): words split by letter case
// (an upper-case run may lead lower case), digits one by one, no contractions;
// pieces as the tokenizers package gives them for its tokenizer.json pattern.
TEST(TokenizerBpe, TekkenSplitsWordsByCase) {
  EXPECT_EQ(bpe_pre_tokenize("tekken", "HelloWorld ABCdef XMLHttpRequest 123 a/b//\n"),
            (Pieces{"Hello", "World", " ABCdef", " XMLHttp", "Request", " ", "1", "2", "3", " a", "/b", "//\n"}));
  EXPECT_EQ(bpe_pre_tokenize("tekken", "it's DON'T \u00c9cole \u01c5emal"),
            (Pieces{"it", "'s", " DON", "'T", " \u00c9cole", " \u01c5emal"}));
  EXPECT_TRUE(is_known_bpe_pre("tekken"));
  // llama.cpp's defaults for a GGUF without tokenizer.ggml.add_bos_token.
  EXPECT_TRUE(bpe_pre_adds_bos("tekken"));
  EXPECT_TRUE(bpe_pre_adds_bos("llama-bpe"));
  EXPECT_FALSE(bpe_pre_adds_bos("qwen2"));
  EXPECT_FALSE(bpe_pre_adds_bos("no-such-pre"));
}

// Qwen3.5 (tokenizer.ggml.pre "qwen35"): Qwen2's pattern with combining marks
// (\p{M}) in words:
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}
//   | ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// Expected pieces derived from that pattern (leftmost alternative first); the
// vocabulary test (tests/python/test_llamacpp_vocab.py) checks the same
// pre-tokenizer against llama.cpp's ids.
TEST(TokenizerBpe, Qwen35Split) {
  // A decomposed é (e + U+0301): one word for qwen35; Qwen2 cuts the mark off.
  EXPECT_EQ(bpe_pre_tokenize("qwen35", "cafe\u0301 ok"), (Pieces{"cafe\u0301", " ok"}));
  EXPECT_EQ(bpe_pre_tokenize("qwen2", "cafe\u0301 ok"), (Pieces{"cafe", "\u0301", " ok"}));
  // Devanagari: virama (Mn) and vowel sign (Mc) inside the word.
  EXPECT_EQ(bpe_pre_tokenize("qwen35", "\u0928\u092E\u0938\u094D\u0924\u0947!"),
            (Pieces{"\u0928\u092E\u0938\u094D\u0924\u0947", "!"}));
  EXPECT_EQ(bpe_pre_tokenize("qwen2", "\u0928\u092E\u0938\u094D\u0924\u0947!"),
            (Pieces{"\u0928\u092E\u0938", "\u094D\u0924", "\u0947!"}));
  // Punctuation stops before a mark; one punctuation character may lead a
  // word of marks; a mark after a digit is a word of its own.
  EXPECT_EQ(bpe_pre_tokenize("qwen35", "!!\u0301 a!\u0301 1\u0301"),
            (Pieces{"!!", "\u0301", " a", "!\u0301", " ", "1", "\u0301"}));
  // Contractions in any case, digits one by one, ½ a number, newline runs.
  EXPECT_EQ(bpe_pre_tokenize("qwen35", "DON'T we'Ll\r\n\r\n 12\u00BD"),
            (Pieces{"DON", "'T", " we", "'Ll", "\r\n\r\n", " ", "1", "2", "\u00BD"}));
  EXPECT_EQ(bpe_pre_tokenize("qwen35", "ied 4 \u00BD months"), (Pieces{"ied", " ", "4", " ", "\u00BD", " months"}));
  // Trailing and inner whitespace as Qwen2: a run before a word keeps one space for it.
  EXPECT_EQ(bpe_pre_tokenize("qwen35", "a   b  "), (Pieces{"a", "  ", " b", "  "}));
  // Invalid UTF-8 is never matched: it lies between the matches.
  EXPECT_EQ(bpe_pre_tokenize("qwen35", "a\xff\u0301"), (Pieces{"a", "\xff", "\u0301"}));
  EXPECT_TRUE(is_known_bpe_pre("qwen35"));
  EXPECT_NE(known_bpe_pre().find("qwen35"), std::string::npos);
  EXPECT_NE(testutil::error_of([] { bpe_pre_tokenize("qwen99", "x"); }).find("unknown pre-tokenizer 'qwen99'"),
            std::string::npos);
}

TEST(TokenizerBpe, InvalidUtf8AndLongInput) {
  auto tok = Tokenizer::create(tiny_bpe_spec());
  const std::string bad = "a\xff\xfe\xc3(\xe2\x82 b\x80";
  const Ids ids = tok->encode(bad, false, true);
  EXPECT_EQ(tok->decode(ids), bad);
  EXPECT_EQ(tok->encode("\xff", false, false), (Ids{0xff}));
  std::string long_word(20000, 'l');
  const Ids l = tok->encode(long_word, false, false);
  EXPECT_EQ(l.size(), 10000u);
  EXPECT_EQ(tok->decode(l), long_word);
}

// Issue 42: a byte the vocabulary has no token for is never dropped silently:
// a <0xNN> byte token when there is one, else an error naming the byte.
TEST(TokenizerBpe, BytesMissingFromTheVocabularyAreNeverDropped) {
  TokenizerSpec s = tiny_bpe_spec();
  s.tokens[0xff] = "<unused-ff>";
  s.tokens[0xfe] = "<unused-fe>";
  s.tokens.push_back("<0xFF>");
  s.types.push_back(TokenType::kByte);
  const auto fallback = static_cast<int32_t>(s.tokens.size() - 1);
  auto tok = Tokenizer::create(s);
  EXPECT_EQ(tok->encode("x\xffy", false, false), (Ids{'x', fallback, 'y'}));
  const std::string e = testutil::error_of([&] { tok->encode("x\xffy\xfez", false, false); });
  EXPECT_NE(e.find("byte 0xfe"), std::string::npos) << e;
}

TEST(TokenizerSpm, ACharacterWithoutTokenByteTokenOrUnkIsAnError) {
  TokenizerSpec s = tiny_spm_spec();
  auto with_unk = Tokenizer::create(s);
  s.tokens[byte_tok(0xff)] = "<unused>";  // no <0xFF>
  s.types[static_cast<size_t>(byte_tok(0xff))] = TokenType::kUnused;
  EXPECT_EQ(Tokenizer::create(s)->encode("\xff", false, false), (Ids{kSpace, 0}));  // <unk>
  s.unk_id = -1;
  const std::string e = testutil::error_of([&] { Tokenizer::create(s)->encode("h\xff" "e", false, false); });
  EXPECT_NE(e.find("bytes 0xff"), std::string::npos) << e;
}

TEST(TokenizerBpe, OutOfRangeIdThrows) {
  auto tok = Tokenizer::create(tiny_bpe_spec());
  EXPECT_THROW(tok->token_bytes(-1), Error);
  EXPECT_THROW(tok->token_bytes(tok->vocab_size()), Error);
  const Ids bad{kHello, 100000};
  EXPECT_THROW(tok->decode(bad), Error);
}

TEST(TokenizerFuzz, RandomBytes) {
  auto bpe = Tokenizer::create(tiny_bpe_spec("smollm"));
  auto llama3 = Tokenizer::create(tiny_bpe_spec("llama3"));
  auto spm = Tokenizer::create(tiny_spm_spec());
  uint64_t x = 0x9E3779B97F4A7C15ull;
  const std::string alphabet[] = {"a", "l", "h", "e", " ", "\n", "\r", "1", "'", "s", "<|end|>", "<s>", "\xE2\x96\x81",
                                  "\xC3", "\xA9", "\xFF", "\xF0\x9F", "\xA6\x80", "\t", "!"};
  for (int iter = 0; iter < 2000; ++iter) {
    std::string text;
    const int n = iter % 40;
    for (int k = 0; k < n; ++k) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      text += (x & 3) == 0 ? std::string(1, static_cast<char>(x >> 24)) : alphabet[(x >> 8) % std::size(alphabet)];
    }
    for (bool parse : {false, true}) {
      EXPECT_EQ(bpe->decode(bpe->encode(text, true, parse), parse), text);
      EXPECT_EQ(llama3->decode(llama3->encode(text, true, parse), parse), text);
      for (int32_t id : spm->encode(text, true, parse)) ASSERT_TRUE(id >= 0 && id < spm->vocab_size());
    }
    Utf8Stream st;
    std::string out;
    for (char c : text) out += st.push(std::string_view(&c, 1));
    out += st.flush();
    Utf8Stream whole;
    std::string expect = whole.push(text);
    expect += whole.flush();
    EXPECT_EQ(out, expect);
  }
}

// ---- SentencePiece ------------------------------------------------------------

TEST(TokenizerSpm, MergesByScore) {
  auto tok = Tokenizer::create(tiny_spm_spec());
  EXPECT_EQ(tok->encode("hello", false, false), (Ids{kSpHello}));
  EXPECT_EQ(tok->encode("hello", true, false), (Ids{1, kSpHello}));
  // "i" is not in the vocabulary: byte fallback.
  EXPECT_EQ(tok->encode("hi", false, false), (Ids{kSpH, byte_tok('i')}));
  // Equal scores: the leftmost pair wins.
  EXPECT_EQ(tok->encode("lll", false, false), (Ids{kSpace, kLl2, kL}));
  EXPECT_EQ(tok->encode("\xC3\xA9", false, false), (Ids{kSpace, byte_tok(0xC3), byte_tok(0xA9)}));
  EXPECT_EQ(tok->encode("h h", false, false), (Ids{kSpH, kSpH}));
  EXPECT_EQ(tok->encode("\xff", false, false), (Ids{kSpace, byte_tok(0xff)}));
  EXPECT_EQ(tok->encode("", true, false), (Ids{1}));

  TokenizerSpec s = tiny_spm_spec();
  s.add_space_prefix = false;
  EXPECT_EQ(Tokenizer::create(s)->encode("hello", false, false), (Ids{kHello2}));
}

TEST(TokenizerSpm, SpecialsAndDecode) {
  auto tok = Tokenizer::create(tiny_spm_spec());
  EXPECT_EQ(tok->encode("<s>hello</s>hello", false, true), (Ids{1, kSpHello, 2, kSpHello}));
  EXPECT_EQ(tok->token_bytes(kSpHello), " hello");
  EXPECT_EQ(tok->token_bytes(byte_tok('A')), "A");
  EXPECT_EQ(tok->token_bytes(1), "");
  EXPECT_EQ(tok->token_bytes(1, true), "<s>");
  // A whole-sequence decode drops the space prefix that encode added.
  EXPECT_EQ(tok->decode(Ids{1, kSpHello}), "hello");
  EXPECT_EQ(tok->decode(Ids{kSpH, byte_tok('i')}), "hi");
  for (const std::string s : {"hello", "hi there", "a  b", "\xC3\xA9t\xC3\xA9", "tab\there\n", "x\xff"})
    EXPECT_EQ(tok->decode(tok->encode(s, true, false)), s) << s;
  EXPECT_TRUE(tok->is_eog(2));
  EXPECT_FALSE(tok->is_eog(1));
}

TEST(TokenizerSpm, MergesWithoutScores) {
  // HF tokenizer.json style: no scores, merges give the order.
  TokenizerSpec s = tiny_spm_spec();
  s.scores.clear();
  s.merges = {"l l", "h e", "he ll", "hell o"};
  auto tok = Tokenizer::create(s);
  EXPECT_EQ(tok->encode("hello", false, false), (Ids{kSpace, kHello2}));
}

// ---- Utf8Stream -----------------------------------------------------------------

TEST(Utf8Stream, HoldsIncompleteSequences) {
  Utf8Stream st;
  EXPECT_EQ(st.push("a"), "a");
  EXPECT_EQ(st.push("\xC3"), "");
  EXPECT_EQ(st.push("\xA9"), "\xC3\xA9");
  const std::string crab = "\xF0\x9F\xA6\x80";
  EXPECT_EQ(st.push(crab.substr(0, 1)), "");
  EXPECT_EQ(st.push(crab.substr(1, 1)), "");
  EXPECT_EQ(st.push(crab.substr(2, 1)), "");
  EXPECT_EQ(st.push(crab.substr(3, 1) + "b\xE2\x82"), crab + "b");
  EXPECT_EQ(st.push("\xAC"), "\xE2\x82\xAC");
  EXPECT_EQ(st.flush(), "");
  EXPECT_EQ(st.push(""), "");
}

TEST(Utf8Stream, InvalidBytesBecomeReplacement) {
  const std::string fffd = "\xEF\xBF\xBD";
  Utf8Stream st;
  EXPECT_EQ(st.push("\xFF"), fffd);
  EXPECT_EQ(st.push("\xC3(x"), fffd + "(x");
  EXPECT_EQ(st.push("\x80"), fffd);              // stray continuation
  EXPECT_EQ(st.push("\xC0\x80"), fffd + fffd);   // overlong
  EXPECT_EQ(st.push("\xED\xA0\x80"), fffd + fffd + fffd);  // surrogate
  EXPECT_EQ(st.push("\xF4\x90\x80\x80"), fffd + fffd + fffd + fffd);  // > U+10FFFF
  EXPECT_EQ(st.push("ok\xE2\x82"), "ok");
  EXPECT_EQ(st.flush(), fffd);  // incomplete tail
  EXPECT_EQ(st.flush(), "");
  EXPECT_EQ(st.push("\xF0\x9F"), "");
  EXPECT_EQ(st.push("z"), fffd + "z");
}

// ---- spec validation ------------------------------------------------------------

TEST(TokenizerSpec, BadSpecsThrow) {
  {
    TokenizerSpec s;
    EXPECT_THROW(Tokenizer::create(s), Error);  // empty vocabulary
  }
  {
    TokenizerSpec s = tiny_bpe_spec();
    s.bos_id = 100000;
    EXPECT_THROW(Tokenizer::create(s), Error);
  }
  {
    TokenizerSpec s = tiny_bpe_spec();
    s.eos_id = -2;
    EXPECT_THROW(Tokenizer::create(s), Error);
  }
  {
    TokenizerSpec s = tiny_bpe_spec();
    s.scores = {1.0f, 2.0f};
    EXPECT_THROW(Tokenizer::create(s), Error);
  }
  {
    TokenizerSpec s = tiny_bpe_spec();
    s.types.pop_back();
    EXPECT_THROW(Tokenizer::create(s), Error);
  }
  {
    TokenizerSpec s = tiny_bpe_spec();
    s.types[5] = static_cast<TokenType>(42);
    EXPECT_THROW(Tokenizer::create(s), Error);
  }
  {
    TokenizerSpec s = tiny_bpe_spec();
    s.merges.push_back("nospace");
    EXPECT_THROW(Tokenizer::create(s), Error);
  }
  {
    // Merges naming unknown tokens are skipped, not an error.
    TokenizerSpec s = tiny_bpe_spec();
    s.merges.insert(s.merges.begin(), "zz qq");
    s.merges.insert(s.merges.begin(), "h e" /* duplicate, better rank: harmless */);
    auto tok = Tokenizer::create(s);
    EXPECT_EQ(tok->encode("hello world", false, false), (Ids{kHello, kSpWorld}));
  }
  {
    // No types: BOS/EOS become the control tokens.
    TokenizerSpec s = tiny_bpe_spec();
    s.types.clear();
    auto tok = Tokenizer::create(s);
    EXPECT_EQ(tok->token_bytes(kEnd), "");
    EXPECT_EQ(tok->encode("a<|end|>", false, true), (Ids{'a', kEnd}));
  }
}

// ---- GGUF loader ------------------------------------------------------------------

class GgufWriter {
 public:
  void str(const std::string& key, const std::string& v) {
    kv(key, 8);
    put_str(v);
  }
  void u32(const std::string& key, uint32_t v) {
    kv(key, 4);
    put(v);
  }
  void i32(const std::string& key, int32_t v) {
    kv(key, 5);
    put(v);
  }
  void boolean(const std::string& key, bool v) {
    kv(key, 7);
    put(static_cast<uint8_t>(v));
  }
  void str_array(const std::string& key, const std::vector<std::string>& v) {
    kv(key, 9);
    put(uint32_t{8});
    put(static_cast<uint64_t>(v.size()));
    for (const auto& s : v) put_str(s);
  }
  void f32_array(const std::string& key, const std::vector<float>& v) {
    kv(key, 9);
    put(uint32_t{6});
    put(static_cast<uint64_t>(v.size()));
    for (float f : v) put(f);
  }
  void i32_array(const std::string& key, const std::vector<int32_t>& v) {
    kv(key, 9);
    put(uint32_t{5});
    put(static_cast<uint64_t>(v.size()));
    for (int32_t x : v) put(x);
  }
  std::string write(const std::string& name) const {
    const std::string path = ::testing::TempDir() + name;
    std::ofstream f(path, std::ios::binary);
    std::string head = "GGUF";
    const auto app = [&](const auto& v) { head.append(reinterpret_cast<const char*>(&v), sizeof v); };
    app(uint32_t{3});
    app(uint64_t{0});
    app(n_kv_);
    f << head << body_;
    return path;
  }

 private:
  template <class T>
  void put(T v) {
    body_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void put_str(const std::string& s) {
    put(static_cast<uint64_t>(s.size()));
    body_ += s;
  }
  void kv(const std::string& key, uint32_t type) {
    put_str(key);
    put(type);
    ++n_kv_;
  }
  std::string body_;
  uint64_t n_kv_ = 0;
};

GgufWriter tiny_llama_gguf() {
  const TokenizerSpec s = tiny_spm_spec();
  GgufWriter w;
  w.str("general.architecture", "llama");
  w.str("tokenizer.ggml.model", "llama");
  w.str_array("tokenizer.ggml.tokens", s.tokens);
  w.f32_array("tokenizer.ggml.scores", s.scores);
  std::vector<int32_t> types;
  for (TokenType t : s.types) types.push_back(static_cast<int32_t>(t));
  w.i32_array("tokenizer.ggml.token_type", types);
  w.u32("tokenizer.ggml.bos_token_id", 1);
  w.u32("tokenizer.ggml.eos_token_id", 2);
  w.u32("tokenizer.ggml.unknown_token_id", 0);
  w.i32("tokenizer.ggml.padding_token_id", -1);
  return w;
}

std::string load_error(const std::string& path) {
  try {
    tokenizer_spec_from_gguf(GgufFile::open(path));
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(TokenizerGguf, SentencePieceSpec) {
  const std::string path = tiny_llama_gguf().write("tok_llama.gguf");
  const TokenizerSpec s = tokenizer_spec_from_gguf(GgufFile::open(path));
  EXPECT_EQ(s.kind, TokenizerKind::kSentencePiece);
  EXPECT_EQ(s.tokens.size(), tiny_spm_spec().tokens.size());
  EXPECT_EQ(s.bos_id, 1);
  EXPECT_EQ(s.eos_id, 2);
  EXPECT_EQ(s.unk_id, 0);
  EXPECT_EQ(s.pad_id, -1);
  EXPECT_TRUE(s.add_bos);           // llama default
  EXPECT_TRUE(s.add_space_prefix);  // llama default
  EXPECT_FALSE(s.add_eos);
  auto tok = Tokenizer::create(s);
  EXPECT_EQ(tok->encode("hello", true, false), (Ids{1, kSpHello}));
}

// A byte-level GGUF without tokenizer.ggml.add_bos_token adds BOS where
// llama.cpp does by default (Llama 3's and Tekken's pre-tokenizers), else not;
// the key, where present, decides.
TEST(TokenizerGguf, BosDefaultFollowsThePreTokenizer) {
  auto spec_of = [](const std::string& pre, int add_bos) {  // add_bos < 0: no key
    GgufWriter w;
    w.str("tokenizer.ggml.model", "gpt2");
    w.str("tokenizer.ggml.pre", pre);
    w.str_array("tokenizer.ggml.tokens", {"a", "b", "ab"});
    w.str_array("tokenizer.ggml.merges", {"a b"});
    w.u32("tokenizer.ggml.bos_token_id", 0);
    if (add_bos >= 0) w.boolean("tokenizer.ggml.add_bos_token", add_bos != 0);
    return tokenizer_spec_from_gguf(GgufFile::open(w.write("tok_bos_" + pre + ".gguf")));
  };
  EXPECT_TRUE(spec_of("llama-bpe", -1).add_bos);
  EXPECT_TRUE(spec_of("tekken", -1).add_bos);
  EXPECT_FALSE(spec_of("qwen2", -1).add_bos);
  EXPECT_FALSE(spec_of("gpt2", -1).add_bos);
  EXPECT_FALSE(spec_of("tekken", 0).add_bos);
  EXPECT_TRUE(spec_of("qwen2", 1).add_bos);
}

TEST(TokenizerGguf, BadMetadataThrows) {
  {
    GgufWriter w;
    w.str("general.architecture", "llama");
    EXPECT_NE(load_error(w.write("tok_none.gguf")).find("model has no tokenizer (tokenizer.ggml.tokens missing)"),
              std::string::npos);
  }
  {
    GgufWriter w2;
    w2.str("tokenizer.ggml.model", "bert");
    w2.str_array("tokenizer.ggml.tokens", {"a", "b"});
    EXPECT_NE(load_error(w2.write("tok_bert.gguf")).find("unsupported tokenizer model 'bert'"), std::string::npos);
  }
  {
    GgufWriter w;
    w.str("tokenizer.ggml.model", "gpt2");
    w.str_array("tokenizer.ggml.tokens", {"a", "b"});
    w.u32("tokenizer.ggml.eos_token_id", 7);
    EXPECT_NE(load_error(w.write("tok_eos.gguf")).find("outside the vocabulary"), std::string::npos);
  }
  {
    GgufWriter w;
    w.str("tokenizer.ggml.model", "gpt2");
    w.str_array("tokenizer.ggml.tokens", {"a", "b"});
    w.f32_array("tokenizer.ggml.scores", {1.0f});
    EXPECT_NE(load_error(w.write("tok_scores.gguf")).find("scores"), std::string::npos);
  }
  {
    GgufWriter w;
    w.str("tokenizer.ggml.model", "gpt2");
    w.str_array("tokenizer.ggml.tokens", {"a", "b"});
    w.i32_array("tokenizer.ggml.token_type", {1, 9});
    EXPECT_NE(load_error(w.write("tok_types.gguf")).find("token_type"), std::string::npos);
  }
  {
    GgufWriter w;
    w.str("tokenizer.ggml.model", "gpt2");
    w.str("tokenizer.ggml.tokens", "not an array");
    EXPECT_NE(load_error(w.write("tok_type.gguf")).find("tokenizer.ggml.tokens"), std::string::npos);
  }
  {
    GgufWriter w;
    w.str("tokenizer.ggml.model", "gpt2");
    w.str_array("tokenizer.ggml.tokens", {"a", "b"});
    w.str("tokenizer.ggml.bos_token_id", "1");
    EXPECT_NE(load_error(w.write("tok_bos.gguf")).find("bos_token_id"), std::string::npos);
  }
}

// ---- tokenizer.json loader ----------------------------------------------------------

std::string write_file(const std::string& dir, const std::string& name, const std::string& text) {
  ::mkdir(dir.c_str(), 0755);
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(TokenizerHfJson, ByteLevelBpe) {
  const std::string dir = ::testing::TempDir() + "tok_hf_bpe";
  const std::string json = R"({
    "added_tokens": [{"id": 6, "content": "<|end|>", "special": true},
                     {"id": 7, "content": "<|start|>", "special": true}],
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": true},
        {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}]},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {"h": 0, "i": 1, "hi": 2, "\u0120": 3, "\u0120hi": 4, "1": 5},
              "merges": ["h i", ["\u0120", "hi"]]}
  })";
  const std::string path = write_file(dir, "tokenizer.json", json);
  write_file(dir, "tokenizer_config.json",
             R"({"bos_token": {"content": "<|start|>"}, "eos_token": "<|end|>", "add_bos_token": true})");
  const TokenizerSpec s = tokenizer_spec_from_hf_json(path);
  EXPECT_EQ(s.kind, TokenizerKind::kByteLevelBpe);
  EXPECT_EQ(s.pre, "smollm");
  ASSERT_EQ(s.tokens.size(), 8u);
  EXPECT_EQ(s.merges, (std::vector<std::string>{"h i", "\xC4\xA0 hi"}));
  EXPECT_EQ(s.bos_id, 7);
  EXPECT_EQ(s.eos_id, 6);
  EXPECT_TRUE(s.add_bos);
  EXPECT_EQ(s.types[6], TokenType::kControl);
  auto tok = Tokenizer::create(s);
  EXPECT_EQ(tok->encode("hi hi1<|end|>", true, true), (Ids{7, 2, 4, 5, 6}));
  EXPECT_TRUE(tok->is_eog(6));
}

// model.ignore_merges decides (Hugging Face's default false), not the
// pre-tokenizer's llama.cpp default: with it a piece that is a token is that
// token; without it the merges build what they can.
TEST(TokenizerHfJson, IgnoreMergesIsTheFilesOwn) {
  const std::string dir = ::testing::TempDir() + "tok_hf_ignore_merges";
  auto load = [&](const std::string& flag) {
    const std::string json = R"({"pre_tokenizer": {"type": "ByteLevel"}, "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", )" + flag + R"("vocab": {"h": 0, "e": 1, "l": 2, "o": 3, "he": 4, "ll": 5, "hello": 6},
                  "merges": ["h e", "l l"]}})";
    return tokenizer_spec_from_hf_json(write_file(dir, "tokenizer.json", json));
  };
  const TokenizerSpec on = load(R"("ignore_merges": true, )"), off = load("");
  EXPECT_NE(testutil::error_of([&] { load(R"("ignore_merges": 1, )"); }).find("'model.ignore_merges' is not a bool"),
            std::string::npos);
  EXPECT_EQ(on.ignore_merges, true);
  EXPECT_EQ(off.ignore_merges, false);
  EXPECT_EQ(Tokenizer::create(on)->encode("hello", false, false), (Ids{6}));
  EXPECT_EQ(Tokenizer::create(off)->encode("hello", false, false), (Ids{4, 5, 3}));
}

TEST(TokenizerHfJson, Qwen35SplitPattern) {
  const std::string dir = ::testing::TempDir() + "tok_hf_qwen35";
  const std::string json = R"({
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
         "behavior": "Isolated", "invert": false},
        {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []}
  })";
  EXPECT_EQ(tokenizer_spec_from_hf_json(write_file(dir, "tokenizer.json", json)).pre, "qwen35");
}

// The pre-tokenizer is read from the components in order (Split patterns,
// Digits, a ByteLevel that splits) and must be one Redwood implements whole.
TEST(TokenizerHfJson, PreTokenizerFromItsComponents) {
  const std::string dir = ::testing::TempDir() + "tok_hf_components";
  auto pre_of = [&](const std::string& components) {
    const std::string json = R"({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [)" + components +
                             R"(]}, "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []}})";
    return tokenizer_spec_from_hf_json(write_file(dir, "tokenizer.json", json)).pre;
  };
  // regex: as tokenizer.json spells it (JSON escapes; \u4e00 decodes to the
  // literal character, as the real files have it).
  auto split = [](const std::string& regex, const std::string& behavior = "Isolated") {
    return R"({"type": "Split", "pattern": {"Regex": ")" + regex + R"("}, "behavior": ")" + behavior +
           R"(", "invert": false})";
  };
  const std::string byte_level = R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": false})";
  // DeepSeek V3's (its tokenizer.json's three Splits).
  const std::string v3_two = split(R"J(\\p{N}{1,3})J") + "," + split(R"J([\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+)J");
  const std::string v3 =
      v3_two + "," +
      split(R"J([!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+)J");
  EXPECT_EQ(pre_of(v3 + "," + byte_level), "deepseek-v3");
  // DeepSeek Coder's: five Splits.
  EXPECT_EQ(pre_of(split(R"J([\r\n])J") + "," + split(R"J(\\s?\\p{L}+)J") + "," + split(R"J(\\s?\\p{P}+)J") + "," +
                   split(R"J([\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+)J") + "," + split(R"J(\\p{N})J") + "," +
                   byte_level),
            "deepseek-coder");
  // Digits then a splitting ByteLevel: SmolLM's; a ByteLevel alone: GPT-2's.
  EXPECT_EQ(pre_of(R"({"type": "Digits", "individual_digits": true}, {"type": "ByteLevel"})"), "smollm");
  EXPECT_EQ(pre_of(R"({"type": "ByteLevel"})"), "gpt2");
  // Falcon's (its tokenizer.json as the tokenizers package reproduces
  // llama.cpp's Falcon cases with: tests/python/test_hf_tokenizer_json.py):
  // Punctuation runs, GPT-2's split, Digits on the byte-mapped text, three
  // digits at a time.
  const std::string falcon_punct = R"({"type": "Punctuation", "behavior": "Contiguous"})";
  const std::string falcon_rest = R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
      {"type": "Digits", "individual_digits": false}, )" + split("[0-9][0-9][0-9]");
  EXPECT_EQ(pre_of(falcon_punct + "," + falcon_rest), "falcon");
  // Not implemented, so an error, not another split: one stage fewer, a
  // ByteLevel that also splits after V3's (use_regex defaults to true), a Split
  // that removes its matches, a Punctuation component alone or isolating each
  // character (Hugging Face's default), a Split after the ByteLevel (it would
  // split byte-mapped text, where a space is a letter), single digits on
  // byte-mapped text, no split at all.
  for (const std::string& c : {v3_two + "," + byte_level, v3 + R"(, {"type": "ByteLevel"})", byte_level,
                               split(R"J(\\p{N})J", "Removed") + "," + byte_level,
                               falcon_punct + R"(, {"type": "ByteLevel"})",
                               R"({"type": "Punctuation"},)" + falcon_rest,
                               byte_level + "," + split(R"J(\\p{N})J"),
                               std::string(R"({"type": "ByteLevel"}, {"type": "Digits", "individual_digits": true})")}) {
    try {
      const std::string got = pre_of(c);
      ADD_FAILURE() << "no error for " << c << " (read as " << got << ")";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("not one Redwood implements"), std::string::npos) << e.what();
    }
  }
}

// Digits after ByteLevel splits byte-mapped text; Redwood's falcon stages give
// the same tokens only where no token joins a digit (0-9 ² ³ ¹ ¼ ½ ¾ as mapped
// bytes) to another character, as in Falcon's vocabulary: any other is refused.
TEST(TokenizerHfJson, FalconDigitsNeedAVocabularyWithoutMixedDigitTokens) {
  const std::string dir = ::testing::TempDir() + "tok_hf_falcon";
  auto load = [&](const std::string& vocab) {
    const std::string json = R"({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Punctuation", "behavior": "Contiguous"},
        {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        {"type": "Digits", "individual_digits": false},
        {"type": "Split", "pattern": {"Regex": "[0-9][0-9][0-9]"}, "behavior": "Isolated", "invert": false}]},
        "decoder": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": )" + vocab + R"(, "merges": []}})";
    return tokenizer_spec_from_hf_json(write_file(dir, "tokenizer.json", json));
  };
  EXPECT_EQ(load(R"({"a": 0, "1": 1, "12": 2, "\u00c2": 3, "\u00bd": 4, "\u00bd\u00bc": 5})").pre, "falcon");
  for (const std::string& mixed : {std::string(R"("\u01201")"), std::string(R"("\u00c2\u00bd")")}) {
    const std::string e = testutil::error_of([&] { load(R"({"a": 0, )" + mixed + R"(: 1})"); });
    EXPECT_NE(e.find("joins a digit"), std::string::npos) << mixed << ": " << e;
    EXPECT_NE(e.find("token 1 does"), std::string::npos) << e;
  }
}

// A pre-tokenizer's stages are matched against the table by their code
// points: a literal character equals its table escape, but bytes that are not
// a whole, shortest-form UTF-8 sequence never equal one (an overlong U+4E00
// once read as U+4E00 and matched DeepSeek Coder's stages).
TEST(TokenizerHfJson, MalformedUtf8NeverMatchesAPreTokenizer) {
  auto utf8 = [](uint32_t cp) {
    std::string o;
    if (cp < 0x80) {
      o += static_cast<char>(cp);
    } else if (cp < 0x800) {
      o += static_cast<char>(0xC0 | (cp >> 6)), o += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      o += static_cast<char>(0xE0 | (cp >> 12)), o += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      o += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return o;
  };
  // DeepSeek Coder's five Splits, as its tokenizer.json decodes; the first Han character given.
  auto coder = [&](const std::string& first) {
    return std::vector<std::string>{"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+",
                                    "[" + first + "-" + utf8(0x9FA5) + utf8(0x800) + "-" + utf8(0x4E00) + utf8(0xAC00) +
                                        "-" + utf8(0xD7FF) + "]+",
                                    "\\p{N}"};
  };
  EXPECT_EQ(bpe_pre_for_stages(coder(utf8(0x4E00))), "deepseek-coder");
  EXPECT_EQ(bpe_pre_for_stages(coder("\xF0\x84\xB8\x80")), "");  // U+4E00 in four bytes (overlong)
  EXPECT_EQ(bpe_pre_for_stages(coder("\xE4\xB8")), "");            // cut short
  EXPECT_EQ(bpe_pre_for_stages(coder("\xB8\x80")), "");            // continuation bytes alone
  EXPECT_EQ(bpe_pre_for_stages(coder("\xED\xA0\x80")), "");        // a surrogate (U+D800)
}

TEST(TokenizerHfJson, SentencePieceStyle) {
  const std::string dir = ::testing::TempDir() + "tok_hf_spm";
  const std::string json = R"({
    "added_tokens": [{"id": 0, "content": "<unk>", "special": true},
                     {"id": 1, "content": "<s>", "special": true},
                     {"id": 2, "content": "</s>", "special": true}],
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                      {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
    "pre_tokenizer": null,
    "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
                                                 {"type": "ByteFallback"}, {"type": "Fuse"}]},
    "post_processor": {"type": "TemplateProcessing",
                       "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]},
    "model": {"type": "BPE", "byte_fallback": true, "unk_token": "<unk>",
              "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0x21>": 3, "\u2581": 4, "h": 5, "i": 6, "hi": 7, "\u2581hi": 8},
              "merges": ["h i", "\u2581 hi"]}
  })";
  const std::string path = write_file(dir, "tokenizer.json", json);
  const TokenizerSpec s = tokenizer_spec_from_hf_json(path);
  EXPECT_EQ(s.kind, TokenizerKind::kSentencePiece);
  EXPECT_TRUE(s.add_space_prefix);
  EXPECT_TRUE(s.add_bos);
  EXPECT_EQ(s.bos_id, 1);
  EXPECT_EQ(s.unk_id, 0);
  EXPECT_EQ(s.types[3], TokenType::kByte);
  auto tok = Tokenizer::create(s);
  EXPECT_EQ(tok->encode("hi hi!", true, false), (Ids{1, 8, 8, 3}));
  EXPECT_EQ(tok->decode(Ids{1, 8, 8, 3}), "hi hi!");
}

TEST(TokenizerHfJson, MalformedThrowsNamingFile) {
  const std::string dir = ::testing::TempDir() + "tok_hf_bad";
  for (const std::string& body :
       {std::string("{not json"), std::string("[]"), std::string(R"({"model": {"type": "Unigram", "vocab": []}})"),
        std::string(R"({"model": {"type": "BPE"}})"),
        std::string(R"({"model": {"type": "BPE", "vocab": {"a": "x"}}})"),
        std::string(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [1]}})")}) {
    const std::string path = write_file(dir, "tokenizer.json", body);
    try {
      tokenizer_spec_from_hf_json(path);
      ADD_FAILURE() << "no error for " << body;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(tokenizer_spec_from_hf_json(dir + "/missing.json"), Error);
}

// ---- the real model (SmolLM2, byte-level BPE, pre "smollm") --------------------------

class RealTokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (access(REDWOOD_TEST_MODEL, R_OK) != 0) return;
    tok_ = Tokenizer::create(tokenizer_spec_from_gguf(GgufFile::open(REDWOOD_TEST_MODEL))).release();
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  void SetUp() override {
    if (!tok_) GTEST_SKIP() << "model missing: " << REDWOOD_TEST_MODEL;
  }
  static Tokenizer* tok_;
};
Tokenizer* RealTokenizer::tok_ = nullptr;

TEST_F(RealTokenizer, Spec) {
  const TokenizerSpec& s = tok_->spec();
  EXPECT_EQ(s.kind, TokenizerKind::kByteLevelBpe);
  EXPECT_EQ(s.pre, "smollm");
  EXPECT_EQ(tok_->vocab_size(), 49152);
  EXPECT_EQ(tok_->bos(), 1);
  EXPECT_EQ(tok_->eos(), 2);
  EXPECT_FALSE(s.add_bos);
  EXPECT_TRUE(tok_->is_eog(2));  // <|im_end|>
  EXPECT_TRUE(tok_->is_eog(0));  // <|endoftext|>
  EXPECT_FALSE(tok_->is_eog(1));
  EXPECT_FALSE(tok_->is_eog(19556));
}

// Ground truth: Hugging Face `tokenizers` with the GGUF's vocabulary and merges
// (tools/oracle/tokenizer_ref.py), parsing special tokens.
TEST_F(RealTokenizer, KnownIds) {
  const std::vector<std::pair<std::string, Ids>> cases = {
      {"Hello world", {19556, 905}},
      {"  multiple   spaces", {216, 2701, 256, 5600}},
      {"12345", {33, 34, 35, 36, 37}},
      {"<|im_start|>user\nHi<|im_end|>", {1, 4093, 198, 26843, 2}},
      {"I love \xF0\x9F\xA6\x80 and \xF0\x9F\x98\x80!", {57, 2606, 15107, 116, 218, 284, 40303, 218, 17}},
      {"\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C",  // 你好，世界
       {18645, 250, 48392, 138, 12831, 7906, 240, 178, 239, 230}},
      {"don't you'll we've I'm", {12420, 982, 346, 3060, 392, 3543, 339, 5248}},
      {"tabs\tand\nnewlines\n\n", {100, 7366, 197, 397, 198, 2241, 5110, 1116}},
      {"3.14159 x 2^10 = 1024", {35, 30, 33, 36, 33, 37, 41, 1792, 216, 34, 78, 33, 32, 446, 216, 33, 32, 34, 36}},
      {"trailing  ", {4861, 4966, 256}},
      {"a\xC2\xA0" "b", {81, 15442, 82}},
      {"The quick brown fox jumps over the lazy dog.", {504, 2365, 6354, 16438, 27003, 690, 260, 23790, 2767, 30}},
      {"\xD9\xA3\xD9\xA4\xD9\xA5 arabic digits", {164, 113, 164, 114, 164, 115, 46179, 286, 18638}},
      {"def f(x):\n    return x**2\n", {1604, 275, 24, 104, 727, 472, 1003, 1792, 828, 34, 198}},
      {"x \n\n y", {104, 38028, 329}},
      {"I'M HERE'S", {57, 23, 61, 27873, 23, 67}},
      // U+180E is not whitespace for HF's regex engine (PCRE2 would say it is).
      {"\xCE\x91\n\n\xE1\xA0\x8E", {153, 235, 198, 198, 172, 250, 232}},
  };
  for (const auto& [text, want] : cases) {
    EXPECT_EQ(tok_->encode(text, true, true), want) << text;
    EXPECT_EQ(tok_->decode(want, true), text) << text;
  }
  // Without parse_special the markers are plain text.
  const Ids plain = tok_->encode("<|im_end|>", false, false);
  EXPECT_GT(plain.size(), 1u);
  EXPECT_EQ(tok_->decode(plain), "<|im_end|>");
  EXPECT_EQ(tok_->decode(Ids{1, 4093, 198, 26843, 2}), "user\nHi");
}

TEST_F(RealTokenizer, RoundTrip) {
  const std::vector<std::string> texts = {
      "",
      " ",
      "\n",
      "   \t\t  end",
      "Hello, World! How's it going?",
      "caf\xC3\xA9 na\xC3\xAFve r\xC3\xA9sum\xC3\xA9",
      "e\xCC\x81 combining",
      "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 family",
      "\xF0\x9F\x87\xAF\xF0\x9F\x87\xB5 flag",
      "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE\xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9\xE3\x83\x88",
      "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4",
      "\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82 \xD0\xBC\xD0\xB8\xD1\x80",
      "\xD7\xA9\xD7\x9C\xD7\x95\xD7\x9D \xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7",
      "int main() {\n\treturn 0;\n}\n",
      "\r\n\r\nwindows\r\n",
      "zero\xE2\x80\x8Bwidth",
      "\xEF\xBB\xBF" "bom",
      "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n",
      "<|im_start", "<|im_end|><|im_end|>",
      "9999999999999999",
      "\xE2\x85\xA3 \xC2\xBD \xC2\xB2",
      std::string("nul\0byte", 8),
      "\x80\xC3 lone bytes \xE2\x82",  // invalid UTF-8 whose bytes exist in the vocabulary
  };
  for (const auto& s : texts) {
    for (bool parse : {false, true}) {
      const Ids ids = tok_->encode(s, true, parse);
      EXPECT_EQ(tok_->decode(ids, parse), s) << s;
    }
  }
  // Streaming the tokens of a text through Utf8Stream rebuilds it too.
  const std::string text = "mixed \xF0\x9F\xA6\x80 \xE4\xBD\xA0\xE5\xA5\xBD caf\xC3\xA9";
  Utf8Stream st;
  std::string streamed;
  for (int32_t id : tok_->encode(text, false, false)) streamed += st.push(tok_->token_bytes(id));
  streamed += st.flush();
  EXPECT_EQ(streamed, text);
}

TEST_F(RealTokenizer, BytesMissingFromVocabAreAnError) {
  // SmolLM2 has no token for byte 0xFF (never valid UTF-8): HF and llama.cpp
  // drop it silently ("x\xffy\xfez" was "xyz"); Redwood says so.
  const std::string e = testutil::error_of([] { tok_->encode("x\xffy\xfez", false, false); });
  EXPECT_NE(e.find("byte 0xff"), std::string::npos) << e;
  EXPECT_NE(testutil::error_of([] { tok_->encode("\xFF", false, false); }).find("byte 0xff"), std::string::npos);
}

TEST_F(RealTokenizer, Fast) {
  std::string text;
  const std::string para =
      "The tokenizer splits text into pre-tokens with a regular expression, maps bytes to printable "
      "characters and applies merges by rank. Numbers like 12345 and 3.14 are split into digits; "
      "\xE4\xBD\xA0\xE5\xA5\xBD and caf\xC3\xA9 and \xF0\x9F\xA6\x80 take several tokens.\n\n";
  while (text.size() < 100 * 1024) text += para;
  const auto t0 = std::chrono::steady_clock::now();
  const Ids ids = tok_->encode(text, false, true);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 1.0) << "encoding 100 kB took " << s << " s";
  EXPECT_EQ(tok_->decode(ids), text);
  // Pathological single pre-tokens: long letter runs, whitespace runs.
  for (const std::string& p : {std::string(20000, 'x'), std::string(50000, ' '), std::string(20000, '!')}) {
    const auto t1 = std::chrono::steady_clock::now();
    const Ids pi = tok_->encode(p, false, false);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count(), 1.0);
    EXPECT_EQ(tok_->decode(pi), p);
  }
}

}  // namespace
}  // namespace redwood

TEST(HfTokenizerJson, SparseIdsAndDeepNestingAreErrors) {
  const std::string dir = ::testing::TempDir();
  const std::string sparse = dir + "sparse_tokenizer.json";
  std::ofstream(sparse) << R"({"model": {"type": "BPE", "vocab": {"a": 16000000}, "merges": []}})";
  EXPECT_THROW(redwood::tokenizer_spec_from_hf_json(sparse), redwood::Error);
  const std::string deep = dir + "deep_tokenizer.json";
  std::string nested(100000, '[');
  std::ofstream(deep) << R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "x": )" << nested;
  EXPECT_THROW(redwood::tokenizer_spec_from_hf_json(deep), redwood::Error);
}
