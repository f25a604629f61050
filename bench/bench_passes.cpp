// Large passes, kernel by kernel (docs/perf-log/2026-11-25.md, "the batched
// pass's dequantization"): the batched matmul (n > 8) on the 1.88B model's shapes and
// tree attention after a prefix, median milliseconds, and a hash of every
// output so that two builds can be checked for bit-identical results. Uses
// only cpu::matmul and cpu::attention, so the same file compiles against an
// older commit's kernel library for A/B runs:
//   bench_passes gemm [N ...]      F16 and Q4_0, default N = 64
//   bench_passes gemm-odd [N ...]  odd shapes (hashes for identity checks)
//   bench_passes gemm-smol [N ...] SmolLM2's (and the regime stand-in's) shapes, in cache:
//                                  small matrices, where a call's fixed costs show
//   bench_passes attention         tree passes of 64-768 tokens after a prefix
//   bench_passes gemv-stack TYPE [DIM FFN KV_DIM LAYERS [N]]
//                                  GEMVs of N tokens (default 1; N > 8: the
//                                  batched pass) over a layer stack's seven
//                                  matrices, streamed from DRAM as in decoding
//                                  (default: the 1.88B model's shapes, 26
//                                  layers; F16 widths in multiples of 64, e.g.
//                                  the regime stand-in's 576 1536 192)
// REPS=k fixes the repetitions (REPS=1 for a quick identity check).

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/math.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"

using namespace redwood;

namespace {

template <typename F>
double median_ms(int reps, F&& f) {
  std::vector<double> ts;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    ts.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

uint64_t hash(const std::vector<float>& v) {  // FNV-1a over the bit patterns
  uint64_t h = 1469598103934665603ull;
  for (float f : v) {
    uint32_t u;
    memcpy(&u, &f, 4);
    h = (h ^ u) * 1099511628211ull;
  }
  return h;
}

int reps_or(int fallback) {
  const char* r = getenv("REPS");
  return r ? std::max(1, atoi(r)) : fallback;
}

void gemm(const std::string& set, const std::vector<int>& ns) {
  struct Shape {
    int64_t rows, cols;
  };
  const std::vector<Shape> shapes =
      set == "odd"     ? std::vector<Shape>{{1000, 576}, {130, 1536}, {61, 320}, {7, 96}}
      : set == "smol" ? std::vector<Shape>{{576, 576}, {192, 576}, {1536, 576}, {576, 1536}}
                      : std::vector<Shape>{{2048, 2048}, {8192, 2048}, {2048, 8192}, {32000, 2048}};
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0, 0.02f);
  for (DType t : {DType::F16, DType::Q4_0}) {
    for (const Shape s : shapes) {
      const size_t bytes = t == DType::F16 ? s.rows * s.cols * 2 : s.rows * s.cols / 32 * 18;
      std::vector<uint8_t> buf(bytes);
      if (t == DType::F16) {
        for (size_t i = 0; i < bytes / 2; ++i) {
          const uint16_t h = math::f32_to_f16(nd(rng));
          memcpy(&buf[2 * i], &h, 2);
        }
      } else {
        for (size_t b = 0; b < bytes / 18; ++b) {
          const uint16_t d = math::f32_to_f16(0.01f);
          memcpy(&buf[b * 18], &d, 2);
          for (int j = 2; j < 18; ++j) buf[b * 18 + j] = static_cast<uint8_t>(rng());
        }
      }
      const WeightView w{t, s.rows, s.cols, buf.data()};
      for (int n : ns) {
        std::vector<float> x(n * s.cols), y(n * s.rows);
        for (auto& v : x) v = nd(rng) * 50;
        const double flop = 2.0 * n * s.rows * s.cols;
        const double ms = median_ms(reps_or(std::max(5, static_cast<int>(2e10 / flop))),
                                    [&] { cpu::matmul(w, x.data(), n, y.data()); });
        std::printf("%-4s %6lld x %-5lld n=%-4d %016llx %9.3f ms %7.1f GFLOP/s\n", t == DType::F16 ? "F16" : "Q4_0",
                    static_cast<long long>(s.rows), static_cast<long long>(s.cols), n,
                    static_cast<unsigned long long>(hash(y)), ms, flop / ms / 1e6);
      }
    }
  }
}

// Decoding's GEMVs: each layer's q, k, v, o, gate, up, down matrices in turn,
// every one read once per token from DRAM (the stack is larger than the
// caches), so that the prefetchers see what a model's decode shows them.
// Random quants with small positive scales; GB/s of weights per matrix shape.
int gemv_stack(const std::string& type, int64_t dim, int64_t ffn, int64_t kv, int layers, int n) {
  struct T {
    const char* name;
    DType t;
    int scale_at[2];  // fp16 scale fields in a block (-1: none); F16: every element
  };
  const T types[] = {
      {"F16", DType::F16, {-1, -1}},     {"Q8_0", DType::Q8_0, {0, -1}},   {"Q4_0", DType::Q4_0, {0, -1}},
      {"Q4_1", DType::Q4_1, {0, 2}},     {"Q4_K", DType::Q4_K, {0, 2}},    {"Q5_K", DType::Q5_K, {0, 2}},
      {"Q6_K", DType::Q6_K, {208, -1}},  {"Q3_K", DType::Q3_K, {108, -1}}, {"Q2_K", DType::Q2_K, {80, 82}},
      {"Q5_0", DType::Q5_0, {0, -1}},    {"Q5_1", DType::Q5_1, {0, 2}},    {"IQ4_NL", DType::IQ4_NL, {0, -1}},
      {"IQ4_XS", DType::IQ4_XS, {0, -1}}};
  const T* ty = nullptr;
  for (const T& c : types)
    if (type == c.name) ty = &c;
  if (!ty) {
    std::fprintf(stderr,
                 "gemv-stack: TYPE is one of F16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS\n");
    return 2;
  }
  const int64_t shape[7][2] = {{dim, dim}, {kv, dim}, {kv, dim}, {dim, dim}, {ffn, dim}, {ffn, dim}, {dim, ffn}};
  const DTypeInfo& info = dtype_info(ty->t);
  std::vector<size_t> bytes(7);
  size_t layer_bytes = 0;
  for (int m = 0; m < 7; ++m) layer_bytes += bytes[m] = *row_bytes(ty->t, shape[m][1]) * shape[m][0];
  std::vector<uint8_t> buf(layer_bytes * layers);
  std::mt19937 rng(1);
  const uint16_t small = math::f32_to_f16(0.01f);
  if (ty->t == DType::F16) {
    for (size_t i = 0; i + 2 <= buf.size(); i += 2) {
      const uint16_t h = math::f32_to_f16((static_cast<float>(rng() % 2001) - 1000) * 1e-5f);
      memcpy(&buf[i], &h, 2);
    }
  } else {
    for (auto& b : buf) b = static_cast<uint8_t>(rng());
    for (size_t b = 0; b + info.block_bytes <= buf.size(); b += info.block_bytes)
      for (int at : ty->scale_at)
        if (at >= 0) memcpy(&buf[b + at], &small, 2);
  }
  std::vector<float> x(static_cast<size_t>(n) * std::max(dim, ffn)), y(x.size());
  for (auto& v : x) v = static_cast<float>(rng() % 2001) / 1000.0f - 1.0f;
  // About 4 GB of weights read in all; past the GEMV's 8 tokens, a rep costs about n / 8 of that.
  const int reps =
      reps_or(std::max(3, static_cast<int>(4e9 / static_cast<double>(buf.size()) / std::max(1.0, n / 8.0))));
  std::vector<double> secs(7, 0.0);
  for (int rep = 0; rep <= reps; ++rep) {  // the first pass is a warm-up
    size_t off = 0;
    for (int l = 0; l < layers; ++l)
      for (int m = 0; m < 7; ++m) {
        const WeightView w{ty->t, shape[m][0], shape[m][1], buf.data() + off};
        const auto t0 = std::chrono::steady_clock::now();
        cpu::matmul(w, x.data(), n, y.data());
        if (rep > 0) secs[m] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        off += bytes[m];
      }
  }
  double total = 0;
  std::printf("%s, n=%d, %d layers (%.2f GB), GB/s of weights:", ty->name, n, layers,
              static_cast<double>(buf.size()) / 1e9);
  for (int m = 0; m < 7; ++m) {
    total += secs[m];
    std::printf("  %lldx%lld %.1f", static_cast<long long>(shape[m][0]), static_cast<long long>(shape[m][1]),
                static_cast<double>(bytes[m]) * layers * reps / secs[m] / 1e9);
  }
  const double flops = 2.0 * static_cast<double>(buf.size()) / info.block_bytes * info.block_elems * n;
  std::printf("  | all %.1f GB/s, %.2f ms per pass, %.1f GFLOP/s\n", static_cast<double>(buf.size()) * reps / total / 1e9,
              total / reps * 1e3, flops * reps / total / 1e9);
  return 0;
}

// n new tokens in a random tree after n_past committed positions.
void attention_case(int n, int n_past, int heads, int kv_heads, int reps) {
  const int hd = 128;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  std::vector<int32_t> parents(n), off{0}, anc;
  for (int i = 0; i < n; ++i) parents[i] = i == 0 ? -1 : static_cast<int32_t>(rng() % i);
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> path;
    for (int j = i; j >= 0; j = parents[j]) path.push_back(j);
    anc.insert(anc.end(), path.rbegin(), path.rend());
    off.push_back(static_cast<int32_t>(anc.size()));
  }
  std::vector<float> q(static_cast<size_t>(n) * heads * hd), k(static_cast<size_t>(n_past + n) * kv_heads * hd),
      v(k.size()), out(q.size());
  for (auto* vec : {&q, &k, &v})
    for (auto& e : *vec) e = nd(rng);
  AttentionArgs a;
  a.q = q.data();
  a.k = k.data();
  a.v = v.data();
  a.out = out.data();
  a.n = n;
  a.n_past = n_past;
  a.n_heads = heads;
  a.n_kv_heads = kv_heads;
  a.head_dim = hd;
  a.parents = parents.data();
  a.anc_off = off.data();
  a.anc = anc.data();
  a.scale = 0.088f;
  const double ms = median_ms(reps_or(reps), [&] { cpu::attention(a); });
  std::printf("attention n=%-4d after %-5d heads %d/%d kv, hd 128: %016llx %9.3f ms\n", n, n_past, heads, kv_heads,
              static_cast<unsigned long long>(hash(out)), ms);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  std::vector<int> ns;
  for (int i = 2; i < argc; ++i) ns.push_back(std::max(1, atoi(argv[i])));
  if (ns.empty()) ns = {64};
  if (mode == "gemm" || mode == "gemm-odd" || mode == "gemm-smol") {
    gemm(mode == "gemm" ? "" : mode.substr(5), ns);
  } else if (mode == "attention") {
    attention_case(256, 512, 16, 16, 20);  // the 1.88B model's heads
    attention_case(256, 2048, 16, 16, 10);
    attention_case(768, 512, 64, 8, 5);  // Llama2-70B's heads (GQA)
    attention_case(64, 1000, 9, 3, 50);  // SmolLM2's head grouping (hd 128 here)
  } else if (mode == "gemv-stack" && argc >= 3) {
    // Widths are multiples of 256 (every type's block; F16: of 64, e.g. SmolLM2's 576), at least one layer.
    const int64_t wu = std::string(argv[2]) == "F16" ? 64 : 256;
    const auto arg = [&](int i, int64_t fallback, int64_t unit) {
      return argc > i ? std::max<int64_t>(unit, atoll(argv[i]) / unit * unit) : fallback;
    };
    return gemv_stack(argv[2], arg(3, 2048, wu), arg(4, 8192, wu), arg(5, 2048, wu), static_cast<int>(arg(6, 26, 1)),
                      static_cast<int>(std::min<int64_t>(4096, arg(7, 1, 1))));
  } else {
    std::fprintf(stderr,
                 "usage: bench_passes gemm|gemm-odd|gemm-smol [N ...] | attention | gemv-stack TYPE [DIM FFN KV_DIM LAYERS [N]]"
                 "   (REPS=k)\n");
    return 2;
  }
  return 0;
}
