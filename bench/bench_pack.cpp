// Decode throughput of a packed model (redwood pack): every coded tensor
// (F16/BF16/F32) read into memory once, then decoded with its checksums
// checked, as a load or the stream does, on 1 and on 2 threads. Prints GB/s of
// decoded weights per thread count (best of --repeat), the stored/raw ratio per
// type, and which decoder ran. Issue 33's goal: decoding on 2 threads at least
// 3x the storage bandwidth (`bench offload` prints that bandwidth).
//
//   bench_pack MODEL.rwpk [--repeat N]
#include <fcntl.h>
#include <unistd.h>

#include <oneapi/tbb/global_control.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "kernels/cpu/wpack.h"
#include "src/model/model_desc.h"
#include "src/model/packed.h"
#include "src/util/error.h"
#include "src/util/io.h"

using namespace redwood;

int main(int argc, char** argv) {
  try {
    if (argc < 2) throw Error("usage: bench_pack MODEL.rwpk [--repeat N]");
    int repeat = 5;
    for (int i = 2; i + 1 < argc; i += 2)
      if (std::strcmp(argv[i], "--repeat") == 0) repeat = std::max(1, std::atoi(argv[i + 1]));
    const ModelDesc m = load_model_desc(argv[1]);
    if (m.format != ModelFormat::kPacked) throw Error(std::string(argv[1]) + ": not a packed model");
    std::vector<const TensorExtent*> ts = {&m.tok_embd, &m.output_norm};
    if (!m.hp.tied_lm_head) ts.push_back(&m.lm_head);
    for (const auto& L : m.layers)
      for (const TensorExtent* t : L.tensors()) ts.push_back(t);
    const int fd = open_input_file(m.files[0], "a model");
    std::vector<std::vector<uint8_t>> stored;
    std::vector<const TensorExtent*> coded;
    std::map<std::string, std::pair<uint64_t, uint64_t>> by_type;
    uint64_t raw = 0, largest = 0;
    for (const TensorExtent* t : ts) {
      if (pack_width(t->type) == 1) continue;  // stored raw: nothing to decode
      stored.emplace_back(t->stored_bytes);
      read_exact(fd, m.files[0], stored.back().data(), t->stored_bytes, t->offset);
      coded.push_back(t);
      raw += t->bytes;
      largest = std::max(largest, t->bytes);
      auto& b = by_type[std::string(dtype_name(t->type))];
      b.first += t->bytes;
      b.second += t->stored_bytes;
    }
    ::close(fd);
    if (coded.empty()) throw Error(std::string(argv[1]) + ": no coded (F16/BF16/F32) tensors");
    std::printf("%s: %zu coded tensors, %.1f MiB decoded; decoder %s\n", argv[1], coded.size(),
                static_cast<double>(raw) / (1 << 20), cpu::unpack_path_name(cpu::UnpackPath::kBest));
    for (const auto& [type, b] : by_type)
      std::printf("  %-5s stored/raw %.3f\n", type.c_str(), static_cast<double>(b.second) / static_cast<double>(b.first));
    std::vector<uint8_t> dst(largest);
    for (int threads : {1, 2}) {
      tbb::global_control gc(tbb::global_control::max_allowed_parallelism, threads);
      double best = 1e30;
      for (int r = 0; r < repeat; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        for (size_t i = 0; i < coded.size(); ++i)
          decode_tensor(*coded[i], stored[i].data(), dst.data(), m.files[0], /*parallel=*/threads > 1);
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      std::printf("decode, %d thread%s: %.2f GB/s of decoded weights (best of %d, checksums checked)\n", threads,
                  threads > 1 ? "s" : "", static_cast<double>(raw) / best / 1e9, repeat);
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_pack: %s\n", e.what());
    return 1;
  }
}
