// The engine's state, caches, locks and helpers: what is behind
// engine.h's Engine, which forwards each call here. Included only by the
// engine's own files (server/engine/*.cc); the public section keeps the
// contracts engine.h states, and the rest is how they are kept.
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
#include "server/engine/engine.h"
#include "server/engine/fleet_view.h"
#include "server/engine/space_map.h"
#include "server/engine/trial_view.h"
#include "server/engine/work_signal.h"
#include "server/metrics/metrics.h"
#include "server/spec/spec.h"
#include "server/store/artifact_store.h"
#include "server/store/store.h"

namespace hpo::server {

class EngineImpl {
 public:
  // Engine's calls (engine.h says what each does and promises), and the
  // constants and pure helpers the code here names unqualified.
  explicit EngineImpl(store::Store& store, EngineOptions options = {});

  const EngineOptions& options() const { return options_; }
  static std::string WorkerOwner(store::Id worker_id) { return Engine::WorkerOwner(worker_id); }
  static constexpr const char* kClientOwner = Engine::kClientOwner;
  static constexpr int kMinObservationsToReuseSetting = Engine::kMinObservationsToReuseSetting;

  Result<store::ExperimentRecord> CreateExperiment(const std::string& spec_text);
  Result<ExperimentSpec> ValidateExperiment(const std::string& spec_text);
  Status CancelExperiment(store::Id id, std::string_view reason);
  Result<std::shared_ptr<const ExperimentSpec>> Spec(store::Id experiment_id);
  Result<std::optional<BestTrialResult>> BestTrial(store::Id experiment_id);
  Result<std::vector<RankedTrial>> RankTrials(store::Id experiment_id);
  // Calls `visit` with each completed trial of the experiment, by number,
  // read a page at a time.
  Status ForEachCompleted(store::Id experiment_id,
                          const std::function<void(store::TrialRecord&)>& visit);
  static std::vector<std::string> SpecWarnings(const ExperimentSpec& spec) {
    return Engine::SpecWarnings(spec);
  }

  Status CheckStore();
  Result<store::ExperimentRecord> GetExperiment(store::Id id);
  Result<std::vector<store::ExperimentRecord>> ListExperiments(int64_t offset, int64_t limit);
  Result<store::TrialCounts> CountTrials(store::Id experiment_id);
  Result<store::Usage> ExperimentUsage(store::Id experiment_id);
  Result<std::map<store::Id, store::TrialProgress>> ListTrialProgress(store::Id experiment_id,
                                                                      int64_t first_number,
                                                                      int64_t last_number);
  Result<store::TrialRecord> GetTrial(store::Id id);
  Result<std::vector<store::TrialRecord>> ListTrials(store::Id experiment_id,
                                                     const store::TrialFilter& filter);
  Result<std::vector<store::TrialRecord>> ListLeasedTrials(int64_t limit);
  Result<std::vector<store::MeasurementRecord>> ListMeasurements(store::Id trial_id);
  Result<std::vector<store::TrialEventRecord>> ListTrialEvents(store::Id trial_id, int64_t limit);
  Result<std::vector<store::MeasurementRecord>> ListExperimentMeasurements(store::Id experiment_id);
  Result<std::vector<store::MeasurementRecord>> ListExperimentMeasurementsSince(
      store::Id experiment_id, int64_t since);
  Result<store::ReadCursor> ReadHorizon();
  Result<std::vector<store::WorkerRecord>> ListWorkers();
  Result<std::vector<store::SpeedObservationRecord>> ListSpeedObservations(
      std::string_view workload, int64_t limit);
  Result<MeasuredSpeeds> Measured();

  Result<RegisteredWorker> RegisterWorker(const WorkerRegistration& w);
  std::string_view WorkerState(const store::WorkerRecord& w) const;
  Status AuthenticateWorker(const WorkerCaller& caller);
  Result<std::vector<store::Id>> Heartbeat(const WorkerCaller& caller,
                                           const std::vector<store::Id>& trial_ids);
  Result<std::vector<store::Id>> LeaveWorker(const WorkerCaller& caller);

  Result<std::optional<Lease>> LeaseForWorker(
      const WorkerCaller& caller, store::Id device_id,
      const std::optional<std::vector<store::Id>>& held = std::nullopt);
  uint64_t WorkEpoch() const { return work_.Epoch(); }
  uint64_t WaitForWork(uint64_t seen, std::chrono::steady_clock::time_point deadline) const {
    return work_.WaitChange(seen, deadline);
  }
  Result<std::vector<Lease>> Suggest(store::Id experiment_id, int count);
  Result<ReportReply> Report(const TrialReport& report);
  Result<ReportReply> Report(const WorkerCaller& caller, TrialReport report);
  Status Complete(store::Id trial_id, const std::string& owner, bool failed,
                  const nlohmann::json& final_metrics, const std::string& reason);
  Status Complete(const WorkerCaller& caller, store::Id trial_id, bool failed,
                  const nlohmann::json& final_metrics, const std::string& reason,
                  const std::string& log_tail);

  Result<std::unique_ptr<CheckpointUpload>> BeginCheckpointUpload(const WorkerCaller& caller,
                                                                  store::Id trial_id, int64_t step,
                                                                  int64_t total_bytes);
  Result<std::unique_ptr<store::CheckpointReader>> OpenCheckpoint(const WorkerCaller& caller,
                                                                  store::Id trial_id);
  Status PauseTrial(const WorkerCaller& caller, store::Id trial_id, int64_t step,
                    bool checkpoint_uploaded);
  Status RestartTrial(const WorkerCaller& caller, store::Id trial_id, const std::string& reason);
  Result<bool> CheckpointUsable(const store::TrialRecord& paused, std::string* why = nullptr);
  void AnnounceRestart(const store::TrialRecord& trial, const std::string& reason);
  Status SweepCheckpoints();

  Status SweepWorkers();

  Status Tick();
  Status ReclaimExpiredLeases();

  void ForgetHistory(store::Id experiment_id);
  size_t KeptTrials();
  size_t NewTrialsWaiting(store::Id experiment_id);

  static std::vector<std::string> TunableNames(const ExperimentSpec& spec) {
    return Engine::TunableNames(spec);
  }
  static std::string Workload(const ExperimentSpec& spec, const std::string& space) {
    return Engine::Workload(spec, space);
  }

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
    SpaceMap spaces;                                 // ids, names and the spec's order
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
  // A completed trial's final metrics made whole: each objective it left
  // out taken from its last report that has it (InvalidArgument naming the
  // one none has), and the derived metrics the spec names added.
  Status CompleteFinalMetrics(const ExperimentSpec& spec, store::Id trial_id,
                              nlohmann::json& metrics);
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
