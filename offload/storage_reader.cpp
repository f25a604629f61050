// Storage reader: requests are cut into chunks of at most chunk_bytes; each
// chunk is read (io_uring or pread) until its bytes are in place. The chunk
// state machine (short reads, retries, end of file, errors) is shared by both
// implementations; they differ only in how a chunk's next read is issued.
#include "offload/storage_reader.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>

#include "offload/layer_layout.h"
#include "src/util/error.h"

namespace redwood::offload {
namespace {

// Largest single read, and largest registered buffer (the kernel's limit for one iovec).
constexpr uint64_t kMaxRead = uint64_t{1} << 30;
// EINTR/EAGAIN in a row on one chunk before it counts as an I/O error (no hang).
constexpr int kMaxRetries = 1000;

std::string errno_text(int err) {
  return std::strerror(err);
}

struct OpenFile {
  std::string path;
  int fd = -1;           // O_DIRECT when direct
  int buffered_fd = -1;  // no O_DIRECT: for reads that are not aligned; == fd when !direct
  bool direct = false;
  // Size at open (max for non-regular files): a chunk whose required bytes have
  // arrived stops at the end of file without one more read to learn it.
  uint64_t size = std::numeric_limits<uint64_t>::max();
};

int open_fd(const std::string& path, int flags) {
  return ::open(path.c_str(), O_RDONLY | O_CLOEXEC | flags);
}

// Opens one file, O_DIRECT if asked and the file system allows it (EINVAL: it does not).
void open_file(OpenFile& f, bool want_direct) {
  f.fd = want_direct ? open_fd(f.path, O_DIRECT) : -1;
  f.direct = f.fd >= 0;
  if (f.fd < 0 && (!want_direct || errno == EINVAL)) f.fd = open_fd(f.path, 0);
  if (f.fd < 0) throw Error(f.path + ": cannot open: " + errno_text(errno));
  f.buffered_fd = f.direct ? open_fd(f.path, 0) : f.fd;
  if (f.buffered_fd < 0) throw Error(f.path + ": cannot open: " + errno_text(errno));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) throw Error(f.path + ": cannot stat: " + errno_text(errno));
  if (S_ISREG(st.st_mode)) f.size = static_cast<uint64_t>(st.st_size);
}

// The open files; closes them on destruction (also when opening a later one throws).
class FileSet {
 public:
  FileSet(const std::vector<std::string>& paths, bool want_direct) {
    files_.reserve(paths.size());
    try {
      for (const std::string& p : paths) {
        files_.push_back(OpenFile{p});
        open_file(files_.back(), want_direct);
      }
    } catch (...) {
      close_all();  // a throwing constructor runs no destructor
      throw;
    }
  }
  FileSet(const FileSet&) = delete;
  FileSet& operator=(const FileSet&) = delete;
  ~FileSet() { close_all(); }
  void close_all() {
    for (OpenFile& f : files_) {
      if (f.buffered_fd >= 0 && f.buffered_fd != f.fd) ::close(f.buffered_fd);
      if (f.fd >= 0) ::close(f.fd);
      f.fd = f.buffered_fd = -1;
    }
  }
  const OpenFile& operator[](int i) const { return files_[static_cast<size_t>(i)]; }
  size_t size() const { return files_.size(); }
  bool all_direct() const {
    return std::all_of(files_.begin(), files_.end(), [](const OpenFile& f) { return f.direct; });
  }

 private:
  std::vector<OpenFile> files_;
};

// One read of at most chunk_bytes, advanced in place as bytes arrive.
struct Chunk {
  int file = 0;
  uint64_t offset = 0;         // next file offset to read
  uint8_t* dst = nullptr;      // where that byte goes
  uint64_t left = 0;           // bytes still to read
  uint64_t required_left = 0;  // of which must arrive (the rest may lie past end of file)
  int retries = 0;             // EINTR/EAGAIN in a row
};

bool is_aligned(uint64_t x) {
  return x % kIoAlign == 0;
}

// Shared by both readers: files, chunking, and what a read's result means.
class ReaderBase : public StorageReader {
 public:
  ReaderBase(const std::vector<std::string>& paths, const ReaderOptions& opts)
      : files_(paths, opts.direct),
        chunk_bytes_(std::clamp(opts.chunk_bytes / kIoAlign * kIoAlign, kIoAlign, kMaxRead)),
        fault_(opts.fault) {}

  bool direct() const override { return files_.size() > 0 && files_.all_direct(); }
  uint64_t bytes_read() const override { return bytes_read_.load(std::memory_order_relaxed); }

 protected:
  std::vector<Chunk> split(std::span<const ReadRequest> reqs) const {
    std::vector<Chunk> out;
    for (const ReadRequest& r : reqs) {
      if (r.file < 0 || static_cast<size_t>(r.file) >= files_.size())
        throw Error("read request: file index " + std::to_string(r.file) + " out of range");
      if (r.required > r.bytes)
        throw Error(files_[r.file].path + ": read request requires " + std::to_string(r.required) + " of " +
                    std::to_string(r.bytes) + " bytes");
      for (uint64_t pos = 0; pos < r.bytes; pos += chunk_bytes_) {
        Chunk c;
        c.file = r.file;
        c.offset = r.offset + pos;
        c.dst = static_cast<uint8_t*>(r.dst) + pos;
        c.left = std::min(chunk_bytes_, r.bytes - pos);
        c.required_left = r.required > pos ? std::min(r.required - pos, c.left) : 0;
        out.push_back(c);
      }
    }
    return out;
  }

  // The descriptor for the chunk's next read: O_DIRECT needs offset, length and
  // address aligned, which a short read can break; the rest then goes buffered.
  int fd_for(const Chunk& c) const {
    const OpenFile& f = files_[c.file];
    const bool aligned = is_aligned(c.offset) && is_aligned(c.left) && is_aligned(reinterpret_cast<uintptr_t>(c.dst));
    return f.direct && aligned ? f.fd : f.buffered_fd;
  }

  // True when the chunk needs no further read: done, or only bytes past the end
  // of file remain (zero-filled).
  static bool settle(Chunk& c, const OpenFile& f) {
    if (c.left > 0 && c.required_left == 0 && c.offset >= f.size) zero_rest(c);
    return c.left == 0;
  }
  bool settle(Chunk& c) const { return settle(c, files_[c.file]); }

  // Applies one read's result (bytes, or -errno) to the chunk; throws on an
  // I/O error or an end of file before the required bytes.
  void on_result(Chunk& c, int64_t res) {
    const OpenFile& f = files_[c.file];
    if (fault_) res = fault_(c.file, c.offset, c.left, res);
    if (res == -EINTR || res == -EAGAIN) {
      if (++c.retries > kMaxRetries)
        throw io_error(c, errno_text(static_cast<int>(-res)) + " (" + std::to_string(kMaxRetries) + " retries)");
      return;
    }
    if (res < 0) throw io_error(c, errno_text(static_cast<int>(-res)));
    if (static_cast<uint64_t>(res) > c.left) throw io_error(c, "read returned " + std::to_string(res) + " bytes");
    if (res == 0) {
      if (c.required_left > 0)
        throw Error(f.path + ": unexpected end of file at offset " + std::to_string(c.offset) + " (truncated?)");
      zero_rest(c);  // the aligned superset of the wanted bytes ran past the end of file
      return;
    }
    const auto n = static_cast<uint64_t>(res);
    c.offset += n;
    c.dst += n;
    c.left -= n;
    c.required_left -= std::min(n, c.required_left);
    c.retries = 0;
    bytes_read_.fetch_add(n, std::memory_order_relaxed);
  }

  FileSet files_;

 private:
  static void zero_rest(Chunk& c) {
    std::memset(c.dst, 0, c.left);
    c.dst += c.left;
    c.offset += c.left;
    c.left = 0;
  }
  Error io_error(const Chunk& c, const std::string& why) const {
    return Error(files_[c.file].path + ": I/O error reading " + std::to_string(c.left) + " bytes at offset " +
                 std::to_string(c.offset) + ": " + why);
  }

  uint64_t chunk_bytes_;
  std::function<int64_t(int, uint64_t, uint64_t, int64_t)> fault_;
  std::atomic<uint64_t> bytes_read_{0};
};

class PreadReader final : public ReaderBase {
 public:
  using ReaderBase::ReaderBase;
  const char* kind() const override { return "pread"; }

  void read(std::span<const ReadRequest> reqs) override {
    for (Chunk& c : split(reqs)) {
      while (!settle(c)) {
        const ssize_t r = ::pread(fd_for(c), c.dst, c.left, static_cast<off_t>(c.offset));
        on_result(c, r < 0 ? -static_cast<int64_t>(errno) : static_cast<int64_t>(r));
      }
    }
  }
};

class UringReader final : public ReaderBase {
 public:
  // ring: initialised by the caller (so that a failure can fall back to pread).
  UringReader(const std::vector<std::string>& paths, const ReaderOptions& opts, const io_uring& ring)
      : ReaderBase(paths, opts), ring_(ring), depth_(std::max(opts.queue_depth, 1)) {}
  UringReader(const UringReader&) = delete;
  UringReader& operator=(const UringReader&) = delete;
  ~UringReader() override {
    if (!fixed_.empty()) io_uring_unregister_buffers(&ring_);
    io_uring_queue_exit(&ring_);
  }

  const char* kind() const override { return "io_uring"; }
  bool buffers_registered() const override { return !fixed_.empty(); }

  void register_buffers(std::span<const std::pair<void*, size_t>> bufs) override {
    if (!fixed_.empty()) io_uring_unregister_buffers(&ring_);
    fixed_.clear();
    // The kernel takes at most 1 GiB per iovec: larger buffers become several.
    std::vector<iovec> iov;
    for (const auto& [ptr, len] : bufs) {
      for (uint64_t off = 0; ptr != nullptr && off < len; off += kMaxRead)
        iov.push_back({static_cast<uint8_t*>(ptr) + off, static_cast<size_t>(std::min<uint64_t>(kMaxRead, len - off))});
    }
    if (iov.empty() || io_uring_register_buffers(&ring_, iov.data(), static_cast<unsigned>(iov.size())) != 0)
      return;  // e.g. ENOMEM (locked-memory limit): plain reads still work
    for (size_t i = 0; i < iov.size(); ++i)
      fixed_.push_back({reinterpret_cast<uintptr_t>(iov[i].iov_base), iov[i].iov_len, static_cast<int>(i)});
    std::sort(fixed_.begin(), fixed_.end(), [](const Fixed& a, const Fixed& b) { return a.base < b.base; });
  }

  void read(std::span<const ReadRequest> reqs) override {
    std::vector<Chunk> chunks = split(reqs);
    std::deque<size_t> todo;  // chunks waiting for their next read
    for (size_t i = 0; i < chunks.size(); ++i)
      if (!settle(chunks[i])) todo.push_back(i);
    try {
      while (!todo.empty() || inflight_ > 0) {
        while (!todo.empty() && inflight_ < depth_ && queue(chunks[todo.front()], todo.front())) todo.pop_front();
        submit_and_wait();
        reap([&](size_t i, int res) {
          on_result(chunks[i], res);
          if (!settle(chunks[i])) todo.push_back(i);
        });
      }
    } catch (...) {
      // Reads still in flight write into the caller's buffers: wait for them all
      // before the error leaves read() (cancelling a started block read is not
      // possible anyway).
      drain();
      throw;
    }
  }

 private:
  struct Fixed {
    uintptr_t base;
    uint64_t len;
    int index;
  };

  // The registered buffer holding [p, p + n), or -1.
  int fixed_index(const void* p, uint64_t n) const {
    const auto a = reinterpret_cast<uintptr_t>(p);
    auto it = std::upper_bound(fixed_.begin(), fixed_.end(), a, [](uintptr_t x, const Fixed& f) { return x < f.base; });
    if (it == fixed_.begin()) return -1;
    --it;
    return a + n <= it->base + it->len ? it->index : -1;
  }

  // Puts the chunk's next read on the submission queue; false when it is full.
  bool queue(const Chunk& c, size_t index) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) return false;
    const auto n = static_cast<unsigned>(c.left);  // <= chunk_bytes <= 1 GiB
    const int buf = fixed_index(c.dst, c.left);
    if (buf >= 0)
      io_uring_prep_read_fixed(sqe, fd_for(c), c.dst, n, c.offset, buf);
    else
      io_uring_prep_read(sqe, fd_for(c), c.dst, n, c.offset);
    io_uring_sqe_set_data64(sqe, index);
    ++inflight_;
    return true;
  }

  // Submits what is queued and sleeps until at least one read completes (or a
  // signal comes: the caller loops).
  void submit_and_wait() {
    const int rc = io_uring_submit_and_wait(&ring_, 1);
    if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) throw Error("io_uring_submit: " + errno_text(-rc));
  }

  // Hands every completion already posted to fn(chunk index, result).
  template <class Fn>
  void reap(Fn&& fn) {
    io_uring_cqe* cqe = nullptr;
    while (io_uring_peek_cqe(&ring_, &cqe) == 0) {
      const size_t index = io_uring_cqe_get_data64(cqe);
      const int res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);  // before fn, which may throw
      --inflight_;
      fn(index, res);
    }
  }

  // Waits for every read in flight, dropping the results.
  void drain() noexcept {
    while (inflight_ > 0) {
      const int rc = io_uring_submit_and_wait(&ring_, 1);
      if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
        // Cannot wait for reads that may still write into the caller's buffers.
        std::fprintf(stderr, "redwood: io_uring failed while draining reads (%s)\n", std::strerror(-rc));
        std::abort();
      }
      reap([](size_t, int) {});
    }
  }

  io_uring ring_;
  int depth_;
  int inflight_ = 0;          // reads queued or submitted, not yet reaped
  std::vector<Fixed> fixed_;  // registered buffers, by address
};

void say_pread_fallback(const std::string& reason) {
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) std::fprintf(stderr, "redwood: io_uring unavailable (%s); using pread\n", reason.c_str());
}

}  // namespace

std::unique_ptr<StorageReader> open_storage_reader(const std::vector<std::string>& files, const ReaderOptions& opts) {
  if (opts.use_io_uring) {
    io_uring ring{};
    const int rc = io_uring_queue_init(static_cast<unsigned>(std::max(opts.queue_depth, 1)), &ring, 0);
    if (rc == 0) {
      try {
        return std::make_unique<UringReader>(files, opts, ring);
      } catch (...) {
        io_uring_queue_exit(&ring);  // the reader did not take it (a file could not be opened)
        throw;
      }
    }
    say_pread_fallback("io_uring_queue_init: " + errno_text(-rc));
  }
  return std::make_unique<PreadReader>(files, opts);
}

}  // namespace redwood::offload
