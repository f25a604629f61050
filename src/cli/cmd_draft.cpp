// redwood make-draft: a self-draft GGUF from the first K blocks of a model.
#include <cstdio>

#include "src/cli/commands.h"
#include "src/model/gguf_writer.h"
#include "src/model/model_desc.h"

namespace redwood::cli {

Runner add_make_draft(CLI::App& app) {
  struct O {
    std::string from, out;
    int layers = 0;
  };
  auto o = std::make_shared<O>();
  auto* c = app.add_subcommand("make-draft", "Write a self-draft: the first K blocks plus final norm and LM head");
  c->add_option("--from", o->from, "Source GGUF model")->required();
  c->add_option("--layers", o->layers, "Blocks to keep")->required()->check(CLI::PositiveNumber);
  c->add_option("--out,-o", o->out, "Output GGUF path")->required();
  return [o] {
    make_self_draft(o->from, o->layers, o->out);
    const ModelDesc d = load_model_desc(o->out);  // the result must load
    std::printf("wrote %s: %d of the blocks, %.1f MiB\n", o->out.c_str(), d.hp.n_layers,
                static_cast<double>(d.total_bytes()) / (1 << 20));
    return 0;
  };
}

}  // namespace redwood::cli
