#include <cstring>
#include <vector>

#include "offload/layer_layout.h"
#include "offload/link.h"
#include "src/engine/weights.h"

namespace redwood::offload {

void HostSlotLink::init(int slots, size_t bytes, bool /*storage_reads*/) {
  slots_.clear();
  for (int k = 0; k < slots; ++k) slots_.emplace_back(bytes, kIoAlign);
  slot_bytes_ = bytes;
}

uint8_t* HostSlotLink::alloc_host(size_t bytes) {
  return host_.emplace_back(bytes, kIoAlign).data();
}

void HostSlotLink::upload(int k, const uint8_t* src, size_t n) {
  uint8_t* dst = slots_[static_cast<size_t>(k)].data();
  if (src != dst) std::memcpy(dst, src, n);
}

std::unique_ptr<SlotLink> make_cpu_link() {
  return std::make_unique<HostSlotLink>();
}

}  // namespace redwood::offload
