// Engine's calls, each forwarded to the EngineImpl behind it
// (engine_impl.h): what engine.h promises is kept there.
#include <memory>
#include <utility>

#include "server/engine/engine_impl.h"

namespace hpo::server {

Engine::Engine(store::Store& store, EngineOptions options)
    : impl_(std::make_unique<EngineImpl>(store, std::move(options))) {}

Engine::~Engine() = default;

const EngineOptions& Engine::options() const { return impl_->options(); }

Result<store::ExperimentRecord> Engine::CreateExperiment(const std::string& spec_text) {
  return impl_->CreateExperiment(spec_text);
}

Result<ExperimentSpec> Engine::ValidateExperiment(const std::string& spec_text) {
  return impl_->ValidateExperiment(spec_text);
}

Status Engine::CancelExperiment(store::Id id, std::string_view reason) {
  return impl_->CancelExperiment(id, reason);
}

Result<std::shared_ptr<const ExperimentSpec>> Engine::Spec(store::Id experiment_id) {
  return impl_->Spec(experiment_id);
}

Result<std::optional<BestTrialResult>> Engine::BestTrial(store::Id experiment_id) {
  return impl_->BestTrial(experiment_id);
}

Result<std::vector<RankedTrial>> Engine::RankTrials(store::Id experiment_id) {
  return impl_->RankTrials(experiment_id);
}

Status Engine::CheckStore() { return impl_->CheckStore(); }

Result<store::ExperimentRecord> Engine::GetExperiment(store::Id id) {
  return impl_->GetExperiment(id);
}

Result<std::vector<store::ExperimentRecord>> Engine::ListExperiments(int64_t offset,
                                                                     int64_t limit) {
  return impl_->ListExperiments(offset, limit);
}

Result<store::TrialCounts> Engine::CountTrials(store::Id experiment_id) {
  return impl_->CountTrials(experiment_id);
}

Result<store::Usage> Engine::ExperimentUsage(store::Id experiment_id) {
  return impl_->ExperimentUsage(experiment_id);
}

Result<std::map<store::Id, store::TrialProgress>> Engine::ListTrialProgress(store::Id experiment_id,
                                                                            int64_t first_number,
                                                                            int64_t last_number) {
  return impl_->ListTrialProgress(experiment_id, first_number, last_number);
}

Result<store::TrialRecord> Engine::GetTrial(store::Id id) { return impl_->GetTrial(id); }

Result<std::vector<store::TrialRecord>> Engine::ListTrials(store::Id experiment_id,
                                                           const store::TrialFilter& filter) {
  return impl_->ListTrials(experiment_id, filter);
}

Result<std::vector<store::TrialRecord>> Engine::ListLeasedTrials(int64_t limit) {
  return impl_->ListLeasedTrials(limit);
}

Result<std::vector<store::MeasurementRecord>> Engine::ListMeasurements(store::Id trial_id) {
  return impl_->ListMeasurements(trial_id);
}

Result<std::vector<store::TrialEventRecord>> Engine::ListTrialEvents(store::Id trial_id,
                                                                     int64_t limit) {
  return impl_->ListTrialEvents(trial_id, limit);
}

Result<std::vector<store::MeasurementRecord>> Engine::ListExperimentMeasurements(
    store::Id experiment_id) {
  return impl_->ListExperimentMeasurements(experiment_id);
}

Result<std::vector<store::MeasurementRecord>> Engine::ListExperimentMeasurementsSince(
    store::Id experiment_id, int64_t since) {
  return impl_->ListExperimentMeasurementsSince(experiment_id, since);
}

Result<store::ReadCursor> Engine::ReadHorizon() { return impl_->ReadHorizon(); }

Result<std::vector<store::WorkerRecord>> Engine::ListWorkers() { return impl_->ListWorkers(); }

Result<std::vector<store::SpeedObservationRecord>> Engine::ListSpeedObservations(
    std::string_view workload, int64_t limit) {
  return impl_->ListSpeedObservations(workload, limit);
}

Result<MeasuredSpeeds> Engine::Measured() { return impl_->Measured(); }

Result<std::vector<Lease>> Engine::Suggest(store::Id experiment_id, int count) {
  return impl_->Suggest(experiment_id, count);
}

Result<ReportReply> Engine::Report(const TrialReport& report) { return impl_->Report(report); }

Result<ReportReply> Engine::Report(const WorkerCaller& caller, TrialReport report) {
  return impl_->Report(caller, std::move(report));
}

Status Engine::Complete(store::Id trial_id, const std::string& owner, bool failed,
                        const nlohmann::json& final_metrics, const std::string& reason) {
  return impl_->Complete(trial_id, owner, failed, final_metrics, reason);
}

Status Engine::Complete(const WorkerCaller& caller, store::Id trial_id, bool failed,
                        const nlohmann::json& final_metrics, const std::string& reason,
                        const std::string& log_tail) {
  return impl_->Complete(caller, trial_id, failed, final_metrics, reason, log_tail);
}

Result<RegisteredWorker> Engine::RegisterWorker(const WorkerRegistration& w) {
  return impl_->RegisterWorker(w);
}

std::string_view Engine::WorkerState(const store::WorkerRecord& w) const {
  return impl_->WorkerState(w);
}

Status Engine::AuthenticateWorker(const WorkerCaller& caller) {
  return impl_->AuthenticateWorker(caller);
}

Result<std::vector<store::Id>> Engine::Heartbeat(const WorkerCaller& caller,
                                                 const std::vector<store::Id>& trial_ids) {
  return impl_->Heartbeat(caller, trial_ids);
}

Result<std::vector<store::Id>> Engine::LeaveWorker(const WorkerCaller& caller) {
  return impl_->LeaveWorker(caller);
}

Result<std::optional<Lease>> Engine::LeaseForWorker(
    const WorkerCaller& caller, store::Id device_id,
    const std::optional<std::vector<store::Id>>& held) {
  return impl_->LeaseForWorker(caller, device_id, held);
}

uint64_t Engine::WorkEpoch() const { return impl_->WorkEpoch(); }

uint64_t Engine::WaitForWork(uint64_t seen, std::chrono::steady_clock::time_point deadline) const {
  return impl_->WaitForWork(seen, deadline);
}

Result<std::unique_ptr<CheckpointUpload>> Engine::BeginCheckpointUpload(const WorkerCaller& caller,
                                                                        store::Id trial_id,
                                                                        int64_t step,
                                                                        int64_t total_bytes) {
  return impl_->BeginCheckpointUpload(caller, trial_id, step, total_bytes);
}

Result<std::unique_ptr<store::CheckpointReader>> Engine::OpenCheckpoint(const WorkerCaller& caller,
                                                                        store::Id trial_id) {
  return impl_->OpenCheckpoint(caller, trial_id);
}

Status Engine::PauseTrial(const WorkerCaller& caller, store::Id trial_id, int64_t step,
                          bool checkpoint_uploaded) {
  return impl_->PauseTrial(caller, trial_id, step, checkpoint_uploaded);
}

Status Engine::RestartTrial(const WorkerCaller& caller, store::Id trial_id,
                            const std::string& reason) {
  return impl_->RestartTrial(caller, trial_id, reason);
}

Status Engine::Tick() { return impl_->Tick(); }

Status Engine::ReclaimExpiredLeases() { return impl_->ReclaimExpiredLeases(); }

Status Engine::SweepCheckpoints() { return impl_->SweepCheckpoints(); }

Status Engine::SweepWorkers() { return impl_->SweepWorkers(); }

void Engine::ForgetHistory(store::Id experiment_id) { return impl_->ForgetHistory(experiment_id); }

size_t Engine::KeptTrials() { return impl_->KeptTrials(); }

size_t Engine::NewTrialsWaiting(store::Id experiment_id) {
  return impl_->NewTrialsWaiting(experiment_id);
}

Result<bool> Engine::CheckpointUsable(const store::TrialRecord& paused, std::string* why) {
  return impl_->CheckpointUsable(paused, why);
}

void Engine::AnnounceRestart(const store::TrialRecord& trial, const std::string& reason) {
  return impl_->AnnounceRestart(trial, reason);
}

}  // namespace hpo::server
