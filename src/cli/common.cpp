#include "src/cli/common.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "src/util/error.h"
#include "src/util/io.h"

namespace redwood::cli {

void add_session_flags(CLI::App* c, SessionSettings& f) {
  f.given = [c](const char* flag) { return c->count(flag) > 0; };
  add_run_options(c, f.s.run);
  c->add_option("--temperature", f.s.sampling.temperature, "0 = greedy");
  c->add_option("--top-p", f.s.sampling.top_p, "Nucleus sampling mass (0, 1]");
  c->add_option("--top-k", f.s.sampling.top_k, "Keep the k most likely tokens (0 = off)");
  c->add_option("--seed", f.s.sampling.seed, "Random seed (default 0: the same command samples the same text)")
      ->transform(int_range(0, INT64_MAX));
  c->add_option("--prefill-chunk", f.s.prefill_chunk, "Prompt tokens per pass (bounds activation memory)")
      ->transform(int_range(1, 1 << 20));
  c->add_option("--draft", f.s.draft, "Draft model (the target's tokenizer; it may lack padding rows): enables speculative decoding");
  c->add_option("--tree", f.tree,
                "Tree: chain:K | kary:WxD | sequoia | sequoia:FILE (static shapes), dyspec | opt-tree | specexec "
                "(built per step from the draft's probabilities), auto (the tree - Sequoia, or a dynamic policy with "
                "its parameters - and verifier, or none, that measured acceptance and pass times predict fastest; "
                "--budget/--depth cap it) (default sequoia)");
  c->add_option("--verify", f.verify,
                "Verifier: greedy | specinfer | sequoia | spectr | multidraft-is | target-sample (default: greedy at "
                "T=0; else sequoia, or target-sample for opt-tree/specexec). dyspec: sequoia|greedy; opt-tree, "
                "specexec: target-sample|greedy");
  c->add_option("--budget", f.budget,
                "sequoia, dyspec, opt-tree, specexec: nodes per target pass, root included, 1..8192 (default 64; "
                "dyspec --threshold: the node cap)")
      ->type_name("INT");
  c->add_option("--depth", f.depth,
                "sequoia and dynamic trees: maximum depth in levels, root included (as in the Sequoia paper), "
                "1..1024 (default 8)")
      ->type_name("INT");
  c->add_option("--threshold", f.threshold,
                "dyspec: 0 = heap variant filling --budget (default); in (0, 1): layer-wise variant expanding "
                "while value > threshold (e.g. 1/budget)")
      ->type_name("NUM");
  c->add_option("--delta", f.delta,
                "opt-tree: stop growing when a layer adds <= delta to the best-n expected length (default 0.5)")
      ->type_name("NUM");
  c->add_option("--width", f.width, "specexec: children per expanded node, 1..4096 (default 4)")->type_name("INT");
  c->add_option("--is-alphabet", f.is_alphabet,
                "multidraft-is: truncate each node's alphabet to the M most likely target tokens (exact: the "
                "result is kept with probability p(Omega0)); default off")
      ->type_name("M");
  c->add_option("--hardware-profile", f.s.hardware_profile,
                "--tree auto: use this profile-hardware file instead of the cache (with --acceptance: an "
                "acceptance profile instead of the cache's)");
  c->add_option("--acceptance", f.acceptance, "sequoia: acceptance vector JSON {\"acceptance\": [...]}");
}

CLI::Validator kv_type_check() {  // kv_type_from_name's message, without the option's name
  const auto check = [](std::string& s) -> std::string {
    try {
      return kv_type_from_name(s, nullptr), std::string();
    } catch (const Error& e) {
      return e.what();
    }
  };
  return CLI::Validator(check, kv_type_list("|"));
}

CLI::Validator int_range(long long lo, long long hi) {
  const std::string range = std::to_string(lo) + " to " + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, range](std::string& s) -> std::string {
        errno = 0;
        char* end = nullptr;
        const long long v = std::strtoll(s.c_str(), &end, 10);
        if (s.empty() || *end != '\0' || errno == ERANGE || v < lo || v > hi)
          return "expected an integer from " + range + ", got '" + s + "'";
        s = std::to_string(v);  // as read here ("010" is 10; CLI11 alone would read it as octal)
        return {};
      },
      "INT in " + range);
}

void add_run_options(CLI::App* app, RunOptions& o) {
  app->add_option("--model,-m", o.model, "Model: GGUF file or safetensors directory (default: SmolLM2-135M)");
  app->add_option("--threads,-t", o.threads, "CPU threads (default: all cores)")->transform(int_range(0, 4096));
  app->add_option("--backend", o.backend,
                  "Kernels: cpu (default) or cuda (built with REDWOOD_CUDA and a GPU present); "
                  "weights and KV cache then live in VRAM, streamed layers go through pinned staging");
  add_budget_options(app, o);
  app->add_option("--trace", o.trace, "Write a Chrome trace JSON of the layer pipeline to FILE");
  app->add_flag("--verify-io", o.verify_io, "Checksum streamed layers against the first read");
  app->add_option("--kv-type", o.kv_type,
                  "KV cache element type: f32 (default: outputs match an fp32 reference), f16 or bf16 (half the "
                  "KV memory; rows rounded to nearest even when written, speculative output still equals plain), "
                  "q8_0 (34 bytes per 32 elements, each row quantized when written; head_dim a multiple of 32)")
      ->check(kv_type_check());
}

void add_budget_options(CLI::App* app, RunOptions& o) {
  // An empty size would silently mean "no limit": refuse it when parsing.
  const CLI::Validator non_empty(
      [](std::string& s) -> std::string { return s.empty() ? "expected a size such as 2GiB, got ''" : ""; }, "SIZE");
  app->add_option("--device-mem", o.device_mem,
                  "Device memory budget, e.g. 2GiB, 512MiB (CPU backend: the RAM working set; default: no limit); "
                  "SIZE+draft: SIZE for the target, the resident draft's costs on top")
      ->check(non_empty);
  app->add_option("--host-mem", o.host_mem, "Host (pinned RAM) budget for staged layers, e.g. 4GiB (default: none)")
      ->check(non_empty);
  app->add_option("--ring", o.ring, "Layer slots in the streaming ring (>= 2)")->transform(int_range(2, 1024));
}

void refuse_empty_values(CLI::App& app, const std::vector<std::string>& allow_empty) {
  for (CLI::Option* opt : app.get_options()) {
    if (opt->get_type_size_max() == 0) continue;  // a flag
    bool allowed = false;
    for (const std::string& name : allow_empty) allowed |= opt->check_name(name);
    if (allowed) continue;
    opt->check(CLI::Validator([](std::string& s) { return s.empty() ? "expected a value, got ''" : std::string(); }, ""));
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) refuse_empty_values(*sub, allow_empty);
}

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

}  // namespace redwood::cli
