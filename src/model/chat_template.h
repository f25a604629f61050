// Chat formatting from the model's own template metadata. Redwood does not run
// Jinja: it recognises the template families in use (ChatML, Llama-2 [INST],
// Llama-3 headers) and formats messages the way those templates do. A model
// with no template but ChatML's tokens is formatted as ChatML (chat_template_of).
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

// Plain ChatML (no default system message): every message as
// "<|im_start|>ROLE\nCONTENT<|im_end|>\n", then "<|im_start|>assistant\n".
inline constexpr const char* kChatmlTemplate =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

// Whether a vocabulary has ChatML's <|im_start|> and <|im_end|> tokens.
bool has_chatml_tokens(const std::vector<std::string>& tokens);

// The template a model's chats are formatted with: its own (tmpl), or, when it
// has none and its vocabulary has ChatML's tokens, kChatmlTemplate (*fallback
// set: callers say so once); else "" (apply_chat_template refuses it).
std::string chat_template_of(const std::string& tmpl, const std::vector<std::string>& tokens, bool* fallback);

}  // namespace redwood
