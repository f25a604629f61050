#include "src/jobs/prompts.h"

#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "src/util/error.h"
#include "src/util/io.h"

namespace redwood::jobs {

using nlohmann::json;

PromptItem parse_prompt_line(std::string_view line) {
  // A key given twice in one object would silently keep the last value: refuse it.
  std::vector<std::set<std::string>> keys;  // per open object
  std::string duplicate;
  const json::parser_callback_t cb = [&](int, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::object_start) {
      keys.emplace_back();
    } else if (ev == json::parse_event_t::object_end) {
      if (!keys.empty()) keys.pop_back();
    } else if (ev == json::parse_event_t::key && !keys.empty() && parsed.is_string()) {
      if (!keys.back().insert(parsed.get<std::string>()).second && duplicate.empty())
        duplicate = parsed.get<std::string>();
    }
    return true;
  };
  json j = json::parse(line, cb, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw Error("not valid JSON");
  if (!duplicate.empty()) throw Error("duplicate key \"" + duplicate + "\"");
  if (!j.is_object()) throw Error("expected a JSON object {\"id\": ..., \"prompt\": ...}");
  // Sampling and other settings belong to the job, not to a prompt line: a
  // key such as "temperature" would otherwise be ignored without a word.
  for (const auto& [k, v] : j.items())
    if (k != "id" && k != "prompt" && k != "messages")
      throw Error("unknown key \"" + k + "\" (a prompt line has \"id\" and \"prompt\" or \"messages\")");
  PromptItem it;
  const auto id = j.find("id");
  if (id == j.end()) throw Error("missing \"id\"");
  if (!id->is_string() && !id->is_number_integer()) throw Error("\"id\" must be a string or an integer");
  if (id->is_string() && id->get_ref<const std::string&>().empty()) throw Error("\"id\" must not be empty");
  it.id = *id;
  it.key = id->dump();
  const auto p = j.find("prompt"), m = j.find("messages");
  if ((p == j.end()) == (m == j.end())) throw Error("give exactly one of \"prompt\" and \"messages\"");
  if (p != j.end()) {
    if (!p->is_string()) throw Error("\"prompt\" must be a string");
    it.prompt = p->get<std::string>();
    if (it.prompt.empty()) throw Error("\"prompt\" is empty");
    return it;
  }
  if (!m->is_array() || m->empty()) throw Error("\"messages\" must be a non-empty array");
  for (const json& msg : *m) {
    if (!msg.is_object()) throw Error("each message must be an object {\"role\", \"content\"}");
    for (const auto& [k, v] : msg.items())
      if (k != "role" && k != "content")
        throw Error("unknown key \"" + k + "\" in a message (a message has \"role\" and \"content\")");
    const auto r = msg.find("role"), c = msg.find("content");
    if (r == msg.end() || !r->is_string()) throw Error("a message needs a string \"role\"");
    if (c == msg.end() || !c->is_string()) throw Error("a message needs a string \"content\"");
    const std::string& role = r->get_ref<const std::string&>();
    if (role != "system" && role != "user" && role != "assistant")
      throw Error("message role '" + role + "' (expected system, user or assistant)");
    it.messages.push_back({role, c->get<std::string>()});
  }
  return it;
}

PromptFile read_prompts(const std::string& path, bool skip_bad, const char* fail_hint) {
  require_regular_input(path, "the prompt file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open the prompt file");
  PromptFile out;
  std::unordered_map<std::string, int> first_line;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    std::string err;
    try {
      PromptItem it = parse_prompt_line(line);
      it.line = n;
      const auto [pos, fresh] = first_line.emplace(it.key, n);
      if (!fresh) throw Error("duplicate id " + it.key + " (first on line " + std::to_string(pos->second) + ")");
      out.items.push_back(std::move(it));
      continue;
    } catch (const Error& e) {
      err = path + ":" + std::to_string(n) + ": " + e.what();
    }
    if (!skip_bad) throw Error(err + fail_hint);
    out.bad.push_back(err);
  }
  if (in.bad()) throw Error(path + ": read error");
  return out;
}

std::string prompt_hash(const PromptItem& it, bool chat) {
  uint64_t h = 1469598103934665603ull;
  auto bytes = [&](std::string_view b) {
    for (unsigned char c : b) h = (h ^ c) * 1099511628211ull;
  };
  auto field = [&](std::string_view b) {  // length-prefixed: no two splits hash alike
    bytes(std::to_string(b.size()) + ":");
    bytes(b);
  };
  if (it.messages.empty()) {
    bytes(chat ? "chat-prompt;" : "prompt;");
    field(it.prompt);
  } else {
    bytes("messages;");
    for (const ChatMessage& m : it.messages) {
      field(m.role);
      field(m.content);
    }
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

}  // namespace redwood::jobs
