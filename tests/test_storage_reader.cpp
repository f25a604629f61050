// Storage reader: io_uring and pread, O_DIRECT on and off, against the bytes
// of random files; fault injection for short reads, EINTR/EAGAIN, EIO and an
// early end of file.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <utility>

#include "offload/layer_layout.h"
#include "offload/storage_reader.h"
#include "src/util/error.h"

namespace redwood::offload {
namespace {

constexpr uint64_t kBigSize = (9u << 20) + 1234;  // not a multiple of kIoAlign
constexpr uint64_t kSmallSize = (300u << 10) + 77;

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<uint8_t[], FreeDeleter>;

AlignedBuffer aligned_buffer(uint64_t bytes) {
  const uint64_t n = (bytes + kIoAlign - 1) / kIoAlign * kIoAlign;
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(kIoAlign, n));
  std::memset(p, 0xAB, n);  // not zero: a byte left unwritten shows
  return AlignedBuffer(p);
}

std::vector<uint8_t> random_bytes(uint64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> out(n);
  for (uint64_t i = 0; i < n; i += 8) {
    const uint64_t v = rng();
    std::memcpy(out.data() + i, &v, std::min<uint64_t>(8, n - i));
  }
  return out;
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

struct Mode {
  bool uring;
  bool direct;
};

class StorageReaderTest : public testing::TestWithParam<Mode> {
 protected:
  // Two random files in a fresh directory, shared by every test of the suite.
  static void SetUpTestSuite() {
    std::string tmpl = testing::TempDir() + "redwood_reader_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr) << std::strerror(errno);
    dir_ = tmpl;
    contents_ = {random_bytes(kBigSize, 1), random_bytes(kSmallSize, 2)};
    paths_ = {dir_ + "/big.bin", dir_ + "/small.bin"};
    for (size_t i = 0; i < paths_.size(); ++i) write_file(paths_[i], contents_[i]);
  }
  static void TearDownTestSuite() {
    for (const std::string& p : paths_) ::unlink(p.c_str());
    ::rmdir(dir_.c_str());
  }

  ReaderOptions options() const {
    ReaderOptions o;
    o.direct = GetParam().direct;
    o.use_io_uring = GetParam().uring;
    o.queue_depth = 4;
    o.chunk_bytes = 1u << 20;  // small: requests cross chunk boundaries
    return o;
  }
  std::unique_ptr<StorageReader> open(const ReaderOptions& o) const {
    auto r = open_storage_reader(paths_, o);
    EXPECT_STREQ(r->kind(), GetParam().uring ? "io_uring" : "pread");
    if (!o.direct) {
      EXPECT_FALSE(r->direct());
    }
    return r;
  }

  // Aligned requests of many sizes covering both files (the last ones run past
  // the end of file), shuffled, landing back to back in dst.
  static std::vector<ReadRequest> cover_files(uint8_t* dst) {
    const uint64_t sizes[] = {4096, 12288, (1u << 20) + 8192, 3u << 20, 65536, (2u << 20) - 4096, 1u << 20};
    std::vector<ReadRequest> reqs;
    uint64_t at = 0;
    for (int file = 0; file < 2; ++file) {
      const uint64_t size = contents_[file].size();
      for (uint64_t off = 0, k = 0; off < size; ++k) {
        ReadRequest r;
        r.file = file;
        r.offset = off;
        r.bytes = sizes[k % std::size(sizes)];
        r.required = std::min(r.bytes, size - off);
        r.dst = dst + at;
        reqs.push_back(r);
        off += r.bytes;
        at += r.bytes;
      }
    }
    std::shuffle(reqs.begin(), reqs.end(), std::mt19937(7));
    return reqs;
  }
  static constexpr uint64_t kCoverBytes = kBigSize + kSmallSize + (8u << 20);  // room for the rounding

  // Each request's bytes equal the file's; past the end of file, zeros.
  static void expect_file_bytes(const std::vector<ReadRequest>& reqs) {
    for (const ReadRequest& r : reqs) {
      const std::vector<uint8_t>& want = contents_[r.file];
      const auto* got = static_cast<const uint8_t*>(r.dst);
      const uint64_t in_file = r.offset < want.size() ? std::min<uint64_t>(r.bytes, want.size() - r.offset) : 0;
      ASSERT_EQ(std::memcmp(got, want.data() + r.offset, in_file), 0) << "file " << r.file << " offset " << r.offset;
      for (uint64_t i = in_file; i < r.bytes; ++i) ASSERT_EQ(got[i], 0) << "past end of file, byte " << i;
    }
  }

  // Reads both files whole with the given fault hook and checks every byte.
  void read_all_with(std::function<int64_t(int, uint64_t, uint64_t, int64_t)> fault) {
    ReaderOptions o = options();
    o.fault = std::move(fault);
    auto reader = open(o);
    AlignedBuffer buf = aligned_buffer(kCoverBytes);
    const std::vector<ReadRequest> reqs = cover_files(buf.get());
    reader->read(reqs);
    expect_file_bytes(reqs);
  }

  static std::string dir_;
  static std::vector<std::string> paths_;
  static std::vector<std::vector<uint8_t>> contents_;
};

std::string StorageReaderTest::dir_;
std::vector<std::string> StorageReaderTest::paths_;
std::vector<std::vector<uint8_t>> StorageReaderTest::contents_;

TEST_P(StorageReaderTest, ManyRequestsAcrossChunksMatchFiles) {
  auto reader = open(options());
  if (GetParam().direct) {
    // O_DIRECT where the file system takes it (tmpfs did not before Linux 6.6).
    const int fd = ::open(paths_[0].c_str(), O_RDONLY | O_DIRECT);
    EXPECT_EQ(reader->direct(), fd >= 0);
    if (fd >= 0) ::close(fd);
  }
  AlignedBuffer buf = aligned_buffer(kCoverBytes);
  const std::vector<ReadRequest> reqs = cover_files(buf.get());
  reader->read(reqs);
  expect_file_bytes(reqs);
  EXPECT_EQ(reader->bytes_read(), kBigSize + kSmallSize);
  // The reader can be used again.
  reader->read(std::span(reqs).first(3));
  expect_file_bytes(reqs);
}

TEST_P(StorageReaderTest, PastEndOfFileIsFineWhenNotRequired) {
  auto reader = open(options());
  AlignedBuffer buf = aligned_buffer(5 * kIoAlign);
  ReadRequest r;
  r.offset = kBigSize / kIoAlign * kIoAlign - kIoAlign;
  r.bytes = 4 * kIoAlign;  // runs two blocks and a bit past the end
  r.required = kBigSize - r.offset;
  r.dst = buf.get();
  reader->read({&r, 1});
  expect_file_bytes({r});
  // Wholly past the end of file, nothing required: zeros.
  r.offset = kBigSize / kIoAlign * kIoAlign + 4 * kIoAlign;
  r.required = 0;
  reader->read({&r, 1});
  expect_file_bytes({r});
}

TEST_P(StorageReaderTest, RequiredPastEndOfFileThrows) {
  auto reader = open(options());
  AlignedBuffer buf = aligned_buffer(4 * kIoAlign);
  ReadRequest r;
  r.offset = kBigSize / kIoAlign * kIoAlign - kIoAlign;
  r.bytes = 3 * kIoAlign;
  r.required = kBigSize - r.offset + 1;
  r.dst = buf.get();
  try {
    reader->read({&r, 1});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("end of file"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(paths_[0]), std::string::npos) << e.what();
  }
}

TEST_P(StorageReaderTest, ShortReadsByHalfDeliverSameBytes) {
  read_all_with([](int, uint64_t, uint64_t, int64_t res) { return res > 1 ? res / 2 : res; });
}

TEST_P(StorageReaderTest, ShortReadsOfOddSizesDeliverSameBytes) {
  // Counts that are not kIoAlign multiples: an O_DIRECT read cannot continue there.
  read_all_with([](int, uint64_t, uint64_t, int64_t res) { return res > 5000 ? 4999 - (res % 7) : res; });
}

TEST_P(StorageReaderTest, EintrAndEagainOnceThenOk) {
  std::set<std::pair<int, uint64_t>> failed;
  read_all_with([&](int file, uint64_t offset, uint64_t, int64_t res) -> int64_t {
    if (!failed.insert({file, offset}).second) return res;
    return failed.size() % 2 ? -EINTR : -EAGAIN;
  });
  EXPECT_GT(failed.size(), 10u);
}

TEST_P(StorageReaderTest, EndlessEagainIsAnError) {
  ReaderOptions o = options();
  o.fault = [](int, uint64_t, uint64_t, int64_t) -> int64_t { return -EAGAIN; };
  auto reader = open(o);
  AlignedBuffer buf = aligned_buffer(kIoAlign);
  ReadRequest r{0, 0, kIoAlign, kIoAlign, buf.get()};
  EXPECT_THROW(reader->read({&r, 1}), Error);
}

TEST_P(StorageReaderTest, EioIsAnErrorNamingFileAndOffset) {
  AlignedBuffer buf = aligned_buffer(kCoverBytes);
  const std::vector<ReadRequest> reqs = cover_files(buf.get());
  // The second chunk of a 3 MiB request in the big file.
  const auto three = std::find_if(reqs.begin(), reqs.end(), [](const ReadRequest& r) { return r.bytes == 3u << 20; });
  ASSERT_NE(three, reqs.end());
  const uint64_t bad = three->offset + (1u << 20);
  ReaderOptions o = options();
  o.fault = [&](int file, uint64_t offset, uint64_t, int64_t res) -> int64_t {
    return file == 0 && offset == bad ? -EIO : res;
  };
  auto reader = open(o);
  try {
    reader->read(reqs);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("I/O error"), std::string::npos) << msg;
    EXPECT_NE(msg.find(paths_[0]), std::string::npos) << msg;
    EXPECT_NE(msg.find("offset " + std::to_string(bad)), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::strerror(EIO)), std::string::npos) << msg;
  }
  // Nothing was left in flight: the same reader reads the small file correctly.
  std::vector<ReadRequest> small;
  for (const ReadRequest& r : reqs)
    if (r.file == 1) small.push_back(r);
  reader->read(small);
  expect_file_bytes(small);
}

TEST_P(StorageReaderTest, EarlyEndOfFileIsAnError) {
  ReaderOptions o = options();
  o.fault = [](int, uint64_t offset, uint64_t, int64_t res) -> int64_t { return offset == (1u << 20) ? 0 : res; };
  auto reader = open(o);
  AlignedBuffer buf = aligned_buffer(2u << 20);
  ReadRequest r{0, 0, 2u << 20, 2u << 20, buf.get()};
  EXPECT_THROW(
      {
        try {
          reader->read({&r, 1});
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("unexpected end of file at offset 1048576"), std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
}

TEST_P(StorageReaderTest, RegisteredBuffersReadCorrectly) {
  auto reader = open(options());
  AlignedBuffer buf = aligned_buffer(kCoverBytes);
  AlignedBuffer other = aligned_buffer(1u << 20);
  // Register most of buf (requests near its end straddle the edge) and another buffer.
  const std::pair<void*, size_t> bufs[] = {{buf.get(), kBigSize / 2}, {other.get(), 1u << 20}};
  reader->register_buffers(bufs);
  // Registration can fail without privileges (locked-memory limit); as root it must work.
  if (GetParam().uring && ::geteuid() == 0) {
    EXPECT_TRUE(reader->buffers_registered());
  } else if (!GetParam().uring) {
    EXPECT_FALSE(reader->buffers_registered());
  }
  std::vector<ReadRequest> reqs = cover_files(buf.get());
  reqs.push_back({1, 8192, 1u << 20, kSmallSize - 8192, other.get()});
  reader->read(reqs);
  expect_file_bytes(reqs);
  // Replacing the set (here: with nothing) leaves reads correct.
  reader->register_buffers({});
  EXPECT_FALSE(reader->buffers_registered());
  std::memset(buf.get(), 0xAB, kCoverBytes);
  reader->read(reqs);
  expect_file_bytes(reqs);
}

TEST_P(StorageReaderTest, UnalignedRequestsReadCorrectly) {
  auto reader = open(options());
  AlignedBuffer buf = aligned_buffer(3u << 20);
  std::vector<ReadRequest> reqs = {{0, 123, 1000, 1000, buf.get() + 5},
                                   {0, 4096, (2u << 20) + 3, (2u << 20) + 3, buf.get() + 8192},
                                   {1, kSmallSize - 100, 300, 100, buf.get() + 4096 + 1}};
  reader->read(reqs);
  expect_file_bytes(reqs);
}

TEST_P(StorageReaderTest, BadRequestsAreErrors) {
  auto reader = open(options());
  AlignedBuffer buf = aligned_buffer(kIoAlign);
  ReadRequest bad_file{2, 0, kIoAlign, kIoAlign, buf.get()};
  EXPECT_THROW(reader->read({&bad_file, 1}), Error);
  ReadRequest too_required{0, 0, kIoAlign, kIoAlign + 1, buf.get()};
  EXPECT_THROW(reader->read({&too_required, 1}), Error);
}

TEST_P(StorageReaderTest, MissingFileIsAnError) {
  const std::string missing = dir_ + "/no-such-file.bin";
  ReaderOptions o = options();
  try {
    open_storage_reader({paths_[0], missing}, o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), missing + ": cannot open: " + std::strerror(ENOENT));
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, StorageReaderTest,
                         testing::Values(Mode{true, true}, Mode{true, false}, Mode{false, true}, Mode{false, false}),
                         [](const testing::TestParamInfo<Mode>& p) {
                           return std::string(p.param.uring ? "io_uring" : "pread") +
                                  (p.param.direct ? "_direct" : "_buffered");
                         });

// A queue depth the kernel refuses makes io_uring_queue_init fail: pread, said once.
TEST(StorageReaderFallback, PreadWhenIoUringFailsSaidOnce) {
  char path[] = "/proc/self/exe";  // any readable file
  if (std::string(open_storage_reader({path})->kind()) != "io_uring") GTEST_SKIP() << "io_uring unavailable here";
  ReaderOptions o;
  o.queue_depth = 1 << 20;  // above IORING_MAX_ENTRIES
  testing::internal::CaptureStderr();
  const std::string kind1 = open_storage_reader({path}, o)->kind();
  const std::string kind2 = open_storage_reader({path}, o)->kind();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(kind1, "pread");
  EXPECT_EQ(kind2, "pread");
  // Once a process: only this test makes io_uring fail (--gtest_repeat runs it again).
  static int runs = 0;
  EXPECT_EQ(err,
            runs++ == 0 ? "redwood: io_uring unavailable (io_uring_queue_init: Invalid argument); using pread\n" : "");
}

}  // namespace
}  // namespace redwood::offload
