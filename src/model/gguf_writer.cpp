#include "src/model/gguf_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "src/model/model_desc.h"
#include "src/util/error.h"
#include "src/util/output_path.h"
#include "src/util/io.h"

namespace redwood {

namespace {

struct Out {
  std::string buf;
  template <class T>
  void pod(T v) {
    buf.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void str(const std::string& s) {
    pod<uint64_t>(s.size());
    buf += s;
  }
};

// clang-format off
void put_value(Out& o, const GgufValue& v, bool with_type) {
  if (with_type) o.pod<uint32_t>(static_cast<uint32_t>(v.type));
  switch (v.type) {
    case GgufType::U8: o.pod<uint8_t>(static_cast<uint8_t>(v.u)); break;
    case GgufType::I8: o.pod<int8_t>(static_cast<int8_t>(v.i)); break;
    case GgufType::U16: o.pod<uint16_t>(static_cast<uint16_t>(v.u)); break;
    case GgufType::I16: o.pod<int16_t>(static_cast<int16_t>(v.i)); break;
    case GgufType::U32: o.pod<uint32_t>(static_cast<uint32_t>(v.u)); break;
    case GgufType::I32: o.pod<int32_t>(static_cast<int32_t>(v.i)); break;
    case GgufType::U64: o.pod<uint64_t>(v.u); break;
    case GgufType::I64: o.pod<int64_t>(v.i); break;
    case GgufType::F32: o.pod<float>(static_cast<float>(v.f)); break;
    case GgufType::F64: o.pod<double>(v.f); break;
    case GgufType::BOOL: o.pod<uint8_t>(v.u ? 1 : 0); break;
    case GgufType::STRING: o.str(v.s); break;
    case GgufType::ARRAY:
      o.pod<uint32_t>(static_cast<uint32_t>(v.elem));
      o.pod<uint64_t>(v.arr.size());
      for (const auto& e : v.arr) put_value(o, e, false);
      break;
  }
}
// clang-format on

void write_all(int fd, const std::string& path, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw Error(path + ": write failed: " + strerror(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

GgufOutTensor copy_of(const GgufTensorInfo& t, const std::string& name) {
  GgufOutTensor o;
  o.name = name;
  o.src_name = t.name;
  o.ggml_type = t.ggml_type;
  o.n_dims = t.n_dims;
  for (int d = 0; d < 4; ++d) o.ne[d] = t.ne[d];
  o.bytes = t.bytes;
  return o;
}

void write_gguf(const GgufFile& src, const std::string& out_path, const std::map<std::string, GgufValue>& overrides,
                const std::vector<GgufOutTensor>& ts, const std::function<void(size_t, size_t)>& progress) {
  check_output_path(out_path, {src.path()}, "output");  // never over the source model, never a device
  std::map<std::string, GgufValue> kv = src.metadata();
  for (const auto& [k, v] : overrides) kv[k] = v;
  const uint64_t align = src.alignment();
  std::vector<const GgufTensorInfo*> from(ts.size(), nullptr);
  for (size_t i = 0; i < ts.size(); ++i) {
    if (ts[i].fill) continue;
    from[i] = src.find_tensor(ts[i].src_name);
    if (!from[i]) throw Error(src.path() + ": missing tensor '" + ts[i].src_name + "'");
  }
  Out o;
  o.buf = "GGUF";
  o.pod<uint32_t>(3);
  o.pod<uint64_t>(ts.size());
  o.pod<uint64_t>(kv.size());
  for (const auto& [k, v] : kv) {
    o.str(k);
    put_value(o, v, true);
  }
  uint64_t off = 0;
  for (const auto& t : ts) {
    o.str(t.name);
    o.pod<uint32_t>(t.n_dims);
    for (uint32_t d = 0; d < t.n_dims; ++d) o.pod<uint64_t>(t.ne[d]);
    o.pod<uint32_t>(t.ggml_type);
    o.pod<uint64_t>(off);
    off = (off + t.bytes + align - 1) / align * align;
  }
  o.buf.append((align - o.buf.size() % align) % align, '\0');

  TempOutput tmp(out_path);
  const int fd = tmp.fd();
  Fd in(::open(src.path().c_str(), O_RDONLY | O_CLOEXEC));
  if (in.fd < 0) throw Error(src.path() + ": cannot open: " + strerror(errno));
  write_all(fd, out_path, o.buf.data(), o.buf.size());
  std::vector<char> chunk(8 << 20);
  std::vector<uint8_t> made;
  for (size_t i = 0; i < ts.size(); ++i) {
    const auto& t = ts[i];
    if (t.fill) {
      made.assign(t.bytes, 0);
      t.fill(made.data());
      write_all(fd, out_path, reinterpret_cast<const char*>(made.data()), made.size());
    } else {
      if (from[i]->bytes != t.bytes)
        throw Error("write_gguf: tensor '" + t.name + "' copies " + std::to_string(from[i]->bytes) +
                    " bytes but declares " + std::to_string(t.bytes));
      uint64_t done = 0;
      while (done < t.bytes) {
        const size_t want = static_cast<size_t>(std::min<uint64_t>(chunk.size(), t.bytes - done));
        read_exact(in.fd, src.path(), chunk.data(), want, from[i]->offset + done);
        write_all(fd, out_path, chunk.data(), want);
        done += want;
      }
    }
    const uint64_t pad = (align - t.bytes % align) % align;
    if (pad) write_all(fd, out_path, std::string(pad, '\0').data(), pad);
    if (progress) progress(i + 1, ts.size());
  }
  tmp.commit();
}

void write_gguf_subset(const GgufFile& src, const std::string& out_path,
                       const std::map<std::string, GgufValue>& overrides, const std::vector<std::string>& tensor_names,
                       const std::vector<std::string>& out_names) {
  if (!out_names.empty() && out_names.size() != tensor_names.size())
    throw Error("write_gguf_subset: " + std::to_string(out_names.size()) + " output names for " +
                std::to_string(tensor_names.size()) + " tensors");
  std::vector<GgufOutTensor> ts;
  for (size_t i = 0; i < tensor_names.size(); ++i) {
    const auto* t = src.find_tensor(tensor_names[i]);
    if (!t) throw Error(src.path() + ": missing tensor '" + tensor_names[i] + "'");
    ts.push_back(copy_of(*t, out_names.empty() ? t->name : out_names[i]));
  }
  write_gguf(src, out_path, overrides, ts);
}

void make_self_draft(const std::string& from, const std::vector<int>& blocks, const std::string& out_path) {
  GgufFile f = GgufFile::open(from);
  const std::string arch = model_desc_from_gguf(f, from).hp.arch;  // a model Redwood runs, any family
  const uint64_t n = f.get_uint(arch + ".block_count").value_or(0);
  if (blocks.empty()) throw Error("make-draft: no blocks to keep");
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (blocks[i] < 0 || static_cast<uint64_t>(blocks[i]) >= n)
      throw Error("make-draft: block " + std::to_string(blocks[i]) + " is not in the model's 0.." +
                  std::to_string(n - 1));
    if (i > 0 && blocks[i] <= blocks[i - 1]) throw Error("make-draft: blocks must be ascending without repeats");
  }
  std::vector<std::string> names = {"token_embd.weight", "output_norm.weight"};
  if (f.find_tensor("output.weight")) names.push_back("output.weight");
  if (f.find_tensor("rope_freqs.weight")) names.push_back("rope_freqs.weight");  // Llama 3 RoPE scaling
  std::vector<std::string> out_names = names;
  std::map<int, int> renumber;
  for (size_t i = 0; i < blocks.size(); ++i) renumber[blocks[i]] = static_cast<int>(i);
  for (const auto& t : f.tensors())
    if (t.name.rfind("blk.", 0) == 0) {
      const int b = std::atoi(t.name.c_str() + 4);
      const auto it = renumber.find(b);
      if (it == renumber.end()) continue;
      const size_t dot = t.name.find('.', 4);
      if (dot == std::string::npos) throw Error(from + ": bad tensor name '" + t.name + "'");
      names.push_back(t.name);
      out_names.push_back("blk." + std::to_string(it->second) + t.name.substr(dot));
    }
  std::map<std::string, GgufValue> ov;
  GgufValue bc;
  bc.type = GgufType::U32;
  bc.u = static_cast<uint64_t>(blocks.size());
  ov[arch + ".block_count"] = bc;
  // Which of the kept blocks attend within the sliding window.
  if (const GgufValue* pat = f.find(arch + ".attention.sliding_window_pattern");
      pat && pat->type == GgufType::ARRAY && pat->arr.size() == n) {
    GgufValue kept_pat = *pat;
    kept_pat.arr.clear();
    for (int b : blocks) kept_pat.arr.push_back(pat->arr[static_cast<size_t>(b)]);
    ov[arch + ".attention.sliding_window_pattern"] = kept_pat;
  }
  std::string kept;
  for (size_t i = 0; i < blocks.size();) {  // "0-7,24-29"
    size_t j = i;
    while (j + 1 < blocks.size() && blocks[j + 1] == blocks[j] + 1) ++j;
    if (!kept.empty()) kept += ',';
    kept += std::to_string(blocks[i]);
    if (j > i) {
      kept += '-';
      kept += std::to_string(blocks[j]);
    }
    i = j + 1;
  }
  GgufValue name;
  name.type = GgufType::STRING;
  name.s = f.get_string("general.name").value_or("model");
  name.s += " (self-draft: blocks ";
  name.s += kept;
  name.s += " of ";
  name.s += std::to_string(n);
  name.s += ")";
  ov["general.name"] = name;
  write_gguf_subset(f, out_path, ov, names, out_names);
}

void make_self_draft(const std::string& from, int layers, const std::string& out_path) {
  const int n = load_model_desc(from).hp.n_layers;  // {arch}.block_count, any family
  if (layers < 1 || layers > n)
    throw Error("--layers must be between 1 and the model's " + std::to_string(n) + " blocks");
  std::vector<int> blocks(static_cast<size_t>(layers));
  for (int i = 0; i < layers; ++i) blocks[static_cast<size_t>(i)] = i;
  make_self_draft(from, blocks, out_path);
}

std::vector<int> parse_block_list(const std::string& spec, int n_blocks) {
  std::vector<int> out;
  size_t pos = 0;
  // The whole number as written: one past the last block is named as given
  // (cutting it at six digits made 18446744073709551615 "block 184467").
  auto number = [&](size_t& p) {
    size_t q = p;
    while (q < spec.size() && spec[q] >= '0' && spec[q] <= '9') ++q;
    if (q == p) throw Error("--blocks '" + spec + "': expected a block number at character " + std::to_string(p + 1));
    const std::string text = spec.substr(p, q - p);
    const size_t digits = text.size() - std::min(text.find_first_not_of('0'), text.size() - 1);
    if (digits > 9 || std::stoi(text) >= n_blocks)
      throw Error("--blocks '" + spec + "': block " + text + " is past the model's last block " +
                  std::to_string(n_blocks - 1));
    p = q;
    return std::stoi(text);
  };
  while (pos < spec.size()) {
    const int a = number(pos);
    int b = a;
    if (pos < spec.size() && spec[pos] == '-') {
      ++pos;
      b = number(pos);
    }
    if (b < a)
      throw Error("--blocks '" + spec + "': range " + std::to_string(a) + "-" + std::to_string(b) + " is reversed");
    for (int v = a; v <= b; ++v) {
      if (v >= n_blocks)
        throw Error("--blocks '" + spec + "': block " + std::to_string(v) + " is past the model's last block " +
                    std::to_string(n_blocks - 1));
      if (!out.empty() && v <= out.back())
        throw Error("--blocks '" + spec + "': blocks must be ascending without repeats");
      out.push_back(v);
    }
    if (pos < spec.size()) {
      if (spec[pos] != ',') throw Error("--blocks '" + spec + "': unexpected '" + std::string(1, spec[pos]) + "'");
      ++pos;
      if (pos == spec.size()) throw Error("--blocks '" + spec + "': trailing comma");
    }
  }
  if (out.empty()) throw Error("--blocks: empty block list");
  return out;
}

}  // namespace redwood
