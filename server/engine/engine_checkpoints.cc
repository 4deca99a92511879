// The engine's checkpoint calls (see "Checkpoints" in server/engine/engine.h):
// uploads and downloads through the artifact store for the worker that
// holds a trial's lease, pausing at a rung, restarting a trial whose
// checkpoint cannot be used, and deleting checkpoints of trials that ended.
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "server/engine/engine_impl.h"

namespace hpo::server {

using nlohmann::json;
using store::Id;
using store::TrialState;

namespace {

std::string TrialName(Id id) { return "trial " + std::to_string(id); }

Status NoArtifactStore() {
  return Status::FailedPrecondition(
      "this server keeps no checkpoints (it was started without an artifact store)");
}

}  // namespace

Status EngineImpl::CheckHolds(const store::TrialRecord& trial, const std::string& owner,
                              std::string_view action) {
  const bool active = trial.state == TrialState::kLeased || trial.state == TrialState::kRunning;
  if (active && trial.lease_owner == owner) return Status::OK();
  std::string msg = "cannot " + std::string(action) + " " + TrialName(trial.id) +
                    ": it is not leased to '" + owner + "' (it is " +
                    std::string(store::ToString(trial.state));
  if (active) msg += ", leased to '" + trial.lease_owner + "'";
  return Status::FailedPrecondition(msg + ")");
}

void EngineImpl::DeleteCheckpoint(Id trial_id) {
  if (options_.artifacts) (void)options_.artifacts->Delete(trial_id);
}

Status CheckpointUpload::Append(std::string_view bytes) {
  Status s = writer_->Append(bytes);
  // The protocol's words for a size that does not match (worker.proto).
  if (s.IsInvalidArgument()) return Status::DataLoss(s.message());
  return s;
}

Status CheckpointUpload::Commit(std::string_view sha256) {
  // The lease may have expired while the bytes came in: a trial that moved
  // on (requeued, paused again at its old step, finished) keeps what it had.
  HPO_ASSIGN_OR_RETURN(const store::TrialRecord trial, engine_.store_.GetTrial(trial_id_));
  HPO_RETURN_IF_ERROR(EngineImpl::CheckHolds(trial, owner_, "commit a checkpoint of"));
  HPO_RETURN_IF_ERROR(writer_->Commit(sha256));
  // The checkpoint of the step the trial was told to pause at completes the
  // pause, so the trial is paused from here on whatever becomes of the
  // worker (its Pause is then a retry). Otherwise a worker that died before
  // its Pause would leave the trial reclaimed to the step it resumed after,
  // with this later step's checkpoint in place of that one's: neither fits,
  // and the trial would start over from step 1 (or, from scratch, lose the
  // steps this checkpoint holds). Promotion-type: that step is the lease's
  // stop_step. Migration (placement.migrate): any report may be answered
  // with a pause (a move or a preemption), and a worker uploads a
  // checkpoint only when told to pause, of its last reported step, the one
  // step PauseHeld accepts.
  bool pause_step = trial.stop_step && *trial.stop_step == step_;
  if (!pause_step) {
    HPO_ASSIGN_OR_RETURN(const EngineImpl::Cached* c, engine_.Load(trial.experiment_id));
    pause_step = c->spec->placement_migrate;
  }
  if (pause_step) {
    Status s = engine_.PauseHeld(trial, owner_, step_, /*checkpoint_uploaded=*/true);
    if (s.ok()) engine_.RememberUploadPause(trial_id_, owner_, step_);
    // Not reported up to its rung yet: the worker's own Pause decides.
    if (!s.IsInvalidArgument()) return s;
  }
  return Status::OK();
}

Result<std::unique_ptr<CheckpointUpload>> EngineImpl::BeginCheckpointUpload(
    const WorkerCaller& caller, Id trial_id, int64_t step, int64_t total_bytes) {
  HPO_RETURN_IF_ERROR(Authenticate(caller).status());
  if (!options_.artifacts) return NoArtifactStore();
  const std::string owner = WorkerOwner(caller.worker_id);
  HPO_ASSIGN_OR_RETURN(const store::TrialRecord trial, store_.GetTrial(trial_id));
  HPO_RETURN_IF_ERROR(CheckHolds(trial, owner, "upload a checkpoint of"));
  HPO_ASSIGN_OR_RETURN(const Cached* c, Load(trial.experiment_id));
  HPO_RETURN_IF_ERROR(CheckStep(*c->spec, step));
  if (step < trial.resume_step) {
    return Status::InvalidArgument("step: " + TrialName(trial_id) + " resumed after step " +
                                   std::to_string(trial.resume_step) + "; a checkpoint of step " +
                                   std::to_string(step) + " is older than that");
  }
  HPO_ASSIGN_OR_RETURN(auto writer, options_.artifacts->Begin(trial_id, step, total_bytes));
  return std::unique_ptr<CheckpointUpload>(
      new CheckpointUpload(*this, trial_id, step, owner, std::move(writer)));
}

Result<std::unique_ptr<store::CheckpointReader>> EngineImpl::OpenCheckpoint(
    const WorkerCaller& caller, Id trial_id) {
  HPO_RETURN_IF_ERROR(Authenticate(caller).status());
  if (!options_.artifacts) return NoArtifactStore();
  HPO_ASSIGN_OR_RETURN(const store::TrialRecord trial, store_.GetTrial(trial_id));
  HPO_RETURN_IF_ERROR(
      CheckHolds(trial, WorkerOwner(caller.worker_id), "download the checkpoint of"));
  if (trial.resume_step == 0) {
    return Status::FailedPrecondition(
        TrialName(trial_id) +
        " starts from scratch (resume_step 0): it has no checkpoint to restore");
  }
  HPO_ASSIGN_OR_RETURN(auto reader, options_.artifacts->Open(trial_id));
  if (reader->info().step != trial.resume_step) {
    return Status::NotFound(TrialName(trial_id) + " resumes after step " +
                            std::to_string(trial.resume_step) + ", but its checkpoint is of step " +
                            std::to_string(reader->info().step));
  }
  return reader;
}

Status EngineImpl::PauseTrial(const WorkerCaller& caller, Id trial_id, int64_t step,
                              bool checkpoint_uploaded) {
  HPO_RETURN_IF_ERROR(Authenticate(caller).status());
  const std::string owner = WorkerOwner(caller.worker_id);
  HPO_ASSIGN_OR_RETURN(store::TrialRecord trial, store_.GetTrial(trial_id));
  if (trial.state == TrialState::kPaused && trial.lease_owner == owner &&
      trial.resume_step == step) {
    // A retried call: acknowledged, announced once. Refused only when the
    // trial was promoted in between, which the check below answers.
    Status s = store_.PauseTrial(trial_id, owner, step);
    if (!s.IsFailedPrecondition()) return s;
    HPO_ASSIGN_OR_RETURN(trial, store_.GetTrial(trial_id));
  }
  // The upload of the rung's checkpoint paused the trial already, and a
  // promotion may have leased it again since, to any device (this worker's
  // own included): the pause took effect, and nothing changes.
  if (checkpoint_uploaded && trial.resume_step == step && PausedByUpload(trial_id, owner, step)) {
    return Status::OK();
  }
  HPO_RETURN_IF_ERROR(CheckHolds(trial, owner, "pause"));
  if (trial.state == TrialState::kLeased && step > 0 && step == trial.resume_step) {
    // A lease that resumed the trial after `step` and ran nothing yet: the
    // late Pause of the segment before it must not end this one.
    return Status::FailedPrecondition(
        "cannot pause " + TrialName(trial_id) + " after step " + std::to_string(step) +
        ": it resumed after that step and has reported no step since");
  }
  return PauseHeld(trial, owner, step, checkpoint_uploaded);
}

void EngineImpl::RememberUploadPause(Id trial_id, const std::string& owner, int64_t step) {
  MutexLock lock(upload_pauses_mu_);
  if (upload_pauses_.size() >= kMaxUploadPauses) upload_pauses_.clear();
  upload_pauses_[trial_id] = UploadPause{owner, step};
}

bool EngineImpl::PausedByUpload(Id trial_id, const std::string& owner, int64_t step) {
  MutexLock lock(upload_pauses_mu_);
  const auto it = upload_pauses_.find(trial_id);
  return it != upload_pauses_.end() && it->second.owner == owner && it->second.step == step;
}

Status EngineImpl::PauseHeld(const store::TrialRecord& trial, const std::string& owner,
                             int64_t step, bool checkpoint_uploaded) {
  const Id trial_id = trial.id;
  // The checkpoint and the history must agree: a promotion continues at
  // step + 1 from both.
  HPO_ASSIGN_OR_RETURN(const auto measurements, store_.ListMeasurements(trial_id));
  const int64_t last = measurements.empty() ? trial.resume_step : measurements.back().step;
  if (step != last) {
    return Status::InvalidArgument("step: " + std::to_string(step) + ", but " +
                                   TrialName(trial_id) + "'s last reported step is " +
                                   std::to_string(last) +
                                   " (a trial pauses after the report of its last step)");
  }
  bool with_checkpoint = false;
  if (checkpoint_uploaded && options_.artifacts) {
    HPO_ASSIGN_OR_RETURN(const auto info, options_.artifacts->Stat(trial_id));
    with_checkpoint = info && info->step == step;
  }
  HPO_RETURN_IF_ERROR(store_.PauseTrial(trial_id, owner, step));
  // An older checkpoint must not stand in for this step's: without one, a
  // promotion finds none and restarts the trial.
  if (!with_checkpoint) DeleteCheckpoint(trial_id);
  Emit("trial.paused", {{"experiment_id", trial.experiment_id},
                        {"trial_id", trial_id},
                        {"number", trial.number},
                        {"step", step},
                        {"level", trial.level},
                        {"checkpoint", with_checkpoint}});
  // The view placement offers promotions from, and maybe the experiment's
  // end: with the budget spent, a pause that leaves nothing to promote is it.
  HPO_ASSIGN_OR_RETURN(Cached * c, Load(trial.experiment_id));
  HPO_ASSIGN_OR_RETURN(const store::TrialRecord paused, store_.GetTrial(trial_id));
  c->trials->Apply(paused);
  return MaybeFinish(trial.experiment_id, *c);
}

Status EngineImpl::RestartTrial(const WorkerCaller& caller, Id trial_id,
                                const std::string& reason) {
  HPO_RETURN_IF_ERROR(Authenticate(caller).status());
  const std::string owner = WorkerOwner(caller.worker_id);
  HPO_ASSIGN_OR_RETURN(const store::TrialRecord trial, store_.GetTrial(trial_id));
  HPO_RETURN_IF_ERROR(CheckHolds(trial, owner, "restart"));
  // Already from scratch (e.g. a retried call): nothing to undo.
  if (trial.resume_step == 0) return Status::OK();
  HPO_RETURN_IF_ERROR(store_.RestartTrial(trial_id, owner));
  DeleteCheckpoint(trial_id);
  ForgetHistory(trial.experiment_id);  // its steps were deleted
  Emit("trial.restarted", {{"experiment_id", trial.experiment_id},
                           {"trial_id", trial_id},
                           {"number", trial.number},
                           {"reason", CapText(FreeText::kFailureReason, reason)},
                           {"by", "worker"}});
  return Status::OK();
}

Result<bool> EngineImpl::CheckpointUsable(const store::TrialRecord& paused, std::string* why) {
  auto say = [&](std::string text) {
    if (why) *why = std::move(text);
    return false;
  };
  if (!options_.artifacts) return say("this server keeps no checkpoints");
  if (paused.resume_step == 0)
    return say(TrialName(paused.id) + " paused without a step to resume after");
  auto info = options_.artifacts->Stat(paused.id);
  if (!info.ok()) {
    // A damaged one is as good as none; a store that cannot be reached now
    // says nothing about the checkpoint.
    if (info.status().code() == StatusCode::kDataLoss) return say(info.status().message());
    return info.status();
  }
  if (!*info)
    return say(TrialName(paused.id) + " has no checkpoint (none was uploaded when it paused)");
  if ((*info)->step != paused.resume_step) {
    return say(TrialName(paused.id) + " paused after step " + std::to_string(paused.resume_step) +
               ", but its checkpoint is of step " + std::to_string((*info)->step));
  }
  if ((*info)->size_bytes > options_.artifacts->max_checkpoint_bytes()) {
    return say(TrialName(paused.id) + "'s checkpoint is over the server's size limit");
  }
  return true;
}

void EngineImpl::AnnounceRestart(const store::TrialRecord& trial, const std::string& reason) {
  DeleteCheckpoint(trial.id);
  ForgetHistory(trial.experiment_id);
  Emit("trial.restarted", {{"experiment_id", trial.experiment_id},
                           {"trial_id", trial.id},
                           {"number", trial.number},
                           {"reason", CapText(FreeText::kFailureReason, reason)},
                           {"by", "server"}});
}

Status EngineImpl::SweepCheckpoints() {
  if (!options_.artifacts) return Status::OK();
  HPO_ASSIGN_OR_RETURN(const std::vector<Id> ids, options_.artifacts->List());
  std::map<Id, std::optional<Id>> partial_best;  // by experiment, read once per sweep
  for (const Id id : ids) {
    auto trial = store_.GetTrial(id);
    if (!trial.ok() && !trial.status().IsNotFound()) return trial.status();
    if (trial.ok() && !store::IsFinished(trial->state)) continue;
    if (trial.ok()) {
      auto it = partial_best.find(trial->experiment_id);
      if (it == partial_best.end()) {
        // Only an experiment that ran out of budget keeps one: a cancelled
        // or failed one was stopped for good. An unreadable spec (DATA_LOSS)
        // keeps nothing; a store that cannot be reached now deletes nothing.
        std::optional<Id> keep;
        HPO_ASSIGN_OR_RETURN(const store::ExperimentRecord e,
                             store_.GetExperiment(trial->experiment_id));
        if (e.state == store::ExperimentState::kCompleted) {
          auto best = BestTrial(e.id);
          if (!best.ok() && best.status().code() == StatusCode::kUnavailable) return best.status();
          if (best.ok() && *best && (*best)->partial) keep = (*best)->trial.id;
        }
        it = partial_best.emplace(trial->experiment_id, keep).first;
      }
      if (it->second == id) continue;
    }
    HPO_RETURN_IF_ERROR(options_.artifacts->Delete(id));
  }
  return Status::OK();
}

}  // namespace hpo::server
