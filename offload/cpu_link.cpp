#include <cstring>
#include <vector>

#include "offload/layer_layout.h"
#include "offload/link.h"
#include "src/engine/weights.h"

namespace redwood::offload {

namespace {

class CpuLink final : public SlotLink {
 public:
  void init(int slots, size_t bytes, bool /*storage_reads*/) override {
    slots_.clear();
    for (int k = 0; k < slots; ++k) slots_.emplace_back(bytes, kIoAlign);
  }
  const uint8_t* slot(int k) const override { return slots_[k].data(); }
  uint8_t* landing(int k) override { return slots_[k].data(); }
  uint8_t* alloc_host(size_t bytes) override { return host_.emplace_back(bytes, kIoAlign).data(); }
  void upload(int k, const uint8_t* src, size_t n) override {
    if (src != slots_[k].data()) std::memcpy(slots_[k].data(), src, n);
  }

 private:
  std::vector<AlignedBuffer> slots_, host_;
};

}  // namespace

std::unique_ptr<SlotLink> make_cpu_link() {
  return std::make_unique<CpuLink>();
}

}  // namespace redwood::offload
