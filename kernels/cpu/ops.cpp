// The CPU backend: element-wise and row-wise ops here, matmul and attention in
// their own files. Per-element math comes from kernels/common/math.h.
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/backend.h"
#include "kernels/common/math.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/simd.h"
#include "src/util/error.h"

namespace redwood {
namespace {

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }

  bool host_memory() const override { return true; }
  void* alloc(size_t bytes) override {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) throw Error("out of memory: could not allocate " + std::to_string(bytes) + " bytes");
    return p;
  }
  void release(void* p) override { std::free(p); }
  void upload(void* dst, const void* src, size_t bytes) override { memcpy(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { memcpy(dst, src, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override { memmove(dst, src, bytes); }

  void matmul(const WeightView& w, const float* x, int n, float* y) override { cpu::matmul(w, x, n, y); }

  void embed(const WeightView& e, const int32_t* ids, int n, float* out) override {
    for (int t = 0; t < n; ++t) cpu::dequantize_rows(e, ids[t], 1, out + static_cast<int64_t>(t) * e.cols);
  }

  void rmsnorm(const float* x, const float* w, int n, int dim, float eps, float* out) override {
    tbb::parallel_for(0, n, [&](int t) {
      const float* xi = x + static_cast<int64_t>(t) * dim;
      float* o = out + static_cast<int64_t>(t) * dim;
      double ss = 0;
      for (int i = 0; i < dim; ++i) ss += static_cast<double>(xi[i]) * xi[i];
      const float s = math::rms_scale(static_cast<float>(ss), dim, eps);
      for (int i = 0; i < dim; ++i) o[i] = xi[i] * s * w[i];
    });
  }

  void add_rmsnorm(float* x, const float* y, const float* w, int n, int dim, float eps, float* out) override {
    tbb::parallel_for(0, n, [&](int t) {
      float* xi = x + static_cast<int64_t>(t) * dim;
      const float* yi = y + static_cast<int64_t>(t) * dim;
      float* o = out + static_cast<int64_t>(t) * dim;
      double ss = 0;
      for (int i = 0; i < dim; ++i) {
        xi[i] += yi[i];
        ss += static_cast<double>(xi[i]) * xi[i];
      }
      const float s = math::rms_scale(static_cast<float>(ss), dim, eps);
      for (int i = 0; i < dim; ++i) o[i] = xi[i] * s * w[i];
    });
  }

  void rope(float* x, int n, int n_heads, int head_dim, const int32_t* pos, const double* inv_freq,
            RopeMode mode) override {
    const int half = head_dim / 2;
    tbb::parallel_for(0, n, [&](int t) {
      std::vector<float> cs(head_dim);
      for (int i = 0; i < half; ++i) {
        const float th = math::rope_theta(pos[t], inv_freq[i]);
        cs[2 * i] = std::cos(th);
        cs[2 * i + 1] = std::sin(th);
      }
      for (int h = 0; h < n_heads; ++h) {
        float* v = x + (static_cast<int64_t>(t) * n_heads + h) * head_dim;
        for (int i = 0; i < half; ++i) {
          if (mode == RopeMode::kInterleaved)
            math::rope_rotate(v[2 * i], v[2 * i + 1], cs[2 * i], cs[2 * i + 1]);
          else
            math::rope_rotate(v[i], v[i + half], cs[2 * i], cs[2 * i + 1]);
        }
      }
    });
  }

  void attention(const AttentionArgs& a) override { cpu::attention(a); }
  bool supports_kv_type(DType t) const override {
    return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::Q8_0;
  }

  void write_rows(void* base, DType type, const int32_t* first_row_at, const float* src, int rows,
                  int row_floats) override {
    cpu::write_kv_rows(base, type, *first_row_at, src, rows, row_floats);
  }
  void write_rows_at(void* base, DType type, const int32_t* row_at, const float* src, int rows,
                     int row_floats) override {
    cpu::write_kv_rows_at(base, type, row_at, src, rows, row_floats);
  }

  void swiglu(float* gate, const float* up, size_t count) override {
    tbb::parallel_for(tbb::blocked_range<size_t>(0, count, 4096), [&](const tbb::blocked_range<size_t>& r) {
      for (size_t i = r.begin(); i < r.end(); ++i) gate[i] = math::silu(gate[i]) * up[i];
    });
  }

  void add(float* x, const float* y, size_t count) override {
    for (size_t i = 0; i < count; ++i) x[i] += y[i];
  }

  void add_bias(float* x, const float* b, int n, int width) override {
    for (int t = 0; t < n; ++t) {
      float* xi = x + static_cast<int64_t>(t) * width;
      for (int c = 0; c < width; ++c) xi[c] += b[c];
    }
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() {
  return std::make_unique<CpuBackend>();
}

const char* cpu_kernel_isa() {
  return cpu::isa_name(cpu::kernel_isa());
}

}  // namespace redwood
