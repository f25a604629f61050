#include "src/server/chat.h"

#include <cerrno>
#include <cstdlib>
#include <vector>

namespace redwood::server {

namespace {
// One line without its newline; false at end of input. A read interrupted by a
// signal returns true with *interrupted set.
bool read_line(std::FILE* in, std::string* line, bool* interrupted) {
  char* buf = nullptr;
  size_t cap = 0;
  errno = 0;
  const ssize_t n = ::getline(&buf, &cap, in);
  *interrupted = n < 0 && errno == EINTR;
  if (n >= 0) line->assign(buf, static_cast<size_t>(n));
  std::free(buf);
  if (*interrupted) std::clearerr(in);
  while (!line->empty() && (line->back() == '\n' || line->back() == '\r')) line->pop_back();
  return n >= 0 || *interrupted;
}
}  // namespace

void run_chat(runtime::Session& session, const ChatOptions& o, std::FILE* in, std::FILE* out,
              const std::function<bool()>& interrupted, const std::function<bool()>& resume) {
  std::vector<ChatMessage> history;
  auto reset = [&] {
    history.clear();
    if (!o.system.empty()) history.push_back({"system", o.system});
  };
  reset();
  for (;;) {
    std::fputs("> ", out);
    std::fflush(out);
    std::string line;
    bool intr = false;
    if (!read_line(in, &line, &intr)) break;
    if (intr) {
      if (!resume()) break;
      std::fputs("\n(/exit to leave)\n", out);
      continue;
    }
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      reset();
      continue;
    }
    if (line.empty()) continue;
    history.push_back({"user", line});
    runtime::PromptText p;
    p.messages = history;
    p.name = "the conversation";
    std::vector<int32_t> tokens;
    try {
      tokens = session.prepare_prompt(p, {o.ctx, "--ctx", o.max_tokens, "--max-tokens", false});
    } catch (const runtime::PromptError& e) {
      history.pop_back();
      std::fprintf(out, "redwood: %s (/reset starts over)\n", e.what());
      continue;
    }
    const spec::Generation g = session.generate(
        session.request(tokens, o.max_tokens, {}),
        [out](std::string_view piece) {
          std::fwrite(piece.data(), 1, piece.size(), out);
          std::fflush(out);
        },
        interrupted);
    history.push_back({"assistant", g.text});
    if (g.finish == "cancelled") {
      std::fputs(" [stopped]\n", out);
      if (!resume()) break;
    } else {
      std::fputc('\n', out);
    }
  }
  std::fflush(out);
}

}  // namespace redwood::server
