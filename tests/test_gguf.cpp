#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <chrono>
#include <thread>
#include <vector>

#include "src/model/fingerprint.h"
#include "src/model/gguf.h"
#include "src/model/gguf_writer.h"
#include "src/model/model_desc.h"
#include "src/util/error.h"
#include "tests/util/errors.h"
#include "tests/util/tiny_gguf.h"

using namespace redwood;

TEST(Gguf, TinyModelRoundTrip) {
  const std::string path = ::testing::TempDir() + "gguf_tiny.gguf";
  testutil::TinyShape s;
  s.type = DType::Q4_0;
  testutil::write_tiny_llama(path, s);
  GgufFile f = GgufFile::open(path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get_uint("llama.block_count"), 2u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_THROW(f.get_string("llama.block_count"), Error);  // wrong type
  const auto* t = f.find_tensor("blk.1.ffn_down.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->type, DType::Q4_0);
  EXPECT_EQ(t->ne[0], 96u);
  EXPECT_EQ(t->offset % 32, 0u);
  ModelDesc m = load_model_desc(path);
  EXPECT_EQ(m.hp.n_layers, 2);
  EXPECT_EQ(m.hp.n_kv_heads, 2);
  EXPECT_EQ(m.hp.head_dim, 16);
  EXPECT_FALSE(m.hp.tied_lm_head);
  EXPECT_EQ(m.layers[1].w_down.rows, 64);
  EXPECT_EQ(m.layers[1].w_down.cols, 96);
  EXPECT_EQ(m.tokenizer.kind, TokenizerKind::kSentencePiece);
}

// A model's fingerprint follows its content, not its path: a copy elsewhere
// has the same, another seed (other weights, same shape) or another type does
// not, and neither does one flipped byte at the start of one tensor's data.
TEST(Gguf, FingerprintFollowsContentNotPath) {
  setenv("REDWOOD_CACHE_DIR", (::testing::TempDir() + "fp_cache_follows").c_str(), 1);  // not the user's
  const std::string a = ::testing::TempDir() + "fp_a.gguf", b = ::testing::TempDir() + "fp_b.gguf";
  testutil::TinyShape s;
  s.type = DType::Q4_0;
  testutil::write_tiny_llama(a, s);
  const ModelDesc ma = load_model_desc(a);
  const std::string fa = model_fingerprint(ma);
  EXPECT_EQ(fa.size(), 16u);
  EXPECT_EQ(fa.find_first_not_of("0123456789abcdef"), std::string::npos) << fa;
  std::filesystem::copy_file(a, b, std::filesystem::copy_options::overwrite_existing);
  EXPECT_EQ(model_fingerprint(load_model_desc(b)), fa);

  testutil::TinyShape other = s;
  other.seed += 1;
  testutil::write_tiny_llama(b, other);
  EXPECT_NE(model_fingerprint(load_model_desc(b)), fa);
  other = s;
  other.type = DType::Q8_0;
  testutil::write_tiny_llama(b, other);
  EXPECT_NE(model_fingerprint(load_model_desc(b)), fa);

  std::filesystem::copy_file(a, b, std::filesystem::copy_options::overwrite_existing);
  const TensorExtent& w = ma.layers[1].w_up;
  {
    std::fstream f(b, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(w.offset + 3));
    const char c = static_cast<char>(f.get());
    f.seekp(static_cast<std::streamoff>(w.offset + 3));
    f.put(static_cast<char>(c ^ 0x10));
  }
  EXPECT_NE(model_fingerprint(load_model_desc(b)), fa);
}

namespace {
// A fresh cache directory for the content hashes (REDWOOD_CACHE_DIR).
std::string fresh_cache(const std::string& name) {
  const std::string dir = ::testing::TempDir() + name;
  std::filesystem::remove_all(dir);
  setenv("REDWOOD_CACHE_DIR", dir.c_str(), 1);
  return dir;
}
std::vector<std::string> cache_entries(const std::string& dir) {
  std::vector<std::string> v;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().filename().string().rfind("content-hash-", 0) == 0) v.push_back(e.path().string());
  return v;
}
void flip_byte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  const char c = static_cast<char>(f.get());
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(static_cast<char>(c ^ 0x10));
}
}  // namespace

// Issue 32: the fingerprint hashed the first 256 bytes of each tensor, so a
// change in the middle of a tensor went unnoticed (and a resumed batch job
// mixed two models in one file). Now every byte counts.
TEST(Gguf, FingerprintCoversEveryByteOfEveryTensor) {
  fresh_cache("fp_cache_every");
  const std::string a = ::testing::TempDir() + "fp_every_a.gguf", b = ::testing::TempDir() + "fp_every_b.gguf";
  testutil::TinyShape s;
  s.type = DType::Q4_0;
  testutil::write_tiny_llama(a, s);
  const ModelDesc ma = load_model_desc(a);
  const std::string fa = model_fingerprint(ma);
  for (const TensorExtent* w : {&ma.layers[1].w_up, &ma.layers[0].w_down, &ma.tok_embd}) {
    ASSERT_GT(w->bytes, 1024u) << w->name;
    std::filesystem::copy_file(a, b, std::filesystem::copy_options::overwrite_existing);
    flip_byte(b, w->offset + w->bytes / 2);
    EXPECT_NE(model_fingerprint(load_model_desc(b)), fa) << w->name;
    std::filesystem::copy_file(a, b, std::filesystem::copy_options::overwrite_existing);
    flip_byte(b, w->offset + w->bytes - 1);  // the last byte
    EXPECT_NE(model_fingerprint(load_model_desc(b)), fa) << w->name;
  }
  std::filesystem::copy_file(a, b, std::filesystem::copy_options::overwrite_existing);
  EXPECT_EQ(model_fingerprint(load_model_desc(b)), fa);  // a copy: the same
}

// The whole-content hash is cached by the file's version (path, size, times,
// inode): a second call reads the cache, not the file; a changed file (mtime,
// size, or content rewritten with its mtime restored) is hashed again.
TEST(Gguf, FingerprintContentHashCache) {
  const std::string dir = fresh_cache("fp_cache_reuse");
  const std::string a = ::testing::TempDir() + "fp_cache_a.gguf";
  testutil::TinyShape s;
  s.type = DType::Q4_0;
  testutil::write_tiny_llama(a, s);
  const std::string fa = model_fingerprint(load_model_desc(a));
  std::vector<std::string> entries = cache_entries(dir);
  ASSERT_EQ(entries.size(), 1u);
  auto poison = [](const std::string& entry) {  // keeps the key line, replaces the hash
    std::ifstream in(entry);
    std::string key;
    std::getline(in, key);
    in.close();
    std::ofstream(entry, std::ios::trunc) << key << "\n0123456789abcdef\n";
  };
  poison(entries[0]);
  EXPECT_NE(model_fingerprint(load_model_desc(a)), fa);  // taken from the cache: the file was not read

  // A new mtime: hashed again, the true value.
  std::filesystem::last_write_time(a, std::filesystem::last_write_time(a) + std::chrono::seconds(1));
  EXPECT_EQ(model_fingerprint(load_model_desc(a)), fa);

  // Content rewritten in place, same size, mtime put back: still hashed again.
  const ModelDesc ma = load_model_desc(a);
  const auto mtime = std::filesystem::last_write_time(a);
  for (const std::string& e : cache_entries(dir)) poison(e);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // past the clock's granularity
  flip_byte(a, ma.layers[1].w_up.offset + ma.layers[1].w_up.bytes / 2);
  std::filesystem::last_write_time(a, mtime);
  const std::string changed = model_fingerprint(load_model_desc(a));
  EXPECT_NE(changed, fa);
  std::filesystem::remove_all(dir);
  EXPECT_EQ(model_fingerprint(load_model_desc(a)), changed);  // the true content's, not the poisoned cache's
  flip_byte(a, ma.layers[1].w_up.offset + ma.layers[1].w_up.bytes / 2);  // back, but a new version
  EXPECT_EQ(model_fingerprint(load_model_desc(a)), fa);

  // A new size: hashed again.
  for (const std::string& e : cache_entries(dir)) poison(e);
  std::ofstream(a, std::ios::app | std::ios::binary) << std::string(64, '\0');
  const std::string grown = model_fingerprint(load_model_desc(a));
  EXPECT_NE(grown, fa);
  std::filesystem::remove_all(dir);
  EXPECT_EQ(model_fingerprint(load_model_desc(a)), grown);
}

TEST(Gguf, RealModelMetadata) {
  if (access(REDWOOD_TEST_MODEL, R_OK) != 0) GTEST_SKIP() << "model missing";
  ModelDesc m = load_model_desc(REDWOOD_TEST_MODEL);
  EXPECT_EQ(m.hp.n_layers, 30);
  EXPECT_EQ(m.hp.dim, 576);
  EXPECT_EQ(m.hp.n_heads, 9);
  EXPECT_EQ(m.hp.n_kv_heads, 3);
  EXPECT_EQ(m.hp.ffn_dim, 1536);
  EXPECT_EQ(m.hp.vocab, 49152);
  EXPECT_FLOAT_EQ(m.hp.rope_base, 100000.0f);
  EXPECT_TRUE(m.hp.tied_lm_head);
  EXPECT_EQ(m.tok_embd.type, DType::Q8_0);
  EXPECT_EQ(m.layers[0].wq.type, DType::Q4_1);
  EXPECT_EQ(m.tokenizer.kind, TokenizerKind::kByteLevelBpe);
  EXPECT_EQ(m.tokenizer.pre, "smollm");
}

TEST(Gguf, MissingFileIsError) {
  EXPECT_THROW(GgufFile::open("/nonexistent/model.gguf"), Error);
  EXPECT_THROW(load_model_desc("/nonexistent/model.gguf"), Error);
}

namespace {
std::string tensor_bytes(const GgufFile& f, const std::string& name) {
  const auto* t = f.find_tensor(name);
  if (!t) return "";
  std::string b(t->bytes, '\0');
  FILE* fp = std::fopen(f.path().c_str(), "rb");
  std::fseek(fp, static_cast<long>(t->offset), SEEK_SET);
  const size_t got = std::fread(b.data(), 1, b.size(), fp);
  std::fclose(fp);
  b.resize(got);
  return b;
}
}  // namespace

TEST(Gguf, SelfDraftKeepsChosenBlocksRenumbered) {
  const std::string src = ::testing::TempDir() + "gguf_draft_src.gguf";
  const std::string out = ::testing::TempDir() + "gguf_draft_out.gguf";
  testutil::TinyShape s;
  s.layers = 4;
  testutil::write_tiny_llama(src, s);
  make_self_draft(src, parse_block_list("0,2-3", 4), out);
  const GgufFile a = GgufFile::open(src), b = GgufFile::open(out);
  EXPECT_EQ(b.get_uint("llama.block_count"), 3u);
  EXPECT_NE(b.get_string("general.name").value_or("").find("blocks 0,2-3 of 4"), std::string::npos);
  const std::pair<int, int> kept[] = {{0, 0}, {2, 1}, {3, 2}};
  for (const auto& [from, to] : kept)
    for (const char* part : {"attn_q.weight", "ffn_down.weight", "attn_norm.weight"}) {
      const std::string want = tensor_bytes(a, "blk." + std::to_string(from) + "." + part);
      ASSERT_FALSE(want.empty());
      EXPECT_EQ(tensor_bytes(b, "blk." + std::to_string(to) + "." + part), want) << from << " " << part;
    }
  EXPECT_EQ(b.find_tensor("blk.3.attn_q.weight"), nullptr);
  EXPECT_EQ(tensor_bytes(b, "output.weight"), tensor_bytes(a, "output.weight"));
  EXPECT_EQ(load_model_desc(out).hp.n_layers, 3);
}

// Any family: the first K blocks of a qwen2 model (whose block count is
// qwen2.block_count; make-draft read llama.block_count and found 0 blocks),
// and the kept blocks' sliding-window flags.
TEST(Gguf, SelfDraftOfAQwenModelKeepsItsWindowedLayers) {
  const std::string src = ::testing::TempDir() + "gguf_draft_qwen2.gguf";
  const std::string out = ::testing::TempDir() + "gguf_draft_qwen2_out.gguf";
  testutil::TinyShape s;
  s.arch = "qwen2";
  s.layers = 4;
  s.sliding_window = 64;
  s.window_pattern = {0, 1, 1, 0};
  testutil::write_tiny_llama(src, s);
  make_self_draft(src, 2, out);
  LlamaHParams hp = load_model_desc(out).hp;
  EXPECT_EQ(hp.arch, "qwen2");
  EXPECT_EQ(hp.n_layers, 2);
  EXPECT_EQ(hp.window_layers, (std::vector<uint8_t>{0, 1}));
  make_self_draft(src, parse_block_list("1,3", 4), out);
  EXPECT_EQ(load_model_desc(out).hp.window_layers, (std::vector<uint8_t>{1, 0}));
  make_self_draft(src, parse_block_list("1-2", 4), out);
  hp = load_model_desc(out).hp;
  EXPECT_EQ(hp.sliding_window, 64);
  EXPECT_TRUE(hp.window_layers.empty());  // every kept layer is windowed
  EXPECT_NE(testutil::error_of([&] { make_self_draft(src, 5, out); }).find("between 1 and the model's 4 blocks"),
            std::string::npos);
}

TEST(Gguf, BlockListsAreCheckedStrictly) {
  EXPECT_EQ(parse_block_list("0-3,8,10-11", 12), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  for (const char* bad : {"", ",", "1,", "3-1", "0,0", "2,1", "0-12", "a", "1--2", "1 ,2", "99999999"})
    EXPECT_THROW(parse_block_list(bad, 12), Error) << bad;
  // A number is named as written, never cut (it said "block 184467").
  for (const std::string n : {"18446744073709551615", "99999999999999999999999", "12", "0000000000000012"})
    EXPECT_EQ(testutil::error_of([&] { parse_block_list("0," + n, 12); }),
              "--blocks '0," + n + "': block " + n + " is past the model's last block 11");
  EXPECT_EQ(parse_block_list("0000000000000011", 12), (std::vector<int>{11}));
}

// Issue 42/46: a window that covers the context changes nothing; a shorter
// one is the model's window (the attention's: test_runtime
// SessionSetup.ASlidingWindowRunsPastTheWindow).
TEST(Gguf, ASlidingWindowShorterThanTheContextIsKept) {
  const std::string path = ::testing::TempDir() + "gguf_swa.gguf";
  testutil::TinyShape s;
  s.layers = 1;
  for (const uint32_t w : {2048u, 4096u}) {
    s.sliding_window = w;
    testutil::write_tiny_llama(path, s);
    EXPECT_EQ(load_model_desc(path).hp.sliding_window, 0) << w;
  }
  s.sliding_window = 1024;
  testutil::write_tiny_llama(path, s);
  const LlamaHParams hp = load_model_desc(path).hp;
  EXPECT_EQ(hp.sliding_window, 1024);
}

// attention.sliding_window_pattern (llama.cpp's, one bool a layer) names the
// windowed layers; all false is no window; a wrong length and the integer
// form (whose first layer llama.cpp sets per architecture) are errors.
TEST(Gguf, ASlidingWindowPatternNamesTheLayers) {
  const std::string path = ::testing::TempDir() + "gguf_swa_pattern.gguf";
  testutil::TinyShape s;
  s.layers = 2;
  s.sliding_window = 64;
  s.window_pattern = {0, 1};
  testutil::write_tiny_llama(path, s);
  LlamaHParams hp = load_model_desc(path).hp;
  EXPECT_EQ(hp.sliding_window, 64);
  EXPECT_EQ(hp.window_layers, (std::vector<uint8_t>{0, 1}));
  s.window_pattern = {1, 1};
  testutil::write_tiny_llama(path, s);
  hp = load_model_desc(path).hp;
  EXPECT_EQ(hp.sliding_window, 64);
  EXPECT_TRUE(hp.window_layers.empty());
  s.window_pattern = {0, 0};
  testutil::write_tiny_llama(path, s);
  EXPECT_EQ(load_model_desc(path).hp.sliding_window, 0);
  s.window_pattern = {1};
  testutil::write_tiny_llama(path, s);
  EXPECT_NE(testutil::error_of([&] { load_model_desc(path); }).find("sliding_window_pattern is unsupported"),
            std::string::npos);
  s.window_pattern.clear();
  s.window_period = 2;
  testutil::write_tiny_llama(path, s);
  EXPECT_NE(testutil::error_of([&] { load_model_desc(path); }).find("one bool a layer (2)"), std::string::npos);
}

// The families as data: qwen2's biases and qwen3's per-head q/k norms are
// read into the description (NEOX RoPE, key_length as the head size), and
// check_tensors_used / validate_model_desc name what a model lacks or has extra.
TEST(Gguf, QwenFamiliesLoadTheirExtraTensors) {
  const std::string path = ::testing::TempDir() + "gguf_qwen.gguf";
  testutil::TinyShape s;
  s.arch = "qwen2";
  testutil::write_tiny_llama(path, s);
  ModelDesc m = load_model_desc(path);
  EXPECT_EQ(m.hp.arch, "qwen2");
  EXPECT_TRUE(m.hp.qkv_bias);
  EXPECT_FALSE(m.hp.qk_norm);
  EXPECT_EQ(m.hp.rope_mode, RopeMode::kHalf);
  EXPECT_EQ(m.layers[1].bk.cols, 2 * 16);
  EXPECT_EQ(m.layers[1].tensors().size(), 12u);
  EXPECT_EQ(m.layers[1].vectors().size(), 5u);
  s.arch = "qwen3";
  s.head_dim = 32;  // 4 heads of 32 on a 64-wide stream, as Qwen3's head_dim 128
  testutil::write_tiny_llama(path, s);
  m = load_model_desc(path);
  EXPECT_TRUE(m.hp.qk_norm);
  EXPECT_FALSE(m.hp.qkv_bias);
  EXPECT_EQ(m.hp.head_dim, 32);
  EXPECT_EQ(m.layers[0].wq.rows, 4 * 32);
  EXPECT_EQ(m.layers[0].wo.cols, 4 * 32);
  EXPECT_EQ(m.layers[0].q_norm.cols, 32);
  EXPECT_EQ(m.layers[1].tensors().size(), 11u);
}

TEST(Gguf, UnknownArchitecturesAndMissingFeaturesAreOneLineErrors) {
  const std::string path = ::testing::TempDir() + "gguf_arch.gguf";
  testutil::TinyShape s;
  s.layers = 1;
  s.arch = "gptneox";
  testutil::write_tiny_llama(path, s);
  EXPECT_EQ(testutil::error_of([&] { load_model_desc(path); }),
            path + ": unsupported architecture 'gptneox' (supported: llama, qwen2, qwen3)");
  s.arch = "qwen2moe";
  testutil::write_tiny_llama(path, s);
  EXPECT_EQ(testutil::error_of([&] { load_model_desc(path); }),
            path + ": architecture 'qwen2moe' needs mixture-of-experts feed-forward layers, which Redwood does not "
                   "implement");
  s.arch = "llama";  // Mixtral converts as llama with experts
  s.expert_count = 8;
  testutil::write_tiny_llama(path, s);
  EXPECT_EQ(testutil::error_of([&] { load_model_desc(path); }),
            path + ": architecture 'llama' with 8 experts: mixture-of-experts feed-forward layers are not supported");
}
