#include "src/model/gguf_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "src/util/error.h"
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

void write_gguf_subset(const GgufFile& src, const std::string& out_path,
                       const std::map<std::string, GgufValue>& overrides,
                       const std::vector<std::string>& tensor_names) {
  std::map<std::string, GgufValue> kv = src.metadata();
  for (const auto& [k, v] : overrides) kv[k] = v;
  const uint64_t align = src.alignment();
  std::vector<const GgufTensorInfo*> ts;
  for (const auto& n : tensor_names) {
    const auto* t = src.find_tensor(n);
    if (!t) throw Error(src.path() + ": missing tensor '" + n + "'");
    ts.push_back(t);
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
  for (const auto* t : ts) {
    o.str(t->name);
    o.pod<uint32_t>(t->n_dims);
    for (uint32_t d = 0; d < t->n_dims; ++d) o.pod<uint64_t>(t->ne[d]);
    o.pod<uint32_t>(t->ggml_type);
    o.pod<uint64_t>(off);
    off = (off + t->bytes + align - 1) / align * align;
  }
  o.buf.append((align - o.buf.size() % align) % align, '\0');

  const std::string tmp = out_path + ".tmp." + std::to_string(getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(out_path + ": cannot create: " + strerror(errno));
  const int in = ::open(src.path().c_str(), O_RDONLY | O_CLOEXEC);
  try {
    if (in < 0) throw Error(src.path() + ": cannot open: " + strerror(errno));
    write_all(fd, out_path, o.buf.data(), o.buf.size());
    std::vector<char> chunk(8 << 20);
    for (const auto* t : ts) {
      uint64_t done = 0;
      while (done < t->bytes) {
        const size_t want = static_cast<size_t>(std::min<uint64_t>(chunk.size(), t->bytes - done));
        read_exact(in, src.path(), chunk.data(), want, t->offset + done);
        write_all(fd, out_path, chunk.data(), want);
        done += want;
      }
      const uint64_t pad = (align - t->bytes % align) % align;
      if (pad) write_all(fd, out_path, std::string(pad, '\0').data(), pad);
    }
    if (::fsync(fd) != 0) throw Error(out_path + ": fsync failed: " + strerror(errno));
  } catch (...) {
    if (in >= 0) ::close(in);
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(in);
  if (::close(fd) != 0 || ::rename(tmp.c_str(), out_path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    throw Error(out_path + ": cannot write: " + strerror(errno));
  }
}

void make_self_draft(const std::string& from, int layers, const std::string& out_path) {
  GgufFile f = GgufFile::open(from);
  const std::string arch = f.get_string("general.architecture").value_or("");
  if (arch != "llama") throw Error(from + ": make-draft supports llama GGUF models, not '" + arch + "'");
  const uint64_t n = f.get_uint("llama.block_count").value_or(0);
  if (layers < 1 || static_cast<uint64_t>(layers) > n)
    throw Error("--layers must be between 1 and the model's " + std::to_string(n) + " blocks");
  std::vector<std::string> names = {"token_embd.weight", "output_norm.weight"};
  if (f.find_tensor("output.weight")) names.push_back("output.weight");
  for (const auto& t : f.tensors())
    if (t.name.rfind("blk.", 0) == 0) {
      const int b = std::atoi(t.name.c_str() + 4);
      if (b < layers) names.push_back(t.name);
    }
  std::map<std::string, GgufValue> ov;
  GgufValue bc;
  bc.type = GgufType::U32;
  bc.u = static_cast<uint64_t>(layers);
  ov["llama.block_count"] = bc;
  GgufValue name;
  name.type = GgufType::STRING;
  name.s = f.get_string("general.name").value_or("model") + " (self-draft: first " + std::to_string(layers) +
           " of " + std::to_string(n) + " blocks)";
  ov["general.name"] = name;
  write_gguf_subset(f, out_path, ov, names);
}

}  // namespace redwood
