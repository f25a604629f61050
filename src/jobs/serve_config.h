// A serve file: what `redwood serve --config FILE` runs with, the flags'
// settings as TOML. The sections a job file has mean the same here (one
// reader, run_sections.h); flags given on the command line win.
//
//   [model]       target = "models/x.gguf"  draft = "models/d.gguf"
//   [memory]      device, host, ring, ctx (KV positions per request), threads, verify_io, kv_type
//   [speculation] tree, verify, budget, depth, threshold, delta, width, acceptance, is_alphabet, prefill_chunk
//   [batch]       sequences = 8 (requests sharing each pass)  pass_tokens = 64
//   [sampling]    temperature, top_p, top_k, seed (the server's default seed), max_tokens (a request's default)
//   [server]      host = "127.0.0.1"  port = 8080  max_queue = 64  timeout_s = 30
//                 api_key_env = "REDWOOD_API_KEY": the NAME of an environment variable holding the
//                 key (a file holds no secret; the variable must be set and non-empty)
#pragma once
#include <optional>
#include <string>
#include <string_view>

#include "src/jobs/job.h"

namespace redwood::jobs {

struct ServeFile {
  JobConfig run;  // the shared sections; run.lines names the keys the file sets
  // [server]
  std::string host;
  int port = 8080;
  std::string api_key_env;  // the variable's name
  std::string api_key;      // its value when parsed ("": unset or empty; the server refuses to start)
  int max_queue = 64;
  int timeout_s = 30;  // receiving a request (all of it), each write of a response

  // Whether the file sets `key` ("memory.ctx", "server.port").
  bool has(const std::string& key) const { return run.lines.count(key) > 0; }
};

// Parses and type-checks a serve file's text; reads the API key's variable
// from the environment (serve.h's apply_serve_file refuses it unset). Throws redwood::Error "name:line: key: message" for
// syntax errors, unknown sections or keys, wrong types and ranges.
ServeFile parse_serve_text(std::string_view text, const std::string& name);
ServeFile parse_serve_file(const std::string& path);

}  // namespace redwood::jobs
