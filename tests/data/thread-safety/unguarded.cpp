// The negative control of tools/check-thread-safety: a guarded field written
// without its mutex, and a REQUIRES function called without it. Never built.
#include "src/util/thread_annotations.h"

namespace {

using redwood::MutexLock;

class Counter {
 public:
  void add() {
    n_ += 1;  // no MutexLock: an error
  }
  void add_locked() {
    MutexLock lock(mu_);
    bump();
  }
  void add_unlocked() { bump(); }  // an error: bump() REQUIRES(mu_)

 private:
  void bump() REQUIRES(mu_) { n_ += 1; }
  redwood::Mutex mu_;
  int n_ GUARDED_BY(mu_) = 0;
};

}  // namespace

int main() {
  Counter c;
  c.add();
  c.add_locked();
  c.add_unlocked();
}
