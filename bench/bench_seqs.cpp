// Many sequences in one pass (issue 44): the wall time of a decode pass over B
// sequences x 1 token (a KvPool, Transformer::forward(SeqBatch)) against one
// sequence's pass (the pool at B = 1, and a KvCache), weights resident in RAM
// or streamed from storage every pass (every layer: StreamedWeights, two ring
// slots), CPU backend. Each sequence first holds PREFIX positions (one shared
// prefill); then REPS decode passes, median milliseconds, tokens per second.
//   bench_seqs MODEL.gguf resident|streamed [B ...]   (default B = 1 4 16 32 64)
// PREFIX=n (default 64), REPS=k (default 5), BATCH_INVARIANT=1 routes every
// pass through the batched GEMM (set_cpu_batch_invariant).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "offload/placement.h"
#include "offload/streamer.h"
#include "src/engine/kv_cache.h"
#include "src/engine/kv_pool.h"
#include "src/engine/transformer.h"
#include "src/engine/weights.h"
#include "src/model/model_desc.h"
#include "src/util/error.h"

using namespace redwood;

namespace {

int env_or(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::max(1, std::atoi(v)) : fallback;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Median seconds of a decode pass over b sequences of a pool (b = 0: one KvCache).
double decode_pass(Transformer& tf, Backend& be, const ModelDesc& d, int b, int prefix, int reps) {
  const int vocab = d.hp.vocab, kv_dim = d.hp.n_kv_heads * d.hp.head_dim;
  const int seqs = std::max(1, b), rows = prefix + reps + 1;
  std::vector<double> t;
  std::vector<float> logits(static_cast<size_t>(seqs) * vocab);
  auto token = [&](int s, int i) { return static_cast<int32_t>((17 * s + 31 * i + 5) % vocab); };
  if (b == 0) {
    KvCache kv = tf.make_cache(rows);
    std::vector<int32_t> p(prefix);
    for (int i = 0; i < prefix; ++i) p[i] = token(0, i);
    prefill(tf, kv, p, 256, logits);
    for (int r = 0; r < reps; ++r) {
      const int32_t tok = token(0, prefix + r), pos = kv.committed(), par = -1;
      const auto t0 = std::chrono::steady_clock::now();
      tf.forward(Batch{{&tok, 1}, {&pos, 1}, {&par, 1}}, kv, logits, LogitsRows::kLast);
      t.push_back(seconds_since(t0));
      kv.commit_prefix(1);
    }
    return median(t);
  }
  const int block = 16;
  KvPool pool(be, d.hp.n_layers, kv_dim, seqs * ((rows + block - 1) / block), block, rows, tf.kv_type());
  for (int s = 0; s < seqs; ++s) pool.add_sequence();
  // Shared prefill in passes of at most 512 tokens, no logits.
  std::vector<int32_t> ss, tk, ps, pr;
  auto flush = [&] {
    if (ss.empty()) return;
    tf.forward(SeqBatch{ss, tk, ps, pr}, pool, logits, {});
    for (int s = 0; s < seqs; ++s) pool.commit_prefix(s, pool.pending(s));
    ss.clear(), tk.clear(), ps.clear(), pr.clear();
  };
  for (int s = 0; s < seqs; ++s)
    for (int i = 0; i < prefix; ++i) {
      if (ss.size() == 512 || (i == 0 && !ss.empty())) flush();
      ss.push_back(s), tk.push_back(token(s, i)), ps.push_back(i);
      pr.push_back(i == 0 || ss.size() == 1 ? -1 : pr.back() + 1);
    }
  flush();
  std::vector<int32_t> all(seqs);
  for (int s = 0; s < seqs; ++s) all[s] = s;
  for (int r = 0; r < reps; ++r) {
    std::vector<int32_t> toks(seqs), pos(seqs), par(seqs, -1);
    for (int s = 0; s < seqs; ++s) toks[s] = token(s, prefix + r), pos[s] = pool.committed(s);
    const auto t0 = std::chrono::steady_clock::now();
    tf.forward(SeqBatch{all, toks, pos, par}, pool, logits, all);
    t.push_back(seconds_since(t0));
    for (int s = 0; s < seqs; ++s) pool.commit_prefix(s, 1);
  }
  return median(t);
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc < 3 || (std::string(argv[2]) != "resident" && std::string(argv[2]) != "streamed")) {
    std::fprintf(stderr,
                 "usage: bench_seqs MODEL.gguf resident|streamed [B ...]   (PREFIX=n REPS=k BATCH_INVARIANT=1)\n");
    return 2;
  }
  const bool streamed = std::string(argv[2]) == "streamed";
  std::vector<int> bs;
  for (int i = 3; i < argc; ++i) bs.push_back(std::max(1, std::atoi(argv[i])));
  if (bs.empty()) bs = {1, 4, 16, 32, 64};
  const int prefix = env_or("PREFIX", 64), reps = env_or("REPS", 5);
  set_cpu_batch_invariant(std::getenv("BATCH_INVARIANT") != nullptr);
  const ModelDesc d = load_model_desc(argv[1]);
  auto be = make_cpu_backend();
  std::unique_ptr<WeightSource> w;
  if (streamed) {
    offload::MemoryPlan plan;
    plan.layer_tier.assign(d.layers.size(), offload::Tier::kStorage);
    plan.ring_slots = 2;
    w = std::make_unique<offload::StreamedWeights>(d, plan);
  } else {
    w = std::make_unique<ResidentWeights>(d);
  }
  Transformer tf(d, *w, *be);
  std::printf("%s, %s, %d layers, prefix %d, %d reps%s\n", argv[1], streamed ? "streamed (every layer)" : "resident",
              d.hp.n_layers, prefix, reps, cpu_batch_invariant() ? ", batch-invariant matmuls" : "");
  const double one = decode_pass(tf, *be, d, 0, prefix, reps);
  std::printf("  KvCache   1 sequence : %8.2f ms per pass, %8.1f tokens/s\n", one * 1e3, 1 / one);
  for (int b : bs) {
    const double s = decode_pass(tf, *be, d, b, prefix, reps);
    std::printf("  KvPool %4d sequences: %8.2f ms per pass (%.2fx one KvCache pass), %8.1f tokens/s\n", b, s * 1e3,
                s / one, b / s);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_seqs: %s\n", e.what());
  return 1;
}
