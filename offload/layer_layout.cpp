#include "offload/layer_layout.h"

#include <algorithm>

#include "src/util/align.h"

namespace redwood::offload {

std::array<const TensorExtent*, 7> layer_matrices(const LayerDesc& L) {
  return {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down};
}

uint64_t LayerLayout::read_bytes() const {
  uint64_t n = 0;
  for (const SlotRead& r : reads) n += r.bytes;
  return n;
}

LayerLayout layout_layer(const LayerDesc& L, uint64_t max_gap) {
  const auto mats = layer_matrices(L);
  const bool packed = std::any_of(mats.begin(), mats.end(), [](const TensorExtent* t) { return t->packed; });
  std::array<int, 7> order{0, 1, 2, 3, 4, 5, 6};
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return mats[a]->file != mats[b]->file ? mats[a]->file < mats[b]->file : mats[a]->offset < mats[b]->offset;
  });
  LayerLayout out;
  // Group extents into reads: same file and a gap of at most max_gap.
  struct Group {
    int file;
    uint64_t begin, end;  // exact byte range covered
    std::vector<int> members;
  };
  std::vector<Group> groups;
  for (int i : order) {
    const TensorExtent& t = *mats[i];
    out.payload_bytes += t.bytes;
    const uint64_t end = t.offset + t.stored();
    if (!groups.empty() && groups.back().file == t.file && t.offset <= groups.back().end + max_gap) {
      groups.back().end = std::max(groups.back().end, end);
      groups.back().members.push_back(i);
    } else {
      groups.push_back({t.file, t.offset, end, {i}});
    }
  }
  uint64_t slot = 0;
  for (const Group& g : groups) {
    SlotRead r;
    r.file = g.file;
    r.file_offset = align_down(g.begin, kIoAlign);
    r.bytes = align_up(g.end, kIoAlign) - r.file_offset;
    r.required = g.end - r.file_offset;
    r.slot_offset = slot;
    for (int i : g.members) (packed ? out.stored_offset : out.tensor_offset)[i] = slot + (mats[i]->offset - r.file_offset);
    slot += r.bytes;
    out.reads.push_back(r);
  }
  if (!packed) {
    out.slot_bytes = slot;
    return out;
  }
  out.staging_bytes = slot;
  uint64_t at = 0;  // decoded tensors, one after the other
  for (int i = 0; i < 7; ++i) {
    out.tensor_offset[i] = at;
    at += align_up(mats[i]->bytes, kIoAlign);
  }
  out.slot_bytes = at;
  return out;
}

}  // namespace redwood::offload
