#include "src/model/quantize.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/common/math.h"
#include "kernels/cpu/matmul.h"
#include "src/model/gguf.h"
#include "src/model/gguf_writer.h"
#include "src/model/model_desc.h"
#include "src/util/error.h"
#include "src/util/io.h"

namespace redwood {

namespace {

using math::f32_to_f16;

// The element of largest magnitude (the first one on ties), with its sign.
float signed_absmax(const float* x, int n) {
  float m = 0, am = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > am) {
      am = std::fabs(x[i]);
      m = x[i];
    }
  return m;
}

// Q4_0 / Q5_0: d = (signed absmax) / -2^(bits-1); q = trunc(x / d + 2^(bits-1) + 0.5).
template <int kLevels>
void quant_symmetric(const float* x, uint16_t& d16, uint8_t* q) {
  const float d = signed_absmax(x, 32) / static_cast<float>(-kLevels / 2);
  const float id = d != 0 ? 1.f / d : 0.f;
  d16 = f32_to_f16(d);
  for (int i = 0; i < 32; ++i)
    q[i] = static_cast<uint8_t>(std::min<float>(kLevels - 1, std::trunc(x[i] * id + (kLevels / 2 + 0.5f))));
}
// Q4_1 / Q5_1: d = (max - min) / (levels - 1); q = trunc((x - min) / d + 0.5).
template <int kLevels>
void quant_affine(const float* x, uint16_t& d16, uint16_t& m16, uint8_t* q) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < 32; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  const float d = (hi - lo) / static_cast<float>(kLevels - 1);
  const float id = d != 0 ? 1.f / d : 0.f;
  d16 = f32_to_f16(d);
  m16 = f32_to_f16(lo);
  for (int i = 0; i < 32; ++i)
    q[i] = static_cast<uint8_t>(std::min<float>(kLevels - 1, std::trunc((x[i] - lo) * id + 0.5f)));
}
void pack_nibbles(const uint8_t* q, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>((q[j] & 0xf) | ((q[j + 16] & 0xf) << 4));
}
void pack_fifth_bits(const uint8_t* q, uint8_t* qh) {
  std::memset(qh, 0, 4);
  for (int j = 0; j < 32; ++j) qh[j >> 3] |= static_cast<uint8_t>(((q[j] >> 4) & 1) << (j & 7));
}

// The scale s minimising sum (x_i - s q_i)^2 over integers q_i in [lo, hi],
// searched over candidate inverse scales around lo / (signed absmax) (the
// largest magnitude maps to the wider negative end); q gets the chosen levels.
float best_scale(const float* x, int n, int lo, int hi, int* q) {
  const float m = signed_absmax(x, n);
  if (m == 0) {
    std::fill(q, q + n, 0);
    return 0;
  }
  float best_err = INFINITY, best_s = 0;
  std::vector<int> l(static_cast<size_t>(n));
  for (int k = -9; k <= 9; ++k) {
    const float is = (static_cast<float>(lo) + 0.1f * static_cast<float>(k)) / m;
    double sxq = 0, sqq = 0;
    for (int i = 0; i < n; ++i) {
      l[i] = std::clamp(static_cast<int>(std::lround(x[i] * is)), lo, hi);
      sxq += static_cast<double>(x[i]) * l[i];
      sqq += static_cast<double>(l[i]) * l[i];
    }
    if (sqq == 0) continue;
    const float s = static_cast<float>(sxq / sqq);
    double err = 0;
    for (int i = 0; i < n; ++i) {
      const double e = x[i] - static_cast<double>(s) * l[i];
      err += e * e;
    }
    if (err < best_err) {
      best_err = static_cast<float>(err);
      best_s = s;
      std::copy(l.begin(), l.end(), q);
    }
  }
  return best_s;
}

// Q3_K: sixteen 16-element sub-blocks, levels -4..3, 6-bit signed sub-block
// scales (stored + 32) times one f16 d (layout in kernels/common/math.h).
void quant_q3_k(const float* x, math::BlockQ3_K& b) {
  float s[16];
  int q[256];
  float smax = 0;
  for (int j = 0; j < 16; ++j) {
    s[j] = best_scale(x + 16 * j, 16, -4, 3, q + 16 * j);
    if (std::fabs(s[j]) > std::fabs(smax)) smax = s[j];
  }
  std::memset(&b, 0, sizeof b);
  int sc[16] = {};
  if (smax != 0) {
    const float iscale = -32.f / smax;
    b.d = f32_to_f16(1.f / iscale);
    for (int j = 0; j < 16; ++j) sc[j] = std::clamp(static_cast<int>(std::lround(iscale * s[j])), -32, 31);
  }
  for (int j = 0; j < 16; ++j) {
    const int v = sc[j] + 32;
    if (j < 8)
      b.scales[j] = static_cast<uint8_t>(v & 0xf);
    else
      b.scales[j - 8] = static_cast<uint8_t>(b.scales[j - 8] | ((v & 0xf) << 4));
    b.scales[8 + (j & 3)] = static_cast<uint8_t>(b.scales[8 + (j & 3)] | (((v >> 4) & 3) << (2 * (j >> 2))));
  }
  const float d = math::f16_to_f32(b.d);
  for (int e = 0; e < 256; ++e) {
    const float de = d * static_cast<float>(sc[e / 16]);
    const int lq = de != 0 ? std::clamp(static_cast<int>(std::lround(x[e] / de)), -4, 3) : 0;
    const int u = lq + 4;  // 0..7: two low bits in qs, the third in hmask
    const int h = e >> 7, k = (e >> 5) & 3, l = e & 31;
    b.qs[32 * h + l] = static_cast<uint8_t>(b.qs[32 * h + l] | ((u & 3) << (2 * k)));
    if (u & 4) b.hmask[l] = static_cast<uint8_t>(b.hmask[l] | (1 << (4 * h + k)));
  }
}

}  // namespace

bool can_quantize_to(DType t) {
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q3_K:
      return true;
    default:
      return false;
  }
}

void quantize_row(DType t, const float* x, int64_t n, uint8_t* out) {
  const auto& info = dtype_info(t);
  if (!can_quantize_to(t)) throw Error("quantize: cannot write type " + std::string(info.name));
  if (n % info.block_elems != 0)
    throw Error("quantize: a row of " + std::to_string(n) + " elements is not a whole number of " +
                std::string(info.name) + " blocks");
  const int64_t nb = n / info.block_elems;
  for (int64_t i = 0; i < nb; ++i) {
    const float* xb = x + i * info.block_elems;
    uint8_t* ob = out + i * info.block_bytes;
    uint8_t q[32];
    switch (t) {
      case DType::F32:
        std::memcpy(ob, xb, 4);
        break;
      case DType::F16: {
        const uint16_t h = f32_to_f16(*xb);
        std::memcpy(ob, &h, 2);
        break;
      }
      case DType::BF16: {
        const uint16_t h = math::f32_to_bf16(*xb);
        std::memcpy(ob, &h, 2);
        break;
      }
      case DType::Q8_0:
        math::quantize_q8_0(xb, *reinterpret_cast<math::BlockQ8_0*>(ob));
        break;
      case DType::Q4_0: {
        auto& b = *reinterpret_cast<math::BlockQ4_0*>(ob);
        quant_symmetric<16>(xb, b.d, q);
        pack_nibbles(q, b.qs);
        break;
      }
      case DType::Q4_1: {
        auto& b = *reinterpret_cast<math::BlockQ4_1*>(ob);
        quant_affine<16>(xb, b.d, b.m, q);
        pack_nibbles(q, b.qs);
        break;
      }
      case DType::Q5_0: {
        auto& b = *reinterpret_cast<math::BlockQ5_0*>(ob);
        quant_symmetric<32>(xb, b.d, q);
        pack_nibbles(q, b.qs);
        pack_fifth_bits(q, b.qh);
        break;
      }
      case DType::Q5_1: {
        auto& b = *reinterpret_cast<math::BlockQ5_1*>(ob);
        quant_affine<32>(xb, b.d, b.m, q);
        pack_nibbles(q, b.qs);
        pack_fifth_bits(q, b.qh);
        break;
      }
      case DType::Q3_K:
        quant_q3_k(xb, *reinterpret_cast<math::BlockQ3_K*>(ob));
        break;
      default:
        break;
    }
  }
}

QuantizeStats quantize_model(const std::string& from, DType type, const std::string& to,
                             const std::function<void(size_t, size_t)>& progress) {
  if (!can_quantize_to(type)) throw Error("quantize: cannot write type " + std::string(dtype_name(type)));
  const GgufFile f = GgufFile::open(from);
  (void)model_desc_from_gguf(f, from);  // a model Redwood runs (any supported family; biases stay F32)
  const auto& info = dtype_info(type);
  QuantizeStats st;
  std::vector<GgufOutTensor> ts;
  for (const auto& t : f.tensors()) {
    GgufOutTensor o = copy_of(t, t.name);
    st.bytes_in += t.bytes;
    // A 256-element type on rows that are not a whole number of super-blocks
    // (SmolLM2's 576-wide rows): Q4_0, as llama.cpp also falls back to a
    // 32-element type there.
    DType out_type = type;
    if (t.n_dims == 2 && t.ne[0] % info.block_elems != 0 && info.block_elems == 256) {
      out_type = DType::Q4_0;
      ++st.fallback;
    }
    const bool matrix = t.n_dims == 2 && t.ne[0] % dtype_info(out_type).block_elems == 0;
    if (!matrix || t.type == out_type) {
      ++st.kept;
      st.bytes_out += t.bytes;
      ts.push_back(std::move(o));
      continue;
    }
    const int64_t rows = static_cast<int64_t>(t.ne[1]), cols = static_cast<int64_t>(t.ne[0]);
    const uint64_t out_row = *row_bytes(out_type, static_cast<uint64_t>(cols));
    o.ggml_type = ggml_from_dtype(out_type);
    o.bytes = out_row * static_cast<uint64_t>(rows);
    const std::string path = f.path();
    const uint64_t offset = t.offset, in_bytes = t.bytes;
    const DType in_type = t.type;
    o.fill = [path, offset, in_bytes, in_type, rows, cols, out_row, out_type](uint8_t* dst) {
      std::vector<uint8_t> src(in_bytes);
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) throw Error(path + ": cannot open");
      try {
        read_exact(fd, path, src.data(), in_bytes, offset);
      } catch (...) {
        ::close(fd);
        throw;
      }
      ::close(fd);
      const WeightView w{in_type, rows, cols, src.data()};
      std::vector<float> row(static_cast<size_t>(cols));
      for (int64_t r = 0; r < rows; ++r) {
        cpu::dequantize_rows(w, r, 1, row.data());
        quantize_row(out_type, row.data(), cols, dst + static_cast<uint64_t>(r) * out_row);
      }
    };
    ++st.converted;
    st.bytes_out += o.bytes;
    ts.push_back(std::move(o));
  }
  std::map<std::string, GgufValue> ov;
  GgufValue name;
  name.type = GgufType::STRING;
  name.s = f.get_string("general.name").value_or("model") + " (requantized to " + std::string(info.name) + ")";
  ov["general.name"] = name;
  if (const GgufValue* ft = f.find("general.file_type"); ft && ft->is_int()) {
    GgufValue v = *ft;  // llama.cpp's file type ids for "all tensors of this type"
    const int64_t id = type == DType::F32    ? 0
                       : type == DType::F16  ? 1
                       : type == DType::Q4_0 ? 2
                       : type == DType::Q4_1 ? 3
                       : type == DType::Q8_0 ? 7
                       : type == DType::Q5_0 ? 8
                       : type == DType::Q5_1 ? 9
                       : type == DType::Q3_K ? 11
                                             : 32;  // BF16
    v.u = static_cast<uint64_t>(id);
    v.i = id;
    ov["general.file_type"] = v;
  }
  write_gguf(f, to, ov, ts, progress);
  return st;
}

}  // namespace redwood
