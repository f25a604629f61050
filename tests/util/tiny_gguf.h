// Test helper: writes small random Llama-family GGUF files (any dtype), plus
// float quantizers for the ggml block formats. Test-only code.
#pragma once
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/common/dtype.h"
#include "kernels/common/math.h"

namespace redwood::testutil {

// Simple (not ggml's search-based) quantizers for the 5-bit and K types.
inline uint8_t clamp_q(float v, int hi) {
  return (uint8_t)std::min<long>(hi, std::max(0L, std::lround(v)));
}

template <typename Block>
void quantize_q5(const float* x, Block& blk) {
  constexpr bool one = std::is_same_v<Block, math::BlockQ5_1>;
  float lo = x[0], hi = x[0], amax = 0, mx = 0;
  for (int j = 0; j < 32; ++j) {
    lo = std::min(lo, x[j]), hi = std::max(hi, x[j]);
    if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), mx = x[j];
  }
  const float d = one ? (hi - lo) / 31.0f : mx / -16.0f;
  blk.d = math::f32_to_f16(d);
  if constexpr (one) blk.m = math::f32_to_f16(lo);
  uint32_t qh = 0;
  for (int j = 0; j < 32; ++j) {
    const uint8_t q = clamp_q(d == 0 ? (one ? 0 : 16) : one ? (x[j] - lo) / d : x[j] / d + 16, 31);
    if (j < 16)
      blk.qs[j] = q & 15;
    else
      blk.qs[j - 16] |= (uint8_t)((q & 15) << 4);
    qh |= (uint32_t)(q >> 4) << j;
  }
  memcpy(blk.qh, &qh, 4);
}

// Q4_K / Q5_K: per 32-element sub-block a scale and a min (6 bits each, relative
// to the super-block's d and dmin).
template <typename Block>
void quantize_k45(const float* x, Block& blk) {
  constexpr bool five = std::is_same_v<Block, math::BlockQ5_K>;
  constexpr int levels = five ? 31 : 15;
  float s[8], m[8], smax = 0, mmax = 0;
  for (int j = 0; j < 8; ++j) {
    float lo = 0, hi = x[32 * j];
    for (int l = 0; l < 32; ++l) lo = std::min(lo, x[32 * j + l]), hi = std::max(hi, x[32 * j + l]);
    s[j] = (hi - lo) / levels, m[j] = -lo;
    smax = std::max(smax, s[j]), mmax = std::max(mmax, m[j]);
  }
  const float d = math::f16_to_f32(math::f32_to_f16(smax / 63)), dmin = math::f16_to_f32(math::f32_to_f16(mmax / 63));
  blk.d = math::f32_to_f16(d), blk.dmin = math::f32_to_f16(dmin);
  uint8_t sc[8], mq[8];
  for (int j = 0; j < 8; ++j) sc[j] = d ? clamp_q(s[j] / d, 63) : 0, mq[j] = dmin ? clamp_q(m[j] / dmin, 63) : 0;
  for (int j = 0; j < 4; ++j) {
    blk.scales[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    blk.scales[j + 4] = (uint8_t)((mq[j] & 63) | ((mq[j + 4] >> 4) << 6));
    blk.scales[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((mq[j + 4] & 15) << 4));
  }
  memset(blk.qs, 0, sizeof blk.qs);
  if constexpr (five) memset(blk.qh, 0, sizeof blk.qh);
  for (int j = 0; j < 8; ++j) {
    const float dj = d * sc[j], mj = dmin * mq[j];
    for (int l = 0; l < 32; ++l) {
      const uint8_t q = dj ? clamp_q((x[32 * j + l] + mj) / dj, levels) : 0;
      blk.qs[(j >> 1) * 32 + l] |= (uint8_t)((q & 15) << (4 * (j & 1)));
      if constexpr (five) blk.qh[l] |= (uint8_t)((q >> 4) << j);
    }
  }
}

// The element of x[0..n) of largest magnitude, with its sign.
inline float signed_absmax(const float* x, int n) {
  float mx = 0;
  for (int l = 0; l < n; ++l)
    if (std::fabs(x[l]) > std::fabs(mx)) mx = x[l];
  return mx;
}

// Q6_K: per 16-element sub-block an int8 scale relative to d.
inline void quantize_q6k(const float* x, math::BlockQ6_K& blk) {
  float s[16], amax = 0;
  for (int i = 0; i < 16; ++i) {
    s[i] = signed_absmax(x + 16 * i, 16) / -32.0f;
    amax = std::max(amax, std::fabs(s[i]));
  }
  const float d = math::f16_to_f32(math::f32_to_f16(amax / 127));
  blk.d = math::f32_to_f16(d);
  memset(blk.ql, 0, sizeof blk.ql);
  memset(blk.qh, 0, sizeof blk.qh);
  for (int i = 0; i < 16; ++i) blk.scales[i] = (int8_t)(d ? std::lround(std::clamp(s[i] / d, -128.0f, 127.0f)) : 0);
  for (int e = 0; e < 256; ++e) {
    const int h = e >> 7, k = (e >> 5) & 3, l = e & 31;
    const float de = d * blk.scales[8 * h + 2 * k + (l >> 4)];
    const uint8_t q = de ? clamp_q(x[e] / de + 32, 63) : 32;
    blk.ql[64 * h + (k & 1) * 32 + l] |= (uint8_t)((q & 15) << ((k & 2) ? 4 : 0));
    blk.qh[32 * h + l] |= (uint8_t)((q >> 4) << (2 * k));
  }
}

// Q2_K: per 16-element sub-block a 4-bit scale and min; Q3_K: a signed 6-bit scale.
inline void quantize_q2k(const float* x, math::BlockQ2_K& blk) {
  float s[16], m[16], smax = 0, mmax = 0;
  for (int i = 0; i < 16; ++i) {
    float lo = 0, hi = x[16 * i];
    for (int l = 0; l < 16; ++l) lo = std::min(lo, x[16 * i + l]), hi = std::max(hi, x[16 * i + l]);
    s[i] = (hi - lo) / 3, m[i] = -lo;
    smax = std::max(smax, s[i]), mmax = std::max(mmax, m[i]);
  }
  const float d = math::f16_to_f32(math::f32_to_f16(smax / 15)), dmin = math::f16_to_f32(math::f32_to_f16(mmax / 15));
  blk.d = math::f32_to_f16(d), blk.dmin = math::f32_to_f16(dmin);
  memset(blk.qs, 0, sizeof blk.qs);
  for (int i = 0; i < 16; ++i) {
    const uint8_t sc = d ? clamp_q(s[i] / d, 15) : 0, mn = dmin ? clamp_q(m[i] / dmin, 15) : 0;
    blk.scales[i] = (uint8_t)(sc | (mn << 4));
    for (int l = 0; l < 16; ++l) {
      const int e = 16 * i + l, h = e >> 7, k = (e >> 5) & 3;
      const uint8_t q = sc ? clamp_q((x[e] + dmin * mn) / (d * sc), 3) : 0;
      blk.qs[32 * h + (e & 31)] |= (uint8_t)(q << (2 * k));
    }
  }
}
inline void quantize_q3k(const float* x, math::BlockQ3_K& blk) {
  float s[16], amax = 0;
  for (int i = 0; i < 16; ++i) {
    float mx = 0;
    for (int l = 0; l < 16; ++l)
      if (std::fabs(x[16 * i + l]) > std::fabs(mx)) mx = x[16 * i + l];
    s[i] = mx / -4.0f;
    amax = std::max(amax, std::fabs(s[i]));
  }
  const float d = math::f16_to_f32(math::f32_to_f16(amax / 31));
  blk.d = math::f32_to_f16(d);
  memset(blk.hmask, 0, sizeof blk.hmask), memset(blk.qs, 0, sizeof blk.qs), memset(blk.scales, 0, sizeof blk.scales);
  for (int i = 0; i < 16; ++i) {
    const int sc = d ? (int)std::lround(std::clamp(s[i] / d, -32.0f, 31.0f)) : 0;
    const int v = sc + 32;
    if (i < 8)
      blk.scales[i] |= (uint8_t)(v & 15);
    else
      blk.scales[i - 8] |= (uint8_t)((v & 15) << 4);
    blk.scales[8 + (i & 3)] |= (uint8_t)((v >> 4) << (2 * (i >> 2)));
    for (int l = 0; l < 16; ++l) {
      const int e = 16 * i + l, h = e >> 7, k = (e >> 5) & 3;
      const uint8_t q3 = sc ? clamp_q(x[e] / (d * sc) + 4, 7) : 4;  // q + 4
      blk.qs[32 * h + (e & 31)] |= (uint8_t)((q3 & 3) << (2 * k));
      blk.hmask[e & 31] |= (uint8_t)((q3 >> 2) << (4 * h + k));
    }
  }
}

// IQ4_NL / IQ4_XS: the level (of math::iq4nl_level) nearest to v.
inline uint8_t iq4_nearest(float v) {
  int best = 0;
  for (int q = 1; q < 16; ++q)
    if (std::fabs(v - (float)math::iq4nl_level(q)) < std::fabs(v - (float)math::iq4nl_level(best))) best = q;
  return (uint8_t)best;
}
inline void quantize_iq4nl(const float* x, math::BlockIQ4_NL& blk) {
  const float d = math::f16_to_f32(math::f32_to_f16(signed_absmax(x, 32) / -127.0f));
  blk.d = math::f32_to_f16(d);
  for (int j = 0; j < 16; ++j)
    blk.qs[j] = (uint8_t)(iq4_nearest(d ? x[j] / d : 0) | (iq4_nearest(d ? x[j + 16] / d : 0) << 4));
}
// IQ4_XS: per 32-element sub-block a 6-bit scale (biased by 32) relative to d.
inline void quantize_iq4xs(const float* x, math::BlockIQ4_XS& blk) {
  float s[8], amax = 0;
  for (int j = 0; j < 8; ++j) {
    s[j] = signed_absmax(x + 32 * j, 32) / -127.0f;
    amax = std::max(amax, std::fabs(s[j]));
  }
  const float d = math::f16_to_f32(math::f32_to_f16(amax / 31));
  blk.d = math::f32_to_f16(d);
  blk.scales_h = 0;
  memset(blk.scales_l, 0, sizeof blk.scales_l);
  for (int j = 0; j < 8; ++j) {
    const int ls = (d ? (int)std::lround(std::clamp(s[j] / d, -32.0f, 31.0f)) : 0) + 32;
    blk.scales_l[j / 2] |= (uint8_t)((ls & 15) << (4 * (j & 1)));
    blk.scales_h |= (uint16_t)((ls >> 4) << (2 * j));
    const float dl = d * (float)(ls - 32);
    for (int l = 0; l < 16; ++l)
      blk.qs[16 * j + l] =
          (uint8_t)(iq4_nearest(dl ? x[32 * j + l] / dl : 0) | (iq4_nearest(dl ? x[32 * j + l + 16] / dl : 0) << 4));
  }
}

// Quantize one row of floats (cols a multiple of 32 for block types, 256 for K types).
inline std::vector<uint8_t> quantize_row(DType t, const float* x, int64_t cols) {
  std::vector<uint8_t> out(*row_bytes(t, cols));
  uint8_t* o = out.data();
  switch (t) {
    case DType::F32:
      memcpy(o, x, cols * 4);
      break;
    case DType::F16:
      for (int64_t c = 0; c < cols; ++c) {
        uint16_t h = math::f32_to_f16(x[c]);
        memcpy(o + 2 * c, &h, 2);
      }
      break;
    case DType::BF16:
      for (int64_t c = 0; c < cols; ++c) {
        uint16_t h = math::f32_to_bf16(x[c]);
        memcpy(o + 2 * c, &h, 2);
      }
      break;
    case DType::Q8_0:
      for (int64_t b = 0; b < cols / 32; ++b) {
        math::BlockQ8_0 blk{};
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
        const float d = amax / 127.0f;
        blk.d = math::f32_to_f16(d);
        for (int j = 0; j < 32; ++j) blk.qs[j] = (int8_t)(d ? std::lround(x[b * 32 + j] / d) : 0);
        memcpy(o + b * sizeof blk, &blk, sizeof blk);
      }
      break;
    case DType::Q4_0:
      for (int64_t b = 0; b < cols / 32; ++b) {
        math::BlockQ4_0 blk{};
        float amax = 0, mx = 0;
        for (int j = 0; j < 32; ++j)
          if (std::fabs(x[b * 32 + j]) > amax) amax = std::fabs(x[b * 32 + j]), mx = x[b * 32 + j];
        const float d = mx / -8.0f;
        blk.d = math::f32_to_f16(d);
        for (int j = 0; j < 16; ++j) {
          auto q = [&](float v) { return (uint8_t)std::min(15L, std::max(0L, std::lround(d ? v / d + 8 : 8))); };
          blk.qs[j] = q(x[b * 32 + j]) | (uint8_t)(q(x[b * 32 + j + 16]) << 4);
        }
        memcpy(o + b * sizeof blk, &blk, sizeof blk);
      }
      break;
    case DType::Q4_1:
      for (int64_t b = 0; b < cols / 32; ++b) {
        math::BlockQ4_1 blk{};
        float mn = x[b * 32], mx = x[b * 32];
        for (int j = 0; j < 32; ++j) mn = std::min(mn, x[b * 32 + j]), mx = std::max(mx, x[b * 32 + j]);
        const float d = (mx - mn) / 15.0f;
        blk.d = math::f32_to_f16(d);
        blk.m = math::f32_to_f16(mn);
        for (int j = 0; j < 16; ++j) {
          auto q = [&](float v) { return (uint8_t)std::min(15L, std::max(0L, std::lround(d ? (v - mn) / d : 0))); };
          blk.qs[j] = q(x[b * 32 + j]) | (uint8_t)(q(x[b * 32 + j + 16]) << 4);
        }
        memcpy(o + b * sizeof blk, &blk, sizeof blk);
      }
      break;
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::IQ4_NL:
    case DType::IQ4_XS: {
      const int64_t be = dtype_info(t).block_elems, bb = dtype_info(t).block_bytes;
      for (int64_t b = 0; b < cols / be; ++b) {
        auto put = [&](auto blk, auto fn) {
          fn(x + b * be, blk);
          memcpy(o + b * bb, &blk, sizeof blk);
        };
        if (t == DType::Q5_0) put(math::BlockQ5_0{}, quantize_q5<math::BlockQ5_0>);
        if (t == DType::Q5_1) put(math::BlockQ5_1{}, quantize_q5<math::BlockQ5_1>);
        if (t == DType::Q2_K) put(math::BlockQ2_K{}, quantize_q2k);
        if (t == DType::Q3_K) put(math::BlockQ3_K{}, quantize_q3k);
        if (t == DType::Q4_K) put(math::BlockQ4_K{}, quantize_k45<math::BlockQ4_K>);
        if (t == DType::Q5_K) put(math::BlockQ5_K{}, quantize_k45<math::BlockQ5_K>);
        if (t == DType::Q6_K) put(math::BlockQ6_K{}, quantize_q6k);
        if (t == DType::IQ4_NL) put(math::BlockIQ4_NL{}, quantize_iq4nl);
        if (t == DType::IQ4_XS) put(math::BlockIQ4_XS{}, quantize_iq4xs);
      }
      break;
    }
  }
  return out;
}

inline uint32_t ggml_id(DType t) {
  switch (t) {
    case DType::F32:
      return 0;
    case DType::F16:
      return 1;
    case DType::Q4_0:
      return 2;
    case DType::Q4_1:
      return 3;
    case DType::Q8_0:
      return 8;
    case DType::BF16:
      return 30;
    case DType::Q5_0:
      return 6;
    case DType::Q5_1:
      return 7;
    case DType::Q2_K:
      return 10;
    case DType::Q3_K:
      return 11;
    case DType::Q4_K:
      return 12;
    case DType::Q5_K:
      return 13;
    case DType::Q6_K:
      return 14;
    case DType::IQ4_NL:
      return 20;
    case DType::IQ4_XS:
      return 23;
  }
  return 0;
}

struct TinyShape {
  int layers = 2, dim = 64, heads = 4, kv_heads = 2, ffn = 96, vocab = 288;
  DType type = DType::Q8_0;
  bool tied = false;
  uint32_t seed = 1;
  std::vector<float> rope_freqs;        // when set: tensor rope_freqs.weight (Llama 3 scaling), head dim / 2 values
  float rope_linear = -1;               // when >= 0: rope.scaling.factor
  std::string rope_scaling = "linear";  // rope.scaling.type written with it (none when empty)
  // When >= 0: output.weight is written as F32 with entry [poison_row][0] =
  // poison (NaN, an infinity), so that token's logit is non-finite at every row.
  int poison_row = -1;
  float poison = 0.0f;
  uint32_t sliding_window = 0;  // when > 0: llama.attention.sliding_window (context_length is 2048)
  // When set: attention.sliding_window_pattern, one bool a layer (or, with
  // window_period > 0, llama.cpp's integer form).
  std::vector<uint8_t> window_pattern;
  uint32_t window_period = 0;
  // The family: "qwen2" adds attn_q/k/v.bias, "qwen3" attn_q/k_norm.weight;
  // head_dim > 0 writes attention.key_length/value_length; expert_count > 0
  // writes {arch}.expert_count (a MoE header, no expert tensors).
  std::string arch = "llama";
  int head_dim = 0;
  uint32_t expert_count = 0;
  // Vocabulary variants (a target and draft of one tokenizer with different
  // row counts, as Qwen2.5-72B and Qwen2.5-0.5B): rows > 0 writes only the
  // first rows rows of token_embd and output (drawn as for vocab rows, so the
  // same seed gives the same model with a shorter vocabulary); listed > 0
  // lists only the first listed tokens (fewer tokens than rows, as an HF
  // tokenizer.json under a padded embedding); ids >= pad_from (when >= 0) are
  // "[PAD<id>]" of type unused (a GGUF converter's padding); word: the text
  // before the number of the filler tokens past 'a'..'z'.
  int rows = 0, listed = 0, pad_from = -1;
  std::string word = "\xe2\x96\x81w";
  // Control tokens written over the last ids of the list (e.g. ChatML's
  // <|im_start|> and <|im_end|>), and tokenizer.chat_template when not empty.
  std::vector<std::string> control_tokens;
  std::string chat_template;
};

// Minimal GGUF v3 writer.
class GgufWriter {
 public:
  void kv_str(const std::string& k, const std::string& v) { key(k, 8), str(v), ++n_kv_; }
  void kv_u32(const std::string& k, uint32_t v) { key(k, 4), pod(v), ++n_kv_; }
  void kv_f32(const std::string& k, float v) { key(k, 6), pod(v), ++n_kv_; }
  void kv_bool(const std::string& k, bool v) { key(k, 7), pod((uint8_t)v), ++n_kv_; }
  void kv_str_arr(const std::string& k, const std::vector<std::string>& v) {
    key(k, 9), pod((uint32_t)8), pod((uint64_t)v.size());
    for (auto& s : v) str(s);
    ++n_kv_;
  }
  void kv_f32_arr(const std::string& k, const std::vector<float>& v) {
    key(k, 9), pod((uint32_t)6), pod((uint64_t)v.size());
    for (float f : v) pod(f);
    ++n_kv_;
  }
  void kv_bool_arr(const std::string& k, const std::vector<uint8_t>& v) {
    key(k, 9), pod((uint32_t)7), pod((uint64_t)v.size());
    for (uint8_t b : v) pod(b);
    ++n_kv_;
  }
  void kv_i32_arr(const std::string& k, const std::vector<int32_t>& v) {
    key(k, 9), pod((uint32_t)5), pod((uint64_t)v.size());
    for (int32_t f : v) pod(f);
    ++n_kv_;
  }
  void tensor(const std::string& name, DType t, int64_t rows, int64_t cols, const std::vector<float>& data) {
    std::vector<uint8_t> bytes;
    for (int64_t r = 0; r < rows; ++r) {
      auto q = quantize_row(t, data.data() + r * cols, cols);
      bytes.insert(bytes.end(), q.begin(), q.end());
    }
    while (data_.size() % 32) data_.push_back(0);
    const uint64_t off = data_.size();
    data_.insert(data_.end(), bytes.begin(), bytes.end());
    std::string& ti = tinfo_;
    auto put = [&](const void* p, size_t n) { ti.append((const char*)p, n); };
    uint64_t len = name.size();
    put(&len, 8), ti += name;
    uint32_t nd = rows == 1 ? 1 : 2;
    put(&nd, 4);
    uint64_t ne0 = cols, ne1 = rows;
    put(&ne0, 8);
    if (nd == 2) put(&ne1, 8);
    uint32_t ty = ggml_id(t);
    put(&ty, 4), put(&off, 8);
    ++n_t_;
  }
  void write(const std::string& path) const {
    std::string out = "GGUF";
    auto put = [&](const void* p, size_t n) { out.append((const char*)p, n); };
    uint32_t v = 3;
    put(&v, 4);
    put(&n_t_, 8), put(&n_kv_, 8);
    out += kv_, out += tinfo_;
    while (out.size() % 32) out.push_back(0);
    out.append((const char*)data_.data(), data_.size());
    // Temp file + rename: tests in parallel processes may rewrite the same path
    // while another reads it, and must never see a half-written file.
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    std::ofstream(tmp, std::ios::binary).write(out.data(), out.size());
    std::rename(tmp.c_str(), path.c_str());
  }

 private:
  void key(const std::string& k, uint32_t type) { str(k), pod(type); }
  void str(const std::string& s) { pod((uint64_t)s.size()), kv_ += s; }
  template <class T>
  void pod(T v) {
    kv_.append((const char*)&v, sizeof v);
  }
  std::string kv_, tinfo_;
  std::vector<uint8_t> data_;
  uint64_t n_kv_ = 0, n_t_ = 0;
};

// Writes a random tiny Llama with an SPM-style vocab of byte tokens + letters.
inline void write_tiny_llama(const std::string& path, const TinyShape& s) {
  std::mt19937 rng(s.seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto rnd = [&](int64_t rows, int64_t cols, float scale) {
    std::vector<float> v(rows * cols);
    for (auto& x : v) x = nd(rng) * scale;
    return v;
  };
  auto ones = [&](int64_t n) {
    std::vector<float> v(n);
    for (auto& x : v) x = 1.0f + 0.1f * nd(rng);
    return v;
  };
  GgufWriter w;
  const std::string a = s.arch + ".";
  w.kv_str("general.architecture", s.arch);
  w.kv_str("general.name", "tiny-test");
  w.kv_u32(a + "block_count", s.layers);
  w.kv_u32(a + "embedding_length", s.dim);
  w.kv_u32(a + "attention.head_count", s.heads);
  w.kv_u32(a + "attention.head_count_kv", s.kv_heads);
  w.kv_u32(a + "feed_forward_length", s.ffn);
  w.kv_u32(a + "context_length", 2048);
  w.kv_f32(a + "rope.freq_base", 10000.0f);
  w.kv_f32(a + "attention.layer_norm_rms_epsilon", 1e-5f);
  if (s.head_dim > 0) {
    w.kv_u32(a + "attention.key_length", s.head_dim);
    w.kv_u32(a + "attention.value_length", s.head_dim);
  }
  if (s.expert_count > 0) w.kv_u32(a + "expert_count", s.expert_count);
  if (s.sliding_window > 0) w.kv_u32(a + "attention.sliding_window", s.sliding_window);
  if (!s.window_pattern.empty()) w.kv_bool_arr(a + "attention.sliding_window_pattern", s.window_pattern);
  if (s.window_period > 0) w.kv_u32(a + "attention.sliding_window_pattern", s.window_period);
  if (s.rope_linear >= 0) {
    if (!s.rope_scaling.empty()) w.kv_str(a + "rope.scaling.type", s.rope_scaling);
    w.kv_f32(a + "rope.scaling.factor", s.rope_linear);
  }
  std::vector<std::string> toks = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    snprintf(buf, sizeof buf, "<0x%02X>", b);
    toks.push_back(buf), types.push_back(6);
  }
  const int rows = s.rows > 0 ? s.rows : s.vocab, listed = s.listed > 0 ? s.listed : rows;
  for (char c = 'a'; c <= 'z' && (int)toks.size() < listed; ++c) toks.push_back(std::string(1, c)), types.push_back(1);
  while ((int)toks.size() < listed) toks.push_back(s.word + std::to_string(toks.size())), types.push_back(1);
  for (int i = std::max(0, s.pad_from); s.pad_from >= 0 && i < listed; ++i)
    toks[i] = "[PAD" + std::to_string(i) + "]", types[i] = 5;
  for (size_t i = 0; i < s.control_tokens.size(); ++i)
    toks[toks.size() - s.control_tokens.size() + i] = s.control_tokens[i], types[toks.size() - s.control_tokens.size() + i] = 3;
  if (!s.chat_template.empty()) w.kv_str("tokenizer.chat_template", s.chat_template);
  std::vector<float> scores(toks.size());
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = -(float)i;
  w.kv_str("tokenizer.ggml.model", "llama");
  w.kv_str_arr("tokenizer.ggml.tokens", toks);
  w.kv_f32_arr("tokenizer.ggml.scores", scores);
  w.kv_i32_arr("tokenizer.ggml.token_type", types);
  w.kv_u32("tokenizer.ggml.bos_token_id", 1);
  w.kv_u32("tokenizer.ggml.eos_token_id", 2);
  w.kv_u32("tokenizer.ggml.unknown_token_id", 0);
  const int hd = s.head_dim > 0 ? s.head_dim : s.dim / s.heads;
  const float sc = 1.0f / std::sqrt((float)s.dim);
  auto first_rows = [&](std::vector<float> v) {
    v.resize(static_cast<size_t>(rows) * s.dim);
    return v;
  };
  w.tensor("token_embd.weight", s.type, rows, s.dim, first_rows(rnd(s.vocab, s.dim, 1.0f)));
  w.tensor("output_norm.weight", DType::F32, 1, s.dim, ones(s.dim));
  if (!s.rope_freqs.empty())
    w.tensor("rope_freqs.weight", DType::F32, 1, static_cast<int64_t>(s.rope_freqs.size()), s.rope_freqs);
  if (!s.tied) {
    std::vector<float> out = first_rows(rnd(s.vocab, s.dim, sc));
    if (s.poison_row >= 0) out[static_cast<size_t>(s.poison_row) * s.dim] = s.poison;
    w.tensor("output.weight", s.poison_row >= 0 ? DType::F32 : s.type, rows, s.dim, out);
  }
  for (int l = 0; l < s.layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    w.tensor(b + "attn_norm.weight", DType::F32, 1, s.dim, ones(s.dim));
    w.tensor(b + "attn_q.weight", s.type, s.heads * hd, s.dim, rnd(s.heads * hd, s.dim, sc));
    w.tensor(b + "attn_k.weight", s.type, s.kv_heads * hd, s.dim, rnd(s.kv_heads * hd, s.dim, sc));
    w.tensor(b + "attn_v.weight", s.type, s.kv_heads * hd, s.dim, rnd(s.kv_heads * hd, s.dim, sc));
    w.tensor(b + "attn_output.weight", s.type, s.dim, s.heads * hd, rnd(s.dim, s.heads * hd, sc));
    w.tensor(b + "ffn_norm.weight", DType::F32, 1, s.dim, ones(s.dim));
    w.tensor(b + "ffn_gate.weight", s.type, s.ffn, s.dim, rnd(s.ffn, s.dim, sc));
    w.tensor(b + "ffn_up.weight", s.type, s.ffn, s.dim, rnd(s.ffn, s.dim, sc));
    w.tensor(b + "ffn_down.weight", s.type, s.dim, s.ffn, rnd(s.dim, s.ffn, 1.0f / std::sqrt((float)s.ffn)));
    if (s.arch == "qwen2") {
      w.tensor(b + "attn_q.bias", DType::F32, 1, s.heads * hd, rnd(1, s.heads * hd, 0.5f));
      w.tensor(b + "attn_k.bias", DType::F32, 1, s.kv_heads * hd, rnd(1, s.kv_heads * hd, 0.5f));
      w.tensor(b + "attn_v.bias", DType::F32, 1, s.kv_heads * hd, rnd(1, s.kv_heads * hd, 0.5f));
    }
    if (s.arch == "qwen3") {
      w.tensor(b + "attn_q_norm.weight", DType::F32, 1, hd, ones(hd));
      w.tensor(b + "attn_k_norm.weight", DType::F32, 1, hd, ones(hd));
    }
  }
  w.write(path);
}

}  // namespace redwood::testutil
