// When a client of the worker protocol lists the trials it holds in a Lease
// (worker.proto: lists_held, held_trial_ids). Part of hpo_proto, so that
// hpo-worker and the benches' simulated workers follow one rule.
//
// A listing costs the server a read of the worker's leases, and it can
// find something only where the server and the worker disagree on what
// the worker holds. That happens only after a call failed: a Lease whose
// answer was lost (the server granted a trial the worker never heard of),
// or a trial the worker gave up after a refused report, completion, pause
// or restart (the server still counts it as the worker's). So a Lease
// lists only when some call failed since the last listing that went
// through, and on the first: a worker starts unsure. In a fleet without
// failures that spares the server a read on every lease but one (a tenth
// of PostgreSQL's statements, bench/README.md, server_bench).
#pragma once

#include <atomic>
#include <cstdint>

namespace hpo {

class HeldListing {
 public:
  // One Lease try's decision.
  struct Try {
    bool list = false;   // set lists_held and list every trial held
    int64_t failed = 0;  // the failures it settles, if it goes through
  };

  // A call of this worker failed (any call, Lease included, any code).
  // Thread-safe.
  void CallFailed() { failed_.fetch_add(1); }

  // Before each Lease try (a retried Lease decides again: the failed try
  // may have granted a trial). Thread-safe.
  Try Next() const {
    const int64_t failed = failed_.load();
    return {failed != listed_after_.load(), failed};
  }

  // The try went through: if it listed, the failures before it are settled.
  // A failure counted meanwhile is not, and the next Lease lists again.
  // Called by one Lease at a time (a worker makes one Lease call at a time:
  // worker.proto).
  void WentThrough(const Try& t) {
    if (t.list) listed_after_.store(t.failed);
  }

 private:
  std::atomic<int64_t> failed_{0};
  std::atomic<int64_t> listed_after_{-1};  // failed_ when a listing last went through
};

}  // namespace hpo
