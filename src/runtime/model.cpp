#include "src/runtime/model.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "src/util/size.h"
#include "src/util/error.h"
#include "src/util/output_path.h"

namespace redwood::runtime {

namespace {
bool exists(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0;
}
}  // namespace

std::string default_model_path() {
  if (const char* env = std::getenv("REDWOOD_MODEL"); env && *env) return env;
  const std::string rel = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (exists(rel)) return rel;
  // Beside the folder that holds the binary (build/redwood -> models/ of the checkout).
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const std::string beside = (exe.parent_path().parent_path() / rel).string();
    if (exists(beside)) return beside;
  }
  throw Error("no --model given and the default model is missing: run tools/fetch-models.sh");
}

LoadedModel load_model(const std::string& path, bool with_weights) {
  LoadedModel m;
  m.desc = load_model_desc(path.empty() ? default_model_path() : path);
  m.tokenizer = Tokenizer::create(m.desc.tokenizer);
  if (with_weights) load_weights(m, RunOptions{}, offload::RunShape{});
  return m;
}

void load_weights(LoadedModel& m, const RunOptions& run, const offload::RunShape& shape, const ModelDesc* draft) {
  if (run.backend == "cuda")
    m.backend = make_cuda_backend();
  else if (run.backend == "cpu")
    m.backend = make_cpu_backend();
  else
    throw Error("--backend: expected cpu or cuda, got '" + run.backend + "'");
  // Before any weight loads: a KV type this model or backend cannot keep.
  check_kv_support(kv_type_from_name(run.kv_type), m.desc.hp, *m.backend, m.desc.path);
  if (run.device_mem.empty() && run.host_mem.empty()) {
    if (!run.trace.empty()) throw Error("--trace needs --device-mem (it traces the layer streaming pipeline)");
    m.weights = make_resident_weights(m.desc, *m.backend);
    m.transformer = std::make_unique<Transformer>(m.desc, *m.weights, *m.backend);
    m.transformer->set_kv_type(kv_type_from_name(run.kv_type));
    return;
  }
  m.plan = plan_run_memory(m.desc, draft, run, shape);
  const auto& p = *m.plan;
  // Also when every layer fits: the streamer then just serves resident layers
  // (no I/O thread), and --trace and the per-pass stats still work.
  offload::StreamOptions so;
  so.verify_io = run.verify_io;
  so.backend = m.backend.get();
  if (!run.trace.empty()) {
    m.trace = std::make_unique<offload::Trace>();
    so.trace = m.trace.get();
  }
  auto w = std::make_unique<offload::StreamedWeights>(m.desc, p, so);
  m.streamed = w.get();
  m.weights = std::move(w);
  std::fprintf(stderr,
               "redwood: %d layers resident, %d host-staged, %d streamed from storage (%s%s), ring %d x %s; %s of %s "
               "device budget planned\n",
               p.count(offload::Tier::kDevice), p.count(offload::Tier::kHost), p.count(offload::Tier::kStorage),
               m.streamed->reader_kind(), m.streamed->reader_direct() ? ", O_DIRECT" : "", p.ring_slots,
               format_size(p.slot_bytes).c_str(), format_size(p.device_used).c_str(),
               p.device_budget ? format_size(p.device_budget).c_str() : "unlimited");
  m.transformer = std::make_unique<Transformer>(m.desc, *m.weights, *m.backend);
  m.transformer->set_kv_type(kv_type_from_name(run.kv_type));
}

offload::MemoryPlan plan_run_memory(const ModelDesc& target, const ModelDesc* draft, const RunOptions& run,
                                    offload::RunShape shape) {
  shape.threads = run.threads > 0 ? run.threads : cpu_threads();
  shape.kv_type = kv_type_from_name(run.kv_type);
  return offload::plan_memory(target, draft, budgets_from(run), shape);
}

uint64_t peak_rss() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  return 0;
}

void reset_peak_rss() {
  std::ofstream("/proc/self/clear_refs") << "5";
}

nlohmann::json offload_stats(const LoadedModel& m) {
  if (!m.streamed) return nullptr;
  const auto& t = m.streamed->totals();
  return {{"passes", m.streamed->passes()},     {"storage_bytes", t.storage_bytes},
          {"host_bytes", t.host_bytes},         {"stall_seconds", t.stall_seconds},
          {"io_seconds", t.io_seconds},         {"compute_seconds", t.compute_seconds},
          {"wall_seconds", t.wall_seconds},     {"layers_streamed", m.streamed->streamed_layers()},
          {"reader", m.streamed->reader_kind()}};
}

void finish_run(const LoadedModel& m, const RunOptions& run) {
  if (m.trace && !run.trace.empty()) write_output_file(run.trace, m.trace->json(), /*fifo_ok=*/true);
}

void check_draft_budget(const RunOptions& o, const std::string& draft) {
  static const std::string kSuffix = "+draft";
  if (draft.empty() && o.device_mem.size() >= kSuffix.size() &&
      o.device_mem.compare(o.device_mem.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0)
    throw Error("--device-mem " + o.device_mem + ": +draft puts a draft model's costs on top, but no --draft is given");
}

offload::Budgets budgets_from(const RunOptions& o) {
  offload::Budgets b;
  if (!o.device_mem.empty()) offload::parse_device_budget(o.device_mem, b, "--device-mem");
  if (!o.host_mem.empty()) b.host = parse_size(o.host_mem, "--host-mem");
  b.ring_slots = o.ring;
  b.backend = o.backend == "cuda" ? offload::BackendKind::kCuda : offload::BackendKind::kCpu;
  return b;
}

void apply_run_options(RunOptions& o, const std::vector<std::string>& inputs) {
  set_cpu_threads(o.threads);
  if (!o.trace.empty()) {  // before the run, not after it
    std::vector<std::string> all = inputs;
    all.push_back(o.model.empty() ? default_model_path() : o.model);
    check_output(o.trace, all, "--trace", /*fifo_ok=*/true);
  }
}

void check_output(const std::string& path, const std::vector<std::string>& inputs, const std::string& option,
                  bool fifo_ok) {
  check_output_path(path, inputs, option, fifo_ok);
  if (fifo_ok && is_fifo(path)) return;  // streamed to, never renamed over
  try {
    const TempOutput probe(path);  // created and removed: the run's output can be written there
  } catch (const Error& e) {
    throw Error(option + ": " + e.what());
  }
}

RunOptions resident_run(const RunOptions& run) {
  RunOptions r;
  r.backend = run.backend;
  r.threads = run.threads;
  r.kv_type = run.kv_type;
  return r;
}

TreeBatch random_tree(int n, int start, int vocab) {
  std::mt19937 rng(1234 + static_cast<unsigned>(n));
  TreeBatch b;
  std::vector<int32_t> depth;
  for (int i = 0; i < n; ++i) {
    const int lo = std::max(-1, i - 4);
    const int p = i == 0 ? -1 : std::uniform_int_distribution<int>(lo, i - 1)(rng);
    b.parents.push_back(p);
    depth.push_back(p < 0 ? 0 : depth[static_cast<size_t>(p)] + 1);
    b.positions.push_back(start + depth.back());
    b.tokens.push_back(std::uniform_int_distribution<int>(0, vocab - 1)(rng));
  }
  return b;
}
}  // namespace redwood::runtime
