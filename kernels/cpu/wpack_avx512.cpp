// The packed-weight decoder for AVX-512 with VBMI and VBMI2 (format:
// kernels/common/wpack.h). Per group of 64 elements: the group's 8k code
// bytes are spread so that each 64-bit lane holds the k bytes of 8 codes
// (vpermb), split into one code per byte (vpmultishiftqb + and), looked up in
// the 63-entry table (vpermb), the escaped lanes filled from the exception
// list (vpexpandb, masked load), and interleaved with the byte planes
// (vpermt2b, and vpermt2w for 4-byte elements). The last, partial group takes
// the scalar path. Chosen at run time (kernels/cpu/wpack.cpp).
#include <cstdint>

#include "kernels/common/wpack.h"
#include "kernels/cpu/simd.h"

#ifdef REDWOOD_AVX512_KERNELS
REDWOOD_TARGET_AVX512_VBMI2_BEGIN
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace redwood::cpu::wpack_avx512 {

bool decode(const wpack::ChunkHead& h, const uint8_t* codes, const uint8_t* exc, const uint8_t* planes, uint8_t* out,
            uint64_t n, int w) {
  const int k = h.k;
  alignas(64) uint8_t spread[64], shift[64], il0[64], il1[64];
  alignas(64) uint16_t wl[2][32];
  for (int j = 0; j < 8; ++j)
    for (int b = 0; b < 8; ++b) {
      spread[j * 8 + b] = static_cast<uint8_t>(j * k + b);  // <= 7 * 6 + 7 < 64
      shift[j * 8 + b] = static_cast<uint8_t>(b * k);
    }
  for (int i = 0; i < 32; ++i) {  // byte pairs: (a[i], b[i]) for i < 32, then for i >= 32
    il0[2 * i] = static_cast<uint8_t>(i);
    il0[2 * i + 1] = static_cast<uint8_t>(64 + i);
    il1[2 * i] = static_cast<uint8_t>(32 + i);
    il1[2 * i + 1] = static_cast<uint8_t>(96 + i);
  }
  for (int q = 0; q < 2; ++q)  // word pairs: (a[i], b[i]) for i in [16q, 16q + 16)
    for (int i = 0; i < 16; ++i) {
      wl[q][2 * i] = static_cast<uint16_t>(q * 16 + i);
      wl[q][2 * i + 1] = static_cast<uint16_t>(32 + q * 16 + i);
    }
  const __m512i vspread = _mm512_load_si512(spread), vshift = _mm512_load_si512(shift);
  const __m512i vil0 = _mm512_load_si512(il0), vil1 = _mm512_load_si512(il1);
  const __m512i vw0 = _mm512_load_si512(wl[0]), vw1 = _mm512_load_si512(wl[1]);
  const __m512i table = _mm512_loadu_si512(h.table);
  // The escape code 2^k - 1 is also the mask of a code's k bits.
  const __m512i mask = _mm512_set1_epi8(static_cast<char>(wpack::escape_code(k)));
  const __mmask64 code_lanes = (k * 8 >= 64) ? ~__mmask64{0} : ((__mmask64{1} << (8 * k)) - 1);
  const uint64_t groups = n / 64;
  uint64_t used = 0;
  for (uint64_t g = 0; g < groups; ++g) {
    const __m512i in = _mm512_maskz_loadu_epi8(code_lanes, codes + g * 8 * k);
    const __m512i c = _mm512_and_si512(_mm512_multishift_epi64_epi8(vshift, _mm512_permutexvar_epi8(vspread, in)), mask);
    __m512i top = _mm512_permutexvar_epi8(c, table);
    const __mmask64 esc = _mm512_cmpeq_epi8_mask(c, mask);
    if (esc) {
      const uint64_t cnt = static_cast<uint64_t>(__builtin_popcountll(esc));
      if (cnt > h.n_exc - used) return false;
      top = _mm512_mask_expandloadu_epi8(top, esc, exc + used);
      used += cnt;
    }
    const uint64_t e0 = g * 64;
    if (w == 2) {
      const __m512i lo = _mm512_loadu_si512(planes + e0);
      _mm512_storeu_si512(out + 2 * e0, _mm512_permutex2var_epi8(lo, vil0, top));
      _mm512_storeu_si512(out + 2 * e0 + 64, _mm512_permutex2var_epi8(lo, vil1, top));
    } else {  // w == 4: bytes 0, 1 and 2 from the planes, 3 the top byte
      const __m512i p0 = _mm512_loadu_si512(planes + e0);
      const __m512i p1 = _mm512_loadu_si512(planes + n + e0);
      const __m512i p2 = _mm512_loadu_si512(planes + 2 * n + e0);
      const __m512i a0 = _mm512_permutex2var_epi8(p0, vil0, p1), a1 = _mm512_permutex2var_epi8(p0, vil1, p1);
      const __m512i b0 = _mm512_permutex2var_epi8(p2, vil0, top), b1 = _mm512_permutex2var_epi8(p2, vil1, top);
      uint8_t* o = out + 4 * e0;
      _mm512_storeu_si512(o, _mm512_permutex2var_epi16(a0, vw0, b0));
      _mm512_storeu_si512(o + 64, _mm512_permutex2var_epi16(a0, vw1, b0));
      _mm512_storeu_si512(o + 128, _mm512_permutex2var_epi16(a1, vw0, b1));
      _mm512_storeu_si512(o + 192, _mm512_permutex2var_epi16(a1, vw1, b1));
    }
  }
  if (!wpack::decode_range(h.table, k, h.n_exc, codes, exc, planes, out, groups * 64, n, n, w, &used)) return false;
  return used == h.n_exc;
}

}  // namespace redwood::cpu::wpack_avx512

#pragma GCC diagnostic pop
REDWOOD_TARGET_END

#else

namespace redwood::cpu::wpack_avx512 {
bool decode(const wpack::ChunkHead&, const uint8_t*, const uint8_t*, const uint8_t*, uint8_t*, uint64_t, int) {
  return false;  // never chosen: unpack_avx512_available() is false in such a build
}
}  // namespace redwood::cpu::wpack_avx512

#endif
