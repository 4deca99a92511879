// SqlStore: the Store rules, written once over a SqlDriver (SQLite or
// PostgreSQL). See store.h for the contract.
#pragma once

#include <memory>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "server/store/commit_batcher.h"
#include "server/store/sql_driver.h"
#include "server/store/store.h"

namespace hpo::store {

class SqlStore final : public Store {
 public:
  // Connects and applies pending migrations.
  static Result<std::unique_ptr<Store>> Open(std::unique_ptr<SqlDriver> driver,
                                             StoreOptions options);

  std::string_view backend() const override { return driver_->backend(); }
  const std::string& display_url() const override { return driver_->display_url(); }
  Result<int> SchemaVersion() override;

  Result<ExperimentRecord> CreateExperiment(const NewExperiment& e) override;
  Result<ExperimentRecord> GetExperiment(Id id) override;
  Result<ExperimentState> GetExperimentState(Id id) override;
  Result<std::vector<ExperimentRecord>> ListExperiments(int64_t offset, int64_t limit) override;
  Status FinishExperiment(Id id, ExperimentState state, std::string_view reason) override;

  Result<std::vector<TrialRecord>> CreateTrialsUpTo(Id experiment_id,
                                                    const std::vector<NewTrial>& trials,
                                                    const TrialLimits& limits) override;
  Result<TrialRecord> GetTrial(Id id) override;
  Result<std::vector<TrialRecord>> ListTrials(Id experiment_id, const TrialFilter& filter) override;
  Result<std::vector<TrialRecord>> ListLeasedTrials(int64_t limit) override;
  Result<TrialCounts> CountTrials(Id experiment_id) override;
  Result<std::optional<TrialRecord>> LeaseNextTrial(const LeaseRequest& req) override;
  Result<TrialRecord> LeaseTrial(Id trial_id, const std::string& owner, TimeMs lease_ms) override;
  Status RenewLease(Id trial_id, const std::string& owner, TimeMs lease_ms) override;
  Result<std::vector<Id>> RenewLeases(const std::vector<Id>& trial_ids, const std::string& owner,
                                      TimeMs lease_ms) override;
  Status PauseTrial(Id trial_id, const std::string& owner, int64_t step) override;
  Result<TrialRecord> ResumeTrial(Id trial_id, const std::string& owner, TimeMs lease_ms,
                                  std::optional<int64_t> stop_step, bool restart) override;
  Status RestartTrial(Id trial_id, const std::string& owner) override;
  Result<std::vector<Id>> ReclaimExpiredLeases(int max_attempts) override;
  Result<std::vector<Id>> ExpireLeasesNotHeld(const std::string& owner,
                                              const std::vector<Id>& held) override;
  using Store::ReportMeasurement;
  Result<ReportResult> ReportMeasurement(Id trial_id, const std::string& owner,
                                         const Measurement& m, std::optional<TimeMs> renew_lease_ms,
                                         const std::optional<SpeedObservation>& speed) override;
  Result<std::vector<MeasurementRecord>> ListMeasurements(Id trial_id) override;
  Result<std::vector<MeasurementRecord>> ListExperimentMeasurements(Id experiment_id) override;
  Result<Usage> ExperimentUsage(Id experiment_id) override;
  Status AddTrialEvent(Id trial_id, std::string_view type, const std::string& data_json) override;
  Result<std::vector<TrialEventRecord>> ListTrialEvents(Id trial_id, int64_t limit) override;
  Result<std::map<Id, TrialProgress>> ListTrialProgress(Id experiment_id, int64_t first_number,
                                                        int64_t last_number,
                                                        const Objective& objective) override;
  Result<std::vector<MeasurementRecord>> ListExperimentMeasurementsSince(Id experiment_id,
                                                                         int64_t since) override;
  Result<ReadCursor> ReadHorizon() override;
  Result<FinishResult> FinishTrial(Id trial_id, const std::string& owner,
                                   const FinishRequest& f) override;

  Result<WorkerRecord> RegisterWorker(const NewWorker& w) override;
  Result<WorkerRecord> GetWorker(Id worker_id) override;
  Status TouchWorker(Id worker_id) override;
  Result<std::vector<WorkerRecord>> ListWorkers() override;
  Result<std::vector<WorkerRecord>> MarkWorkersGone(TimeMs unseen_ms) override;
  Result<std::optional<WorkerRecord>> MarkWorkerGone(Id worker_id) override;
  Result<std::vector<Id>> PruneGoneWorkers(TimeMs unseen_ms) override;
  Result<Id> AddSpeedObservation(const SpeedObservation& o) override;
  Status NotifyChanges(const std::vector<std::string>& payloads) override;
  Result<std::unique_ptr<ChangeListener>> ListenForChanges() override;
  Result<std::vector<SpeedObservationRecord>> ListSpeedObservations(std::string_view workload,
                                                                    int64_t limit) override;

 private:
  SqlStore(std::unique_ptr<SqlDriver> driver, StoreOptions options);

  // Runs body(connection) in one transaction; converts SqlError and other
  // exceptions to a Status. Runs it again from the start when the failure
  // was a lost race (Aborted, up to kMaxConflictAttempts in all), or a lost
  // connection before anything was committed (once, on a fresh connection;
  // see LostStatement for a kSingle body's statement).
  // A kSingle body's statement lost with its connection may have been
  // applied: kReplay runs it again on a new connection (the call is
  // idempotent, or its duplicate harmless); kFail returns Unavailable, as
  // for a COMMIT that was lost.
  // REQUIRES: body is a function of its inputs and what it reads through
  // the connection only: it keeps nothing from one attempt to the next.
  enum class LostStatement { kReplay, kFail };
  template <typename F>
  auto Run(SqlConnection::TxMode mode, F&& body, LostStatement lost = LostStatement::kReplay);
  // CreateTrialsUpTo where the driver has stored functions (PostgreSQL):
  // the same rules in one statement.
  Result<std::vector<TrialRecord>> CreateTrialsInOneCall(Id experiment_id,
                                                         const std::vector<NewTrial>& trials,
                                                         const TrialLimits& limits);
  // Run for the batched calls (store.h, "Group commit"): body joins the
  // next batch through batcher_, or runs alone as Run(mode, body) when group
  // commit is off. `order` is the row it locks first (a trial's id).
  // REQUIRES: as Run's; the body's result type is default-constructible.
  template <typename F>
  auto RunBatched(SqlConnection::TxMode mode, int64_t order, F&& body);
  // CommitBatcher's commit function: the batch in one write transaction,
  // a savepoint per call; a batch of one through Run, in the call's mode.
  std::vector<Status> CommitBatch(const std::vector<const CommitBatcher::Call*>& batch);

  // Whether Run runs its body again after `s` on attempt `attempt` (0: the
  // first), the COMMIT sent or not; pauses first where a pause helps.
  bool RetryAfter(const Status& s, bool committing, int attempt);
  std::unique_ptr<SqlConnection> Acquire() HPO_EXCLUDES(mu_);
  void Release(std::unique_ptr<SqlConnection> c) HPO_EXCLUDES(mu_);
  void Migrate(SqlConnection& c);
  // BeforeMigrations, one transaction of Migrate and CheckMigrated,
  // AfterMigrations, all on one connection.
  Status MigrateOnOneConnection();
  TimeMs Now() const;

  std::unique_ptr<SqlDriver> driver_;
  StoreOptions options_;
  Mutex mu_;
  CondVar cv_;
  std::vector<std::unique_ptr<SqlConnection>> idle_ HPO_GUARDED_BY(mu_);
  int open_ HPO_GUARDED_BY(mu_) = 0;
  std::unique_ptr<CommitBatcher> batcher_;  // null: group commit off
};

}  // namespace hpo::store
