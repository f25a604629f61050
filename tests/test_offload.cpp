// The layer streaming pipeline: a streamed forward pass gives bit-identical
// logits to the all-resident pass, for every mix of tiers, ring depths 2-4 and
// planner budgets down to the minimum; stats, trace, --verify-io and I/O
// errors behave.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "offload/placement.h"
#include "offload/streamer.h"
#include "src/util/error.h"
#include "tests/util/passes.h"
#include "tests/util/test_model.h"
#include "tests/util/tiny_gguf.h"

using namespace redwood;
using namespace redwood::offload;
using redwood::testutil::bit_equal;
using redwood::testutil::run_passes;

namespace {

MemoryPlan manual_plan(const std::vector<Tier>& tiers, int ring) {
  MemoryPlan p;
  p.layer_tier = tiers;
  p.ring_slots = ring;
  return p;
}

class OffloadTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    // One file per test and process: ctest runs tests in parallel processes, and
    // one test rewrites bytes of its file on purpose.
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '_');
    path_ = ::testing::TempDir() + "offload_" + name + "_" + std::to_string(getpid()) + ".gguf";
    testutil::TinyShape s;
    s.layers = 6;
    s.dim = 128;
    s.ffn = 320;
    s.type = GetParam();
    testutil::write_tiny_llama(path_, s);
    desc_ = load_model_desc(path_);
    ResidentWeights w(desc_);
    reference_ = run_passes(desc_, w);
  }
  void TearDown() override { std::remove(path_.c_str()); }
  std::string path_;
  ModelDesc desc_;
  std::vector<float> reference_;
};

TEST_P(OffloadTest, EveryTierMixAndRingDepthIsBitIdentical) {
  const Tier D = Tier::kDevice, H = Tier::kHost, S = Tier::kStorage;
  const std::vector<std::vector<Tier>> mixes = {
      {S, S, S, S, S, S}, {D, S, D, S, D, S}, {S, D, D, D, D, S},
      {H, S, H, S, H, S}, {D, H, S, D, H, S}, {H, H, H, H, H, H},
  };
  for (const auto& mix : mixes)
    for (int ring = 2; ring <= 4; ++ring) {
      StreamedWeights w(desc_, manual_plan(mix, ring));
      EXPECT_TRUE(bit_equal(run_passes(desc_, w), reference_)) << "ring " << ring;
      EXPECT_EQ(w.passes(), 3);
    }
}

TEST_P(OffloadTest, PerPassStatsCountStreamedBytes) {
  const Tier D = Tier::kDevice, H = Tier::kHost, S = Tier::kStorage;
  StreamedWeights w(desc_, manual_plan({D, S, H, S, D, S}, 2));
  run_passes(desc_, w);
  uint64_t storage = 0, host = 0;
  for (int l : {1, 3, 5}) {
    const LayerLayout lay = layout_layer(desc_.layers[l]);
    for (const auto& r : lay.reads) storage += r.bytes;
  }
  host = layout_layer(desc_.layers[2]).slot_bytes;
  EXPECT_EQ(w.last_pass().storage_bytes, storage);
  EXPECT_EQ(w.last_pass().host_bytes, host);
  EXPECT_EQ(w.totals().storage_bytes, 3 * storage);
  EXPECT_GE(w.last_pass().wall_seconds, w.last_pass().stall_seconds);
  EXPECT_EQ(w.streamed_layers(), 4);
}

TEST_P(OffloadTest, PlannerBudgetsDownToTheMinimumAreBitIdentical) {
  RunShape shape;
  shape.ctx = 64;
  shape.max_tokens = 8;
  const uint64_t layer = desc_.layers[0].bytes();
  for (int ring = 2; ring <= 4; ++ring) {
    Budgets b;
    b.ring_slots = ring;
    b.device = 1ull << 40;
    const uint64_t min = plan_memory(desc_, nullptr, b, shape).device_min;
    for (uint64_t extra : {uint64_t{0}, layer + layer / 2, 3 * layer}) {
      for (uint64_t host : {uint64_t{0}, 2 * layer}) {
        b.device = min + extra;
        b.host = host;
        const MemoryPlan p = plan_memory(desc_, nullptr, b, shape);
        EXPECT_LE(p.device_used, b.device);
        if (extra == 0) {
          EXPECT_EQ(p.count(Tier::kDevice), 0);
        }
        StreamedWeights w(desc_, p);
        EXPECT_TRUE(bit_equal(run_passes(desc_, w), reference_))
            << "ring " << ring << " device " << b.device << " host " << host;
      }
    }
  }
}

TEST_P(OffloadTest, RecoversFromAPassAbandonedHalfWay) {
  StreamedWeights w(desc_, manual_plan(std::vector<Tier>(6, Tier::kStorage), 2));
  w.begin_pass();
  w.acquire(0);
  w.release(0);
  w.acquire(1);  // the pass "throws" here: never released, never ended
  EXPECT_TRUE(bit_equal(run_passes(desc_, w), reference_));
}

TEST_P(OffloadTest, TraceHasIoAndComputeTracks) {
  Trace trace;
  StreamOptions o;
  o.trace = &trace;
  StreamedWeights w(
      desc_,
      manual_plan({Tier::kDevice, Tier::kStorage, Tier::kStorage, Tier::kHost, Tier::kStorage, Tier::kStorage}, 2), o);
  run_passes(desc_, w);
  const auto j = nlohmann::json::parse(trace.json());
  int io = 0, compute = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] != "X") continue;
    io += e["tid"] == Trace::kIo;
    compute += e["tid"] == Trace::kCompute;
  }
  EXPECT_GE(io, 3 * 5);  // every streamed layer of every pass (plus prefetch)
  EXPECT_EQ(compute, 3 * 6);
}

TEST_P(OffloadTest, VerifyIoPassesOnGoodDataAndCatchesChangedBytes) {
  StreamOptions o;
  o.verify_io = true;
  {
    StreamedWeights w(desc_, manual_plan(std::vector<Tier>(6, Tier::kStorage), 2), o);
    EXPECT_TRUE(bit_equal(run_passes(desc_, w), reference_));
  }
  StreamedWeights w(desc_, manual_plan(std::vector<Tier>(6, Tier::kStorage), 2), o);
  // Change one byte of the last layer's down projection after the reference read.
  const TensorExtent& t = desc_.layers[5].w_down;
  std::fstream f(path_, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(t.offset + t.bytes / 2));
  const char c = static_cast<char>(f.get() ^ 0x5a);
  f.seekp(static_cast<std::streamoff>(t.offset + t.bytes / 2));
  f.put(c);
  f.close();
  try {
    run_passes(desc_, w);
    FAIL() << "corruption not detected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("verify-io"), std::string::npos) << e.what();
  }
}

TEST_P(OffloadTest, ReadErrorIsAClearErrorNotWrongWeights) {
  for (bool uring : {true, false}) {
    StreamOptions o;
    o.reader.use_io_uring = uring;
    const uint64_t bad = desc_.layers[3].wq.offset;
    o.reader.fault = [bad](int, uint64_t off, uint64_t want, int64_t res) -> int64_t {
      return off <= bad && bad < off + want ? -EIO : res;
    };
    StreamedWeights w(desc_, manual_plan(std::vector<Tier>(6, Tier::kStorage), 2), o);
    try {
      run_passes(desc_, w);
      FAIL() << "I/O error not reported";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("I/O error"), std::string::npos) << e.what();
    }
  }
}

// The streamer's environment knobs were read with atoi / compared to "0":
// REDWOOD_DECODE_THREADS=abc or -1 and REDWOOD_IO_PRIORITY=abc were silently
// taken as something. Now a one-line error naming the variable, before any
// weight loads.
TEST_P(OffloadTest, BadEnvironmentKnobsAreOneLineErrors) {
  const std::pair<const char*, const char*> bad[] = {{"REDWOOD_DECODE_THREADS", "abc"},
                                                     {"REDWOOD_DECODE_THREADS", "-1"},
                                                     {"REDWOOD_DECODE_THREADS", "65"},
                                                     {"REDWOOD_IO_PRIORITY", "abc"},
                                                     {"REDWOOD_IO_PRIORITY", "2"}};
  for (const auto& [name, value] : bad) {
    ::setenv(name, value, 1);
    std::string what = "(no error)";
    try {
      StreamedWeights w(desc_, manual_plan(std::vector<Tier>(6, Tier::kStorage), 2), StreamOptions{});
    } catch (const Error& e) {
      what = e.what();
    }
    ::unsetenv(name);
    EXPECT_EQ(what.rfind(std::string(name) + "=" + value + ": expected an integer from ", 0), 0u) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos);
  }
  ::setenv("REDWOOD_IO_PRIORITY", "0", 1);
  ::setenv("REDWOOD_DECODE_THREADS", "2", 1);
  {
    StreamedWeights w(desc_, manual_plan(std::vector<Tier>(6, Tier::kStorage), 2), StreamOptions{});
    EXPECT_TRUE(bit_equal(run_passes(desc_, w), reference_));
  }
  ::unsetenv("REDWOOD_IO_PRIORITY");
  ::unsetenv("REDWOOD_DECODE_THREADS");
}

INSTANTIATE_TEST_SUITE_P(Types, OffloadTest, ::testing::Values(DType::F16, DType::Q8_0, DType::Q4_1),
                         [](const auto& i) { return std::string(dtype_name(i.param)); });

}  // namespace
