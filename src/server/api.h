// The OpenAI HTTP API's shapes, apart from any socket: a request body parsed
// and checked into what a Session runs (every field known, unsupported ones
// refused by name), and the JSON of responses, stream chunks and errors.
//
//   ApiRequest r = parse_request(body, Endpoint::chat, "SmolLM2-135M-Instruct");  // throws ApiError
//   ... run r.prompt with r.max_tokens, r.sampling, r.stop ...
//   reply(completion_json(r, meta, generation, prompt_tokens));
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "src/engine/sampler.h"
#include "src/runtime/session.h"
#include "src/speculative/generation.h"
#include "src/util/error.h"

namespace redwood::server {

// An answer other than 200, in OpenAI's error shape:
// {"error": {"message", "type", "param", "code"}} (param and code null when empty).
class ApiError : public Error {
 public:
  ApiError(int status_, const std::string& message, std::string param_ = {}, std::string code_ = {},
           std::string type_ = "invalid_request_error")
      : Error(message), status(status_), param(std::move(param_)), code(std::move(code_)), type(std::move(type_)) {}
  int status;
  std::string param, code, type;
};
nlohmann::json error_json(const ApiError& e);

enum class Endpoint { chat, completion };  // /v1/chat/completions, /v1/completions

// Bounds of a request (the server's limits; OpenAI's where it has one).
inline constexpr int kMaxStops = 4;
inline constexpr size_t kMaxStopBytes = 256;
inline constexpr size_t kMaxMessages = 4096;

struct ApiRequest {
  Endpoint endpoint = Endpoint::chat;
  runtime::PromptText prompt;       // messages (chat), text or token ids (completion)
  std::optional<int> max_tokens;    // max_tokens / max_completion_tokens; absent: the server's default
  std::optional<float> temperature, top_p;
  std::optional<int> top_k;
  std::optional<uint64_t> seed;     // absent: a fresh one per request (sampled requests only)
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;       // stream_options.include_usage: a last chunk with usage
};

// Parses a request body for `endpoint`. The model field, when present, must be
// `model_id` (404 model_not_found). Throws ApiError(400) naming the field for
// malformed JSON, a wrong type or range, an unsupported feature (n > 1, tools,
// logprobs, response_format, ...) and any field the API does not know.
ApiRequest parse_request(std::string_view body, Endpoint endpoint, const std::string& model_id);

// The sampling a request asks for: the server's, overridden field by field.
// REQUIRES: seed chosen (the caller draws one when r.seed is absent).
SamplingParams request_sampling(const ApiRequest& r, SamplingParams server, uint64_t seed);

// What every response of one request shares.
struct ResponseMeta {
  std::string id;       // "chatcmpl-..." / "cmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
};

// OpenAI's finish_reason for a generation's finish ("stop", "length"; "cancelled" as is).
std::string finish_reason(const spec::Generation& g);
nlohmann::json usage_json(size_t prompt_tokens, size_t completion_tokens);
// A whole (non-streamed) response: chat.completion or text_completion, with usage.
nlohmann::json completion_json(const ApiRequest& r, const ResponseMeta& m, const spec::Generation& g,
                               size_t prompt_tokens);
// One streamed chunk (chat.completion.chunk or text_completion): `text` as the
// delta; the first chat chunk carries the role, the last a finish_reason.
nlohmann::json chunk_json(const ApiRequest& r, const ResponseMeta& m, std::string_view text, bool first,
                          const std::string& finish);
// The last chunk of a stream with stream_options.include_usage: no choices, usage.
nlohmann::json usage_chunk_json(const ApiRequest& r, const ResponseMeta& m, size_t prompt_tokens,
                                size_t completion_tokens);
// "data: {json}\n\n" (invalid UTF-8 replaced, so a chunk never fails to encode).
std::string sse_event(const nlohmann::json& j);
// JSON text with invalid UTF-8 replaced.
std::string dump(const nlohmann::json& j);

}  // namespace redwood::server
