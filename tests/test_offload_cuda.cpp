// The CUDA slot link: layers streamed through VRAM slots (pinned staging,
// copy stream, events) arrive byte-exact, pass after pass. Skipped without a GPU.
#include <cuda_runtime.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <vector>

#include "offload/streamer.h"
#include "src/util/io.h"
#include "tests/util/tiny_gguf.h"

using namespace redwood;
using namespace redwood::offload;

TEST(CudaLink, StreamedLayersArriveByteExact) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "no CUDA device";
  const std::string path = ::testing::TempDir() + "offload_cuda_tiny.gguf";
  testutil::TinyShape shape;
  shape.layers = 5;
  shape.type = DType::F16;
  testutil::write_tiny_llama(path, shape);
  const ModelDesc d = load_model_desc(path);
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
          read_exact(fd, path, want.data(), want.size(), mats[i]->offset);
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
}
