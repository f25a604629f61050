#include "kernels/cpu/attention.h"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/common/math.h"
#include "kernels/cpu/simd.h"
#include "src/util/error.h"

namespace redwood::cpu {

namespace {

// New tokens per attention task when there are enough of them (tree passes).
constexpr int kTokBlock = 8;

// KV rows hold float, IEEE half (uint16_t tagged Half) or bfloat16 (Bf16):
// every element is widened to float when read, exactly.
struct Half {
  uint16_t bits;
};
struct Bf16 {
  uint16_t bits;
};
inline float widen(float x) { return x; }
inline float widen(Half x) { return math::f16_to_f32(x.bits); }
inline float widen(Bf16 x) { return math::bf16_to_f32(x.bits); }

// Q8_0 rows are blocks of 32 (math::BlockQ8_0): a head's slice starts at a
// block (head_dim a multiple of 32), its element c is quant c % 32 of block
// c / 32, widened as d * q (exact in float). Rows are addressed by element
// offset through at<T>, elements of a slice through widen_at / load8_at.
using Q8 = math::BlockQ8_0;
template <class T>
inline const T* at(const void* base, int64_t e) {
  if constexpr (std::is_same_v<T, Q8>)
    return static_cast<const Q8*>(base) + e / 32;
  else
    return static_cast<const T*>(base) + e;
}
template <class T>
inline float widen_at(const T* p, int c) {
  if constexpr (std::is_same_v<T, Q8>)
    return math::dequant_q8_0(p[c / 32], c % 32);
  else
    return widen(p[c]);
}

// Where token i's positions live: its sequence's committed length and block
// table (null: one sequence, position r is row r), and the first committed
// position it attends to (lo <= past; > 0 only under a sliding window). Its
// keys, in order: committed positions lo .. past - 1 (count = past - lo),
// then its ancestors' block rows.
struct TokenRows {
  int past;
  const int32_t* table;
  int block_rows;
  int lo;
  int64_t row(int64_t r) const { return kv_row(table, block_rows, r); }
  int count() const { return past - lo; }
  // The cache row of key j of the token (anc: its ancestor list).
  int64_t key_row(int j, const int32_t* anc) const { return row(j < count() ? lo + j : past + anc[j - count()]); }
};
TokenRows token_rows(const AttentionArgs& a, int i) {
  TokenRows tr{a.n_past, nullptr, 0, 0};
  if (a.seq) {
    const int s = a.seq[i];
    tr = {a.seq_past[s], a.table + static_cast<int64_t>(s) * a.table_stride, a.block_rows, 0};
  }
  if (a.window > 0) tr.lo = std::min(tr.past, window_start(a.pos[i], a.window));
  return tr;
}

#ifdef REDWOOD_AVX2
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const Half* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m256 load8(const Bf16* p) {
  return _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}
// Elements c .. c + 7 of a head's slice (c a multiple of 8). Q8_0: d (F16C,
// exact) times the eight quants, each product exact: the same floats as
// widen_at.
template <class T>
inline __m256 load8_at(const T* p, int c) {
  return load8(p + c);
}
inline __m256 load8_at(const Q8* p, int c) {
  const Q8& b = p[c >> 5];
  const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.qs + (c & 31)));
  return _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(b.d)), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)));
}

// Eight keys' scores q . k_j in one vector. Every key's dot product is formed
// the same way wherever it sits among the eight (FMAs over head_dim in order,
// then the same pairwise sum of the eight lanes), so a score does not depend
// on which keys share its group: a token's attention in a tree pass equals
// its attention decoded alone.
template <class T>
inline __m256 dot8(const float* q, const T* const kr[8], int hd) {
  __m256 a[8];
  const __m256 q0 = _mm256_loadu_ps(q);
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) a[k] = _mm256_mul_ps(q0, load8_at(kr[k], 0));
  for (int c = 8; c < hd; c += 8) {
    const __m256 qc = _mm256_loadu_ps(q + c);
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) a[k] = _mm256_fmadd_ps(qc, load8_at(kr[k], c), a[k]);
  }
  const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);  // [k0..k3 low lanes | k0..k3 high lanes]
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

struct Scratch {
  // Per token of the block: scores, then probabilities, [heads][len rounded
  // up to 8]; the key row of every attended position, padded to a multiple of
  // 8; the value rows (as untyped pointers: the KV element type is chosen at
  // run time); 1 / sum per head.
  std::vector<float> s[kTokBlock];
  std::vector<const void*> krow[kTokBlock], vrow[kTokBlock];
  std::vector<float> inv_sum[kTokBlock];
};

// Heads [h0, h1) of KV head kh for new tokens [i0, i1) (at most kTokBlock;
// head_dim a multiple of 8, at most 256). Keys are taken eight at a time for
// all the heads (each key row read once for the group), values 32 positions at
// a time. The tokens of a block share the committed prefix (when they are of
// one sequence): its keys are read once for the block while they are in L1,
// and each token's arithmetic is the same as alone (every score is formed the
// same way whatever its group of eight, and each output sums its positions in
// order). Under a sliding window each token's list starts at its own first
// position (the shared loop is then only loop order).
template <class T>
void attend_avx2(const AttentionArgs& a, int i0, int i1, int kh, int h0, int h1, Scratch& sc) {
  const int hd = a.head_dim, nt = i1 - i0, nh = h1 - h0;
  const int64_t q_stride = static_cast<int64_t>(a.n_heads) * hd;
  const int64_t kv_stride = static_cast<int64_t>(a.n_kv_heads) * hd;
  int len[kTokBlock], padded[kTokBlock];
  int shared = INT32_MAX;  // prefix keys scored group by group for all the tokens (loop order only)
  for (int t = 0; t < nt; ++t) {
    const int i = i0 + t;
    const int32_t* anc = a.anc + a.anc_off[i];
    const TokenRows tr = token_rows(a, i);
    shared = std::min(shared, tr.count() / 8 * 8);
    len[t] = tr.count() + a.anc_off[i + 1] - a.anc_off[i];
    padded[t] = (len[t] + 7) / 8 * 8;
    auto& krow = sc.krow[t];
    auto& vrow = sc.vrow[t];
    krow.resize(padded[t]);
    vrow.resize(len[t]);
    for (int j = 0; j < len[t]; ++j) {
      const int64_t row = tr.key_row(j, anc);
      krow[j] = at<T>(a.k, row * kv_stride + kh * hd);
      vrow[j] = at<T>(a.v, row * kv_stride + kh * hd);
    }
    for (int j = len[t]; j < padded[t]; ++j) krow[j] = krow[0];  // scores dropped below
    sc.s[t].resize(static_cast<size_t>(nh) * padded[t]);
    sc.inv_sum[t].resize(nh);
  }
  const __m256 scale = _mm256_set1_ps(a.scale), neg_inf = _mm256_set1_ps(-INFINITY);
  auto score8 = [&](int t, int j) {
    for (int g = 0; g < nh; ++g)
      _mm256_storeu_ps(
          sc.s[t].data() + static_cast<size_t>(g) * padded[t] + j,
          _mm256_mul_ps(dot8(a.q + (i0 + t) * q_stride + (h0 + g) * hd, reinterpret_cast<const T* const*>(sc.krow[t].data() + j), hd), scale));
  };
  for (int j = 0; j < shared; j += 8)
    for (int t = 0; t < nt; ++t) score8(t, j);
  for (int t = 0; t < nt; ++t)
    for (int j = shared; j < padded[t]; j += 8) score8(t, j);
  for (int t = 0; t < nt; ++t)
    for (int g = 0; g < nh; ++g) {
      float* s = sc.s[t].data() + static_cast<size_t>(g) * padded[t];
      for (int j = len[t]; j < padded[t]; ++j) s[j] = -INFINITY;
      // (A NaN score need not win the maximum: its exp makes the sum, and so
      // every output of the head, NaN.)
      __m256 mv = neg_inf;
      for (int j = 0; j < padded[t]; j += 8) mv = _mm256_max_ps(_mm256_loadu_ps(s + j), mv);
      float lanes[8];
      _mm256_storeu_ps(lanes, mv);
      const __m256 m = _mm256_set1_ps(*std::max_element(lanes, lanes + 8));
      __m256 sum = _mm256_setzero_ps();
      for (int j = 0; j < padded[t]; j += 8) {
        const __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(s + j), m));  // padding: exp(-inf) = 0
        _mm256_storeu_ps(s + j, e);
        sum = _mm256_add_ps(sum, e);
      }
      sc.inv_sum[t][g] = 1.0f / hsum(sum);
    }
  // out = sum_j p_j v_j / sum, each output element summed over j in order.
  constexpr int kJ = 32;
  const int max_len = *std::max_element(len, len + nt);
  for (int c0 = 0; c0 < hd; c0 += 64) {
    const int nc = std::min(64, hd - c0) / 8;
    for (int j0 = 0; j0 < max_len; j0 += kJ)
      for (int t = 0; t < nt; ++t) {
        if (j0 >= len[t]) continue;
        const int j1 = std::min(len[t], j0 + kJ);
        for (int g = 0; g < nh; ++g) {
          float* out = a.out + (i0 + t) * q_stride + (h0 + g) * hd + c0;
          const float* p = sc.s[t].data() + static_cast<size_t>(g) * padded[t];
          __m256 o[8];
          for (int c = 0; c < nc; ++c) o[c] = j0 == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(out + 8 * c);
          for (int j = j0; j < j1; ++j) {
            const __m256 pj = _mm256_set1_ps(p[j]);
            const T* v = static_cast<const T*>(sc.vrow[t][j]);
            for (int c = 0; c < nc; ++c) o[c] = _mm256_fmadd_ps(pj, load8_at(v, c0 + 8 * c), o[c]);
          }
          if (j1 == len[t]) {
            const __m256 r = _mm256_set1_ps(sc.inv_sum[t][g]);
            for (int c = 0; c < nc; ++c) o[c] = _mm256_mul_ps(o[c], r);
          }
          for (int c = 0; c < nc; ++c) _mm256_storeu_ps(out + 8 * c, o[c]);
        }
      }
  }
}
#endif

// The same for any head_dim, one head at a time, scalar exp. Rows of
// F16/BF16/Q8_0 are widened into `row` first.
template <class T>
void attend_generic(const AttentionArgs& a, int i, int kh, int h0, int h1, std::vector<float>& s,
                    std::vector<float>& row) {
  const int hd = a.head_dim;
  const int64_t q_stride = static_cast<int64_t>(a.n_heads) * hd;
  const int64_t kv_stride = static_cast<int64_t>(a.n_kv_heads) * hd;
  const int32_t* anc = a.anc + a.anc_off[i];
  const int n_anc = a.anc_off[i + 1] - a.anc_off[i];
  const TokenRows tr = token_rows(a, i);
  const int len = tr.count() + n_anc;
  s.resize(len);
  auto pos = [&](int j) -> int64_t { return tr.key_row(j, anc); };
  // Head kh's slice of cache row r of k or v, as floats.
  auto load = [&](const void* base, int64_t r) -> const float* {
    const T* p = at<T>(base, r * kv_stride + kh * hd);
    if constexpr (std::is_same_v<T, float>) {
      return p;
    } else {
      row.resize(hd);
      for (int d = 0; d < hd; ++d) row[d] = widen_at(p, d);
      return row.data();
    }
  };
  for (int h = h0; h < h1; ++h) {
    const float* q = a.q + i * q_stride + h * hd;
    float mx = -INFINITY;
    for (int j = 0; j < len; ++j) {
      s[j] = dot(q, load(a.k, pos(j)), hd) * a.scale;
      mx = std::max(mx, s[j]);
    }
    float sum = 0;
    for (int j = 0; j < len; ++j) {
      s[j] = std::exp(s[j] - mx);
      sum += s[j];
    }
    float* out = a.out + i * q_stride + h * hd;
    for (int d = 0; d < hd; ++d) out[d] = 0;
    for (int j = 0; j < len; ++j) axpy(s[j], load(a.v, pos(j)), out, hd);
    scale(out, 1.0f / sum, hd);
  }
}

// One task = kTokBlock new tokens x one KV head (all its query heads, so each
// key row is read once per group, and the prefix once per block) in tree
// passes with enough tokens, else one token x one KV head, or, when that gives
// too few tasks to keep every thread busy (decoding one token), one token x
// one query head. A head's arithmetic is the same either way. Scores are
// materialized per (token, head) over prefix + ancestors (at most n_past +
// depth entries; under a sliding window, only those in it).
template <class T>
void attention_typed(const AttentionArgs& args) {
  AttentionArgs a = args;
  if (a.n_past_at) a.n_past = *a.n_past_at;
  const int group = a.n_heads / a.n_kv_heads;
  const int64_t enough = 4 * static_cast<int64_t>(tbb::this_task_arena::max_concurrency());
  struct Local {
#ifdef REDWOOD_AVX2
    Scratch sc;
#endif
    std::vector<float> s, row;
  };
  tbb::enumerable_thread_specific<Local> scratch;
#ifdef REDWOOD_AVX2
  const bool fast = a.head_dim % 8 == 0 && a.head_dim <= 256;
  // Blocks of kTokBlock tokens where that still leaves enough tasks.
  const int tb =
      fast && (a.n + kTokBlock - 1) / kTokBlock * static_cast<int64_t>(a.n_kv_heads) >= enough ? kTokBlock : 1;
#else
  const bool fast = false;
  const int tb = 1;
#endif
  const int blocks = (a.n + tb - 1) / tb;
  const int64_t by_kv = static_cast<int64_t>(blocks) * a.n_kv_heads;
  const int split = by_kv < enough ? group : 1;
  const int per_task = group / split;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, by_kv * split, 1), [&](const tbb::blocked_range<int64_t>& r) {
    auto& loc = scratch.local();
    for (int64_t t = r.begin(); t < r.end(); ++t) {
      const int b = static_cast<int>(t / (a.n_kv_heads * split));
      const int i0 = b * tb, i1 = std::min(a.n, i0 + tb);
      const int rest = static_cast<int>(t % (a.n_kv_heads * split)), kh = rest / split;
      const int h0 = kh * group + (rest % split) * per_task, h1 = h0 + per_task;
#ifdef REDWOOD_AVX2
      if (fast) {
        attend_avx2<T>(a, i0, i1, kh, h0, h1, loc.sc);
        continue;
      }
#endif
      (void)fast;
      attend_generic<T>(a, i0, kh, h0, h1, loc.s, loc.row);
    }
  });
}

// Element e of a KV row store of `type`, as float.
float kv_elem(const void* base, DType type, int64_t e) {
  switch (type) {
    case DType::F16:
      return math::f16_to_f32(static_cast<const uint16_t*>(base)[e]);
    case DType::BF16:
      return math::bf16_to_f32(static_cast<const uint16_t*>(base)[e]);
    case DType::Q8_0:
      return math::dequant_q8_0(static_cast<const Q8*>(base)[e / 32], static_cast<int>(e % 32));
    default:
      return static_cast<const float*>(base)[e];
  }
}

}  // namespace

void check_kv_type(DType t) {
  if (!is_kv_type(t))
    throw Error("KV cache type must be F32, F16, BF16 or Q8_0, not " + std::string(dtype_name(t)));
}

void attention(const AttentionArgs& a) {
  if (a.window > 0 && !a.pos) throw Error("attention: a sliding window needs the tokens' positions");
  switch (a.kv_type) {
    case DType::F32:
      return attention_typed<float>(a);
    case DType::F16:
      return attention_typed<Half>(a);
    case DType::BF16:
      return attention_typed<Bf16>(a);
    case DType::Q8_0:
      if (a.head_dim % 32 != 0)
        throw Error("attention: Q8_0 KV rows need a head_dim that is a multiple of 32, got " +
                    std::to_string(a.head_dim));
      return attention_typed<Q8>(a);
    default:
      check_kv_type(a.kv_type);
  }
}

void write_kv_rows_at(void* base, DType type, const int32_t* row_at, const float* src, int64_t rows, int row_floats) {
  for (int64_t r = 0; r < rows; ++r) write_kv_rows(base, type, row_at[r], src + r * row_floats, 1, row_floats);
}

void write_kv_rows(void* base, DType type, int64_t first_row, const float* src, int64_t rows, int row_floats) {
  const int64_t count = rows * row_floats, off = first_row * row_floats;
  if (type == DType::F32) {
    memcpy(static_cast<float*>(base) + off, src, sizeof(float) * count);
    return;
  }
  if (type == DType::Q8_0) {  // every block of 32 on its own: a row's bytes depend on that row alone
    if (row_floats % 32 != 0)
      throw Error("KV rows of Q8_0 need a multiple of 32 floats, got " + std::to_string(row_floats));
    Q8* dst = static_cast<Q8*>(base) + off / 32;
    for (int64_t b = 0; b < count / 32; ++b) math::quantize_q8_0(src + 32 * b, dst[b]);
    return;
  }
  check_kv_type(type);
  uint16_t* dst = static_cast<uint16_t*>(base) + off;
  int64_t i = 0;
#ifdef REDWOOD_AVX2
  if (type == DType::F16) {
    // F16C rounds to nearest even like math::f32_to_f16 (a NaN stays a NaN;
    // its payload may differ).
    for (; i + 8 <= count; i += 8)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                       _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  } else {
    // math::f32_to_bf16 on eight lanes: (x + 0x7fff + bit 16 of x) >> 16, a
    // NaN quieted.
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    for (; i + 8 <= count; i += 8) {
      const __m256i x = _mm256_castps_si256(_mm256_loadu_ps(src + i));
      const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
      const __m256i rounded =
          _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
      const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, abs_mask), inf);
      const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
      const __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);
      // Pack the eight 32-bit lanes' low halves (each < 65536) to 16 bits.
      const __m128i lo = _mm256_castsi256_si128(r), hi = _mm256_extracti128_si256(r, 1);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm_packus_epi32(lo, hi));
    }
  }
#endif
  for (; i < count; ++i) dst[i] = type == DType::F16 ? math::f32_to_f16(src[i]) : math::f32_to_bf16(src[i]);
}

namespace {
// Token i, query head h over the cache rows it sees, in double: softmax of the
// scaled dot products, then the weighted sum of those rows' values.
void reference_head(const AttentionArgs& a, int i, int h, int group, int64_t q_stride, int64_t kv_stride,
                    const std::vector<int64_t>& rows) {
  const int hd = a.head_dim, kh = h / group;
  const float* q = a.q + i * q_stride + h * hd;
  std::vector<double> sc;
  for (int64_t row : rows) {
    double d = 0;
    for (int c = 0; c < hd; ++c) d += static_cast<double>(q[c]) * kv_elem(a.k, a.kv_type, row * kv_stride + kh * hd + c);
    sc.push_back(d * a.scale);
  }
  double mx = -INFINITY, sum = 0;
  for (double v : sc) mx = std::max(mx, v);
  for (double& v : sc) sum += (v = std::exp(v - mx));
  for (int c = 0; c < hd; ++c) {
    double o = 0;
    for (size_t t = 0; t < sc.size(); ++t) o += sc[t] * kv_elem(a.v, a.kv_type, rows[t] * kv_stride + kh * hd + c);
    a.out[i * q_stride + h * hd + c] = static_cast<float>(o / sum);
  }
}
}  // namespace

void attention_reference(const AttentionArgs& a) {
  const int group = a.n_heads / a.n_kv_heads;
  const int64_t q_stride = static_cast<int64_t>(a.n_heads) * a.head_dim;
  const int64_t kv_stride = static_cast<int64_t>(a.n_kv_heads) * a.head_dim;
  std::vector<int64_t> rows;
  for (int i = 0; i < a.n; ++i) {
    rows.clear();
    // The sliding window, straight from its definition: key position kp is
    // masked when pos[i] - kp >= window (committed row r is position r).
    auto seen = [&](int64_t kp) { return a.window <= 0 || a.pos[i] - kp < a.window; };
    if (a.seq) {  // several sequences: its committed positions, then its ancestors, through its table
      const int s = a.seq[i], past = a.seq_past[s];
      const int32_t* table = a.table + static_cast<int64_t>(s) * a.table_stride;
      for (int r = 0; r < past; ++r)
        if (seen(r)) rows.push_back(kv_row(table, a.block_rows, r));
      for (int j = a.anc_off[i]; j < a.anc_off[i + 1]; ++j)
        rows.push_back(kv_row(table, a.block_rows, past + a.anc[j]));
    } else {  // one cache: the committed rows, then the block rows on i's path (from the parent array)
      std::vector<char> on_path(static_cast<size_t>(a.n), 0);
      for (int j = i; j >= 0; j = a.parents[j]) on_path[static_cast<size_t>(j)] = 1;
      for (int j = 0; j < a.n_past + a.n; ++j)
        if (j < a.n_past ? seen(j)
                         : on_path[static_cast<size_t>(j - a.n_past)] && (a.window <= 0 || seen(a.pos[j - a.n_past])))
          rows.push_back(j);
    }
    for (int h = 0; h < a.n_heads; ++h) reference_head(a, i, h, group, q_stride, kv_stride, rows);
  }
}

}  // namespace redwood::cpu
