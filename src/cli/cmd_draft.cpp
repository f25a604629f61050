// redwood make-draft: a self-draft GGUF from some blocks of a model (the first
// K, or any ascending list: skipping middle blocks keeps more of the model's
// behaviour than truncating its last ones).
// redwood quantize: the model's weight matrices in another type (a draft made
// by requantizing the target).
// redwood pack: the model with every tensor losslessly coded (fewer bytes per
// streamed pass; src/model/packed.h).
#include <algorithm>
#include <unistd.h>

#include <cstdio>

#include "src/cli/commands.h"
#include "src/cli/common.h"
#include "src/model/gguf_writer.h"
#include "src/model/model_desc.h"
#include "src/model/packed.h"
#include "src/model/quantize.h"
#include "src/util/error.h"

namespace redwood::cli {

Runner add_make_draft(CLI::App& app) {
  struct O {
    std::string from, out, blocks;
    int layers = 0;
  };
  auto o = std::make_shared<O>();
  auto* c = app.add_subcommand("make-draft",
                               "Write a self-draft: some of a model's blocks plus embeddings, final norm and LM head");
  c->add_option("--from", o->from, "Source GGUF model")->required();
  auto* l = c->add_option("--layers", o->layers, "Keep the first K blocks")->transform(int_range(1, 65536));
  auto* b = c->add_option("--blocks", o->blocks, "Keep these blocks, e.g. 0-11,24-29 (ascending, 0-based)");
  l->excludes(b);
  b->excludes(l);
  c->add_option("--out,-o", o->out, "Output GGUF path")->required();
  return [o] {
    check_output(o->out, {o->from}, "--out");  // before any work: never over the source model
    if (o->layers > 0) {
      make_self_draft(o->from, o->layers, o->out);
    } else if (!o->blocks.empty()) {
      make_self_draft(o->from, parse_block_list(o->blocks, load_model_desc(o->from).hp.n_layers), o->out);
    } else {
      throw Error("make-draft: give --layers K or --blocks LIST");
    }
    const ModelDesc d = load_model_desc(o->out);  // the result must load
    std::printf("wrote %s: %d of the blocks, %.1f MiB\n", o->out.c_str(), d.hp.n_layers,
                static_cast<double>(d.total_bytes()) / (1 << 20));
    return 0;
  };
}

Runner add_quantize(CLI::App& app) {
  struct O {
    std::string from, out, type;
  };
  auto o = std::make_shared<O>();
  auto* c = app.add_subcommand("quantize",
                               "Write a copy of a GGUF model with its weight matrices in another type "
                               "(e.g. a lower-bit draft of a target)");
  c->add_option("--from", o->from, "Source GGUF model")->required();
  c->add_option("--type", o->type, "Q8_0, Q5_1, Q5_0, Q4_1, Q4_0, Q3_K, F16, BF16 or F32")->required();
  c->add_option("--out,-o", o->out, "Output GGUF path")->required();
  return [o] {
    std::optional<DType> type;
    for (const auto& i : kDTypes)
      if (i.name == o->type && can_quantize_to(i.type)) type = i.type;
    if (!type)
      throw Error("quantize: --type '" + o->type + "' is not one of Q8_0, Q5_1, Q5_0, Q4_1, Q4_0, Q3_K, F16, BF16, F32");
    check_output(o->out, {o->from}, "--out");  // before any work: never over the source model
    const bool tty = ::isatty(2) != 0;
    const QuantizeStats st = quantize_model(o->from, *type, o->out, [tty](size_t done, size_t total) {
      if (tty) std::fprintf(stderr, "\rquantize: %zu/%zu tensors%s", done, total, done == total ? "\n" : "");
    });
    const ModelDesc d = load_model_desc(o->out);  // the result must load
    std::printf("wrote %s: %d tensors as %s (%d of them as Q4_0: rows not a multiple of 256), %d kept, %.1f -> "
                "%.1f MiB\n",
                o->out.c_str(), st.converted, o->type.c_str(), st.fallback, st.kept,
                static_cast<double>(st.bytes_in) / (1 << 20), static_cast<double>(d.total_bytes()) / (1 << 20));
    return 0;
  };
}

Runner add_pack(CLI::App& app) {
  struct O {
    std::string from, out;
  };
  auto o = std::make_shared<O>();
  auto* c = app.add_subcommand("pack",
                               "Write a packed copy of a GGUF model: every tensor losslessly coded, so that a "
                               "streamed pass reads fewer bytes (outputs bit-identical)");
  c->add_option("--from", o->from, "Source GGUF model")->required();
  c->add_option("--out,-o", o->out, "Output path (a packed model, which every command takes as --model)")->required();
  return [o] {
    check_output(o->out, {o->from}, "--out");  // before any work: never over the source model
    const bool tty = ::isatty(2) != 0;
    const PackStats st = pack_model(o->from, o->out, [tty](uint64_t done, uint64_t total) {
      if (tty) std::fprintf(stderr, "\rpack: %llu/%llu tensors%s", static_cast<unsigned long long>(done),
                            static_cast<unsigned long long>(total), done == total ? "\n" : "");
    });
    const auto mib = [](uint64_t b) { return static_cast<double>(b) / (1 << 20); };
    std::printf("wrote %s: tensors %.1f -> %.1f MiB (%.1f%% saved), file %.1f MiB; verified\n", o->out.c_str(),
                mib(st.raw_bytes), mib(st.stored_bytes),
                st.raw_bytes ? 100.0 * (1.0 - static_cast<double>(st.stored_bytes) / static_cast<double>(st.raw_bytes))
                             : 0.0,
                mib(st.file_bytes));
    for (const auto& [type, b] : st.by_type)
      std::printf("  %-6s %10.1f -> %10.1f MiB (%.1f%% saved)\n", std::string(dtype_name(type)).c_str(), mib(b.first),
                  mib(b.second), b.first ? 100.0 * (1.0 - static_cast<double>(b.second) / static_cast<double>(b.first)) : 0.0);
    return 0;
  };
}

}  // namespace redwood::cli
