// The packed-weight codec's encoder and scalar decoder, and the choice of
// decoder (kernels/cpu/wpack.h).
#include "kernels/cpu/wpack.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <numeric>

#include "kernels/common/wpack.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/simd.h"

namespace redwood::cpu {

namespace wpack_avx512 {  // wpack_avx512.cpp
bool decode(const wpack::ChunkHead& h, const uint8_t* codes, const uint8_t* exc, const uint8_t* planes, uint8_t* out,
            uint64_t n, int w);
}

namespace {

using wpack::ChunkHead;

void append(std::vector<uint8_t>& out, const void* p, uint64_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  out.insert(out.end(), b, b + n);
}

bool decode_scalar(const ChunkHead& h, const uint8_t* codes, const uint8_t* exc, const uint8_t* planes, uint8_t* out,
                   uint64_t n, int w) {
  uint64_t used = 0;
  return wpack::decode_range(h.table, h.k, h.n_exc, codes, exc, planes, out, 0, n, n, w, &used) && used == h.n_exc;
}

}  // namespace

bool unpack_avx512_available() {
#ifdef REDWOOD_AVX512_KERNELS
  static const bool ok = [] {
    __builtin_cpu_init();
    return kernel_isa() == Isa::avx512_vnni && __builtin_cpu_supports("avx512vbmi2");
  }();
  return ok;
#else
  return false;
#endif
}

const char* unpack_path_name(UnpackPath p) {
  if (p == UnpackPath::kBest) p = unpack_avx512_available() ? UnpackPath::kAvx512 : UnpackPath::kScalar;
  return p == UnpackPath::kAvx512 ? "avx512-vbmi2" : "scalar";
}

void pack_chunk(const uint8_t* raw, uint64_t n, int w, std::vector<uint8_t>& out) {
  ChunkHead h;
  const uint64_t raw_bytes = n * static_cast<uint64_t>(w);
  uint64_t best = raw_bytes;
  std::array<uint64_t, 256> count{};
  std::array<int, 256> order{};
  if (w == 2 || w == 4) {
    for (uint64_t i = 0; i < n; ++i) ++count[raw[i * w + (w - 1)]];
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return count[a] > count[b]; });
    for (int k = 1; k <= wpack::kMaxCodeBits; ++k) {
      uint64_t covered = 0;
      for (uint32_t s = 0; s < wpack::escape_code(k); ++s) covered += count[order[s]];
      const uint64_t size = wpack::payload_bytes(n, w, k, n - covered);
      if (size < best) {
        best = size;
        h.codec = wpack::kHighByte;
        h.k = static_cast<uint8_t>(k);
        h.n_exc = static_cast<uint32_t>(n - covered);
      }
    }
  }
  if (h.codec == wpack::kRaw) {
    append(out, &h, sizeof h);
    append(out, raw, raw_bytes);
    return;
  }
  const int k = h.k;
  const uint32_t esc = wpack::escape_code(k);
  std::array<uint8_t, 256> code;
  code.fill(static_cast<uint8_t>(esc));
  for (uint32_t s = 0; s < esc; ++s) {
    h.table[s] = static_cast<uint8_t>(order[s]);
    code[order[s]] = static_cast<uint8_t>(s);
  }
  append(out, &h, sizeof h);
  const size_t base = out.size();
  out.resize(base + wpack::payload_bytes(n, w, k, h.n_exc));
  uint8_t* codes = out.data() + base;
  uint8_t* exc = codes + wpack::code_bytes(n, k);
  uint8_t* planes = exc + h.n_exc;
  for (uint64_t word = 0; word < (n + 63) / 64 * 8; ++word) {  // 8 codes per k bytes
    uint64_t v = 0;
    for (uint64_t b = 0; b < 8; ++b) {
      const uint64_t i = word * 8 + b;
      const uint64_t c = i < n ? code[raw[i * w + (w - 1)]] : 0;
      v |= c << (b * k);
    }
    for (int b = 0; b < k; ++b) codes[word * k + b] = static_cast<uint8_t>(v >> (8 * b));
  }
  uint64_t e = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const uint8_t top = raw[i * w + (w - 1)];
    if (code[top] == esc) exc[e++] = top;
    for (int j = 0; j < w - 1; ++j) planes[j * n + i] = raw[i * w + j];
  }
}

bool unpack_chunk(const uint8_t* chunk, uint64_t stored, uint8_t* out, uint64_t n, int w, UnpackPath path) {
  wpack::ChunkView v;
  if (!wpack::chunk_view(chunk, stored, n, w, &v)) return false;
  if (v.codec == wpack::kRaw) {
    if (n) std::memcpy(out, v.raw, n * static_cast<uint64_t>(w));
    return true;
  }
  ChunkHead h;
  std::memcpy(&h, chunk, sizeof h);
  if (path == UnpackPath::kBest) path = unpack_avx512_available() ? UnpackPath::kAvx512 : UnpackPath::kScalar;
  if (path == UnpackPath::kAvx512 && unpack_avx512_available())
    return wpack_avx512::decode(h, v.codes, v.exc, v.planes, out, n, w);
  return decode_scalar(h, v.codes, v.exc, v.planes, out, n, w);
}

}  // namespace redwood::cpu
