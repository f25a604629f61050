// The job's prompt file: JSONL, one object per line with an "id" (string or
// integer, unique) and either "prompt" (text) or "messages" (a chat:
// [{"role": "system"|"user"|"assistant", "content": "..."}], formatted with the
// model's chat template). Other fields are ignored. Blank lines are skipped.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "src/model/chat_template.h"

namespace redwood::jobs {

struct PromptItem {
  nlohmann::json id;                  // as written in the file (echoed in the output)
  std::string key;                    // id.dump(): the identity used for resume
  std::string prompt;                 // when given as text
  std::vector<ChatMessage> messages;  // when given as a chat
  int line = 0;
};

// Parses one line; throws redwood::Error "what is wrong" (no file/line prefix).
PromptItem parse_prompt_line(std::string_view line);

struct PromptFile {
  std::vector<PromptItem> items;
  std::vector<std::string> bad;  // "file:line: message" for each skipped line
};

// Reads the whole file. A bad line (not JSON, missing/duplicate id, neither or
// both of prompt/messages, wrong types) is an error "file:line: message" plus
// fail_hint (batch's says how to skip), or, with skip_bad, recorded in `bad`
// and skipped.
PromptFile read_prompts(const std::string& path, bool skip_bad,
                        const char* fail_hint = " (set input.on_bad_line = \"skip\" to skip bad lines)");

// 16 hex digits (FNV-1a 64) over what a prompt asks: its text or its messages
// (roles and contents), and whether a text prompt is wrapped in the chat
// template. Stored with each result line ("prompt_hash"), so a resumed job
// notices a prompt edited under the same id.
std::string prompt_hash(const PromptItem& it, bool chat);

}  // namespace redwood::jobs
