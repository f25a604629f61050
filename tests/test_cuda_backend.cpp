// The CUDA backend against the CPU backend: every op on random inputs and
// several shapes (odd sizes, n = 1), outputs poisoned with NaN before each run
// so unwritten elements fail, NaN never within tolerance; then full forward
// passes (resident and streamed through VRAM slots), a speculative decode, and
// the device sampling kernels against the host laws. Every test is skipped
// when no CUDA device is present (they compile always with the CUDA backend).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/backend.h"
#include "kernels/common/math.h"
#include "kernels/cpu/attention.h"
#include "kernels/cuda/sampling.h"
#include "offload/streamer.h"
#include "src/engine/kv_pool.h"
#include "src/engine/kv_type.h"
#include "src/engine/sampler.h"
#include "src/engine/transformer.h"
#include "src/engine/weights.h"
#include "src/speculative/speculate.h"
#include "src/util/error.h"
#include "tests/util/tiny_gguf.h"

using namespace redwood;

namespace {

class Cuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
    gpu = make_cuda_backend();
    cpu = make_cpu_backend();
  }
  // A device copy of host data.
  template <class T>
  BackendBuffer up(const std::vector<T>& h) {
    BackendBuffer b(*gpu, h.size() * sizeof(T));
    gpu->upload(b.as(), h.data(), h.size() * sizeof(T));
    return b;
  }
  // A device buffer of count floats filled with NaN (poison).
  BackendBuffer poisoned(size_t count) {
    std::vector<float> nan(count, std::numeric_limits<float>::quiet_NaN());
    return up(nan);
  }
  template <class T>
  std::vector<T> down(const BackendBuffer& b, size_t count) {
    std::vector<T> h(count);
    gpu->download(h.data(), b.as(), count * sizeof(T));
    return h;
  }
  std::unique_ptr<Backend> gpu, cpu;
};

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// Relative L2 error; infinite when either side has a non-finite value.
double rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i]) || !std::isfinite(want[i])) return INFINITY;
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// Random weights of any type: quantized blocks with random scales and codes.
std::vector<uint8_t> random_weights(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  const uint64_t bytes = rows * *row_bytes(t, cols);
  std::vector<uint8_t> w(bytes);
  std::mt19937 g(seed);
  std::normal_distribution<float> nd(0.0f, 0.5f);
  auto put16 = [&](uint8_t* p, uint16_t v) { memcpy(p, &v, 2); };
  switch (t) {
    case DType::F32:
      for (uint64_t i = 0; i < bytes / 4; ++i) {
        const float f = nd(g);
        memcpy(w.data() + 4 * i, &f, 4);
      }
      break;
    case DType::F16:
      for (uint64_t i = 0; i < bytes / 2; ++i) put16(w.data() + 2 * i, math::f32_to_f16(nd(g)));
      break;
    case DType::BF16:
      for (uint64_t i = 0; i < bytes / 2; ++i) put16(w.data() + 2 * i, math::f32_to_bf16(nd(g)));
      break;
    default: {
      const auto& info = dtype_info(t);
      for (uint64_t b = 0; b < bytes / info.block_bytes; ++b) {
        uint8_t* p = w.data() + b * info.block_bytes;
        for (uint32_t i = 0; i < info.block_bytes; ++i) p[i] = static_cast<uint8_t>(g());
        put16(p, math::f32_to_f16(0.01f + 0.02f * (g() % 100) / 100.0f));
        if (t == DType::Q6_K) put16(p + 208, math::f32_to_f16(0.001f + 0.002f * (g() % 100) / 100.0f));
        if (t == DType::Q3_K) put16(p + 108, math::f32_to_f16(0.001f + 0.002f * (g() % 100) / 100.0f));
        if (t == DType::Q2_K) put16(p + 80, math::f32_to_f16(0.01f)), put16(p + 82, math::f32_to_f16(0.001f));
        if (t == DType::Q4_1 || t == DType::Q5_1 || t == DType::Q4_K || t == DType::Q5_K)
          put16(p + 2, math::f32_to_f16(t == DType::Q4_K || t == DType::Q5_K ? 0.001f : -0.1f));
      }
    }
  }
  return w;
}

constexpr DType kAllTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,   DType::Q4_0,
                               DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q2_K,   DType::Q3_K,
                               DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_NL, DType::IQ4_XS};

}  // namespace

TEST_F(Cuda, MatmulMatchesCpuForEveryTypeShapeAndN) {
  struct Shape {
    int64_t rows, cols;
  };
  for (DType t : kAllTypes) {
    const bool q = dtype_info(t).block_elems > 1;
    const std::vector<Shape> shapes = q ? std::vector<Shape>{{1, 32}, {7, 96}, {129, 256}, {64, 4096}}
                                        : std::vector<Shape>{{1, 1}, {5, 33}, {129, 257}, {64, 4096}};
    for (const Shape& s : shapes)
      for (int n : {1, 2, 3, 8, 9, 17, 64}) {
        if (s.cols % dtype_info(t).block_elems != 0) continue;  // K types: 256-element blocks
        const auto wbytes = random_weights(t, s.rows, s.cols, 7);
        const auto x = randn(static_cast<size_t>(n) * s.cols, 11);
        std::vector<float> want(static_cast<size_t>(n) * s.rows);
        cpu->matmul({t, s.rows, s.cols, wbytes.data()}, x.data(), n, want.data());
        auto dw = up(wbytes);
        auto dx = up(x);
        auto dy = poisoned(want.size());
        gpu->matmul({t, s.rows, s.cols, dw.as()}, dx.as<float>(), n, dy.as<float>());
        const auto got = down<float>(dy, want.size());
        // GEMV (n <= 8) accumulates in fp32 from the same dequantized values;
        // the cuBLAS path rounds activations (and F32/quantized weights) to 16 bits.
        const double tol = n <= 8 ? 1e-5 : (t == DType::BF16 ? 2e-2 : 5e-3);
        EXPECT_LT(rel_err(got, want), tol) << dtype_name(t) << " " << s.rows << "x" << s.cols << " n=" << n;
      }
  }
}

// REDWOOD_CUDA_GEMM=fp32: the n > 8 path in fp32 too, as close to the CPU as the GEMV.
TEST_F(Cuda, ExactGemmModeIsFp32) {
  setenv("REDWOOD_CUDA_GEMM", "fp32", 1);
  auto exact = make_cuda_backend();
  unsetenv("REDWOOD_CUDA_GEMM");
  for (DType t : kAllTypes) {
    const int64_t rows = 129, cols = 256;
    const int n = 17;
    const auto wbytes = random_weights(t, rows, cols, 5);
    const auto x = randn(static_cast<size_t>(n) * cols, 6);
    std::vector<float> want(static_cast<size_t>(n) * rows);
    cpu->matmul({t, rows, cols, wbytes.data()}, x.data(), n, want.data());
    BackendBuffer dw(*exact, wbytes.size()), dx(*exact, x.size() * 4), dy(*exact, want.size() * 4);
    exact->upload(dw.as(), wbytes.data(), wbytes.size());
    exact->upload(dx.as(), x.data(), x.size() * 4);
    exact->matmul({t, rows, cols, dw.as()}, dx.as<float>(), n, dy.as<float>());
    std::vector<float> got(want.size());
    exact->download(got.data(), dy.as(), got.size() * 4);
    EXPECT_LT(rel_err(got, want), 1e-5) << dtype_name(t);
  }
  setenv("REDWOOD_CUDA_GEMM", "int4", 1);
  EXPECT_THROW(make_cuda_backend(), Error);
  unsetenv("REDWOOD_CUDA_GEMM");
}

TEST_F(Cuda, EmbedMatchesCpu) {
  for (DType t : kAllTypes) {
    const int64_t rows = 50, cols = dtype_info(t).block_elems == 256 ? 512 : 96;
    const auto e = random_weights(t, rows, cols, 3);
    const std::vector<int32_t> ids = {0, 49, 7, 7, 13};
    std::vector<float> want(ids.size() * cols);
    cpu->embed({t, rows, cols, e.data()}, ids.data(), static_cast<int>(ids.size()), want.data());
    auto de = up(e);
    auto dids = up(ids);
    auto dout = poisoned(want.size());
    gpu->embed({t, rows, cols, de.as()}, dids.as<int32_t>(), static_cast<int>(ids.size()), dout.as<float>());
    EXPECT_EQ(down<float>(dout, want.size()), want) << dtype_name(t);
  }
}

TEST_F(Cuda, RowAndElementOpsMatchCpu) {
  for (int n : {1, 3, 17}) {
    for (int dim : {1, 63, 576, 4096}) {
      const auto x = randn(static_cast<size_t>(n) * dim, 1);
      const auto w = randn(dim, 2);
      std::vector<float> want(x.size());
      cpu->rmsnorm(x.data(), w.data(), n, dim, 1e-5f, want.data());
      auto dx = up(x), dw = up(w);
      auto dout = poisoned(x.size());
      gpu->rmsnorm(dx.as<float>(), dw.as<float>(), n, dim, 1e-5f, dout.as<float>());
      EXPECT_LT(rel_err(down<float>(dout, x.size()), want), 1e-6) << "rmsnorm n=" << n << " dim=" << dim;
      // fused residual add + norm, output over the residual's input (as the pass uses it)
      const auto r = randn(x.size(), 3);
      std::vector<float> xc = x, rc = r;
      cpu->add_rmsnorm(xc.data(), rc.data(), w.data(), n, dim, 1e-5f, rc.data());
      auto dr = up(r);
      gpu->add_rmsnorm(dx.as<float>(), dr.as<float>(), dw.as<float>(), n, dim, 1e-5f, dr.as<float>());
      EXPECT_LT(rel_err(down<float>(dx, x.size()), xc), 1e-7) << "add_rmsnorm x, dim=" << dim;
      EXPECT_LT(rel_err(down<float>(dr, x.size()), rc), 1e-6) << "add_rmsnorm out, dim=" << dim;
    }
    for (RopeMode mode : {RopeMode::kInterleaved, RopeMode::kHalf})
      for (int hd : {2, 64, 128}) {
        const int heads = 3;
        auto x = randn(static_cast<size_t>(n) * heads * hd, 5);
        std::vector<int32_t> pos(n);
        for (int i = 0; i < n; ++i) pos[i] = 1000 * i + 3;
        std::vector<double> inv(hd / 2);  // scaled like Llama 3: some pairs slowed by 8
        for (int i = 0; i < hd / 2; ++i) inv[i] = math::rope_inv_freq(i, hd, 500000.0, i > hd / 4 ? 8.0 : 1.0);
        auto dx = up(x);
        auto dpos = up(pos);
        auto dinv = up(inv);
        cpu->rope(x.data(), n, heads, hd, pos.data(), inv.data(), mode);
        gpu->rope(dx.as<float>(), n, heads, hd, dpos.as<int32_t>(), dinv.as<double>(), mode);
        EXPECT_LT(rel_err(down<float>(dx, x.size()), x), 1e-5) << "rope hd=" << hd;
      }
    const size_t count = static_cast<size_t>(n) * 1001;
    auto g = randn(count, 8), u = randn(count, 9);
    auto dg = up(g), du = up(u);
    cpu->swiglu(g.data(), u.data(), count);
    gpu->swiglu(dg.as<float>(), du.as<float>(), count);
    EXPECT_LT(rel_err(down<float>(dg, count), g), 1e-6);
    cpu->add(g.data(), u.data(), count);
    gpu->add(dg.as<float>(), du.as<float>(), count);
    EXPECT_LT(rel_err(down<float>(dg, count), g), 1e-6);
    // the bias row added to each of n rows of 1001 (Qwen2's q/k/v biases)
    const auto bias = randn(1001, 10);
    auto db = up(bias);
    cpu->add_bias(g.data(), bias.data(), n, 1001);
    gpu->add_bias(dg.as<float>(), db.as<float>(), n, 1001);
    EXPECT_EQ(down<float>(dg, count), g) << "add_bias n=" << n;
  }
}

TEST_F(Cuda, OverlappingCopiesMoveLikeMemmove) {
  // Moves of up to 400 elements from 400 to 400 + shift: the buffer holds
  // the farthest one (ends at 1100).
  std::vector<int32_t> base(1200);
  std::iota(base.begin(), base.end(), 0);
  for (int shift : {-300, -7, -1, 1, 7, 300})
    for (size_t len : {1u, 5u, 400u}) {
      ASSERT_LE(400 + shift + len, base.size());
      auto d = up(base);
      std::vector<int32_t> want = base;
      const size_t src = 400, dst = static_cast<size_t>(400 + shift);
      memmove(want.data() + dst, want.data() + src, len * 4);
      gpu->copy(d.as<int32_t>() + dst, d.as<int32_t>() + src, len * 4);
      EXPECT_EQ(down<int32_t>(d, base.size()), want) << "shift " << shift << " len " << len;
    }
}

// With a sliding window (7: it masks committed rows and deep ancestors) too:
// token i at position n_past + its depth, its ancestor list cut to the window
// as the forward pass cuts it; the reference masks by positions (issue 46).
// KV rows of F32 and of Q8_0 (head_dim a multiple of 32; the reference reads
// the same blocks).
TEST_F(Cuda, TreeAttentionMatchesReference) {
  std::mt19937 g(4);
  for (DType kvt : {DType::F32, DType::Q8_0})
    for (int window : {0, 7})
      for (int hd : {16, 64, 128, 80})
        for (int n_past : {0, 1, 37})
          for (int n : {1, 5, 64}) {
            if (kvt == DType::Q8_0 && hd % 32 != 0) continue;
            const int heads = 4, kv_heads = 2;
            std::vector<int32_t> parents(n), pos(n);
            for (int i = 0; i < n; ++i) parents[i] = i == 0 ? -1 : static_cast<int32_t>(g() % (i + 1)) - 1;
            for (int i = 0; i < n; ++i) pos[i] = parents[i] < 0 ? n_past : pos[parents[i]] + 1;
            std::vector<int32_t> off(n + 1, 0), anc;
            for (int i = 0; i < n; ++i) {
              std::vector<int32_t> path;
              for (int j = i; j >= 0; j = parents[j])
                if (window == 0 || pos[i] - pos[j] < window) path.push_back(j);
              anc.insert(anc.end(), path.rbegin(), path.rend());
              off[i + 1] = static_cast<int32_t>(anc.size());
            }
            const auto q = randn(static_cast<size_t>(n) * heads * hd, 1);
            const auto k = randn(static_cast<size_t>(n_past + n) * kv_heads * hd, 2);
            const auto v = randn(k.size(), 3);
            std::vector<uint8_t> kq, vq;  // Q8_0: the rows as stored
            if (kvt == DType::Q8_0) {
              const int rows = n_past + n, kv_dim = kv_heads * hd;
              kq.resize(rows * kv_row_bytes(kvt, kv_dim)), vq.resize(kq.size());
              cpu::write_kv_rows(kq.data(), kvt, 0, k.data(), rows, kv_dim);
              cpu::write_kv_rows(vq.data(), kvt, 0, v.data(), rows, kv_dim);
            }
            const bool q8 = kvt == DType::Q8_0;
            std::vector<float> want(q.size());
            AttentionArgs a;
            a.q = q.data(), a.out = want.data();
            a.k = q8 ? static_cast<const void*>(kq.data()) : k.data();
            a.v = q8 ? static_cast<const void*>(vq.data()) : v.data();
            a.kv_type = kvt;
            a.n = n, a.n_past = n_past, a.n_heads = heads, a.n_kv_heads = kv_heads, a.head_dim = hd;
            a.parents = parents.data(), a.anc_off = off.data(), a.anc = anc.data();
            a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
            a.pos = pos.data(), a.window = window;
            cpu::attention_reference(a);
            auto dq = up(q), dk = q8 ? up(kq) : up(k), dv = q8 ? up(vq) : up(v), dp = up(parents), doff = up(off),
                 danc = up(anc), dpos = up(pos);
            auto dout = poisoned(q.size());
            AttentionArgs d = a;
            d.q = dq.as<float>(), d.k = dk.as(), d.v = dv.as(), d.out = dout.as<float>();
            d.parents = dp.as<int32_t>(), d.anc_off = doff.as<int32_t>(), d.anc = danc.as<int32_t>();
            d.pos = dpos.as<int32_t>();
            gpu->attention(d);
            EXPECT_LT(rel_err(down<float>(dout, q.size()), want), 1e-5)
                << dtype_name(kvt) << " hd " << hd << " past " << n_past << " n " << n << " window " << window;
          }
}

namespace {
// Logits of a batch on a backend, resident weights (DeviceWeights on CUDA).
std::vector<float> forward_logits(const ModelDesc& d, WeightSource& w, Backend& be, const std::vector<int32_t>& toks,
                                  const std::vector<int32_t>& parents, int passes) {
  Transformer tf(d, w, be);
  KvCache kv = tf.make_cache(256);
  std::vector<float> all;
  for (int p = 0; p < passes; ++p) {
    std::vector<int32_t> pos(toks.size());
    for (size_t i = 0; i < toks.size(); ++i) {
      int depth = 0;
      for (int j = parents[i]; j >= 0; j = parents[j]) ++depth;
      pos[i] = kv.committed() + depth;
    }
    std::vector<float> logits(toks.size() * d.hp.vocab);
    tf.forward({toks, pos, parents}, kv, logits);
    all.insert(all.end(), logits.begin(), logits.end());
    kv.commit_path(std::vector<int32_t>{0, 1});  // a two-token path (rows 0 and its child 1)
  }
  return all;
}

// The device's logits against the CPU's (rel_err) over six one-token decode
// steps with KV rows of type t, one cache each.
std::vector<double> decode_step_errors(const ModelDesc& d, WeightSource& host, Backend& cpu, WeightSource& dev,
                                       Backend& gpu, DType t) {
  Transformer tc(d, host, cpu), tg(d, dev, gpu);
  tc.set_kv_type(t);
  tg.set_kv_type(t);
  KvCache kc = tc.make_cache(64), kg = tg.make_cache(64);
  std::vector<float> lc(d.hp.vocab), lg(d.hp.vocab);
  std::vector<double> errs;
  for (int step = 0; step < 6; ++step) {
    const std::vector<int32_t> tok = {static_cast<int32_t>(3 + 7 * step)}, pos = {step}, par = {-1};
    tc.forward({tok, pos, par}, kc, lc);
    tg.forward({tok, pos, par}, kg, lg);
    kc.commit_prefix(1);
    kg.commit_prefix(1);
    errs.push_back(rel_err(lg, lc));
  }
  return errs;
}
}  // namespace

TEST_F(Cuda, ForwardPassMatchesCpuResidentAndStreamed) {
  for (DType t : {DType::F16, DType::Q8_0, DType::Q4_1}) {
    const std::string path = ::testing::TempDir() + "cuda_fwd_tiny.gguf";
    testutil::TinyShape shape;
    shape.layers = 4;
    shape.type = t;
    testutil::write_tiny_llama(path, shape);
    const ModelDesc d = load_model_desc(path);
    // A tree: 0 root; 1, 2 children of 0; 3 child of 1; ... then passes over a committed prefix.
    const std::vector<int32_t> toks = {5, 9, 17, 33, 40, 41, 42, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69};
    std::vector<int32_t> parents = {-1, 0, 0, 1, 1, 3, 3, 2, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    ResidentWeights host(d);
    const auto want = forward_logits(d, host, *cpu, toks, parents, 3);
    DeviceWeights dev(d, *gpu);
    EXPECT_LT(rel_err(forward_logits(d, dev, *gpu, toks, parents, 3), want), 5e-3) << dtype_name(t) << " resident";
    // The same model streamed through VRAM slots (pinned staging, copy stream).
    offload::MemoryPlan plan;
    plan.layer_tier = {offload::Tier::kDevice, offload::Tier::kStorage, offload::Tier::kHost, offload::Tier::kStorage};
    plan.ring_slots = 2;
    offload::StreamOptions o;
    o.link = offload::make_cuda_link(gpu->stream());
    o.backend = gpu.get();
    offload::StreamedWeights streamed(d, plan, o);
    EXPECT_LT(rel_err(forward_logits(d, streamed, *gpu, toks, parents, 3), want), 5e-3) << dtype_name(t) << " streamed";
    // n = 1 passes take the GEMV path: as exact as the CPU up to summation order.
    const std::vector<int32_t> one = {5}, root = {-1};
    Transformer tc(d, host, *cpu), tg(d, dev, *gpu);
    KvCache kc = tc.make_cache(8), kg = tg.make_cache(8);
    std::vector<float> lc(d.hp.vocab), lg(d.hp.vocab);
    const std::vector<int32_t> pos = {0};
    tc.forward({one, pos, root}, kc, lc);
    tg.forward({one, pos, root}, kg, lg);
    EXPECT_LT(rel_err(lg, lc), 1e-5) << dtype_name(t) << " n = 1";
  }
}

// Decoding n = 1 repeatedly: the first pass runs directly, the second is
// recorded as a CUDA graph, later ones replay it with a longer prefix each time.
TEST_F(Cuda, RecordedPassesReplayForEveryPrefixLength) {
  const std::string path = ::testing::TempDir() + "cuda_graph_tiny.gguf";
  testutil::TinyShape shape;
  shape.layers = 3;
  shape.type = DType::Q8_0;
  testutil::write_tiny_llama(path, shape);
  const ModelDesc d = load_model_desc(path);
  ResidentWeights host(d);
  DeviceWeights dev(d, *gpu);
  ASSERT_TRUE(gpu->can_record());
  Transformer tc(d, host, *cpu), tg(d, dev, *gpu);
  KvCache kc = tc.make_cache(64), kg = tg.make_cache(64);
  std::vector<float> lc(d.hp.vocab), lg(d.hp.vocab);
  for (int step = 0; step < 8; ++step) {
    const std::vector<int32_t> tok = {static_cast<int32_t>(3 + 11 * step)}, pos = {step}, par = {-1};
    tc.forward({tok, pos, par}, kc, lc);
    std::fill(lg.begin(), lg.end(), std::numeric_limits<float>::quiet_NaN());
    tg.forward({tok, pos, par}, kg, lg);
    kc.commit_prefix(1);
    kg.commit_prefix(1);
    EXPECT_LT(rel_err(lg, lc), 1e-5) << "step " << step;
  }
}

// --kv-type q8_0 on the device (llama.cpp's q8_0 KV cache). The rows written
// are the CPU's bytes (the shared math::quantize_q8_0, row by row and through a
// row map, a NaN and an overflowing block among them); the tree attention
// kernel over Q8_0 rows is in TreeAttentionMatchesReference; decoding
// steps and a shared pass over a paged Q8_0 pool stay within 5e-3 of the CPU
// (bf16 rows: 2e-3; a K or V value whose float differs across a rounding
// boundary moves by a whole quantization step). head_dim must be a multiple
// of 32, as on the CPU.
TEST_F(Cuda, Q8KvCacheMatchesTheCpu) {
  EXPECT_TRUE(gpu->supports_kv_type(DType::Q8_0));
  for (DType t : {DType::F32, DType::F16, DType::BF16}) EXPECT_TRUE(gpu->supports_kv_type(t)) << dtype_name(t);
  LlamaHParams hp;
  hp.head_dim = 48;
  try {
    check_kv_support(DType::Q8_0, hp, *gpu, "m.gguf");
    ADD_FAILURE() << "head_dim 48 took q8_0";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("needs a head_dim that is a multiple of 32"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }

  // The row store: rows 2-4 of a 6-row store of 64 floats (two blocks a row),
  // then rows 5 and 0 through a row map.
  const int w = 64;
  const size_t row_b = kv_row_bytes(DType::Q8_0, w);
  std::vector<float> src = randn(3 * w, 4, 100.0f);
  src[5] = INFINITY, src[40] = std::numeric_limits<float>::quiet_NaN(), src[70] = 3e38f, src[71] = -3e38f;
  for (int c = 96; c < 128; ++c) src[c] = 0.0f;  // a zero block
  std::vector<uint8_t> want(6 * row_b, 0), got(want.size());
  cpu::write_kv_rows(want.data(), DType::Q8_0, 2, src.data(), 3, w);
  const std::vector<int32_t> map = {5, 0};
  cpu::write_kv_rows_at(want.data(), DType::Q8_0, map.data(), src.data(), 2, w);
  BackendBuffer dst(*gpu, want.size()), dsrc = up(src), first(*gpu, 4), dmap = up(map);
  const int32_t row = 2;
  std::vector<uint8_t> zero(want.size(), 0);
  gpu->upload(dst.as(), zero.data(), zero.size());
  gpu->upload(first.as(), &row, 4);
  gpu->write_rows(dst.as(), DType::Q8_0, first.as<int32_t>(), dsrc.as<float>(), 3, w);
  gpu->write_rows_at(dst.as(), DType::Q8_0, dmap.as<int32_t>(), dsrc.as<float>(), 2, w);
  gpu->download(got.data(), dst.as(), got.size());
  EXPECT_EQ(got, want);

  // Decoding steps, one cache, then a shared pass over a paged pool.
  const std::string path = ::testing::TempDir() + "cuda_q8kv_tiny.gguf";
  testutil::TinyShape shape;
  shape.layers = 2;
  shape.type = DType::F16;
  shape.heads = 2, shape.kv_heads = 1;  // head_dim 32
  testutil::write_tiny_llama(path, shape);
  const ModelDesc d = load_model_desc(path);
  ASSERT_EQ(d.hp.head_dim, 32);
  ResidentWeights host(d);
  DeviceWeights dev(d, *gpu);
  const std::vector<double> errs = decode_step_errors(d, host, *cpu, dev, *gpu, DType::Q8_0);
  for (size_t step = 0; step < errs.size(); ++step) EXPECT_LT(errs[step], 5e-3) << "step " << step;
  Transformer tc(d, host, *cpu), tg(d, dev, *gpu);
  tc.set_kv_type(DType::Q8_0);
  tg.set_kv_type(DType::Q8_0);
  const int kv_dim = d.hp.n_kv_heads * d.hp.head_dim;
  KvPool pc(*cpu, d.hp.n_layers, kv_dim, 20, 4, 32, DType::Q8_0), pg(*gpu, d.hp.n_layers, kv_dim, 20, 4, 32, DType::Q8_0);
  std::vector<int32_t> seqs, toks, pos, par, last(2);
  const int lens[2] = {6, 11};
  for (int s = 0; s < 2; ++s) {
    ASSERT_EQ(pc.add_sequence(), pg.add_sequence());
    for (int k = 0; k < lens[s]; ++k) {
      if (k == lens[s] - 1) last[s] = static_cast<int32_t>(seqs.size());
      seqs.push_back(s), toks.push_back(static_cast<int32_t>((5 * s + 3 * k) % d.hp.vocab));
      pos.push_back(k), par.push_back(k - 1);
    }
  }
  std::vector<float> pc_lg(2 * d.hp.vocab), pg_lg(pc_lg.size(), std::numeric_limits<float>::quiet_NaN());
  tc.forward(SeqBatch{seqs, toks, pos, par}, pc, pc_lg, last);
  tg.forward(SeqBatch{seqs, toks, pos, par}, pg, pg_lg, last);
  EXPECT_LT(rel_err(pg_lg, pc_lg), 5e-3) << "shared pass";
}

// --kv-type f16 / bf16 on the device: the rows written are the CPU's bits
// (the shared rounding), so decoding with a tree and a chain stays as close to
// the CPU as with F32 rows.
TEST_F(Cuda, HalfKvCachesMatchTheCpu) {
  const std::string path = ::testing::TempDir() + "cuda_kv_tiny.gguf";
  testutil::TinyShape shape;
  shape.layers = 2;
  shape.type = DType::F16;
  testutil::write_tiny_llama(path, shape);
  const ModelDesc d = load_model_desc(path);
  ResidentWeights host(d);
  DeviceWeights dev(d, *gpu);
  for (DType t : {DType::F16, DType::BF16}) {
    const std::vector<double> errs = decode_step_errors(d, host, *cpu, dev, *gpu, t);
    for (size_t step = 0; step < errs.size(); ++step)
      EXPECT_LT(errs[step], t == DType::F16 ? 3e-4 : 2e-3) << dtype_name(t) << " step " << step;
    // The row store itself: the same floats give the CPU's bits.
    std::mt19937 rng(4);
    std::normal_distribution<float> nd;
    std::vector<float> src(3 * 40);
    for (float& x : src) x = 100 * nd(rng);
    src[5] = INFINITY, src[6] = 65520.0f, src[7] = 1.0f + 0x1p-11f;
    std::vector<uint16_t> want(5 * 40), got(want.size());
    cpu::write_kv_rows(want.data(), t, 2, src.data(), 3, 40);
    BackendBuffer dst(*gpu, want.size() * 2), dsrc(*gpu, src.size() * 4), first(*gpu, 4);
    const int32_t row = 2;
    gpu->upload(dst.as(), want.data(), 2 * 40 * 2);  // rows 0-1 (zero) as on the CPU
    gpu->upload(dsrc.as(), src.data(), src.size() * 4);
    gpu->upload(first.as(), &row, 4);
    gpu->write_rows(dst.as(), t, first.as<int32_t>(), dsrc.as<float>(), 3, 40);
    gpu->download(got.data(), dst.as(), got.size() * 2);
    EXPECT_EQ(got, want) << dtype_name(t);
  }
}

// Many sequences in one pass over a paged KV pool in VRAM (write_rows_at,
// attention through block tables, the gathered logits rows): prompts of
// different lengths prefilled together, then decode passes of one token per
// sequence, the same shape each time (recorded as a CUDA graph on the second,
// replayed after with longer histories); every pass matches the CPU's, F32 and
// F16 rows. A sequence freed and its blocks taken by a new one mid-way.
TEST_F(Cuda, SeveralSequencesInOnePassMatchCpu) {
  const std::string path = ::testing::TempDir() + "cuda_seqs_tiny.gguf";
  testutil::TinyShape shape;
  shape.layers = 3;
  shape.type = DType::Q8_0;
  testutil::write_tiny_llama(path, shape);
  const ModelDesc d = load_model_desc(path);
  ResidentWeights host(d);
  DeviceWeights dev(d, *gpu);
  const int kv_dim = d.hp.n_kv_heads * d.hp.head_dim;
  for (DType t : {DType::F32, DType::F16}) {
    Transformer tc(d, host, *cpu), tg(d, dev, *gpu);
    tc.set_kv_type(t);
    tg.set_kv_type(t);
    KvPool pc(*cpu, d.hp.n_layers, kv_dim, 40, 4, 64, t), pg(*gpu, d.hp.n_layers, kv_dim, 40, 4, 64, t);
    for (int s = 0; s < 3; ++s) ASSERT_EQ(pc.add_sequence(), pg.add_sequence());
    // Prefill: prompts of 5, 13 and 9 tokens, interleaved.
    std::vector<int32_t> seqs, toks, pos, par, last(3);
    const int lens[3] = {5, 13, 9};
    for (int k = 0; k < 13; ++k)
      for (int s = 0; s < 3; ++s)
        if (k < lens[s]) {
          if (k == lens[s] - 1) last[s] = static_cast<int32_t>(seqs.size());
          seqs.push_back(s), toks.push_back(static_cast<int32_t>((7 * s + 3 * k) % d.hp.vocab));
          pos.push_back(k), par.push_back(k - 1);
        }
    std::vector<float> lc(3 * d.hp.vocab), lg(lc.size());
    tc.forward(SeqBatch{seqs, toks, pos, par}, pc, lc, last);
    std::fill(lg.begin(), lg.end(), std::numeric_limits<float>::quiet_NaN());
    tg.forward(SeqBatch{seqs, toks, pos, par}, pg, lg, last);
    EXPECT_LT(rel_err(lg, lc), 5e-3) << dtype_name(t) << " prefill";
    for (int s = 0; s < 3; ++s) pc.commit_prefix(s, lens[s]), pg.commit_prefix(s, lens[s]);
    for (int step = 0; step < 8; ++step) {
      if (step == 4) {  // sequence 1 finishes; a new one takes its blocks
        pc.free_sequence(1), pg.free_sequence(1);
        ASSERT_EQ(pc.add_sequence(), pg.add_sequence());
      }
      std::vector<int32_t> s3 = {0, 1, 2}, t3, p3, r3 = {-1, -1, -1}, rows = {2, 0, 1};
      for (int s = 0; s < 3; ++s) {
        t3.push_back(static_cast<int32_t>((11 * step + 5 * s) % d.hp.vocab));
        p3.push_back(pc.committed(s));
      }
      tc.forward(SeqBatch{s3, t3, p3, r3}, pc, lc, rows);
      std::fill(lg.begin(), lg.end(), std::numeric_limits<float>::quiet_NaN());
      tg.forward(SeqBatch{s3, t3, p3, r3}, pg, lg, rows);
      EXPECT_LT(rel_err(lg, lc), 5e-3) << dtype_name(t) << " step " << step;
      for (int s = 0; s < 3; ++s) pc.commit_prefix(s, 1), pg.commit_prefix(s, 1);
    }
  }
}

// Also past a sliding window of 5 positions (the tree's deep nodes mask
// their root: issue 46).
TEST_F(Cuda, GreedySpeculativeDecodeMatchesCpu) {
  for (const uint32_t window : {0u, 5u}) {
    const std::string path = ::testing::TempDir() + "cuda_spec_tiny.gguf";
    testutil::TinyShape shape;
    shape.layers = 4;
    shape.type = DType::F32;  // the fp32 cuBLAS path: no 16-bit rounding to flip a near-tie
    shape.sliding_window = window;
    testutil::write_tiny_llama(path, shape);
    const ModelDesc d = load_model_desc(path);
    ASSERT_EQ(d.hp.sliding_window, static_cast<int>(window));
    auto run = [&](Backend& be, WeightSource& tw, WeightSource& dw) {
      Transformer target(d, tw, be), draft(d, dw, be);
      spec::SpecConfig cfg;
      cfg.shape = spec::make_tree_shape("kary:2x3", 0, 0, "");
      spec::SpecDecoder dec(target, draft, d, d, cfg, 256);
      const std::vector<int32_t> prompt = {1, 50, 60, 70};
      dec.start(prompt);
      std::vector<int32_t> out;
      while (out.size() < 40) {
        const auto step = dec.step();
        out.insert(out.end(), step.begin(), step.end());
      }
      out.resize(40);
      return out;
    };
    ResidentWeights host(d);
    DeviceWeights dev(d, *gpu);
    // F32 weights keep every path in fp32 (summation order aside), so no argmax flips.
    EXPECT_EQ(run(*gpu, dev, dev), run(*cpu, host, host)) << "window " << window;
  }
}

TEST_F(Cuda, SamplingKernelsFollowTheHostLaws) {
  const int rows = 5, V = 1000;
  auto logits = randn(static_cast<size_t>(rows) * V, 21, 3.0f);
  logits[3] = logits[7] = 50.0f;  // a tie in row 0: argmax takes the lower id
  auto dl = up(logits);
  std::vector<int32_t> want_ids(rows);
  for (int r = 0; r < rows; ++r)
    want_ids[r] = argmax(std::span<const float>(logits.data() + static_cast<size_t>(r) * V, V));
  BackendBuffer dids(*gpu, rows * sizeof(int32_t));
  cuda::argmax_rows(gpu->stream(), dl.as<float>(), rows, V, dids.as<int32_t>());
  EXPECT_EQ(down<int32_t>(dids, rows), want_ids);

  for (int top_k : {0, 1, 40})
    for (float top_p : {1.0f, 0.9f, 0.3f}) {
      SamplingParams sp;
      sp.temperature = 0.7f, sp.top_k = top_k, sp.top_p = top_p;
      std::vector<float> want;
      std::vector<float> all;
      for (int r = 0; r < rows; ++r) {
        probs(sp, std::span<const float>(logits.data() + static_cast<size_t>(r) * V, V), want);
        all.insert(all.end(), want.begin(), want.end());
      }
      auto dp = poisoned(all.size());
      cuda::softmax_rows(gpu->stream(), dl.as<float>(), rows, V, sp.temperature, dp.as<float>());
      cuda::top_k_top_p_rows(gpu->stream(), dp.as<float>(), rows, V, top_k, top_p);
      const auto got = down<float>(dp, all.size());
      EXPECT_LT(rel_err(got, all), 1e-5) << "top_k " << top_k << " top_p " << top_p;
      // Inverse-CDF sampling with the shared counter uniforms.
      const uint64_t seed = 99;
      cuda::sample_rows(gpu->stream(), dp.as<float>(), rows, V, seed, dids.as<int32_t>());
      std::vector<int32_t> host_ids(rows);
      for (int r = 0; r < rows; ++r) {
        const double u = math::counter_uniform(seed, static_cast<uint64_t>(r));
        double cum = 0;
        int32_t last = 0, pick = -1;
        for (int i = 0; i < V && pick < 0; ++i) {
          const float p = got[static_cast<size_t>(r) * V + i];
          if (!(p > 0)) continue;
          cum += p;
          last = i;
          if (u < cum) pick = i;
        }
        host_ids[r] = pick < 0 ? last : pick;
      }
      EXPECT_EQ(down<int32_t>(dids, rows), host_ids);
      // Gumbel top-k: the same keys on the host give the same draws, in order.
      const int k = 6;
      BackendBuffer dk(*gpu, rows * k * sizeof(int32_t));
      cuda::gumbel_top_k_rows(gpu->stream(), dp.as<float>(), rows, V, k, seed, dk.as<int32_t>());
      std::vector<int32_t> host_k;
      for (int r = 0; r < rows; ++r) {
        std::vector<std::pair<float, int32_t>> keys;
        for (int i = 0; i < V; ++i) {
          const float p = got[static_cast<size_t>(r) * V + i];
          const float u = math::counter_uniform(seed, static_cast<uint64_t>(r) * V + i);
          keys.push_back({p > 0 ? math::gumbel_key(p, u) : -1e30f * (1.0f + u), i});
        }
        std::stable_sort(keys.begin(), keys.end(), [](auto& a, auto& b) { return a.first > b.first; });
        for (int j = 0; j < k; ++j) host_k.push_back(keys[j].second);
      }
      EXPECT_EQ(down<int32_t>(dk, rows * k), host_k);
    }
}
