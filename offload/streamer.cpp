#include "offload/streamer.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/common/wpack.h"
#include "src/model/packed.h"
#include "src/util/env.h"
#include "src/util/error.h"
#include "src/util/io.h"

namespace redwood::offload {

namespace {

using Clock = Trace::Clock;

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::vector<ReadRequest> requests(const LayerLayout& lay, uint8_t* base) {
  std::vector<ReadRequest> r;
  for (const SlotRead& s : lay.reads) r.push_back({s.file, s.file_offset, s.bytes, s.required, base + s.slot_offset});
  return r;
}

uint64_t read_bytes(const LayerLayout& lay) {
  uint64_t n = 0;
  for (const SlotRead& s : lay.reads) n += s.bytes;
  return n;
}

// Checksum of a layer's seven matrices, given a pointer to each.
template <class Ptr>
uint64_t hash_matrices(const LayerDesc& L, Ptr&& ptr) {
  XXH3_state_t* st = XXH3_createState();
  if (!st) throw Error("out of memory (xxhash state)");
  XXH3_64bits_reset(st);
  const auto mats = layer_matrices(L);
  for (size_t i = 0; i < mats.size(); ++i) XXH3_64bits_update(st, ptr(i), mats[i]->bytes);
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

}  // namespace

StreamedWeights::StreamedWeights(const ModelDesc& m, const MemoryPlan& plan, const StreamOptions& opts)
    : layers_(m.layers), files_(m.files), opts_(opts) {
  const int n = static_cast<int>(m.layers.size());
  if (static_cast<int>(plan.layer_tier.size()) != n) throw Error("memory plan does not match the model's layers");
  // Measurement knobs, like REDWOOD_ISA: read here (a bad value is an error before any weight loads).
  if (const auto v = env_decode_threads()) opts_.decode_threads = static_cast<int>(*v);
  if (const auto v = env_io_priority()) raise_io_ = *v == 1;
  resident_ = std::make_unique<ResidentWeights>(m, [&plan](int i) { return plan.layer_tier[i] == Tier::kDevice; });
  if (opts.backend && !opts.backend->host_memory()) {
    if (!opts_.link) {
#ifdef REDWOOD_HAVE_CUDA
      opts_.link = make_cuda_link(opts.backend->stream());  // slots in the backend's VRAM, its stream
#else
      throw Error("offload: a backend with its own memory needs its slot link");
#endif
    }
    dev_ = std::make_unique<BackendCopies>(*opts.backend, m.hp);
    dev_globals_ = dev_->globals(resident_->globals(), m.hp.tied_lm_head);
    for (int i = 0; i < n; ++i) dev_layers_.push_back(dev_->layer(resident_->acquire(i)));
    opts.backend->synchronize();
    resident_.reset();
  }
  stream_index_.assign(n, -1);
  layout_.resize(n);
  host_copy_.assign(n, nullptr);
  link_ = opts_.link ? opts_.link : std::shared_ptr<SlotLink>(make_cpu_link());
  uint64_t slot_bytes = 0;
  for (int i = 0; i < n; ++i) {
    if (plan.layer_tier[i] == Tier::kDevice) continue;
    stream_index_[i] = static_cast<int>(stream_.size());
    stream_.push_back(i);
    layout_[i] = layout_layer(m.layers[i]);
    slot_bytes = std::max(slot_bytes, layout_[i].slot_bytes);
  }
  if (stream_.empty()) return;
  const int k = std::min<int>(plan.ring_slots, static_cast<int>(stream_.size()));
  if (k < 1) throw Error("memory plan streams layers but has no ring slots");

  reader_ = open_storage_reader(m.files, opts.reader);
  ring_ = static_cast<size_t>(k);
  slots_.resize(k);
  bound_.resize(k);
  const bool storage_reads =
      std::any_of(stream_.begin(), stream_.end(), [&](int l) { return plan.layer_tier[l] == Tier::kStorage; });
  uint64_t staging_bytes = 0;
  for (int l : stream_) staging_bytes = std::max(staging_bytes, layout_[l].staging_bytes);
  // A packed model's layers are decoded on the link's device where it can
  // (CUDA: the stored bytes cross PCIe, a kernel expands them), else on the
  // host into the link's landing buffer (CUDA: pinned staging), host-tier
  // layers too. --verify-io checks host-decoded bytes: it keeps the host decoder.
  device_decode_ = staging_bytes > 0 && link_->decodes_packed() && !opts.verify_io;
  link_->init(k, slot_bytes, !device_decode_ && (storage_reads || staging_bytes > 0));
  if (staging_bytes > 0) {  // a packed model: its reads land in staging buffers
    for (int i = 0; i < k; ++i)  // pinned where the link copies from them
      stage_buf_.push_back(device_decode_ ? link_->alloc_host(staging_bytes)
                                          : staging_.emplace_back(staging_bytes, kIoAlign).data());
    stages_.resize(k);
    if (device_decode_) {
      uint64_t max_chunks = 0;
      for (int l : stream_) {
        uint64_t c = 0;
        for (const TensorExtent* t : layer_matrices(m.layers[l])) c += pack_chunk_count(*t);
        max_chunks = std::max(max_chunks, c);
      }
      link_->init_packed(staging_bytes, max_chunks);
    }
  }
  if (storage_reads) {  // storage reads land in these: register them with io_uring
    std::vector<std::pair<void*, size_t>> regs;
    for (int i = 0; i < k; ++i)
      regs.emplace_back(stage_buf_.empty() ? link_->landing(i) : stage_buf_[i],
                        stage_buf_.empty() ? slot_bytes : staging_bytes);
    reader_->register_buffers(regs);
  }

  for (int l : stream_) {
    if (plan.layer_tier[l] != Tier::kHost) continue;
    // The host keeps the slot image, or a packed layer's stored streams (its
    // staging image: fewer bytes held, decoded into the slot every pass).
    host_copy_[l] = link_->alloc_host(layout_[l].packed() ? layout_[l].staging_bytes : layout_[l].slot_bytes);
    reader_->read(requests(layout_[l], host_copy_[l]));
  }

  if (opts.verify_io) {
    // Reference checksums from a separate, plain buffered read of each tensor.
    reference_sum_.assign(n, 0);
    std::vector<int> fds;
    for (const auto& f : m.files) fds.push_back(::open(f.c_str(), O_RDONLY | O_CLOEXEC));
    try {
      for (int l : stream_) {
        const auto mats = layer_matrices(m.layers[l]);
        std::vector<std::vector<uint8_t>> bytes(mats.size());
        for (size_t i = 0; i < mats.size(); ++i) {
          const TensorExtent& t = *mats[i];
          if (fds.at(t.file) < 0) throw Error(m.files[t.file] + ": cannot open for --verify-io");
          bytes[i].resize(t.bytes);
          read_tensor(fds[t.file], m.files[t.file], t, bytes[i].data());  // decoded, if packed
        }
        reference_sum_[l] = hash_matrices(m.layers[l], [&](size_t i) { return bytes[i].data(); });
      }
    } catch (...) {
      for (int fd : fds)
        if (fd >= 0) ::close(fd);
      throw;
    }
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  }
  try {
    start_threads();
  } catch (...) {  // a thread that could not start (EAGAIN): stop and join the ones that did
    stop_threads();
    throw;
  }
}

void StreamedWeights::start_threads() {
  if (stage_buf_.empty()) {
    io_thread_ = std::thread([this] {
      if (raise_io_) raise_io_priority();
      io_loop();
    });
  } else {
    io_thread_ = std::thread([this] {
      if (raise_io_) raise_io_priority();
      read_loop();
    });
    // At the compute threads' priority: raised like the I/O thread, it took
    // cores from them in passes that are not I/O-bound (docs/PERFORMANCE.md,
    // "Packed models").
    if (!device_decode_)  // before the decode thread, which reads decode_helpers_
      for (int i = 1; i < opts_.decode_threads; ++i) decode_helpers_.emplace_back([this] { decode_helper_loop(); });
    decode_thread_ = std::thread([this] { decode_loop(); });
  }
}

// The I/O thread only submits reads and waits for them; when it is ready to
// submit, a compute thread should not keep it waiting for a time slice (on a
// machine with as many compute threads as cores the disk then idles). Under a
// real-time policy (chrt) it gets one priority step above the compute threads,
// otherwise a nice value 5 below theirs. Either needs privileges
// (CAP_SYS_NICE); without them it stays as it is. REDWOOD_IO_PRIORITY=0
// leaves it unchanged (for A/B measurements; read by the constructor).
void StreamedWeights::raise_io_priority() {
  int policy = 0;
  sched_param sp{};
  if (pthread_getschedparam(pthread_self(), &policy, &sp) != 0) return;
  if (policy == SCHED_FIFO || policy == SCHED_RR) {
    sp.sched_priority = std::min(sp.sched_priority + 1, sched_get_priority_max(policy));
    (void)pthread_setschedparam(pthread_self(), policy, &sp);
    return;
  }
  errno = 0;
  const id_t self = static_cast<id_t>(gettid());  // Linux: nice values are per thread
  const int nice_now = getpriority(PRIO_PROCESS, self);
  if (errno == 0) (void)setpriority(PRIO_PROCESS, self, std::max(nice_now - 5, -20));
}

StreamedWeights::~StreamedWeights() {
  stop_threads();
}

void StreamedWeights::stop_threads() noexcept {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  dcv_.notify_all();
  if (io_thread_.joinable()) io_thread_.join();
  if (decode_thread_.joinable()) decode_thread_.join();
  for (std::thread& t : decode_helpers_)
    if (t.joinable()) t.join();
}

const char* StreamedWeights::reader_kind() const {
  return reader_ ? reader_->kind() : "none";
}
bool StreamedWeights::reader_direct() const {
  return reader_ && reader_->direct();
}

uint64_t StreamedWeights::checksum(int layer, const uint8_t* slot) const {
  return hash_matrices(layers_[layer], [&](size_t i) { return slot + layout_[layer].tensor_offset[i]; });
}

void StreamedWeights::load(uint64_t seq, Slot& s, int k) {
  const int layer = stream_[seq % stream_.size()];
  const LayerLayout& lay = layout_[layer];
  s.storage = s.host = 0;
  link_->wait_released(k);
  const auto t0 = Clock::now();
  const uint8_t* src = host_copy_[layer];
  if (src) {
    s.host = lay.slot_bytes;
  } else {
    uint8_t* dst = link_->landing(k);
    const auto reqs = requests(lay, dst);
    reader_->read(reqs);
    s.storage = read_bytes(lay);
    src = dst;
  }
  // Checked on the host side, before the (possibly asynchronous) upload.
  if (opts_.verify_io && checksum(layer, src) != reference_sum_[layer])
    throw Error("--verify-io: layer " + std::to_string(layer) +
                " streamed bytes differ from the first read (storage or transfer corruption)");
  link_->upload(k, src, lay.slot_bytes);
  const auto t1 = Clock::now();
  s.seconds = seconds(t0, t1);
  if (opts_.trace)
    opts_.trace->add(Trace::kIo, (s.host ? "copy layer " : "read layer ") + std::to_string(layer), t0, t1,
                     s.host + s.storage);
}

// Under mu_: the error of the earliest stream element is the one the pass
// rethrows, whichever thread met it first. (Keeping the first in time could
// hang: the read thread, ahead, fails on element r; then the decode thread
// fails on r - 1 and exits; a pass waiting for r - 1 must see an error at or
// before it.) Each thread stops at its failed element, and the decode thread
// stops at the first element whose read failed, so every element after the
// earliest failure is never made ready and every one before it is.
void StreamedWeights::fail(uint64_t seq) {
  if (!io_error_ || seq < io_error_seq_) {
    io_error_ = std::current_exception();
    io_error_seq_ = seq;
  }
  cv_.notify_all();
}

bool StreamedWeights::failed_by(uint64_t seq) const {
  return io_error_ && io_error_seq_ <= seq;
}

void StreamedWeights::io_loop() {
  const size_t k = ring_;
  MutexLock lock(mu_);
  for (;;) {
    Slot& s = slots_[next_load_ % k];
    while (!stop_ && s.state != SlotState::kFree) cv_.wait(lock);
    if (stop_) return;
    const uint64_t seq = next_load_++;
    s.state = SlotState::kLoading;
    s.seq = seq;
    lock.unlock();
    try {
      load(seq, s, static_cast<int>(seq % k));
    } catch (...) {
      lock.lock();
      fail(seq);
      return;
    }
    lock.lock();
    s.state = SlotState::kReady;
    cv_.notify_all();
  }
}

// Every chunk of the layer's seven streams, spread over the decode threads.
void StreamedWeights::decode_layer(int layer, const uint8_t* staging, uint8_t* slot) {
  const LayerLayout& lay = layout_[layer];
  const auto mats = layer_matrices(layers_[layer]);
  std::array<std::vector<ChunkEntry>, 7> dirs;
  std::vector<std::pair<int, uint32_t>> chunks;  // (tensor, chunk)
  for (size_t i = 0; i < mats.size(); ++i) {
    dirs[i] = stream_directory(*mats[i], staging + lay.stored_offset[i], files_.at(mats[i]->file));
    for (size_t c = 0; c < dirs[i].size(); ++c) chunks.emplace_back(static_cast<int>(i), static_cast<uint32_t>(c));
  }
  decode_parallel(chunks.size(), [&](size_t j) {
    const auto [i, c] = chunks[j];
    decode_stream_chunk(*mats[i], dirs[i], c, staging + lay.stored_offset[i], slot + lay.tensor_offset[i],
                        files_.at(mats[i]->file));
  });
}

void StreamedWeights::decode_share(const std::function<void(size_t)>& fn, size_t n) {
  for (size_t i; (i = djob_next_.fetch_add(1)) < n;) {
    try {
      fn(i);
    } catch (...) {
      MutexLock lock(mu_);
      if (!djob_.error) djob_.error = std::current_exception();
      djob_next_ = n;  // the others stop at their next index
    }
  }
}

void StreamedWeights::decode_parallel(size_t n, const std::function<void(size_t)>& fn) {
  if (decode_helpers_.empty()) {  // the default: the decode thread alone, no hand-off
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  {
    MutexLock lock(mu_);
    djob_.fn = &fn;
    djob_.n = n;
    djob_next_ = 0;
    djob_.error = nullptr;
    djob_.helpers_busy = djob_.helpers_alive;  // a helper that left at stop_ takes no share
    ++djob_.generation;
  }
  dcv_.notify_all();
  decode_share(fn, n);
  MutexLock lock(mu_);
  while (djob_.helpers_busy != 0) dcv_.wait(lock);
  djob_.fn = nullptr;
  if (djob_.error) std::rethrow_exception(djob_.error);
}

void StreamedWeights::decode_helper_loop() {
  MutexLock lock(mu_);
  uint64_t seen = djob_.generation;
  ++djob_.helpers_alive;
  for (;;) {
    while (!stop_ && djob_.generation == seen) dcv_.wait(lock);
    if (djob_.generation == seen) break;  // stop_, and no job counts on this helper
    seen = djob_.generation;
    const std::function<void(size_t)>& fn = *djob_.fn;
    const size_t n = djob_.n;
    lock.unlock();
    decode_share(fn, n);
    lock.lock();
    if (--djob_.helpers_busy == 0) dcv_.notify_all();
  }
  --djob_.helpers_alive;
}

// A packed layer's chunks for a link that decodes them, checked on the host
// first (stream heads, directories, every chunk's checksum).
std::vector<PackedChunkJob> StreamedWeights::chunk_jobs(int layer, const uint8_t* staging) const {
  const LayerLayout& lay = layout_[layer];
  const auto mats = layer_matrices(layers_[layer]);
  std::vector<PackedChunkJob> jobs;
  std::vector<ChunkEntry> chunks;
  for (size_t i = 0; i < mats.size(); ++i) {
    chunks.clear();
    check_stream(*mats[i], staging + lay.stored_offset[i], files_.at(mats[i]->file), chunks);
    const uint32_t w = static_cast<uint32_t>(pack_width(mats[i]->type));
    for (size_t c = 0; c < chunks.size(); ++c)
      jobs.push_back({lay.stored_offset[i] + chunks[c].offset, chunks[c].stored,
                      lay.tensor_offset[i] + c * uint64_t{wpack::kChunkElems} * w, chunks[c].n, w});
  }
  return jobs;
}

// Packed models, I/O thread: reads stream element seq's packed streams into
// stage seq % K once the decode thread has emptied it.
void StreamedWeights::read_loop() {
  const size_t k = ring_;
  MutexLock lock(mu_);
  for (;;) {
    Stage& st = stages_[next_read_ % k];
    while (!stop_ && st.full) cv_.wait(lock);
    if (stop_) return;
    const uint64_t seq = next_read_++;
    lock.unlock();
    uint64_t bytes = 0;
    double secs = 0;
    try {
      const int layer = stream_[seq % stream_.size()];
      if (!host_copy_[layer]) {  // a host-staged layer's streams are in memory
        const auto t0 = Clock::now();
        reader_->read(requests(layout_[layer], stage_buf_[seq % k]));
        const auto t1 = Clock::now();
        bytes = read_bytes(layout_[layer]);
        secs = seconds(t0, t1);
        if (opts_.trace) opts_.trace->add(Trace::kIo, "read layer " + std::to_string(layer), t0, t1, bytes);
      }
    } catch (...) {
      lock.lock();
      fail(seq);
      return;
    }
    lock.lock();
    st.full = true;
    st.seq = seq;
    st.bytes = bytes;
    st.seconds = secs;
    cv_.notify_all();
  }
}

// Packed models, decode thread: fills slot seq % K from stage seq % K.
void StreamedWeights::decode_loop() {
  const size_t k = ring_;
  MutexLock lock(mu_);
  for (;;) {
    Slot& s = slots_[next_load_ % k];
    while (!stop_ && s.state != SlotState::kFree) cv_.wait(lock);
    if (stop_) return;
    const uint64_t seq = next_load_++;
    s.state = SlotState::kLoading;
    s.seq = seq;
    Stage& st = stages_[seq % k];
    while (!stop_ && !failed_by(seq) && !(st.full && st.seq == seq)) cv_.wait(lock);
    if (stop_ || !(st.full && st.seq == seq)) return;  // its read failed: the pass rethrows it
    lock.unlock();
    try {
      const int layer = stream_[seq % stream_.size()];
      const LayerLayout& lay = layout_[layer];
      const int slot = static_cast<int>(seq % k);
      // A decoding link orders its copy after the slot's release on the device.
      if (!device_decode_) link_->wait_released(slot);
      const auto t0 = Clock::now();
      // Decoded from the host copy of the streams (host tier) or from the stage.
      const uint8_t* packed = host_copy_[layer] ? host_copy_[layer] : stage_buf_[slot];
      if (!lay.packed()) throw Error("offload: layer " + std::to_string(layer) + " of a packed model is not packed");
      if (device_decode_) {
        link_->upload_packed(slot, packed, lay.staging_bytes, chunk_jobs(layer, packed));
        // Before the slot is ready: a chunk the device could not decode is an
        // error now, never a layer of stale weights.
        if (!link_->packed_ok(slot))
          throw Error(files_.at(layers_[layer].wq.file) + ": layer " + std::to_string(layer) +
                      ": a packed chunk does not decode on the device (corrupt packed model)");
      } else {
        uint8_t* dst = link_->landing(slot);
        decode_layer(layer, packed, dst);
        if (opts_.verify_io && checksum(layer, dst) != reference_sum_[layer])
          throw Error("--verify-io: " + files_.at(layers_[layer].wq.file) + ": layer " + std::to_string(layer) +
                      " streamed bytes differ from the first read (storage, decode or transfer corruption)");
        link_->upload(slot, dst, lay.slot_bytes);
      }
      const auto t1 = Clock::now();
      s.storage = st.bytes;
      s.host = host_copy_[layer] ? lay.staging_bytes : 0;
      s.seconds = st.seconds;
      s.decode_seconds = seconds(t0, t1);
      if (opts_.trace) opts_.trace->add(Trace::kIo, "decode layer " + std::to_string(layer), t0, t1, lay.payload_bytes);
    } catch (...) {
      lock.lock();
      fail(seq);
      return;
    }
    lock.lock();
    st.full = false;
    s.state = SlotState::kReady;
    cv_.notify_all();
  }
}

void StreamedWeights::rethrow_io_error() {
  if (io_error_) std::rethrow_exception(io_error_);
}

// Waits until stream element seq is in its slot and takes it (kInUse).
StreamedWeights::Slot& StreamedWeights::wait_ready(uint64_t seq, int layer) {
  const auto t0 = Clock::now();
  Slot* taken;
  {
    MutexLock lock(mu_);
    Slot& s = slots_[seq % ring_];
    // A failed read or decode of a later layer does not fail this one.
    while (!failed_by(seq) && !(s.state == SlotState::kReady && s.seq == seq)) cv_.wait(lock);
    if (!(s.state == SlotState::kReady && s.seq == seq)) rethrow_io_error();
    s.state = SlotState::kInUse;
    taken = &s;
  }
  const auto t1 = Clock::now();
  cur_.stall_seconds += seconds(t0, t1);
  if (opts_.trace && layer >= 0 && t1 - t0 > std::chrono::microseconds(20))
    opts_.trace->add(Trace::kStall, "wait for layer " + std::to_string(layer), t0, t1);
  return *taken;
}

void StreamedWeights::begin_pass() {
  pass_start_ = Clock::now();
  cur_ = {};
  if (stream_.empty()) return;
  // A pass that failed half-way (an exception in a kernel) leaves the stream
  // mid-sequence: give back what it held and skip to the next pass's start.
  bool held;
  {
    MutexLock lock(mu_);
    const Slot& s = slots_[next_consume_ % ring_];
    held = s.state == SlotState::kInUse && s.seq == next_consume_;
  }
  if (held) free_current();
  while (next_consume_ % stream_.size() != 0) {
    wait_ready(next_consume_, -1);
    free_current();
  }
  cur_ = {};
}

const LayerWeights& StreamedWeights::acquire(int layer) {
  const int idx = stream_index_.at(layer);
  if (idx < 0) {
    layer_start_ = Clock::now();
    return resident_layer(layer);
  }
  const uint64_t seq = next_consume_;
  if (stream_[seq % stream_.size()] != layer)
    throw Error("offload: layer " + std::to_string(layer) + " acquired out of order");
  const Slot& s = wait_ready(seq, layer);
  const size_t si = seq % ring_;
  link_->compute_acquire(static_cast<int>(si));
  cur_.storage_bytes += s.storage;
  cur_.host_bytes += s.host;
  cur_.io_seconds += s.seconds;
  cur_.decode_seconds += s.decode_seconds;
  const LayerWeights& r = resident_layer(layer);  // the vectors (norms, biases), always resident
  const LayerLayout& lay = layout_[layer];
  const auto mats = layer_matrices(layers_[layer]);
  LayerWeights& w = bound_[si];
  w = r;
  WeightView* views[7] = {&w.wq, &w.wk, &w.wv, &w.wo, &w.w_gate, &w.w_up, &w.w_down};
  for (size_t i = 0; i < 7; ++i)
    *views[i] = WeightView{mats[i]->type, mats[i]->rows, mats[i]->cols,
                           link_->slot(static_cast<int>(si)) + lay.tensor_offset[i]};
  layer_start_ = Clock::now();
  return w;
}

void StreamedWeights::release(int layer) {
  const auto t = Clock::now();
  const bool streamed = stream_index_.at(layer) >= 0;
  if (opts_.trace)
    opts_.trace->add(Trace::kCompute, "layer " + std::to_string(layer) + (streamed ? "" : " (resident)"), layer_start_,
                     t);
  if (streamed) free_current();
}

// Hands the slot of stream element next_consume_ back to the I/O thread.
void StreamedWeights::free_current() {
  const size_t k = next_consume_ % ring_;
  link_->compute_release(static_cast<int>(k));
  {
    MutexLock lock(mu_);
    slots_[k].state = SlotState::kFree;
    ++next_consume_;
  }
  cv_.notify_all();
}

void StreamedWeights::end_pass() {
  cur_.wall_seconds = seconds(pass_start_, Clock::now());
  cur_.compute_seconds = cur_.wall_seconds - cur_.stall_seconds;
  last_ = cur_;
  total_.storage_bytes += cur_.storage_bytes;
  total_.host_bytes += cur_.host_bytes;
  total_.io_seconds += cur_.io_seconds;
  total_.decode_seconds += cur_.decode_seconds;
  total_.stall_seconds += cur_.stall_seconds;
  total_.compute_seconds += cur_.compute_seconds;
  total_.wall_seconds += cur_.wall_seconds;
  ++passes_;
}

}  // namespace redwood::offload
