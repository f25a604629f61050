// Shared pieces of the CLI subcommands: option parsing. Running models is
// src/runtime's (its names used unqualified), what commands do src/app's (app::).
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "src/runtime/model.h"
#include "src/runtime/session.h"
#include "src/runtime/session_settings.h"
#include "src/runtime/stop_signal.h"
#include "src/util/output_path.h"
#include "src/util/parse.h"

namespace redwood::cli {

using namespace runtime;  // the CLI is the runtime's client

void add_run_options(CLI::App* app, RunOptions& o);

// The flags of a command that runs a Session (generate, serve, chat) into its
// settings (src/runtime/session_settings.h: make_session checks them and makes
// the session): run options, sampling, --prefill-chunk, --draft and the
// tree's flags (kept as given); `given` says which flags the command line had.
void add_session_flags(CLI::App* c, SessionSettings& f);
struct SessionFlags : SessionSettings {
  const CLI::App* cmd = nullptr;  // which flags were given
};

// An integer option's range, with a message that says so ("expected an integer
// from 1 to 1048576, got 'abc'"; CLI11's Range and PositiveNumber print their
// limits as doubles, the largest double for "positive").
CLI::Validator int_range(long long lo, long long hi);
// --kv-type's check (src/engine/kv_cache.h, kKvTypeNames), with its message.
CLI::Validator kv_type_check();
// Just --device-mem, --host-mem and --ring (add_run_options includes them).
void add_budget_options(CLI::App* app, RunOptions& o);

// Every option of app and its subcommands that takes a value, but those in
// allow_empty, refuses "" ("--temperature: expected a value, got ''"). Called
// once, after every subcommand is added.
void refuse_empty_values(CLI::App& app, const std::vector<std::string>& allow_empty);

// Parses "1,2,3" into token ids.
std::vector<int32_t> parse_int_list(const std::string& s, const char* what);

}  // namespace redwood::cli
