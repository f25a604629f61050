#include "src/model/chat_template.h"

#include <string_view>

#include "src/util/error.h"

namespace redwood {

namespace {
// The default system prompt a ChatML template inserts when the conversation
// has none: the first "<|im_start|>system" + newline (as is, or the two
// characters of a Jinja '\n' escape) whose text up to "<|im_end|>" is one
// literal: no quote, brace or Jinja expression (the same opener in front of
// messages[0]'s content, or alone before it, is not a default). SmolLM2's
// "You are a helpful AI assistant named SmolLM, ...", Qwen2.5's "You are Qwen,
// created by Alibaba Cloud. You are a helpful assistant." (its template's
// else branch); Qwen3's template has none.
std::string chatml_default_system(const std::string& t) {
  const std::string open = "<|im_start|>system";
  for (size_t p = t.find(open); p != std::string::npos; p = t.find(open, p + 1)) {
    size_t b = p + open.size();
    if (t.compare(b, 1, "\n") == 0)
      b += 1;
    else if (t.compare(b, 2, "\\n") == 0)
      b += 2;
    else
      continue;
    const size_t e = t.find("<|im_end|>", b);
    if (e == std::string::npos) return "";
    const std::string_view lit(t.data() + b, e - b);
    if (lit.empty() || lit.find_first_of("'\"{}") != std::string_view::npos) continue;
    std::string s;  // Jinja's '\n' escapes as newlines
    for (size_t i = 0; i < lit.size(); ++i) {
      const bool esc = lit[i] == '\\' && i + 1 < lit.size() && lit[i + 1] == 'n';
      s += esc ? '\n' : lit[i];
      i += esc ? 1 : 0;
    }
    return s;
  }
  return "";
}
}  // namespace

bool has_chatml_tokens(const std::vector<std::string>& tokens) {
  bool start = false, end = false;
  for (const std::string& t : tokens) {
    start = start || t == "<|im_start|>";
    end = end || t == "<|im_end|>";
  }
  return start && end;
}

std::string chat_template_of(const std::string& tmpl, const std::vector<std::string>& tokens, bool* fallback) {
  if (fallback) *fallback = false;
  if (!tmpl.empty() || !has_chatml_tokens(tokens)) return tmpl;
  if (fallback) *fallback = true;
  return kChatmlTemplate;
}

namespace {
// Mistral NeMo's template (v3-tekken), as it renders: "<s>", then each user
// turn "[INST]content[/INST]" and each reply "content</s>"; a leading system
// message goes before the content of the conversation's last message when
// that is a user turn (and nowhere otherwise); roles after it alternate
// user / assistant, starting with the user.
std::string mistral_v3_tekken(const std::vector<ChatMessage>& msgs) {
  size_t first = 0;
  std::string sys;
  if (!msgs.empty() && msgs[0].role == "system") sys = msgs[0].content, first = 1;
  std::string out = "<s>";
  for (size_t i = first; i < msgs.size(); ++i) {
    const ChatMessage& m = msgs[i];
    if (m.role != ((i - first) % 2 == 0 ? "user" : "assistant"))
      throw Error("Mistral's chat template: after an optional system message, roles must alternate user / "
                  "assistant, starting with the user (message " + std::to_string(i + 1) + " is '" + m.role + "')");
    if (m.role == "assistant")
      out += m.content + "</s>";
    else if (i + 1 == msgs.size() && first == 1)
      out += "[INST]" + sys + "\n\n" + m.content + "[/INST]";
    else
      out += "[INST]" + m.content + "[/INST]";
  }
  return out;
}
}  // namespace

std::string apply_chat_template(const std::string& t, const std::vector<ChatMessage>& msgs) {
  if (t.empty()) throw Error("the model has no chat template (tokenizer.chat_template)");
  for (const auto& m : msgs)
    if (m.role != "system" && m.role != "user" && m.role != "assistant")
      throw Error("chat message role must be system, user or assistant, not '" + m.role + "'");
  std::string out;
  if (t.find("<|im_start|>") != std::string::npos) {
    const std::string sys = chatml_default_system(t);
    if (!sys.empty() && (msgs.empty() || msgs[0].role != "system"))
      out += "<|im_start|>system\n" + sys + "<|im_end|>\n";
    for (const auto& m : msgs) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    return out + "<|im_start|>assistant\n";
  }
  if (t.find("<|start_header_id|>") != std::string::npos) {
    out = "<|begin_of_text|>";
    for (const auto& m : msgs)
      out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
    return out + "<|start_header_id|>assistant<|end_header_id|>\n\n";
  }
  if (t.find("[INST]") != std::string::npos && t.find("[AVAILABLE_TOOLS]") != std::string::npos &&
      t.find("\"[INST]\"") != std::string::npos)
    return mistral_v3_tekken(msgs);
  // Mistral's other formats (v1 and v3 spaced, v7 with [SYSTEM_PROMPT]) are not
  // Llama 2's: refused rather than formatted as it.
  if (t.find("[SYSTEM_PROMPT]") != std::string::npos || t.find("[AVAILABLE_TOOLS]") != std::string::npos ||
      t.find("' [INST] ' + system_message") != std::string::npos)
    throw Error("unsupported chat template: one of Mistral's v1/v3/v7 formats (supported: ChatML, Llama-2 [INST], "
                "Llama-3 headers, Mistral NeMo's v3-tekken); give the prompt already formatted, without --chat");
  if (t.find("[INST]") != std::string::npos) {
    std::string sys;
    size_t i = 0;
    if (!msgs.empty() && msgs[0].role == "system") sys = "<<SYS>>\n" + msgs[0].content + "\n<</SYS>>\n\n", i = 1;
    for (; i < msgs.size(); ++i) {
      if (msgs[i].role == "user") {
        out += "<s>[INST] " + sys + msgs[i].content + " [/INST]";
        sys.clear();
      } else {
        out += " " + msgs[i].content + " </s>";
      }
    }
    return out;
  }
  throw Error("unsupported chat template family (supported: ChatML, Llama-2 [INST], Llama-3 headers, Mistral NeMo's "
              "v3-tekken)");
}

}  // namespace redwood
