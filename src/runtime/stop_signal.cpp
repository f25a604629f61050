#include "src/runtime/stop_signal.h"

#include <signal.h>

#include <atomic>

#include "src/util/temp_files.h"

namespace redwood::runtime {

namespace {

std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void on_stop_signal(int sig) {
  g_signal.store(sig);
  remove_temp_files_on(sig);  // a second one kills at once, leaving no temp file
}

extern "C" void on_interrupt_signal(int sig) {
  g_signal.store(sig);
}

}  // namespace

void install_interrupt_signals() {
  install_stop_signals();
  struct sigaction old {};
  if (sigaction(SIGINT, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) return;
  struct sigaction sa {};
  sa.sa_handler = on_interrupt_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a read waiting for the next line returns EINTR
  sigaction(SIGINT, &sa, nullptr);
}

void clear_stop_signal() {
  g_signal.store(0);
}

void install_stop_signals() {
  // The first SIGINT/SIGTERM/SIGHUP (a closed terminal or SSH session)
  // finishes cleanly (the line in flight is abandoned, everything written
  // stays); a second one kills at once.
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;  // nohup, a background job
    sigaction(sig, &sa, nullptr);
  }
}

int stop_signal() {
  return g_signal.load();
}

const char* stop_signal_name() {
  switch (g_signal.load()) {
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    default:
      return "SIGINT";
  }
}

}  // namespace redwood::runtime
