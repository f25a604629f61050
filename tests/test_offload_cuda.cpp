// The CUDA slot link: layers streamed through VRAM slots (pinned staging,
// copy stream, events) arrive byte-exact, pass after pass, from a GGUF and
// from a packed model (stored bytes over PCIe, expanded by the device
// decoder, kernels/cuda/wpack.cu, which is also checked chunk by chunk
// against the CPU's). Skipped without a GPU.
#include <cuda_runtime.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/common/math.h"
#include "kernels/common/wpack.h"
#include "kernels/cpu/wpack.h"
#include "kernels/cuda/wpack.h"
#include "offload/streamer.h"
#include "src/model/packed.h"
#include "src/util/io.h"
#include "tests/util/tiny_gguf.h"

using namespace redwood;
using namespace redwood::offload;

namespace {

bool have_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

}  // namespace

class CudaLink : public ::testing::TestWithParam<bool> {};  // param: a packed model

TEST_P(CudaLink, StreamedLayersArriveByteExact) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  const bool packed = GetParam();
  const std::string path = ::testing::TempDir() + "offload_cuda_tiny.gguf";
  const std::string packed_path = ::testing::TempDir() + "offload_cuda_tiny.rwpk";
  testutil::TinyShape shape;
  shape.layers = 5;
  shape.dim = 256;
  shape.ffn = 1280;  // w_up and w_gate hold 5 chunks each
  shape.type = DType::F16;
  testutil::write_tiny_llama(path, shape);
  if (packed) (void)pack_model(path, packed_path);
  const ModelDesc src = load_model_desc(path);
  const ModelDesc d = load_model_desc(packed ? packed_path : path);
  for (const auto& tiers :
       {std::vector<Tier>(5, Tier::kStorage),
        std::vector<Tier>{Tier::kDevice, Tier::kHost, Tier::kStorage, Tier::kHost, Tier::kStorage}}) {
    MemoryPlan plan;
    plan.layer_tier = tiers;
    plan.ring_slots = 2;
    StreamOptions o;
    o.link = make_cuda_link(nullptr);  // compute on the legacy default stream
    StreamedWeights w(d, plan, o);
    const int fd = ::open(path.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    for (int pass = 0; pass < 3; ++pass) {
      w.begin_pass();
      for (int l = 0; l < 5; ++l) {
        const LayerWeights& L = w.acquire(l);
        const WeightView* views[] = {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down};
        const auto mats = layer_matrices(d.layers[l]);
        for (size_t i = 0; i < mats.size(); ++i) {
          std::vector<uint8_t> want(mats[i]->bytes), got(mats[i]->bytes);
          read_exact(fd, path, want.data(), want.size(), layer_matrices(src.layers[l])[i]->offset);
          if (tiers[l] == Tier::kDevice) {
            std::memcpy(got.data(), views[i]->data, got.size());
          } else {  // ordered after the compute stream's wait on the slot's copy
            ASSERT_EQ(cudaMemcpy(got.data(), views[i]->data, got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
          }
          EXPECT_EQ(got, want) << "pass " << pass << " layer " << l << " tensor " << i;
        }
        w.release(l);
      }
      w.end_pass();
    }
    ::close(fd);
  }
  std::remove(path.c_str());
  std::remove(packed_path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Gguf, CudaLink, ::testing::Values(false));
INSTANTIATE_TEST_SUITE_P(Packed, CudaLink, ::testing::Values(true));

// The device decoder against the CPU's, chunk by chunk: F16, BF16 and F32
// weights, every code width, raw chunks, odd sizes; a malformed chunk sets the
// status (negative control) and writes nothing past its output.
TEST(CudaWpack, DeviceDecoderMatchesTheCpu) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(7);
  std::vector<std::vector<uint8_t>> chunks, raws;
  std::vector<std::pair<uint32_t, uint32_t>> shapes;  // n, w
  auto add = [&](std::vector<uint8_t> raw, int w) {
    const uint64_t n = raw.size() / w;
    std::vector<uint8_t> c;
    cpu::pack_chunk(raw.data(), n, w, c);
    chunks.push_back(c);
    raws.push_back(raw);
    shapes.push_back({static_cast<uint32_t>(n), static_cast<uint32_t>(w)});
  };
  for (uint64_t n : {1ull, 63ull, 65ull, 1000ull, 65535ull, 65536ull}) {
    for (float sigma : {0.02f, 3.0f}) {  // few binades, many binades (wider codes, more escapes)
      std::normal_distribution<float> nd(0.0f, sigma);
      std::vector<uint8_t> f16(n * 2), bf16(n * 2), f32(n * 4);
      for (uint64_t i = 0; i < n; ++i) {
        const float x = nd(rng);
        const uint16_t h = math::f32_to_f16(x);
        uint32_t u;
        std::memcpy(&u, &x, 4);
        const uint16_t b = static_cast<uint16_t>(u >> 16);
        std::memcpy(&f16[i * 2], &h, 2);
        std::memcpy(&bf16[i * 2], &b, 2);
        std::memcpy(&f32[i * 4], &x, 4);
      }
      add(f16, 2);
      add(bf16, 2);
      add(f32, 4);
    }
    std::vector<uint8_t> noise(n * 2);
    for (auto& b : noise) b = static_cast<uint8_t>(rng());
    add(noise, 2);  // stored raw
  }
  // Device copies: every chunk, its output with 64 guard bytes.
  const int count = static_cast<int>(chunks.size());
  std::vector<uint8_t*> d_in(count), d_out(count);
  std::vector<cuda::UnpackJob> jobs(count);
  for (int i = 0; i < count; ++i) {
    ASSERT_EQ(cudaMalloc(&d_in[i], chunks[i].size()), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_out[i], raws[i].size() + 64), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(d_in[i], chunks[i].data(), chunks[i].size(), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemset(d_out[i], 0xA5, raws[i].size() + 64), cudaSuccess);
    jobs[i] = {d_in[i], d_out[i], chunks[i].size(), shapes[i].first, shapes[i].second};
  }
  cuda::UnpackJob* d_jobs = nullptr;
  int* d_status = nullptr;
  ASSERT_EQ(cudaMalloc(&d_jobs, jobs.size() * sizeof jobs[0]), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_status, sizeof(int)), cudaSuccess);
  auto run = [&](int n_jobs) {
    int status = 0;
    EXPECT_EQ(cudaMemset(d_status, 0, sizeof(int)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(d_jobs, jobs.data(), n_jobs * sizeof jobs[0], cudaMemcpyHostToDevice), cudaSuccess);
    cuda::unpack_chunks(nullptr, d_jobs, n_jobs, d_status);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(&status, d_status, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
    return status;
  };
  EXPECT_EQ(run(count), 0);
  for (int i = 0; i < count; ++i) {
    std::vector<uint8_t> got(raws[i].size() + 64);
    ASSERT_EQ(cudaMemcpy(got.data(), d_out[i], got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(0, std::memcmp(got.data(), raws[i].data(), raws[i].size()))
        << "chunk " << i << " n " << shapes[i].first << " w " << shapes[i].second;
    for (size_t b = raws[i].size(); b < got.size(); ++b) ASSERT_EQ(got[b], 0xA5) << "chunk " << i << " wrote past";
  }
  // Negative controls on a coded chunk with exceptions: malformed codes and heads.
  int coded = -1;
  for (int i = 0; i < count && coded < 0; ++i) {
    uint32_t n_exc = 0;
    std::memcpy(&n_exc, chunks[i].data() + 4, 4);
    if (chunks[i][0] == wpack::kHighByte && shapes[i].first > 100 && n_exc > 0) coded = i;
  }
  ASSERT_GE(coded, 0);
  const std::vector<cuda::UnpackJob> good_jobs = jobs;
  auto expect_rejected = [&](const char* what, auto edit) {
    std::vector<uint8_t> bad = chunks[coded];
    edit(bad);
    ASSERT_EQ(cudaMemcpy(d_in[coded], bad.data(), bad.size(), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemset(d_out[coded], 0xA5, raws[coded].size() + 64), cudaSuccess);
    jobs = good_jobs;  // the bad chunk among all the good ones: one block's status
    EXPECT_EQ(run(count), 1) << what << ": decoded without an error";
    std::vector<uint8_t> got(raws[coded].size() + 64);
    ASSERT_EQ(cudaMemcpy(got.data(), d_out[coded], got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t b = raws[coded].size(); b < got.size(); ++b) ASSERT_EQ(got[b], 0xA5) << what << ": wrote past";
    ASSERT_EQ(cudaMemcpy(d_in[coded], chunks[coded].data(), chunks[coded].size(), cudaMemcpyHostToDevice), cudaSuccess);
  };
  const uint64_t code_bytes = wpack::code_bytes(shapes[coded].first, chunks[coded][1]);
  expect_rejected("every code an escape", [&](std::vector<uint8_t>& c) {
    std::memset(c.data() + sizeof(wpack::ChunkHead), 0xff, code_bytes);
  });
  expect_rejected("every code 0 (fewer escapes than declared)", [&](std::vector<uint8_t>& c) {
    std::memset(c.data() + sizeof(wpack::ChunkHead), 0, code_bytes);
  });
  expect_rejected("k = 7", [](std::vector<uint8_t>& c) { c[1] = 7; });
  expect_rejected("unknown codec", [](std::vector<uint8_t>& c) { c[0] = 9; });
  EXPECT_EQ(run(count), 0) << "the good chunks again";
  for (int i = 0; i < count; ++i) {
    cudaFree(d_in[i]);
    cudaFree(d_out[i]);
  }
  cudaFree(d_jobs);
  cudaFree(d_status);
}
