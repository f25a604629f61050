#include "src/model/packed.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <unordered_map>
#include <vector>

#include "kernels/common/wpack.h"
#include "kernels/cpu/wpack.h"
#include "src/model/gguf.h"
#include "src/util/align.h"
#include "src/util/error.h"
#include "src/util/io.h"
#include "src/util/output_path.h"

namespace redwood {

namespace {

constexpr uint64_t kAlign = 4096;
constexpr uint64_t kChunkAlign = 64;

// Whether a stored checksum matches. A fuzzing build (tests/fuzz/) accepts any,
// so that mutated files reach the parsers and decoders the checksums guard.
bool hash_ok(uint64_t got, uint64_t want) {
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
  (void)got, (void)want;
  return true;
#else
  return got == want;
#endif
}

void pwrite_all(int fd, const std::string& path, const void* p, uint64_t n, uint64_t off) {
  const auto* b = static_cast<const uint8_t*>(p);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, b, n, static_cast<off_t>(off));
    if (w < 0) {
      if (errno == EINTR) continue;
      throw Error(path + ": write failed: " + strerror(errno));
    }
    b += w;
    n -= static_cast<uint64_t>(w);
    off += static_cast<uint64_t>(w);
  }
}

uint64_t dir_hash(const std::vector<ChunkEntry>& dir, uint64_t raw_bytes) {
  return XXH3_64bits_withSeed(dir.data(), dir.size() * sizeof(ChunkEntry), raw_bytes);
}

// Elements per tensor and chunk count for a stream of `raw` bytes of width w.
uint64_t stream_elems(uint64_t raw, int w) { return raw / static_cast<uint64_t>(w); }
uint64_t stream_chunks(uint64_t elems) { return (elems + wpack::kChunkElems - 1) / wpack::kChunkElems; }

// Writes one tensor's stream at `at` (kAlign-aligned): returns its stored bytes.
uint64_t write_stream(int in, const std::string& from, const GgufTensorInfo& ti, int out, const std::string& out_path,
                      uint64_t at, XXH3_state_t* raw_state, PackStats& st) {
  const int w = pack_width(ti.type);
  const uint64_t elems = stream_elems(ti.bytes, w);
  const uint64_t n_chunks = stream_chunks(elems);
  std::vector<ChunkEntry> dir(n_chunks);
  uint64_t pos = align_up(sizeof(StreamHead) + n_chunks * sizeof(ChunkEntry), kChunkAlign);
  constexpr uint64_t kBatch = 64;  // chunks read and coded at a time (parallel)
  std::vector<uint8_t> raw;
  std::vector<std::vector<uint8_t>> coded(kBatch);
  XXH3_64bits_reset(raw_state);
  for (uint64_t c0 = 0; c0 < n_chunks; c0 += kBatch) {
    const uint64_t nc = std::min(kBatch, n_chunks - c0);
    const uint64_t e0 = c0 * wpack::kChunkElems, e1 = std::min(elems, (c0 + nc) * wpack::kChunkElems);
    raw.resize((e1 - e0) * w);
    read_exact(in, from, raw.data(), raw.size(), ti.offset + e0 * w);
    XXH3_64bits_update(raw_state, raw.data(), raw.size());
    tbb::parallel_for(uint64_t{0}, nc, [&](uint64_t j) {
      const uint64_t a = (c0 + j) * wpack::kChunkElems, b = std::min(elems, a + wpack::kChunkElems);
      coded[j].clear();
      cpu::pack_chunk(raw.data() + (a - e0) * w, b - a, w, coded[j]);
    });
    for (uint64_t j = 0; j < nc; ++j) {
      const uint64_t a = (c0 + j) * wpack::kChunkElems, b = std::min(elems, a + wpack::kChunkElems);
      ChunkEntry& e = dir[c0 + j];
      e.offset = pos;
      e.stored = static_cast<uint32_t>(coded[j].size());
      e.n = static_cast<uint32_t>(b - a);
      e.hash = XXH3_64bits(coded[j].data(), coded[j].size());
      pwrite_all(out, out_path, coded[j].data(), coded[j].size(), at + pos);
      pos = align_up(pos + coded[j].size(), kChunkAlign);
    }
  }
  StreamHead h;
  h.n_chunks = static_cast<uint32_t>(n_chunks);
  h.raw_bytes = ti.bytes;
  h.width = static_cast<uint32_t>(w);
  h.dir_hash = dir_hash(dir, ti.bytes);
  pwrite_all(out, out_path, &h, sizeof h, at);
  pwrite_all(out, out_path, dir.data(), dir.size() * sizeof(ChunkEntry), at + sizeof h);
  auto& bt = st.by_type[ti.type];
  bt.first += ti.bytes;
  bt.second += pos;
  st.raw_bytes += ti.bytes;
  st.stored_bytes += pos;
  return pos;
}

[[noreturn]] void corrupt(const std::string& file, const TensorExtent& t, const std::string& what) {
  throw Error(file + ": corrupt packed model: tensor '" + t.name + "' " + what);
}

}  // namespace

int pack_width(DType t) {
  switch (t) {
    case DType::F16:
    case DType::BF16:
      return 2;
    case DType::F32:
      return 4;
    default:
      return 1;
  }
}

namespace {

// A stream's chunk directory, checked against the tensor: `head` holds at
// least the stream head and the directory (dir_end bytes, see below).
struct StreamDir {
  int w = 1;
  uint64_t elems = 0;
  uint64_t dir_end = 0;  // bytes of stream head + directory
  std::vector<ChunkEntry> chunks;
};

StreamHead stream_head(const TensorExtent& t, const uint8_t* head, const std::string& file) {
  StreamHead h;
  if (t.stored_bytes < sizeof h) corrupt(file, t, "is shorter than its stream head");
  std::memcpy(&h, head, sizeof h);
  const int w = pack_width(t.type);
  if (std::memcmp(h.magic, "RWS1", 4) != 0) corrupt(file, t, "has no stream head (bad magic)");
  if (h.raw_bytes != t.bytes || h.width != static_cast<uint32_t>(w) || t.bytes % w != 0)
    corrupt(file, t, "stream head disagrees with the tensor's type and shape");
  if (h.n_chunks != stream_chunks(stream_elems(t.bytes, w))) corrupt(file, t, "has the wrong number of chunks");
  if (sizeof h + static_cast<uint64_t>(h.n_chunks) * sizeof(ChunkEntry) > t.stored_bytes)
    corrupt(file, t, "chunk directory runs past the stream");
  return h;
}

// `head` holds the stream head and the directory.
StreamDir stream_dir(const TensorExtent& t, const StreamHead& h, const uint8_t* head, const std::string& file) {
  StreamDir d;
  d.w = pack_width(t.type);
  d.elems = stream_elems(t.bytes, d.w);
  d.dir_end = sizeof h + static_cast<uint64_t>(h.n_chunks) * sizeof(ChunkEntry);
  d.chunks.resize(h.n_chunks);
  std::memcpy(d.chunks.data(), head + sizeof h, d.chunks.size() * sizeof(ChunkEntry));
  if (!hash_ok(dir_hash(d.chunks, h.raw_bytes), h.dir_hash)) corrupt(file, t, "chunk directory fails its checksum");
  for (uint64_t c = 0; c < d.chunks.size(); ++c) {
    const ChunkEntry& e = d.chunks[c];
    const uint64_t n = std::min<uint64_t>(d.elems - c * wpack::kChunkElems, wpack::kChunkElems);
    if (e.n != n || e.offset < d.dir_end || e.offset > t.stored_bytes || e.stored > t.stored_bytes - e.offset ||
        (c > 0 && e.offset < d.chunks[c - 1].offset + d.chunks[c - 1].stored))
      corrupt(file, t, "chunk " + std::to_string(c) + " lies outside its stream");
  }
  return d;
}

void check_chunk(const TensorExtent& t, const ChunkEntry& e, uint64_t c, const uint8_t* chunk, const std::string& file) {
  if (!hash_ok(XXH3_64bits(chunk, e.stored), e.hash)) corrupt(file, t, "chunk " + std::to_string(c) + " fails its checksum");
}

// Checks and decodes chunk c of a stream of w-byte elements (directory
// `dir`), whose stored bytes are at `chunk`, into the tensor's bytes at dst.
void decode_chunk(const TensorExtent& t, const std::vector<ChunkEntry>& dir, int w, uint64_t c, const uint8_t* chunk,
                  uint8_t* dst, const std::string& file) {
  const ChunkEntry& e = dir.at(c);
  check_chunk(t, e, c, chunk, file);
  if (!cpu::unpack_chunk(chunk, e.stored, dst + c * wpack::kChunkElems * w, e.n, w))
    corrupt(file, t, "chunk " + std::to_string(c) + " does not decode");
}

}  // namespace

void decode_tensor(const TensorExtent& t, const uint8_t* s, uint8_t* dst, const std::string& file, bool parallel) {
  const StreamHead h = stream_head(t, s, file);
  const StreamDir d = stream_dir(t, h, s, file);
  auto one = [&](uint64_t c) { decode_chunk(t, d.chunks, d.w, c, s + d.chunks[c].offset, dst, file); };
  if (parallel && d.chunks.size() > 1)
    tbb::parallel_for(uint64_t{0}, uint64_t{d.chunks.size()}, one);
  else
    for (uint64_t c = 0; c < d.chunks.size(); ++c) one(c);
}

std::vector<ChunkEntry> stream_directory(const TensorExtent& t, const uint8_t* s, const std::string& file) {
  return stream_dir(t, stream_head(t, s, file), s, file).chunks;
}

void decode_stream_chunk(const TensorExtent& t, const std::vector<ChunkEntry>& dir, uint64_t c, const uint8_t* s,
                         uint8_t* dst, const std::string& file) {
  decode_chunk(t, dir, pack_width(t.type), c, s + dir.at(c).offset, dst, file);
}

void check_stream(const TensorExtent& t, const uint8_t* s, const std::string& file, std::vector<ChunkEntry>& chunks) {
  const StreamHead h = stream_head(t, s, file);
  const StreamDir d = stream_dir(t, h, s, file);
  for (uint64_t c = 0; c < d.chunks.size(); ++c) {
    const ChunkEntry& e = d.chunks[c];
    check_chunk(t, e, c, s + e.offset, file);
    wpack::ChunkView v;  // the head, as the decoder will check it
    if (!wpack::chunk_view(s + e.offset, e.stored, e.n, d.w, &v))
      corrupt(file, t, "chunk " + std::to_string(c) + " does not decode");
    chunks.push_back(e);
  }
}

uint64_t pack_chunk_count(const TensorExtent& t) {
  return stream_chunks(stream_elems(t.bytes, pack_width(t.type)));
}

void read_tensor(int fd, const std::string& file, const TensorExtent& t, uint8_t* dst) {
  if (!t.packed) {
    read_exact(fd, file, dst, t.bytes, t.offset);
    return;
  }
  // The directory first, then the chunks a few MiB at a time: the memory a
  // load needs beyond its destination stays small, whatever the tensor's size.
  StreamHead h;
  if (t.stored_bytes < sizeof h) corrupt(file, t, "is shorter than its stream head");
  read_exact(fd, file, &h, sizeof h, t.offset);
  h = stream_head(t, reinterpret_cast<const uint8_t*>(&h), file);
  std::vector<uint8_t> head(sizeof h + static_cast<uint64_t>(h.n_chunks) * sizeof(ChunkEntry));
  read_exact(fd, file, head.data(), head.size(), t.offset);
  const StreamDir d = stream_dir(t, h, head.data(), file);
  constexpr uint64_t kBatch = 8u << 20;
  std::vector<uint8_t> buf;
  for (uint64_t c0 = 0; c0 < d.chunks.size();) {
    uint64_t c1 = c0 + 1;
    while (c1 < d.chunks.size() && d.chunks[c1].offset + d.chunks[c1].stored - d.chunks[c0].offset <= kBatch) ++c1;
    const uint64_t begin = d.chunks[c0].offset, end = d.chunks[c1 - 1].offset + d.chunks[c1 - 1].stored;
    buf.resize(end - begin);
    read_exact(fd, file, buf.data(), buf.size(), t.offset + begin);
    tbb::parallel_for(c0, c1, [&](uint64_t c) {
      decode_chunk(t, d.chunks, d.w, c, buf.data() + (d.chunks[c].offset - begin), dst, file);
    });
    c0 = c1;
  }
}

ModelDesc load_packed_desc(const std::string& path) {
  Fd fd(open_input_file(path, "a model"));
  struct stat st {};
  if (fstat(fd.fd, &st) != 0) throw Error(path + ": cannot stat: " + strerror(errno));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  PackHead h;
  if (size < sizeof h) throw Error(path + ": truncated packed model (no head)");
  read_exact(fd.fd, path, &h, sizeof h, 0);
  if (std::memcmp(h.magic, kPackMagic, sizeof h.magic) != 0)
    throw Error(path + ": not a packed model (bad magic; this reader knows version 1)");
  if (h.meta_offset != kAlign || h.meta_bytes > size || h.meta_offset > size - h.meta_bytes ||
      h.index_count > (1u << 20) || h.index_offset > size || h.index_count * sizeof(PackIndexEntry) > size - h.index_offset)
    throw Error(path + ": corrupt or truncated packed model (head points outside the file)");
  std::vector<uint8_t> meta(h.meta_bytes);
  std::vector<PackIndexEntry> index(h.index_count);
  read_exact(fd.fd, path, meta.data(), meta.size(), h.meta_offset);
  read_exact(fd.fd, path, index.data(), index.size() * sizeof(PackIndexEntry), h.index_offset);
  XXH3_state_t* xs = XXH3_createState();
  if (!xs) throw Error("out of memory (xxhash state)");
  XXH3_64bits_reset(xs);
  XXH3_64bits_update(xs, meta.data(), meta.size());
  XXH3_64bits_update(xs, index.data(), index.size() * sizeof(PackIndexEntry));
  const uint64_t got = XXH3_64bits_digest(xs);
  XXH3_freeState(xs);
  if (!hash_ok(got, h.hash)) throw Error(path + ": corrupt packed model (header or index fails its checksum)");

  const GgufFile g = GgufFile::open_header(fd.fd, path, h.meta_offset, h.meta_bytes);  // the bytes just hashed
  if (g.tensors().size() != index.size())
    throw Error(path + ": corrupt packed model (" + std::to_string(index.size()) + " index entries for " +
                std::to_string(g.tensors().size()) + " tensors)");
  std::unordered_map<std::string, const PackIndexEntry*> by_name;
  for (size_t i = 0; i < index.size(); ++i) {
    const PackIndexEntry& e = index[i];
    const GgufTensorInfo& ti = g.tensors()[i];
    if (e.raw_bytes != ti.bytes || e.stored_offset % kAlign != 0 || e.stored_offset > size ||
        e.stored_bytes > size - e.stored_offset)
      throw Error(path + ": corrupt or truncated packed model (tensor '" + ti.name + "' lies outside the file)");
    by_name.emplace(ti.name, &e);
  }
  auto extent = [&](TensorExtent& t) {
    const PackIndexEntry* e = by_name.at(t.name);
    t.offset = e->stored_offset;
    t.stored_bytes = e->stored_bytes;
    t.packed = true;
  };
  const GgufTensorReader read = [&](const std::string& name, void* dst, uint64_t bytes) {
    const GgufTensorInfo* ti = g.find_tensor(name);
    TensorExtent t;
    t.name = name;
    t.type = ti->type;
    t.bytes = ti->bytes;
    extent(t);
    if (t.bytes != bytes) throw Error(path + ": tensor '" + name + "' has an unexpected size");
    read_tensor(fd.fd, path, t, static_cast<uint8_t*>(dst));
  };
  ModelDesc m = model_desc_from_gguf(g, path, read);
  m.format = ModelFormat::kPacked;
  extent(m.tok_embd);
  extent(m.output_norm);
  if (m.hp.tied_lm_head)
    m.lm_head = m.tok_embd;
  else
    extent(m.lm_head);
  for (LayerDesc& L : m.layers) {
    for (TensorExtent* t : {&L.attn_norm, &L.wq, &L.wk, &L.wv, &L.wo, &L.ffn_norm, &L.w_gate, &L.w_up, &L.w_down})
      extent(*t);
    for (TensorExtent* t : L.optional_vectors())
      if (!t->name.empty()) extent(*t);
  }
  return m;
}

PackStats pack_model(const std::string& from, const std::string& out,
                     const std::function<void(uint64_t, uint64_t)>& progress) {
  if (struct stat st {}; ::stat(from.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throw Error(from + ": is a directory; redwood pack takes a GGUF file (convert a safetensors model first)");
  {
    Fd probe(open_input_file(from, "a model"));
    char magic[8] = {};
    if (::pread(probe.fd, magic, sizeof magic, 0) == static_cast<ssize_t>(sizeof magic) &&
        std::memcmp(magic, kPackMagic, sizeof magic) == 0)
      throw Error(from + ": is already packed");
  }
  const GgufFile src = GgufFile::open(from);  // a GGUF (safetensors: convert first)
  (void)model_desc_from_gguf(src, from);      // a model Redwood runs
  check_output_path(out, {from}, "redwood pack");
  Fd in(open_input_file(from, "a model"));

  PackHead h;
  std::memcpy(h.magic, kPackMagic, sizeof h.magic);
  h.meta_offset = kAlign;
  h.meta_bytes = src.data_offset();
  h.index_offset = align_up(h.meta_offset + h.meta_bytes, kAlign);
  h.index_count = src.tensors().size();
  h.source_bytes = src.file_size();
  std::vector<uint8_t> meta(h.meta_bytes);
  read_exact(in.fd, from, meta.data(), meta.size(), 0);
  std::vector<PackIndexEntry> index(h.index_count);

  PackStats st;
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> xs(XXH3_createState(), &XXH3_freeState);
  if (!xs) throw Error("out of memory (xxhash state)");
  TempOutput o(out, O_RDWR);
  const int ofd = o.fd();
  const std::string& tmp = o.path();
  uint64_t at = align_up(h.index_offset + index.size() * sizeof(PackIndexEntry), kAlign);
  for (size_t i = 0; i < index.size(); ++i) {
    const GgufTensorInfo& ti = src.tensors()[i];
    PackIndexEntry& e = index[i];
    e.stored_offset = at;
    e.raw_bytes = ti.bytes;
    e.stored_bytes = write_stream(in.fd, from, ti, ofd, out, at, xs.get(), st);
    e.raw_hash = XXH3_64bits_digest(xs.get());
    at = align_up(at + e.stored_bytes, kAlign);
    if (progress) progress(i + 1, index.size());
  }
  // The file ends at a 4096 boundary: the streamer's aligned reads of the last
  // tensor then never run past its end.
  if (::ftruncate(ofd, static_cast<off_t>(at)) != 0) throw Error(out + ": cannot size: " + strerror(errno));
  st.file_bytes = at;
  XXH3_64bits_reset(xs.get());
  XXH3_64bits_update(xs.get(), meta.data(), meta.size());
  XXH3_64bits_update(xs.get(), index.data(), index.size() * sizeof(PackIndexEntry));
  h.hash = XXH3_64bits_digest(xs.get());
  pwrite_all(ofd, out, &h, sizeof h, 0);
  pwrite_all(ofd, out, meta.data(), meta.size(), h.meta_offset);
  pwrite_all(ofd, out, index.data(), index.size() * sizeof(PackIndexEntry), h.index_offset);

  // Verify what was written: the head and index as a reader sees them, then
  // every tensor read back, decoded and compared with the source's hash.
  // (Errors name `out`: the temp file is removed on the way out. The bytes come
  // back through the page cache; a write error the disk reports later fails
  // commit()'s fsync, before the rename.)
  std::vector<uint8_t> raw;
  try {
    (void)load_packed_desc(tmp);
    const GgufFile g = GgufFile::open_header(tmp, h.meta_offset, h.meta_bytes);
    for (size_t i = 0; i < index.size(); ++i) {
      TensorExtent t;
      t.name = g.tensors()[i].name;
      t.type = g.tensors()[i].type;
      t.bytes = index[i].raw_bytes;
      t.offset = index[i].stored_offset;
      t.stored_bytes = index[i].stored_bytes;
      t.packed = true;
      raw.resize(t.bytes);
      read_tensor(ofd, tmp, t, raw.data());
      if (XXH3_64bits(raw.data(), raw.size()) != index[i].raw_hash)
        throw Error("tensor '" + t.name + "' does not decode to the source's bytes");
    }
  } catch (const Error& e) {
    std::string why = e.what();  // it may name the temp file, which is removed on the way out
    for (size_t pos; (pos = why.find(tmp)) != std::string::npos;) why.replace(pos, tmp.size(), out);
    throw Error(out + ": verification failed: " + why);
  }
  o.commit();
  return st;
}

}  // namespace redwood
