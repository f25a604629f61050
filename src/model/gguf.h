// GGUF v2/v3 reader: header, every metadata value type, tensor infos, alignment.
// Reads the header through bounded reads of the file (never the whole file):
// tensor data stays on disk and is described by extents (offset, bytes).
// Every count, length, dimension and offset is checked against the file size,
// so a hostile file yields a redwood::Error, never a crash or a giant allocation.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/common/dtype.h"

namespace redwood {

enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};
const char* gguf_type_name(GgufType t);

// ggml's numeric tensor type ids as stored in GGUF.
std::optional<DType> dtype_from_ggml(uint32_t ggml_type);
uint32_t ggml_from_dtype(DType t);  // the inverse
std::string_view ggml_type_name(uint32_t ggml_type);  // "Q4_K", "IQ2_XXS", ... or "unknown"

struct GgufValue {
  GgufType type = GgufType::U8;
  GgufType elem = GgufType::U8;  // element type when type == ARRAY
  uint64_t u = 0;                // unsigned ints and bool
  int64_t i = 0;                 // signed ints
  double f = 0;                  // floats
  std::string s;                 // STRING
  std::vector<GgufValue> arr;    // ARRAY

  bool is_int() const;
  bool is_float() const { return type == GgufType::F32 || type == GgufType::F64; }
};

struct GgufTensorInfo {
  std::string name;
  uint32_t ggml_type = 0;
  DType type = DType::F32;
  uint32_t n_dims = 0;
  uint64_t ne[4] = {1, 1, 1, 1};  // ne[0] is the contiguous dimension
  uint64_t offset = 0;            // absolute offset in the file
  uint64_t bytes = 0;
  uint64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
};

class GgufFile {
 public:
  // Parses and validates; throws redwood::Error naming the file and the problem.
  static GgufFile open(const std::string& path);
  // Parses a GGUF header (magic through tensor infos) stored at [base, base +
  // size) of `path`, whose tensor data lies elsewhere (a packed model,
  // src/model/packed.h): tensor offsets stay relative to the data section
  // (tensors()[i].offset is unchecked and meaningless to the caller).
  static GgufFile open_header(const std::string& path, uint64_t base, uint64_t size);
  // The same from an open descriptor of `path` (the bytes a caller has just
  // checksummed through it, not whatever the path names by now).
  static GgufFile open_header(int fd, const std::string& path, uint64_t base, uint64_t size);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t file_size() const { return file_size_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }

  const GgufValue* find(const std::string& key) const;
  const GgufTensorInfo* find_tensor(const std::string& name) const;

  // Typed accessors: a present key of the wrong type is an error; a missing
  // key returns the fallback (or nullopt).
  std::optional<uint64_t> get_uint(const std::string& key) const;
  std::optional<double> get_float(const std::string& key) const;
  std::optional<bool> get_bool(const std::string& key) const;
  std::optional<std::string> get_string(const std::string& key) const;
  std::vector<std::string> get_string_array(const std::string& key) const;
  std::vector<double> get_float_array(const std::string& key) const;
  std::vector<int64_t> get_int_array(const std::string& key) const;

 private:
  static GgufFile parse(const std::string& path, uint64_t base, uint64_t size, bool header_only, int fd = -1);
  std::string path_;
  uint32_t version_ = 0;
  uint64_t file_size_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::map<std::string, GgufValue> kv_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

}  // namespace redwood
