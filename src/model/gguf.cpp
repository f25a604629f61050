#include "src/model/gguf.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "src/util/error.h"
#include "src/util/io.h"

namespace redwood {

namespace {

constexpr uint64_t kMaxStringLen = 1ull << 24;   // 16 MiB: longer is hostile
constexpr int kMaxArrayDepth = 4;
constexpr uint64_t kMaxTensors = 1ull << 20;
constexpr uint64_t kMaxKv = 1ull << 20;
// Decoded metadata may take far more memory than its bytes on disk (a u8 array
// element becomes a GgufValue), so the decoded size is budgeted: real models
// need a few tens of MiB (a 256k-token vocabulary plus merges).
constexpr uint64_t kMaxMetadataBytes = 512ull << 20;

// Buffered, bounds-checked sequential reader over a file descriptor.
class Reader {
 public:
  // Reads [base, base + size) of the file as if it were the whole file.
  Reader(int fd, uint64_t size, const std::string& path, uint64_t base = 0)
      : fd_(fd), size_(size), base_(base), path_(path) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(path_ + ": " + what + " (at byte " + std::to_string(pos_) + ")");
  }

  void read(void* dst, uint64_t n, const char* what) {
    if (n > remaining()) fail(std::string("truncated file while reading ") + what);
    auto* out = static_cast<char*>(dst);
    while (n > 0) {
      if (buf_pos_ == buf_len_) refill();
      const uint64_t take = std::min<uint64_t>(n, buf_len_ - buf_pos_);
      memcpy(out, buf_.data() + buf_pos_, take);
      buf_pos_ += take;
      pos_ += take;
      out += take;
      n -= take;
    }
  }

  template <class T>
  T get(const char* what) {
    T v;
    read(&v, sizeof(T), what);
    return v;
  }

  // Accounts for `n` items of `each` bytes of decoded metadata.
  void charge(uint64_t n, uint64_t each, const std::string& what) {
    if (n > (kMaxMetadataBytes - decoded_) / each)
      fail("metadata too large to decode (over " + std::to_string(kMaxMetadataBytes >> 20) + " MiB) at " + what);
    decoded_ += n * each;
  }

  std::string get_string(const char* what) {
    const uint64_t len = get<uint64_t>(what);
    if (len > kMaxStringLen) fail(std::string("absurd string length ") + std::to_string(len) + " in " + what);
    if (len > remaining()) fail(std::string("truncated file: string of ") + std::to_string(len) + " bytes in " + what);
    charge(len, 1, what);
    std::string s(len, '\0');
    read(s.data(), len, what);
    return s;
  }

 private:
  void refill() {
    if (buf_.empty()) buf_.resize(std::min<uint64_t>(1 << 20, size_));  // small files: a small buffer
    const uint64_t want = std::min<uint64_t>(buf_.size(), size_ - pos_);
    read_exact(fd_, path_, buf_.data(), want, base_ + pos_);
    buf_len_ = want;
    buf_pos_ = 0;
  }

  int fd_;
  uint64_t size_;
  uint64_t base_;
  const std::string& path_;
  uint64_t pos_ = 0;
  std::vector<char> buf_;
  uint64_t buf_len_ = 0, buf_pos_ = 0;
  uint64_t decoded_ = 0;
};

uint64_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::BOOL: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
    case GgufType::STRING: return 8;  // at least its length field
    case GgufType::ARRAY: return 12;  // at least type + count
  }
  return 0;
}

bool valid_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::F64); }

GgufValue read_value(Reader& r, GgufType type, int depth, const std::string& key) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufType::U8: v.u = r.get<uint8_t>(key.c_str()); break;
    case GgufType::I8: v.i = r.get<int8_t>(key.c_str()); break;
    case GgufType::U16: v.u = r.get<uint16_t>(key.c_str()); break;
    case GgufType::I16: v.i = r.get<int16_t>(key.c_str()); break;
    case GgufType::U32: v.u = r.get<uint32_t>(key.c_str()); break;
    case GgufType::I32: v.i = r.get<int32_t>(key.c_str()); break;
    case GgufType::U64: v.u = r.get<uint64_t>(key.c_str()); break;
    case GgufType::I64: v.i = r.get<int64_t>(key.c_str()); break;
    case GgufType::F32: v.f = r.get<float>(key.c_str()); break;
    case GgufType::F64: v.f = r.get<double>(key.c_str()); break;
    case GgufType::BOOL: {
      const uint8_t b = r.get<uint8_t>(key.c_str());
      if (b > 1) r.fail("metadata key '" + key + "': invalid bool value " + std::to_string(b));
      v.u = b;
      break;
    }
    case GgufType::STRING: v.s = r.get_string(key.c_str()); break;
    case GgufType::ARRAY: {
      if (depth >= kMaxArrayDepth) r.fail("metadata key '" + key + "': arrays nested too deeply");
      const uint32_t et = r.get<uint32_t>(key.c_str());
      if (!valid_type(et)) r.fail("metadata key '" + key + "': invalid array element type " + std::to_string(et));
      v.elem = static_cast<GgufType>(et);
      const uint64_t n = r.get<uint64_t>(key.c_str());
      const uint64_t min_each = scalar_size(v.elem);
      if (n > r.remaining() / min_each)
        r.fail("metadata key '" + key + "': array of " + std::to_string(n) + " elements exceeds the file size");
      r.charge(n, sizeof(GgufValue), "metadata key '" + key + "'");
      v.arr.reserve(n);
      for (uint64_t k = 0; k < n; ++k) v.arr.push_back(read_value(r, v.elem, depth + 1, key));
      break;
    }
  }
  return v;
}

}  // namespace

const char* gguf_type_name(GgufType t) {
  static const char* names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = static_cast<uint32_t>(t);
  return i < 13 ? names[i] : "invalid";
}

bool GgufValue::is_int() const {
  switch (type) {
    case GgufType::U8: case GgufType::I8: case GgufType::U16: case GgufType::I16:
    case GgufType::U32: case GgufType::I32: case GgufType::U64: case GgufType::I64: return true;
    default: return false;
  }
}

GgufFile GgufFile::open(const std::string& path) { return parse(path, 0, 0, false); }

GgufFile GgufFile::open_header(const std::string& path, uint64_t base, uint64_t size) {
  return parse(path, base, size, true);
}

GgufFile GgufFile::open_header(int fd, const std::string& path, uint64_t base, uint64_t size) {
  return parse(path, base, size, true, fd);
}

GgufFile GgufFile::parse(const std::string& path, uint64_t base, uint64_t size, bool header_only, int use_fd) {
  GgufFile g;
  g.path_ = path;
  Fd own;
  int fd_in = use_fd;
  if (fd_in < 0) {
    // O_NONBLOCK: a FIFO must not block the open (it is refused below).
    own.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (own.fd < 0) throw Error(path + ": cannot open: " + strerror(errno));
    fd_in = own.fd;
  }
  struct Borrowed {
    int fd;
  } fd{fd_in};
  struct stat st{};
  if (fstat(fd.fd, &st) != 0) throw Error(path + ": cannot stat: " + strerror(errno));
  if (!S_ISREG(st.st_mode))
    throw Error(path + ": not a regular file (" + file_kind(st.st_mode) + "; a model must be a regular file)");
  g.file_size_ = static_cast<uint64_t>(st.st_size);
  if (header_only) {
    if (base > g.file_size_ || size > g.file_size_ - base)
      throw Error(path + ": embedded GGUF header (" + std::to_string(size) + " bytes at " + std::to_string(base) +
                  ") extends past the end of the file");
    g.file_size_ = size;  // the region is the "file" below; its data section is elsewhere
  }
  Reader r(fd.fd, g.file_size_, path, base);

  char magic[4];
  r.read(magic, 4, "magic");
  if (memcmp(magic, "RWPA", 4) == 0)
    throw Error(path + ": is a packed model (redwood pack); this command needs the GGUF it was packed from");
  if (memcmp(magic, "GGUF", 4) != 0) r.fail("not a GGUF file (bad magic)");
  g.version_ = r.get<uint32_t>("version");
  if (g.version_ != 2 && g.version_ != 3)
    r.fail("unsupported GGUF version " + std::to_string(g.version_) + " (supported: 2, 3)");
  const uint64_t n_tensors = r.get<uint64_t>("tensor count");
  const uint64_t n_kv = r.get<uint64_t>("metadata count");
  if (n_tensors > kMaxTensors) r.fail("absurd tensor count " + std::to_string(n_tensors));
  if (n_tensors > r.remaining() / 24)
    r.fail("truncated file or absurd tensor count " + std::to_string(n_tensors) + ": only " +
           std::to_string(r.remaining()) + " bytes follow the header");
  if (n_kv > kMaxKv) r.fail("absurd metadata count " + std::to_string(n_kv));
  if (n_kv > r.remaining() / 12)
    r.fail("truncated file or absurd metadata count " + std::to_string(n_kv) + ": only " +
           std::to_string(r.remaining()) + " bytes follow the header");

  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key = r.get_string("metadata key");
    const uint32_t t = r.get<uint32_t>("metadata type");
    if (!valid_type(t)) r.fail("metadata key '" + key + "': invalid value type " + std::to_string(t));
    GgufValue v = read_value(r, static_cast<GgufType>(t), 0, key);
    if (g.kv_.count(key)) r.fail("duplicate metadata key '" + key + "'");
    g.kv_.emplace(std::move(key), std::move(v));
  }

  if (auto a = g.find("general.alignment")) {
    // Signed integer types keep their value in `i`.
    const uint64_t av = !a->is_int() ? 0 : a->u ? a->u : a->i > 0 ? static_cast<uint64_t>(a->i) : 0;
    if (av == 0 || av > (1u << 20) || (av & (av - 1)) != 0)
      r.fail("general.alignment must be a power of two up to 1 MiB");
    g.alignment_ = av;
  }

  g.tensors_.reserve(n_tensors);
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensorInfo ti;
    ti.name = r.get_string("tensor name");
    ti.n_dims = r.get<uint32_t>("tensor dims");
    if (ti.n_dims == 0 || ti.n_dims > 4)
      r.fail("tensor '" + ti.name + "': invalid number of dimensions " + std::to_string(ti.n_dims));
    uint64_t n = 1;
    for (uint32_t d = 0; d < ti.n_dims; ++d) {
      ti.ne[d] = r.get<uint64_t>("tensor shape");
      if (ti.ne[d] == 0 || ti.ne[d] > (1ull << 40))
        r.fail("tensor '" + ti.name + "': invalid dimension " + std::to_string(ti.ne[d]));
      if (n > (1ull << 48) / ti.ne[d]) r.fail("tensor '" + ti.name + "': element count overflows");
      n *= ti.ne[d];
    }
    ti.ggml_type = r.get<uint32_t>("tensor type");
    ti.offset = r.get<uint64_t>("tensor offset");
    auto dt = dtype_from_ggml(ti.ggml_type);
    if (!dt)
      throw Error(path + ": unsupported tensor type " + std::string(ggml_type_name(ti.ggml_type)) + " (" +
                  std::to_string(ti.ggml_type) + ") for tensor " + ti.name);
    ti.type = *dt;
    auto rb = row_bytes(ti.type, ti.ne[0]);
    if (!rb)
      r.fail("tensor '" + ti.name + "': row of " + std::to_string(ti.ne[0]) + " elements is not a whole number of " +
             std::string(dtype_name(ti.type)) + " blocks");
    const uint64_t rows = n / ti.ne[0];
    if (*rb != 0 && rows > UINT64_MAX / *rb) r.fail("tensor '" + ti.name + "': size overflows");
    ti.bytes = *rb * rows;
    if (g.tensor_index_.count(ti.name)) r.fail("duplicate tensor '" + ti.name + "'");
    g.tensor_index_.emplace(ti.name, g.tensors_.size());
    g.tensors_.push_back(std::move(ti));
  }

  const uint64_t a = g.alignment_;
  g.data_offset_ = (r.pos() + a - 1) / a * a;
  if (g.data_offset_ > g.file_size_ && n_tensors > 0 && !header_only)
    r.fail("truncated file: no tensor data section");
  for (auto& ti : g.tensors_) {
    if (ti.offset % a != 0)
      throw Error(path + ": tensor '" + ti.name + "' offset " + std::to_string(ti.offset) + " is not aligned to " +
                  std::to_string(a));
    if (header_only) continue;  // the caller places the data
    if (ti.offset > g.file_size_ || ti.bytes > g.file_size_ - g.data_offset_ ||
        ti.offset > g.file_size_ - g.data_offset_ - ti.bytes)
      throw Error(path + ": tensor '" + ti.name + "' data (offset " + std::to_string(ti.offset) + ", " +
                  std::to_string(ti.bytes) + " bytes) extends past the end of the file (truncated?)");
    ti.offset += g.data_offset_;
  }
  return g;
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {
[[noreturn]] void type_error(const std::string& path, const std::string& key, const GgufValue& v,
                             const char* want) {
  throw Error(path + ": metadata key '" + key + "' has type " + gguf_type_name(v.type) + ", expected " + want);
}
}  // namespace

std::optional<uint64_t> GgufFile::get_uint(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_int()) type_error(path_, key, *v, "an integer");
  if (v->i < 0) throw Error(path_ + ": metadata key '" + key + "' is negative");
  return v->u ? v->u : static_cast<uint64_t>(v->i);
}

std::optional<double> GgufFile::get_float(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->is_float()) return v->f;
  if (v->is_int()) return v->u ? static_cast<double>(v->u) : static_cast<double>(v->i);
  type_error(path_, key, *v, "a number");
}

std::optional<bool> GgufFile::get_bool(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::BOOL) type_error(path_, key, *v, "bool");
  return v->u != 0;
}

std::optional<std::string> GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::STRING) type_error(path_, key, *v, "string");
  return v->s;
}

std::vector<std::string> GgufFile::get_string_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return {};
  if (v->type != GgufType::ARRAY || v->elem != GgufType::STRING) type_error(path_, key, *v, "array of strings");
  std::vector<std::string> out;
  out.reserve(v->arr.size());
  for (const auto& e : v->arr) out.push_back(e.s);
  return out;
}

std::vector<double> GgufFile::get_float_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return {};
  if (v->type != GgufType::ARRAY || !(v->elem == GgufType::F32 || v->elem == GgufType::F64))
    type_error(path_, key, *v, "array of floats");
  std::vector<double> out;
  out.reserve(v->arr.size());
  for (const auto& e : v->arr) out.push_back(e.f);
  return out;
}

std::vector<int64_t> GgufFile::get_int_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return {};
  GgufValue probe;
  probe.type = v->elem;
  if (v->type != GgufType::ARRAY || !probe.is_int()) type_error(path_, key, *v, "array of integers");
  std::vector<int64_t> out;
  out.reserve(v->arr.size());
  for (const auto& e : v->arr) out.push_back(e.u ? static_cast<int64_t>(e.u) : e.i);
  return out;
}

std::optional<DType> dtype_from_ggml(uint32_t t) {
  switch (t) {
    case 0: return DType::F32;
    case 1: return DType::F16;
    case 2: return DType::Q4_0;
    case 3: return DType::Q4_1;
    case 6: return DType::Q5_0;
    case 7: return DType::Q5_1;
    case 8: return DType::Q8_0;
    case 10: return DType::Q2_K;
    case 11: return DType::Q3_K;
    case 12: return DType::Q4_K;
    case 13: return DType::Q5_K;
    case 14: return DType::Q6_K;
    case 20: return DType::IQ4_NL;
    case 23: return DType::IQ4_XS;
    case 30: return DType::BF16;
    default: return std::nullopt;
  }
}

uint32_t ggml_from_dtype(DType t) {
  for (uint32_t id = 0; id < 64; ++id)
    if (dtype_from_ggml(id) == t) return id;
  throw Error("no ggml type id for " + std::string(dtype_name(t)));
}

std::string_view ggml_type_name(uint32_t t) {
  static const char* names[] = {"F32",     "F16",    "Q4_0",   "Q4_1",   "Q4_2",  "Q4_3",    "Q5_0",
                                "Q5_1",    "Q8_0",   "Q8_1",   "Q2_K",   "Q3_K",  "Q4_K",    "Q5_K",
                                "Q6_K",    "Q8_K",   "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL",
                                "IQ3_S",   "IQ2_S",  "IQ4_XS", "I8",     "I16",   "I32",     "I64",
                                "F64",     "IQ1_M",  "BF16"};
  return t < sizeof(names) / sizeof(names[0]) ? names[t] : "unknown";
}

}  // namespace redwood
