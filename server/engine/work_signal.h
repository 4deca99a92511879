// A count of the changes that may give an idle device work, and a wait for
// the next one: what a Lease that found nothing waits on (a long poll)
// instead of the worker asking again after a fixed pause.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>

#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace hpo::server {

class WorkSignal {
 public:
  using Clock = std::chrono::steady_clock;

  // The current count; a wait from it returns at the next Notify.
  uint64_t Epoch() const HPO_EXCLUDES(mu_);
  // Counts a change and wakes every waiter.
  void Notify() HPO_EXCLUDES(mu_);
  // Waits until the count differs from `seen` or `deadline` passes; the
  // count then (equal to `seen` when the deadline passed first).
  uint64_t WaitChange(uint64_t seen, Clock::time_point deadline) const HPO_EXCLUDES(mu_);

 private:
  mutable Mutex mu_;
  mutable CondVar cv_;
  uint64_t epoch_ HPO_GUARDED_BY(mu_) = 0;
};

}  // namespace hpo::server
