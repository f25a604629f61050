// Reads byte ranges of the model files into memory: io_uring with O_DIRECT,
// registered buffers and several MiB-scale reads in flight; or pread (with
// O_DIRECT when possible) where io_uring is unavailable, said once on stderr.
// Short reads are continued, EINTR/EAGAIN retried; an I/O error or an
// unexpected end of file is a redwood::Error naming file and offset - never
// silently wrong weights.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace redwood::offload {

struct ReadRequest {
  int file = 0;           // index into the reader's file list
  uint64_t offset = 0;    // file offset (kIoAlign-aligned when the reader is direct())
  uint64_t bytes = 0;     // length (kIoAlign multiple when direct())
  uint64_t required = 0;  // bytes that must arrive; the rest may lie past end of file
  void* dst = nullptr;    // kIoAlign-aligned when direct()
  // Bytes of [offset, offset + bytes) past the end of the file read as zeros.
  // A request that is not aligned on a direct() reader is still read correctly,
  // through a second, buffered descriptor (slower: the page cache is used).
};

struct ReaderOptions {
  bool direct = true;               // O_DIRECT (bypass the page cache); falls back to buffered if refused
  bool use_io_uring = true;         // false: pread only
  int queue_depth = 8;              // reads in flight (io_uring)
  uint64_t chunk_bytes = 4u << 20;  // requests are split into reads of at most this size
  // Test hook (fault injection): called with each completed read's result
  // (bytes or -errno) and may replace it, e.g. with a shorter count or -EIO.
  std::function<int64_t(int file, uint64_t offset, uint64_t want, int64_t result)> fault;
};

class StorageReader {
 public:
  virtual ~StorageReader() = default;
  // Reads every request; returns when all bytes are in memory, or throws. On
  // a throw no read is still in flight: the kernel writes nothing into the
  // destinations after read() has returned. One read() at a time.
  virtual void read(std::span<const ReadRequest> reqs) = 0;
  // Registers buffers with the kernel (io_uring fixed buffers) so reads into
  // them skip per-I/O page pinning. Optional; a failure only disables it.
  // A later call replaces the earlier set (an empty one unregisters).
  virtual void register_buffers(std::span<const std::pair<void*, size_t>> bufs) { (void)bufs; }
  // Whether the last register_buffers() took effect (io_uring only).
  virtual bool buffers_registered() const { return false; }
  virtual bool direct() const = 0;          // every file opened with O_DIRECT
  virtual const char* kind() const = 0;     // "io_uring" or "pread"
  virtual uint64_t bytes_read() const = 0;  // total delivered so far
};

// Opens the files (read-only). Throws redwood::Error if one cannot be opened.
std::unique_ptr<StorageReader> open_storage_reader(const std::vector<std::string>& files,
                                                   const ReaderOptions& opts = {});

}  // namespace redwood::offload
