#include "src/model/fingerprint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "src/util/cache_dir.h"
#include "src/util/error.h"
#include "src/util/io.h"
#include "src/util/output_path.h"

namespace redwood {

namespace {

// Hashed first; bumped whenever what is hashed changes (1: the first 256
// bytes of each tensor; 2: every byte of every data file).
constexpr uint32_t kFingerprintVersion = 2;

// What has been hashed so far, fed as it comes (XXH3-64, streaming).
class Digest {
 public:
  Digest() : st_(XXH3_createState(), &XXH3_freeState) {
    if (!st_ || XXH3_64bits_reset(st_.get()) != XXH_OK) throw Error("XXH3: out of memory");
  }
  void bytes(const void* p, size_t n) { XXH3_64bits_update(st_.get(), p, n); }
  template <typename T>
  void value(const T& v) {
    bytes(&v, sizeof v);
  }
  void str(const std::string& s) {
    value(static_cast<uint64_t>(s.size()));
    bytes(s.data(), s.size());
  }
  uint64_t digest() const { return XXH3_64bits_digest(st_.get()); }

 private:
  std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> st_;
};

class Files {
 public:
  explicit Files(const std::vector<std::string>& paths) : paths_(paths) {
    for (const std::string& p : paths) {
      const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // never blocks on a FIFO
      if (fd < 0) {
        const int err = errno;
        close_all();
        throw Error(p + ": cannot open the model file: " + std::strerror(err));
      }
      fds_.push_back(fd);
      struct stat sb {};
      if (::fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close_all();
        throw Error(p + ": the model file is not a regular file");
      }
    }
  }
  ~Files() { close_all(); }
  Files(const Files&) = delete;
  Files& operator=(const Files&) = delete;

  struct stat stat(int i) const {
    struct stat sb {};
    if (::fstat(fds_[i], &sb) != 0) throw Error(paths_[i] + ": cannot stat the model file");
    return sb;
  }
  uint64_t size(int i) const { return static_cast<uint64_t>(stat(i).st_size); }
  void read(int i, void* dst, uint64_t n, uint64_t offset) const { read_exact(fds_[i], paths_[i], dst, n, offset); }
  const std::string& path(int i) const { return paths_[i]; }
  int count() const { return static_cast<int>(fds_.size()); }

 private:
  void close_all() {
    for (int fd : fds_) ::close(fd);
    fds_.clear();
  }
  const std::vector<std::string>& paths_;
  std::vector<int> fds_;
};

std::string hex64(uint64_t v) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(v));
  return hex;
}

// What identifies a file's version without reading it: absolute path, size,
// modification and status-change times (ns), inode and device. ctime is there
// because a rewrite that restores the mtime still moves it.
std::string file_version_key(const std::string& path, const struct stat& sb) {
  std::error_code ec;
  std::string abs = std::filesystem::absolute(path, ec).lexically_normal().string();
  if (ec) abs = path;
  return "v1|" + abs + "|" + std::to_string(sb.st_size) + "|" + std::to_string(sb.st_mtim.tv_sec) + "." +
         std::to_string(sb.st_mtim.tv_nsec) + "|" + std::to_string(sb.st_ctim.tv_sec) + "." +
         std::to_string(sb.st_ctim.tv_nsec) + "|" + std::to_string(sb.st_ino) + "|" + std::to_string(sb.st_dev);
}

bool same_version(const struct stat& a, const struct stat& b) {
  return a.st_size == b.st_size && a.st_mtim.tv_sec == b.st_mtim.tv_sec && a.st_mtim.tv_nsec == b.st_mtim.tv_nsec &&
         a.st_ctim.tv_sec == b.st_ctim.tv_sec && a.st_ctim.tv_nsec == b.st_ctim.tv_nsec && a.st_ino == b.st_ino &&
         a.st_dev == b.st_dev;
}

// XXH3-64 of every byte of file i, from the cache when this version of the
// file was hashed before (content-hash-KEY.txt in the cache directory: the
// key line, then the hash). The cache is best effort: an unreadable or
// unwritable cache only costs the read.
uint64_t whole_file_hash(const Files& files, int i) {
  const struct stat before = files.stat(i);
  const std::string key = file_version_key(files.path(i), before);
  std::string entry;
  try {
    entry = cache_dir_path() + "/content-hash-" + hex64(XXH3_64bits(key.data(), key.size())) + ".txt";
    std::ifstream in(entry);
    std::string k, h;
    if (in && std::getline(in, k) && std::getline(in, h) && k == key && h.size() == 16 &&
        h.find_first_not_of("0123456789abcdef") == std::string::npos)
      return std::stoull(h, nullptr, 16);
  } catch (const std::exception&) {
    entry.clear();
  }
  Digest d;
  const uint64_t size = static_cast<uint64_t>(before.st_size);
  constexpr uint64_t kChunk = uint64_t{8} << 20;
  std::vector<unsigned char> buf(static_cast<size_t>(std::min(size, kChunk)));
  for (uint64_t off = 0; off < size; off += kChunk) {
    const uint64_t n = std::min(kChunk, size - off);
    files.read(i, buf.data(), n, off);
    d.bytes(buf.data(), n);
  }
  const uint64_t h = d.digest();
  if (!entry.empty() && same_version(before, files.stat(i))) {  // not cached when it changed while read
    try {
      (void)make_cache_dir();
      TempOutput out(entry);
      output_path_detail::write_all_fd(out.fd(), entry, key + "\n" + hex64(h) + "\n");
      out.commit();
    } catch (const std::exception&) {  // a cache: not written is not an error (the temp file is gone)
    }
  }
  return h;
}

}  // namespace

FileHash file_content_hash(const std::string& path) {
  const std::vector<std::string> one{path};
  const Files files(one);
  return {files.size(0), whole_file_hash(files, 0)};
}

std::string model_fingerprint(const ModelDesc& m) {
  Digest f;
  f.value(kFingerprintVersion);
  const Files files(m.files);
  f.value(static_cast<uint64_t>(files.count()));
  for (int i = 0; i < files.count(); ++i) {
    f.value(files.size(i));
    f.value(whole_file_hash(files, i));
  }

  const LlamaHParams& hp = m.hp;
  for (int v : {hp.n_layers, hp.dim, hp.n_heads, hp.n_kv_heads, hp.head_dim, hp.ffn_dim, hp.vocab})
    f.value(static_cast<int64_t>(v));
  f.value(hp.rope_base);
  f.value(hp.rms_eps);
  f.value(static_cast<int>(hp.rope_mode));
  f.value(static_cast<uint64_t>(hp.rope_freq_factors.size()));
  for (float x : hp.rope_freq_factors) f.value(x);
  f.value(hp.tied_lm_head);
  f.value(static_cast<uint64_t>(m.tokenizer.tokens.size()));
  for (const std::string& t : m.tokenizer.tokens) f.str(t);

  std::vector<const TensorExtent*> tensors = {&m.tok_embd, &m.output_norm, &m.lm_head};
  for (const LayerDesc& L : m.layers)
    for (const TensorExtent* t : L.tensors()) tensors.push_back(t);
  for (const TensorExtent* t : tensors) {
    f.str(t->name);
    f.value(static_cast<int>(t->type));
    f.value(t->rows);
    f.value(t->cols);
    f.value(t->file);
    f.value(t->offset);
    f.value(t->bytes);
    if (t->file < 0 || t->file >= files.count()) throw Error(m.path + ": tensor " + t->name + " names no data file");
  }
  return hex64(f.digest());
}

}  // namespace redwood
