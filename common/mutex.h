// A mutex, its scoped lock and a condition variable that clang's
// thread-safety analysis can follow (common/thread_annotations.h):
// libstdc++'s std::mutex and std::lock_guard carry no attributes, so a
// member marked HPO_GUARDED_BY(a std::mutex) would warn on every access.
//
//   class Queue {
//     hpo::Mutex mu_;
//     hpo::CondVar cv_;
//     std::deque<int> items_ HPO_GUARDED_BY(mu_);
//    public:
//     void Push(int x) {
//       hpo::MutexLock lock(mu_);
//       items_.push_back(x);
//       cv_.NotifyOne();
//     }
//     int Pop() {
//       hpo::MutexLock lock(mu_);
//       while (items_.empty()) cv_.Wait(mu_);  // the condition in the caller, where the analysis
//       sees the lock
//       ...
//     }
//   };
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <utility>

#include "common/thread_annotations.h"

namespace hpo {

// std::mutex with the attributes: not recursive; Unlock by the thread that
// locked it.
class HPO_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() HPO_ACQUIRE() { mu_.lock(); }
  void Unlock() HPO_RELEASE() { mu_.unlock(); }
  // Takes the lock if no one holds it; true when it did.
  bool TryLock() HPO_TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis that the calling thread holds the lock, where it
  // cannot see it taken (a LockedPtr made just before); checks nothing.
  void AssertHeld() const HPO_ASSERT_CAPABILITY(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Tag for MutexLock: the caller already holds the mutex (a TryLock that
// succeeded); the MutexLock only releases it.
struct AdoptLock {
  explicit AdoptLock() = default;
};

// Holds `mu` from construction to the end of the scope.
class HPO_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) HPO_ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  MutexLock(Mutex& mu, AdoptLock) HPO_REQUIRES(mu) : mu_(mu) {}
  ~MutexLock() HPO_RELEASE() { mu_.Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

// A pointer to something guarded by a mutex, with the mutex held for the
// pointer's lifetime: what a class hands out to let a caller work on its
// guarded state (TrialView::Fresh). It can be moved (returned in a Result),
// which the analysis cannot follow for a scoped lock, so it is not one: the
// function that makes it calls mu.AssertHeld() right after, and the caller
// reaches the guarded state only through the pointer.
template <typename T>
class LockedPtr {
 public:
  // Takes `mu`; points at nothing until Reset.
  explicit LockedPtr(Mutex& mu) HPO_NO_THREAD_SAFETY_ANALYSIS : mu_(&mu) { mu_->Lock(); }
  LockedPtr(LockedPtr&& other) noexcept
      : mu_(std::exchange(other.mu_, nullptr)), value_(other.value_) {}
  LockedPtr& operator=(LockedPtr&&) = delete;
  ~LockedPtr() HPO_NO_THREAD_SAFETY_ANALYSIS {
    if (mu_ != nullptr) mu_->Unlock();  // null: moved from
  }

  // REQUIRES: `value` is guarded by the mutex held.
  void Reset(T* value) { value_ = value; }
  T& operator*() const { return *value_; }
  T* operator->() const { return value_; }

 private:
  Mutex* mu_;
  T* value_ = nullptr;
};

// std::condition_variable on an hpo::Mutex. The waits take the mutex the
// caller holds (and hold it again on return), so the analysis checks the
// condition around them; they may wake spuriously, so test it in a loop.
class CondVar {
 public:
  void Wait(Mutex& mu) HPO_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();  // still held: the caller's
  }
  // As Wait, until `deadline` at the latest: false once it has passed.
  template <typename Clock, typename Duration>
  bool WaitUntil(Mutex& mu, const std::chrono::time_point<Clock, Duration>& deadline)
      HPO_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    const bool woken = cv_.wait_until(lock, deadline) == std::cv_status::no_timeout;
    lock.release();
    return woken;
  }
  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace hpo
