// The experiment engine: the server's logic, independent of REST and gRPC.
// It turns specs into experiments, asks search/ what to try (in batches, as
// many as the experiment may run at once), hands trials to workers and
// ask/tell clients, asks the early-stopping rule on every report, and ends
// experiments at their budget.
//
// Everything durable lives in the store; the engine caches only what it can
// rebuild (parsed specs, samplers), so a restarted server - or a second one
// on the same PostgreSQL - continues where the first left off. Two caches
// trade freshness for reads, each bounded in time (EngineOptions): an
// experiment's trials, which the early-stopping rule judges each report
// against and the samplers suggest from, and the fleet (devices and
// measured speeds) placement reads on a lease. This server's own changes
// show in them at once; another replica's within the bound.
//
// Thread-safe: any number of transport threads may call it at once.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/batcher.h"
#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "scheduler/cotuner.h"
#include "scheduler/policy.h"
#include "scheduler/speed_model.h"
#include "search/history.h"
#include "search/promotion.h"
#include "search/pruner.h"
#include "search/random.h"
#include "search/sampler.h"
#include "server/engine/fleet_view.h"
#include "server/engine/trial_view.h"
#include "server/engine/work_signal.h"
#include "server/metrics/metrics.h"
#include "server/spec/spec.h"
#include "server/store/artifact_store.h"
#include "server/store/store.h"

namespace hpo::server {

// Limits on what one call may carry, the same over REST and gRPC; beyond
// one the call fails with InvalidArgument naming the limit.
inline constexpr size_t kMaxMetricsPerReport = 256;  // metrics in one report or in final metrics
inline constexpr size_t kMaxSystemKeys = 64;         // keys of a reported system setting
inline constexpr size_t kMaxNameLength =
    256;  // a metric name, system key, label, host or device name
inline constexpr size_t kMaxValueLength = 1024;      // a label or system value (as JSON text)
inline constexpr size_t kMaxDevicesPerWorker = 256;  // devices in one registration
inline constexpr size_t kMaxLabels = 64;             // labels of one worker
// Trial ids in one heartbeat. A worker runs one trial per device, so it
// never needs more; each id is a statement of the renewal.
inline constexpr size_t kMaxTrialsPerHeartbeat = kMaxDevicesPerWorker;
// New trials made in one batch for the devices that asked at once (one
// sampler call per space: TPE's and the GP's batch suggestions spread them
// with fantasized results, whose cost grows with the batch).
inline constexpr size_t kMaxNewTrialsPerBatch = 32;

// Free text a caller sends that the server keeps and passes on (stored
// reasons, events, every page that lists them). Each kind has one limit and
// is cut to it by CapText, here in the engine, so REST and gRPC (which reach
// the store only through the engine) keep the same text. Cut, never
// refused:
//  * a failure reason or log tail: the trial's end must still be recorded;
//  * a cancel reason: the point of the call is to stop the experiment's
//    work, and a long note (a script pasting an alert or a log) should not
//    leave the fleet busy; the kept part says it was cut. It is the
//    smallest limit because it is a person's note and it travels in the
//    "experiment.finished" event, which then still fits one notification
//    to the other replicas (store::Store::kMaxChangePayload).
enum class FreeText {
  kFailureReason,  // why a trial failed (a worker's or a client's words); the start is kept
  kLogTail,        // what a failed trial's program printed last; the end is kept
  kCancelReason,   // why a user cancelled an experiment; the start is kept
};
inline constexpr size_t kMaxReasonLength = size_t{64} * 1024;       // kFailureReason
inline constexpr size_t kMaxLogTailLength = size_t{64} * 1024;      // kLogTail
inline constexpr size_t kMaxCancelReasonLength = size_t{4} * 1024;  // kCancelReason
// The limit of one kind of free text.
size_t MaxLength(FreeText field);
// `text`, or when it is longer than the field's limit, its start (or, for a
// log tail, its end) with a "(cut)" note, at most the limit in bytes in all
// and never splitting a UTF-8 character.
std::string CapText(FreeText field, std::string_view text);

struct EngineOptions {
  int64_t worker_lease_ms = 60'000;  // a worker renews by reporting or heartbeating
  int64_t client_lease_ms = int64_t{24} * 3'600'000;  // ask/tell clients are slower
  int max_attempts = 3;                               // leases per trial before it fails
  // Called after each change this engine makes ("experiment.created",
  // "experiment.finished", "trial.created", "trial.reported",
  // "trial.finished"), from the calling thread. Changes made by other
  // servers on the same database are not seen here.
  std::function<void(std::string type, const nlohmann::json& data)> on_event;
  // Where suggest/report/lease latencies and counters go (none when null).
  metrics::Registry* metrics = nullptr;
  // How old the trials an early-stopping decision or a suggestion reads may
  // be (another replica's trials and reports; this engine's own new trials,
  // reports, prunes and completions are applied to the cached copy at once,
  // so on one server it is what a fresh read gives). A reread reads what
  // changed since the last (trial_view.h). Also how old the list of running
  // experiments a lease looks through may be. Zero: reread on every report,
  // every top-up and every lease.
  std::chrono::milliseconds history_cache{1000};
  // How old the fleet placement and co-tuning read on a lease, and GET
  // /workers' measured speeds, may be (workers, devices and the latest 5,000
  // speed observations; this engine's own observations are added at once,
  // and a device it has not seen reloads it). Zero: read it on every lease
  // that needs it.
  std::chrono::milliseconds fleet_cache{1000};
  // Milliseconds since the epoch, as the store's clock reads them (how long
  // a trial has waited is the difference of the two); the system clock
  // when unset. Tests share theirs with the store's.
  std::function<int64_t()> clock;
  // The steady clock placement counts on: the time between a trial's
  // reports (samples per step), how long a device is still busy, and the
  // now a lease or a move is decided at (FleetView); the caches' ages
  // (history_cache, fleet_cache) stay real time. std::chrono::steady_clock
  // when unset. Tests move it with `clock`, and drive the engine in
  // virtual time with both.
  std::function<std::chrono::steady_clock::time_point()> steady_clock;
  // Where paused trials' checkpoints live (server/store/artifact_store.h);
  // it must outlive the engine. Null: this server keeps none, so checkpoint
  // uploads and downloads fail with FailedPrecondition and every pause is
  // recorded without one (its trial restarts if promoted).
  store::ArtifactStore* artifacts = nullptr;
  // How often Tick deletes the checkpoints of trials that ended (however
  // they ended, on whichever replica) and that nothing deleted yet.
  std::chrono::milliseconds checkpoint_sweep{10'000};
  // A worker unseen (no call at all) for this many lease timeouts is gone:
  // Tick marks it and announces "worker.gone". Its leases expired long
  // before (after one), so this only says it is not expected back; three
  // rides out a server restart or a network blip without a false alarm.
  int worker_gone_after = 3;
  // A gone worker unseen for this long is deleted with its devices
  // (trials and measured speeds that came from it stay). A week keeps it
  // listable (?include_gone) across a weekend; zero: never deleted.
  std::chrono::milliseconds worker_retention{7LL * 24 * 3'600'000};
};

// kPause: the trial reached its lease's stop_step (promotion-type early
// stopping): the worker uploads its checkpoint and pauses it.
enum class Decision { kContinue, kPrune, kStop, kPause };
std::string_view ToString(Decision d);

struct TrialReport {
  store::Id trial_id = 0;
  std::string owner;
  int64_t step = 0;
  nlohmann::json metrics = nlohmann::json::object();  // must hold the objective metric
  double samples_per_sec = 0;
  nlohmann::json system = nlohmann::json::object();  // the system setting this step used
  // The device it ran on; with samples_per_sec > 0 the step is also a speed
  // observation for (device class, workload, system setting).
  std::optional<store::Id> device_id;
  // What the program can change, as its worker declares (worker.proto
  // ReportRequest.system_changes): empty, nothing declared, and the spec's
  // `mutable` decides alone; otherwise co-tuning probes only what both
  // allow mid-trial, and a spec parameter left out is unknown to the
  // program (a trial.system_unknown event at the lease's first report).
  std::map<std::string, scheduler::SystemChange> system_changes = {};
  // The values the program says it applied (ReportRequest.applied): stored
  // over `system` where they differ, as what the step really ran.
  nlohmann::json applied = nlohmann::json::object();
};

// The answer to a report.
struct ReportReply {
  Decision decision = Decision::kContinue;
  // When set (with kContinue): the system setting the next epoch should use
  // (co-tuning, see scheduler/cotuner.h).
  std::optional<nlohmann::json> new_system;
  std::string reason;  // why: "pruned by asha at step 3", "probe threads=1", ...
};

// Who a worker's call comes from: the id its Register returned and the
// session secret that came with it.
struct WorkerCaller {
  store::Id worker_id = 0;
  std::string session;
};

// A worker as it announces itself.
struct WorkerRegistration {
  std::string host;
  // Stable across the worker's restarts, distinct among the workers on its
  // host (see store::NewWorker::instance); empty: a new worker every time.
  std::string instance;
  // With an instance: the identity secret its first registration returned
  // (RegisteredWorker::identity_secret); empty when the worker has none.
  std::string identity_secret;
  std::map<std::string, std::string> labels;
  // Each device's device_class is derived by the engine (whatever is set).
  std::vector<store::DeviceInfo> devices;
};

struct RegisteredWorker {
  store::WorkerRecord worker;
  // The secret its later calls present (64 hex characters, from 32 random
  // bytes). Handed out once: the store keeps only its SHA-256.
  std::string session;
  // Set when this registration made a new worker for an instance: the
  // secret (64 hex characters, 32 random bytes) that registering this
  // identity again needs. Handed out once: the store keeps only its SHA-256.
  std::string identity_secret;
};

class Engine;

// A checkpoint on its way in from the worker that holds the trial's lease
// (Engine::BeginCheckpointUpload). Destroyed without a successful Commit,
// it is abandoned and the trial keeps its previous checkpoint.
class CheckpointUpload {
 public:
  // DataLoss: more bytes than announced.
  Status Append(std::string_view bytes);
  // Makes it the trial's checkpoint if the bytes match `sha256` and the
  // worker still holds the lease (FailedPrecondition otherwise: the trial
  // moved on meanwhile). DataLoss: the bytes do not match. A checkpoint of
  // the step the trial was told to pause at (its stop_step, reported; with
  // placement.migrate, its last reported step: a move or a preemption) also
  // pauses the trial there, as Engine::PauseTrial would: the worker's Pause
  // that follows is then a retry.
  Status Commit(std::string_view sha256);

 private:
  friend class Engine;
  CheckpointUpload(Engine& engine, store::Id trial_id, int64_t step, std::string owner,
                   std::unique_ptr<store::CheckpointWriter> writer)
      : engine_(engine),
        trial_id_(trial_id),
        step_(step),
        owner_(std::move(owner)),
        writer_(std::move(writer)) {}
  Engine& engine_;
  const store::Id trial_id_;
  const int64_t step_;
  const std::string owner_;
  std::unique_ptr<store::CheckpointWriter> writer_;
};

// A leased trial as handed out (to a worker's device or an ask/tell
// client), with what is needed to run it. Not search::Assignment, which is
// a point of a search space.
struct Lease {
  store::TrialRecord trial;
  std::shared_ptr<const ExperimentSpec> spec;
  std::string space;  // its search space's name
};

// An experiment's best trial, as GET .../best and hpctl answer it.
struct BestTrialResult {
  store::TrialRecord trial;
  // False: `trial` completed, judged by its final metrics (`step` is
  // steps_per_trial). True: no trial completed, and `trial` (paused,
  // pruned, running, cancelled or failed) is the one whose best report is
  // the best of any: at `step`, with that report's metrics. It was not
  // trained to its full budget, so the value is a partial result.
  bool partial = false;
  int64_t step = 0;
  std::string metrics_json;  // final metrics, or the best report's
  // Partial only: the step of the checkpoint the artifact store keeps of
  // the trial (the rung it paused at), if any. SweepCheckpoints keeps it
  // after the trial ended, rather than delete it with other ended trials'.
  std::optional<int64_t> checkpoint_step;
};

class Engine {
 public:
  explicit Engine(store::Store& store, EngineOptions options = {});

  const EngineOptions& options() const { return options_; }
  static std::string WorkerOwner(store::Id worker_id);
  static constexpr const char* kClientOwner = "client";
  // A trial starts at the fastest system setting measured for its device
  // class and workload once that setting has this many observations.
  static constexpr int kMinObservationsToReuseSetting = 2;

  // Experiments ------------------------------------------------------------
  // Parses and validates the spec (YAML or JSON); InvalidArgument names the
  // field. Creates the experiment and its first batch of trials.
  Result<store::ExperimentRecord> CreateExperiment(const std::string& spec_text);
  // Every check CreateExperiment makes, and nothing written: what a dry run
  // (POST /api/v1/experiments:validate) answers with. It reads the store:
  // cost.prices must name a registered device class or worker label.
  Result<ExperimentSpec> ValidateExperiment(const std::string& spec_text);
  // Ends the experiment and cancels its unfinished trials. The reason is
  // cut to kMaxCancelReasonLength and kept once, on the experiment (and in
  // its "experiment.finished" event); each trial's says "experiment
  // cancelled".
  Status CancelExperiment(store::Id id, std::string_view reason);
  Result<std::shared_ptr<const ExperimentSpec>> Spec(store::Id experiment_id);
  // The completed trial with the best objective (ties: the lower number).
  // While none has completed, the trial of any other state with the best
  // reported objective at any step, marked partial, so that an experiment
  // whose trials measured anything never ends without a best (e.g. a
  // promotion budget too small for any trial to reach the last rung).
  // nullopt: no trial completed or reported a value of the objective.
  Result<std::optional<BestTrialResult>> BestTrial(store::Id experiment_id);
  // What a dry run warns of in a valid spec: e.g. a promotion-type budget
  // (top fraction) whose max_trials cannot bring any trial to its last rung.
  // Pure: the spec alone.
  static std::vector<std::string> SpecWarnings(const ExperimentSpec& spec);

  // Reads, as the store answers them (server/store/store.h), for the pages
  // and listings of the REST API: the engine is the only way to the store.
  // OK when the store answers (its schema version reads): the server is ready.
  Status CheckStore();
  Result<store::ExperimentRecord> GetExperiment(store::Id id);
  Result<std::vector<store::ExperimentRecord>> ListExperiments(int64_t offset, int64_t limit);
  Result<store::TrialCounts> CountTrials(store::Id experiment_id);
  // Device time and money its trials' stored steps used (cost.budget).
  Result<store::Usage> ExperimentUsage(store::Id experiment_id);
  // How far its trials numbered first..last got (store::TrialProgress),
  // their best steps by the experiment's objective.
  Result<std::map<store::Id, store::TrialProgress>> ListTrialProgress(store::Id experiment_id,
                                                                      int64_t first_number,
                                                                      int64_t last_number);
  Result<store::TrialRecord> GetTrial(store::Id id);
  Result<std::vector<store::TrialRecord>> ListTrials(store::Id experiment_id,
                                                     const store::TrialFilter& filter);
  // The leased and running trials of every running experiment, in one read.
  Result<std::vector<store::TrialRecord>> ListLeasedTrials(int64_t limit);
  Result<std::vector<store::MeasurementRecord>> ListMeasurements(store::Id trial_id);
  // A trial's kept events (KeepTrialEvent), oldest first, the newest `limit`.
  Result<std::vector<store::TrialEventRecord>> ListTrialEvents(store::Id trial_id, int64_t limit);
  Result<std::vector<store::MeasurementRecord>> ListExperimentMeasurements(store::Id experiment_id);
  Result<std::vector<store::MeasurementRecord>> ListExperimentMeasurementsSince(
      store::Id experiment_id, int64_t since);
  // Where a read that starts now stands among the store's changes (store::ReadCursor).
  Result<store::ReadCursor> ReadHorizon();
  Result<std::vector<store::WorkerRecord>> ListWorkers();
  // Speed observations of one workload (all when empty), at most `limit`.
  Result<std::vector<store::SpeedObservationRecord>> ListSpeedObservations(
      std::string_view workload, int64_t limit);
  // The newest measured speed per device and workload: the fleet view's
  // (FleetView::Measured), this engine's reports at once, other replicas'
  // within fleet_cache.
  Result<MeasuredSpeeds> Measured();

  // Workers ----------------------------------------------------------------
  // Every call of a worker but RegisterWorker names the worker and presents
  // its session (WorkerCaller), and fails before doing anything else with
  // NotFound when no such worker is registered (register again) or
  // PermissionDenied when the session is missing or not that worker's (the
  // message never repeats what was sent). Checking is cheap: each worker's
  // registration is read once and kept, and read again only when a session
  // does not match it (the worker may have registered again, elsewhere).
  //
  // Validates the worker (InvalidArgument names the field, e.g.
  // "devices[1].name: must not be empty"; at most kMaxDevicesPerWorker
  // devices with distinct ordinals, kMaxLabels labels), derives each
  // device's class from what it is ("cpu:<name>:x<cores, 1 decimal>" or
  // "cuda:<name>"), and stores it with a new session: as a new worker, or
  // with an instance and that identity's secret, as the worker of that
  // (host, instance) again (same id, same device ids by ordinal; its older
  // session no longer works). Without the secret (store::Store::
  // RegisterWorker): AlreadyExists while that worker is live (seen within
  // worker_lease_ms), saying what to do; once it is not, a new worker with
  // a new id takes the identity and the old one keeps its id, session and
  // leases. Announces "worker.registered" (worker_id, host, instance, and
  // took_identity_of when it took one).
  Result<RegisteredWorker> RegisterWorker(const WorkerRegistration& w);
  // How the worker stands now: "live" (seen within the lease timeout: its
  // devices are placed on), "silent" (not seen since: not placed on, its
  // leases expire) or "gone" (marked by SweepWorkers, or it left:
  // LeaveWorker).
  std::string_view WorkerState(const store::WorkerRecord& w) const;
  // OK when `caller` is a registered worker with its own session.
  Status AuthenticateWorker(const WorkerCaller& caller);
  // Marks the worker seen and renews its leases on `trial_ids` (at most
  // kMaxTrialsPerHeartbeat, else InvalidArgument) in one store call.
  // Returns the ids it could not renew - the trial went on without this
  // worker (pruned, cancelled, lease lost to expiry) or is unknown - which
  // the worker should stop.
  Result<std::vector<store::Id>> Heartbeat(const WorkerCaller& caller,
                                           const std::vector<store::Id>& trial_ids);
  // The worker stops and says so: it is gone now (store::Store::
  // MarkWorkerGone; "worker.gone" with `left` true, once, and
  // hpo_workers_gone_total), its devices leave the fleet view, and the
  // leases it still holds end as expired ones do (Reclaim:
  // "trial.requeued" with reason "worker left"). Returns those trials'
  // ids. Repeating it changes nothing more; its next Lease or Heartbeat
  // counts it live again.
  Result<std::vector<store::Id>> LeaveWorker(const WorkerCaller& caller);

  // Trials -----------------------------------------------------------------
  // For a worker's device: marks the worker seen, then a trial of the oldest
  // running experiment that has work for workers (builtin or command
  // executor), started at the fastest system setting measured so far for
  // the device's class and the workload. nullopt: nothing to do now.
  // NotFound: the device is not one of this worker's.
  // `held`, when given, is every trial the worker holds (it makes one lease
  // call at a time): first the leases it does not hold - answers that never
  // reached it - end as if expired, so their trials run again at once.
  Result<std::optional<Lease>> LeaseForWorker(
      const WorkerCaller& caller, store::Id device_id,
      const std::optional<std::vector<store::Id>>& held = std::nullopt);
  // What a lease that found nothing waits on before it asks again (a long
  // poll): the count of this engine's changes that may give an idle device
  // work (an experiment or trial created; a trial paused, finished,
  // requeued or restarted), and a wait until it moves past `seen` or
  // `deadline` passes (the count then). Another replica's changes do not
  // move it: a wait on one of several servers ends at its deadline.
  uint64_t WorkEpoch() const { return work_.Epoch(); }
  uint64_t WaitForWork(uint64_t seen, std::chrono::steady_clock::time_point deadline) const {
    return work_.WaitChange(seen, deadline);
  }
  // For an ask/tell client: `count` new trials, leased to kClientOwner.
  // FailedPrecondition: not a client experiment, or it has ended.
  Result<std::vector<Lease>> Suggest(store::Id experiment_id, int count);
  // Records a step and answers continue (maybe with a new system setting),
  // prune (the trial is now pruned) or stop (the experiment ended; the trial
  // is now cancelled). The caller vouches for report.owner (REST passes
  // kClientOwner); a worker's report comes through the overload below.
  // NotFound for an unregistered device_id, and InvalidArgument for a step
  // past the trial's last (ExperimentSpec::LastStep, CheckStep), before
  // anything is stored.
  Result<ReportReply> Report(const TrialReport& report);
  // A worker's report: as its lease owner (report.owner is ignored), and
  // NotFound, before anything is stored, when report.device_id is not one of
  // its devices.
  Result<ReportReply> Report(const WorkerCaller& caller, TrialReport report);
  // Ends the trial: completed with final metrics (the objective taken from
  // the last report if missing) or failed with a reason (cut to
  // kMaxReasonLength). Finishing a finished trial again is OK and changes
  // nothing - no event, no cache update - when it is the owner's same
  // finish (a retried call); otherwise FailedPrecondition saying why.
  Status Complete(store::Id trial_id, const std::string& owner, bool failed,
                  const nlohmann::json& final_metrics, const std::string& reason);
  // A worker's completion, as its lease owner. A failed trial's reason is
  // followed by the end of its program's output (log_tail, cut to
  // kMaxLogTailLength); on success the tail says nothing the metrics do not.
  Status Complete(const WorkerCaller& caller, store::Id trial_id, bool failed,
                  const nlohmann::json& final_metrics, const std::string& reason,
                  const std::string& log_tail);

  // Checkpoints (promotion-type early stopping; server/engine/engine_checkpoints.cc).
  // Each is a worker's call about a trial whose lease it holds (leased or
  // running under WorkerOwner(worker)); a trial it does not hold is
  // FailedPrecondition naming the trial and what it is now.
  //
  // A new checkpoint of the trial, taken after `step` (not before the step
  // it resumed after, nor past the trial's last: CheckStep), of
  // `total_bytes` (ResourceExhausted over the artifact store's limit,
  // naming it). FailedPrecondition also when this server keeps no
  // checkpoints.
  Result<std::unique_ptr<CheckpointUpload>> BeginCheckpointUpload(const WorkerCaller& caller,
                                                                  store::Id trial_id, int64_t step,
                                                                  int64_t total_bytes);
  // The checkpoint a resumed trial restores (its resume_step's). NotFound:
  // it has none, or only one of another step; the worker then restarts it
  // (RestartTrial). FailedPrecondition: the trial did not resume.
  Result<std::unique_ptr<store::CheckpointReader>> OpenCheckpoint(const WorkerCaller& caller,
                                                                  store::Id trial_id);
  // Pauses the trial after `step`, the last step it reported ("trial.paused"
  // with experiment_id, trial_id, step, level and checkpoint). With
  // `checkpoint_uploaded`, the trial's checkpoint must be of that step;
  // without one (or with one of another step) the pause is recorded
  // without a checkpoint (any older one is deleted), so a promotion
  // restarts it from scratch. InvalidArgument: `step` is not its last
  // reported step. A repeated pause (a retried call) is acknowledged once,
  // and so is the Pause of a worker whose upload of the rung's checkpoint,
  // to this server, already paused the trial, even when a promotion has
  // since leased it again (it changes nothing then). FailedPrecondition:
  // the caller does not hold the trial's lease, and no pause of its took
  // effect; or the lease resumed the trial after `step` and has reported
  // nothing since (a late Pause of the segment before).
  Status PauseTrial(const WorkerCaller& caller, store::Id trial_id, int64_t step,
                    bool checkpoint_uploaded);
  // The worker could not restore the resumed trial's checkpoint: it trains
  // from scratch under the same lease (store::Store::RestartTrial), the
  // checkpoint is deleted and "trial.restarted" says why (`reason`, cut
  // like a failure reason). A trial that already starts from scratch is
  // acknowledged and left as it is.
  Status RestartTrial(const WorkerCaller& caller, store::Id trial_id, const std::string& reason);
  // For the lease path, before it resumes a paused trial: whether its
  // checkpoint is there and of the step it paused at (resume_step), read
  // from what the checkpoint says of itself (the bytes are verified by the
  // worker that downloads them). When not, `why` says what is wrong: resume
  // it with restart = true and call AnnounceRestart. Always false when this
  // server keeps no checkpoints.
  Result<bool> CheckpointUsable(const store::TrialRecord& paused, std::string* why = nullptr);
  // "trial.restarted" (experiment_id, trial_id, reason, by "server") for a
  // trial resumed from scratch because its checkpoint was unusable; deletes
  // what is left of that checkpoint and forgets the trial's cached curve
  // (its steps were deleted).
  void AnnounceRestart(const store::TrialRecord& trial, const std::string& reason);
  // Deletes the checkpoints of trials that ended (or do not exist), but for
  // the partial best of an experiment that no trial completed (BestTrial):
  // its weights are that experiment's only result. Tick calls it every
  // EngineOptions::checkpoint_sweep.
  Status SweepCheckpoints();

  // Marks gone the workers unseen for worker_gone_after lease timeouts
  // ("worker.gone" with worker_id, host, instance and last_seen_ms, once
  // across replicas; hpo_workers_gone_total) and deletes the gone ones
  // unseen for worker_retention. Tick calls it.
  Status SweepWorkers();

  // Housekeeping, called periodically: requeues or fails trials whose lease
  // expired, ends experiments past their wall time or their trial budget,
  // deletes the checkpoints of trials that ended (SweepCheckpoints), and
  // marks and prunes workers that went away (SweepWorkers).
  Status Tick();
  // The first part of Tick alone, cheap enough to call every 100 ms (an
  // indexed UPDATE that usually matches nothing): puts each trial whose
  // lease expired back to pending, or fails it after its last attempt, and
  // announces it ("trial.requeued" or "trial.finished").
  Status ReclaimExpiredLeases();

  // Drops the cached view of an experiment's trials, if there is one: the
  // next decision reads them from the store (a change made around this
  // engine counts at once rather than within history_cache).
  void ForgetHistory(store::Id experiment_id);
  // Trials this engine keeps in memory for search and placement, in the
  // experiments' views and in their samplers' copies (a trial counted once
  // per copy). Tick drops both for an experiment that is no longer
  // running, and exports the sum as hpo_engine_kept_trials.
  size_t KeptTrials();
  // Devices waiting for the next batch of this experiment's new trials
  // (server/engine/lease.cc), for tests and diagnostics; 0 when it is not
  // loaded.
  size_t NewTrialsWaiting(store::Id experiment_id);

  // The system parameters co-tuned inside trials (not affects_accuracy).
  static std::vector<std::string> TunableNames(const ExperimentSpec& spec);
  // What a trial's speed is measured against, the speed model's workload
  // key of one space (WorkloadKey, server/spec/spec.h): the spec's
  // `workload:` name plus the space, or e.g.
  // "fashion-mnist-cnn/cnn@6f1c0e9a2b3d4c5e", shared by runs of the same
  // program and space, never by unrelated programs that share an
  // interpreter (python3).
  static std::string Workload(const ExperimentSpec& spec, const std::string& space);

 private:
  // What one new trial is made for: an ask/tell client's suggestion, or
  // placement's answer to a device that asked.
  struct NewTrialFor {
    // In this space unless it is at its share of the trials after one more
    // (search::BelowShareAfterOneMore; then, as with none, the space
    // ranking's pick): trials made in one batch for many devices keep the
    // ranking's split, as one at a time would.
    std::optional<int> space;
    // Non-empty: created leased to this owner, in the same transaction.
    std::string owner;
    int64_t lease_ms = 0;
    // Its lease ends at the promotion rule's first rung for its trial number
    // (promotion-type early stopping).
    bool to_first_rung = false;
  };
  struct NewTrialRequest {
    NewTrialFor wanted;
    std::optional<store::TrialRecord> made;  // none: the budget or max_parallel ran out
  };
  struct Cached {
    std::shared_ptr<const ExperimentSpec> spec;
    std::map<std::string, store::Id> space_ids;      // by space name
    std::unique_ptr<search::Pruner> pruner;          // stopping-type early stopping
    std::optional<search::PromotionRule> promotion;  // promotion-type
    Mutex replenish_mu;  // one batch of suggestions at a time per experiment
    // What early stopping judges against, the samplers suggest from and
    // placement offers (EngineOptions::history_cache); its own lock, taken
    // after replenish_mu when both are held.
    std::unique_ptr<TrialView> trials;
    // The histories a batch of suggestions is drawn from, copied from
    // `trials` and kept between batches (only what changed is copied again).
    HistoriesCopy sampling HPO_GUARDED_BY(replenish_mu);
    std::atomic<size_t> sampling_trials{0};  // in `sampling`, read without replenish_mu
    // The new trials devices ask for (server/engine/lease.cc): those that
    // ask while a batch is being made queue and are made together in the
    // next, one batch at a time (two made at once from the same history
    // would be the same suggestion). One at a time, a fleet that asked at
    // once queued for one suggestion each (bench/load's lease
    // p99 of 4 s under ASHA).
    std::unique_ptr<Batcher<NewTrialRequest>> new_trials;
    // The paused or pending trials a lease in flight chose and has not yet
    // written (lease.cc, LeaseClaim): other leases plan without them.
    // Before, every lease that asked at once chose the same promotion, and
    // all but one lost the race in the store and planned again (bench/load's
    // lease tail).
    Mutex claims_mu;
    std::unordered_set<store::Id> claimed HPO_GUARDED_BY(claims_mu);
    // Migration (placement.migrate; lease.cc, MaybeMove): the steps where a
    // trial that survived its rung may move (ascending; empty: it never
    // does), what each of the experiment's devices runs as its lease or last
    // report left it (the trial and the rungs it has passed, by device id),
    // and the trials asked to pause at their next report to make room for
    // a more advanced one, with why.
    std::vector<int64_t> rung_steps;
    struct OnDevice {
      store::Id trial_id = 0;
      int rungs = 0;
    };
    Mutex moves_mu;
    std::unordered_map<store::Id, OnDevice> on_device HPO_GUARDED_BY(moves_mu);
    std::unordered_map<store::Id, std::string> preempted HPO_GUARDED_BY(moves_mu);
    // Moved trials not yet resumed, by the class they move toward (a class
    // with as many on their way as it has live devices is no target for
    // another), and each one's class.
    std::unordered_map<std::string, int> moving_to HPO_GUARDED_BY(moves_mu);
    std::unordered_map<store::Id, std::string> moving_class HPO_GUARDED_BY(moves_mu);
    // With cost.budget: what the trials have spent, read from the store on
    // load and at every tick (which counts other replicas' reports too),
    // plus this server's reports since.
    Mutex usage_mu;
    store::Usage used HPO_GUARDED_BY(usage_mu);
  };
  // Money left of the experiment's cost.budget (infinity without one).
  static double BudgetLeft(Cached& c);
  // An experiment that is no longer running: its view and its samplers'
  // copy go (a server that runs experiment after experiment would keep
  // every ended one's otherwise).
  void ForgetEnded(store::Id experiment_id);
  Result<Cached*> Load(store::Id experiment_id);
  // Load for the loops over every running experiment (leases, ticks): an
  // experiment whose stored spec this server cannot read (written by a
  // newer version, say) is skipped, null, logged and remembered once per
  // server, so that it does not stop the others' work. Its REST reads answer Load's
  // DATA_LOSS, so it is not hidden.
  Result<Cached*> LoadUnlessUnreadable(store::Id experiment_id) HPO_EXCLUDES(mu_);
  Cached* Find(store::Id experiment_id) HPO_EXCLUDES(mu_);  // the cached entry, or null
  // What samplers and the space ranking draw from: deterministic for
  // (seed, experiment, trials so far), so a restarted server suggests what
  // the old one would have.
  static search::Rng ExperimentRng(const ExperimentSpec& spec, store::Id experiment_id,
                                   size_t trials_so_far);
  // The spec's cost section against the fleet: every priced class or label
  // names a registered device or worker, and a deadline is in the future.
  Status CheckCost(const ExperimentSpec& spec);
  // Creates a new trial for each of `wanted`, in its order, drawn by the
  // spec's sampler (one call per space for all of a space's trials, so a
  // batch is spread, not the same suggestion again), as many of the first
  // ones as the budget allows while leaving at most `max_unfinished`
  // unfinished if set; the records in `wanted`'s order (maybe fewer).
  Result<std::vector<store::TrialRecord>> CreateSuggestions(store::Id experiment_id, Cached& c,
                                                            const std::vector<NewTrialFor>& wanted,
                                                            std::optional<int64_t> max_unfinished)
      HPO_REQUIRES(c.replenish_mu);
  // The batch of new trials that devices asked for at once (Cached::
  // new_trials): one CreateSuggestions for all, each request's trial back in
  // it (none where the budget or max_parallel ran out).
  std::vector<Status> MakeNewTrials(store::Id experiment_id, Cached& c,
                                    const std::vector<NewTrialRequest*>& batch);
  // "trial.created" for each, with what a view of the trials needs to add
  // it without a read (number, space, params, state, level); called
  // without replenish_mu held. `placed`, when an object, joins each event:
  // a trial made for the device that asked says which device and the
  // policy's reason.
  void EmitCreated(store::Id experiment_id, const Cached& c,
                   const std::vector<store::TrialRecord>& created,
                   const nlohmann::json& placed = nullptr) const;
  // Ends the experiment when every trial of its budget has finished and, for
  // promotion-type early stopping, no paused trial may be promoted any more
  // (the paused ones are then pruned, as never promoted).
  // `after_change`: called after one of this engine's changes (a completion,
  // a prune, a pause), where a view that holds fewer trials than the budget
  // settles it without the store's count (a scan of the experiment's trials,
  // on every completion: a fifth of the server's CPU at 10,000 trials); the
  // ticks count in the store, so another replica's trials count there.
  Status MaybeFinish(store::Id experiment_id, Cached& c, bool after_change = true);
  // ReclaimExpiredLeases, whose events say which of the leases ended
  // for `why` rather than by expiry (`ended`: answers that never reached
  // the worker, or a worker that left).
  Status Reclaim(const std::vector<store::Id>& ended, std::string_view why = "lease answer lost");
  // Complete's body, with the reason already cut.
  Status Finish(store::Id trial_id, const std::string& owner, bool failed,
                const nlohmann::json& final_metrics, const std::string& why);
  // What a worker's session is checked against, and its devices: read once
  // per worker, again when a session does not match (a re-registration).
  struct WorkerAuth {
    std::string session_hash;
    std::set<store::Id> devices;
    int64_t touched_ms = 0;  // when TouchWorker last wrote its last_seen_ms (NowMs)
    // The session that last matched session_hash: the next call with it is
    // compared with it (in constant time) rather than hashed again (a
    // SHA-256 per call cost the server's CPU under load). In memory only; the store keeps the hash.
    std::string verified_session;
  };
  Result<WorkerAuth> Authenticate(const WorkerCaller& caller);
  // store::Store::TouchWorker, unless this engine wrote it within the last
  // tenth of a worker lease (at most a second): a worker's every lease and
  // heartbeat wrote it before. A worker that is not there
  // (pruned) is forgotten by Authenticate's cache too.
  Status TouchWorker(store::Id worker_id);
  // NotFound unless `device_id` is one of the worker's.
  static Status CheckDevice(const WorkerCaller& caller, const WorkerAuth& auth,
                            store::Id device_id);
  // A lease for the worker (authenticated) on one of its devices.
  Result<std::optional<Lease>> GrantLease(store::Id worker_id, store::Id device_id);
  int64_t NowMs() const;
  // EngineOptions::steady_clock's now.
  std::chrono::steady_clock::time_point SteadyNow() const;
  friend class CheckpointUpload;
  // FailedPrecondition unless `trial` is leased or running under `owner`.
  static Status CheckHolds(const store::TrialRecord& trial, const std::string& owner,
                           std::string_view action);
  // PauseTrial once the caller is known to hold `trial`'s lease.
  Status PauseHeld(const store::TrialRecord& trial, const std::string& owner, int64_t step,
                   bool checkpoint_uploaded);
  // Best effort: deletes the trial's checkpoint now that it ended (the sweep
  // retries what fails).
  void DeleteCheckpoint(store::Id trial_id);
  // Whether a trial that ends may leave a checkpoint to delete at once: one
  // of an experiment whose trials pause at rungs, or one that paused and
  // resumed. Any other (a checkpoint uploaded by a worker that died before
  // its pause) is left to the sweep, rather than every trial's end costing
  // a delete.
  static bool MayHaveCheckpoint(const Cached& c, int level, int64_t resume_step) {
    return c.promotion.has_value() || level > 0 || resume_step > 0;
  }
  Mutex sweep_mu_;
  std::chrono::steady_clock::time_point last_sweep_ HPO_GUARDED_BY(sweep_mu_);

  // The running experiments, oldest first, as a lease looks through them:
  // read at most history_cache ago (another replica's new or ended
  // experiments count within it), and again after this engine created or
  // ended one (a list of every experiment, specs included, was a
  // round trip and a few percent of the server's CPU per lease).
  using ExperimentList = std::shared_ptr<const std::vector<store::ExperimentRecord>>;
  Result<ExperimentList> RunningExperiments() HPO_EXCLUDES(experiments_mu_);
  void ExperimentsChanged() HPO_EXCLUDES(experiments_mu_);
  Mutex experiments_mu_;
  ExperimentList running_experiments_ HPO_GUARDED_BY(experiments_mu_);

  // A trial's experiment and space, which never change: a report needs its
  // spec and workload before its write, and read the whole trial for them
  // (a round trip per report). Kept for the trials this engine
  // made or leased, and read on a miss; cleared whole when it holds
  // kMaxTrialHomes (misses refill it).
  struct TrialHome {
    store::Id experiment_id = 0;
    std::optional<store::Id> space_id;
    int64_t number = 0;  // within the experiment, for events
  };
  static constexpr size_t kMaxTrialHomes = 200'000;
  Result<TrialHome> HomeOf(store::Id trial_id) HPO_EXCLUDES(homes_mu_);
  void RememberHome(const store::TrialRecord& trial) HPO_EXCLUDES(homes_mu_);
  Mutex homes_mu_;
  std::unordered_map<store::Id, TrialHome> trial_homes_ HPO_GUARDED_BY(homes_mu_);

  // A step's device time (Measurement::device_ms): by trial, when its
  // device was last charged up to. A segment leased here is charged from
  // its lease, then each report from the one before; one leased by another
  // replica or before a restart is charged from its first report here.
  // Cleared whole at kMaxTrialHomes.
  void StartCharge(store::Id trial_id) HPO_EXCLUDES(charge_mu_);
  // Milliseconds since the trial's device was last charged (0 when not
  // known), charging it up to now.
  int64_t ChargeDeviceMs(store::Id trial_id) HPO_EXCLUDES(charge_mu_);
  Mutex charge_mu_;
  std::unordered_map<store::Id, int64_t> charged_until_ms_ HPO_GUARDED_BY(charge_mu_);

  // The device each trial this server leased runs on, by trial, so that a
  // segment's end frees its device in the fleet view at once (placement's
  // free times, hold-back, migration) rather than when the lease's estimate
  // runs out, and migration no longer counts the trial as running there.
  // Cleared whole at kMaxTrialHomes.
  void SegmentEnded(Cached& c, store::Id trial_id) HPO_EXCLUDES(leased_on_mu_);
  Mutex leased_on_mu_;
  std::unordered_map<store::Id, store::Id> leased_on_ HPO_GUARDED_BY(leased_on_mu_);

  // The pauses that uploads of a rung's checkpoint made (CheckpointUpload::
  // Commit), by trial: the owner and step, so that the owner's own Pause,
  // which may arrive after a promotion leased the trial again, is
  // acknowledged (PauseTrial). This server's uploads only: a Pause that
  // reaches another replica after a promotion is refused, as before.
  // Cleared whole at kMaxUploadPauses.
  struct UploadPause {
    std::string owner;
    int64_t step = 0;
  };
  static constexpr size_t kMaxUploadPauses = 100'000;
  void RememberUploadPause(store::Id trial_id, const std::string& owner, int64_t step)
      HPO_EXCLUDES(upload_pauses_mu_);
  bool PausedByUpload(store::Id trial_id, const std::string& owner, int64_t step)
      HPO_EXCLUDES(upload_pauses_mu_);
  Mutex upload_pauses_mu_;
  std::unordered_map<store::Id, UploadPause> upload_pauses_ HPO_GUARDED_BY(upload_pauses_mu_);
  std::chrono::steady_clock::time_point running_experiments_read_ HPO_GUARDED_BY(experiments_mu_);

  void Emit(std::string type, const nlohmann::json& data) const {
    // What may give an idle device work: a new experiment or trial, a
    // trial that paused (a rung's results changed: one may be promotable)
    // or left its device (finished, requeued, restarted).
    if (type == "experiment.created" || type == "trial.created" || type == "trial.paused" ||
        type == "trial.finished" || type == "trial.requeued" || type == "trial.restarted") {
      work_.Notify();
    }
    KeepTrialEvent(type, data);
    if (options_.on_event) options_.on_event(std::move(type), data);
  }
  // A trial's event between its steps (paused, resumed, moving, preempted,
  // requeued, restarted, system capped or unknown, co-tuning stopped) goes
  // to the store too, for the trial's history (Store::AddTrialEvent); a
  // failure to keep it is logged, not the caller's.
  void KeepTrialEvent(const std::string& type, const nlohmann::json& data) const;
  mutable WorkSignal work_;

  store::Store& store_;
  EngineOptions options_;
  // Metrics, or null: registered once, updated without locks.
  metrics::Histogram* suggest_seconds_ = nullptr;
  metrics::Histogram* report_seconds_ = nullptr;
  metrics::Histogram* lease_seconds_ = nullptr;
  metrics::Counter* leases_granted_ = nullptr;
  metrics::Counter* leases_empty_ = nullptr;
  metrics::Counter* workers_gone_ = nullptr;
  metrics::Gauge* kept_trials_ = nullptr;
  // Placement for one experiment (scheduler/policy.h; server/engine/lease.cc):
  // the work it offers this device - promotable paused trials, pending
  // trials, a new trial per space while budget and max_parallel allow -
  // and the policy's choice among them (`without_new`: no new trial offered).
  class LeaseClaim;  // lease.cc
  struct LeasePlan {
    std::vector<scheduler::WorkItem> items;
    std::vector<search::Promotion> promotions;  // parallel to items: the kResume items'
    scheduler::PolicyDecision decision;
  };
  Result<LeasePlan> PlanLease(const store::ExperimentRecord& e, Cached& c, store::Id device_id,
                              std::chrono::steady_clock::time_point asked, bool without_new);
  // Carries out the plan's decision for the worker's device: the trial
  // leased, or none when another lease took it first (or the budget or
  // max_parallel ran out for a new one).
  Result<std::optional<store::TrialRecord>> ApplyPlan(const store::ExperimentRecord& e, Cached& c,
                                                      const LeasePlan& plan, store::Id worker_id,
                                                      store::Id device_id);
  // The policy's options for this experiment's spec, budget and fleet.
  scheduler::PolicyOptions PolicyFor(Cached& c, const FleetSnapshot& fleet,
                                     const store::ExperimentRecord& e, int64_t now_ms);
  // Migration after a report the trial survived (stop-type early stopping,
  // placement.migrate): a pause, when the trial was preempted, or when it
  // passed a rung and a faster device would finish it sooner
  // (scheduler::DecideMove), which may preempt a less advanced trial there;
  // nullopt to go on here. Best effort: a fleet that cannot be read moves
  // nothing.
  std::optional<ReportReply> MaybeMove(Cached& c, const store::TrialRecord& trial,
                                       const TrialReport& r, const std::string& workload);
  // What the device runs now, for MaybeMove (a lease or a report of it).
  static void NoteOnDevice(Cached& c, store::Id device_id, store::Id trial_id, int64_t step);
  // A report's answer once its experiment ended: the trial cancelled (unless
  // the experiment's end finished it already) with the experiment's reason,
  // the worker told to stop.
  Result<ReportReply> StopForEndedExperiment(const TrialReport& r, store::Id experiment_id,
                                             store::ExperimentState state);
  // Co-tuning after a report: maybe a new system setting for the next epoch.
  // `inserted`: the report was new (not a retry), so its events are due.
  // `workload`: the trial's (Workload), whose speeds measured on the
  // device's class spare it probes (scheduler::KnownSpeeds).
  Result<ReportReply> CoTune(const store::TrialRecord& trial, const ExperimentSpec& spec,
                             const TrialReport& r, bool inserted, const std::string& workload);
  // The system parameters co-tuned within this trial's epochs on this
  // device: the spec's throughput-only ones, probed only where the spec and
  // the worker's declaration allow it (scheduler::RestrictToDeclared), with
  // threads capped at the device's limit (DeviceThreadLimit). `unknown`, when
  // given, gets the spec's parameters (all of them) the declaration lacks.
  Result<std::vector<scheduler::SystemDimension>> CoTunedDimensions(
      const ExperimentSpec& spec, const std::map<std::string, scheduler::SystemChange>& declared,
      std::optional<store::Id> device_id, std::vector<std::string>* unknown);
  // Overrides the lease's tunable system parameters with the fastest
  // setting measured for the device's class and the workload, then brings
  // threads within what the device takes (a trial.system_capped event says
  // so when the spec's range goes beyond it).
  Status StartAtBestSetting(const ExperimentSpec& spec, store::Id device_id,
                            std::chrono::steady_clock::time_point asked, Lease& a);

  std::unique_ptr<FleetView> fleet_;
  Mutex mu_;
  std::map<store::Id, std::unique_ptr<Cached>> cache_ HPO_GUARDED_BY(mu_);
  std::map<store::Id, WorkerAuth> workers_ HPO_GUARDED_BY(mu_);
  std::set<store::Id> unreadable_ HPO_GUARDED_BY(mu_);  // see LoadUnlessUnreadable
};

}  // namespace hpo::server
