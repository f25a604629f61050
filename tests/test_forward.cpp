// The tree-ready forward pass: tree rows equal plain path runs, chunked
// prefill equals one-shot prefill, KV compaction equals a fresh run.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "src/engine/kv_cache.h"
#include "src/engine/transformer.h"
#include "src/engine/weights.h"
#include "src/model/model_desc.h"
#include "src/util/error.h"
#include "tests/util/test_model.h"
#include "tests/util/tiny_gguf.h"

using namespace redwood;

namespace {

bool have_file(const char* p) {
  return access(p, R_OK) == 0;
}

double rel_err(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

struct Runner : testutil::TestModel {
  using TestModel::TestModel;
  // Logits of the last token of prefix+seq, run as plain chains from scratch.
  std::vector<float> chain_last(const std::vector<int32_t>& prefix, const std::vector<int32_t>& seq) {
    std::vector<int32_t> all = prefix;
    all.insert(all.end(), seq.begin(), seq.end());
    KvCache kv = tf->make_cache((int)all.size());
    std::vector<float> lg(V());
    ChainBatch b(all, 0);
    tf->forward(b.view(), kv, lg, LogitsRows::kLast);
    return lg;
  }
};

// Random tree over n nodes; deep-ish: parent is often the previous node.
std::vector<int32_t> random_tree(int n, std::mt19937& rng) {
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; ++i) {
    if (i == 0)
      p[i] = -1;
    else if (rng() % 3 == 0)
      p[i] = i - 1;
    else
      p[i] = (int)(rng() % (i + 1)) - 1;
  }
  return p;
}

void check_tree_rows(Runner& r, int n, uint32_t seed, double tol, int checks) {
  std::mt19937 rng(seed);
  std::vector<int32_t> prefix;
  for (int i = 0; i < 5; ++i) prefix.push_back((int32_t)(rng() % r.V()));
  auto parents = random_tree(n, rng);
  std::vector<int32_t> toks(n), pos(n);
  for (int i = 0; i < n; ++i) {
    toks[i] = (int32_t)(rng() % r.V());
    pos[i] = (int32_t)prefix.size() + (parents[i] < 0 ? 0 : pos[parents[i]] - (int32_t)prefix.size() + 1);
  }
  KvCache kv = r.tf->make_cache((int)prefix.size() + n);
  std::vector<float> lg(r.V());
  ChainBatch pre(prefix, 0);
  r.tf->forward(pre.view(), kv, lg, LogitsRows::kLast);
  kv.commit_prefix((int)prefix.size());
  std::vector<float> tree(n * r.V());
  r.tf->forward(Batch{toks, pos, parents}, kv, tree, LogitsRows::kAll);
  double worst = 0;
  for (int c = 0; c < checks; ++c) {
    const int i = c == 0 ? n - 1 : (int)(rng() % n);
    std::vector<int32_t> path;
    for (int j = i; j >= 0; j = parents[j]) path.insert(path.begin(), toks[j]);
    auto ref = r.chain_last(prefix, path);
    worst = std::max(worst, rel_err(tree.data() + (size_t)i * r.V(), ref.data(), r.V()));
  }
  EXPECT_LT(worst, tol) << "tree of " << n;
  ::testing::Test::RecordProperty("worst_rel_err_" + std::to_string(n), std::to_string(worst));
}

// A path kept out of a tree after a prefix of seq (20 tokens; commit_path
// moves the kept rows, of the cache's KV type), then one token decoded: its
// logits equal a fresh chain's over the same tokens within tol.
void check_path_then_decode(Runner& r, const std::vector<int32_t>& seq, double tol, const std::string& what) {
  KvCache kv = r.tf->make_cache(64);
  std::vector<float> lt(r.V());
  prefill(*r.tf, kv, seq, 6, lt);
  const std::vector<int32_t> parents = {-1, 0, -1, 1, 2, 3, 0}, toks = {11, 12, 13, 14, 15, 16, 17};
  std::vector<int32_t> pos;
  for (int i = 0; i < 7; ++i) pos.push_back(20 + (parents[i] < 0 ? 0 : pos[parents[i]] - 20 + 1));
  std::vector<float> tree(7 * r.V());
  r.tf->forward(Batch{toks, pos, parents}, kv, tree, LogitsRows::kAll);
  const std::vector<int32_t> keep = {0, 1, 3, 5};
  kv.commit_path(keep);
  const int32_t next = 42, npos = 24, par = -1;
  r.tf->forward(Batch{{&next, 1}, {&npos, 1}, {&par, 1}}, kv, lt, LogitsRows::kLast);
  std::vector<int32_t> full = seq;
  for (int i : keep) full.push_back(toks[i]);
  full.push_back(next);
  const auto fresh = r.chain_last({}, full);
  EXPECT_LT(rel_err(lt.data(), fresh.data(), r.V()), tol) << what;
}

}  // namespace

class TinyModel : public ::testing::TestWithParam<DType> {
 protected:
  std::string path;
  void SetUp() override {
    path = ::testing::TempDir() + "tiny_" + std::string(dtype_name(GetParam())) + ".gguf";
    testutil::TinyShape s;
    s.type = GetParam();
    s.tied = GetParam() == DType::Q4_1;
    testutil::write_tiny_llama(path, s);
  }
};

TEST_P(TinyModel, TreeRowsEqualPathRuns) {
  Runner r(path);
  for (int n : {1, 7, 40, 256}) check_tree_rows(r, n, 100 + n, 2e-5, 12);
}

TEST_P(TinyModel, ChunkedPrefillAndKvCompaction) {
  Runner r(path);
  std::mt19937 rng(3);
  std::vector<int32_t> seq(30);
  for (auto& t : seq) t = (int32_t)(rng() % r.V());
  // one-shot vs chunks of 7 (uneven) and 10
  auto ref = r.chain_last({}, seq);
  std::vector<float> lg(r.V());
  {
    KvCache kv7 = r.tf->make_cache(64);
    prefill(*r.tf, kv7, seq, 7, lg);
    ASSERT_EQ(kv7.committed(), 30);
    EXPECT_LT(rel_err(lg.data(), ref.data(), r.V()), 2e-5);
  }
  KvCache kv = r.tf->make_cache(64);
  prefill(*r.tf, kv, seq, 10, lg);
  EXPECT_LT(rel_err(lg.data(), ref.data(), r.V()), 2e-5);
  // tree after the prefix, then keep the path to node 5 and decode one token
  std::vector<int32_t> parents = {-1, 0, -1, 1, 2, 3, 0};
  std::vector<int32_t> toks = {11, 12, 13, 14, 15, 16, 17}, pos;
  for (int i = 0; i < 7; ++i) pos.push_back(30 + (parents[i] < 0 ? 0 : pos[parents[i]] - 30 + 1));
  std::vector<float> tree(7 * r.V());
  r.tf->forward(Batch{toks, pos, parents}, kv, tree, LogitsRows::kAll);
  const std::vector<int32_t> keep = {0, 1, 3, 5};
  kv.commit_path(keep);
  ASSERT_EQ(kv.committed(), 34);
  const int32_t next = 42, npos = 34, par = -1;
  r.tf->forward(Batch{{&next, 1}, {&npos, 1}, {&par, 1}}, kv, lg, LogitsRows::kLast);
  std::vector<int32_t> full = seq;
  for (int i : keep) full.push_back(toks[i]);
  full.push_back(next);
  auto fresh = r.chain_last({}, full);
  EXPECT_LT(rel_err(lg.data(), fresh.data(), r.V()), 2e-5);
}

TEST_P(TinyModel, TreeGrownLevelByLevelEqualsOnePass) {
  Runner r(path);
  std::mt19937 rng(11);
  std::vector<int32_t> prefix = {5, 9, 13};
  // A tree in BFS order with levels of 1, 3, 5 nodes.
  std::vector<int32_t> parents = {-1, 0, 0, 0, 1, 1, 2, 3, 3}, toks(9), pos(9);
  const int L = (int)prefix.size();
  for (int i = 0; i < 9; ++i) {
    toks[i] = (int32_t)(rng() % r.V());
    pos[i] = parents[i] < 0 ? L : pos[parents[i]] + 1;
  }
  auto prefill = [&](KvCache& kv) {
    std::vector<float> lg(r.V());
    ChainBatch pre(prefix, 0);
    r.tf->forward(pre.view(), kv, lg, LogitsRows::kLast);
    kv.commit_prefix(L);
  };
  KvCache one = r.tf->make_cache(32);
  prefill(one);
  std::vector<float> all(9 * r.V());
  r.tf->forward(Batch{toks, pos, parents}, one, all, LogitsRows::kAll);
  KvCache lv = r.tf->make_cache(32);
  prefill(lv);
  const int levels[4] = {0, 1, 4, 9};
  for (int l = 0; l < 3; ++l) {
    const int a = levels[l], b = levels[l + 1];
    std::vector<int32_t> t(toks.begin() + a, toks.begin() + b), p(pos.begin() + a, pos.begin() + b),
        par(parents.begin() + a, parents.begin() + b);  // block-relative parents
    std::vector<float> lg((b - a) * r.V());
    r.tf->forward(Batch{t, p, par}, lv, lg, LogitsRows::kAll);
    ASSERT_EQ(lv.pending(), b);
    for (int i = a; i < b; ++i)
      EXPECT_LT(rel_err(lg.data() + (size_t)(i - a) * r.V(), all.data() + (size_t)i * r.V(), r.V()), 2e-5)
          << "node " << i;
  }
  lv.commit_path(std::vector<int32_t>{0, 2, 6});
  EXPECT_EQ(lv.committed(), L + 3);
  EXPECT_EQ(lv.pending(), 0);
}

// KV caches of F16 and BF16: tree rows still equal path runs and compaction
// still equals a fresh run. The tolerance is looser than F32's: a tree pass's
// K/V differ from a chain's in the last float bits (matmul summation order),
// and rounding to 11 (8) significant bits turns a rare such difference into
// one half (bfloat) ulp. The logits differ from F32's by about the rounding.
TEST_P(TinyModel, KvTypesKeepTreeAndChainEqual) {
  Runner r(path);
  std::mt19937 rng(5);
  std::vector<int32_t> seq(20);
  for (auto& t : seq) t = (int32_t)(rng() % r.V());
  const auto f32 = r.chain_last({}, seq);
  for (DType t : {DType::F16, DType::BF16}) {
    r.tf->set_kv_type(t);
    EXPECT_EQ(r.tf->make_cache(8).type(), t);
    EXPECT_EQ(r.tf->make_cache(8).bytes() * 2, Runner(path).tf->make_cache(8).bytes());
    const double tol = t == DType::F16 ? 3e-4 : 2e-3;
    for (int n : {7, 40}) check_tree_rows(r, n, 200 + n, tol, 6);
    const auto lg = r.chain_last({}, seq);
    const double e = rel_err(lg.data(), f32.data(), r.V());
    EXPECT_GT(e, 0.0) << dtype_name(t) << ": the KV type had no effect";
    EXPECT_LT(e, t == DType::F16 ? 5e-3 : 3e-2) << dtype_name(t);
    check_path_then_decode(r, seq, tol, std::string(dtype_name(t)));
  }
  EXPECT_THROW(r.tf->set_kv_type(DType::Q4_0), Error);
}

// The KV type names: each parses to its type, and the one-line error for any
// other name lists them all (built from kKvTypeNames, not written out).
TEST(KvTypeNames, ParseAndTheErrorListsEveryName) {
  EXPECT_EQ(kv_type_from_name("f32"), DType::F32);
  EXPECT_EQ(kv_type_from_name("f16"), DType::F16);
  EXPECT_EQ(kv_type_from_name("bf16"), DType::BF16);
  EXPECT_EQ(kv_type_from_name("q8_0"), DType::Q8_0);
  for (const char* bad : {"q4_0", "Q8_0", "F16", "", "f16 "}) {
    try {
      kv_type_from_name(bad);
      ADD_FAILURE() << "'" << bad << "' parsed";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.find("--kv-type: expected "), 0u) << msg;
      for (const char* n : kKvTypeNames) EXPECT_NE(msg.find(n), std::string::npos) << msg;
      EXPECT_NE(msg.find("got '" + std::string(bad) + "'"), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos);
    }
  }
  EXPECT_EQ(kv_type_list(" | "), "f32 | f16 | bf16 | q8_0");
  EXPECT_EQ(kv_type_name(DType::Q8_0), "q8_0");
}

namespace {
// A backend that takes no Q8_0 KV rows: only its answer
// to supports_kv_type is asked.
struct NoQ8Backend final : Backend {
  const char* name() const override { return "test"; }
  bool host_memory() const override { return true; }
  void* alloc(size_t) override { return nullptr; }
  void release(void*) override {}
  void upload(void*, const void*, size_t) override {}
  void download(void*, const void*, size_t) override {}
  void copy(void*, const void*, size_t) override {}
  void matmul(const WeightView&, const float*, int, float*) override {}
  void embed(const WeightView&, const int32_t*, int, float*) override {}
  void rmsnorm(const float*, const float*, int, int, float, float*) override {}
  void add_rmsnorm(float*, const float*, const float*, int, int, float, float*) override {}
  void rope(float*, int, int, int, const int32_t*, const double*, RopeMode) override {}
  void attention(const AttentionArgs&) override {}
  void write_rows(void*, DType, const int32_t*, const float*, int, int) override {}
  void write_rows_at(void*, DType, const int32_t*, const float*, int, int) override {}
  void swiglu(float*, const float*, size_t) override {}
  void add(float*, const float*, size_t) override {}
  void add_bias(float*, const float*, int, int) override {}
};
}  // namespace

// --kv-type q8_0 (issue 44): the cache and the pool count 34 bytes per 32
// elements (kv_row_bytes); a model whose head_dim is not a multiple of 32, or
// a backend without Q8_0 rows, is refused in one line naming it before any
// cache exists; a cache of Q8_0 rows keeps tree rows equal to path runs, and
// a path kept out of a tree (commit_path moves 34-byte blocks) then decoded
// equals a fresh run; the logits stay near F32's.
TEST(KvQ8, RowBytesChecksAndTreeRows) {
  EXPECT_EQ(kv_row_bytes(DType::F32, 192), 768u);
  EXPECT_EQ(kv_row_bytes(DType::F16, 192), 384u);
  EXPECT_EQ(kv_row_bytes(DType::BF16, 192), 384u);
  EXPECT_EQ(kv_row_bytes(DType::Q8_0, 192), 6u * 34);
  EXPECT_THROW(kv_row_bytes(DType::Q4_0, 192), Error);
  EXPECT_THROW(kv_row_bytes(DType::Q8_0, 0), Error);
  auto cpu = make_cpu_backend();
  try {
    KvCache bad(*cpu, 2, 48, 8, DType::Q8_0);
    ADD_FAILURE() << "a Q8_0 cache of 48-element rows was made";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of 32, got 48"), std::string::npos) << e.what();
  }
  EXPECT_EQ(KvPool::bytes_for(2, 64, 3, 16, DType::Q8_0), 2ull * 2 * 3 * 16 * 2 * 34);
  EXPECT_EQ(KvPool(*cpu, 2, 64, 3, 16, 48, DType::Q8_0).bytes(), 2ull * 2 * 3 * 16 * 2 * 34);

  const std::string dir = ::testing::TempDir();
  testutil::TinyShape s16;  // head_dim 64 / 4 = 16
  s16.type = DType::F32;
  testutil::write_tiny_llama(dir + "kvq8_hd16.gguf", s16);
  Runner r16(dir + "kvq8_hd16.gguf");
  try {
    r16.tf->set_kv_type(DType::Q8_0);
    ADD_FAILURE() << "head_dim 16 took q8_0";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("--kv-type q8_0 needs a head_dim that is a multiple of 32; the model has head_dim 16"),
              std::string::npos)
        << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos);
  }
  EXPECT_EQ(r16.tf->kv_type(), DType::F32);

  testutil::TinyShape s32 = s16;  // head_dim 64 / 2 = 32, two query heads per KV head
  s32.heads = 2, s32.kv_heads = 1;
  testutil::write_tiny_llama(dir + "kvq8_hd32.gguf", s32);
  Runner r(dir + "kvq8_hd32.gguf");
  ASSERT_EQ(r.desc.hp.head_dim, 32);
  NoQ8Backend no_q8;
  try {
    check_kv_support(DType::Q8_0, r.desc.hp, no_q8, "m.gguf");
    ADD_FAILURE() << "a backend without Q8_0 rows took q8_0";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--kv-type q8_0 is not supported on the test backend"), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(check_kv_support(DType::F16, r.desc.hp, no_q8, "m.gguf"));
  std::mt19937 rng(8);
  std::vector<int32_t> seq(20);
  for (auto& t : seq) t = (int32_t)(rng() % r.V());
  const auto f32 = r.chain_last({}, seq);
  r.tf->set_kv_type(DType::Q8_0);
  EXPECT_EQ(r.tf->make_cache(8).type(), DType::Q8_0);
  EXPECT_EQ(r.tf->make_cache(8).bytes(), 2ull * r.desc.hp.n_layers * 8 * 34);
  const double tol = 5e-3;  // measured 0: a last-bit difference could move one quant a step
  for (int n : {7, 40}) check_tree_rows(r, n, 300 + n, tol, 6);
  const auto lg = r.chain_last({}, seq);
  const double e = rel_err(lg.data(), f32.data(), r.V());
  EXPECT_GT(e, 0.0) << "the KV type had no effect";
  EXPECT_LT(e, 2e-2);  // measured 4.9e-3
  ::testing::Test::RecordProperty("q8_0_vs_f32_rel_err", std::to_string(e));
  check_path_then_decode(r, seq, tol, "q8_0");
}

TEST_P(TinyModel, BadBatchesAreErrors) {
  Runner r(path);
  KvCache kv = r.tf->make_cache(4);
  std::vector<float> lg(8 * r.V());
  std::vector<int32_t> t = {1, 2}, p = {0, 1};
  std::vector<int32_t> bad_par = {-1, 1};
  EXPECT_THROW(r.tf->forward(Batch{t, p, bad_par}, kv, lg), Error);
  std::vector<int32_t> bad_tok = {1, 1 << 30}, par = {-1, 0};
  EXPECT_THROW(r.tf->forward(Batch{bad_tok, p, par}, kv, lg), Error);
  std::vector<int32_t> five(5, 1), fp = {0, 1, 2, 3, 4}, fpar = {-1, 0, 1, 2, 3};
  EXPECT_THROW(r.tf->forward(Batch{five, fp, fpar}, kv, lg), Error);  // over capacity
}

// DeviceWeights (every tensor uploaded into backend memory, one at a time) on
// the CPU backend: the same logits as ResidentWeights, bit for bit.
TEST_P(TinyModel, DeviceWeightsEqualResidentWeights) {
  const ModelDesc d = load_model_desc(path);
  auto be = make_cpu_backend();
  ResidentWeights host(d);
  DeviceWeights dev(d, *be);
  Transformer a(d, host, *be), b(d, dev, *be);
  const std::vector<int32_t> t = {1, 5, 9, 30}, p = {0, 1, 2, 2}, par = {-1, 0, 1, 1};
  std::vector<float> la(4 * d.hp.vocab), lb(4 * d.hp.vocab);
  KvCache ka = a.make_cache(8), kb = b.make_cache(8);
  a.forward(Batch{t, p, par}, ka, la);
  b.forward(Batch{t, p, par}, kb, lb);
  EXPECT_EQ(la, lb);
}

INSTANTIATE_TEST_SUITE_P(Types, TinyModel,
                         ::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1),
                         [](const auto& p) { return std::string(dtype_name(p.param)); });

// Scaled RoPE (GGUF rope.scaling.type "linear", Llama 3's rope_freqs.weight):
// dividing every frequency by f is running the unscaled model at positions
// multiplied by f, bit for bit (the angles are the same doubles when f is a
// power of two). Scaling read from either source, or both (factors multiply).
TEST(RopeScaling, ScaledFrequenciesAreStretchedPositions) {
  const std::string dir = ::testing::TempDir();
  testutil::TinyShape s;
  s.type = DType::F32;
  const int half = s.dim / s.heads / 2;
  testutil::write_tiny_llama(dir + "rope_plain.gguf", s);
  s.rope_linear = 2;
  testutil::write_tiny_llama(dir + "rope_linear2.gguf", s);
  s.rope_scaling = "";  // llama.cpp's default type is linear
  testutil::write_tiny_llama(dir + "rope_untyped2.gguf", s);
  s.rope_scaling = "none";  // the factor switched off
  testutil::write_tiny_llama(dir + "rope_none.gguf", s);
  s.rope_scaling = "linear";
  s.rope_linear = 0;  // 0 means unscaled
  testutil::write_tiny_llama(dir + "rope_zero.gguf", s);
  s.rope_linear = -1;
  s.rope_freqs.assign(half, 2.0f);
  testutil::write_tiny_llama(dir + "rope_freqs2.gguf", s);
  s.rope_linear = 2;
  testutil::write_tiny_llama(dir + "rope_both4.gguf", s);

  auto run = [](const std::string& path, int stride) {
    Runner r(path);
    const std::vector<int32_t> toks = {3, 41, 7, 200, 9, 77};
    std::vector<int32_t> pos, par;
    for (int i = 0; i < 6; ++i) pos.push_back(stride * i), par.push_back(i - 1);
    KvCache kv = r.tf->make_cache(8);
    std::vector<float> lg(6 * r.V());
    r.tf->forward(Batch{toks, pos, par}, kv, lg, LogitsRows::kAll);
    return lg;
  };
  const auto plain = run(dir + "rope_plain.gguf", 1);
  EXPECT_EQ(run(dir + "rope_linear2.gguf", 2), plain);
  EXPECT_EQ(run(dir + "rope_untyped2.gguf", 2), plain);
  EXPECT_EQ(run(dir + "rope_none.gguf", 1), plain);
  EXPECT_EQ(run(dir + "rope_zero.gguf", 1), plain);
  EXPECT_EQ(run(dir + "rope_freqs2.gguf", 2), plain);
  EXPECT_EQ(run(dir + "rope_both4.gguf", 4), plain);
  const auto unstretched = run(dir + "rope_linear2.gguf", 1);
  EXPECT_GT(rel_err(unstretched.data(), plain.data(), plain.size()), 1e-3);  // the scaling is not a no-op

  EXPECT_TRUE(load_model_desc(dir + "rope_plain.gguf").hp.rope_freq_factors.empty());
  EXPECT_EQ(load_model_desc(dir + "rope_both4.gguf").hp.rope_freq_factors, std::vector<float>(half, 4.0f));
  s.rope_linear = -1;
  s.rope_freqs = {1.0f, 1.0f, 1.0f, 1.5f, 3.0f, 8.0f, 8.0f, 8.0f};
  ASSERT_EQ(static_cast<int>(s.rope_freqs.size()), half);
  testutil::write_tiny_llama(dir + "rope_llama3.gguf", s);
  EXPECT_EQ(load_model_desc(dir + "rope_llama3.gguf").hp.rope_freq_factors, s.rope_freqs);
  s.rope_freqs = {1.0f, 1.5f, 8.0f};  // wrong count
  testutil::write_tiny_llama(dir + "rope_bad.gguf", s);
  try {
    load_model_desc(dir + "rope_bad.gguf");
    ADD_FAILURE() << "a rope_freqs tensor of the wrong size loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rope_freqs.weight"), std::string::npos) << e.what();
  }
}

// The real model: random trees up to 256 nodes.
TEST(SmolLM2, TreeRowsEqualPathRuns) {
  if (!have_file(REDWOOD_TEST_MODEL)) GTEST_SKIP() << "model missing: run tools/fetch-models.sh";
  Runner r(REDWOOD_TEST_MODEL);
  for (int n : {3, 33, 256}) check_tree_rows(r, n, 900 + n, 1e-4, 8);
}
