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
//
// Two cases need more than that, and get it:
// - A failed Lease may still be granting on the server: its handler can
//   outlive the call's deadline, and the retry's listing can be read
//   before that grant commits. So a failed Lease is settled only by a
//   listing on a later Lease than the one that next went through.
// - On a worker with several devices, a trial given up after a failed
//   call stays in what the worker holds until its device is done with it,
//   and another device's listing meanwhile names it. TrialLeft makes the
//   next Lease list again once it is gone.
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

  // Besides CallFailed, for a failed Lease: the server may still grant it.
  // Called by one Lease at a time (a worker makes one Lease call at a time:
  // worker.proto), as are Next and WentThrough.
  void LeaseFailed() { lease_failed_ = true; }

  // Before each Lease try (a retried Lease decides again: the failed try
  // may have granted a trial).
  Try Next() const {
    const int64_t failed = failed_.load();
    return {recheck_ || failed != listed_after_, failed};
  }

  // The try went through. If it listed, the failures counted before it are
  // settled; a failure counted meanwhile is not. After a failed Lease, the
  // next listing Lease is asked for too.
  void WentThrough(const Try& t) {
    if (!t.list) return;
    listed_after_ = t.failed;
    recheck_ = lease_failed_;
    lease_failed_ = false;
  }

  // The failures counted so far: where a trial's TrialLeft starts from.
  // Thread-safe.
  int64_t failures() const { return failed_.load(); }

  // A trial left what the worker holds; `failures_then` is failures() when
  // it was leased. If a call failed since, the trial may have been given
  // up without the server knowing, and a listing made while it was still
  // held settled nothing about it: the next Lease lists again.
  // Thread-safe.
  void TrialLeft(int64_t failures_then) {
    if (failed_.load() != failures_then) CallFailed();
  }

 private:
  std::atomic<int64_t> failed_{0};  // counted by any thread
  // Used by one Lease at a time only.
  int64_t listed_after_ = -1;  // failed_ when a listing last went through
  bool lease_failed_ = false;  // a Lease failed since the last listing went through
  bool recheck_ = false;       // list once more: a Lease failed before the last listing
};

}  // namespace hpo
