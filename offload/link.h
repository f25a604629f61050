// Where the ring slots live and how a layer's bytes get into one: the only
// part of the streaming pipeline that differs between backends.
//
// CPU backend (HostSlotLink): "device" memory is RAM, so storage reads land directly
// in the slot and a host-staged layer is one memcpy into it.
// CUDA backend (make_cuda_link): slots in VRAM; storage reads land in pinned
// staging (cudaHostAlloc, registered with io_uring), then cudaMemcpyAsync on a
// copy stream; the compute stream waits on the slot's "copied" event and
// records a "released" event the I/O thread waits on before refilling the slot:
// event ordering only, never a device-wide synchronisation inside a pass.
// Packed models (src/model/packed.h): the CPU link gets layers the streamer
// decoded on the host; the CUDA link takes a layer's stored bytes as they are
// (fewer bytes over PCIe) and expands them in VRAM (kernels/cuda/wpack.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <vector>

#include "src/engine/weights.h"

namespace redwood::offload {

// One packed chunk for a link that decodes on its device: `stored` bytes at
// `src` in a layer's staging image, decoded to n elements of w bytes at `dst`
// in the slot.
struct PackedChunkJob {
  uint64_t src = 0, stored = 0, dst = 0;
  uint32_t n = 0, w = 0;
};

class SlotLink {
 public:
  virtual ~SlotLink() = default;
  // Allocates K slots of `bytes` each (kIoAlign-aligned); storage_reads: some
  // layer is read from storage (CUDA: allocate pinned staging for the slots).
  virtual void init(int slots, size_t bytes, bool storage_reads) = 0;
  // What the kernels read (a device address on CUDA).
  virtual const uint8_t* slot(int k) const = 0;
  // Host memory that storage reads for slot k land in (the slot itself on the CPU).
  virtual uint8_t* landing(int k) = 0;
  // Host memory for a host-staged layer (pinned on CUDA). Owned by the link.
  virtual uint8_t* alloc_host(size_t bytes) = 0;
  // I/O thread, before refilling slot k: until the compute that used it is done.
  virtual void wait_released(int k) { (void)k; }
  // I/O thread: bytes [0, n) of slot k from host memory src (landing(k) or a
  // host-staged copy). May be asynchronous; ordered before compute_acquire(k).
  virtual void upload(int k, const uint8_t* src, size_t n) = 0;
  // Compute side: make the compute stream wait for slot k's upload; mark the
  // end of the compute that reads it.
  virtual void compute_acquire(int k) { (void)k; }
  virtual void compute_release(int k) { (void)k; }

  // Whether packed layers cross to the device as stored and are decoded there
  // (upload_packed); otherwise the streamer decodes them on the host into
  // landing(k) and calls upload().
  virtual bool decodes_packed() const { return false; }
  // Once, after init: the largest staging image and chunk count of a layer.
  virtual void init_packed(size_t staging_bytes, size_t max_chunks) {
    (void)staging_bytes, (void)max_chunks;
    throw std::logic_error("this slot link does not decode packed layers");
  }
  // Decode thread: copies a packed layer's staging image [0, n) at host src
  // (pinned: alloc_host) to the device and expands `chunks` into slot k,
  // ordered before compute_acquire(k). The caller checked the chunks'
  // checksums; src may be refilled once this returns.
  virtual void upload_packed(int k, const uint8_t* src, size_t n, const std::vector<PackedChunkJob>& chunks) {
    (void)k, (void)src, (void)n, (void)chunks;
    throw std::logic_error("this slot link does not decode packed layers");
  }
  // Decode thread, after upload_packed(k): waits until slot k's chunks are
  // decoded; false when one was malformed (the slot must not be used).
  virtual bool packed_ok(int k) {
    (void)k;
    return true;
  }
};

// The CPU backend's link: slots in host memory, which storage reads land in
// directly; a host-staged layer is one memcpy. Tests derive from it to watch
// or delay the streamer's side of the protocol.
class HostSlotLink : public SlotLink {
 public:
  void init(int slots, size_t bytes, bool storage_reads) override;
  const uint8_t* slot(int k) const override { return slots_[static_cast<size_t>(k)].data(); }
  uint8_t* landing(int k) override { return slots_[static_cast<size_t>(k)].data(); }
  uint8_t* alloc_host(size_t bytes) override;
  void upload(int k, const uint8_t* src, size_t n) override;

 protected:
  int slot_count() const { return static_cast<int>(slots_.size()); }
  size_t slot_bytes() const { return slot_bytes_; }

 private:
  std::vector<AlignedBuffer> slots_, host_;
  size_t slot_bytes_ = 0;
};

std::unique_ptr<SlotLink> make_cpu_link();

#ifdef REDWOOD_HAVE_CUDA
// compute_stream: the CUDA backend's stream (cudaStream_t), or null for the default stream.
std::unique_ptr<SlotLink> make_cuda_link(void* compute_stream);
#endif

}  // namespace redwood::offload
