#include "src/cli/common.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/threads.h"
#include "src/util/error.h"

namespace redwood::cli {

namespace {
bool exists(const std::string& p) {
  struct stat st{};
  return stat(p.c_str(), &st) == 0;
}
}  // namespace

std::string default_model_path() {
  if (const char* env = std::getenv("REDWOOD_MODEL"); env && *env) return env;
  const std::string rel = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (exists(rel)) return rel;
  const std::string src = std::string(REDWOOD_SOURCE_DIR) + "/" + rel;
  if (exists(src)) return src;
  throw Error("no --model given and the default model is missing: run tools/fetch-models.sh");
}

LoadedModel load_model(const std::string& path, bool with_weights) {
  LoadedModel m;
  m.desc = load_model_desc(path.empty() ? default_model_path() : path);
  m.tokenizer = Tokenizer::create(m.desc.tokenizer);
  if (with_weights) {
    m.weights = std::make_unique<ResidentWeights>(m.desc);
    m.backend = make_cpu_backend();
    m.transformer = std::make_unique<Transformer>(m.desc, *m.weights, *m.backend);
  }
  return m;
}

void add_run_options(CLI::App* app, RunOptions& o) {
  app->add_option("--model,-m", o.model, "Model: GGUF file or safetensors directory (default: SmolLM2-135M)");
  app->add_option("--threads,-t", o.threads, "CPU threads (default: all cores)")->check(CLI::NonNegativeNumber);
}

void apply_run_options(RunOptions& o) { set_cpu_threads(o.threads); }

std::vector<int32_t> parse_int_list(const std::string& s, const char* what) {
  std::vector<int32_t> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    std::string item = s.substr(i, j - i);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || errno != 0 || v < INT32_MIN || v > INT32_MAX)
      throw Error(std::string("invalid ") + what + " list item '" + item + "'");
    out.push_back(static_cast<int32_t>(v));
    i = j + 1;
  }
  return out;
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(path + ": cannot create: " + strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw Error(path + ": write failed: " + strerror(e));
    }
    done += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    throw Error(path + ": write failed: " + strerror(errno));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    throw Error(path + ": cannot rename into place: " + strerror(errno));
  }
}

std::string npy_f32(const float* data, size_t rows, size_t cols) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                       std::to_string(cols) + "), }";
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::string out = "\x93NUMPY";
  out.push_back(1);
  out.push_back(0);
  const uint16_t hl = static_cast<uint16_t>(header.size());
  out.push_back(static_cast<char>(hl & 0xff));
  out.push_back(static_cast<char>(hl >> 8));
  out += header;
  out.append(reinterpret_cast<const char*>(data), rows * cols * sizeof(float));
  return out;
}

}  // namespace redwood::cli
