// Temp files a signal must not leave behind. Writers fill OUT.tmp.PID and
// rename it over OUT through one TempOutput (output_path.h), which removes it
// on every error and holds a TempFileGuard naming it to the signal handler
// that remove_temp_files_on_signal() installs: SIGINT, SIGTERM or SIGHUP
// arriving mid-write (Ctrl-C during a `redwood pack` of a 140 GB model)
// removes it before the process dies of that signal (its exit status is as
// without the handler).
#pragma once
#include <string>

namespace redwood {

// Registers `path` for removal on a fatal signal while the guard lives. It
// does not remove the file itself: the writer does that on errors, and the
// rename consumes it on success.
class TempFileGuard {
 public:
  explicit TempFileGuard(const std::string& path);
  ~TempFileGuard();
  TempFileGuard(const TempFileGuard&) = delete;
  TempFileGuard& operator=(const TempFileGuard&) = delete;

 private:
  int slot_;  // -1: not registered (every slot taken)
};

// Installs the handler for SIGINT, SIGTERM and SIGHUP: remove every registered
// temp file, then die of the signal. SIGXFSZ is ignored, so that a file-size
// limit is a write error (EFBIG), handled like a full disk. Called once at start-up (main); commands
// that stop cleanly on a first signal (runtime/stop_signal.h) replace it for
// SIGINT/SIGTERM and hand the second signal back to it.
void remove_temp_files_on_signal();

// The same handler for one signal (async-signal-safe: usable from another
// signal handler).
void remove_temp_files_on(int sig);

// How many temp files are registered now (tests).
int registered_temp_files();

}  // namespace redwood
