#include "src/model/chat_template.h"

#include "src/util/error.h"

namespace redwood {

namespace {
// The default system prompt a ChatML template inserts when none is given,
// e.g. SmolLM2's "<|im_start|>system\nYou are a helpful AI assistant ...<|im_end|>".
std::string chatml_default_system(const std::string& t) {
  const std::string open = "<|im_start|>system\n";
  auto p = t.find(open);
  if (p == std::string::npos) return "";
  p += open.size();
  auto e = t.find("<|im_end|>", p);
  if (e == std::string::npos) return "";
  std::string s = t.substr(p, e - p);
  if (s.find("{{") != std::string::npos || s.find("{%") != std::string::npos) return "";
  return s;
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
  throw Error("unsupported chat template family (supported: ChatML, Llama-2 [INST], Llama-3 headers)");
}

}  // namespace redwood
