// Not built with the tests: tests/thread_safety_test.sh compiles it with
// clang's -Wthread-safety -Werror=thread-safety (as scripts/test's clang pass
// compiles the server), once as it is, which must pass, and once per
// HPO_VIOLATION_* below, each of which must fail with its own finding. So a
// header change that turned the annotations off (a macro that expands to
// nothing under clang too, an unannotated Mutex) fails the test instead of
// silently passing every check.
#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace {

class Counter {
 public:
  void Add() {
    hpo::MutexLock lock(mu_);
    AddLocked();
    cv_.NotifyAll();
  }

  int Read() {
#ifdef HPO_VIOLATION_GUARDED
    return n_;  // without mu_
#else
    hpo::MutexLock lock(mu_);
    return n_;
#endif
  }

  void AddTwice() {
#ifdef HPO_VIOLATION_REQUIRES
    AddLocked();  // without mu_
#else
    hpo::MutexLock lock(mu_);
    AddLocked();
#endif
    Add();
  }

  void WaitForOne() {
#ifdef HPO_VIOLATION_CONDVAR
    cv_.Wait(mu_);  // without mu_
#else
    hpo::MutexLock lock(mu_);
    while (n_ == 0) cv_.Wait(mu_);
#endif
  }

  bool AddIfFree() {
    if (!mu_.TryLock()) return false;
#ifdef HPO_VIOLATION_LEAK
    if (n_ > 10) return false;  // returns with mu_ held
#endif
    AddLocked();
    mu_.Unlock();
    return true;
  }

  int ReadThrough() {
    hpo::LockedPtr<int> locked(mu_);
    mu_.AssertHeld();
    locked.Reset(&n_);
    return *locked;
  }

 private:
  void AddLocked() HPO_REQUIRES(mu_) { ++n_; }

  hpo::Mutex mu_;
  hpo::CondVar cv_;
  int n_ HPO_GUARDED_BY(mu_) = 0;
};

}  // namespace

int main() {
  Counter c;
  c.Add();
  c.AddTwice();
  c.WaitForOne();
  return c.AddIfFree() && c.Read() + c.ReadThrough() > 0 ? 0 : 1;
}
