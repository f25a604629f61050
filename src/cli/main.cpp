// redwood: one binary, subcommands. Errors print one line and exit 1.
#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "src/app/inspect.h"
#include "src/cli/commands.h"
#include "src/cli/common.h"
#include "src/util/env.h"
#include "src/util/error.h"
#include "src/util/temp_files.h"

namespace {
// Everything a command printed must have reached stdout: a failed write (a
// full disk, /dev/full) is exit 1 with one line on stderr, whatever the
// command returned. The one place stdout is checked.
int finish_stdout(int rc) {
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int e = errno;
  if (!flushed || std::ferror(stdout)) {
    std::fprintf(stderr, "redwood: cannot write to standard output%s%s\n", e ? ": " : "", e ? std::strerror(e) : "");
    return 1;
  }
  return rc;
}
}  // namespace

int main(int argc, char** argv) {
  redwood::remove_temp_files_on_signal();  // Ctrl-C mid-write leaves no OUT.tmp.PID behind
  CLI::App app{"redwood: run models too big for one GPU (CPU backend, tree speculative decoding)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", redwood::app::version_line());
  std::vector<std::pair<CLI::App*, redwood::cli::Runner>> cmds;
  auto reg = [&](redwood::cli::Runner r, const char* name) {
    cmds.emplace_back(app.get_subcommand(name), std::move(r));
  };
  reg(redwood::cli::add_generate(app), "generate");
  reg(redwood::cli::add_info(app), "info");
  reg(redwood::cli::add_tokenize(app), "tokenize");
  reg(redwood::cli::add_logits(app), "logits");
  reg(redwood::cli::add_make_draft(app), "make-draft");
  reg(redwood::cli::add_quantize(app), "quantize");
  reg(redwood::cli::add_pack(app), "pack");
  reg(redwood::cli::add_plan_memory(app), "plan-memory");
  reg(redwood::cli::add_plan(app), "plan");
  reg(redwood::cli::add_bench(app), "bench");
  reg(redwood::cli::add_batch(app), "batch");
  reg(redwood::cli::add_serve(app), "serve");
  reg(redwood::cli::add_chat(app), "chat");
  reg(redwood::cli::add_profile_acceptance(app), "profile-acceptance");
  reg(redwood::cli::add_profile_hardware(app), "profile-hardware");
  // No option takes "" for "not given" or 0; --prompt and --text are text ("" refused later, or empty text).
  redwood::cli::refuse_empty_values(app, {"--prompt", "--text"});
  // An unknown subcommand by name (CLI11 would only say that one is required).
  if (argc > 1 && argv[1][0] != '-' &&
      std::none_of(cmds.begin(), cmds.end(), [&](const auto& c) { return c.first->get_name() == argv[1]; })) {
    std::string names;
    for (const auto& [sub, run] : cmds) names += (names.empty() ? "" : ", ") + sub->get_name();
    std::fprintf(stderr, "redwood: unknown subcommand '%s' (one of: %s)\n", argv[1], names.c_str());
    return 1;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // Like every other error: one line, exit code 1.
    std::string where;
    for (const auto& [sub, run] : cmds)
      if (sub->parsed()) where = sub->get_name();
    std::fprintf(stderr, "redwood: %s%s (see redwood %s--help)\n", where.empty() ? "" : (where + ": ").c_str(),
                 e.what(), where.empty() ? "" : (where + " ").c_str());
    return 1;
  }
  try {
    (void)redwood::env_decode_threads();  // checked in every run, streamed or not (src/util/env.h)
    (void)redwood::env_io_priority();
    for (auto& [sub, run] : cmds)
      if (sub->parsed()) return finish_stdout(run());
  } catch (const redwood::Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "redwood: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "redwood: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "redwood: internal error: %s\n", e.what());
    return 1;
  }
  return 0;
}
