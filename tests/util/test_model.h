// Test helper: a model loaded resident on the CPU backend.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "src/engine/kv_cache.h"
#include "src/engine/sampler.h"
#include "src/engine/transformer.h"
#include "src/engine/weights.h"
#include "src/model/model_desc.h"

namespace redwood::testutil {

struct TestModel {
  ModelDesc desc;
  std::unique_ptr<ResidentWeights> w;
  std::unique_ptr<Backend> be = make_cpu_backend();
  std::unique_ptr<Transformer> tf;
  explicit TestModel(const std::string& path) : desc(load_model_desc(path)) {
    w = std::make_unique<ResidentWeights>(desc);
    tf = std::make_unique<Transformer>(desc, *w, *be);
  }
  int V() const { return desc.hp.vocab; }
};

// The reference for greedy identity: n tokens of plain greedy decoding after
// `prompt`, one forward pass per token over a fresh KvCache.
inline std::vector<int32_t> greedy_alone(Transformer& tf, const std::vector<int32_t>& prompt, int n) {
  KvCache kv = tf.make_cache(static_cast<int>(prompt.size()) + n + 1);
  std::vector<float> lg(static_cast<size_t>(tf.hparams().vocab));
  tf.forward(ChainBatch(prompt, 0).view(), kv, lg, LogitsRows::kLast);
  kv.commit_prefix(static_cast<int>(prompt.size()));
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const int32_t t = argmax(lg), pos = kv.committed(), par = -1;
    out.push_back(t);
    tf.forward(Batch{{&t, 1}, {&pos, 1}, {&par, 1}}, kv, lg, LogitsRows::kLast);
    kv.commit_prefix(1);
  }
  return out;
}

}  // namespace redwood::testutil
