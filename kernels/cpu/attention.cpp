#include "kernels/cpu/attention.h"

#include <oneapi/tbb/blocked_range2d.h>
#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/parallel_for.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/simd.h"

namespace redwood::cpu {

// One task = one new token x one KV head: the group's query heads share the
// same keys, so each key row is loaded once per group. Scores are materialized
// per (token, head) over prefix + ancestors (at most n_past + depth entries).
void attention(const AttentionArgs& args) {
  AttentionArgs a = args;
  if (a.n_past_at) a.n_past = *a.n_past_at;
  const int hd = a.head_dim;
  const int group = a.n_heads / a.n_kv_heads;
  const int64_t q_stride = static_cast<int64_t>(a.n_heads) * hd;
  const int64_t kv_stride = static_cast<int64_t>(a.n_kv_heads) * hd;
  tbb::enumerable_thread_specific<std::vector<float>> scratch;
  tbb::parallel_for(tbb::blocked_range2d<int>(0, a.n, 1, 0, a.n_kv_heads, 1), [&](const tbb::blocked_range2d<int>& r) {
    auto& sc = scratch.local();
    for (int i = r.rows().begin(); i < r.rows().end(); ++i) {
      const int32_t* anc = a.anc + a.anc_off[i];
      const int n_anc = a.anc_off[i + 1] - a.anc_off[i];
      const int len = a.n_past + n_anc;
      sc.resize(static_cast<size_t>(len) * group);
      for (int kh = r.cols().begin(); kh < r.cols().end(); ++kh) {
        const float* kbase = a.k + kh * hd;
        const float* vbase = a.v + kh * hd;
        for (int g = 0; g < group; ++g) {
          const int h = kh * group + g;
          const float* q = a.q + i * q_stride + h * hd;
          float* s = sc.data() + static_cast<size_t>(g) * len;
          float mx = -INFINITY;
          for (int j = 0; j < a.n_past; ++j) {
            s[j] = dot(q, kbase + j * kv_stride, hd) * a.scale;
            mx = std::max(mx, s[j]);
          }
          for (int j = 0; j < n_anc; ++j) {
            s[a.n_past + j] = dot(q, kbase + static_cast<int64_t>(a.n_past + anc[j]) * kv_stride, hd) * a.scale;
            mx = std::max(mx, s[a.n_past + j]);
          }
          float sum = 0;
          for (int j = 0; j < len; ++j) {
            s[j] = std::exp(s[j] - mx);
            sum += s[j];
          }
          float* out = a.out + i * q_stride + h * hd;
          for (int d = 0; d < hd; ++d) out[d] = 0;
          for (int j = 0; j < a.n_past; ++j) axpy(s[j], vbase + j * kv_stride, out, hd);
          for (int j = 0; j < n_anc; ++j)
            axpy(s[a.n_past + j], vbase + static_cast<int64_t>(a.n_past + anc[j]) * kv_stride, out, hd);
          scale(out, 1.0f / sum, hd);
        }
      }
    }
  });
}

void attention_reference(const AttentionArgs& a) {
  const int hd = a.head_dim;
  const int group = a.n_heads / a.n_kv_heads;
  const int64_t q_stride = static_cast<int64_t>(a.n_heads) * hd;
  const int64_t kv_stride = static_cast<int64_t>(a.n_kv_heads) * hd;
  // Dense mask from the parent array.
  std::vector<char> mask(static_cast<size_t>(a.n) * a.n, 0);
  for (int i = 0; i < a.n; ++i)
    for (int j = i; j >= 0; j = a.parents[j]) mask[static_cast<size_t>(i) * a.n + j] = 1;
  for (int i = 0; i < a.n; ++i)
    for (int h = 0; h < a.n_heads; ++h) {
      const int kh = h / group;
      const float* q = a.q + i * q_stride + h * hd;
      std::vector<double> s;
      std::vector<int> idx;
      for (int j = 0; j < a.n_past + a.n; ++j) {
        if (j >= a.n_past && !mask[static_cast<size_t>(i) * a.n + (j - a.n_past)]) continue;
        double d = 0;
        for (int c = 0; c < hd; ++c) d += static_cast<double>(q[c]) * a.k[j * kv_stride + kh * hd + c];
        s.push_back(d * a.scale);
        idx.push_back(j);
      }
      double mx = -INFINITY, sum = 0;
      for (double v : s) mx = std::max(mx, v);
      for (double& v : s) sum += (v = std::exp(v - mx));
      for (int c = 0; c < hd; ++c) {
        double o = 0;
        for (size_t t = 0; t < s.size(); ++t) o += s[t] * a.v[idx[t] * kv_stride + kh * hd + c];
        a.out[i * q_stride + h * hd + c] = static_cast<float>(o / sum);
      }
    }
}

}  // namespace redwood::cpu
