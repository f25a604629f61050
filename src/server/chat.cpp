#include "src/server/chat.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

namespace redwood::server {

namespace {
// Lines from a file descriptor, waiting in short polls so that a Ctrl-C at
// the prompt is seen whenever it comes (a blocking read could miss one that
// arrives just before it starts).
class LineReader {
 public:
  explicit LineReader(int fd) : fd_(fd) {}
  enum Result { kLine, kEnd, kInterrupted };
  Result next(std::string* line, const std::function<bool()>& interrupted) {
    for (;;) {
      if (const size_t nl = buf_.find('\n'); nl != std::string::npos || (eof_ && !buf_.empty()) ||
                                              buf_.size() >= kMaxLine) {
        const size_t n = nl != std::string::npos ? nl : buf_.size();
        line->assign(buf_, 0, n);
        buf_.erase(0, nl != std::string::npos ? n + 1 : n);
        if (!line->empty() && line->back() == '\r') line->pop_back();
        return kLine;
      }
      if (eof_) return kEnd;
      if (interrupted()) return kInterrupted;
      pollfd p{fd_, POLLIN, 0};
      const int r = ::poll(&p, 1, 100);
      if (r < 0 && errno != EINTR) eof_ = true;
      if (r <= 0) continue;
      char tmp[4096];
      const ssize_t n = ::read(fd_, tmp, sizeof tmp);
      if (n > 0)
        buf_.append(tmp, static_cast<size_t>(n));
      else if (n == 0 || errno != EINTR)
        eof_ = true;
    }
  }

 private:
  static constexpr size_t kMaxLine = 1 << 20;
  int fd_;
  std::string buf_;
  bool eof_ = false;
};
}  // namespace

void run_chat(runtime::Session& session, const ChatOptions& o, int in, std::FILE* out,
              const std::function<bool()>& interrupted, const std::function<bool()>& resume) {
  std::vector<ChatMessage> history;
  auto reset = [&] {
    history.clear();
    if (!o.system.empty()) history.push_back({"system", o.system});
  };
  reset();
  LineReader reader(in);
  for (;;) {
    std::fputs("> ", out);
    std::fflush(out);
    std::string line;
    const LineReader::Result got = reader.next(&line, interrupted);
    if (got == LineReader::kEnd) break;
    if (got == LineReader::kInterrupted) {
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
