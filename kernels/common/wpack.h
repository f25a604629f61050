// The packed-weight codec ("high-byte coding"), the math shared by every
// decoder: the CPU ones (kernels/cpu/wpack.cpp, wpack_avx512.cpp) and, later,
// a CUDA kernel. Lossless: a decoded chunk is the original bytes, bit for bit.
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

// Decodes elements [i0, n) of a kHighByte chunk (table, k bits, exceptions
// from *used on, at most n_exc in all): the scalar decoder, and the tail of
// the vector ones. False when the codes escape more often than n_exc allows.
RD_HD bool decode_range(const uint8_t* table, int k, uint64_t n_exc, const uint8_t* codes, const uint8_t* exc,
                        const uint8_t* planes, uint8_t* out, uint64_t i0, uint64_t n, int w, uint64_t* used) {
  const uint32_t esc = escape_code(k);
  for (uint64_t i = i0; i < n; ++i) {
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

}  // namespace redwood::wpack
