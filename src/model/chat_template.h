// Chat formatting from the model's own template metadata. Redwood does not run
// Jinja: it recognises the template families in use (ChatML, Llama-2 [INST],
// Llama-3 headers) and formats messages the way those templates do.
#pragma once
#include <string>
#include <vector>

namespace redwood {

struct ChatMessage {
  std::string role;  // system | user | assistant
  std::string content;
};

// Returns the prompt text (special tokens as text, to be tokenized with
// parse_special) ending with the assistant turn opener. Throws redwood::Error
// if the template is empty or of an unrecognised family.
std::string apply_chat_template(const std::string& tmpl, const std::vector<ChatMessage>& msgs);

}  // namespace redwood
