// One fuzz input -> one load attempt, shared by the libFuzzer targets
// (fuzz_gguf.cpp, fuzz_safetensors.cpp) and tests/test_hostile.cpp, which
// replays tests/fuzz/corpus/ through the same functions.
//
// The contract under test: a hostile file yields redwood::Error or loads;
// anything else (another exception type, a crash, a sanitizer report) is a bug.
// The run_* functions swallow redwood::Error and let every other exception out.
#pragma once
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/common/wpack.h"
#include "kernels/cpu/wpack.h"
#include "src/model/gguf.h"
#include "src/model/model_desc.h"
#include "src/model/packed.h"
#include "src/model/safetensors.h"
#include "src/tokenizer/tokenizer.h"
#include "src/util/error.h"
#include "tests/fuzz/tiny_hf.h"

namespace redwood::fuzz {

// A per-process scratch directory (in /dev/shm when available), removed at exit.
class Scratch {
 public:
  static Scratch& get() {
    static Scratch s;
    return s;
  }
  const std::string& dir() const { return dir_; }

 private:
  Scratch() {
    std::string base = "/dev/shm";
    struct stat st{};
    if (::stat(base.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || ::access(base.c_str(), W_OK) != 0)
      base = std::filesystem::temp_directory_path().string();
    std::string tmpl = base + "/redwood-fuzz-XXXXXX";
    if (!::mkdtemp(tmpl.data())) std::abort();
    dir_ = tmpl;
  }
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string dir_;
};

// Builds a tokenizer from a loaded description and runs it briefly: a model
// file's vocabulary is hostile input too.
inline void exercise(const ModelDesc& m) {
  std::unique_ptr<Tokenizer> tok;
  try {
    tok = Tokenizer::create(m.tokenizer);
  } catch (const Error&) {
    return;
  }
  static const std::string_view kText = "Hello world, <s> hell\xc3\xa9\n\t 123 <|endoftext|> ab\xff";
  std::vector<int32_t> ids;
  try {
    ids = tok->encode(kText, true, true);
  } catch (const Error&) {  // a byte of kText without any token (never dropped silently)
    return;
  }
  for (int32_t id : ids)
    if (id < 0 || id >= tok->vocab_size()) std::abort();  // encode produced an out-of-range id
  (void)tok->decode(ids);
  (void)tok->decode(ids, true);
}

// GGUF: the bytes are the whole file.
inline bool run_gguf(const uint8_t* data, size_t size) {
  const std::string path = Scratch::get().dir() + "/input.gguf";
  tiny::write_bytes(path, data, size);
  try {
    ModelDesc m = load_model_desc(path);
    exercise(m);
    return true;
  } catch (const Error&) {
    return false;
  }
}

// Hugging Face directories. The first byte picks which file of a tiny valid
// model the rest of the input replaces:
//   0: model.safetensors   1: config.json   2: model.safetensors.index.json
//      (beside two valid shards)   3: tokenizer.json
constexpr int kSafetensorsModes = 4;

inline std::string hf_fixture(int mode) {
  const std::string dir = Scratch::get().dir() + "/hf" + std::to_string(mode);
  if (::access((dir + "/config.json").c_str(), F_OK) == 0) return dir;
  std::filesystem::create_directories(dir);
  tiny::Tiny t;
  t.layers = 1;
  t.dim = 8;
  t.heads = 2;
  t.kv_heads = 1;
  t.ffn = 16;
  t.vocab = 260;
  t.dtype = "F16";
  t.tied = true;
  tiny::write_tiny_model(dir, t, mode == 2 ? 2 : 1);
  return dir;
}

inline bool run_safetensors(const uint8_t* data, size_t size) {
  if (size == 0) return false;
  const int mode = data[0] % kSafetensorsModes;
  const std::string dir = hf_fixture(mode);
  static const char* kTarget[kSafetensorsModes] = {"model.safetensors", "config.json",
                                                   "model.safetensors.index.json", "tokenizer.json"};
  const std::string path = dir + "/" + kTarget[mode];
  struct Restore {  // puts the fixture back for the next input, however this one ends
    std::string path, saved;
    ~Restore() { tiny::write_text(path, saved); }
  } restore{path, tiny::read_all(path)};
  tiny::write_bytes(path, data + 1, size - 1);
  try {
    if (mode == 0) (void)read_safetensors_header(path);
    ModelDesc m = load_model_desc(dir);
    exercise(m);
    return true;
  } catch (const Error&) {
    return false;
  }
}

// Packed models (`redwood pack`): the bytes are the whole .rwpk file; every
// tensor it describes is then read and decoded (up to a few MiB in all). A
// fuzzing build (FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION, set by
// tests/fuzz/CMakeLists.txt) does not enforce the file's checksums, so mutated
// inputs reach the index, stream and chunk parsers and the decoders behind them.
inline bool run_packed(const uint8_t* data, size_t size) {
  const std::string path = Scratch::get().dir() + "/input.rwpk";
  tiny::write_bytes(path, data, size);
  try {
    ModelDesc m = load_model_desc(path);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) std::abort();
    struct Close {
      int fd;
      ~Close() { ::close(fd); }
    } close_fd{fd};
    uint64_t budget = 8u << 20;
    std::vector<uint8_t> dst;
    std::vector<const TensorExtent*> all = {&m.tok_embd, &m.output_norm, &m.lm_head};
    for (const LayerDesc& l : m.layers)
      for (const TensorExtent* t : l.tensors()) all.push_back(t);
    for (const TensorExtent* t : all) {
      if (t->bytes > budget) continue;
      budget -= t->bytes;
      dst.assign(t->bytes + 64, 0xA5);
      read_tensor(fd, path, *t, dst.data());
      for (size_t i = t->bytes; i < dst.size(); ++i)
        if (dst[i] != 0xA5) throw std::logic_error("read_tensor wrote past tensor " + t->name);
    }
    exercise(m);
    return true;
  } catch (const Error&) {
    return false;
  }
}

// One packed chunk (kernels/common/wpack.h) through both CPU decoders, which
// must agree: the same verdict and, when they accept it, the same bytes, with
// nothing written past the output. Input: byte 0 picks the mode and element
// width, bytes 1..4 the element count (little-endian, taken modulo
// kChunkElems + 1); the rest is
//   mode 0: a stored chunk (head + payload), decoded as it is;
//   mode 1: raw elements, packed by the encoder, decoded, and compared with
//           themselves (the round trip).
// A disagreement throws std::logic_error (not a redwood::Error: a bug).
inline bool run_wpack(const uint8_t* data, size_t size) {
  if (size < 5) return false;
  static const int kWidth[4] = {1, 2, 4, 2};
  const int mode = data[0] & 1, w = kWidth[(data[0] >> 1) & 3];
  uint32_t n32;
  std::memcpy(&n32, data + 1, 4);
  uint64_t n = n32 % (wpack::kChunkElems + 1);
  const uint8_t* body = data + 5;
  const uint64_t body_bytes = size - 5;
  constexpr size_t kGuard = 64;
  auto decode = [&](const uint8_t* chunk, uint64_t stored, cpu::UnpackPath path, std::vector<uint8_t>& out) {
    out.assign(n * w + kGuard, 0x5A);
    const bool ok = cpu::unpack_chunk(chunk, stored, out.data(), n, w, path);
    for (size_t i = n * w; i < out.size(); ++i)
      if (out[i] != 0x5A) throw std::logic_error("unpack_chunk wrote past its output");
    return ok;
  };
  std::vector<uint8_t> a, b;
  if (mode == 1) {
    n = std::min<uint64_t>(n, body_bytes / w);
    std::vector<uint8_t> chunk;
    cpu::pack_chunk(body, n, w, chunk);
    for (auto path : {cpu::UnpackPath::kScalar, cpu::UnpackPath::kAvx512}) {
      if (!decode(chunk.data(), chunk.size(), path, a)) throw std::logic_error("a packed chunk does not decode");
      if (n && std::memcmp(a.data(), body, n * w) != 0) throw std::logic_error("the round trip changed bytes");
    }
    return true;
  }
  // A copy of exactly the stored bytes, so that a read past them is a sanitizer report.
  std::vector<uint8_t> chunk(body, body + body_bytes);
  const bool ok_s = decode(chunk.data(), chunk.size(), cpu::UnpackPath::kScalar, a);
  const bool ok_v = decode(chunk.data(), chunk.size(), cpu::UnpackPath::kAvx512, b);
  if (ok_s != ok_v) throw std::logic_error("the scalar and AVX-512 decoders disagree on a chunk's validity");
  if (ok_s && a != b) throw std::logic_error("the scalar and AVX-512 decoders decode a chunk differently");
  return ok_s;
}

}  // namespace redwood::fuzz
