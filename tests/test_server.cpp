// src/server without a socket: the OpenAI request checks and response shapes
// (api.h), and the scheduler (engine.h) over a tiny synthetic model
// (tests/util/tiny_gguf.h): shared passes give each request its solo output,
// stop strings, cancellation, the queue bound and the metrics.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "src/runtime/session.h"
#include "src/server/api.h"
#include "src/server/engine.h"
#include "tests/util/tiny_gguf.h"

namespace redwood::server {
namespace {

using nlohmann::json;

const char* kModel = "m";

ApiError api_error(const std::string& body, Endpoint e = Endpoint::chat) {
  try {
    (void)parse_request(body, e, kModel);
  } catch (const ApiError& err) {
    return err;
  }
  ADD_FAILURE() << "no error for " << body;
  return ApiError(0, "");
}

ApiRequest chat_request(const std::string& fields) {
  return parse_request(R"({"messages": [{"role": "user", "content": "hi"}])" + fields + "}", Endpoint::chat, kModel);
}

TEST(ApiRequest, ChatFieldsParse) {
  const ApiRequest r = chat_request(
      R"(, "model": "m", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": 40, "seed": 3,
         "stop": ["a", "b"], "stream": true, "stream_options": {"include_usage": true}, "n": 1, "user": "u",
         "logprobs": false, "tools": null, "frequency_penalty": 0)");
  ASSERT_EQ(r.prompt.messages.size(), 1u);
  EXPECT_EQ(r.prompt.messages[0].role, "user");
  EXPECT_EQ(r.prompt.messages[0].content, "hi");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_FLOAT_EQ(*r.temperature, 0.5f);
  EXPECT_FLOAT_EQ(*r.top_p, 0.9f);
  EXPECT_EQ(r.top_k, 40);
  EXPECT_EQ(r.seed, 3u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  // max_completion_tokens is max_tokens; "developer" is a system message; text parts join.
  const ApiRequest d = parse_request(
      R"({"messages": [{"role": "developer", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
          {"role": "user", "content": "q"}], "max_completion_tokens": 3})",
      Endpoint::chat, kModel);
  EXPECT_EQ(d.prompt.messages[0].role, "system");
  EXPECT_EQ(d.prompt.messages[0].content, "ab");
  EXPECT_EQ(d.max_tokens, 3);
  EXPECT_FALSE(d.temperature.has_value());
}

TEST(ApiRequest, CompletionPromptForms) {
  auto prompt = [](const std::string& p) {
    return parse_request(R"({"prompt": )" + p + "}", Endpoint::completion, kModel);
  };
  EXPECT_EQ(prompt(R"("abc")").prompt.text, "abc");
  EXPECT_EQ(prompt(R"(["abc"])").prompt.text, "abc");
  EXPECT_EQ(prompt("[1, 2, 3]").prompt.tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(prompt("[[4, 5]]").prompt.tokens, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(api_error(R"({"prompt": ["a", "b"]})", Endpoint::completion).param, "prompt");
  EXPECT_EQ(api_error(R"({"prompt": []})", Endpoint::completion).param, "prompt");
  EXPECT_EQ(api_error(R"({"prompt": [-1]})", Endpoint::completion).param, "prompt");
  // Each endpoint's own fields only.
  EXPECT_EQ(api_error(R"({"prompt": "x", "messages": []})", Endpoint::completion).param, "messages");
  EXPECT_EQ(api_error(R"({"messages": [{"role": "user", "content": "x"}], "echo": false})").param, "echo");
}

TEST(ApiRequest, RefusalsNameTheFieldInOpenAIsShape) {
  const ApiError unknown = api_error(R"({"messages": [{"role": "user", "content": "x"}], "frobnicate": 1})");
  EXPECT_EQ(unknown.status, 400);
  EXPECT_EQ(error_json(unknown),
            json::parse(R"j({"error": {"message": "frobnicate: unknown field (this server refuses fields it does not know)",
                           "type": "invalid_request_error", "param": "frobnicate", "code": null}})j"));
  const ApiError n = api_error(R"({"messages": [{"role": "user", "content": "x"}], "n": 2})");
  EXPECT_EQ(n.status, 400);
  EXPECT_EQ(n.param, "n");
  EXPECT_STREQ(n.what(), "n: 2 is not supported by this server");
  for (const char* field : {R"("tools": [])", R"("logprobs": true)", R"("response_format": {"type": "json_object"})",
                            R"("presence_penalty": 0.5)", R"("logit_bias": {"1": 2})"}) {
    const ApiError e = api_error(std::string(R"({"messages": [{"role": "user", "content": "x"}], )") + field + "}");
    EXPECT_EQ(e.status, 400) << field;
    EXPECT_NE(std::string(e.what()).find("is not supported"), std::string::npos) << field << ": " << e.what();
  }
  const ApiError model = api_error(R"({"messages": [{"role": "user", "content": "x"}], "model": "gpt-4"})");
  EXPECT_EQ(model.status, 404);
  EXPECT_EQ(model.code, "model_not_found");
  EXPECT_EQ(model.param, "model");
  EXPECT_EQ(api_error("{").status, 400);
  EXPECT_STREQ(api_error("{").what(), "the request body is not valid JSON");
  EXPECT_EQ(api_error("[1]").param, "");
  EXPECT_EQ(api_error("{}").param, "messages");
  EXPECT_EQ(api_error("{}", Endpoint::completion).param, "prompt");
}

TEST(ApiRequest, BoundsAndTypes) {
  const std::string m = R"({"messages": [{"role": "user", "content": "x"}], )";
  const std::pair<const char*, const char*> bad[] = {
      {R"("max_tokens": 0)", "max_tokens"},     {R"("max_tokens": 1.5)", "max_tokens"},
      {R"("temperature": 2.5)", "temperature"}, {R"("temperature": "hot")", "temperature"},
      {R"("top_p": 0)", "top_p"},               {R"("top_k": -1)", "top_k"},
      {R"("seed": -1)", "seed"},                {R"("stop": ["a", "b", "c", "d", "e"])", "stop"},
      {R"("stop": "")", "stop"},                {R"("stop": 3)", "stop"},
      {R"("stream": 1)", "stream"},             {R"("stream_options": {"include_usage": true})", "stream_options"},
      {R"("stream": true, "stream_options": {"x": 1})", "stream_options.x"}};
  for (const auto& [field, param] : bad) {
    const ApiError e = api_error(m + field + "}");
    EXPECT_EQ(e.status, 400) << field;
    EXPECT_EQ(e.param, param) << field << ": " << e.what();
  }
  EXPECT_EQ(api_error(m + R"("stop": ")" + std::string(kMaxStopBytes + 1, 'a') + R"("})").param, "stop");
  EXPECT_EQ(api_error(R"({"messages": []})").param, "messages");
  EXPECT_EQ(api_error(R"({"messages": [{"role": "tool", "content": "x"}]})").param, "messages[0].role");
  EXPECT_EQ(api_error(R"({"messages": [{"role": "user"}]})").param, "messages[0].content");
  EXPECT_EQ(api_error(R"({"messages": [{"role": "user", "content": "x", "mood": 1}]})").param, "messages[0].mood");
  EXPECT_EQ(api_error(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})").param,
            "messages[0].content[0]");
  // null means absent.
  EXPECT_FALSE(chat_request(R"(, "max_tokens": null, "stop": null)").max_tokens.has_value());
}

TEST(ApiRequest, SamplingOverridesTheServersFieldByField) {
  SamplingParams server;
  server.temperature = 0.7f;
  server.top_p = 0.8f;
  server.top_k = 20;
  const SamplingParams s = request_sampling(chat_request(R"(, "top_k": 5)"), server, 42);
  EXPECT_FLOAT_EQ(s.temperature, 0.7f);
  EXPECT_FLOAT_EQ(s.top_p, 0.8f);
  EXPECT_EQ(s.top_k, 5);
  EXPECT_EQ(s.seed, 42u);
}

TEST(ApiResponse, ChunksAndCompletions) {
  const ApiRequest chat = chat_request("");
  const ResponseMeta meta{"chatcmpl-1", 123, "m"};
  const json first = chunk_json(chat, meta, "", true, "");
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"], json::parse(R"({"role": "assistant", "content": ""})"));
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  const json mid = chunk_json(chat, meta, "he", false, "");
  EXPECT_EQ(mid["choices"][0]["delta"], json::parse(R"({"content": "he"})"));
  const json last = chunk_json(chat, meta, "", false, "length");
  EXPECT_EQ(last["choices"][0]["delta"], json::object());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  const json usage = usage_chunk_json(chat, meta, 5, 2);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"], json::parse(R"({"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7})"));

  const ApiRequest text = parse_request(R"({"prompt": "x"})", Endpoint::completion, kModel);
  const json tc = chunk_json(text, {"cmpl-1", 1, "m"}, "ab", false, "");
  EXPECT_EQ(tc["object"], "text_completion");
  EXPECT_EQ(tc["choices"][0]["text"], "ab");

  spec::Generation g;
  g.text = "hello";
  g.tokens = {1, 2, 3};
  g.finish = "stop";
  const json c = completion_json(chat, meta, g, 4);
  EXPECT_EQ(c["object"], "chat.completion");
  EXPECT_EQ(c["choices"][0]["message"], json::parse(R"({"role": "assistant", "content": "hello"})"));
  EXPECT_EQ(c["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(c["usage"]["total_tokens"], 7);
  EXPECT_EQ(completion_json(text, meta, g, 4)["choices"][0]["text"], "hello");
}

TEST(ApiResponse, SseEventsNeverFailOnBadUtf8) {
  const ApiRequest chat = chat_request("");
  const std::string e = sse_event(chunk_json(chat, {"x", 1, "m"}, std::string("a\xff" "b"), false, ""));
  EXPECT_EQ(e.rfind("data: {", 0), 0u);
  EXPECT_EQ(e.substr(e.size() - 2), "\n\n");
  EXPECT_NE(e.find("a\xEF\xBF\xBD" "b"), std::string::npos) << e;  // U+FFFD
}

// The scheduler over a tiny model.
std::string tiny_model() {
  const std::string path = ::testing::TempDir() + "server_tiny.gguf";
  testutil::write_tiny_llama(path, testutil::TinyShape{});
  return path;
}

std::unique_ptr<runtime::Session> loaded_session(int sequences) {
  runtime::SessionConfig c;
  c.run.model = tiny_model();
  c.run.threads = 1;
  auto s = std::make_unique<runtime::Session>(c);
  s->set_sequences(sequences);
  s->load(128, sequences > 1 ? s->config().pass_tokens : 64, nullptr);
  return s;
}

std::shared_ptr<Job> job_for(const runtime::Session& s, std::vector<int32_t> prompt, int max_tokens,
                             std::vector<std::string> stop = {}) {
  spec::GenerationRequest g = s.request({}, max_tokens, std::move(stop));
  return std::make_shared<Job>(std::move(prompt), g);
}

std::string streamed(Job& job) {
  std::string text;  // wait_text appends
  while (!job.wait_text(&text, std::chrono::milliseconds(50))) {
  }
  return text;
}

const std::vector<std::vector<int32_t>> kPrompts = {{1, 5, 9}, {2, 7}, {3, 3, 3, 8}, {4}};

TEST(Engine, SharedPassesGiveEachRequestItsSoloOutput) {
  std::vector<spec::Generation> solo;
  {
    auto s = loaded_session(1);
    Engine e(*s, {});
    for (const auto& p : kPrompts) {
      auto j = job_for(*s, p, 12);
      ASSERT_TRUE(e.submit(j));
      j->wait_done();
      solo.push_back(j->result());
    }
  }
  auto s = loaded_session(2);
  Engine e(*s, {.max_queue = 8});
  std::vector<std::shared_ptr<Job>> jobs;
  for (const auto& p : kPrompts) {
    jobs.push_back(job_for(*s, p, 12));
    ASSERT_TRUE(e.submit(jobs.back()));
  }
  for (size_t i = 0; i < jobs.size(); ++i) {
    const std::string text = streamed(*jobs[i]);
    EXPECT_EQ(jobs[i]->error(), "");
    EXPECT_EQ(jobs[i]->result().tokens, solo[i].tokens) << "request " << i;
    EXPECT_EQ(text, solo[i].text) << "request " << i;
    EXPECT_EQ(jobs[i]->result().finish, solo[i].finish);
  }
  const EngineMetrics m = e.metrics();
  EXPECT_EQ(m.submitted, 4);
  EXPECT_EQ(m.finished, 4);
  EXPECT_EQ(m.in_flight, 0);
  EXPECT_EQ(m.queued, 0);
  EXPECT_GT(m.passes, 0);
  EXPECT_GT(m.pass_seconds, 0);
  EXPECT_EQ(m.draft_seconds, 0);    // no draft
  EXPECT_EQ(m.io_wait_seconds, 0);  // every layer resident
}

// With a draft the metrics split the time: the draft's work apart from the target's passes.
TEST(Engine, DraftTimeIsCountedApart) {
  for (const int sequences : {1, 2}) {
    runtime::SessionConfig c;
    c.run.model = tiny_model();
    c.run.threads = 1;
    const std::string draft = ::testing::TempDir() + "server_tiny_draft.gguf";
    testutil::TinyShape ds;
    ds.layers = 1;
    ds.seed = 2;
    testutil::write_tiny_llama(draft, ds);
    c.draft = draft;
    c.tree.tree = "chain:3";
    runtime::Session s(c);
    s.set_sequences(sequences);
    s.load(128, sequences > 1 ? s.config().pass_tokens : 64, nullptr);
    Engine e(s, {});
    auto j = job_for(s, kPrompts[0], 12);
    ASSERT_TRUE(e.submit(j));
    j->wait_done();
    EXPECT_EQ(j->error(), "");
    const EngineMetrics m = e.metrics();
    EXPECT_GT(m.draft_seconds, 0) << "sequences " << sequences;
    EXPECT_GT(m.pass_seconds, 0) << "sequences " << sequences;
    EXPECT_EQ(m.io_wait_seconds, 0);
  }
}

TEST(Engine, StopStringsEndTheTextBeforeThem) {
  for (const int sequences : {1, 2}) {
    auto s = loaded_session(sequences);
    Engine e(*s, {});
    auto free_run = job_for(*s, kPrompts[0], 16);
    ASSERT_TRUE(e.submit(free_run));
    free_run->wait_done();
    const std::string full = free_run->result().text;
    ASSERT_GE(full.size(), 4u) << "the tiny model's text is too short to cut";
    const std::string stop = full.substr(full.size() / 2, 2);
    const std::string want = full.substr(0, full.find(stop));
    auto cut = job_for(*s, kPrompts[0], 16, {stop});
    ASSERT_TRUE(e.submit(cut));
    EXPECT_EQ(streamed(*cut), want) << "sequences " << sequences << ", stop '" << stop << "'";
    EXPECT_EQ(cut->result().finish, "stop");
    EXPECT_EQ(cut->result().text, want);
  }
}

TEST(Engine, CancelledAndStoppedJobsEnd) {
  auto s = loaded_session(2);
  Engine e(*s, {.max_queue = 1});
  EXPECT_EQ(e.capacity(), 3);
  auto j = job_for(*s, kPrompts[1], 100);
  j->cancel();
  ASSERT_TRUE(e.submit(j));
  j->wait_done();
  EXPECT_EQ(j->result().finish, "cancelled");
  std::vector<std::shared_ptr<Job>> running;
  for (int i = 0; i < 3; ++i) running.push_back(job_for(*s, kPrompts[2], 100));
  for (auto& r : running) (void)e.submit(r);
  e.stop();  // every job ends: cancelled, or done before the stop
  for (auto& r : running) {
    r->wait_done();
    EXPECT_TRUE(r->result().finish == "cancelled" || r->result().finish == "length") << r->result().finish;
  }
  EXPECT_FALSE(e.submit(job_for(*s, kPrompts[0], 4)));  // stopped: refused
  const EngineMetrics m = e.metrics();
  EXPECT_EQ(m.in_flight, 0);
  EXPECT_EQ(m.queued, 0);
  EXPECT_GE(m.cancelled, 1);
}

}  // namespace
}  // namespace redwood::server
