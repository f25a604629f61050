// The layer streaming pipeline: a WeightSource that keeps the planner's
// device-resident layers in memory and streams every other layer through a
// ring of K slots, storage -> (host ->) device, on its own I/O thread.
//
// The stream is the endless sequence of non-resident layers, pass after pass:
// element j is layer stream[j % m] and lands in slot j % K. The I/O thread
// loads element j as soon as the forward pass has released element j - K, so
// while layer i computes, the next K - 1 streamed layers are in flight, and
// at the end of a pass it is already loading the first streamed layers of the
// next one (draft -> verify -> draft never starts cold). Resident layers are
// never copied. The pass waits (no busy-waiting) only when a slot is not ready:
// that wait is the stall time.
//
// A packed model's layers (src/model/packed.h) take one more stage: the I/O
// thread reads a layer's packed streams into a staging buffer (one per slot)
// and a decode thread expands them into the slot, so decoding overlaps the
// next reads and the compute of earlier layers.
//
// CPU backend: "device" is RAM, so storage reads land directly in the slot;
// host-staged layers are copied host -> slot (memcpy), the same path the CUDA
// backend takes with cudaMemcpyAsync on a copy stream.
#pragma once
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "offload/layer_layout.h"
#include "offload/link.h"
#include "offload/placement.h"
#include "offload/storage_reader.h"
#include "offload/trace.h"
#include "src/engine/weights.h"
#include "src/util/thread_annotations.h"

namespace redwood::offload {

struct StreamOptions {
  ReaderOptions reader;
  bool verify_io = false;          // checksum every streamed layer against a first, separate read
  Trace* trace = nullptr;          // optional; must outlive the streamer
  std::shared_ptr<SlotLink> link;  // where slots live (null: the CPU backend's RAM)
  // The backend the pass runs on. When its memory is not host memory (CUDA),
  // globals, norms and device-resident layers are copied into it and the host
  // copies freed; without a link, the CUDA slot link on its stream is made.
  Backend* backend = nullptr;
  // Packed models decoded on the host: threads that decode each layer's
  // chunks together (the decode thread and decode_threads - 1 helpers). One
  // by default (why: docs/PERFORMANCE.md, "Packed models"); $REDWOOD_DECODE_THREADS
  // sets it for a measurement where storage outruns one decoding core.
  int decode_threads = 1;
};

// What one forward pass cost.
struct PassIo {
  uint64_t storage_bytes = 0;  // read from storage for this pass's layers
  uint64_t host_bytes = 0;     // copied host -> device for this pass's layers
  double io_seconds = 0;       // time the I/O thread spent loading this pass's layers
  double decode_seconds = 0;   // time the decode thread spent on them (packed models)
  double stall_seconds = 0;    // the pass waiting for a slot to be ready
  double compute_seconds = 0;  // wall - stall
  double wall_seconds = 0;     // begin_pass .. end_pass
};

class StreamedWeights final : public WeightSource {
 public:
  // Loads globals, all norms and the device-resident layers, stages the host
  // tier, then starts streaming. Throws redwood::Error.
  StreamedWeights(const ModelDesc& m, const MemoryPlan& plan, const StreamOptions& opts = {});
  ~StreamedWeights() override;
  StreamedWeights(const StreamedWeights&) = delete;
  StreamedWeights& operator=(const StreamedWeights&) = delete;

  const GlobalWeights& globals() override { return dev_ ? dev_globals_ : resident_->globals(); }
  void begin_pass() override;
  const LayerWeights& acquire(int layer) override;
  void release(int layer) override;
  void end_pass() override;

  const PassIo& last_pass() const { return last_; }
  const PassIo& totals() const { return total_; }
  int passes() const { return passes_; }
  int streamed_layers() const { return static_cast<int>(stream_.size()); }
  const char* reader_kind() const;
  bool reader_direct() const;

 private:
  enum class SlotState { kFree, kLoading, kReady, kInUse };
  // state and seq change under mu_ (slots_ is guarded by it); the rest belongs
  // to whoever the state gives the slot to: the thread filling it (kLoading),
  // then the pass (kInUse), which reads them through the reference it took.
  struct Slot {
    SlotState state = SlotState::kFree;
    uint64_t seq = 0;                // stream element held
    uint64_t storage = 0, host = 0;  // bytes it took to fill
    double seconds = 0;              // and how long
    double decode_seconds = 0;       // of which decoding, on the decode thread (packed)
  };
  // Packed models: a layer's packed streams, read, not yet decoded. full and
  // seq change under mu_; the rest belongs to the I/O thread until full, then
  // to the decode thread.
  struct Stage {
    bool full = false;
    uint64_t seq = 0;
    uint64_t bytes = 0;
    double seconds = 0;
  };

  void start_threads();          // the I/O thread, and the decode thread and helpers of a packed model
  void stop_threads() noexcept;  // stops and joins every thread that started
  void io_loop();
  void read_loop();    // packed: the I/O thread
  void decode_loop();  // packed: the decode thread
  void decode_layer(int layer, const uint8_t* staging, uint8_t* slot);
  // Runs fn(0 .. n-1) on the calling decode thread and the decode helpers;
  // rethrows the first exception once all are done.
  void decode_parallel(size_t n, const std::function<void(size_t)>& fn) EXCLUDES(mu_);
  // Runs fn on indices of the current decode_parallel job (n of them) until none is left.
  void decode_share(const std::function<void(size_t)>& fn, size_t n) EXCLUDES(mu_);
  void decode_helper_loop() EXCLUDES(mu_);
  std::vector<PackedChunkJob> chunk_jobs(int layer, const uint8_t* staging) const;
  static void raise_io_priority();
  void load(uint64_t seq, Slot& s, int k) EXCLUDES(mu_);
  uint64_t checksum(int layer, const uint8_t* slot) const;
  // Waits until stream element seq is in its slot, takes it (kInUse) and returns it.
  Slot& wait_ready(uint64_t seq, int layer) EXCLUDES(mu_);
  void free_current() EXCLUDES(mu_);
  void rethrow_io_error() REQUIRES(mu_);
  void fail(uint64_t seq) REQUIRES(mu_);            // in a catch block: records the error, wakes everyone
  bool failed_by(uint64_t seq) const REQUIRES(mu_);  // an error at element seq or before

  std::vector<LayerDesc> layers_;  // copies: the streamer outlives no one's ModelDesc
  std::vector<std::string> files_;
  StreamOptions opts_;
  std::unique_ptr<ResidentWeights> resident_;  // globals, norms, device-resident layers (host memory)
  std::unique_ptr<BackendCopies> dev_;         // the same in backend memory (then resident_ is freed)
  GlobalWeights dev_globals_;
  std::vector<LayerWeights> dev_layers_;
  const LayerWeights& resident_layer(int layer) { return dev_ ? dev_layers_[layer] : resident_->acquire(layer); }
  std::vector<int> stream_;          // non-resident layers in order
  std::vector<int> stream_index_;    // layer -> index in stream_, or -1
  std::vector<LayerLayout> layout_;  // per layer (streamed ones)
  std::vector<uint8_t*> host_copy_;  // per layer: slot image of host-staged layers (link-owned)
  std::shared_ptr<SlotLink> link_;
  std::vector<uint64_t> reference_sum_;  // verify_io: per layer
  std::vector<AlignedBuffer> staging_;   // packed, decoded on the host: per slot (else link-owned)
  std::vector<uint8_t*> stage_buf_;      // packed: per slot, where its reads land
  bool raise_io_ = true;                 // $REDWOOD_IO_PRIORITY: 0 leaves the I/O thread's priority as it is
  bool device_decode_ = false;           // packed: the link decodes (upload_packed)
  std::vector<LayerWeights> bound_;      // per slot: views into it
  std::unique_ptr<StorageReader> reader_;

  // The handshake between the pass, the I/O thread and the decode thread(s).
  Mutex mu_;
  CondVar cv_;
  size_t ring_ = 0;                                  // slots_.size(), fixed at construction
  std::vector<Slot> slots_ GUARDED_BY(mu_);          // the ring (Slot: who owns the rest)
  std::vector<Stage> stages_ GUARDED_BY(mu_);        // packed: per slot
  uint64_t next_read_ GUARDED_BY(mu_) = 0;           // packed: the I/O thread's next stream element
  uint64_t next_load_ GUARDED_BY(mu_) = 0;           // I/O (packed: decode) thread: next stream element to load
  uint64_t next_consume_ = 0;  // the pass's own: next stream element it will acquire (written under mu_)
  bool stop_ GUARDED_BY(mu_) = false;
  std::exception_ptr io_error_ GUARDED_BY(mu_);  // the error at the earliest stream element (I/O or decode thread)
  uint64_t io_error_seq_ GUARDED_BY(mu_) = 0;     // that element
  std::thread io_thread_;
  std::thread decode_thread_;
  std::vector<std::thread> decode_helpers_;
  struct DecodeJob {  // the decode_parallel call in progress
    const std::function<void(size_t)>* fn = nullptr;
    size_t n = 0;
    uint64_t generation = 0;
    int helpers_busy = 0, helpers_alive = 0;
    std::exception_ptr error;
  };
  DecodeJob djob_ GUARDED_BY(mu_);
  std::atomic<size_t> djob_next_{0};  // the job's next index (taken without mu_)
  CondVar dcv_;

  Trace::Clock::time_point pass_start_{}, layer_start_{};
  PassIo cur_, last_, total_;
  int passes_ = 0;
};

}  // namespace redwood::offload
