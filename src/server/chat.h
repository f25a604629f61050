// `redwood chat`: a terminal conversation over one loaded Session (one
// sequence: Session::generate, with the draft's trees when there is one).
// Each line read is a user turn; the whole history goes through the model's
// chat template; the reply is printed as it comes.
#pragma once
#include <cstdio>
#include <functional>
#include <string>

#include "src/runtime/session.h"

namespace redwood::server {

struct ChatOptions {
  int ctx = 2048;       // KV positions: the history's tokens + max_tokens (see Session::load)
  int max_tokens = 512;  // per reply
  std::string system;   // a system message first, when not empty
};

// Reads turns from the file descriptor `in` until end of input or "/exit" ("/reset" forgets the
// history), writing "> " prompts and replies to `out`. `interrupted()` is
// polled while a reply runs and while waiting for a line (a reply then ends, kept in the history as far as it
// got); after it, `resume()` says whether to go on (a Ctrl-C) or end (a
// SIGTERM). A history too long for ctx is a one-line note, the turn dropped.
// REQUIRES: session loaded with one sequence and a usable chat template.
void run_chat(runtime::Session& session, const ChatOptions& o, int in, std::FILE* out,
              const std::function<bool()>& interrupted, const std::function<bool()>& resume);

}  // namespace redwood::server
