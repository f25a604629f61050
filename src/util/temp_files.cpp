#include "src/util/temp_files.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

namespace redwood {

namespace {

// Registered paths, read by the handler: fixed buffers (nothing to allocate
// or free, so a handler never reads freed memory), each published by its
// state (kFree -> kWriting -> kReady) and a generation that changes with
// every registration. The handler copies a ready path, then checks that the
// slot is still ready in the same generation (no other thread rewrote it
// meanwhile) before it unlinks the copy; a slot reused at that very moment
// is skipped (that one file may stay).
constexpr int kSlots = 64;
constexpr size_t kMaxPath = 4096;
enum : int { kFree, kWriting, kReady };
std::atomic<int> g_state[kSlots];
std::atomic<unsigned> g_generation[kSlots];
char g_path[kSlots][kMaxPath];
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<unsigned>::is_always_lock_free);

extern "C" void on_fatal_signal(int sig) {
  const int saved = errno;
  char path[kMaxPath];
  for (int i = 0; i < kSlots; ++i) {
    if (g_state[i].load() != kReady) continue;
    const unsigned gen = g_generation[i].load();
    size_t n = 0;
    for (; n + 1 < kMaxPath && g_path[i][n] != '\0'; ++n) path[n] = g_path[i][n];
    path[n] = '\0';
    if (g_state[i].load() == kReady && g_generation[i].load() == gen) ::unlink(path);
  }
  errno = saved;
  // Die of the signal, as without this handler.
  struct sigaction sa {};
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  sigaction(sig, &sa, nullptr);
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, sig);
  sigprocmask(SIG_UNBLOCK, &s, nullptr);
  raise(sig);
}

}  // namespace

TempFileGuard::TempFileGuard(const std::string& path) : slot_(-1) {
  if (path.size() >= kMaxPath) return;  // not registered: the writer's own error paths still remove it
  for (int i = 0; i < kSlots; ++i) {
    int expected = kFree;
    if (g_state[i].compare_exchange_strong(expected, kWriting)) {
      std::memcpy(g_path[i], path.c_str(), path.size() + 1);
      g_generation[i].fetch_add(1);
      g_state[i].store(kReady);
      slot_ = i;
      return;
    }
  }
}

TempFileGuard::~TempFileGuard() {
  if (slot_ >= 0) g_state[slot_].store(kFree);
}

void remove_temp_files_on(int sig) {
  struct sigaction old {};
  if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) return;  // nohup, a background job: stays ignored
  struct sigaction sa {};
  sa.sa_handler = on_fatal_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  sigaction(sig, &sa, nullptr);
}

void remove_temp_files_on_signal() {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) remove_temp_files_on(sig);
  // A file-size limit (ulimit -f) hit mid-write: write() then fails with EFBIG
  // and the writer's error path removes its temp file and says so in one
  // line, instead of SIGXFSZ killing the process with the file left behind.
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  sigaction(SIGXFSZ, &ign, nullptr);
}

int registered_temp_files() {
  int n = 0;
  for (const auto& st : g_state) n += st.load() == kReady;
  return n;
}

}  // namespace redwood
