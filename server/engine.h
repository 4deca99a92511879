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

#include <nlohmann/json.hpp>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "search/history.h"
#include "search/pruner.h"
#include "search/sampler.h"
#include "scheduler/placement.h"
#include "scheduler/speed_model.h"
#include "server/metrics.h"
#include "server/spec.h"
#include "server/store/store.h"

namespace hpo::server {

// Limits on what one call may carry, the same over REST and gRPC; beyond
// one the call fails with InvalidArgument naming the limit.
inline constexpr size_t kMaxMetricsPerReport = 256;  // metrics in one report or in final metrics
inline constexpr size_t kMaxSystemKeys = 64;         // keys of a reported system setting
inline constexpr size_t kMaxNameLength = 256;        // a metric name, system key, label, host or device name
inline constexpr size_t kMaxValueLength = 1024;      // a label or system value (as JSON text)
// A failure reason (with the log tail a worker sends) longer than this is
// cut, not refused: the trial's end must still be recorded.
inline constexpr size_t kMaxReasonLength = 64 * 1024;

struct EngineOptions {
  int64_t worker_lease_ms = 60'000;         // a worker renews by reporting or heartbeating
  int64_t client_lease_ms = 24 * 3'600'000;  // ask/tell clients are slower
  int max_attempts = 3;                      // leases per trial before it fails
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
  // so on one server it is what a fresh read gives). Zero: read every trial
  // and measurement of the experiment on every report and every top-up.
  std::chrono::milliseconds history_cache{1000};
  // How old the fleet placement and co-tuning read on a lease may be
  // (workers, devices and the latest 5,000 speed observations; this
  // engine's own observations are added at once, and a device it has not
  // seen reloads it). Zero: read it on every lease that needs it.
  std::chrono::milliseconds fleet_cache{1000};
};

enum class Decision { kContinue, kPrune, kStop };
std::string_view ToString(Decision d);

struct TrialReport {
  store::Id trial_id = 0;
  std::string owner;
  int64_t step = 0;
  nlohmann::json metrics = nlohmann::json::object();  // must hold the objective metric
  double samples_per_sec = 0;
  nlohmann::json system = nlohmann::json::object();   // the system setting this step used
  // The device it ran on; with samples_per_sec > 0 the step is also a speed
  // observation for (device class, workload, system setting).
  std::optional<store::Id> device_id;
};

// The answer to a report.
struct ReportReply {
  Decision decision = Decision::kContinue;
  // When set (with kContinue): the system setting the next epoch should use
  // (co-tuning, see scheduler/cotuner.h).
  std::optional<nlohmann::json> new_system;
  std::string reason;  // why: "pruned by asha at step 3", "probe threads=1", ...
};

// A trial as handed out, with what is needed to run it.
struct Assignment {
  store::TrialRecord trial;
  std::shared_ptr<const ExperimentSpec> spec;
  std::string space;  // its search space's name
};

class Engine {
 public:
  explicit Engine(store::Store& store, EngineOptions options = {});

  store::Store& store() { return store_; }
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
  Status CancelExperiment(store::Id id, std::string_view reason);
  Result<std::shared_ptr<const ExperimentSpec>> Spec(store::Id experiment_id);
  // The completed trial with the best objective, if any.
  Result<std::optional<store::TrialRecord>> BestTrial(store::Id experiment_id);

  // Trials -----------------------------------------------------------------
  // For a worker: a trial of the oldest running experiment that has work
  // for workers (builtin or command executor). nullopt: nothing to do now.
  // With the device known, the trial starts at the fastest system setting
  // measured so far for that device class and workload.
  Result<std::optional<Assignment>> LeaseForWorker(store::Id worker_id,
                                                   std::optional<store::Id> device_id = std::nullopt);
  // For an ask/tell client: `count` new trials, leased to kClientOwner.
  // FailedPrecondition: not a client experiment, or it has ended.
  Result<std::vector<Assignment>> Suggest(store::Id experiment_id, int count);
  // Records a step and answers continue (maybe with a new system setting),
  // prune (the trial is now pruned) or stop (the experiment ended; the trial
  // is now cancelled).
  Result<ReportReply> Report(const TrialReport& report);
  Status Complete(store::Id trial_id, const std::string& owner, bool failed,
                  const nlohmann::json& final_metrics, const std::string& reason);

  // Housekeeping, called periodically: requeues or fails trials whose lease
  // expired, ends experiments past their wall time or their trial budget.
  Status Tick();
  // The first part of Tick alone, cheap enough to call every 100 ms (an
  // indexed UPDATE that usually matches nothing): puts each trial whose
  // lease expired back to pending, or fails it after its last attempt, and
  // announces it ("trial.requeued" or "trial.finished").
  Status ReclaimExpiredLeases();

  // What a trial's speed is measured against: the trainer (or the
  // command's program) and the search space, e.g. "fashion-mnist-cnn/cnn".
  static std::string Workload(const ExperimentSpec& spec, const std::string& space);

  // The trials of one experiment as the search library sees them, one
  // History per space (in spec order), read from the store now. Public for
  // the dashboard and tests.
  Result<std::vector<search::History>> Histories(store::Id experiment_id,
                                                 const ExperimentSpec& spec);

 private:
  // Histories with where each trial is in them.
  struct HistoryView {
    std::vector<search::History> histories;             // one per space, in spec order
    std::map<store::Id, std::pair<size_t, size_t>> where;  // trial id -> (space, index)
    std::map<store::Id, size_t> space_index;               // space id -> index
    std::chrono::steady_clock::time_point loaded;
  };
  struct Cached {
    std::shared_ptr<const ExperimentSpec> spec;
    std::map<std::string, store::Id> space_ids;  // by space name
    std::unique_ptr<search::Pruner> pruner;
    std::mutex replenish_mu;  // one batch at a time per experiment
    // What early stopping judges against and the samplers suggest from
    // (EngineOptions::history_cache).
    std::mutex history_mu;  // after replenish_mu when both are held
    std::optional<HistoryView> history;  // GUARDED_BY(history_mu)
  };
  Result<Cached*> Load(store::Id experiment_id);
  Result<HistoryView> ReadHistories(store::Id experiment_id, const ExperimentSpec& spec);
  // With c.history_mu held: the cached view, reread when older than
  // history_cache.
  Result<HistoryView*> HistoryLocked(store::Id experiment_id, Cached& c);
  // Adds a trial the view does not hold yet (ReadHistories, and with the
  // view's lock held, trials created since); a trial of no space of the
  // spec, or not of its space's shape, is left out.
  void AddToHistory(HistoryView& view, const ExperimentSpec& spec, const store::TrialRecord& trial) const;
  // Puts a report (step, objective value as minimized; `inserted`: new to
  // the store) into the cached view and, when `judge`, asks the
  // early-stopping rule about the trial's newest point (reading the view
  // first if it is too old). Without `judge` and without a view it does
  // nothing.
  Result<bool> ApplyReport(const store::TrialRecord& trial, Cached& c, int64_t step, double value, bool inserted,
                           bool judge);
  // Applies one of this engine's changes to the cached view of a trial, if
  // the view holds it (an absent trial is read with the next refresh).
  void UpdateCachedTrial(Cached& c, store::Id trial_id, search::TrialStatus status,
                         std::optional<double> value);
  // Drops the cached view of an experiment's trials, if there is one.
  void ForgetHistory(store::Id experiment_id);
  // Creates up to `count` new trials (within the budget, and leaving at most
  // `max_unfinished` unfinished if set) chosen by the space ranking and the
  // spec's sampler.
  Result<std::vector<store::TrialRecord>> CreateSuggestions(store::Id experiment_id, Cached& c,
                                                            int64_t count,
                                                            std::optional<int64_t> max_unfinished);
  // "trial.created" for each; called without replenish_mu held.
  void EmitCreated(store::Id experiment_id, const std::vector<store::TrialRecord>& created) const;
  // Tops the pending pool up to max_parallel unfinished trials, unless
  // another thread is doing so for this experiment right now.
  Status Replenish(store::Id experiment_id, Cached& c);
  // Ends the experiment when every trial of its budget has finished.
  Status MaybeFinish(store::Id experiment_id, const ExperimentSpec& spec);
  std::optional<double> Objective(const ExperimentSpec& spec, const std::string& metrics_json) const;
  void Emit(std::string type, nlohmann::json data) const {
    if (options_.on_event) options_.on_event(std::move(type), data);
  }

  store::Store& store_;
  EngineOptions options_;
  // Metrics, or null: registered once, updated without locks.
  metrics::Histogram* suggest_seconds_ = nullptr;
  metrics::Histogram* report_seconds_ = nullptr;
  metrics::Histogram* lease_seconds_ = nullptr;
  metrics::Counter* leases_granted_ = nullptr;
  metrics::Counter* leases_empty_ = nullptr;
  Result<std::string> DeviceClass(store::Id device_id);
  // The fleet as placement and co-tuning see it: devices per class, the
  // speed model (benchmarks as the prior, reports by setting) and each
  // device's class. One for the engine (EngineOptions::fleet_cache).
  struct FleetView {
    scheduler::Fleet fleet;
    scheduler::SpeedModel model;
    std::map<store::Id, std::string> device_classes;  // by device id
    std::chrono::steady_clock::time_point loaded;
  };
  // With fleet_mu_ held: the view, reloaded unless it was loaded within
  // fleet_cache before `asked` (a lease's start) and knows device_id.
  Result<FleetView*> FleetLocked(store::Id device_id, std::chrono::steady_clock::time_point asked);
  // Placement (scheduler/placement.h): the pending trial this device should
  // run given the fleet's measured speeds and the spaces' priorities, leased
  // to the worker. nullopt: no choice to make, or it was taken meanwhile.
  Result<std::optional<store::TrialRecord>> LeasePlaced(store::Id experiment_id, Cached& c,
                                                        store::Id worker_id, store::Id device_id,
                                                        std::chrono::steady_clock::time_point asked);
  // Co-tuning after a report: maybe a new system setting for the next epoch.
  Result<ReportReply> CoTune(const ExperimentSpec& spec, const TrialReport& r);
  // Overrides the assignment's tunable system parameters with the fastest
  // setting measured for the device's class and the workload.
  Status StartAtBestSetting(const ExperimentSpec& spec, store::Id device_id,
                            std::chrono::steady_clock::time_point asked, Assignment& a);

  std::mutex fleet_mu_;
  std::optional<FleetView> fleet_;  // GUARDED_BY(fleet_mu_)
  std::mutex mu_;
  std::map<store::Id, std::unique_ptr<Cached>> cache_;  // GUARDED_BY(mu_)
  std::map<store::Id, std::string> device_classes_;     // GUARDED_BY(mu_)
};

}  // namespace hpo::server
