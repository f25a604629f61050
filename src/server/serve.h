// What `redwood serve` and `redwood chat` do with their settings (the CLI
// parses the flags into these and prints nothing else): a serve file merged
// under the flags, the session sized and loaded, the server run until a stop
// signal (src/runtime/stop_signal.h); the terminal conversation.
#pragma once
#include <string>

#include "src/jobs/serve_config.h"
#include "src/runtime/session_settings.h"
#include "src/server/chat.h"
#include "src/server/server.h"

namespace redwood::server {

struct ServeSettings : runtime::SessionSettings {
  ServeOptions o;
  int sequences = 8;
  std::string config;  // a serve file (jobs/serve_config.h); empty: none
  jobs::ServeFile file;  // read from it by apply_serve_file

  // Set by the flag, or else by the file's key.
  bool given_or_set(const char* flag, const char* key) const { return (given && given(flag)) || file.has(key); }
};

// Reads st.config (when set) and takes its setting for every flag not given;
// an api_key_env whose variable is unset or empty is refused (unless --api-key
// is given). Throws redwood::Error "file:line: key: message".
void apply_serve_file(ServeSettings& st);

// redwood serve: applies the file, makes and sizes the session, binds
// (printing "redwood: listening on http://HOST:PORT" on stdout), loads, serves
// until a stop signal, stops. Returns the exit code: 0, or 2 for settings
// refused (the file's errors; a host beyond this machine without a key), after
// one line on stderr. Throws redwood::Error for the rest.
int serve(ServeSettings& st);

struct ChatSettings : runtime::SessionSettings {
  ChatOptions o;
  std::string config;    // a serve file: its [model], [memory], [speculation], [sampling] (max_tokens: per reply)
  jobs::ServeFile file;  // read from it by chat()
};
// redwood chat on standard input and output (Ctrl-C stops a reply; SIGTERM/SIGHUP end it).
// A serve file's errors: one line, exit 2 (as serve's); [batch] and [server] are the server's.
int chat(ChatSettings& st);

}  // namespace redwood::server
