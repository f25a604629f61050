#include <gtest/gtest.h>
#include <unistd.h>

#include "src/model/gguf.h"
#include "src/model/model_desc.h"
#include "src/util/error.h"
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
