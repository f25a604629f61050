#include "src/jobs/progress.h"

#include <cmath>

#include "src/util/clock.h"

namespace redwood::jobs {

namespace {

std::string duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const int64_t t = static_cast<int64_t>(std::llround(s));
  char b[64];
  if (t >= 3600)
    std::snprintf(b, sizeof b, "%lldh%02lldm", static_cast<long long>(t / 3600), static_cast<long long>(t / 60 % 60));
  else if (t >= 60)
    std::snprintf(b, sizeof b, "%lldm%02llds", static_cast<long long>(t / 60), static_cast<long long>(t % 60));
  else
    std::snprintf(b, sizeof b, "%llds", static_cast<long long>(t));
  return b;
}

}  // namespace

std::string progress_text(const ProgressState& s, bool bar) {
  std::string out;
  if (bar) {
    constexpr int kWidth = 24;
    const int fill = s.total > 0 ? static_cast<int>(kWidth * s.done / s.total) : kWidth;
    out.append("[").append(static_cast<size_t>(fill), '#').append(static_cast<size_t>(kWidth - fill), '-').append("] ");
  }
  char b[256];
  const double tps = s.seconds > 0 ? static_cast<double>(s.tokens + s.tokens_in_flight) / s.seconds : 0.0;
  std::snprintf(b, sizeof b, "%lld/%lld prompts", static_cast<long long>(s.done), static_cast<long long>(s.total));
  out += b;
  if (s.in_flight > 0) {
    std::snprintf(b, sizeof b, " | %lld in flight", static_cast<long long>(s.in_flight));
    out += b;
  }
  std::snprintf(b, sizeof b, " | %.1f tok/s", tps);
  out += b;
  if (s.accepted_per_pass > 0) {
    std::snprintf(b, sizeof b, " | %.2f tok/pass", s.accepted_per_pass);
    out += b;
  }
  const int64_t left = s.total - s.done;
  if (left <= 0)
    out.append(" | done in ").append(duration(s.seconds));
  else if (s.done_this_run > 0)
    out.append(" | ETA ").append(duration(s.seconds / static_cast<double>(s.done_this_run) * static_cast<double>(left)));
  else
    out += " | ETA ?";
  return out;
}

Progress::Progress(std::FILE* out, bool tty, double every) : out_(out), tty_(tty), every_(every) {}

void Progress::update(const ProgressState& s, bool force) {
  const double t = now_seconds();
  if (!force && t - last_ < (tty_ ? 0.1 : every_)) return;
  last_ = t;
  if (tty_) {
    std::fprintf(out_, "\r%s\033[K", progress_text(s, true).c_str());
    drawn_ = true;
  } else {
    std::fprintf(out_, "batch: %s\n", progress_text(s, false).c_str());
  }
  std::fflush(out_);
}

void Progress::finish(const ProgressState& s) {
  update(s, /*force=*/true);
  if (tty_ && drawn_) std::fputc('\n', out_);
  std::fflush(out_);
}

}  // namespace redwood::jobs
