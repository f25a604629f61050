// Test helper: three forward passes (a prompt chain, a tree over it, a second
// tree after committing a path) whose logits the streaming and packed-model
// tests compare bit for bit across weight sources.
#pragma once
#include <cstring>
#include <vector>

#include "kernels/backend.h"
#include "src/engine/kv_cache.h"
#include "src/engine/transformer.h"
#include "src/engine/weights.h"
#include "src/model/model_desc.h"

namespace redwood::testutil {

// Three passes: a prompt chain, a tree over it, a second tree after committing.
// Returns all logits produced, concatenated.
inline std::vector<float> run_passes(const ModelDesc& d, WeightSource& w) {
  auto be = make_cpu_backend();
  Transformer tf(d, w, *be);
  KvCache kv = tf.make_cache(64);
  const int V = d.hp.vocab;
  std::vector<float> all, logits;
  ChainBatch prompt(std::vector<int32_t>{1, 40, 41, 42, 43, 44, 45}, 0);
  logits.resize(prompt.tokens.size() * V);
  tf.forward(prompt.view(), kv, logits, LogitsRows::kAll);
  all.insert(all.end(), logits.begin(), logits.end());
  kv.commit_prefix(static_cast<int>(prompt.tokens.size()));
  const std::vector<int32_t> tokens = {50, 51, 52, 53, 54, 55}, parents = {-1, 0, 0, 1, 2, 4};
  std::vector<int32_t> positions;
  for (int32_t p : parents) positions.push_back(p < 0 ? 7 : positions[p] + 1);
  logits.resize(tokens.size() * V);
  for (int rep = 0; rep < 2; ++rep) {
    tf.forward(Batch{tokens, positions, parents}, kv, logits, LogitsRows::kAll);
    all.insert(all.end(), logits.begin(), logits.end());
    const std::vector<int32_t> path = {0, 1, 3};
    kv.commit_path(path);
    for (auto& p : positions) p += 3;
  }
  return all;
}

inline bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace redwood::testutil
