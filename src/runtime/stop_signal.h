// SIGINT/SIGTERM/SIGHUP for long runs (generate, batch, bench run): the first signal
// asks the run to stop (polled through stop_signal, e.g. as a generation's
// cancelled()), a second one kills at once (removing any temp output file:
// src/util/temp_files.h).
#pragma once

namespace redwood::runtime {

void install_stop_signals();
// For interactive commands (chat): every SIGINT sets the flag (Ctrl-C stops
// a reply, not the program; clear_stop_signal() takes it back) and interrupts
// a blocking read (EINTR); SIGTERM and SIGHUP as install_stop_signals().
void install_interrupt_signals();
void clear_stop_signal();
int stop_signal();               // 0 while none arrived, else the signal number
const char* stop_signal_name();  // "SIGINT", "SIGTERM" or "SIGHUP" (SIGINT while none arrived)

}  // namespace redwood::runtime
