// SentencePiece-style BPE (GGUF "llama"): spaces become U+2581, the text is
// split into UTF-8 characters, and the adjacent pair whose concatenation is the
// best vocabulary token is merged until none is left (best = highest score;
// ties -> leftmost). Pieces still not in the vocabulary fall back to <0xNN>
// byte tokens. A spec without scores but with merges (HF tokenizer.json with
// byte fallback) ranks pairs by merge rank instead.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "src/tokenizer/tokenizer_impl.h"
#include "src/util/error.h"

namespace redwood::tok {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// "<0xNN>" -> NN, else -1.
int parse_byte_token(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  const int hi = hex_digit(t[3]), lo = hex_digit(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

class SpmTokenizer final : public TokenizerBase {
 public:
  explicit SpmTokenizer(TokenizerSpec spec) : TokenizerBase(std::move(spec)) {
    use_merges_ = spec_.scores.empty() && !spec_.merges.empty();
    if (use_merges_) merges_ = build_merges();
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      byte_id_[static_cast<size_t>(b)] = find_token(name);
    }
    decoded_.resize(spec_.tokens.size());
    for (size_t i = 0; i < spec_.tokens.size(); ++i) {
      const std::string& t = spec_.tokens[i];
      const bool byte_type = spec_.types.empty() || type_of(static_cast<int32_t>(i)) == TokenType::kByte;
      const int byte = byte_type ? parse_byte_token(t) : -1;
      if (byte >= 0) {
        decoded_[i] = std::string(1, static_cast<char>(byte));
        continue;
      }
      std::string& out = decoded_[i];
      size_t p = 0;
      while (p < t.size()) {
        if (std::string_view(t).substr(p, kSpace.size()) == kSpace) {
          out.push_back(' ');
          p += kSpace.size();
        } else {
          out.push_back(t[p++]);
        }
      }
    }
  }

 protected:
  void encode_text(std::string_view text, bool at_start_or_after_special, std::vector<int32_t>& out) const override {
    std::string s;
    s.reserve(text.size() + text.size() / 4 + 3);
    if (spec_.add_space_prefix && at_start_or_after_special) s.append(kSpace);
    for (char c : text) {
      if (c == ' ')
        s.append(kSpace);
      else
        s.push_back(c);
    }

    // One symbol per UTF-8 character (an invalid byte is a symbol of its own).
    std::vector<Sym> syms;
    syms.reserve(s.size());
    for (size_t p = 0; p < s.size();) {
      const size_t len = std::max<size_t>(1, utf8_seq_len(s, p));
      const auto idx = static_cast<int32_t>(syms.size());
      syms.push_back({static_cast<uint32_t>(p), static_cast<uint32_t>(len), find_token(std::string_view(s).substr(p, len)),
                      idx - 1, -1});
      if (idx > 0) syms[static_cast<size_t>(idx - 1)].next = idx;
      p += len;
    }
    std::vector<Cand> heap;
    const auto push_pair = [&](int32_t left, int32_t right) {
      const Sym& l = syms[static_cast<size_t>(left)];
      const Sym& r = syms[static_cast<size_t>(right)];
      double score;
      int32_t id;
      if (use_merges_) {
        if (l.id < 0 || r.id < 0) return;
        auto it = merges_.find(merge_key(l.id, r.id));
        if (it == merges_.end()) return;
        score = -static_cast<double>(it->second.rank);
        id = it->second.id;
      } else {
        id = find_token(std::string_view(s).substr(l.start, l.len + r.len));
        if (id < 0) return;
        score = spec_.scores.empty() ? 0.0 : spec_.scores[static_cast<size_t>(id)];
        if (std::isnan(score)) score = -std::numeric_limits<double>::infinity();
      }
      heap.push_back({score, left, right, l.len, r.len, id});
      std::push_heap(heap.begin(), heap.end(), CandLess());
    };
    for (size_t i = 0; i + 1 < syms.size(); ++i) push_pair(static_cast<int32_t>(i), static_cast<int32_t>(i + 1));
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), CandLess());
      const Cand c = heap.back();
      heap.pop_back();
      Sym& l = syms[static_cast<size_t>(c.left)];
      if (l.len == 0 || l.next != c.right || l.len != c.llen) continue;
      Sym& r = syms[static_cast<size_t>(c.right)];
      if (r.len != c.rlen) continue;
      l.len += r.len;
      l.id = c.id;
      l.next = r.next;
      r.len = 0;
      if (l.next >= 0) syms[static_cast<size_t>(l.next)].prev = c.left;
      if (l.prev >= 0) push_pair(l.prev, c.left);
      if (l.next >= 0) push_pair(c.left, l.next);
    }

    for (int32_t i = syms.empty() ? -1 : 0; i >= 0; i = syms[static_cast<size_t>(i)].next) {
      const Sym& sym = syms[static_cast<size_t>(i)];
      if (sym.id >= 0) {
        out.push_back(sym.id);
        continue;
      }
      const std::string_view piece = std::string_view(s).substr(sym.start, sym.len);
      bool all_bytes = true;
      for (char ch : piece) all_bytes = all_bytes && byte_id_[static_cast<uint8_t>(ch)] >= 0;
      if (all_bytes) {
        for (char ch : piece) out.push_back(byte_id_[static_cast<uint8_t>(ch)]);
      } else if (spec_.unk_id >= 0) {
        out.push_back(spec_.unk_id);
      } else {  // never dropped silently (llama.cpp fails here too)
        std::string hexes;
        for (const char ch : piece) {
          static const char* hex = "0123456789abcdef";
          const auto b = static_cast<uint8_t>(ch);
          hexes += std::string(hexes.empty() ? "" : " ") + "0x" + hex[b >> 4] + hex[b & 15];
        }
        throw Error("tokenizer: the text holds a character (bytes " + hexes +
                    ") that this vocabulary has no token, byte token or <unk> for");
      }
    }
  }

 private:
  struct Sym {
    uint32_t start, len;  // len 0: merged away
    int32_t id;           // vocabulary id of the piece, or -1
    int32_t prev, next;
  };
  struct Cand {
    double score;
    int32_t left, right;
    uint32_t llen, rlen;
    int32_t id;
  };
  // Heap order: highest score on top; ties -> leftmost.
  struct CandLess {
    bool operator()(const Cand& a, const Cand& b) const {
      return a.score != b.score ? a.score < b.score : a.left > b.left;
    }
  };

  bool use_merges_ = false;
  std::unordered_map<uint64_t, Merge> merges_;
  std::array<int32_t, 256> byte_id_{};
};

}  // namespace

std::unique_ptr<Tokenizer> make_spm(TokenizerSpec spec) { return std::make_unique<SpmTokenizer>(std::move(spec)); }

}  // namespace redwood::tok
