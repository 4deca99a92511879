// The fault and load scenarios, each one function that runs the
// real binaries and returns what it observed. bench/faults and bench/load
// run them at full size and print the figures; tests/fault_test runs small
// versions and asserts the behaviour (never the timings).
//
// Every scenario starts its own hpo-server (and workers, and PostgreSQL
// where it needs one) under `dir`, and stops them before it returns. A
// non-OK Result means the harness itself could not run (a binary missing,
// a server that would not start), not that the system misbehaved: that is
// in the result's fields.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace hpo::testing {

struct Setup {
  std::string server_bin;
  std::string worker_bin;  // hpo-worker; KillWorkers and SlowWorker need it
  std::string dir;         // scratch space; logs stay there
  std::string store_url;   // empty: a fresh SQLite file in `dir`
  bool verbose = false;    // progress lines on stderr
};

// Checks what the server acknowledged against the store, over REST:
// every report (trial -> step -> loss) must be stored with the value sent,
// and every completion (trial -> final loss) must have left its trial
// completed with that loss.
struct AckCheck {
  int64_t lost_reports = 0, lost_completions = 0;
  std::vector<std::string> samples;  // the first few, described
};
Result<AckCheck> CheckAcknowledged(uint16_t port,
                                   const std::map<int64_t, std::map<int64_t, double>>& reports,
                                   const std::map<int64_t, double>& completions = {});

// (a) kill -9 a worker in the middle of a trial, `kills` times; a new
// worker replaces each. Workers run a command whose steps sleep.
struct WorkerKillOptions {
  int kills = 50;
  int workers = 3;
  int lease_timeout_s = 3;
  int steps = 10;  // per trial
  int step_ms = 300;
};
struct WorkerKillResult {
  int kills = 0;
  int64_t trials = 0, completed = 0, failed = 0;
  int64_t unfinished = 0;        // neither completed nor failed at the end
  std::string experiment_state;  // "completed" when every trial ended
  int not_requeued = 0;          // killed trials never handed out again nor failed
  std::vector<double>
      requeue_ms;  // kill -> the trial is pending again (or failed, out of attempts)
  std::vector<double> release_ms;  // kill -> the trial's next lease
  int max_attempt = 0;
};
Result<WorkerKillResult> KillWorkers(const Setup& setup, const WorkerKillOptions& options);

// (b) kill -9 the server `kills` times while simulated workers report
// continuously; restart it on the same ports each time. At the end (after
// one more kill -9 and restart) every report the server acknowledged must be
// in the store with the value sent.
struct ServerKillOptions {
  int kills = 20;
  int workers = 8;
  std::chrono::milliseconds min_uptime{500},
      max_uptime{1500};  // between a restart and the next kill
};
struct ServerKillResult {
  int kills = 0;
  int64_t acked_reports = 0;
  int64_t lost_reports = 0;  // acknowledged, then missing or different
  std::vector<std::string> lost_samples;
  int64_t trials_completed = 0;
  std::map<std::string, int64_t> rpc_errors;  // by gRPC code
  std::vector<double> restart_ms;             // kill -> listening again
  std::vector<double> recovery_ms;            // kill -> the first acknowledged report after it
};
Result<ServerKillResult> KillServer(const Setup& setup, const ServerKillOptions& options);

// (b') the same kills, with real hpo-worker processes: each runs
// a command experiment whose steps take `step_ms`, so it reports about 20
// times a second. For each kill, a worker's recovery is the time from the
// kill until the server stored a report of it made after the kill; the
// fleet's is the slowest worker's. At the end no trial may have failed: a
// restart must not cost a trial.
struct ServerKillWorkersOptions {
  int kills = 20;
  int workers = 3;
  int steps = 20;  // per trial
  int step_ms = 50;
  std::chrono::milliseconds min_uptime{1000},
      max_uptime{2000};  // between recovery and the next kill
};
struct ServerKillWorkersResult {
  int kills = 0;
  int not_recovered = 0;  // kills after which some worker reported nothing within 30 s
  int64_t trials_completed = 0, trials_failed = 0;
  std::vector<double> restart_ms;  // kill -> listening again
  std::vector<double>
      worker_recovery_ms;  // per worker and kill: kill -> its first report stored after it
  std::vector<double> fleet_recovery_ms;  // per kill: the slowest worker's
};
Result<ServerKillWorkersResult> KillServerWorkers(const Setup& setup,
                                                  const ServerKillWorkersOptions& options);

// (c) stop and start a private PostgreSQL `restarts` times under load
// (simulated workers and REST clients). Every call must return within
// `bound`; errors during an outage must be UNAVAILABLE / HTTP 503; reports
// must be acknowledged again after each restart, and none acknowledged may
// be lost. Ignores setup.store_url.
struct PostgresRestartOptions {
  int restarts = 5;
  int workers = 8;
  int rest_clients = 2;
  std::chrono::milliseconds down{2000};  // PostgreSQL stopped
  std::chrono::milliseconds up{3000};    // running, before the next stop
  std::chrono::milliseconds bound{10'000};
};
struct PostgresRestartResult {
  int restarts = 0;
  int recovered = 0;                // restarts after which reports were acknowledged again
  std::vector<double> recovery_ms;  // PostgreSQL accepting again -> the first acknowledged report
  int64_t rpcs = 0, rest_calls = 0;
  std::map<std::string, int64_t> rpc_errors, rest_errors;
  int64_t unclean_errors = 0;  // neither UNAVAILABLE nor 503, nor a call over the bound
  int64_t hung = 0;            // calls that reached the bound
  std::vector<std::string> error_samples;
  double max_rpc_ms = 0, max_rest_ms = 0;
  int64_t acked_reports = 0, lost_reports = 0;
  bool server_survived = false;
};
Result<PostgresRestartResult> RestartPostgres(const Setup& setup,
                                              const PostgresRestartOptions& options);

// (d) a live but slow worker. A step that lasts three lease timeouts while
// the worker heartbeats; SIGSTOP/SIGCONT of the worker for less than the
// lease timeout, `pauses` times; and, as the control that shows leases do
// expire, one SIGSTOP well past the lease timeout.
struct SlowWorkerOptions {
  int lease_timeout_s = 3;
  int heartbeat_ms = 500;
  int pauses = 10;
  bool control = true;
};
struct SlowWorkerResult {
  std::string long_step_state;  // of the trial with the long step
  int long_step_attempts = 0;
  double long_step_s = 0;
  int pauses = 0;
  int64_t paused_trials = 0, paused_completed = 0;
  int paused_max_attempt = 0;
  double pause_ms = 0;        // each SIGSTOP lasted this long
  std::string control_state;  // "completed", after being handed out again
  int control_attempts = 0;   // 2: the stopped worker's lease expired once
};
Result<SlowWorkerResult> SlowWorker(const Setup& setup, const SlowWorkerOptions& options);

// (e) promotion-type ASHA under faults. Simulated workers lease, report
// every step and, told to pause at a rung (DECISION_PAUSE), upload the
// trial's checkpoint in chunks (bytes derived from trial and step, so any
// copy can be checked) and pause it; a promoted trial is leased again with
// resume_step, its checkpoint downloaded, checked byte for byte against what
// was uploaded for that step, and continued at resume_step + 1. Meanwhile
// the server gets kill -9 `server_kills` times (restarted on the same
// ports), and `upload_cuts` times a worker resuming a trial dies in the
// middle of uploading its next checkpoint (the stream is cut after some
// chunks; a new worker takes its place): the trial's previous checkpoint
// must stay its own, whole, and the trial must be promoted from it again
// once the dead worker's lease expires. At the end (the workers finish
// their segments, then one more kill -9 and restart) every acknowledged
// report, pause and completion must be in the store, every paused trial's
// checkpoint must be of its resume_step and read back intact with the
// bytes uploaded, and no trial may be left leased.
struct PromotionOptions {
  int workers = 6;
  int steps = 9;  // per trial; ASHA rungs at 1, 3 and 9 (reduction factor 3)
  std::chrono::milliseconds step_time{100};
  int64_t checkpoint_bytes = 256 << 10;
  size_t chunk_bytes = 64 << 10;  // four chunks per checkpoint
  int server_kills = 5;
  int upload_cuts = 5;
  int lease_timeout_s = 3;
  std::chrono::seconds duration{60};  // at least; longer until every fault was injected
};
struct PromotionResult {
  int server_kills = 0;
  int upload_cuts = 0;
  int64_t trials = 0;  // leased at least once
  int64_t acked_reports = 0, lost_reports = 0;
  // Acknowledged in a segment whose lease then expired (its worker died):
  // the server drops what came after the checkpoint, by contract.
  int64_t dropped_reports = 0;
  int64_t acked_completions = 0,
          lost_completions = 0;  // completed trials not completed in the store
  // Trials whose last acknowledged Pause is not what the store says at the
  // end (not paused, or paused after another step).
  int64_t lost_pauses = 0;
  int64_t uploads = 0;     // checkpoints the server acknowledged
  int64_t pauses = 0;      // acknowledged Pause calls
  int64_t promotions = 0;  // leases with resume_step > 0
  int64_t max_resume_step = 0;
  // A promoted trial whose download was not the checkpoint uploaded for
  // its resume_step (wrong step, wrong bytes, or an error).
  int64_t bad_resumes = 0;
  // A trial paused with a checkpoint that the server handed out again from
  // step 0 (it found no usable checkpoint).
  int64_t restarted = 0;
  // After each cut: the trial's checkpoint was still the previous one, whole.
  int cut_previous_intact = 0;
  // Cut trials leased again, from the step of that previous checkpoint; from
  // another step (a failure); and not leased again before the run ended
  // (still paused there, their checkpoint checked with the others: whether
  // a trial is promoted again is the promotion rule's call, as the rung
  // fills with others).
  int cut_resumed = 0, cut_wrong_resumes = 0, cut_not_leased_again = 0;
  int64_t paused_at_end = 0, checkpoints_intact = 0;  // of the trials paused at the end
  int64_t stuck =
      0;  // leased or running at the end, two lease timeouts after the last worker stopped
  int64_t expired_segments = 0;  // other segments whose lease was lost under a live worker
  std::map<std::string, int64_t> rpc_errors;  // by gRPC code, the cuts' CANCELLED left out
  std::vector<std::string> samples;           // what went wrong, the first few
  double duration_s = 0;
};
Result<PromotionResult> Promotion(const Setup& setup, const PromotionOptions& options);

// (f) migration under kill -9 (stop-type ASHA with placement.migrate):
// real hpo-worker processes in CPU cgroups - one fast device, the others
// slow - train the built-in Fashion-MNIST MLP. A trial that survives a rung
// on a slow device pauses to move to the fast one (trial.moving), and the
// fast device's less advanced trial pauses to make room (trial.preempted);
// each pause saves and uploads a checkpoint. The workers hold every pause's
// save (HPO_WORKER_TEST_PAUSE_HOLD_MS: the upload in two halves with a
// hold between, and a hold between the upload and the Pause), and
// `kills` times the worker of a pausing trial is killed -9 inside a hold,
// alternately before its new checkpoint was committed and after (then
// always when the segment resumed from a checkpoint, the case where the
// previous one is at stake; the last `resumed_kills` wait for such a
// segment); a new worker takes its place. Each killed
// trial is followed until it runs again: it must go back to the point of
// the checkpoint it had before (none: from scratch) or, when the new one
// was committed whole, of that one, with that checkpoint in the store,
// whole, and its curve cut there; it must then be resumed from that point,
// not restarted. At the end the experiment must have ended (no trial left
// paused, leased or pending), and every trial's steps must run 1..n.
// FailedPrecondition (the caller skips): no hpo-worker, no writable CPU
// cgroup (needs root), or no Fashion-MNIST data.
struct MigrationOptions {
  int kills = 10;
  // Of the kills, the last ones wait for the pause of a segment that had
  // resumed from a checkpoint (rarer: a preempted trial resumed on a slow
  // device and moving again), whose previous checkpoint is at stake.
  int resumed_kills = 3;
  int slow_workers = 2;  // one fast worker besides
  double fast_cpus = 1.0, slow_cpus = 0.25;
  int lease_timeout_s = 3;
  int max_trials = 60;        // the experiment's budget: it ends when they have
  int steps = 8;              // per trial; ASHA rungs at 1, 2 and 4 (reduction factor 2)
  int train_samples = 30000;  // per step (an epoch of the built-in trainer's max_train_samples)
  std::chrono::milliseconds hold{1000};
  std::chrono::seconds timeout{900};  // for the whole run
};
struct MigrationResult {
  int kills = 0;
  // Kills that landed between the pause's decision and its acknowledged
  // Pause (the killed worker's log has the hold's line and not the pause's),
  // and of those: before the new checkpoint was committed, and after.
  int kills_in_checkpoint = 0, kills_mid_upload = 0, kills_after_commit = 0;
  int kills_of_resumed = 0;  // of kills_in_checkpoint: segments that had resumed from a checkpoint
  int64_t moves = 0, preemptions = 0;  // trial.moving and trial.preempted events
  // Killed trials (in a checkpoint) that ran again, from the point of the
  // checkpoint they had before the kill (0: none) or of the new one.
  int resumed = 0, resumed_from_previous = 0, resumed_from_new = 0;
  // Killed trials that went back to an earlier point than their previous
  // checkpoint's, or restarted from step 1 by the server: progress lost.
  int lost = 0;
  // After a kill, the checkpoint in the store was not the one of the point
  // the trial went back to, or did not read back whole; or a worker could
  // not restore it (trial.restarted by the worker).
  int corrupt = 0;
  int not_followed = 0;  // killed trials not seen running again within the run
  // Trials whose stored steps are not 1..n, or not cut at their point
  // after a kill.
  int curve_gaps = 0;
  int stuck = 0;  // trials not ended when the run ended
  int64_t trials = 0, completed = 0, pruned = 0, failed = 0;
  std::string experiment_state;
  std::vector<std::string> samples;  // what went wrong, the first few
  double duration_s = 0;
};
Result<MigrationResult> Migration(const Setup& setup, const MigrationOptions& options);

// Load: simulated workers (Register, Lease, Heartbeat + Report per step,
// Complete) and REST clients against one server for `duration`.
struct LoadOptions {
  int workers = 200;
  int rest_clients = 20;
  std::chrono::seconds duration{300};
  int experiments = 4;
  int steps = 5;
  std::chrono::milliseconds step_time{1000};
  std::chrono::milliseconds deadline{10'000};  // per call: longer is an error
  // The experiments' rule ("none", "median", "asha", "hyperband"): with one,
  // every report is judged against the experiment's trials.
  std::string early_stopping = "none";
  std::vector<std::string> server_args;  // extra hpo-server flags
};
struct LoadResult {
  int64_t rpcs = 0, rpc_errors = 0;
  std::map<std::string, int64_t> rpc_error_codes;
  std::vector<std::string> rpc_error_samples;
  double rpc_p50_ms = 0, rpc_p99_ms = 0, rpc_max_ms = 0;
  // The p99 of each kind of RPC ("lease", "report", "pause", ...).
  std::map<std::string, double> call_p99_ms;
  int64_t rest_calls = 0, rest_errors = 0;
  std::vector<std::string> rest_error_samples;
  double rest_p50_ms = 0, rest_p99_ms = 0, rest_max_ms = 0;
  int64_t reports = 0, trials_completed = 0;
  double server_peak_rss_mb = 0;
};
Result<LoadResult> RunLoad(const Setup& setup, const LoadOptions& options);

}  // namespace hpo::testing
