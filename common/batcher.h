// Batcher<T>: leader-follower batching. Callers that arrive while a batch is
// running (or within the window, when there is one) queue up, and the caller
// at the head of the queue (the leader: no thread of its own) runs them
// together as the next batch. What it is for:
//
//  * the store's group commit (server/store/commit_batcher.h): a fleet's
//    reports cost one transaction per batch rather than one each;
//  * the engine's new trials (server/engine/lease.cc): devices that ask for
//    a new trial of one experiment at once get them from one sampler call
//    and one insert, rather than queueing for one suggestion each.
//
// What a caller may rely on:
//  * Submit returns only once the batch that holds its item has run, with
//    that item's own status: one item's failure is not the batch's.
//  * At most max_in_flight batches run at once, so with 1 the run function
//    never runs concurrently with itself.
//  * The item stays the caller's (on its stack); the run function reads it
//    and writes its results into it, and nothing touches it after Submit
//    returns.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace hpo {

template <typename T>
class Batcher {
 public:
  struct Options {
    size_t max_batch = 32;  // at most this many items per batch
    // How long the leader waits for more items before it runs, when fewer
    // than max_batch are queued. 0: it runs at once, with the items that
    // queued while earlier batches ran (a lone caller pays nothing).
    std::chrono::microseconds window{0};
    int max_in_flight = 1;  // batches running at once
  };
  // Runs `batch` and returns one Status per item, in the batch's order
  // (arrival order). A wrong count fails every item of the batch.
  using RunFn = std::function<std::vector<Status>(const std::vector<T*>& batch)>;

  Batcher(Options options, RunFn run) : options_(std::move(options)), run_(std::move(run)) {}
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // Queues `item`, waits for the batch that holds it, and returns its status.
  // Thread-safe.
  Status Submit(T& item) HPO_EXCLUDES(mu_) {
    Waiter self(&item);
    std::vector<Waiter*> batch;
    {
      MutexLock lock(mu_);
      queue_.push_back(&self);
      // The head may be a leader waiting out the window for a full batch.
      if (queue_.size() >= options_.max_batch) queue_.front()->wake.NotifyOne();
      while (!self.done && !MayLead(self)) self.wake.Wait(mu_);
      if (self.done) return self.status;  // another caller's batch held this item

      if (options_.window.count() > 0) {
        const auto deadline = std::chrono::steady_clock::now() + options_.window;
        while (queue_.size() < options_.max_batch && self.wake.WaitUntil(mu_, deadline)) {
        }
      }
      const size_t n = std::min(queue_.size(), options_.max_batch);
      batch.assign(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(n));
      queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(n));
      ++in_flight_;
      WakeNextLeader();  // the next batch may start beside this one
    }

    std::vector<T*> items;
    items.reserve(batch.size());
    for (const Waiter* w : batch) items.push_back(w->item);
    std::vector<Status> statuses = run_(items);
    if (statuses.size() != batch.size()) {
      // A broken run function must not leave its callers waiting, nor
      // tell them their item succeeded.
      statuses.assign(
          batch.size(),
          Status::Internal("batch: the run function returned " + std::to_string(statuses.size()) +
                           " results for " + std::to_string(batch.size()) + " items"));
    }

    MutexLock lock(mu_);
    --in_flight_;
    for (size_t i = 0; i < batch.size(); ++i) {
      batch[i]->status = std::move(statuses[i]);
      batch[i]->done = true;
      // The waiter may return (and its stack frame go) as soon as mu_ is
      // released; nothing touches it after this loop.
      if (batch[i] != &self) batch[i]->wake.NotifyOne();
    }
    WakeNextLeader();
    return self.status;
  }

  // Whether a batch is running now (a caller may prefer other work to
  // waiting for the next).
  bool Running() HPO_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return in_flight_ > 0;
  }

  // Items queued and not yet taken into a batch (for tests).
  size_t Queued() HPO_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return queue_.size();
  }

 private:
  // A queued item and its outcome, on its caller's stack; `wake`, `done` and
  // `status` are read and written with mu_ held only.
  struct Waiter {
    explicit Waiter(T* i) : item(i) {}
    T* item;
    CondVar wake;
    bool done = false;
    Status status;
  };

  // Whether `w` may lead a batch now: first in line, and a batch's slot free.
  bool MayLead(const Waiter& w) const HPO_REQUIRES(mu_) {
    return !queue_.empty() && queue_.front() == &w && in_flight_ < options_.max_in_flight;
  }
  void WakeNextLeader() HPO_REQUIRES(mu_) {
    if (!queue_.empty() && in_flight_ < options_.max_in_flight) queue_.front()->wake.NotifyOne();
  }

  const Options options_;
  const RunFn run_;
  Mutex mu_;
  std::deque<Waiter*> queue_ HPO_GUARDED_BY(mu_);
  int in_flight_ HPO_GUARDED_BY(mu_) = 0;
};

}  // namespace hpo
