#include "src/server/api.h"

#include <cmath>
#include <limits>

namespace redwood::server {

using nlohmann::json;

namespace {

ApiError bad(const std::string& param, const std::string& message) {
  return ApiError(400, param + ": " + message, param);
}

bool absent(const json& v) { return v.is_null(); }

int int_field(const json& v, const std::string& name, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) throw bad(name, "expected an integer, got " + std::string(v.type_name()));
  // nlohmann keeps a non-negative literal unsigned: both bounds apply to it too ("max_tokens": 0).
  const bool out = v.is_number_unsigned() ? v.get<uint64_t>() > static_cast<uint64_t>(hi) ||
                                                (lo > 0 && v.get<uint64_t>() < static_cast<uint64_t>(lo))
                                          : v.get<int64_t>() < lo || v.get<int64_t>() > hi;
  if (out)
    throw bad(name,
              "expected an integer from " + std::to_string(lo) + " to " + std::to_string(hi) + ", got " + v.dump());
  return static_cast<int>(v.get<int64_t>());
}

float number_field(const json& v, const std::string& name, double lo, double hi, bool lo_open) {
  if (!v.is_number()) throw bad(name, "expected a number, got " + std::string(v.type_name()));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x > hi || (lo_open ? x <= lo : x < lo))
    throw bad(name, "expected a number in " + std::string(lo_open ? "(" : "[") + json(lo).dump() + ", " +
                        json(hi).dump() + "], got " + v.dump());
  return static_cast<float>(x);
}

std::string string_field(const json& v, const std::string& name) {
  if (!v.is_string()) throw bad(name, "expected a string, got " + std::string(v.type_name()));
  return v.get<std::string>();
}

std::vector<std::string> stop_field(const json& v) {
  std::vector<std::string> stop;
  if (v.is_string()) {
    stop.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    if (v.size() > static_cast<size_t>(kMaxStops))
      throw bad("stop", "at most " + std::to_string(kMaxStops) + " stop strings, got " + std::to_string(v.size()));
    for (const json& s : v) stop.push_back(string_field(s, "stop"));
  } else {
    throw bad("stop", "expected a string or an array of strings, got " + std::string(v.type_name()));
  }
  for (const std::string& s : stop) {
    if (s.empty()) throw bad("stop", "a stop string is empty");
    if (s.size() > kMaxStopBytes)
      throw bad("stop", "a stop string is " + std::to_string(s.size()) + " bytes; at most " +
                            std::to_string(kMaxStopBytes));
  }
  return stop;
}

// A message's content: a string, or text parts [{"type": "text", "text": ...}].
std::string content_field(const json& v, const std::string& name) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) throw bad(name, "expected a string or an array of text parts, got " + std::string(v.type_name()));
  std::string text;
  for (size_t i = 0; i < v.size(); ++i) {
    const json& part = v[i];
    const std::string pname = name + "[" + std::to_string(i) + "]";
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
        part.size() != 2)
      throw bad(pname, "only text parts {\"type\": \"text\", \"text\": ...} are supported");
    text += string_field(part["text"], pname + ".text");
  }
  return text;
}

std::vector<ChatMessage> messages_field(const json& v) {
  if (!v.is_array()) throw bad("messages", "expected an array of messages, got " + std::string(v.type_name()));
  if (v.empty()) throw bad("messages", "no messages");
  if (v.size() > kMaxMessages)
    throw bad("messages", "at most " + std::to_string(kMaxMessages) + " messages, got " + std::to_string(v.size()));
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string name = "messages[" + std::to_string(i) + "]";
    const json& m = v[i];
    if (!m.is_object()) throw bad(name, "expected an object, got " + std::string(m.type_name()));
    ChatMessage msg;
    bool has_content = false;
    for (const auto& [key, val] : m.items()) {
      if (key == "role") {
        msg.role = string_field(val, name + ".role");
        if (msg.role == "developer") msg.role = "system";  // OpenAI's newer name for it
        if (msg.role != "system" && msg.role != "user" && msg.role != "assistant")
          throw bad(name + ".role", "'" + msg.role + "' is not supported (system, developer, user or assistant)");
      } else if (key == "content") {
        msg.content = content_field(val, name + ".content");
        has_content = true;
      } else if (key == "name" || key == "tool_calls" || key == "tool_call_id" || key == "function_call" ||
                 key == "refusal" || key == "audio") {
        if (!absent(val)) throw bad(name + "." + key, "is not supported by this server");
      } else {
        throw bad(name + "." + key, "unknown field");
      }
    }
    if (msg.role.empty()) throw bad(name + ".role", "missing");
    if (!has_content) throw bad(name + ".content", "missing");
    out.push_back(std::move(msg));
  }
  return out;
}

// A completion's prompt: a string, one string in an array, or token ids.
void prompt_field(const json& v, runtime::PromptText& p) {
  const json* one = &v;
  if (v.is_array() && v.size() == 1 && (v[0].is_string() || v[0].is_array())) one = &v[0];
  if (one->is_string()) {
    p.text = one->get<std::string>();
    return;
  }
  if (one->is_array() && !one->empty()) {
    for (const json& t : *one) {
      if (!t.is_number_integer())
        throw bad("prompt", "expected a string, one string in an array, or token ids; several prompts in one "
                            "request are not supported");
      p.tokens.push_back(int_field(t, "prompt", 0, std::numeric_limits<int32_t>::max()));
    }
    return;
  }
  throw bad("prompt", "expected a string, one string in an array, or token ids, got " +
                          std::string(one->is_array() ? "an empty array" : one->type_name()));
}

// Fields the API has that this server does not do: refused unless null
// (or the value that means "off").
bool unsupported(const std::string& key, const json& v) {
  static const char* const kRefused[] = {
      "tools",    "tool_choice",      "functions",  "function_call", "response_format", "top_logprobs",
      "parallel_tool_calls", "modalities", "audio", "prediction", "reasoning_effort", "store",
      "metadata", "service_tier",     "suffix",     "web_search_options"};
  for (const char* k : kRefused)
    if (key == k) return !absent(v);
  if (key == "n" || key == "best_of") return !absent(v) && v != 1;
  if (key == "frequency_penalty" || key == "presence_penalty") return !absent(v) && v != 0;
  if (key == "logprobs" || key == "echo") return !absent(v) && v != false;
  if (key == "logit_bias") return !absent(v) && !(v.is_object() && v.empty());
  return false;
}

bool known(const std::string& key, Endpoint e) {
  static const char* const kCommon[] = {"model", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop",
                                        "stream", "stream_options", "user", "n", "frequency_penalty",
                                        "presence_penalty", "logprobs", "logit_bias"};
  static const char* const kChat[] = {"messages", "max_completion_tokens", "tools", "tool_choice", "functions",
                                      "function_call", "response_format", "top_logprobs", "parallel_tool_calls",
                                      "modalities", "audio", "prediction", "reasoning_effort", "store", "metadata",
                                      "service_tier", "web_search_options"};
  static const char* const kCompletion[] = {"prompt", "echo", "best_of", "suffix"};
  for (const char* k : kCommon)
    if (key == k) return true;
  if (e == Endpoint::chat) {
    for (const char* k : kChat)
      if (key == k) return true;
  } else {
    for (const char* k : kCompletion)
      if (key == k) return true;
  }
  return false;
}

}  // namespace

json error_json(const ApiError& e) {
  return {{"error",
           {{"message", e.what()},
            {"type", e.type},
            {"param", e.param.empty() ? json(nullptr) : json(e.param)},
            {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
}

ApiRequest parse_request(std::string_view body, Endpoint endpoint, const std::string& model_id) {
  const json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw ApiError(400, "the request body is not valid JSON");
  if (!j.is_object()) throw ApiError(400, "the request body must be a JSON object, got " + std::string(j.type_name()));
  ApiRequest r;
  r.endpoint = endpoint;
  bool has_input = false;
  const json* stream_options = nullptr;
  for (const auto& [key, v] : j.items()) {
    if (!known(key, endpoint))
      throw ApiError(400, key + ": unknown field (this server refuses fields it does not know)", key);
    if (unsupported(key, v)) throw ApiError(400, key + ": " + v.dump() + " is not supported by this server", key);
    if (absent(v)) continue;
    if (key == "model") {
      const std::string m = string_field(v, "model");
      if (m != model_id)
        throw ApiError(404, "The model '" + m + "' does not exist (this server serves '" + model_id + "')", "model",
                       "model_not_found");
    } else if (key == "messages") {
      r.prompt.messages = messages_field(v);
      r.prompt.name = "messages";
      has_input = true;
    } else if (key == "prompt") {
      prompt_field(v, r.prompt);
      r.prompt.name = "prompt";
      has_input = true;
    } else if (key == "max_tokens" || key == "max_completion_tokens") {
      r.max_tokens = int_field(v, key, 1, 1 << 20);
    } else if (key == "temperature") {
      r.temperature = number_field(v, key, 0, 2, false);
    } else if (key == "top_p") {
      r.top_p = number_field(v, key, 0, 1, true);
    } else if (key == "top_k") {
      r.top_k = int_field(v, key, 0, 1 << 24);
    } else if (key == "seed") {
      if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0))
        throw bad("seed", "expected an integer >= 0, got " + v.dump());
      r.seed = v.get<uint64_t>();
    } else if (key == "stop") {
      r.stop = stop_field(v);
    } else if (key == "stream") {
      if (!v.is_boolean()) throw bad("stream", "expected true or false, got " + std::string(v.type_name()));
      r.stream = v.get<bool>();
    } else if (key == "stream_options") {
      stream_options = &v;
    } else if (key == "user") {
      (void)string_field(v, "user");  // an end user's id, for the caller's records: no effect here
    }
  }
  if (stream_options) {
    if (!r.stream) throw bad("stream_options", "only with stream: true");
    if (!stream_options->is_object()) throw bad("stream_options", "expected an object");
    for (const auto& [key, v] : stream_options->items()) {
      if (key != "include_usage") throw bad("stream_options." + key, "unknown field");
      if (!v.is_boolean()) throw bad("stream_options.include_usage", "expected true or false");
      r.include_usage = v.get<bool>();
    }
  }
  if (!has_input) {
    const char* what = endpoint == Endpoint::chat ? "messages" : "prompt";
    throw bad(what, "missing");
  }
  return r;
}

SamplingParams request_sampling(const ApiRequest& r, SamplingParams s, uint64_t seed) {
  if (r.temperature) s.temperature = *r.temperature;
  if (r.top_p) s.top_p = *r.top_p;
  if (r.top_k) s.top_k = *r.top_k;
  s.seed = seed;
  return s;
}

std::string finish_reason(const spec::Generation& g) {
  return g.finish;
}

json usage_json(size_t prompt_tokens, size_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

namespace {
json head(const ResponseMeta& m, const char* object) {
  return {{"id", m.id}, {"object", object}, {"created", m.created}, {"model", m.model}};
}
}  // namespace

json completion_json(const ApiRequest& r, const ResponseMeta& m, const spec::Generation& g, size_t prompt_tokens) {
  const bool chat = r.endpoint == Endpoint::chat;
  json j = head(m, chat ? "chat.completion" : "text_completion");
  json choice = {{"index", 0}, {"finish_reason", finish_reason(g)}, {"logprobs", nullptr}};
  if (chat)
    choice["message"] = {{"role", "assistant"}, {"content", g.text}};
  else
    choice["text"] = g.text;
  j["choices"] = json::array({choice});
  j["usage"] = usage_json(prompt_tokens, g.tokens.size());
  return j;
}

json chunk_json(const ApiRequest& r, const ResponseMeta& m, std::string_view text, bool first,
                const std::string& finish) {
  const bool chat = r.endpoint == Endpoint::chat;
  json j = head(m, chat ? "chat.completion.chunk" : "text_completion");
  json choice = {{"index", 0}, {"finish_reason", finish.empty() ? json(nullptr) : json(finish)},
                 {"logprobs", nullptr}};
  if (chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || first) delta["content"] = std::string(text);
    choice["delta"] = delta;
  } else {
    choice["text"] = std::string(text);
  }
  j["choices"] = json::array({choice});
  return j;
}

json usage_chunk_json(const ApiRequest& r, const ResponseMeta& m, size_t prompt_tokens, size_t completion_tokens) {
  json j = head(m, r.endpoint == Endpoint::chat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = json::array();
  j["usage"] = usage_json(prompt_tokens, completion_tokens);
  return j;
}

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string sse_event(const json& j) {
  return "data: " + dump(j) + "\n\n";
}

}  // namespace redwood::server
