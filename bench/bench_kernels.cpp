// Foundation benchmark (docs/PERFORMANCE.md). All ratios come from one run:
//   copy_bw   STREAM-style copy, all threads (bytes read + written per second)
//   fma_peak  independent FMA chains (512-bit where built) on all threads, best of 3 (FLOP/s)
//   gemv      n = 1 matmul over a matrix much larger than the caches: weight bytes
//             read per second, as a fraction of copy_bw (goal >= 0.8); also in
//             adjacent pairs with single copies, beside the read-only sum's
//             ratio (the ceiling for any GEMV)
//   gemm      n >= 64 matmul: FLOP/s as a fraction of fma_peak (goal >= 0.5)
//   model     decode and 64-token prefill tokens/s on given GGUF models
// With --cuda (a GPU and the CUDA backend), the same on the device instead,
// through the Backend interface: device copy bandwidth (cudaMemcpy D2D, read +
// write), GEMV n = 1 weight bytes per second as a fraction of it, batched
// matmul FLOP/s (n = 64, 256, 768), and the models on --backend cuda.
// Usage: bench_kernels --help
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/threads.h"
#include "src/engine/transformer.h"
#include "src/engine/weights.h"
#include "src/model/model_desc.h"
#include "src/util/error.h"
#include "tests/util/tiny_gguf.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

using namespace redwood;
using Clock = std::chrono::steady_clock;

namespace {

// The weight types of the GEMV tables (Q5_1 and Q2_K share their neighbours' kernels).
constexpr DType kGemvTypes[] = {DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1,   DType::Q5_0,
                                DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_NL, DType::IQ4_XS};

double secs(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

template <class F>
double median_time(int reps, F&& f) {
  f();  // warm-up
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto a = Clock::now();
    f();
    t.push_back(secs(a, Clock::now()));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// The bandwidth buffers are AlignedBuffers (2 MiB aligned, transparent huge
// pages advised), as the GEMV's matrices and model weights are, so both sides
// of a ratio see the same page size. The copy is an explicit loop with
// non-temporal stores, the fastest copy these machines do: glibc's memcpy
// switches to such stores only above a size threshold, and below it the
// stores' read-for-ownership traffic made a 256 MiB copy run at 24 GB/s
// against 38-41 GB/s at 512 MiB on the 2026-11-24 Zen 3 VM.
//
// Preallocated buffers for one timed copy or read-only pass at a time (the
// paired GEMV table interleaves single passes with GEMVs).
class BandwidthProbe {
 public:
  explicit BandwidthProbe(size_t bytes)
      : n_(bytes / sizeof(float) / 64 * 64), abuf_(n_ * sizeof(float)), bbuf_(n_ * sizeof(float)) {
    std::fill_n(a(), n_, 1.0f);
    std::fill_n(b(), n_, 0.0f);
  }
  size_t bytes() const { return n_ * sizeof(float); }
  // Seconds for one copy of the buffer (read + write), all threads.
  double copy_once() {
    const int threads = cpu_threads();
    float* const src = a();
    float* const dst = b();
    const auto t0 = Clock::now();
    tbb::parallel_for(0, threads, [&](int k) {
      const size_t lo = n_ * k / threads / 8 * 8, hi = k + 1 == threads ? n_ : n_ * (k + 1) / threads / 8 * 8;
#if defined(__AVX2__)
      for (size_t i = lo; i < hi; i += 8) _mm256_stream_ps(dst + i, _mm256_load_ps(src + i));
      _mm_sfence();
#else
      memcpy(dst + lo, src + lo, (hi - lo) * sizeof(float));
#endif
    });
    return secs(t0, Clock::now());
  }
  // Seconds for one parallel sum over the buffer (what a GEMV does).
  double read_once() {
    const int threads = cpu_threads();
    const float* const src = a();
    std::vector<float> sink(threads);
    const auto t0 = Clock::now();
    tbb::parallel_for(0, threads, [&](int k) {
      const size_t lo = n_ * k / threads, hi = n_ * (k + 1) / threads;
#if defined(__AVX2__)
      __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
      size_t i = lo;
      for (; i + 32 <= hi; i += 32) {
        s0 = _mm256_add_ps(s0, _mm256_loadu_ps(&src[i]));
        s1 = _mm256_add_ps(s1, _mm256_loadu_ps(&src[i + 8]));
        s2 = _mm256_add_ps(s2, _mm256_loadu_ps(&src[i + 16]));
        s3 = _mm256_add_ps(s3, _mm256_loadu_ps(&src[i + 24]));
      }
      float tmp[8];
      _mm256_storeu_ps(tmp, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
      sink[k] = tmp[0] + tmp[7];
#else
      float s = 0;
      for (size_t i = lo; i < hi; ++i) s += src[i];
      sink[k] = s;
#endif
    });
    const double t = secs(t0, Clock::now());
    volatile float keep = sink[0];
    (void)keep;
    return t;
  }

 private:
  float* a() {
    return reinterpret_cast<float*>(abuf_.data());
  }
  float* b() {
    return reinterpret_cast<float*>(bbuf_.data());
  }
  size_t n_;
  AlignedBuffer abuf_, bbuf_;
};

double copy_bandwidth(BandwidthProbe& p) {
  return 2.0 * static_cast<double>(p.bytes()) / median_time(5, [&] { p.copy_once(); });  // STREAM counts read + write
}

// Read-only bandwidth: a parallel sum over a large array (what a GEMV does).
double read_bandwidth(BandwidthProbe& p) {
  return static_cast<double>(p.bytes()) / median_time(5, [&] { p.read_once(); });
}

// Independent FMA chains on every thread, each thread its own std::thread (a
// oneTBB loop over `threads` items may run two of them on one worker, which
// once measured 140 of this machine's ~234 GFLOP/s). The best of three runs:
// interference can only lower a peak.
template <typename Chains>
double peak_of(Chains chains, double flop_per_thread) {
  const int threads = cpu_threads();
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<float> sink(threads);
    std::vector<std::thread> pool;
    const auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < threads; ++k) pool.emplace_back([&, k] { sink[k] = chains(k); });
    for (auto& th : pool) th.join();
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, threads * flop_per_thread / t);
  }
  return best;
}

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
// Ten independent 512-bit FMA chains (compiled for AVX-512 whatever the
// baseline; run only where the CPU has it).
__attribute__((target("avx512f"))) float fma_chains512(int k, long iters) {
  __m512 acc[10];
  for (int i = 0; i < 10; ++i) acc[i] = _mm512_set1_ps(0.001f * (i + k));
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (long it = 0; it < iters; ++it)
    for (int i = 0; i < 10; ++i) acc[i] = _mm512_fmadd_ps(acc[i], m, c);
  alignas(64) float tmp[16];
  float s = 0;
  for (int i = 0; i < 10; ++i) {
    _mm512_store_ps(tmp, acc[i]);
    s += tmp[0];
  }
  return s;
}
#endif

double fma_peak() {
  [[maybe_unused]] const long iters = 20'000'000;
#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
  // 512-bit FMAs where the kernels use them (the AVX-512 GEMM does): the
  // machine's real peak, not the AVX2 half of it.
  if (cpu::kernel_isa() >= cpu::Isa::avx512)
    return peak_of([&](int k) { return fma_chains512(k, iters); }, static_cast<double>(iters) * 10 * 16 * 2);
#endif
#if defined(__AVX2__) && defined(__FMA__)
  return peak_of(
      [&](int k) {
        __m256 acc[10];
        for (int i = 0; i < 10; ++i) acc[i] = _mm256_set1_ps(0.001f * (i + k));
        const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
        for (long it = 0; it < iters; ++it)
          for (int i = 0; i < 10; ++i) acc[i] = _mm256_fmadd_ps(acc[i], m, c);
        float s = 0, tmp[8];
        for (int i = 0; i < 10; ++i) {
          _mm256_storeu_ps(tmp, acc[i]);
          s += tmp[0];
        }
        return s;
      },
      static_cast<double>(iters) * 10 * 8 * 2);
#else
  return 0;
#endif
}

// Matrices live in AlignedBuffer (2 MiB aligned, transparent huge pages), as
// model weights do.
struct Mat {
  AlignedBuffer buf;
  size_t size = 0;
  WeightView view;
};

Mat random_matrix(DType t, int64_t rows, int64_t cols) {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  Mat m;
  const size_t rb = *row_bytes(t, cols);
  m.size = rows * rb;
  m.buf = AlignedBuffer(m.size);
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& x : row) x = nd(rng);
    auto q = testutil::quantize_row(t, row.data(), cols);
    memcpy(m.buf.data() + r * rb, q.data(), rb);
  }
  m.view = WeightView{t, rows, cols, m.buf.data()};
  return m;
}

// Decode (n = 1 after a 64-token prompt, mean of decode_n tokens) and 64-token
// prefill (median of prefill_reps) of one model, in tokens per second.
struct ModelRates {
  double decode_tok_s, prefill_tok_s;
};
ModelRates decode_and_prefill(Transformer& tf, const ModelDesc& d, int decode_n, int prefill_reps) {
  std::vector<int32_t> prompt(64);
  for (int i = 0; i < 64; ++i) prompt[i] = (i * 7919) % d.hp.vocab;
  std::vector<float> lg(d.hp.vocab);
  const double tp = median_time(prefill_reps, [&] {
    KvCache kv = tf.make_cache(64);
    ChainBatch b(prompt, 0);
    tf.forward(b.view(), kv, lg, LogitsRows::kLast);
  });
  KvCache kv = tf.make_cache(64 + decode_n + 1);
  ChainBatch b(prompt, 0);
  tf.forward(b.view(), kv, lg, LogitsRows::kLast);
  kv.commit_prefix(64);
  auto a = Clock::now();
  for (int i = 0; i < decode_n; ++i) {
    const int32_t tok = (i * 31) % d.hp.vocab, pos = kv.committed(), par = -1;
    tf.forward(Batch{{&tok, 1}, {&pos, 1}, {&par, 1}}, kv, lg, LogitsRows::kLast);
    kv.commit_prefix(1);
  }
  return {decode_n / secs(a, Clock::now()), 64.0 / tp};
}

// The device half (--cuda): every figure through the Backend interface, timed
// on the host around synchronize() (median of several runs of ten launches).
void cuda_section(nlohmann::json& J, bool quick, const std::vector<std::string>& models) {
  std::unique_ptr<Backend> be = make_cuda_backend();
  // Ten launches back to back per host wait (as in a pass, where launches
  // queue ahead of the device), so the launch-and-wait round trip of a few
  // microseconds is not charged to a kernel of a few tens.
  constexpr int kBatch = 10;
  auto timed = [&](int reps, const std::function<void()>& f) {
    f();
    be->synchronize();
    return median_time(reps,
                       [&] {
                         for (int i = 0; i < kBatch; ++i) f();
                         be->synchronize();
                       }) /
           kBatch;
  };
  const size_t cb = quick ? (256ull << 20) : (1ull << 30);
  BackendBuffer a(*be, cb), b(*be, cb);
  const double copy_bw = 2.0 * cb / timed(5, [&] { be->copy(b.as(), a.as(), cb); });
  J["cuda"]["copy_bw_GBps"] = copy_bw / 1e9;
  std::printf("device (%s): copy %.1f GB/s (read + write)\n", be->name(), copy_bw / 1e9);
  // 134 MB at F16, 71 MB at Q8_0: larger than any L2; the 4-bit types (29-55 MB)
  // can fit in an H100/H200 L2 (50-60 MB), so their figures may be partly L2.
  const int64_t rows = 8192, cols = 8192;
  std::printf("\nGEMV n=1, %lld x %lld on the device (weight bytes per second / device copy bandwidth)\n",
              (long long)rows, (long long)cols);
  for (DType t : kGemvTypes) {
    Mat m = random_matrix(t, rows, cols);
    BackendBuffer w(*be, m.size), x(*be, cols * sizeof(float)), y(*be, 768 * rows * sizeof(float));
    be->upload(w.as(), m.buf.data(), m.size);
    std::vector<float> xs(static_cast<size_t>(768) * cols, 0.5f);
    BackendBuffer xb(*be, xs.size() * sizeof(float));
    be->upload(xb.as(), xs.data(), xs.size() * sizeof(float));
    const WeightView v{t, rows, cols, w.as()};
    const double tt = timed(quick ? 5 : 20, [&] { be->matmul(v, xb.as<float>(), 1, y.as<float>()); });
    const double gbps = m.size / tt;
    std::printf("  %-5s %8.2f MB  %7.3f ms  %7.1f GB/s  ratio %.2f\n", std::string(dtype_name(t)).c_str(), m.size / 1e6,
                tt * 1e3, gbps / 1e9, gbps / copy_bw);
    J["cuda"]["gemv"][std::string(dtype_name(t))] = {{"GBps", gbps / 1e9}, {"ratio_to_copy", gbps / copy_bw}};
    for (int n : {64, 256, 768}) {
      const double tg = timed(quick ? 3 : 10, [&] { be->matmul(v, xb.as<float>(), n, y.as<float>()); });
      const double fl = 2.0 * n * rows * cols / tg;
      std::printf("        n=%-4d %8.3f ms  %8.1f TFLOP/s\n", n, tg * 1e3, fl / 1e12);
      J["cuda"]["gemm"][std::string(dtype_name(t))][std::to_string(n)] = {{"TFLOPs", fl / 1e12}, {"ms", tg * 1e3}};
    }
  }
  for (const auto& path : models) {
    ModelDesc d = load_model_desc(path);
    DeviceWeights w(d, *be);
    Transformer tf(d, w, *be);
    const ModelRates mr = decode_and_prefill(tf, d, 32, 3);
    const double gb = d.total_bytes() / 1e9;
    std::printf(
        "\nmodel %s on the device (%.2f GB)\n  decode  %8.2f tokens/s (%.1f GB/s effective)\n  prefill "
        "%8.2f tokens/s (64 tokens)\n",
        path.c_str(), gb, mr.decode_tok_s, gb * mr.decode_tok_s, mr.prefill_tok_s);
    J["cuda"]["models"][path] = {
        {"weights_GB", gb}, {"decode_tok_s", mr.decode_tok_s}, {"prefill64_tok_s", mr.prefill_tok_s}};
  }
}

}  // namespace

constexpr const char* kUsage =
    "usage: bench_kernels [--quick] [--gemv-only | --models-only] [--cuda] [--json FILE] [MODEL.gguf ...]\n"
    "  The foundation benchmark (docs/PERFORMANCE.md): copy and read bandwidth, FMA peak, GEMV and batched\n"
    "  matmul ratios, then decode and 64-token prefill of each MODEL.\n"
    "  --quick        smaller sizes and fewer repetitions (a smoke run)\n"
    "  --gemv-only    the bandwidths and the GEMV table only\n"
    "  --models-only  the models only\n"
    "  --cuda         the same on the CUDA backend (needs a GPU)\n"
    "  --json FILE    also write the results as JSON\n";

static int run(int argc, char** argv) {
  bool quick = false, models_only = false, cuda = false, gemv_only = false;
  std::string json_out;
  std::vector<std::string> models;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick")
      quick = true;
    else if (a == "--cuda")
      cuda = true;
    else if (a == "--models-only")  // decode and prefill of the given models only
      models_only = true;
    else if (a == "--gemv-only")  // the copy bandwidth and the GEMV table only
      gemv_only = true;
    else if (a == "--json" && i + 1 < argc)
      json_out = argv[++i];
    else if (a == "--help" || a == "-h") {
      std::printf("%s", kUsage);
      return 0;
    } else if (a.starts_with("-"))
      throw Error("unknown option " + a + " (see --help)");
    else
      models.push_back(a);
  }
  for (const auto& path : models) load_model_desc(path);  // a bad file fails now, not after the kernel tables
  set_cpu_threads(0);
  nlohmann::json J;
  if (cuda) {
    try {
      cuda_section(J, quick, models);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_kernels: %s\n", e.what());
      return 1;
    }
    if (!json_out.empty()) std::ofstream(json_out) << J.dump(2) << "\n";
    return 0;
  }
  J["threads"] = cpu_threads();
  if (!models_only) {  // the kernel tables
    double bw, rbw;
    {
      BandwidthProbe top(quick ? (64ull << 20) : (512ull << 20));
      bw = copy_bandwidth(top);
      rbw = read_bandwidth(top);
    }
    const double peak = fma_peak();
    J["read_bw_GBps"] = rbw / 1e9;
    J["copy_bw_GBps"] = bw / 1e9;
    J["fma_peak_GFLOPs"] = peak / 1e9;
    std::printf("threads %d | STREAM-style copy %.2f GB/s | read-only sum %.2f GB/s | FMA peak %.1f GFLOP/s\n",
                cpu_threads(), bw / 1e9, rbw / 1e9, peak / 1e9);

    // GEMV: a matrix far larger than the last-level cache.
    const int64_t rows = quick ? 2048 : 8192, cols = quick ? 2048 : 8192;
    std::printf(
        "\nGEMV n=1, %lld x %lld (weight bytes read per second / copy bandwidth ; / read-only bandwidth, both around "
        "it)\n",
        (long long)rows, (long long)cols);
    // This VM's memory bandwidth drifts (other tenants): the copy and read-only
    // bandwidths are measured again right before and after each type's GEMV,
    // and each ratio is to the mean of those two, so a ratio compares figures
    // taken seconds apart.
    const size_t bw_bytes = quick ? (64ull << 20) : (256ull << 20);
    struct GemvRun {
      double seconds, bw_here, rbw_here;  // median time; copy and read-only bandwidth around it (B/s)
    };
    BandwidthProbe around(bw_bytes);  // allocated once for every measurement below
    auto gemv_run = [&](const Mat& m, int reps) {
      std::vector<float> x(m.view.cols, 0.5f), y(m.view.rows);
      const double bw_before = copy_bandwidth(around), rbw_before = read_bandwidth(around);
      const double tt = median_time(reps, [&] { cpu::matmul(m.view, x.data(), 1, y.data()); });
      const double rbw_after = read_bandwidth(around);
      return GemvRun{tt, 0.5 * (bw_before + copy_bandwidth(around)), 0.5 * (rbw_before + rbw_after)};
    };
    for (DType t : kGemvTypes) {
      Mat m = random_matrix(t, rows, cols);
      const auto [tt, bw_here, rbw_here] = gemv_run(m, quick ? 3 : 9);
      const double gbps = m.size / tt;
      std::printf(
          "  %-5s %8.2f MB  %7.3f ms  %6.2f GB/s  ratio %.2f (copy bw here %.2f GB/s) ; %.2f (read bw here %.2f)\n",
          std::string(dtype_name(t)).c_str(), m.size / 1e6, tt * 1e3, gbps / 1e9, gbps / bw_here, bw_here / 1e9,
          gbps / rbw_here, rbw_here / 1e9);
      J["gemv"][std::string(dtype_name(t))] = {{"GBps", gbps / 1e9},
                                               {"ratio_to_copy", gbps / bw_here},
                                               {"copy_bw_here_GBps", bw_here / 1e9},
                                               {"ratio_to_read", gbps / rbw_here},
                                               {"read_bw_here_GBps", rbw_here / 1e9},
                                               {"ms", tt * 1e3}};
    }
    // The same ratios with the copy and the GEMV in adjacent pairs: copy,
    // three GEMVs, copy, 40 times over; each pair's ratio is the GEMVs' rate
    // to the mean of the two copies around them (milliseconds apart). The
    // bandwidth of a VM can swing between states within seconds (the Zen 4
    // VM of 2026-11-26: copy 35-72 GB/s), which the table above only
    // averages out over seconds. "read-only" is the parallel sum as the
    // pass: the ceiling for any GEMV.
    if (!quick) {
      std::printf(
          "\nGEMV n=1 against the copy in adjacent pairs (copy, 3 passes, copy; 40 pairs): median ratio (quartiles)\n");
      BandwidthProbe& probe = around;
      auto paired = [&](const std::string& name, double bytes, auto&& pass) {
        std::vector<double> ratio;
        probe.copy_once();
        pass();
        for (int i = 0; i < 40; ++i) {
          const double c0 = probe.copy_once();
          const auto t0 = Clock::now();
          for (int k = 0; k < 3; ++k) pass();
          const double tp = secs(t0, Clock::now());
          const double copy_rate = 2.0 * static_cast<double>(probe.bytes()) / (0.5 * (c0 + probe.copy_once()));
          ratio.push_back(3.0 * bytes / tp / copy_rate);
        }
        std::sort(ratio.begin(), ratio.end());
        const double med = 0.5 * (ratio[19] + ratio[20]), q1 = ratio[10], q3 = ratio[29];
        std::printf("  %-10s ratio %.2f (%.2f-%.2f)\n", name.c_str(), med, q1, q3);
        J["gemv_paired"][name] = {{"median", med}, {"q1", q1}, {"q3", q3}};
      };
      paired("read-only", static_cast<double>(probe.bytes()), [&] { probe.read_once(); });
      for (DType t : {DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1}) {
        Mat m = random_matrix(t, rows, cols);
        std::vector<float> x(m.view.cols, 0.5f), y(m.view.rows);
        paired(std::string(dtype_name(t)), static_cast<double>(m.size),
               [&] { cpu::matmul(m.view, x.data(), 1, y.data()); });
      }
    }

    // The same GEMV on one thread over a matrix that stays in the L2 cache:
    // the kernel's own speed with memory out of the way. Where one thread's
    // in-cache time per block, times the blocks each thread takes, is near the
    // GEMV time above, that GEMV is bound by its instructions, not by memory.
    {
      std::printf("\nGEMV n=1 in the L2 cache, one thread (ns per 32-weight block)\n");
      set_cpu_threads(1);
      for (DType t : kGemvTypes) {
        if (t == DType::BF16) continue;  // of the 16-bit types, F16 only
        std::string line = "  " + std::string(dtype_name(t));
        line.resize(8, ' ');
        for (int64_t c : {int64_t{2048}, int64_t{8192}}) {  // short and long rows (kernels/cpu/matmul_kernels.h kLongRow)
          const int64_t r = std::max<int64_t>(16, (256 << 10) / static_cast<int64_t>(*row_bytes(t, c)) / 16 * 16);
          Mat m = random_matrix(t, r, c);  // about 256 KiB
          std::vector<float> x(c, 0.5f), y(m.view.rows);
          const double tt = median_time(quick ? 3 : 9, [&] {
            for (int i = 0; i < 20; ++i) cpu::matmul(m.view, x.data(), 1, y.data());
          });
          const double ns = tt / 20 / (m.view.rows * c / 32.0) * 1e9;
          char buf[96];
          std::snprintf(buf, sizeof buf, "  %lld cols %6.3f ns", (long long)c, ns);
          line += buf;
          J["gemv_in_cache"][std::string(dtype_name(t))][std::to_string(c)] = {{"ns_per_block", ns}};
        }
        std::printf("%s\n", line.c_str());
      }
      set_cpu_threads(0);
    }
    if (gemv_only) {
      if (!json_out.empty()) std::ofstream(json_out) << J.dump(2) << "\n";
      return 0;
    }

    // The same quantized GEMV over rows of different lengths (about the same
    // bytes): with long rows the float activation vector (4 bytes per column)
    // no longer stays in L1 while the weights stream past it.
    if (!quick) {
      std::printf(
          "\nGEMV n=1 by row length (GB/s of weights; ratio to the copy ; to the read-only bandwidth around it)\n");
      for (DType t : {DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_1}) {
        for (auto [r, c] : {std::pair<int64_t, int64_t>{16384, 4096}, {8192, 8192}, {4096, 28672}}) {
          Mat m = random_matrix(t, r, c);
          const auto [tt, bw_here, rbw_here] = gemv_run(m, 9);
          const double gbps = m.size / tt;
          const std::string shape = std::to_string(r) + "x" + std::to_string(c);
          std::printf("  %-5s %-11s %6.2f GB/s  ratio %.2f ; %.2f\n", std::string(dtype_name(t)).c_str(), shape.c_str(),
                      gbps / 1e9, gbps / bw_here, gbps / rbw_here);
          J["gemv_by_row_length"][std::string(dtype_name(t))][shape] = {
              {"GBps", gbps / 1e9}, {"ratio_to_copy", gbps / bw_here}, {"ratio_to_read", gbps / rbw_here}};
        }
      }
    }

    // GEMM: prefill / tree batches.
    const int64_t gr = quick ? 1024 : 4096, gc = quick ? 1024 : 4096;
    std::printf("\nbatched matmul %lld x %lld (FLOP/s / FMA peak)\n", (long long)gr, (long long)gc);
    for (DType t : {DType::F32, DType::F16, DType::Q4_0}) {
      Mat m = random_matrix(t, gr, gc);
      for (int n : {64, 256}) {
        std::vector<float> x(n * gc, 0.25f), y(n * gr);
        const double tt = median_time(quick ? 2 : 5, [&] { cpu::matmul(m.view, x.data(), n, y.data()); });
        const double fl = 2.0 * n * gr * gc / tt;
        std::printf("  %-5s n=%-4d %8.3f ms  %7.1f GFLOP/s  ratio %.2f\n", std::string(dtype_name(t)).c_str(), n,
                    tt * 1e3, fl / 1e9, peak > 0 ? fl / peak : 0.0);
        J["gemm"][std::string(dtype_name(t))][std::to_string(n)] = {{"GFLOPs", fl / 1e9},
                                                                    {"ratio_to_peak", peak > 0 ? fl / peak : 0.0}};
      }
    }

    // Small batches (tree levels, small trees) on an LM head shaped like
    // SmolLM2's (49152 x 576, Q8_0): n <= 8 is the GEMV path, larger n the
    // batched kernel, whose 16-token vectors are partly empty below n = 16.
    {
      Mat m = random_matrix(DType::Q8_0, 49152, 576);
      std::printf("\nsmall batches, LM head 49152 x 576 Q8_0 (ms per pass; ms per token)\n");
      for (int n : {1, 8, 9, 16, 32}) {
        std::vector<float> x(n * 576, 0.25f), y(n * 49152);
        const double tt = median_time(quick ? 3 : 9, [&] { cpu::matmul(m.view, x.data(), n, y.data()); });
        std::printf("  n=%-3d %8.3f ms  %7.3f ms/token\n", n, tt * 1e3, tt * 1e3 / n);
        J["small_batches"][std::to_string(n)] = {{"ms", tt * 1e3}, {"ms_per_token", tt * 1e3 / n}};
      }
    }

  }  // !models_only

  // Whole models: decode (n = 1 after a 64-token prompt) and 64-token prefill.
  for (const auto& path : models) {
    ModelDesc d = load_model_desc(path);
    ResidentWeights w(d);
    auto be = make_cpu_backend();
    Transformer tf(d, w, *be);
    const ModelRates mr = decode_and_prefill(tf, d, quick ? 8 : 32, quick ? 1 : 3);
    const double gb = d.total_bytes() / 1e9;
    std::printf(
        "\nmodel %s (%.2f GB weights)\n  decode  %7.2f tokens/s (%.1f GB/s effective)\n  prefill %7.2f tokens/s "
        "(64 tokens)\n",
        path.c_str(), gb, mr.decode_tok_s, gb * mr.decode_tok_s, mr.prefill_tok_s);
    J["models"][path] = {{"weights_GB", gb}, {"decode_tok_s", mr.decode_tok_s}, {"prefill64_tok_s", mr.prefill_tok_s}};
  }
  if (!json_out.empty()) std::ofstream(json_out) << J.dump(2) << "\n";
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_kernels: %s\n", e.what());
    return 1;
  }
}
