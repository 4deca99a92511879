// A Store that forwards every call to another one (LevelDB's EnvWrapper
// idea): a test overrides the one call it wants to delay or fail and keeps
// the real behaviour of the rest.
#pragma once

#include "server/store/store.h"

namespace hpo::testing {

class StoreWrapper : public store::Store {
 public:
  // `target` must outlive the wrapper.
  explicit StoreWrapper(store::Store& target) : t_(target) {}

  std::string_view backend() const override { return t_.backend(); }
  const std::string& display_url() const override { return t_.display_url(); }
  Result<int> SchemaVersion() override { return t_.SchemaVersion(); }
  Result<store::ExperimentRecord> CreateExperiment(const store::NewExperiment& e) override {
    return t_.CreateExperiment(e);
  }
  Result<store::ExperimentRecord> GetExperiment(store::Id id) override {
    return t_.GetExperiment(id);
  }
  Result<std::vector<store::ExperimentRecord>> ListExperiments(int64_t offset,
                                                               int64_t limit) override {
    return t_.ListExperiments(offset, limit);
  }
  Status FinishExperiment(store::Id id, store::ExperimentState state,
                          std::string_view reason) override {
    return t_.FinishExperiment(id, state, reason);
  }
  Result<std::vector<store::TrialRecord>> CreateTrialsUpTo(
      store::Id experiment_id, const std::vector<store::NewTrial>& trials,
      const TrialLimits& limits) override {
    return t_.CreateTrialsUpTo(experiment_id, trials, limits);
  }
  Result<store::TrialRecord> GetTrial(store::Id id) override { return t_.GetTrial(id); }
  Result<std::vector<store::TrialRecord>> ListTrials(store::Id experiment_id,
                                                     const store::TrialFilter& filter) override {
    return t_.ListTrials(experiment_id, filter);
  }
  Result<store::TrialCounts> CountTrials(store::Id experiment_id) override {
    return t_.CountTrials(experiment_id);
  }
  Result<std::vector<store::TrialRecord>> ListLeasedTrials(int64_t limit) override {
    return t_.ListLeasedTrials(limit);
  }
  Result<std::optional<store::TrialRecord>> LeaseNextTrial(
      const store::LeaseRequest& req) override {
    return t_.LeaseNextTrial(req);
  }
  Result<store::TrialRecord> LeaseTrial(store::Id trial_id, const std::string& owner,
                                        store::TimeMs lease_ms) override {
    return t_.LeaseTrial(trial_id, owner, lease_ms);
  }
  Status RenewLease(store::Id trial_id, const std::string& owner, store::TimeMs lease_ms) override {
    return t_.RenewLease(trial_id, owner, lease_ms);
  }
  Result<std::vector<store::Id>> RenewLeases(const std::vector<store::Id>& trial_ids,
                                             const std::string& owner,
                                             store::TimeMs lease_ms) override {
    return t_.RenewLeases(trial_ids, owner, lease_ms);
  }
  Status PauseTrial(store::Id trial_id, const std::string& owner, int64_t step) override {
    return t_.PauseTrial(trial_id, owner, step);
  }
  Result<store::TrialRecord> ResumeTrial(store::Id trial_id, const std::string& owner,
                                         store::TimeMs lease_ms, std::optional<int64_t> stop_step,
                                         bool restart) override {
    return t_.ResumeTrial(trial_id, owner, lease_ms, stop_step, restart);
  }
  Status RestartTrial(store::Id trial_id, const std::string& owner) override {
    return t_.RestartTrial(trial_id, owner);
  }
  Result<std::vector<store::Id>> ReclaimExpiredLeases(int max_attempts) override {
    return t_.ReclaimExpiredLeases(max_attempts);
  }
  Result<std::vector<store::Id>> ExpireLeasesNotHeld(const std::string& owner,
                                                     const std::vector<store::Id>& held) override {
    return t_.ExpireLeasesNotHeld(owner, held);
  }
  using store::Store::ReportMeasurement;
  Result<store::ReportResult> ReportMeasurement(
      store::Id trial_id, const std::string& owner, const store::Measurement& m,
      std::optional<store::TimeMs> renew_lease_ms,
      const std::optional<store::SpeedObservation>& speed) override {
    return t_.ReportMeasurement(trial_id, owner, m, renew_lease_ms, speed);
  }
  Result<std::vector<store::MeasurementRecord>> ListMeasurements(store::Id trial_id) override {
    return t_.ListMeasurements(trial_id);
  }
  Result<std::vector<store::MeasurementRecord>> ListExperimentMeasurements(
      store::Id experiment_id) override {
    return t_.ListExperimentMeasurements(experiment_id);
  }
  Status AddTrialEvent(store::Id trial_id, std::string_view type,
                       const std::string& data_json) override {
    return t_.AddTrialEvent(trial_id, type, data_json);
  }
  Result<std::vector<store::TrialEventRecord>> ListTrialEvents(store::Id trial_id,
                                                               int64_t limit) override {
    return t_.ListTrialEvents(trial_id, limit);
  }
  Result<store::Usage> ExperimentUsage(store::Id experiment_id) override {
    return t_.ExperimentUsage(experiment_id);
  }
  Result<std::map<store::Id, store::TrialProgress>> ListTrialProgress(
      store::Id experiment_id, int64_t first_number, int64_t last_number,
      const store::Objective& objective) override {
    return t_.ListTrialProgress(experiment_id, first_number, last_number, objective);
  }
  Result<std::vector<store::MeasurementRecord>> ListExperimentMeasurementsSince(
      store::Id experiment_id, int64_t since) override {
    return t_.ListExperimentMeasurementsSince(experiment_id, since);
  }
  Result<store::ReadCursor> ReadHorizon() override { return t_.ReadHorizon(); }
  Result<store::FinishResult> FinishTrial(store::Id trial_id, const std::string& owner,
                                          const store::FinishRequest& f) override {
    return t_.FinishTrial(trial_id, owner, f);
  }
  Result<store::WorkerRecord> RegisterWorker(const store::NewWorker& w) override {
    return t_.RegisterWorker(w);
  }
  Result<store::WorkerRecord> GetWorker(store::Id worker_id) override {
    return t_.GetWorker(worker_id);
  }
  Status TouchWorker(store::Id worker_id) override { return t_.TouchWorker(worker_id); }
  Result<std::vector<store::WorkerRecord>> ListWorkers() override { return t_.ListWorkers(); }
  Result<std::vector<store::WorkerRecord>> MarkWorkersGone(store::TimeMs unseen_ms) override {
    return t_.MarkWorkersGone(unseen_ms);
  }
  Result<std::optional<store::WorkerRecord>> MarkWorkerGone(store::Id worker_id) override {
    return t_.MarkWorkerGone(worker_id);
  }
  Result<std::vector<store::Id>> PruneGoneWorkers(store::TimeMs unseen_ms) override {
    return t_.PruneGoneWorkers(unseen_ms);
  }
  Result<store::Id> AddSpeedObservation(const store::SpeedObservation& o) override {
    return t_.AddSpeedObservation(o);
  }
  Result<std::vector<store::SpeedObservationRecord>> ListSpeedObservations(
      std::string_view workload, int64_t limit) override {
    return t_.ListSpeedObservations(workload, limit);
  }
  Status NotifyChanges(const std::vector<std::string>& payloads) override {
    return t_.NotifyChanges(payloads);
  }
  Result<std::unique_ptr<store::ChangeListener>> ListenForChanges() override {
    return t_.ListenForChanges();
  }

 private:
  store::Store& t_;
};

}  // namespace hpo::testing
