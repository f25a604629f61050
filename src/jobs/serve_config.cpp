#include "src/jobs/serve_config.h"

#include <cstdlib>

#include "src/jobs/run_sections.h"
#include "src/util/error.h"
#include "src/util/io.h"
#include "src/util/toml_section.h"

namespace redwood::jobs {

ServeFile parse_serve_text(std::string_view text, const std::string& name) {
  ServeFile f;
  f.run.file = name;
  const toml::table root = config::parse_toml(text, name);
  read_run_sections(root, f.run, FileKind::serve);
  const toml::node* n = root.get("server");
  const config::Section top(f.run.file, f.run.lines, &root, "");
  if (n && !n->is_table()) top.wrong_type("server", *n, "a table");
  const config::Section s(f.run.file, f.run.lines, n ? n->as_table() : nullptr, "server");
  if (n) f.run.lines["server"] = static_cast<int>(n->source().begin.line);
  s.only({"host", "port", "api_key_env", "max_queue", "timeout_s"});
  s.str("host", f.host);
  if (s.has("host") && f.host.empty()) throw Error(f.run.where("server.host") + ": must not be empty");
  s.integer("port", f.port, 0, 65535);
  s.integer("max_queue", f.max_queue, 0, 4096);
  s.integer("timeout_s", f.timeout_s, 1, 3600);
  s.str("api_key_env", f.api_key_env);
  if (s.has("api_key_env") && f.api_key_env.empty())
    throw Error(f.run.where("server.api_key_env") + ": must not be empty");
  if (const char* key = f.api_key_env.empty() ? nullptr : std::getenv(f.api_key_env.c_str())) f.api_key = key;
  if (!f.run.draft.empty() && f.run.draft == f.run.target)
    throw Error(f.run.where("model.draft") + ": the draft must be a different (smaller) model than the target");
  return f;
}

ServeFile parse_serve_file(const std::string& path) {
  return parse_serve_text(read_text_file(path, "the serve config file"), path);
}

}  // namespace redwood::jobs
