// Progress of a batch job on stderr: on a terminal a one-line bar redrawn in
// place (at most 10 times a second); in logs a plain line every N seconds.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

namespace redwood::jobs {

struct ProgressState {
  int64_t done = 0, total = 0;  // prompts (done includes those finished by earlier runs)
  int64_t done_this_run = 0;
  int64_t tokens = 0;           // generated this run
  double seconds = 0;           // this run's wall time so far
  double accepted_per_pass = 0; // 0: autoregressive
  // Shared passes ([batch] sequences > 1): prompts in flight now, and the
  // tokens they have generated so far (counted in tok/s before their lines end).
  int64_t in_flight = 0, tokens_in_flight = 0;
};

// The text of one progress report (no newline), e.g.
// "[########----------] 12/40 prompts | 35.2 tok/s | 2.31 tok/pass | ETA 1m12s"; with prompts in flight
// "12/40 prompts | 8 in flight | 35.2 tok/s | ...".
std::string progress_text(const ProgressState& s, bool bar);

class Progress {
 public:
  // tty: redraw in place; otherwise a line every `every` seconds.
  Progress(std::FILE* out, bool tty, double every);
  void update(const ProgressState& s, bool force = false);
  void finish(const ProgressState& s);  // the final state, then a newline on a terminal

 private:
  std::FILE* out_;
  bool tty_;
  double every_;
  double last_ = -1e300;
  bool drawn_ = false;
};

}  // namespace redwood::jobs
