// Clang's thread-safety analysis (-Wthread-safety): which mutex guards which
// field, and which functions must hold it, written as attributes the compiler
// checks instead of comments ("under mu_"). Other compilers ignore them.
//
//   Mutex mu_;
//   CondVar cv_;
//   int next_ GUARDED_BY(mu_);
//   void fail() REQUIRES(mu_);
//   ...
//   MutexLock lock(mu_);                          // held for the scope
//   while (!ready()) cv_.wait(lock);              // a loop, not a predicate lambda:
//   lock.unlock(); work(); lock.lock();           // the analysis does not see into lambdas
//
// CI compiles offload/ with clang -Wthread-safety -Werror (CTest thread_safety).
#pragma once
#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define REDWOOD_TSA(x) __attribute__((x))
#else
#define REDWOOD_TSA(x)
#endif

#define CAPABILITY(x) REDWOOD_TSA(capability(x))
#define SCOPED_CAPABILITY REDWOOD_TSA(scoped_lockable)
#define GUARDED_BY(x) REDWOOD_TSA(guarded_by(x))
#define PT_GUARDED_BY(x) REDWOOD_TSA(pt_guarded_by(x))
#define REQUIRES(...) REDWOOD_TSA(requires_capability(__VA_ARGS__))
#define ACQUIRE(...) REDWOOD_TSA(acquire_capability(__VA_ARGS__))
#define RELEASE(...) REDWOOD_TSA(release_capability(__VA_ARGS__))
#define EXCLUDES(...) REDWOOD_TSA(locks_excluded(__VA_ARGS__))
#define NO_THREAD_SAFETY_ANALYSIS REDWOOD_TSA(no_thread_safety_analysis)

namespace redwood {

// A std::mutex the analysis knows as a capability.
class CAPABILITY("mutex") Mutex {
 public:
  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// Holds a Mutex from construction to destruction; unlock() and lock() let the
// holder work without it for a while (the analysis follows both).
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : lock_(mu.mu_) {}
  ~MutexLock() RELEASE() {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;
  void lock() ACQUIRE() { lock_.lock(); }
  void unlock() RELEASE() { lock_.unlock(); }

 private:
  friend class CondVar;
  std::unique_lock<std::mutex> lock_;
};

// A condition variable over a MutexLock: wait() releases the mutex while it
// blocks and holds it again on return (possibly spuriously: call it in a loop
// over the condition, which the analysis then checks with the mutex held).
class CondVar {
 public:
  void wait(MutexLock& lock) { cv_.wait(lock.lock_); }
  // As wait(), returning by `deadline` at the latest.
  template <class Clock, class Duration>
  void wait_until(MutexLock& lock, const std::chrono::time_point<Clock, Duration>& deadline) {
    cv_.wait_until(lock.lock_, deadline);
  }
  void notify_all() noexcept { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace redwood
