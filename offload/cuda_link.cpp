// The CUDA slot link: ring slots in VRAM, storage reads into pinned staging,
// cudaMemcpyAsync on a copy stream, events between copy and compute streams.
// Ordering per slot k (no device-wide synchronisation anywhere):
//   I/O thread:  wait released[k] (host) -> wait copied[k] before overwriting staging[k]
//                -> read into staging[k] -> copy stream waits released[k], copies, records copied[k]
//   compute:     compute stream waits copied[k] -> kernels -> records released[k]
// A packed layer (upload_packed): its stored bytes are copied to packed[k] and
// its chunk table to jobs[k] (records staged[k], after which the host image may
// be refilled), then, once released[k], the decode kernel expands them into
// slot k on the copy stream and records copied[k]. A chunk the kernel finds
// malformed (possible only in a file crafted to pass its checksums) sets the
// slot's status, which packed_ok(k) reads before the slot is marked ready.
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "kernels/cuda/check.h"
#include "kernels/cuda/wpack.h"
#include "offload/link.h"
#include "src/util/error.h"

namespace redwood::offload {

namespace {

// Named by what the call is for ("cudaMalloc (ring slot)").
using cuda::check;

class CudaLink final : public SlotLink {
 public:
  explicit CudaLink(void* compute) : compute_(static_cast<cudaStream_t>(compute)) {
    check(cudaGetDevice(&device_), "cudaGetDevice");  // the backend's device, current in this thread
    check(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~CudaLink() override {
    cudaStreamSynchronize(copy_);  // teardown only: no copy may outlive its buffers
    release_slots();
    for (void* p : host_) cudaFreeHost(p);
    cudaStreamDestroy(copy_);
  }

  void init(int slots, size_t bytes, bool storage_reads) override {
    release_slots();
    slot_bytes_ = bytes;
    slots_.resize(slots);
    for (Slot& s : slots_) {
      check(cudaMalloc(&s.device, bytes), "cudaMalloc (ring slot)");
      if (storage_reads)
        check(cudaHostAlloc(reinterpret_cast<void**>(&s.staging), bytes, cudaHostAllocDefault),
              "cudaHostAlloc (staging)");
      check(cudaEventCreateWithFlags(&s.copied, cudaEventDisableTiming), "cudaEventCreate");
      check(cudaEventCreateWithFlags(&s.released, cudaEventDisableTiming), "cudaEventCreate");
    }
  }
  const uint8_t* slot(int k) const override { return slots_[k].device; }
  uint8_t* landing(int k) override {
    on_device();
    // The previous upload from this staging buffer must have finished.
    check(cudaEventSynchronize(slots_[k].copied), "cudaEventSynchronize (staging reuse)");
    return slots_[k].staging;
  }
  uint8_t* alloc_host(size_t bytes) override {
    void* p = nullptr;
    check(cudaHostAlloc(&p, bytes, cudaHostAllocDefault), "cudaHostAlloc (host tier)");
    host_.push_back(p);
    return static_cast<uint8_t*>(p);
  }
  void wait_released(int k) override {
    on_device();
    check(cudaEventSynchronize(slots_[k].released), "cudaEventSynchronize (slot reuse)");
  }
  void upload(int k, const uint8_t* src, size_t n) override {
    on_device();
    Slot& s = slots_[k];
    check(cudaStreamWaitEvent(copy_, s.released, 0), "cudaStreamWaitEvent");
    check(cudaMemcpyAsync(s.device, src, n, cudaMemcpyHostToDevice, copy_), "cudaMemcpyAsync");
    check(cudaEventRecord(s.copied, copy_), "cudaEventRecord");
  }
  void compute_acquire(int k) override {
    check(cudaStreamWaitEvent(compute_, slots_[k].copied, 0), "cudaStreamWaitEvent");
  }
  void compute_release(int k) override { check(cudaEventRecord(slots_[k].released, compute_), "cudaEventRecord"); }

  bool decodes_packed() const override { return true; }
  void init_packed(size_t staging_bytes, size_t max_chunks) override {
    on_device();
    if (slots_.empty()) throw Error("offload: init_packed before init");
    for (Slot& s : slots_) {
      release_packed(s);
      check(cudaMalloc(&s.packed, staging_bytes), "cudaMalloc (packed staging)");
      check(cudaMalloc(reinterpret_cast<void**>(&s.jobs), max_chunks * sizeof(cuda::UnpackJob)),
            "cudaMalloc (chunk table)");
      check(cudaHostAlloc(reinterpret_cast<void**>(&s.jobs_host), max_chunks * sizeof(cuda::UnpackJob),
                          cudaHostAllocDefault),
            "cudaHostAlloc (chunk table)");
      check(cudaMalloc(reinterpret_cast<void**>(&s.status), sizeof(int)), "cudaMalloc (decode status)");
      check(cudaMemset(s.status, 0, sizeof(int)), "cudaMemset (decode status)");
      check(cudaHostAlloc(reinterpret_cast<void**>(&s.status_host), sizeof(int), cudaHostAllocDefault),
            "cudaHostAlloc (decode status)");
      *s.status_host = 0;
      check(cudaEventCreateWithFlags(&s.staged, cudaEventDisableTiming), "cudaEventCreate");
    }
    packed_bytes_ = staging_bytes;
    max_chunks_ = max_chunks;
  }
  void upload_packed(int k, const uint8_t* src, size_t n, const std::vector<PackedChunkJob>& chunks) override {
    on_device();
    Slot& s = slots_[k];
    if (!s.packed) throw Error("offload: upload_packed before init_packed");
    if (n > packed_bytes_ || chunks.size() > max_chunks_)
      throw Error("offload: a packed layer is larger than the link's packed staging (" + std::to_string(n) + " bytes, " +
                  std::to_string(chunks.size()) + " chunks)");
    // The previous decode into this slot (its chunk table) is done.
    check(cudaEventSynchronize(s.copied), "cudaEventSynchronize (packed staging reuse)");
    for (size_t i = 0; i < chunks.size(); ++i) {
      const PackedChunkJob& c = chunks[i];
      if (c.src > n || c.stored > n - c.src || c.dst > slot_bytes_ || uint64_t{c.n} * c.w > slot_bytes_ - c.dst)
        throw Error("offload: a packed chunk lies outside its layer's staging or slot");
      s.jobs_host[i] = {s.packed + c.src, s.device + c.dst, c.stored, c.n, c.w};
    }
    check(cudaMemcpyAsync(s.packed, src, n, cudaMemcpyHostToDevice, copy_), "cudaMemcpyAsync (packed layer)");
    check(cudaMemcpyAsync(s.jobs, s.jobs_host, chunks.size() * sizeof(cuda::UnpackJob), cudaMemcpyHostToDevice, copy_),
          "cudaMemcpyAsync (chunk table)");
    check(cudaEventRecord(s.staged, copy_), "cudaEventRecord");
    check(cudaStreamWaitEvent(copy_, s.released, 0), "cudaStreamWaitEvent");
    cuda::unpack_chunks(copy_, s.jobs, static_cast<int>(chunks.size()), s.status);
    check(cudaMemcpyAsync(s.status_host, s.status, sizeof(int), cudaMemcpyDeviceToHost, copy_),
          "cudaMemcpyAsync (decode status)");
    check(cudaEventRecord(s.copied, copy_), "cudaEventRecord");
    check(cudaEventSynchronize(s.staged), "cudaEventSynchronize (packed layer copied)");
  }
  bool packed_ok(int k) override {
    on_device();
    Slot& s = slots_[k];
    check(cudaEventSynchronize(s.copied), "cudaEventSynchronize (packed layer decoded)");
    return *s.status_host == 0;
  }

 private:
  // The I/O thread calls in too: make the link's device current there.
  void on_device() {
    thread_local int current = -1;
    if (current != device_) {
      check(cudaSetDevice(device_), "cudaSetDevice");
      current = device_;
    }
  }
  struct Slot {
    uint8_t* device = nullptr;
    uint8_t* staging = nullptr;
    cudaEvent_t copied = nullptr, released = nullptr;
    // Packed layers decoded here (init_packed).
    uint8_t* packed = nullptr;
    cuda::UnpackJob* jobs = nullptr;
    cuda::UnpackJob* jobs_host = nullptr;
    int* status = nullptr;
    int* status_host = nullptr;
    cudaEvent_t staged = nullptr;
  };
  void release_packed(Slot& s) {
    if (s.packed) cudaFree(s.packed);
    if (s.jobs) cudaFree(s.jobs);
    if (s.jobs_host) cudaFreeHost(s.jobs_host);
    if (s.status) cudaFree(s.status);
    if (s.status_host) cudaFreeHost(s.status_host);
    if (s.staged) cudaEventDestroy(s.staged);
    s.packed = nullptr, s.jobs = s.jobs_host = nullptr, s.status = s.status_host = nullptr, s.staged = nullptr;
  }
  void release_slots() {
    cudaStreamSynchronize(copy_);  // no copy or decode may outlive its buffers
    packed_bytes_ = max_chunks_ = 0;
    for (Slot& s : slots_) {
      if (s.device) cudaFree(s.device);
      if (s.staging) cudaFreeHost(s.staging);
      if (s.copied) cudaEventDestroy(s.copied);
      if (s.released) cudaEventDestroy(s.released);
      release_packed(s);
    }
    slots_.clear();
  }

  int device_ = 0;
  cudaStream_t compute_ = nullptr, copy_ = nullptr;
  std::vector<Slot> slots_;
  std::vector<void*> host_;
  size_t slot_bytes_ = 0, packed_bytes_ = 0, max_chunks_ = 0;
};

}  // namespace

std::unique_ptr<SlotLink> make_cuda_link(void* compute_stream) {
  return std::make_unique<CudaLink>(compute_stream);
}

}  // namespace redwood::offload
