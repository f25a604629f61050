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
#include "src/runtime/stop_signal.h"
#include "src/util/output_path.h"

namespace redwood::cli {

using namespace runtime;  // the CLI is the runtime's client

void add_run_options(CLI::App* app, RunOptions& o);

// The flags of a command that runs a Session (generate, serve, chat): run
// options, sampling, --prefill-chunk, --draft and the tree's flags (kept as
// given, parsed by make_session).
struct SessionFlags {
  runtime::SessionConfig s;  // model, run options, draft, sampling, prefill chunk, hardware profile
  std::string tree = "sequoia", verify, acceptance;
  // Parsed by redwood (one-line errors, exit 1); empty = not given.
  std::string budget = "64", depth = "8", threshold, delta, width, is_alphabet;
  const CLI::App* cmd = nullptr;  // which flags were given
  std::vector<std::string> inputs;  // other files the command reads (a --config): never an output
};
void add_session_flags(CLI::App* c, SessionFlags& f);
// Checks the flags (`checks`: the command's own, after the sampling's;
// `late_checks` after the draft's budget) and makes the session into
// `session` (descriptions, no weights). Throws redwood::Error (one line).
void make_session(SessionFlags& f, std::optional<Session>& session, const std::function<void()>& checks = {},
                  const std::function<void()>& late_checks = {});

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

// Parses a whole option value as an integer in [lo, hi] / a finite number;
// throws redwood::Error naming the option (e.g. "--budget: expected an
// integer in [1, 8192], got 'x'").
int parse_int_arg(const std::string& s, const char* what, int lo, int hi);
double parse_double_arg(const std::string& s, const char* what);

// Parses "1,2,3" into token ids.
std::vector<int32_t> parse_int_list(const std::string& s, const char* what);

}  // namespace redwood::cli
