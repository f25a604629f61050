// One fuzz input -> one load attempt, shared by the libFuzzer targets
// (fuzz_gguf.cpp, fuzz_safetensors.cpp) and tests/test_hostile.cpp, which
// replays tests/fuzz/corpus/ through the same functions.
//
// The contract under test: a hostile file yields redwood::Error or loads;
// anything else (another exception type, a crash, a sanitizer report) is a bug.
// The run_* functions swallow redwood::Error and let every other exception out.
#pragma once
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "src/model/gguf.h"
#include "src/model/model_desc.h"
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
  auto ids = tok->encode(kText, true, true);
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

}  // namespace redwood::fuzz
