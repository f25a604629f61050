// Redwood's packed model file (`redwood pack`): a GGUF model with every tensor
// stored as a coded stream that decodes, bit for bit, to the original bytes
// (the codec: kernels/common/wpack.h), so that a streamed pass reads fewer
// bytes. Every command that takes a model takes a packed one.
//
// Layout (little-endian; every region starts on a 4096-byte boundary, so the
// streamer reads with O_DIRECT):
//   0     PackHead (64 bytes, zero-padded to 4096)
//   meta  the source GGUF's bytes [0, data offset): header, metadata, tensor
//         infos, verbatim (hyperparameters and tokenizer come from there)
//   index one PackIndexEntry per tensor, in the GGUF's tensor order
//   data  one stream per tensor:
//           StreamHead (32 bytes), ChunkEntry[n_chunks] (24 bytes each),
//           then the chunks (wpack chunks of kChunkElems elements, 64-aligned)
// Integrity: the head carries an XXH3-64 of meta + index; each stream one of
// its chunk directory; each chunk one of its stored bytes, checked before it
// is decoded (a flipped bit is a one-line error, never wrong weights); the
// index keeps an XXH3-64 of each tensor's decoded bytes (checked by `redwood
// pack` after writing, and by the tests).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kernels/common/dtype.h"
#include "src/model/model_desc.h"

namespace redwood {

inline constexpr char kPackMagic[8] = {'R', 'W', 'P', 'A', 'C', 'K', '1', '\0'};

struct PackHead {
  char magic[8] = {};
  uint64_t meta_offset = 0, meta_bytes = 0;
  uint64_t index_offset = 0, index_count = 0;
  uint64_t source_bytes = 0;  // the GGUF it was made from
  uint64_t hash = 0;          // XXH3-64 of meta + index
  uint64_t reserved = 0;
};
static_assert(sizeof(PackHead) == 64);

struct PackIndexEntry {
  uint64_t stored_offset = 0;  // absolute, 4096-aligned
  uint64_t stored_bytes = 0;
  uint64_t raw_bytes = 0;
  uint64_t raw_hash = 0;  // XXH3-64 of the decoded bytes
};
static_assert(sizeof(PackIndexEntry) == 32);

struct StreamHead {
  char magic[4] = {'R', 'W', 'S', '1'};
  uint32_t n_chunks = 0;
  uint64_t raw_bytes = 0;
  uint32_t width = 1;  // element bytes the codec splits (2: F16/BF16, 4: F32, 1: stored raw)
  uint32_t reserved = 0;
  uint64_t dir_hash = 0;  // XXH3-64 of the chunk entries, seeded with raw_bytes
};
static_assert(sizeof(StreamHead) == 32);

struct ChunkEntry {
  uint64_t offset = 0;  // from the stream's start
  uint32_t stored = 0;  // bytes
  uint32_t n = 0;       // elements
  uint64_t hash = 0;    // XXH3-64 of the stored bytes
};
static_assert(sizeof(ChunkEntry) == 24);

// The element width the codec uses for a tensor type.
int pack_width(DType t);

struct PackStats {
  uint64_t raw_bytes = 0, stored_bytes = 0;  // tensor data
  uint64_t file_bytes = 0;                   // the packed file
  std::map<DType, std::pair<uint64_t, uint64_t>> by_type;  // raw, stored
};

// Packs the GGUF model `from` into `out` (a temp file beside it, renamed when
// complete and verified: every tensor is decoded again and compared by its
// XXH3). Refuses a packed or safetensors source and an `out` that is the input.
// progress(done, total) after each tensor. Throws redwood::Error.
PackStats pack_model(const std::string& from, const std::string& out,
                     const std::function<void(uint64_t done, uint64_t total)>& progress = {});

// The description of a packed model (load_model_desc dispatches here by magic):
// extents with packed = true, offset and stored_bytes of each tensor's stream.
ModelDesc load_packed_desc(const std::string& path);

// Decodes a packed tensor's stream (t.stored_bytes at `stored`) into `dst`
// (t.bytes), checking every checksum; `parallel` spreads chunks over the
// kernel threads. Throws redwood::Error naming the file and the tensor.
void decode_tensor(const TensorExtent& t, const uint8_t* stored, uint8_t* dst, const std::string& file,
                   bool parallel = true);

// Chunk by chunk, for decoders that spread a layer's chunks over threads: the
// stream's directory (stream head and directory checked, not the chunks), then
// chunk c checked (XXH3) and decoded into `dst` (the tensor's t.bytes).
// Throw redwood::Error naming the file and the tensor.
std::vector<ChunkEntry> stream_directory(const TensorExtent& t, const uint8_t* stored, const std::string& file);
void decode_stream_chunk(const TensorExtent& t, const std::vector<ChunkEntry>& dir, uint64_t c, const uint8_t* stored,
                         uint8_t* dst, const std::string& file);

// The chunks of a packed tensor's stream (t.stored_bytes at `stored`), checked
// as decode_tensor checks them (stream head, directory, every chunk's
// checksum) but not decoded: for a decoder elsewhere (the CUDA slot link).
// Appends one entry per chunk: offset from the stream's start, stored bytes,
// elements; chunk c decodes to bytes [c * wpack::kChunkElems * pack_width(t.type), ...)
// of the tensor. Throws redwood::Error naming the file and the tensor.
void check_stream(const TensorExtent& t, const uint8_t* stored, const std::string& file,
                  std::vector<ChunkEntry>& chunks);
// How many chunks a packed tensor's stream holds.
uint64_t pack_chunk_count(const TensorExtent& t);

// Reads a tensor into `dst` (t.bytes): the bytes themselves, or a packed
// tensor's stream, decoded. Throws redwood::Error.
void read_tensor(int fd, const std::string& file, const TensorExtent& t, uint8_t* dst);

}  // namespace redwood
