// How one layer's seven weight matrices are read from storage into a ring slot:
// a few large, aligned reads (adjacent extents merged), each landing at an
// aligned offset inside the slot, and where every tensor then lies in the slot.
// Norm vectors are tiny and always resident, so they are not part of it.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "src/model/model_desc.h"

namespace redwood::offload {

// The alignment O_DIRECT needs for offsets, sizes and buffer addresses.
inline constexpr uint64_t kIoAlign = 4096;

struct SlotRead {
  int file = 0;
  uint64_t file_offset = 0;  // aligned down to kIoAlign
  uint64_t bytes = 0;        // aligned up to kIoAlign (may run past the end of the file)
  uint64_t required = 0;     // bytes that must be delivered (the rest may be past EOF)
  uint64_t slot_offset = 0;  // where the read lands in the slot (kIoAlign aligned)
};

struct LayerLayout {
  std::vector<SlotRead> reads;
  // Offset inside the slot of wq, wk, wv, wo, w_gate, w_up, w_down.
  std::array<uint64_t, 7> tensor_offset{};
  uint64_t slot_bytes = 0;     // total (multiple of kIoAlign)
  uint64_t payload_bytes = 0;  // sum of the seven tensors' bytes
  // A packed layer (TensorExtent::packed): the reads land in a staging buffer
  // of staging_bytes, where tensor i's stream starts at stored_offset[i], and
  // the streamer decodes each into the slot at tensor_offset[i].
  std::array<uint64_t, 7> stored_offset{};
  uint64_t staging_bytes = 0;
  bool packed() const { return staging_bytes != 0; }
  uint64_t read_bytes() const;  // what a pass reads from storage for the layer
};

// The seven matrices of a layer in LayerDesc order (no norms).
std::array<const TensorExtent*, 7> layer_matrices(const LayerDesc& L);

// Extents in the same file whose gap is at most max_gap are merged into one
// read (a packed layer's: their stored streams).
LayerLayout layout_layer(const LayerDesc& L, uint64_t max_gap = 1u << 20);

}  // namespace redwood::offload
