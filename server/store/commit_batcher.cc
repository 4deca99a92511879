#include "server/store/commit_batcher.h"

#include <algorithm>
#include <utility>

namespace hpo::store {

CommitBatcher::CommitBatcher(Options options, CommitFn commit)
    : options_(std::move(options)), commit_(std::move(commit)) {}

bool CommitBatcher::MayLead(const Waiter& w) const {
  return !queue_.empty() && queue_.front() == &w && in_flight_ < options_.max_in_flight;
}

void CommitBatcher::WakeNextLeader() {
  if (!queue_.empty() && in_flight_ < options_.max_in_flight) queue_.front()->wake.NotifyOne();
}

Status CommitBatcher::Submit(const Call& call) {
  Waiter self(&call);
  std::vector<Waiter*> batch;
  {
    MutexLock lock(mu_);
    queue_.push_back(&self);
    // The head may be a leader waiting out the window for a full batch.
    if (queue_.size() >= static_cast<size_t>(options_.max_batch)) queue_.front()->wake.NotifyOne();
    while (!self.done && !MayLead(self)) self.wake.Wait(mu_);
    if (self.done) return self.status;  // another caller's batch held this call

    // Leading. Without a window, the batch is what queued behind us while
    // the earlier batches committed: nothing waits for company that may not
    // come, and a lone caller pays nothing.
    if (options_.window.count() > 0) {
      const auto deadline = std::chrono::steady_clock::now() + options_.window;
      while (queue_.size() < static_cast<size_t>(options_.max_batch) && self.wake.WaitUntil(mu_, deadline)) {
      }
    }
    const size_t n = std::min(queue_.size(), static_cast<size_t>(options_.max_batch));
    batch.assign(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(n));
    queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(n));
    ++in_flight_;
    WakeNextLeader();  // the next batch may start on another connection
  }

  std::stable_sort(batch.begin(), batch.end(),
                   [](const Waiter* a, const Waiter* b) { return a->call->order < b->call->order; });
  std::vector<const Call*> calls;
  calls.reserve(batch.size());
  for (const Waiter* w : batch) calls.push_back(w->call);
  std::vector<Status> statuses = commit_(calls);
  if (statuses.size() != batch.size()) {
    // A broken commit function must not leave its callers waiting, nor
    // acknowledge them.
    statuses.assign(batch.size(), Status::Internal("group commit: the committer returned " +
                                                   std::to_string(statuses.size()) + " results for " +
                                                   std::to_string(batch.size()) + " calls"));
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

}  // namespace hpo::store
