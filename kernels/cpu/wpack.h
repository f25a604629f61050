// The packed-weight codec on the CPU (format: kernels/common/wpack.h): the
// encoder `redwood pack` uses, and the decoders the loader and the streamer
// use - a scalar reference and an AVX-512 one (VBMI + VBMI2: one table lookup,
// one expand-load of the escaped bytes and two byte interleaves per 64
// elements), chosen at run time.
#pragma once
#include <cstdint>
#include <vector>

namespace redwood::cpu {

enum class UnpackPath { kBest, kScalar, kAvx512 };

// Whether this CPU (and build) runs the AVX-512 decoder; REDWOOD_ISA below
// avx512vnni (kernels/cpu/matmul.h) turns it off too.
bool unpack_avx512_available();
const char* unpack_path_name(UnpackPath p);  // what kBest resolves to on this CPU, or the path named

// Appends one chunk (head + payload) holding n elements of w bytes (w = 1, 2
// or 4; w = 1 is always stored raw, and so is any chunk the code would not
// make smaller). n <= wpack::kChunkElems.
void pack_chunk(const uint8_t* raw, uint64_t n, int w, std::vector<uint8_t>& out);

// Decodes one chunk of `stored` bytes into n * w bytes at out. Returns false
// when the chunk is malformed (a size, a code or the exception count disagrees
// with n and w); it never reads past chunk + stored nor writes past out + n * w.
bool unpack_chunk(const uint8_t* chunk, uint64_t stored, uint8_t* out, uint64_t n, int w,
                  UnpackPath path = UnpackPath::kBest);

}  // namespace redwood::cpu
