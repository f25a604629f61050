// The packed-weight codec ("high-byte coding"), the math shared by every
// decoder: the CPU ones (kernels/cpu/wpack.cpp, wpack_avx512.cpp) and the CUDA
// one (kernels/cuda/wpack.cu). Lossless: a decoded chunk is the original bytes, bit for bit.
//
// Why it pays: in F16/BF16/F32 weights the top byte of each element holds the
// sign and the high exponent bits, and trained weights cluster in a few
// binades, so that byte takes a handful of values (BF16 of a real model: about
// 2.6 bits of information in 8). The other bytes are close to random and are
// kept as they are. DFloat11 Huffman-codes the exponent; this codec spends a
// little of that gain on a decoder that runs at memory speed: a fixed-width
// code of k bits per element (k = 1..6) indexes a table of the chunk's
// 2^k - 1 most frequent top bytes, and the last code, 2^k - 1, is an escape
// whose byte follows in an exception list, in element order.
//
// A chunk holds n elements of w bytes (w = 2 or 4), stored as
//   ChunkHead (72 bytes: codec, k, exception count, table)
//   codes:      ceil(n / 64) groups of 8 * k bytes; in a group, element i's
//               code is bits [(i % 8) * k, (i % 8 + 1) * k) of the
//               little-endian 64-bit word made of bytes [(i / 8) * k, (i / 8) * k + 8)
//               (k bytes per 8 codes; the last group is padded with code 0)
//   exceptions: n_exc bytes, the escaped top bytes in element order
//   planes:     w - 1 planes of n bytes: plane j holds byte j of every element
// or, with codec kRaw, ChunkHead followed by the chunk's raw bytes.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/common/hd.h"

namespace redwood::wpack {

enum Codec : uint8_t { kRaw = 0, kHighByte = 1 };

inline constexpr uint32_t kChunkElems = 65536;  // elements per chunk (the last may hold fewer)
inline constexpr int kMaxCodeBits = 6;          // table of 63 entries: one 64-byte vector lookup

struct ChunkHead {
  uint8_t codec = kRaw;
  uint8_t k = 0;  // code bits (kHighByte)
  uint8_t reserved[2] = {0, 0};
  uint32_t n_exc = 0;      // escaped elements
  uint8_t table[64] = {};  // code -> top byte (entries 0 .. 2^k - 2)
};
static_assert(sizeof(ChunkHead) == 72);

RD_HD uint32_t escape_code(int k) {
  return (1u << k) - 1u;
}
// Bytes of the code section for n elements and k-bit codes.
RD_HD uint64_t code_bytes(uint64_t n, int k) {
  return (n + 63) / 64 * 8 * static_cast<uint64_t>(k);
}
// Bytes a kHighByte chunk stores after its head.
RD_HD uint64_t payload_bytes(uint64_t n, int w, int k, uint64_t n_exc) {
  return code_bytes(n, k) + n_exc + n * static_cast<uint64_t>(w - 1);
}

// Element i's code (i < the chunk's element count); codes points at the code section.
RD_HD uint32_t code_at(const uint8_t* codes, uint64_t i, int k) {
  const uint8_t* word = codes + (i / 8) * static_cast<uint64_t>(k);
  uint64_t v = 0;
  for (int b = 0; b < k; ++b) v |= static_cast<uint64_t>(word[b]) << (8 * b);  // k <= 6 bytes of the word
  return static_cast<uint32_t>(v >> ((i % 8) * static_cast<uint64_t>(k))) & escape_code(k);
}

// Reassembles element i from its top byte and its other bytes.
RD_HD void put_element(uint8_t* out, uint64_t i, int w, uint8_t top, const uint8_t* planes, uint64_t n) {
  for (int j = 0; j < w - 1; ++j) out[i * w + j] = planes[j * n + i];
  out[i * w + (w - 1)] = top;
}

// A chunk's sections, found by chunk_view once its head agrees with n and w.
struct ChunkView {
  int codec = kRaw;
  int k = 0;
  uint64_t n_exc = 0;
  const uint8_t* table = nullptr;    // kHighByte: code -> top byte
  const uint8_t* raw = nullptr;      // kRaw: the n * w bytes
  const uint8_t* codes = nullptr;    // kHighByte: the sections
  const uint8_t* exc = nullptr;
  const uint8_t* planes = nullptr;
};

// Checks the head of a chunk of `stored` bytes holding n elements of w bytes
// (the sizes, the codec, k, the exception count) and finds its sections. The
// head is read byte by byte: no alignment or byte-order assumption. False when
// malformed; the codes may still escape more often than n_exc (decode_range
// and the escape count catch that).
RD_HD bool chunk_view(const uint8_t* chunk, uint64_t stored, uint64_t n, int w, ChunkView* v) {
  if (stored < sizeof(ChunkHead) || n > kChunkElems || (w != 1 && w != 2 && w != 4)) return false;
  v->codec = chunk[0];
  v->k = chunk[1];
  v->n_exc = static_cast<uint64_t>(chunk[4]) | static_cast<uint64_t>(chunk[5]) << 8 |
             static_cast<uint64_t>(chunk[6]) << 16 | static_cast<uint64_t>(chunk[7]) << 24;
  v->table = chunk + 8;  // ChunkHead::table
  const uint8_t* p = chunk + sizeof(ChunkHead);
  const uint64_t payload = stored - sizeof(ChunkHead);
  if (v->codec == kRaw) {
    v->raw = p;
    return payload == n * static_cast<uint64_t>(w);
  }
  if (v->codec != kHighByte || w == 1 || v->k < 1 || v->k > kMaxCodeBits || v->n_exc > n ||
      payload != payload_bytes(n, w, v->k, v->n_exc))
    return false;
  v->codes = p;
  v->exc = p + code_bytes(n, v->k);
  v->planes = v->exc + v->n_exc;
  return true;
}

// Decodes elements [i0, i1) of a kHighByte chunk of n elements (table, k bits,
// exceptions from *used on, at most n_exc in all): the scalar decoder, the
// tail of the vector ones and each thread's segment in the CUDA one. False
// when the codes escape more often than n_exc allows.
RD_HD bool decode_range(const uint8_t* table, int k, uint64_t n_exc, const uint8_t* codes, const uint8_t* exc,
                        const uint8_t* planes, uint8_t* out, uint64_t i0, uint64_t i1, uint64_t n, int w,
                        uint64_t* used) {
  const uint32_t esc = escape_code(k);
  for (uint64_t i = i0; i < i1; ++i) {
    const uint32_t c = code_at(codes, i, k);
    uint8_t top;
    if (c == esc) {
      if (*used == n_exc) return false;
      top = exc[(*used)++];
    } else {
      top = table[c];
    }
    put_element(out, i, w, top, planes, n);
  }
  return true;
}

// ---- Decoding one chunk in P independent parts (the CUDA decoder's plan) ----
// 1. part t counts the escapes among its elements segment(n, P, t);
// 2. an exclusive prefix sum gives each part its first exception; the total
//    must equal n_exc;
// 3. part t decodes its segment from there (decode_range).
// decode_in_parts runs the same three steps one after another on the host, so
// the CPU tests check the plan the kernel follows (kernels/cuda/wpack.cu).

// Elements [*i0, *i1) of part t of P: whole groups of 8 codes, the last part short.
RD_HD void segment(uint64_t n, int parts, int t, uint64_t* i0, uint64_t* i1) {
  const uint64_t len = ((n + parts - 1) / parts + 7) / 8 * 8;
  *i0 = len * t < n ? len * t : n;
  *i1 = *i0 + len < n ? *i0 + len : n;
}

RD_HD uint64_t count_escapes(const uint8_t* codes, int k, uint64_t i0, uint64_t i1) {
  const uint32_t esc = escape_code(k);
  uint64_t e = 0;
  for (uint64_t i = i0; i < i1; ++i) e += code_at(codes, i, k) == esc;
  return e;
}

// Host only: the three steps above for a checked chunk, parts <= 1024.
inline bool decode_in_parts(const ChunkView& v, uint8_t* out, uint64_t n, int w, int parts) {
  if (parts < 1 || parts > 1024) return false;
  if (v.codec == kRaw) {
    for (uint64_t i = 0; i < n * static_cast<uint64_t>(w); ++i) out[i] = v.raw[i];
    return true;
  }
  uint64_t first[1024 + 1];
  for (int t = 0; t < parts; ++t) {
    uint64_t i0, i1;
    segment(n, parts, t, &i0, &i1);
    first[t] = count_escapes(v.codes, v.k, i0, i1);
  }
  uint64_t sum = 0;
  for (int t = 0; t < parts; ++t) {
    const uint64_t c = first[t];
    first[t] = sum;
    sum += c;
  }
  if (sum != v.n_exc) return false;
  for (int t = 0; t < parts; ++t) {
    uint64_t i0, i1, used = first[t];
    segment(n, parts, t, &i0, &i1);
    if (!decode_range(v.table, v.k, v.n_exc, v.codes, v.exc, v.planes, out, i0, i1, n, w, &used)) return false;
  }
  return true;
}

}  // namespace redwood::wpack
