// A Session from the settings of a command that runs one (generate, serve,
// chat), as its flags or a serve file give them: the session's config, and the
// tree's settings as text, parsed here so that an error names the flag.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "src/runtime/session.h"

namespace redwood::runtime {

struct SessionSettings {
  SessionConfig s;  // model, run options, draft, sampling, prefill chunk, hardware profile
  std::string tree = "sequoia", verify, acceptance;
  // Parsed by make_session (one-line errors naming the flag); empty = not given.
  std::string budget = "64", depth = "8", threshold, delta, width, is_alphabet;
  std::vector<std::string> inputs;  // other files the command reads (a --config): never an output
  std::function<bool(const char* flag)> given;  // whether a flag was given ("--tree"); none: no flag was
};

// Checks the settings (`checks`: the command's own, after the sampling's;
// `late_checks` after the draft's budget) and makes the session into
// `session` (descriptions, no weights). Throws redwood::Error (one line).
void make_session(SessionSettings& o, std::optional<Session>& session, const std::function<void()>& checks = {},
                  const std::function<void()>& late_checks = {});

}  // namespace redwood::runtime
