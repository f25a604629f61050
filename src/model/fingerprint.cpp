#include "src/model/fingerprint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "src/util/error.h"
#include "src/util/io.h"

namespace redwood {

namespace {

// Hashed first; bumped whenever what is hashed changes.
constexpr uint32_t kFingerprintVersion = 1;

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

  uint64_t size(int i) const {
    struct stat sb {};
    if (::fstat(fds_[i], &sb) != 0) throw Error(paths_[i] + ": cannot stat the model file");
    return static_cast<uint64_t>(sb.st_size);
  }
  void read(int i, void* dst, uint64_t n, uint64_t offset) const { read_exact(fds_[i], paths_[i], dst, n, offset); }
  int count() const { return static_cast<int>(fds_.size()); }

 private:
  void close_all() {
    for (int fd : fds_) ::close(fd);
    fds_.clear();
  }
  const std::vector<std::string>& paths_;
  std::vector<int> fds_;
};

}  // namespace

std::string model_fingerprint(const ModelDesc& m) {
  Digest f;
  f.value(kFingerprintVersion);
  const Files files(m.files);
  f.value(static_cast<uint64_t>(files.count()));
  for (int i = 0; i < files.count(); ++i) f.value(files.size(i));

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
  unsigned char head[256];
  for (const TensorExtent* t : tensors) {
    f.str(t->name);
    f.value(static_cast<int>(t->type));
    f.value(t->rows);
    f.value(t->cols);
    f.value(t->offset);
    f.value(t->bytes);
    const uint64_t n = std::min<uint64_t>(t->bytes, sizeof head);
    if (t->file < 0 || t->file >= files.count()) throw Error(m.path + ": tensor " + t->name + " names no data file");
    files.read(t->file, head, n, t->offset);
    f.bytes(head, n);
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(f.digest()));
  return hex;
}

}  // namespace redwood
