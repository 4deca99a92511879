// The durable store: experiments, search spaces, trials, measurements,
// workers, devices and speed observations.
//
// One interface, two implementations chosen by URL (see OpenStore below):
//   sqlite:///abs/path/hpo.db, sqlite://./rel.db or a plain path -> SQLite
//     (the embedded default), sqlite://:memory: for a private in-memory store;
//   postgresql://user:pass@host:port/db (or postgres://) -> PostgreSQL.
//
// Rules every implementation keeps (and tests/store_conformance_test.cc checks
// on both backends):
//  * Every call is exactly one transaction: it either commits completely or
//    changes nothing.
//  * Conflicts are retried inside the call. A transaction that lost a race
//    to a concurrent one (Aborted: PostgreSQL's serialization failure or
//    deadlock) is run again from the start, up to kMaxConflictAttempts
//    times in all with a short jittered pause between; only when every
//    attempt lost does the call return Aborted. A connection lost before
//    the commit is retried once on a new one; otherwise Unavailable.
//  * Thread safety: a Store may be used from any number of threads at once.
//    Several Store handles (in one process or several) may share one
//    database; they coordinate through the database only.
//  * Leasing is a compare-and-set. LeaseNextTrial never hands one pending
//    trial to two callers, even from two processes on one PostgreSQL
//    (UPDATE ... WHERE id = (SELECT ... FOR UPDATE SKIP LOCKED); on SQLite
//    write transactions are serialized with BEGIN IMMEDIATE).
//  * A lease has an expiry. ReclaimExpiredLeases puts a leased/running trial
//    whose lease expired back to pending (its attempt count already says how
//    many leases it had), or fails it after `max_attempts` leases.
//  * Only the lease owner may report on, renew or finish a leased trial (an
//    ask/tell client holds leases too, under an owner name of its own). A
//    pending trial may be cancelled by anyone.
//  * When an expired lease puts a trial back to pending, the measurements of
//    the dead attempt are deleted with it: the next attempt trains from
//    scratch and reports its steps anew. A resumed trial (a promotion)
//    whose lease expires goes back to paused instead, keeping what it had
//    when it paused: only its steps after resume_step are deleted.
//  * Pausing (promotion-type early stopping): the owner of a leased or
//    running trial may pause it at a step; it then has no lease and waits,
//    holding its place, until ResumeTrial leases it again (level + 1) or
//    the experiment ends (completed: the paused trials are pruned, as never
//    promoted; cancelled or failed: cancelled). Paused trials count as
//    unfinished in TrialCounts but not against TrialLimits::max_unfinished,
//    which caps the trials on devices or waiting for one.
//  * Reports are idempotent per (trial, step): repeating a step is
//    acknowledged and changes nothing.
//  * Finished trials (completed, pruned, failed, cancelled) are immutable:
//    no report, renew or second finish changes them. Finishing again is
//    acknowledged as a repeat (kRepeated, nothing changes) only when it is
//    the same finish: the same state and the same final metrics, from the
//    owner that finished it (a retried RPC). Any other finish of a finished
//    trial - another state, other metrics, another owner - is
//    FailedPrecondition, saying which of them differs.
//  * Group commit: ReportMeasurement, RenewLease, RenewLeases, FinishTrial,
//    PauseTrial, TouchWorker and AddSpeedObservation, the calls a fleet
//    makes most, are batched (and CreateTrialsUpTo on a store with one
//    connection, SQLite, where it would wait for the batch anyway): the
//    calls that arrive while an earlier batch is committing (or within
//    StoreOptions::group_commit_window) run in one
//    transaction, each inside a savepoint of its own, and each caller
//    returns once that transaction committed. So the rules above hold per
//    call: one call's failure (not the owner, a finished trial) is rolled
//    back to its savepoint and returned to that caller alone while the
//    others commit; reports stay idempotent per (trial, step) and the lease
//    checks stay compare-and-sets within a batch. A failure of the whole
//    transaction (a lost race, a lost connection, a full disk) is retried
//    for the whole batch by the rule above, or returned to every caller in
//    it; none is told of a commit that did not happen. A call that finds
//    no other waiting commits alone, as it would without batching.
//  * Durability: a call that returned success survives a crash of the
//    process and of the machine. PostgreSQL: synchronous_commit as configured
//    on the server (on by default). SQLite: journal_mode=WAL with
//    synchronous=FULL, so every commit is fsynced to the WAL before the call
//    returns (NORMAL would only survive a process crash).
//  * Workers have an identity: (host, instance) when the worker names an
//    instance, and a secret (its hash stored) that proves it. Registering
//    an identity that is stored already, with its secret, updates that
//    worker (same id, its devices' ids kept by ordinal, so their measured
//    speed stays theirs) rather than adding one; without it, the identity
//    of a worker in use is refused and that of one out of use moves to a
//    new worker (RegisterWorker). A worker unseen for long is marked gone
//    (MarkWorkersGone) and later deleted (PruneGoneWorkers); trials and
//    speed observations that came from it are kept.
//  * Start-up applies the versioned migrations in sql/ inside one transaction
//    and records them in `schema_version`; opening twice is a no-op; a
//    database whose schema is newer than this binary is refused.
//
// Times are milliseconds since the Unix epoch, read from StoreOptions::clock.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace hpo::store {

enum class ExperimentState { kRunning, kCompleted, kCancelled, kFailed };
enum class TrialState {
  kPending,
  kLeased,
  kRunning,
  kPaused,
  kCompleted,
  kPruned,
  kFailed,
  kCancelled
};
enum class DeviceKind { kCpu, kCuda };

std::string_view ToString(ExperimentState s);
std::string_view ToString(TrialState s);
std::string_view ToString(DeviceKind k);
Result<ExperimentState> ParseExperimentState(std::string_view s);
Result<TrialState> ParseTrialState(std::string_view s);
Result<DeviceKind> ParseDeviceKind(std::string_view s);

// Completed, pruned, failed or cancelled.
bool IsFinished(TrialState s);

using Id = int64_t;
using TimeMs = int64_t;

struct SearchSpaceRecord {
  Id id = 0;
  Id experiment_id = 0;
  std::string name;
  std::string spec_json;
};

struct NewExperiment {
  std::string name;
  std::string spec_json;  // the whole experiment spec, as JSON text
  struct Space {
    std::string name;
    std::string spec_json;
  };
  std::vector<Space> spaces;
};

struct ExperimentRecord {
  Id id = 0;
  std::string name;
  std::string spec_json;
  ExperimentState state = ExperimentState::kRunning;
  std::string reason;  // why it ended, when it ended
  TimeMs created_ms = 0;
  TimeMs updated_ms = 0;
  std::optional<TimeMs> finished_ms;
  std::vector<SearchSpaceRecord> spaces;
};

struct NewTrial {
  std::optional<Id> space_id;  // none for single-space experiments
  std::string params_json = "{}";
  std::string system_params_json = "{}";
  double priority = 0;  // higher priorities are leased first
  // Non-empty: the trial is created leased to this owner for lease_ms (a
  // device asked for work and this is its answer), not pending.
  std::string lease_owner;
  TimeMs lease_ms = 0;
  std::optional<int64_t> stop_step;  // see TrialRecord
};

struct TrialRecord {
  Id id = 0;
  Id experiment_id = 0;
  std::optional<Id> space_id;
  int64_t number = 0;  // 0, 1, 2, ... within its experiment
  std::string params_json;
  std::string system_params_json;
  TrialState state = TrialState::kPending;
  double priority = 0;
  // Leases of its current segment (of its last one while it is paused):
  // 1 on its first lease and on each resume after a pause, + 1 on each
  // lease again after one expired. 0 only before its first lease.
  int attempt = 0;
  std::string lease_owner;
  std::optional<TimeMs> lease_expires_ms;
  TimeMs created_ms = 0;
  std::optional<TimeMs> started_ms;  // first lease
  std::optional<TimeMs> finished_ms;
  TimeMs updated_ms = 0;
  std::string final_metrics_json;  // empty until finished
  std::string reason;              // why it failed, was pruned or cancelled
  // Promotion-type early stopping (0, none, 0 otherwise): the rung the trial
  // runs toward or is paused at; the step its current lease runs to before
  // it pauses (none: to its end); the step its current segment resumed
  // after, i.e. its checkpoint's (0: it started from scratch).
  int level = 0;
  std::optional<int64_t> stop_step;
  int64_t resume_step = 0;
  // Where the trial stands among the store's changes (see ReadCursor); read
  // back by GetTrial and ListTrials, not necessarily by the calls that write.
  int64_t revision = 0;
  // The revision of the last deletion of some of its measurements (0: none).
  int64_t curve_reset_revision = 0;
};

struct Measurement {
  int64_t step = 0;
  std::string metrics_json = "{}";  // e.g. {"loss":0.4,"accuracy":0.87}
  double samples_per_sec = 0;
  std::string system_setting_json = "{}";  // e.g. {"batch_size":128,"threads":2}
  // What the step cost: its device's time on it as the server counted it,
  // and that time at the device's price (0 without one).
  int64_t device_ms = 0;
  double cost = 0;
  // The device it ran on and that device's class (none for an ask/tell
  // client's steps). The id is not a reference: the device may be gone.
  std::optional<Id> device_id;
  std::string device_class;
};

// Something that happened to a trial between its steps (a server event:
// trial.paused, trial.resumed, trial.moving, ...), kept for its history.
struct TrialEventRecord {
  Id id = 0;
  Id trial_id = 0;
  TimeMs created_ms = 0;
  std::string type;
  std::string data_json = "{}";
};

// The device time and money an experiment's trials have used.
struct Usage {
  int64_t device_ms = 0;
  double cost = 0;
};

// How far a trial got, from its stored steps: what a paused, pruned or
// cut trial reached, its best step, and the time it trained (time paused at
// a rung is not in it).
struct TrialProgress {
  int64_t steps = 0;                     // steps stored
  int64_t last_step = 0;                 // the highest
  std::string last_metrics_json = "{}";  // that step's metrics
  int64_t best_step = 0;                 // the best objective value's (the earliest of ties)
  std::string best_metrics_json = "{}";
  int64_t device_ms = 0;  // Measurement::device_ms, summed
  double cost = 0;
  // The device class that trained it longest (by device_ms; ties to the
  // smaller name), "" when no step named one (an ask/tell client's).
  std::string device_class;
};

// What "best" means for a trial's steps: the objective metric and its direction.
struct Objective {
  std::string metric;
  bool maximize = false;
};

struct MeasurementRecord : Measurement {
  Id trial_id = 0;
  TimeMs created_ms = 0;
  int64_t revision = 0;  // see ReadCursor
};

// Where a reader stands among the changes of trials and measurements, for
// reads of what changed since: every trial or measurement written (inserted,
// updated, or for a trial, some of its measurements deleted) gets a
// revision; when ReadHorizon() returned {store_id, N}, every write with a
// revision below N had committed, so a read started after it sees them all,
// and a later read of revisions >= N misses nothing (it may repeat a row
// seen already). Revisions only grow, across restarts of the server and of
// the database. store_id names the database (random, chosen when it was
// created), so that a cursor from another one is recognised.
struct ReadCursor {
  std::string store_id;
  int64_t revision = 0;
};

struct DeviceInfo {
  int ordinal = 0;  // position within its worker, 0-based
  DeviceKind kind = DeviceKind::kCpu;
  std::string name;          // "AMD EPYC 7B13", "NVIDIA H100 80GB HBM3"
  std::string device_class;  // what placement groups by, e.g. "cpu:AMD EPYC 7B13:x2.0"
  double cores = 0;          // usable cores (after affinity and cgroup quota)
  int64_t memory_bytes = 0;
  double benchmark_gflops = 0;  // the worker's speed benchmark
};

struct DeviceRecord : DeviceInfo {
  Id id = 0;
  Id worker_id = 0;
};

struct NewWorker {
  std::string host;
  std::string labels_json = "{}";
  std::vector<DeviceInfo> devices;
  // The SHA-256 (lowercase hex) of the session secret the worker's later
  // calls present. The secret itself is never stored.
  std::string session_hash;
  // What tells this worker apart from the others on `host` and stays the
  // same when it restarts (a pod name, a worker id file's content). Empty:
  // none; every registration is then a new worker.
  std::string instance;
  // With an instance: the SHA-256 (lowercase hex) of the identity secret
  // the caller presents, proof that it is the worker stored under
  // (host, instance); empty when it presents none. An empty stored hash
  // (a worker registered before identity secrets) matches nothing.
  std::string presented_identity_hash;
  // With an instance: the hash a new worker is stored with, when this
  // registration makes one (the caller hands its secret to the worker
  // only then: WorkerRecord::identity_hash equals this).
  std::string identity_hash;
  // A stored worker last seen within this many milliseconds (and not gone)
  // is in use: its identity is not given to a caller without its secret.
  int64_t in_use_ms = 0;
};

struct WorkerRecord {
  Id id = 0;
  std::string host;
  std::string labels_json;
  TimeMs registered_ms = 0;
  TimeMs last_seen_ms = 0;
  std::vector<DeviceRecord> devices;
  // NewWorker::session_hash as stored (empty for a worker registered before
  // sessions existed, which no session matches). Not for display.
  std::string session_hash;
  std::string instance;  // NewWorker::instance
  // When MarkWorkersGone found it unseen; unset while it is not gone.
  std::optional<TimeMs> gone_ms;
  // NewWorker::identity_hash as stored (empty without an instance, or for a
  // worker registered before identity secrets). Not for display.
  std::string identity_hash;
  // Set by RegisterWorker alone: the worker that held this identity until
  // this registration took it (see there).
  std::optional<Id> took_identity_of;
};

struct SpeedObservation {
  Id device_id = 0;
  std::string device_class;
  std::string workload;  // workload signature, e.g. "fashion-mnist-cnn"
  std::string system_setting_json = "{}";
  double samples_per_sec = 0;
  std::optional<Id> trial_id;
};

// device_id is 0 when the device was pruned with its worker (the
// observation is kept: the speed model goes by device_class).
struct SpeedObservationRecord : SpeedObservation {
  Id id = 0;
  TimeMs observed_ms = 0;
};

struct TrialFilter {
  std::optional<TrialState> state;
  std::optional<Id> space_id;
  int64_t offset = 0;
  int64_t limit = 1000;  // at most this many, ordered by number
  // Keyset paging: only trials numbered above this (offset then applies
  // after it; callers use one or the other).
  std::optional<int64_t> after_number;
  // Only trials with revision >= this (a ReadCursor's revision).
  std::optional<int64_t> since_revision;
};

struct LeaseRequest {
  std::string owner;  // who holds the lease, e.g. "worker/12/device/0"; not empty
  TimeMs lease_ms = 60'000;
  std::optional<Id> experiment_id;  // any running experiment when unset
  std::optional<Id> space_id;       // any space when unset
};

struct ReportResult {
  bool inserted = false;  // false: this (trial, step) was already recorded
  TrialState state = TrialState::kRunning;
  // The trial's experiment's, read with the report (one round trip less
  // for a caller that acts on an ended experiment).
  ExperimentState experiment_state = ExperimentState::kRunning;
  // The trial as the report left it (running, its lease renewed): what a
  // caller would otherwise read again. Its `revision` is the report's on
  // PostgreSQL and the one before it on SQLite (a trigger sets it after
  // the row RETURNING reads).
  TrialRecord trial;
};

// What FinishTrial did: finished the trial now, or acknowledged the same
// finish again (see the rules above) and changed nothing.
enum class FinishResult { kFinished, kRepeated };

struct FinishRequest {
  TrialState state = TrialState::kCompleted;  // must be a finished state
  std::string final_metrics_json = "{}";
  std::string reason;
};

struct TrialCounts {
  int64_t pending = 0, leased = 0, running = 0, paused = 0, completed = 0, pruned = 0, failed = 0,
          cancelled = 0;
  int64_t total() const {
    return pending + leased + running + paused + completed + pruned + failed + cancelled;
  }
};

struct StoreOptions {
  // Milliseconds since the epoch; the system clock when unset. Tests replace
  // it to expire leases without waiting.
  std::function<TimeMs()> clock;
  // PostgreSQL: connections kept open per Store handle.
  int pool_size = 8;
  // SQLite: how long a write waits for another connection's transaction.
  int busy_timeout_ms = 10'000;
  // Called before a call's transaction is run again (see the rules above),
  // with the failure that made it and the attempt about to start (2, 3,
  // ...). For logs and metrics; on the calling thread, so it must be cheap.
  std::function<void(const Status& why, int attempt)> on_retry;

  // Group commit (see "Group commit" above). Off: every call commits on its
  // own, as before it existed (for comparing the two in bench/server_bench).
  bool group_commit = true;
  // At most this many calls in one batch (1 to 64).
  int group_commit_max_batch = 32;
  // How long a batch waits for more calls before it commits. 0 (the
  // default): it never waits; the calls that arrive while the previous
  // batch commits make the next one, so a lone caller pays nothing.
  std::chrono::microseconds group_commit_window{0};
  // Called after each transaction of the batcher was committed (or failed
  // whole), with how many calls it held (1 for a call that found no
  // company), on the leader's thread. For metrics and tests.
  std::function<void(size_t calls)> on_group_commit;
};

// How many times in all a store call runs a transaction that keeps losing
// races (Aborted) before it gives up. Each loser was rolled back whole, so a
// rerun is safe; five attempts ride out a burst of contention on one row
// (a hot experiment's trials), while a call that cannot win still ends
// after at most 75 ms of pauses (ceilings of 5, 10, 20 and 40 ms, each
// drawn between half and all of it).
inline constexpr int kMaxConflictAttempts = 5;

// Receives the change notifications of every process on the database
// (Store::NotifyChange), this one's included, in the order they committed.
// Used by one thread at a time.
class ChangeListener {
 public:
  virtual ~ChangeListener() = default;
  // The next payload, or nullopt when `timeout` passes without one.
  // Unavailable when the connection broke: notifications sent until the
  // next call succeeds (it reconnects) are lost.
  virtual Result<std::optional<std::string>> Next(std::chrono::milliseconds timeout) = 0;
};

class Store {
 public:
  virtual ~Store() = default;

  // "sqlite" or "postgresql".
  virtual std::string_view backend() const = 0;
  // The URL this store was opened with, password masked.
  virtual const std::string& display_url() const = 0;
  // Highest migration version applied.
  virtual Result<int> SchemaVersion() = 0;

  // Experiments ------------------------------------------------------------
  // Creates the experiment (state running) and its search spaces together.
  // InvalidArgument: empty name or duplicated space names.
  virtual Result<ExperimentRecord> CreateExperiment(const NewExperiment& e) = 0;
  virtual Result<ExperimentRecord> GetExperiment(Id id) = 0;
  // The experiment's state alone, which every report checks: GetExperiment's
  // unless a store reads it more cheaply (SqlStore: one row, no spaces).
  // NotFound as GetExperiment.
  virtual Result<ExperimentState> GetExperimentState(Id id) {
    HPO_ASSIGN_OR_RETURN(ExperimentRecord e, GetExperiment(id));
    return e.state;
  }
  // Newest first.
  virtual Result<std::vector<ExperimentRecord>> ListExperiments(int64_t offset, int64_t limit) = 0;
  // Ends a running experiment. With kCancelled (or kFailed), every pending,
  // leased and running trial is cancelled in the same transaction (with
  // kCompleted only the pending ones). `reason` is stored once, on the
  // experiment; each trial's reason only names the experiment's end
  // ("experiment cancelled"), so a long reason is not copied per trial.
  // FailedPrecondition: the experiment has already ended.
  virtual Status FinishExperiment(Id id, ExperimentState state, std::string_view reason) = 0;

  // Trials -------------------------------------------------------------------
  // Adds pending trials, numbered after the experiment's existing ones.
  // FailedPrecondition: the experiment is not running.
  Result<std::vector<TrialRecord>> CreateTrials(Id experiment_id,
                                                const std::vector<NewTrial>& trials) {
    return CreateTrialsUpTo(experiment_id, trials, {});
  }
  // The same, but only as many of the first of `trials` as `limits` allow
  // (maybe none). The limits are checked in the transaction that inserts, so
  // they hold even when several servers create trials at once.
  struct TrialLimits {
    std::optional<int64_t> max_total;       // trials the experiment ever has
    std::optional<int64_t> max_unfinished;  // pending + leased + running ones
  };
  virtual Result<std::vector<TrialRecord>> CreateTrialsUpTo(Id experiment_id,
                                                            const std::vector<NewTrial>& trials,
                                                            const TrialLimits& limits) = 0;
  virtual Result<TrialRecord> GetTrial(Id id) = 0;
  virtual Result<std::vector<TrialRecord>> ListTrials(Id experiment_id,
                                                      const TrialFilter& filter) = 0;
  virtual Result<TrialCounts> CountTrials(Id experiment_id) = 0;
  // The leased and running trials of every running experiment, in one
  // read: what the fleet is running now (GET /api/v1/workers). Ordered by
  // experiment, newest first, then leased before running, then number; at
  // most `limit`. InvalidArgument: a negative limit.
  virtual Result<std::vector<TrialRecord>> ListLeasedTrials(int64_t limit) = 0;

  // Leases the pending trial with the highest priority (then the lowest id)
  // of a running experiment: pending -> leased, attempt + 1.
  // Returns nullopt when nothing is pending.
  virtual Result<std::optional<TrialRecord>> LeaseNextTrial(const LeaseRequest& req) = 0;
  // Leases one given trial if it is still pending (the scheduler's choice).
  // FailedPrecondition: it is not pending any more.
  virtual Result<TrialRecord> LeaseTrial(Id trial_id, const std::string& owner,
                                         TimeMs lease_ms) = 0;
  // Extends the lease to now + lease_ms. FailedPrecondition: not the owner
  // or the trial is no longer leased/running.
  virtual Status RenewLease(Id trial_id, const std::string& owner, TimeMs lease_ms) = 0;
  // RenewLease for each of `trial_ids`, in one transaction. Returns the ids
  // it could not renew (unknown, finished, pending, or another owner's), in
  // the order given; the others are renewed.
  virtual Result<std::vector<Id>> RenewLeases(const std::vector<Id>& trial_ids,
                                              const std::string& owner, TimeMs lease_ms) = 0;
  // Returns trials whose lease expired to pending (or, resumed ones, to
  // paused at level - 1), or fails those leased `max_attempts` times
  // already in their current segment (reason says so). Returns the ids
  // touched.
  virtual Result<std::vector<Id>> ReclaimExpiredLeases(int max_attempts) = 0;
  // Marks expired (for the next ReclaimExpiredLeases) the leases of `owner`
  // on leased or running trials other than `held`: the owner says it does
  // not hold them (a lease whose answer was lost). Returns their ids, in id
  // order; none is a read and no write.
  virtual Result<std::vector<Id>> ExpireLeasesNotHeld(const std::string& owner,
                                                      const std::vector<Id>& held) = 0;

  // Pauses a leased or running trial of `owner` after `step` (its
  // checkpoint's step): no lease, resume_step = step; attempt stays, the
  // attempt the segment ended on (the next lease starts a new segment).
  // Pausing again at the same step is acknowledged.
  // FailedPrecondition: another owner's, not leased or running (or paused
  // at another step). InvalidArgument: step < resume_step.
  virtual Status PauseTrial(Id trial_id, const std::string& owner, int64_t step) = 0;
  // Leases a paused trial of a running experiment (a promotion): paused ->
  // leased, level + 1, stop_step as given (none: to the end); attempt 1
  // after a PauseTrial (a new segment), attempt + 1 after its resumed
  // segment's lease expired (ReclaimExpiredLeases: the same segment again).
  // With `restart`, its checkpoint is gone or unusable: every measurement is
  // deleted and resume_step becomes 0, so it trains from scratch.
  // FailedPrecondition: not paused (the message says what it is), or the
  // experiment ended.
  virtual Result<TrialRecord> ResumeTrial(Id trial_id, const std::string& owner, TimeMs lease_ms,
                                          std::optional<int64_t> stop_step,
                                          bool restart = false) = 0;
  // The owner of a leased or running resumed trial found its checkpoint
  // unusable: resume_step becomes 0 and every measurement is deleted, so
  // the same lease trains it from scratch. FailedPrecondition: not leased
  // or running under `owner`.
  virtual Status RestartTrial(Id trial_id, const std::string& owner) = 0;

  // Records one step (leased -> running on the first) and, when
  // renew_lease_ms is set, extends the lease to now + renew_lease_ms (a
  // report is a heartbeat) when less than nearly that is left
  // (ReportRenewsBefore). Idempotent per (trial, step).
  // FailedPrecondition: the trial is finished, pending, or leased by someone
  // else, or the step is past the lease's stop_step (a lease that ends at a
  // rung covers the steps up to it). InvalidArgument: a negative step or
  // samples_per_sec.
  // With `speed`, the step's speed observation is added in the same
  // transaction when the step is new (inserted), and only if its device is
  // still registered (a device pruned meanwhile loses it, not the report).
  // The report is stored whatever its experiment's state, which the result
  // carries.
  // A report renews its trial's lease only when less than renew_lease_ms
  // less min(1 s, 10% of it) is left, so a lease lasts at least that long
  // after its last report. Otherwise the report writes only its step, not
  // the trial's row: a running trial reports seconds apart or less, and
  // rewriting the row writes every index of `trials` (its revision, which
  // a trigger sets, changes each time), on SQLite twice.
  // Returns the time before which a lease is renewed by a report at `now`.
  static TimeMs ReportRenewsBefore(TimeMs now, TimeMs renew_lease_ms) {
    return now + renew_lease_ms - std::min<TimeMs>(1000, renew_lease_ms / 10);
  }
  virtual Result<ReportResult> ReportMeasurement(Id trial_id, const std::string& owner,
                                                 const Measurement& m,
                                                 std::optional<TimeMs> renew_lease_ms,
                                                 const std::optional<SpeedObservation>& speed) = 0;
  Result<ReportResult> ReportMeasurement(Id trial_id, const std::string& owner,
                                         const Measurement& m,
                                         std::optional<TimeMs> renew_lease_ms) {
    return ReportMeasurement(trial_id, owner, m, renew_lease_ms, std::nullopt);
  }
  // Ordered by step.
  virtual Result<std::vector<MeasurementRecord>> ListMeasurements(Id trial_id) = 0;
  // Every measurement of an experiment's trials, ordered by trial, then step.
  virtual Result<std::vector<MeasurementRecord>> ListExperimentMeasurements(Id experiment_id) = 0;
  // The measurements of an experiment's trials with revision >= `since`,
  // ordered by trial, then step.
  virtual Result<std::vector<MeasurementRecord>> ListExperimentMeasurementsSince(Id experiment_id,
                                                                                 int64_t since) = 0;
  // Keeps an event of a trial's history (TrialEventRecord). NotFound when
  // the trial does not exist.
  virtual Status AddTrialEvent(Id trial_id, std::string_view type,
                               const std::string& data_json) = 0;
  // A trial's events, oldest first, at most `limit` (the newest ones when
  // there are more). NotFound when the trial does not exist.
  virtual Result<std::vector<TrialEventRecord>> ListTrialEvents(Id trial_id, int64_t limit) = 0;
  // What an experiment's stored steps cost, summed (Measurement::device_ms
  // and cost). NotFound when the experiment does not exist.
  virtual Result<Usage> ExperimentUsage(Id experiment_id) = 0;
  // The progress of an experiment's trials numbered first..last (both
  // included) that stored at least one step, by trial id: one read for a
  // page of trials. A step without the objective's metric is never best.
  // NotFound when the experiment does not exist.
  virtual Result<std::map<Id, TrialProgress>> ListTrialProgress(Id experiment_id,
                                                                int64_t first_number,
                                                                int64_t last_number,
                                                                const Objective& objective) = 0;
  // A cursor to read changes after: see ReadCursor. Take it before the
  // read it stands for.
  virtual Result<ReadCursor> ReadHorizon() = 0;
  // Ends a trial. See the rules above for repeated calls.
  // FailedPrecondition: pending (unless cancelled), another owner's lease,
  // or finished otherwise before. NotFound: no such trial.
  virtual Result<FinishResult> FinishTrial(Id trial_id, const std::string& owner,
                                           const FinishRequest& f) = 0;

  // Workers, devices, speed ----------------------------------------------
  // A new worker; or, with an instance whose (host, instance) is stored
  // already:
  //  * presented_identity_hash matches the stored one (compared in constant
  //    time): that worker again: its id, registered_ms and identity hash
  //    stay, its labels, session and devices are replaced, it is seen now
  //    and no longer gone. Devices are matched by ordinal: one of the same
  //    ordinal keeps its id (and so its speed observations), others are
  //    added, and those it no longer lists are deleted (their observations
  //    kept, device_id 0).
  //  * it does not, and the stored worker is in use (seen within
  //    in_use_ms, not gone): AlreadyExists, naming the identity; nothing
  //    changes.
  //  * it does not, and the stored worker is out of use: that worker gives
  //    up the identity (its instance becomes empty; its id, session, devices
  //    and leases stay its own) and a new worker is stored under it, with
  //    identity_hash; took_identity_of names the old one.
  // Two registrations of one identity at once (two replicas) leave one
  // worker under it. InvalidArgument names the bad field.
  virtual Result<WorkerRecord> RegisterWorker(const NewWorker& w) = 0;
  // One worker with its devices. NotFound: not registered.
  virtual Result<WorkerRecord> GetWorker(Id worker_id) = 0;
  // last_seen = now, and the worker is no longer gone. NotFound: not
  // registered (or pruned).
  virtual Status TouchWorker(Id worker_id) = 0;
  // Every worker with its devices, the gone ones too, by id.
  virtual Result<std::vector<WorkerRecord>> ListWorkers() = 0;
  // Marks gone (gone_ms = now) every worker not gone yet and unseen for
  // more than `unseen_ms` (last_seen_ms < now - unseen_ms, by this store's
  // clock, which wrote last_seen_ms), and returns them (without devices).
  // Each worker is returned by one call only, even with several stores on
  // one database, so its caller may announce it once.
  virtual Result<std::vector<WorkerRecord>> MarkWorkersGone(TimeMs unseen_ms) = 0;
  // Marks one worker gone now (gone_ms = now): it said it leaves. Returns
  // it (without devices) when this call marked it, nullopt when it was gone
  // already (so that it is announced once). NotFound: not registered.
  virtual Result<std::optional<WorkerRecord>> MarkWorkerGone(Id worker_id) = 0;
  // Deletes every gone worker unseen for more than `unseen_ms`, with its
  // devices, and returns their ids. What refers to them stays: trials name
  // their lease owner as text, speed observations lose only their device_id.
  virtual Result<std::vector<Id>> PruneGoneWorkers(TimeMs unseen_ms) = 0;
  virtual Result<Id> AddSpeedObservation(const SpeedObservation& o) = 0;
  // Observations of one workload (all when empty), oldest first.
  virtual Result<std::vector<SpeedObservationRecord>> ListSpeedObservations(
      std::string_view workload, int64_t limit) = 0;

  // Change notifications between the processes sharing this database (the
  // server replicas' live events). PostgreSQL: NOTIFY/LISTEN, delivered
  // to every listener once the notifying call returns. SQLite: there is no
  // second process to tell; NotifyChange does nothing and
  // ListenForChanges answers Unimplemented.
  static constexpr size_t kMaxChangePayload = 7900;  // PostgreSQL allows < 8000 bytes
  // InvalidArgument: a payload over kMaxChangePayload bytes.
  Status NotifyChange(std::string_view payload) { return NotifyChanges({std::string(payload)}); }
  // Several, in this order, in one statement (a busy replica's events cost
  // one round trip together, not one each). InvalidArgument, and none sent,
  // when one is over kMaxChangePayload bytes.
  virtual Status NotifyChanges(const std::vector<std::string>& payloads) = 0;
  virtual Result<std::unique_ptr<ChangeListener>> ListenForChanges() = 0;
};

// Opens (and migrates) the store named by `url`. Errors name the URL with
// its password masked: InvalidArgument for a malformed URL, Unavailable for
// an unreachable database, DataLoss for a corrupt file, FailedPrecondition for
// a schema newer than this binary.
Result<std::unique_ptr<Store>> OpenStore(const std::string& url, StoreOptions options = {});

}  // namespace hpo::store
