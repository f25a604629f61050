// Subcommand registration: each adds itself to the app and returns the
// callback that runs it after parsing.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

namespace redwood::cli {
using Runner = std::function<int()>;
Runner add_generate(CLI::App& app);
Runner add_info(CLI::App& app);
Runner add_tokenize(CLI::App& app);
Runner add_logits(CLI::App& app);
Runner add_make_draft(CLI::App& app);
Runner add_quantize(CLI::App& app);
Runner add_pack(CLI::App& app);
Runner add_plan_memory(CLI::App& app);
Runner add_plan(CLI::App& app);
Runner add_bench(CLI::App& app);
Runner add_batch(CLI::App& app);
Runner add_serve(CLI::App& app);
Runner add_chat(CLI::App& app);
Runner add_profile_acceptance(CLI::App& app);
Runner add_profile_hardware(CLI::App& app);
}  // namespace redwood::cli
