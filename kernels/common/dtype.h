// Storage types of weight tensors. Quantized types are ggml's block formats:
// a row of `cols` elements is cols / block_elems() blocks of block_bytes() each.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace redwood {

enum class DType : uint8_t {
  F32,
  F16,
  BF16,
  Q8_0,
  Q4_0,
  Q4_1,
  Q5_0,
  Q5_1,
  Q4_K,
  Q5_K,
  Q6_K,
  Q2_K,
  Q3_K,
  IQ4_NL,
  IQ4_XS
};

enum class RopeMode : uint8_t {
  kInterleaved,  // pairs (2i, 2i+1): GGUF's llama layout (Q/K permuted by the converter)
  kHalf,         // pairs (i, i + d/2): Hugging Face layout ("rotate_half")
};

struct DTypeInfo {
  DType type;
  std::string_view name;
  uint32_t block_elems;  // elements per block (1 for plain types)
  uint32_t block_bytes;  // bytes per block
};

constexpr DTypeInfo kDTypes[] = {
    {DType::F32, "F32", 1, 4},       {DType::F16, "F16", 1, 2},         {DType::BF16, "BF16", 1, 2},
    {DType::Q8_0, "Q8_0", 32, 34},   {DType::Q4_0, "Q4_0", 32, 18},     {DType::Q4_1, "Q4_1", 32, 20},
    {DType::Q5_0, "Q5_0", 32, 22},   {DType::Q5_1, "Q5_1", 32, 24},     {DType::Q4_K, "Q4_K", 256, 144},
    {DType::Q5_K, "Q5_K", 256, 176}, {DType::Q6_K, "Q6_K", 256, 210},   {DType::Q2_K, "Q2_K", 256, 84},
    {DType::Q3_K, "Q3_K", 256, 110}, {DType::IQ4_NL, "IQ4_NL", 32, 18}, {DType::IQ4_XS, "IQ4_XS", 256, 136},
};
static_assert(sizeof(kDTypes) / sizeof(kDTypes[0]) == static_cast<size_t>(DType::IQ4_XS) + 1);

constexpr const DTypeInfo& dtype_info(DType t) {
  return kDTypes[static_cast<int>(t)];
}
constexpr std::string_view dtype_name(DType t) {
  return dtype_info(t).name;
}

// The KV cache element types: F32, F16, BF16 and Q8_0 (one list for the
// kernels' and the engine's checks).
constexpr bool is_kv_type(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::Q8_0;
}

// Bytes of a row of `cols` elements, or nullopt if cols is not a whole number
// of blocks or the size overflows.
inline std::optional<uint64_t> row_bytes(DType t, uint64_t cols) {
  const auto& i = dtype_info(t);
  if (cols % i.block_elems != 0) return std::nullopt;
  const uint64_t blocks = cols / i.block_elems;
  if (blocks > UINT64_MAX / i.block_bytes) return std::nullopt;
  return blocks * i.block_bytes;
}

}  // namespace redwood
