// Packed models (redwood pack, src/model/packed.h; codec kernels/common/wpack.h):
//  * the codec round-trips adversarial byte patterns bit for bit on both
//    decoders (scalar and AVX-512), choosing every code width and the raw
//    fallback, and rejects malformed chunks without reading or writing out of
//    bounds;
//  * a packed tiny model's tensors decode to the source's bytes (XXH3 per
//    tensor) for every type the tiny writer makes, and its logits are
//    bit-identical to the source's, resident and streamed (every tier mix);
//  * a flipped byte anywhere in a packed file, or a truncated one, is a
//    one-line redwood::Error from the loader or the stream, never wrong weights;
//  * pack refuses to overwrite its input, a packed source, and non-GGUF input.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <future>
#include <thread>
#include <random>
#include <set>

#include "kernels/backend.h"
#include "kernels/common/math.h"
#include "kernels/common/wpack.h"
#include "kernels/cpu/wpack.h"
#include "offload/placement.h"
#include "offload/streamer.h"
#include "src/engine/transformer.h"
#include "src/engine/weights.h"
#include "src/model/packed.h"
#include "src/util/error.h"
#include "tests/util/passes.h"
#include "tests/util/tiny_gguf.h"

using namespace redwood;

namespace {

// ---- the codec ---------------------------------------------------------------

struct Seen {
  std::set<int> k;  // code widths chosen (0: raw)
};

// The CUDA decoder's plan (kernels/common/wpack.h: escapes counted per part,
// a prefix sum, parts decoded from their first exception), run on the host.
bool unpack_in_parts(const uint8_t* chunk, uint64_t stored, uint8_t* out, uint64_t n, int w, int parts) {
  wpack::ChunkView v;
  return wpack::chunk_view(chunk, stored, n, w, &v) && wpack::decode_in_parts(v, out, n, w, parts);
}

// Every decoder of a chunk: the two CPU paths and the CUDA plan at 1, 7 and 256 parts.
struct Decoder {
  std::string name;
  std::function<bool(const uint8_t*, uint64_t, uint8_t*, uint64_t, int)> run;
};
std::vector<Decoder> decoders() {
  std::vector<Decoder> d;
  for (auto path : {cpu::UnpackPath::kScalar, cpu::UnpackPath::kAvx512}) {
    if (path == cpu::UnpackPath::kAvx512 && !cpu::unpack_avx512_available()) continue;
    d.push_back({cpu::unpack_path_name(path), [path](const uint8_t* c, uint64_t s, uint8_t* o, uint64_t n, int w) {
                   return cpu::unpack_chunk(c, s, o, n, w, path);
                 }});
  }
  for (int parts : {1, 7, 256})
    d.push_back({"cuda-plan/" + std::to_string(parts), [parts](const uint8_t* c, uint64_t s, uint8_t* o, uint64_t n,
                                                               int w) { return unpack_in_parts(c, s, o, n, w, parts); }});
  return d;
}

// Packs `raw` (elements of w bytes) chunk by chunk and decodes each chunk on
// both paths; every decoded byte must equal the input.
void expect_round_trip(const std::vector<uint8_t>& raw, int w, const std::string& what, Seen& seen) {
  const uint64_t n = raw.size() / w;
  static const uint8_t kNothing = 0;  // a valid pointer for the empty input
  const uint8_t* base = raw.empty() ? &kNothing : raw.data();
  for (uint64_t a = 0; a < n || a == 0; a += wpack::kChunkElems) {
    const uint64_t m = std::min<uint64_t>(wpack::kChunkElems, n - a);
    std::vector<uint8_t> chunk;
    cpu::pack_chunk(base + a * w, m, w, chunk);
    wpack::ChunkHead h;
    std::memcpy(&h, chunk.data(), sizeof h);
    seen.k.insert(h.codec == wpack::kRaw ? 0 : h.k);
    if (h.codec == wpack::kHighByte) {
      EXPECT_LT(chunk.size(), m * w + sizeof h) << what;
    }
    for (const Decoder& d : decoders()) {
      std::vector<uint8_t> out(m * w + 64, 0xA5);  // 64 guard bytes must stay untouched
      ASSERT_TRUE(d.run(chunk.data(), chunk.size(), out.data(), m, w)) << what << " path " << d.name;
      EXPECT_EQ(0, std::memcmp(out.data(), base + a * w, m * w)) << what << " path " << d.name;
      EXPECT_TRUE(std::all_of(out.begin() + m * w, out.end(), [](uint8_t b) { return b == 0xA5; })) << what;
    }
    if (n == 0) break;
  }
}

std::vector<uint8_t> from_u16(const std::vector<uint16_t>& v) {
  std::vector<uint8_t> b(v.size() * 2);
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}
std::vector<uint8_t> from_u32(const std::vector<uint32_t>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}


TEST(WpackCodec, RoundTripsAdversarialInputsOnBothDecoders) {
  std::mt19937 rng(7);
  Seen seen;
  const std::vector<uint64_t> sizes = {0, 1, 7, 63, 64, 65, 127, 128, 1000, 65535, 65536, 65537, 200000};
  for (uint64_t n : sizes) {
    const std::string sz = " n=" + std::to_string(n);
    std::vector<uint16_t> h(n);
    std::vector<uint32_t> f(n);
    auto both = [&](const std::string& what) {
      expect_round_trip(from_u16(h), 2, what + sz + " w=2", seen);
      expect_round_trip(from_u32(f), 4, what + sz + " w=4", seen);
    };
    std::fill(h.begin(), h.end(), uint16_t{0x3c00});  // all equal (1.0)
    std::fill(f.begin(), f.end(), 0x3f800000u);
    both("all equal");
    for (uint64_t i = 0; i < n; ++i) h[i] = static_cast<uint16_t>((i % 256) << 8 | (i * 37 % 256)), f[i] = static_cast<uint32_t>(i * 2654435761u);
    both("every top byte");
    for (uint64_t i = 0; i < n; ++i) h[i] = static_cast<uint16_t>(rng()), f[i] = static_cast<uint32_t>(rng());
    both("random bits");
    const uint16_t specials16[] = {0x7c00, 0xfc00, 0x7e00, 0x7c01, 0x0001, 0x8001, 0x03ff, 0x0000, 0x8000, 0x7bff};
    const uint32_t specials32[] = {0x7f800000, 0xff800000, 0x7fc00000, 0x00000001, 0x80000001, 0x0, 0x80000000, 0x7f7fffff};
    std::normal_distribution<float> nd(0.0f, 0.02f);
    for (uint64_t i = 0; i < n; ++i) {
      const float x = nd(rng);
      h[i] = i % 17 == 0 ? specials16[i % 10] : math::f32_to_f16(x);
      f[i] = i % 19 == 0 ? specials32[i % 8] : std::bit_cast<uint32_t>(x);
    }
    both("gaussian with NaN/Inf/subnormals");
    for (uint64_t i = 0; i < n; ++i) h[i] = math::f32_to_bf16(nd(rng));
    expect_round_trip(from_u16(h), 2, "gaussian bf16" + sz, seen);
    // Few distinct top bytes, escapes at several rates: code widths 1..6.
    for (int distinct : {2, 3, 5, 9, 17, 40, 70}) {
      std::geometric_distribution<int> g(0.35);
      for (uint64_t i = 0; i < n; ++i) {
        const int s = std::min(g(rng), distinct - 1);
        h[i] = static_cast<uint16_t>((s * 7 % 256) << 8 | (rng() & 0xff));
        f[i] = static_cast<uint32_t>(s * 11 % 256) << 24 | (rng() & 0xffffff);
      }
      both("geometric over " + std::to_string(distinct) + " top bytes");
    }
    for (int distinct : {1, 3, 7, 15, 31, 63}) {  // exactly a table's worth: no escapes
      for (uint64_t i = 0; i < n; ++i) {
        const int s = static_cast<int>(rng() % distinct);
        h[i] = static_cast<uint16_t>((s * 5 % 256) << 8 | (rng() & 0xff));
        f[i] = static_cast<uint32_t>(s * 3 % 256) << 24 | (rng() & 0xffffff);
      }
      both("uniform over " + std::to_string(distinct) + " top bytes");
    }
  }
  // Width 1 (quantized blocks) is stored raw.
  std::vector<uint8_t> q(100003);
  for (auto& b : q) b = static_cast<uint8_t>(rng());
  expect_round_trip(q, 1, "bytes", seen);
  for (int k = 0; k <= wpack::kMaxCodeBits; ++k) EXPECT_TRUE(seen.k.count(k)) << "code width " << k << " never chosen";
}

TEST(WpackCodec, TheAvx512DecoderIsChosenWhereTheCpuHasIt) {
  if (std::getenv("REDWOOD_ISA")) GTEST_SKIP() << "REDWOOD_ISA lowers the kernels";
  __builtin_cpu_init();
  const bool has = __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512vbmi2") &&
                   __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vnni");
  EXPECT_EQ(cpu::unpack_avx512_available(), has);
  EXPECT_STREQ(cpu::unpack_path_name(cpu::UnpackPath::kBest), has ? "avx512-vbmi2" : "scalar");
}

TEST(WpackCodec, MalformedChunksAreRejected) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  const uint64_t n = 1000;
  std::vector<uint16_t> h(n);
  for (auto& v : h) v = math::f32_to_f16(nd(rng));
  const auto raw = from_u16(h);
  std::vector<uint8_t> good;
  cpu::pack_chunk(raw.data(), n, 2, good);
  wpack::ChunkHead head;
  std::memcpy(&head, good.data(), sizeof head);
  ASSERT_EQ(head.codec, wpack::kHighByte);
  ASSERT_GT(head.n_exc, 0u);
  std::vector<uint8_t> out(n * 2);
  for (const Decoder& d : decoders()) {
    const std::string& p = d.name;
    auto with = [&](auto edit) {
      std::vector<uint8_t> c = good;
      edit(c);
      return d.run(c.data(), c.size(), out.data(), n, 2);
    };
    EXPECT_TRUE(with([](auto&) {})) << p;
    EXPECT_FALSE(with([](auto& c) { c.pop_back(); })) << p << ": short payload";
    EXPECT_FALSE(with([](auto& c) { c.push_back(0); })) << p << ": long payload";
    EXPECT_FALSE(with([](auto& c) { c[0] = 9; })) << p << ": unknown codec";
    EXPECT_FALSE(with([](auto& c) { c[1] = 0; })) << p << ": k = 0";
    EXPECT_FALSE(with([](auto& c) { c[1] = 7; })) << p << ": k = 7";
    EXPECT_FALSE(with([](auto& c) { c.resize(10); })) << p << ": no head";
    // One more exception declared (and one more byte, so the size still adds up):
    // the codes escape one time fewer than declared.
    EXPECT_FALSE(with([&](auto& c) {
      wpack::ChunkHead x;
      std::memcpy(&x, c.data(), sizeof x);
      ++x.n_exc;
      std::memcpy(c.data(), &x, sizeof x);
      c.insert(c.begin() + sizeof x + wpack::code_bytes(n, x.k), uint8_t{0});
    })) << p << ": exception count too high";
    // Every code an escape: far more escapes than exceptions.
    EXPECT_FALSE(with([&](auto& c) {
      std::fill(c.begin() + sizeof head, c.begin() + sizeof head + wpack::code_bytes(n, head.k), uint8_t{0xff});
    })) << p << ": escapes beyond the exception list";
    // One escape code turned into a table code, and one table code into an
    // escape: the count of escapes is off by one either way.
    auto recode = [&](bool to_escape) {
      return [&, to_escape](auto& c) {
        uint8_t* codes = c.data() + sizeof head;
        for (uint64_t i = 0; i < n; ++i) {
          const uint32_t code = wpack::code_at(codes, i, head.k), esc = wpack::escape_code(head.k);
          if ((code == esc) != to_escape) {
            const uint64_t bit = (i / 8) * head.k * 8 + (i % 8) * head.k;
            for (int b = 0; b < head.k; ++b) {  // write the new code bit by bit
              const uint32_t want = to_escape ? 1u : 0u;
              uint8_t& byte = codes[(bit + b) / 8];
              byte = static_cast<uint8_t>((byte & ~(1u << ((bit + b) % 8))) | (want << ((bit + b) % 8)));
            }
            return;
          }
        }
      };
    };
    EXPECT_FALSE(with(recode(true))) << p << ": one escape more than the exceptions";
    EXPECT_FALSE(with(recode(false))) << p << ": one escape fewer than the exceptions";
    EXPECT_FALSE(d.run(good.data(), good.size(), out.data(), n + 1, 2)) << p << ": wrong n";
    EXPECT_FALSE(d.run(good.data(), good.size(), out.data(), n, 3)) << p << ": width 3";
  }
}

// ---- packed models -----------------------------------------------------------

using testutil::bit_equal;
using testutil::run_passes;

std::vector<const TensorExtent*> all_extents(const ModelDesc& m) {
  std::vector<const TensorExtent*> v = {&m.tok_embd, &m.output_norm, &m.lm_head};
  for (const auto& L : m.layers)
    for (const TensorExtent* t : L.tensors()) v.push_back(t);
  return v;
}

std::vector<uint8_t> read_whole(const ModelDesc& m, const TensorExtent& t) {
  const int fd = ::open(m.files[t.file].c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0);
  std::vector<uint8_t> b(t.bytes);
  try {
    read_tensor(fd, m.files[t.file], t, b.data());
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return b;
}

offload::MemoryPlan manual_plan(const std::vector<offload::Tier>& tiers, int ring) {
  offload::MemoryPlan p;
  p.layer_tier = tiers;
  p.ring_slots = ring;
  return p;
}

std::string temp_path(const std::string& stem, const std::string& ext) {
  std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::replace(name.begin(), name.end(), '/', '_');
  return ::testing::TempDir() + stem + "_" + name + "_" + std::to_string(getpid()) + ext;
}

class PackedModel : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    src_ = temp_path("packsrc", ".gguf");
    packed_ = temp_path("packed", ".rwpk");
    testutil::TinyShape s;
    s.layers = 6;  // so that streaming is the cheapest plan even when packing saves nothing
    s.dim = 128;
    s.ffn = 640;  // w_gate, w_up, w_down: two chunks each (a chunk holds 65536 elements)
    s.type = GetParam();
    s.rope_freqs.assign(s.dim / s.heads / 2, 1.5f);  // a tensor the loader reads while parsing
    testutil::write_tiny_llama(src_, s);
    stats_ = pack_model(src_, packed_);
    desc_ = load_model_desc(src_);
    pdesc_ = load_model_desc(packed_);
  }
  void TearDown() override {
    std::remove(src_.c_str());
    std::remove(packed_.c_str());
  }
  std::string src_, packed_;
  PackStats stats_;
  ModelDesc desc_, pdesc_;
};

TEST_P(PackedModel, TensorsDecodeToTheSourceBytes) {
  EXPECT_EQ(pdesc_.format, ModelFormat::kPacked);
  EXPECT_EQ(pdesc_.hp.rope_freq_factors, desc_.hp.rope_freq_factors);
  EXPECT_EQ(pdesc_.tokenizer.tokens, desc_.tokenizer.tokens);
  const auto a = all_extents(desc_), b = all_extents(pdesc_);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i]->name, b[i]->name);
    EXPECT_TRUE(b[i]->packed);
    EXPECT_EQ(a[i]->bytes, b[i]->bytes);
    const auto x = read_whole(desc_, *a[i]), y = read_whole(pdesc_, *b[i]);
    EXPECT_EQ(XXH3_64bits(x.data(), x.size()), XXH3_64bits(y.data(), y.size())) << a[i]->name;
    EXPECT_EQ(x, y) << a[i]->name;
  }
  const DType t = GetParam();
  if (t == DType::F16 || t == DType::BF16 || t == DType::F32) {  // the codec pays on these
    EXPECT_LT(stats_.by_type[t].second, stats_.by_type[t].first) << dtype_name(t);
  }
}

TEST_P(PackedModel, LogitsAreBitIdenticalResidentAndStreamed) {
  ResidentWeights rw(desc_);
  const auto reference = run_passes(desc_, rw);
  ResidentWeights pw(pdesc_);
  EXPECT_TRUE(bit_equal(run_passes(pdesc_, pw), reference)) << "resident";
  const auto D = offload::Tier::kDevice, H = offload::Tier::kHost, S = offload::Tier::kStorage;
  for (const auto& mix : std::vector<std::vector<offload::Tier>>{{S, S, S, S, S, S}, {D, S, H, S, D, S}, {H, H, S, D, S, H}})
    for (int ring = 2; ring <= 3; ++ring) {
      offload::StreamedWeights w(pdesc_, manual_plan(mix, ring));
      EXPECT_TRUE(bit_equal(run_passes(pdesc_, w), reference)) << "ring " << ring;
      uint64_t stored = 0;
      for (int l = 0; l < 6; ++l)
        if (mix[l] == S) stored += offload::layout_layer(pdesc_.layers[l]).read_bytes();
      EXPECT_EQ(w.last_pass().storage_bytes, stored);
    }
  offload::StreamOptions o;
  o.verify_io = true;  // the decoded stream against a separate, decoded read
  offload::StreamedWeights w(pdesc_, manual_plan({S, S, S, S, S, S}, 2), o);
  EXPECT_TRUE(bit_equal(run_passes(pdesc_, w), reference)) << "--verify-io";
  offload::StreamOptions three;
  three.decode_threads = 3;  // each layer's chunks shared by the decode thread and two helpers
  offload::StreamedWeights w3(pdesc_, manual_plan({S, H, S, S, D, S}, 2), three);
  EXPECT_TRUE(bit_equal(run_passes(pdesc_, w3), reference)) << "3 decode threads";
}

// A slot link that decodes packed layers itself, as the CUDA link does (the
// stored bytes handed over as they are, the chunks expanded by the CUDA
// decoder's plan), here in host memory: the streamer's side of device
// decoding (staging images, chunk tables, host-tier streams), run on the CPU.
class DecodingLink final : public offload::HostSlotLink {
 public:
  void upload(int k, const uint8_t* src, size_t n) override {
    ++uploads;
    HostSlotLink::upload(k, src, n);
  }
  bool decodes_packed() const override { return true; }
  void init_packed(size_t staging_bytes, size_t max_chunks) override {
    staging_ = staging_bytes;
    max_chunks_ = max_chunks;
  }
  void upload_packed(int k, const uint8_t* src, size_t n, const std::vector<offload::PackedChunkJob>& jobs) override {
    ++packed_uploads;
    if (n > staging_ || jobs.size() > max_chunks_) throw Error("upload_packed: larger than init_packed said");
    failed_.resize(static_cast<size_t>(slot_count()));
    failed_[k] = false;
    for (const auto& j : jobs) {
      if (j.src + j.stored > n || j.dst + uint64_t{j.n} * j.w > slot_bytes()) throw Error("upload_packed: a job out of range");
      // Like the device's status flag: the chunks that decode are written, a failure is reported by packed_ok.
      if (!unpack_in_parts(src + j.src, j.stored, landing(k) + j.dst, j.n, static_cast<int>(j.w), 256))
        failed_[k] = true;
    }
  }
  bool packed_ok(int k) override { return !failed_.at(k); }
  int uploads = 0, packed_uploads = 0;

 private:
  std::vector<bool> failed_;
  size_t staging_ = 0, max_chunks_ = 0;
};

TEST_P(PackedModel, LogitsAreBitIdenticalWhenTheLinkDecodes) {
  ResidentWeights rw(desc_);
  const auto reference = run_passes(desc_, rw);
  const auto D = offload::Tier::kDevice, H = offload::Tier::kHost, S = offload::Tier::kStorage;
  for (const auto& mix : std::vector<std::vector<offload::Tier>>{{S, S, S, S, S, S}, {D, S, H, S, D, H}}) {
    auto link = std::make_shared<DecodingLink>();
    offload::StreamOptions o;
    o.link = link;
    offload::StreamedWeights w(pdesc_, manual_plan(mix, 2), o);
    EXPECT_TRUE(bit_equal(run_passes(pdesc_, w), reference));
    EXPECT_GT(link->packed_uploads, 0) << "the link was not asked to decode";
    EXPECT_EQ(link->uploads, 0) << "a packed layer was decoded on the host";
  }
  // --verify-io checks host-decoded bytes: the host decodes, the link copies.
  auto link = std::make_shared<DecodingLink>();
  offload::StreamOptions o;
  o.link = link;
  o.verify_io = true;
  offload::StreamedWeights w(pdesc_, manual_plan({S, S, S, S, S, S}, 2), o);
  EXPECT_TRUE(bit_equal(run_passes(pdesc_, w), reference)) << "--verify-io";
  EXPECT_EQ(link->packed_uploads, 0);
  EXPECT_GT(link->uploads, 0);
}

TEST_P(PackedModel, ThePlannerCountsStoredBytesPerPass) {
  offload::RunShape shape;
  shape.ctx = 64;
  shape.max_tokens = 8;
  offload::Budgets b;
  b.device = offload::plan_memory(desc_, nullptr, offload::Budgets{}, shape).device_min;
  const auto plain = offload::plan_memory(desc_, nullptr, b, shape);
  b.device = offload::plan_memory(pdesc_, nullptr, offload::Budgets{}, shape).device_min;
  const auto packed = offload::plan_memory(pdesc_, nullptr, b, shape);
  ASSERT_GT(plain.count(offload::Tier::kStorage), 0);
  ASSERT_EQ(packed.count(offload::Tier::kStorage), plain.count(offload::Tier::kStorage));
  uint64_t stored = 0;
  for (const auto& L : pdesc_.layers) stored += offload::layout_layer(L).read_bytes();
  EXPECT_EQ(packed.storage_bytes_per_pass, stored);
  const DType t = GetParam();
  if (t == DType::F16 || t == DType::BF16 || t == DType::F32) {
    EXPECT_LT(packed.storage_bytes_per_pass, plain.storage_bytes_per_pass);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, PackedModel, ::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q8_0),
                         [](const auto& i) { return std::string(dtype_name(i.param)); });

// ---- integrity ----------------------------------------------------------------

std::vector<uint8_t> slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}
void spit(const std::string& p, const std::vector<uint8_t>& b) {
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// Loads the model and reads every tensor, resident and streamed; returns the
// error, or "" when everything loaded (which a corrupted file must never do).
std::string load_everything(const std::string& path) {
  try {
    const ModelDesc m = load_model_desc(path);
    {  // streamed first: the stream's own checks, not the resident loader's
      std::vector<offload::Tier> all(m.layers.size(), offload::Tier::kStorage);
      offload::StreamedWeights s(m, manual_plan(all, 2));
      run_passes(m, s);
    }
    ResidentWeights w(m);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

// A tiny 2-layer model of `type`, packed; the temp files go with the object.
struct PackedTiny {
  std::string src, good, bad;  // the GGUF, its packed copy, a path for damaged copies
  std::vector<uint8_t> bytes;  // the packed file
  PackedTiny(const std::string& stem, DType type)
      : src(temp_path(stem + "_src", ".gguf")), good(temp_path(stem + "_good", ".rwpk")),
        bad(temp_path(stem + "_bad", ".rwpk")) {
    testutil::TinyShape s;
    s.layers = 2;
    s.type = type;
    testutil::write_tiny_llama(src, s);
    pack_model(src, good);
    bytes = slurp(good);
  }
  ~PackedTiny() {
    for (const auto& p : {src, good, bad}) std::remove(p.c_str());
  }
};

TEST(PackedFile, AFlippedByteAnywhereIsAnErrorNeverWrongWeights) {
  const PackedTiny f("corrupt", DType::F16);
  const std::string& good = f.good;
  const std::string& bad = f.bad;
  const auto& bytes = f.bytes;
  ASSERT_EQ(load_everything(good), "");
  PackHead h;
  std::memcpy(&h, bytes.data(), sizeof h);
  std::vector<PackIndexEntry> index(h.index_count);
  std::memcpy(index.data(), bytes.data() + h.index_offset, index.size() * sizeof(PackIndexEntry));
  // Offsets to corrupt: head fields, metadata, index, and in a layer's stream its
  // head, its directory, its first chunk's head, codes and planes, and its last
  // chunk's last byte. (The zero padding between chunks carries no weights.)
  std::vector<std::pair<std::string, uint64_t>> where = {
      {"magic", 0}, {"head offsets", 8}, {"head hash", 48}, {"metadata", h.meta_offset + 40},
      {"index", h.index_offset + 5}, {"index, second entry", h.index_offset + sizeof(PackIndexEntry) + 17}};
  for (const PackIndexEntry& e : index) {
    StreamHead sh;
    std::memcpy(&sh, bytes.data() + e.stored_offset, sizeof sh);
    if (sh.width != 2) continue;
    ChunkEntry c, last;
    std::memcpy(&c, bytes.data() + e.stored_offset + sizeof sh, sizeof c);
    std::memcpy(&last, bytes.data() + e.stored_offset + sizeof sh + (sh.n_chunks - 1) * sizeof last, sizeof last);
    const uint64_t chunk = e.stored_offset + c.offset;
    where.insert(where.end(), {{"stream head", e.stored_offset + 9},
                               {"chunk directory", e.stored_offset + sizeof sh + 12},
                               {"chunk head", chunk + 1},
                               {"chunk table", chunk + 8},
                               {"chunk codes", chunk + sizeof(wpack::ChunkHead) + 3},
                               {"chunk planes", chunk + c.stored - 1},
                               {"last chunk's last byte", e.stored_offset + last.offset + last.stored - 1}});
  }
  ASSERT_GT(where.size(), 20u);
  for (const auto& [what, off] : where) {
    auto b = bytes;
    ASSERT_LT(off, b.size()) << what;
    b[off] ^= 0x10;
    spit(bad, b);
    const std::string err = load_everything(bad);
    EXPECT_NE(err, "") << what << " at " << off << ": a corrupted file loaded";
    EXPECT_EQ(err.find('\n'), std::string::npos) << err;
  }
  for (uint64_t keep : {uint64_t{10}, uint64_t{4096}, h.index_offset, static_cast<uint64_t>(bytes.size() - 4096)}) {
    spit(bad, std::vector<uint8_t>(bytes.begin(), bytes.begin() + keep));
    EXPECT_NE(load_everything(bad), "") << "truncated to " << keep;
  }
}

// A file crafted to pass its checksums (the chunk's and the directory's
// recomputed) with a chunk that does not decode: an error on every decoding
// path, never a layer of stale or wrong weights. Two crafts: codes that escape
// far more often than the head says (found while decoding), and a head with
// k = 7 (found by the host's check before a decoding link gets the chunk).
TEST(PackedFile, ACraftedChunkThatPassesItsChecksumsIsAnError) {
  const PackedTiny f("craft", DType::F16);
  const std::string& bad = f.bad;
  const auto& bytes = f.bytes;
  const ModelDesc gm = load_model_desc(f.good);
  const TensorExtent& wq = gm.layers[1].wq;
  StreamHead sh;
  std::memcpy(&sh, bytes.data() + wq.offset, sizeof sh);
  std::vector<ChunkEntry> dir(sh.n_chunks);
  std::memcpy(dir.data(), bytes.data() + wq.offset + sizeof sh, dir.size() * sizeof(ChunkEntry));
  wpack::ChunkHead ch;
  std::memcpy(&ch, bytes.data() + wq.offset + dir[0].offset, sizeof ch);
  ASSERT_EQ(ch.codec, wpack::kHighByte) << "the tiny F16 weights should be coded";
  auto craft = [&](auto edit) {
    auto b = bytes;
    uint8_t* chunk = b.data() + wq.offset + dir[0].offset;
    edit(chunk);
    auto d = dir;
    d[0].hash = XXH3_64bits(chunk, d[0].stored);
    StreamHead h2 = sh;
    h2.dir_hash = XXH3_64bits_withSeed(d.data(), d.size() * sizeof(ChunkEntry), h2.raw_bytes);
    std::memcpy(b.data() + wq.offset, &h2, sizeof h2);
    std::memcpy(b.data() + wq.offset + sizeof h2, d.data(), d.size() * sizeof(ChunkEntry));
    spit(bad, b);
  };
  const auto all_escapes = [&](uint8_t* c) {
    std::memset(c + sizeof ch, 0xff, wpack::code_bytes(dir[0].n, ch.k));
  };
  const auto k7 = [](uint8_t* c) { c[1] = 7; };
  for (int variant = 0; variant < 2; ++variant) {
    if (variant == 0) craft(all_escapes);
    else craft(k7);
    const ModelDesc m = load_model_desc(bad);  // head and index are intact
    const std::vector<offload::Tier> all(m.layers.size(), offload::Tier::kStorage);
    for (int threads : {1, 3}) {
      try {  // decoded on the host (by the decode thread alone, or with two helpers)
        offload::StreamOptions o;
        o.decode_threads = threads;
        offload::StreamedWeights w(m, manual_plan(all, 2), o);
        run_passes(m, w);
        ADD_FAILURE() << "variant " << variant << ": host decoding accepted the crafted chunk";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("does not decode"), std::string::npos) << e.what();
      }
    }
    try {  // by a link that decodes (the CUDA link's protocol, on the CPU)
      offload::StreamOptions o;
      o.link = std::make_shared<DecodingLink>();
      offload::StreamedWeights w(m, manual_plan(all, 2), o);
      run_passes(m, w);
      ADD_FAILURE() << "variant " << variant << ": the decoding link's path accepted the crafted chunk";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("does not decode"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(variant == 0 ? "on the device" : "chunk 0"), std::string::npos) << e.what();
    }
  }
}

// Errors in both pipeline threads, the later element's first in time: the
// read thread (ahead) fails on element 2 (the next pass's layer 0) while the
// decode thread is held before element 1, whose crafted chunk then fails to
// decode. The pass waiting for element 1 gets that decode error: the error
// kept is the earliest element's. (Keeping the first in time made this pass
// wait forever; before that, it failed on the later read's error.)
TEST(PackedFile, ErrorsInBothPipelineThreadsReportTheEarliestLayerNeverHang) {
  const PackedTiny f("twoerr", DType::F16);
  const ModelDesc gm = load_model_desc(f.good);
  const TensorExtent& wq = gm.layers[1].wq;
  auto b = f.bytes;
  StreamHead sh;
  std::memcpy(&sh, b.data() + wq.offset, sizeof sh);
  std::vector<ChunkEntry> dir(sh.n_chunks);
  std::memcpy(dir.data(), b.data() + wq.offset + sizeof sh, dir.size() * sizeof(ChunkEntry));
  wpack::ChunkHead ch;
  uint8_t* chunk = b.data() + wq.offset + dir[0].offset;
  std::memcpy(&ch, chunk, sizeof ch);
  ASSERT_EQ(ch.codec, wpack::kHighByte);
  std::memset(chunk + sizeof ch, 0xff, wpack::code_bytes(dir[0].n, ch.k));  // every code an escape
  dir[0].hash = XXH3_64bits(chunk, dir[0].stored);
  sh.dir_hash = XXH3_64bits_withSeed(dir.data(), dir.size() * sizeof(ChunkEntry), sh.raw_bytes);
  std::memcpy(b.data() + wq.offset, &sh, sizeof sh);
  std::memcpy(b.data() + wq.offset + sizeof sh, dir.data(), dir.size() * sizeof(ChunkEntry));
  spit(f.bad, b);
  const ModelDesc m = load_model_desc(f.bad);

  // A host link whose slot 1 is released only once the read of element 2 has
  // failed (and 50 ms more, for the read thread to record its error).
  struct Gate {
    std::atomic<bool> open{false};
  };
  auto gate = std::make_shared<Gate>();
  class GatedLink final : public offload::HostSlotLink {
   public:
    explicit GatedLink(std::shared_ptr<Gate> g) : gate_(std::move(g)) {}
    void wait_released(int k) override {
      if (k != 1 || held_) return;
      held_ = true;
      for (int i = 0; i < 10000 && !gate_->open; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }

   private:
    std::shared_ptr<Gate> gate_;
    bool held_ = false;
  };
  offload::StreamOptions o;
  o.link = std::make_shared<GatedLink>(gate);
  const uint64_t layer0 = m.layers[0].wq.offset;
  auto reads_of_layer0 = std::make_shared<std::atomic<int>>(0);
  o.reader.fault = [gate, layer0, reads_of_layer0](int, uint64_t off, uint64_t want, int64_t res) -> int64_t {
    if (off <= layer0 && layer0 < off + want && ++*reads_of_layer0 == 2) {
      gate->open = true;
      return -EIO;
    }
    return res;
  };
  const std::vector<offload::Tier> all(m.layers.size(), offload::Tier::kStorage);
  auto w = std::make_unique<offload::StreamedWeights>(m, manual_plan(all, 2), o);
  auto pass = std::async(std::launch::async, [&]() -> std::string {
    try {
      run_passes(m, *w);
      return "(no error)";
    } catch (const Error& e) {
      return e.what();
    }
  });
  if (pass.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    ADD_FAILURE() << "the pass waits forever for a layer whose decode failed";
    std::abort();  // the streamer cannot be joined; nothing else to do
  }
  const std::string err = pass.get();
  EXPECT_TRUE(gate->open) << "the read of element 2 never failed: the test did not set up its race";
  EXPECT_NE(err.find("does not decode"), std::string::npos) << err;
}

// Property test over random damage (fuzzing by mutation, seeded): each of many
// random byte flips, runs of zeros and truncations either makes loading fail
// with redwood::Error or leaves every weight as it was (a flip in the zero
// padding between chunks); never a crash, never a different weight.
TEST(PackedFile, RandomDamageIsAnErrorOrHarmless) {
  const PackedTiny f("damage", DType::BF16);
  const std::string& good = f.good;
  const std::string& bad = f.bad;
  const auto& bytes = f.bytes;
  const ModelDesc ref = load_model_desc(good);
  std::vector<std::vector<uint8_t>> want;
  for (const TensorExtent* t : all_extents(ref)) want.push_back(read_whole(ref, *t));
  std::mt19937_64 rng(11);
  int errors = 0, harmless = 0;
  for (int trial = 0; trial < 300; ++trial) {
    auto b = bytes;
    const uint64_t at = rng() % b.size();
    switch (trial % 3) {
      case 0: b[at] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
      case 1: std::fill(b.begin() + at, b.begin() + std::min<uint64_t>(b.size(), at + 1 + rng() % 64), uint8_t{0}); break;
      default: b.resize(at); break;
    }
    spit(bad, b);
    if (!load_everything(bad).empty()) {
      ++errors;
      continue;
    }
    const ModelDesc m = load_model_desc(bad);
    const auto ext = all_extents(m);
    for (size_t i = 0; i < ext.size(); ++i) ASSERT_EQ(read_whole(m, *ext[i]), want[i]) << "trial " << trial << " at " << at;
    ++harmless;
  }
  EXPECT_GT(errors, 150);
  RecordProperty("harmless", harmless);
}

TEST(PackedFile, PackRefusesItsInputAPackedSourceAndNonGguf) {
  const std::string src = temp_path("refuse_src", ".gguf"), out = temp_path("refuse_out", ".rwpk"),
                    again = temp_path("refuse_again", ".rwpk"), junk = temp_path("refuse_junk", ".bin");
  testutil::TinyShape s;
  testutil::write_tiny_llama(src, s);
  const auto before = slurp(src);
  EXPECT_THROW(pack_model(src, src), Error);
  EXPECT_EQ(slurp(src), before) << "the input was touched";
  pack_model(src, out);
  try {
    pack_model(out, again);
    ADD_FAILURE() << "packed a packed model";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already packed"), std::string::npos) << e.what();
  }
  EXPECT_NE(access(again.c_str(), F_OK), 0);
  spit(junk, std::vector<uint8_t>(5000, 7));
  EXPECT_THROW(pack_model(junk, again), Error);
  EXPECT_NE(access(again.c_str(), F_OK), 0) << "a failed pack left its output";
  for (const auto& p : {src, out, again, junk}) std::remove(p.c_str());
}

}  // namespace
