// The CUDA slot link: ring slots in VRAM, storage reads into pinned staging,
// cudaMemcpyAsync on a copy stream, events between copy and compute streams.
// Ordering per slot k (no device-wide synchronisation anywhere):
//   I/O thread:  wait released[k] (host) -> wait copied[k] before overwriting staging[k]
//                -> read into staging[k] -> copy stream waits released[k], copies, records copied[k]
//   compute:     compute stream waits copied[k] -> kernels -> records released[k]
#include <cuda_runtime.h>

#include <vector>

#include "kernels/cuda/check.h"
#include "offload/link.h"

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
  };
  void release_slots() {
    for (Slot& s : slots_) {
      if (s.device) cudaFree(s.device);
      if (s.staging) cudaFreeHost(s.staging);
      if (s.copied) cudaEventDestroy(s.copied);
      if (s.released) cudaEventDestroy(s.released);
    }
    slots_.clear();
  }

  int device_ = 0;
  cudaStream_t compute_ = nullptr, copy_ = nullptr;
  std::vector<Slot> slots_;
  std::vector<void*> host_;
};

}  // namespace

std::unique_ptr<SlotLink> make_cuda_link(void* compute_stream) {
  return std::make_unique<CudaLink>(compute_stream);
}

}  // namespace redwood::offload
