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
// engine.h is what the transports call (class Engine, below, with its
// thread-safety promise) and the types they pass; engine_impl.h is the
// state behind it.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "scheduler/cotuner.h"
#include "server/engine/fleet_view.h"
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

class EngineImpl;

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
  friend class EngineImpl;
  CheckpointUpload(EngineImpl& engine, store::Id trial_id, int64_t step, std::string owner,
                   std::unique_ptr<store::CheckpointWriter> writer)
      : engine_(engine),
        trial_id_(trial_id),
        step_(step),
        owner_(std::move(owner)),
        writer_(std::move(writer)) {}
  EngineImpl& engine_;
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
// A completed trial's place among its experiment's objectives and
// constraints (GET .../pareto, hpctl best and export).
struct RankedTrial {
  store::TrialRecord trial;
  std::vector<double> values;  // each objective's final value, as reported, in spec order
  bool feasible = true;
  std::vector<std::string> reasons;  // why it is infeasible
  // Its non-domination rank among the feasible completed trials (0: on the
  // front; with one objective, ties of the best value); none when
  // infeasible.
  std::optional<int> rank;
};

// The engine as its callers see it, grouped by caller: the REST API
// (server/http/api.cc), the workers' gRPC service (server/grpc/
// worker_service.cc), the server's housekeeping loop (server/server.cc),
// and tests. Its state, caches and locks are EngineImpl's
// (server/engine/engine_impl.h), which only the engine's own files see.
//
// Thread-safety: every method may be called from any number of threads at
// once, with no lock of the caller's held (the engine takes its own, and
// calls EngineOptions::on_event on the calling thread). Each call is
// atomic as the store makes it: a caller never sees a half-made
// experiment, lease or report. WaitForWork blocks its caller; nothing
// else waits on anything but the store.
class Engine {
 public:
  explicit Engine(store::Store& store, EngineOptions options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const EngineOptions& options() const;
  static std::string WorkerOwner(store::Id worker_id);
  static constexpr const char* kClientOwner = "client";
  // A trial starts at the fastest system setting measured for its device
  // class and workload once that setting has this many observations.
  static constexpr int kMinObservationsToReuseSetting = 2;

  // --- For the REST API: experiments, the pages' reads, and ask/tell ------
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
  // Every completed trial, by number, with its objective values,
  // feasibility and rank (RankedTrial).
  Result<std::vector<RankedTrial>> RankTrials(store::Id experiment_id);
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

  // For an ask/tell client: `count` new trials, leased to kClientOwner.
  // FailedPrecondition: not a client experiment, or it has ended.
  Result<std::vector<Lease>> Suggest(store::Id experiment_id, int count);

  // --- For both transports: reports and completions -----------------------
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

  // --- For the workers' gRPC service ---------------------------------------
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
  uint64_t WorkEpoch() const;
  uint64_t WaitForWork(uint64_t seen, std::chrono::steady_clock::time_point deadline) const;

  // Checkpoints (promotion-type early stopping and migration; engine_checkpoints.cc).
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

  // --- For the server's housekeeping loop (and SweepWorkers for REST) -----
  // Called from one thread, concurrently with everything above.
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

  // --- For tests and diagnostics -------------------------------------------
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

  // --- Pure: the spec alone -------------------------------------------------
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
  std::unique_ptr<EngineImpl> impl_;
};

}  // namespace hpo::server
