// The engine's checkpoint calls (server/engine/engine_checkpoints.cc) against a
// real SQLite store and a real files artifact store: the pause answer at a
// lease's stop_step, uploads only from the lease holder, pausing with and
// without a checkpoint, downloads for the resumed trial's new holder,
// restarts with their reason, and checkpoints deleted when trials end.
//
// Trials are set up leased with a stop_step (NewTrial.lease_owner) and
// resumed with Store::ResumeTrial, as the lease path does.
#include <gtest/gtest.h>

#include <filesystem>
#include <mutex>

#include "common/sha256.h"
#include "server/engine/engine.h"
#include "testing/store_backends.h"
#include "testing/world.h"

namespace hpo::server {
void PrintTo(Decision d, std::ostream* os) { *os << ToString(d); }

namespace {

using nlohmann::json;
using store::TrialState;

const char* kSpec = R"({"name": "ckpt", "objective": {"metric": "loss", "direction": "minimize"},
  "spaces": [{"name": "a", "params": {"x": {"type": "float", "low": -1, "high": 1}}}],
  "algorithm": {"sampler": "random", "seed": 3},
  "budget": {"max_trials": 20, "max_parallel": 1, "steps_per_trial": 6},
  "executor": {"command": {"argv": ["train", "{x}"]}}})";

class EngineCheckpointsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::WorldOptions wo;
    wo.store_url = db_.url();
    wo.store.clock = clock_.fn();
    wo.artifacts.emplace().max_checkpoint_bytes = int64_t{1} << 20;
    wo.engine.checkpoint_sweep = std::chrono::milliseconds(0);
    wo.engine.max_attempts = 1;
    wo.engine.on_event = [this](std::string type, const json& data) {
      std::lock_guard lock(mu_);
      events_.emplace_back(std::move(type), data);
    };
    auto world = testing::World::Create(std::move(wo));
    ASSERT_TRUE(world.ok()) << world.status();
    world_ = std::move(world).value();
    store_ = &world_->store();
    artifacts_ = world_->artifacts();
    engine_ = &world_->engine();
    auto e = engine_->CreateExperiment(kSpec);
    ASSERT_TRUE(e.ok()) << e.status();
    experiment_ = e->id;
    a_ = AddWorker("a");
    b_ = AddWorker("b");
  }

  struct TestWorker {
    WorkerCaller caller;
    store::Id device = 0;
    std::string owner;
  };
  TestWorker AddWorker(const std::string& host) {
    WorkerRegistration w;
    w.host = host;
    store::DeviceInfo d;
    d.name = "cpu";
    d.cores = 1;
    w.devices.push_back(d);
    auto r = engine_->RegisterWorker(w);
    EXPECT_TRUE(r.ok()) << r.status();
    return {
        {r->worker.id, r->session}, r->worker.devices.at(0).id, Engine::WorkerOwner(r->worker.id)};
  }

  // A trial created leased to `w`, to pause after `stop_step`, in
  // `experiment` (0: experiment_).
  store::TrialRecord LeasedTrial(const TestWorker& w, std::optional<int64_t> stop_step,
                                 store::Id experiment = 0) {
    if (experiment == 0) experiment = experiment_;
    store::NewTrial t;
    t.params_json = R"({"x": 0.5})";
    t.space_id = store_->GetExperiment(experiment)->spaces.at(0).id;
    t.lease_owner = w.owner;
    t.lease_ms = 60'000;
    t.stop_step = stop_step;
    auto r = store_->CreateTrials(experiment, {t});
    EXPECT_TRUE(r.ok() && r->size() == 1) << r.status();
    return r->at(0);
  }

  Result<ReportReply> Report(const TestWorker& w, store::Id trial, int64_t step) {
    TrialReport r;
    r.trial_id = trial;
    r.step = step;
    r.metrics = {{"loss", 1.0 / step}};
    return engine_->Report(w.caller, r);
  }
  void ReportSteps(const TestWorker& w, store::Id trial, int64_t from, int64_t to) {
    for (int64_t s = from; s <= to; ++s) ASSERT_TRUE(Report(w, trial, s).ok());
  }

  Status Upload(const TestWorker& w, store::Id trial, int64_t step, const std::string& bytes) {
    HPO_ASSIGN_OR_RETURN(auto up,
                         engine_->BeginCheckpointUpload(w.caller, trial, step, bytes.size()));
    HPO_RETURN_IF_ERROR(up->Append(bytes));
    return up->Commit(Sha256Hex(bytes));
  }
  Result<std::string> Download(const TestWorker& w, store::Id trial) {
    HPO_ASSIGN_OR_RETURN(auto r, engine_->OpenCheckpoint(w.caller, trial));
    std::string out;
    for (;;) {
      HPO_ASSIGN_OR_RETURN(std::string piece, r->Read(4096));
      if (piece.empty()) return out;
      out += piece;
    }
  }
  std::vector<json> Events(const std::string& type) {
    std::lock_guard lock(mu_);
    std::vector<json> out;
    for (const auto& [t, d] : events_) {
      if (t == type) out.push_back(d);
    }
    return out;
  }

  testing::FakeClock clock_;
  testing::SqliteBackend db_;
  std::unique_ptr<testing::World> world_;
  store::Store* store_ = nullptr;
  store::ArtifactStore* artifacts_ = nullptr;
  Engine* engine_ = nullptr;
  store::Id experiment_ = 0;
  TestWorker a_, b_;
  std::mutex mu_;
  std::vector<std::pair<std::string, json>> events_;  // GUARDED_BY(mu_)
};

TEST_F(EngineCheckpointsTest, TheReportOfTheStopStepIsAnsweredPause) {
  const auto t = LeasedTrial(a_, 2);
  auto first = Report(a_, t.id, 1);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->decision, Decision::kContinue);
  auto second = Report(a_, t.id, 2);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->decision, Decision::kPause);
  EXPECT_EQ(second->reason, "pause after step 2 (rung 0)");
  EXPECT_EQ(ToString(Decision::kPause), "pause");
  // Without a stop_step, or with the trial's last step as one, it runs on.
  const auto plain = LeasedTrial(a_, std::nullopt);
  EXPECT_EQ(Report(a_, plain.id, 2)->decision, Decision::kContinue);
  const auto to_end = LeasedTrial(a_, 6);
  EXPECT_EQ(Report(a_, to_end.id, 6)->decision, Decision::kContinue);
}

// Found by fuzz/fuzz_worker.cc (corpus/worker/crash-report-past-stop-step):
// a report past the stop step was stored and answered pause, the pause of
// that step was taken, and the trial's promotion was then leased with
// resume_step 2 and stop_step 2: resume after the step it must stop at.
TEST_F(EngineCheckpointsTest, AReportPastTheStopStepIsRefusedAndNotStored) {
  const auto t = LeasedTrial(a_, 1);
  ASSERT_EQ(Report(a_, t.id, 1)->decision, Decision::kPause);
  auto past = Report(a_, t.id, 2);
  ASSERT_FALSE(past.ok()) << "answered " << ToString(past->decision);
  EXPECT_EQ(past.status().code(), StatusCode::kFailedPrecondition) << past.status();
  EXPECT_NE(past.status().message().find("step: 2 is past the lease's stop_step 1"),
            std::string::npos)
      << past.status();
  const auto steps = store_->ListMeasurements(t.id);
  ASSERT_TRUE(steps.ok()) << steps.status();
  ASSERT_EQ(steps->size(), 1u);
  EXPECT_EQ(steps->at(0).step, 1);
  // The pause of the step reported is what the worker does next.
  EXPECT_TRUE(engine_->PauseTrial(a_.caller, t.id, 1, false).ok());
}

TEST_F(EngineCheckpointsTest, APauseWithItsCheckpointCanBeResumedByAnotherWorker) {
  const auto t = LeasedTrial(a_, 2);
  ReportSteps(a_, t.id, 1, 2);
  const std::string state = "weights after step 2";
  ASSERT_TRUE(Upload(a_, t.id, 2, state).ok());
  ASSERT_TRUE(engine_->PauseTrial(a_.caller, t.id, 2, true).ok());
  ASSERT_TRUE(engine_->PauseTrial(a_.caller, t.id, 2, true).ok())
      << "a retried pause is acknowledged";
  const auto paused = *store_->GetTrial(t.id);
  EXPECT_EQ(paused.state, TrialState::kPaused);
  EXPECT_EQ(paused.resume_step, 2);
  const auto events = Events("trial.paused");
  ASSERT_EQ(events.size(), 1u) << "announced once";
  EXPECT_EQ(events[0], json({{"experiment_id", experiment_},
                             {"trial_id", t.id},
                             {"number", t.number},
                             {"step", 2},
                             {"level", 0},
                             {"checkpoint", true}}));
  std::string why;
  auto usable = engine_->CheckpointUsable(paused, &why);
  ASSERT_TRUE(usable.ok()) << usable.status();
  EXPECT_TRUE(*usable) << why;

  // The promotion, as the lease path makes it, on worker b.
  ASSERT_TRUE(store_->ResumeTrial(t.id, b_.owner, 60'000, std::nullopt).ok());
  auto got = Download(b_, t.id);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, state);
  auto not_a = engine_->OpenCheckpoint(a_.caller, t.id);
  ASSERT_FALSE(not_a.ok());
  EXPECT_TRUE(not_a.status().IsFailedPrecondition()) << not_a.status();
  EXPECT_NE(not_a.status().message().find("not leased to '" + a_.owner + "'"), std::string::npos)
      << not_a.status();
  ReportSteps(b_, t.id, 3, 6);
  ASSERT_TRUE(engine_->Complete(b_.caller, t.id, false, json::object(), "", "").ok());
  EXPECT_FALSE(artifacts_->Stat(t.id)->has_value()) << "a finished trial's checkpoint is deleted";
}

// Found by bench/load: the upload of the rung's checkpoint pauses the trial,
// a promotion can lease it again before the uploader's Pause arrives, and
// that Pause was refused as if the uploader had lost its lease.
TEST_F(EngineCheckpointsTest,
       APauseAfterItsUploadPausedTheTrialIsAcknowledgedWhenAPromotionCameFirst) {
  const auto t = LeasedTrial(a_, 2);
  ReportSteps(a_, t.id, 1, 2);
  ASSERT_TRUE(Upload(a_, t.id, 2, "weights after step 2").ok());
  ASSERT_EQ(store_->GetTrial(t.id)->state, TrialState::kPaused)
      << "the rung's checkpoint pauses the trial";
  ASSERT_TRUE(store_->ResumeTrial(t.id, b_.owner, 60'000, std::nullopt).ok());

  EXPECT_TRUE(engine_->PauseTrial(a_.caller, t.id, 2, true).ok());
  const auto after = *store_->GetTrial(t.id);
  EXPECT_EQ(after.state, TrialState::kLeased) << "acknowledged, and nothing changed";
  EXPECT_EQ(after.lease_owner, b_.owner);
  EXPECT_EQ(Events("trial.paused").size(), 1u) << "announced once, by the upload";
  // Only that pause is acknowledged: not one that says no checkpoint went
  // up, nor one of another step, nor one from a worker whose upload did
  // not pause it (here b, which holds the resumed lease and ran nothing:
  // a Pause there would end the promotion before it ran).
  EXPECT_TRUE(engine_->PauseTrial(a_.caller, t.id, 2, false).IsFailedPrecondition());
  EXPECT_TRUE(engine_->PauseTrial(a_.caller, t.id, 1, true).IsFailedPrecondition());
  const Status by_b = engine_->PauseTrial(b_.caller, t.id, 2, true);
  EXPECT_TRUE(by_b.IsFailedPrecondition()) << by_b;
  EXPECT_NE(by_b.message().find("resumed after that step and has reported no step since"),
            std::string::npos)
      << by_b;
  EXPECT_EQ(store_->GetTrial(t.id)->state, TrialState::kLeased);
  EXPECT_EQ(Events("trial.paused").size(), 1u);
}

// With placement.migrate any report may be answered pause (a move to a
// faster device, or a preemption), with no stop_step: the checkpoint of the
// last reported step completes that pause as a rung's does, so that a
// worker killed between its upload and its Pause costs the trial neither
// this checkpoint nor, for a resumed trial, the one it replaced (the lease
// would have expired back to the step it resumed after, with a checkpoint
// of a later step: unusable, and the trial restarted from step 1).
TEST_F(EngineCheckpointsTest, AMigratingTrialsCheckpointPausesItAsItIsStored) {
  json spec = json::parse(kSpec);
  spec["name"] = "migrating";
  spec["executor"] = {{"builtin", {{"trainer", "fashion-mnist-mlp"}}}};
  spec["early_stopping"] = {{"rule", "asha"}, {"type", "stop"}, {"bootstrap_count", 100}};
  spec["placement"] = {{"migrate", true}};
  auto e = engine_->CreateExperiment(spec.dump());
  ASSERT_TRUE(e.ok()) << e.status();
  const auto t = LeasedTrial(a_, std::nullopt, e->id);
  ReportSteps(a_, t.id, 1, 2);
  ASSERT_TRUE(Upload(a_, t.id, 2, "weights after step 2").ok());
  auto paused = *store_->GetTrial(t.id);
  EXPECT_EQ(paused.state, TrialState::kPaused) << "the pause's checkpoint pauses the trial";
  EXPECT_EQ(paused.resume_step, 2);
  EXPECT_TRUE(engine_->PauseTrial(a_.caller, t.id, 2, true).ok())
      << "the worker's Pause is a retry";
  EXPECT_EQ(Events("trial.paused").size(), 1u);

  // Resumed elsewhere and moved again; its worker dies before its Pause.
  ASSERT_TRUE(store_->ResumeTrial(t.id, b_.owner, 60'000, std::nullopt).ok());
  ReportSteps(b_, t.id, 3, 4);
  ASSERT_TRUE(Upload(b_, t.id, 4, "weights after step 4").ok());
  paused = *store_->GetTrial(t.id);
  EXPECT_EQ(paused.state, TrialState::kPaused);
  EXPECT_EQ(paused.resume_step, 4) << "with the checkpoint that replaced step 2's";
  EXPECT_EQ((*artifacts_->Stat(t.id))->step, 4);

  // A checkpoint of an earlier step than the last reported is no pause.
  ASSERT_TRUE(store_->ResumeTrial(t.id, a_.owner, 60'000, std::nullopt).ok());
  ReportSteps(a_, t.id, 5, 6);
  EXPECT_TRUE(Upload(a_, t.id, 5, "weights after step 5").ok());
  EXPECT_EQ(store_->GetTrial(t.id)->state, TrialState::kRunning);

  // Without migration nor a stop_step, an upload pauses nothing.
  const auto other = LeasedTrial(a_, std::nullopt);
  ReportSteps(a_, other.id, 1, 2);
  ASSERT_TRUE(Upload(a_, other.id, 2, "weights").ok());
  EXPECT_EQ(store_->GetTrial(other.id)->state, TrialState::kRunning);
}

// A worker runs a device loop each under one worker id: a promotion can go
// to another device of the worker that paused the trial, and that worker's
// late Pause must not pause the trial again under its other device's lease.
TEST_F(EngineCheckpointsTest, ALatePauseDoesNotEndAPromotionToTheSameWorker) {
  const auto t = LeasedTrial(a_, 2);
  ReportSteps(a_, t.id, 1, 2);
  ASSERT_TRUE(Upload(a_, t.id, 2, "weights after step 2").ok());
  ASSERT_TRUE(store_->ResumeTrial(t.id, a_.owner, 60'000, std::nullopt).ok());
  EXPECT_TRUE(engine_->PauseTrial(a_.caller, t.id, 2, true).ok());
  EXPECT_EQ(store_->GetTrial(t.id)->state, TrialState::kLeased) << "the promotion goes on";
  EXPECT_EQ(Events("trial.paused").size(), 1u);
  // Without the upload's pause on record (a Pause that says nothing went
  // up), it is refused, still without pausing the trial.
  EXPECT_TRUE(engine_->PauseTrial(a_.caller, t.id, 2, false).IsFailedPrecondition());
  EXPECT_EQ(store_->GetTrial(t.id)->state, TrialState::kLeased);
  // Once the resumed lease has reported a step, its own rung's pause works.
  ReportSteps(a_, t.id, 3, 3);
  EXPECT_EQ(store_->GetTrial(t.id)->state, TrialState::kRunning);
}

TEST_F(EngineCheckpointsTest, APauseWithoutACheckpointIsRecordedSoThatAResumeRestarts) {
  const auto t = LeasedTrial(a_, 2);
  ReportSteps(a_, t.id, 1, 2);
  // An older checkpoint is there (say, of an earlier rung); it must not
  // stand in for step 2's.
  ASSERT_TRUE(Upload(a_, t.id, 1, "step 1").ok());
  ASSERT_TRUE(engine_->PauseTrial(a_.caller, t.id, 2, false).ok());
  EXPECT_EQ(Events("trial.paused").at(0)["checkpoint"], false);
  EXPECT_FALSE(artifacts_->Stat(t.id)->has_value());
  std::string why;
  auto usable = engine_->CheckpointUsable(*store_->GetTrial(t.id), &why);
  ASSERT_TRUE(usable.ok());
  EXPECT_FALSE(*usable);
  EXPECT_NE(why.find("has no checkpoint"), std::string::npos) << why;
  // A worker saying it uploaded, when what is stored is another step's,
  // is a pause without one too.
  const auto u = LeasedTrial(a_, 2);
  ReportSteps(a_, u.id, 1, 2);
  ASSERT_TRUE(Upload(a_, u.id, 1, "step 1").ok());
  ASSERT_TRUE(engine_->PauseTrial(a_.caller, u.id, 2, true).ok());
  EXPECT_EQ(Events("trial.paused").at(1)["checkpoint"], false);
}

TEST_F(EngineCheckpointsTest, ACheckpointOfTheWrongStepIsNotUsable) {
  const auto t = LeasedTrial(a_, 2);
  ReportSteps(a_, t.id, 1, 2);
  ASSERT_TRUE(Upload(a_, t.id, 2, "step 2").ok());
  ASSERT_TRUE(engine_->PauseTrial(a_.caller, t.id, 2, true).ok());
  auto paused = *store_->GetTrial(t.id);
  paused.resume_step = 4;  // as if it had paused later without a new one
  std::string why;
  EXPECT_FALSE(*engine_->CheckpointUsable(paused, &why));
  EXPECT_NE(why.find("paused after step 4, but its checkpoint is of step 2"), std::string::npos)
      << why;
  // The lease path then resumes it from scratch and says why.
  auto resumed = store_->ResumeTrial(t.id, b_.owner, 60'000, std::nullopt, /*restart=*/true);
  ASSERT_TRUE(resumed.ok());
  engine_->AnnounceRestart(*resumed, why);
  const auto restarted = Events("trial.restarted");
  ASSERT_EQ(restarted.size(), 1u);
  EXPECT_EQ(restarted[0]["by"], "server");
  EXPECT_EQ(restarted[0]["reason"], why);
  EXPECT_FALSE(artifacts_->Stat(t.id)->has_value());
}

TEST_F(EngineCheckpointsTest, PausingAtAStepThatIsNotTheLastReportedIsRefused) {
  const auto t = LeasedTrial(a_, 3);
  ReportSteps(a_, t.id, 1, 2);
  Status s = engine_->PauseTrial(a_.caller, t.id, 3, false);
  EXPECT_TRUE(s.IsInvalidArgument()) << s;
  EXPECT_NE(
      s.message().find("step: 3, but trial " + std::to_string(t.id) + "'s last reported step is 2"),
      std::string::npos)
      << s;
  EXPECT_EQ(store_->GetTrial(t.id)->state, TrialState::kRunning);
}

TEST_F(EngineCheckpointsTest, OnlyTheLeaseHolderUploadsDownloadsPausesOrRestarts) {
  const auto t = LeasedTrial(a_, 2);
  ReportSteps(a_, t.id, 1, 2);
  auto up = engine_->BeginCheckpointUpload(b_.caller, t.id, 2, 10);
  ASSERT_FALSE(up.ok());
  EXPECT_TRUE(up.status().IsFailedPrecondition()) << up.status();
  EXPECT_EQ(up.status().message(), "cannot upload a checkpoint of trial " + std::to_string(t.id) +
                                       ": it is not leased to '" + b_.owner +
                                       "' (it is running, leased to '" + a_.owner + "')");
  EXPECT_TRUE(engine_->PauseTrial(b_.caller, t.id, 2, false).IsFailedPrecondition());
  EXPECT_TRUE(engine_->RestartTrial(b_.caller, t.id, "no").IsFailedPrecondition());
  EXPECT_EQ(store_->GetTrial(t.id)->state, TrialState::kRunning);
  // A wrong session is refused before anything else.
  WorkerCaller impostor{a_.caller.worker_id, std::string(64, 'f')};
  auto denied = engine_->BeginCheckpointUpload(impostor, t.id, 2, 10);
  ASSERT_FALSE(denied.ok());
  EXPECT_EQ(denied.status().code(), StatusCode::kPermissionDenied);
}

TEST_F(EngineCheckpointsTest, ACheckpointOverTheLimitIsRefusedNamingIt) {
  const auto t = LeasedTrial(a_, 2);
  auto up = engine_->BeginCheckpointUpload(a_.caller, t.id, 2, (int64_t{1} << 20) + 1);
  ASSERT_FALSE(up.ok());
  EXPECT_EQ(up.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(up.status().message().find("over the server's limit of 1 MiB (--max-checkpoint-mb)"),
            std::string::npos)
      << up.status();
  // More bytes than announced is the protocol's DATA_LOSS.
  auto small = engine_->BeginCheckpointUpload(a_.caller, t.id, 2, 3);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ((*small)->Append("four").code(), StatusCode::kDataLoss);
}

TEST_F(EngineCheckpointsTest, AnUploadWhoseLeaseExpiredMeanwhileIsNotCommitted) {
  // Uploads short of the rung (step 3): one of the rung would pause the trial.
  const auto t = LeasedTrial(a_, 3);
  ReportSteps(a_, t.id, 1, 2);
  ASSERT_TRUE(Upload(a_, t.id, 2, "first").ok());
  auto up = engine_->BeginCheckpointUpload(a_.caller, t.id, 2, 6);
  ASSERT_TRUE(up.ok());
  ASSERT_TRUE((*up)->Append("second").ok());
  clock_.Advance(61'000);
  ASSERT_TRUE(engine_->ReclaimExpiredLeases().ok());  // failed: max_attempts 1
  Status s = (*up)->Commit(Sha256Hex("second"));
  EXPECT_TRUE(s.IsFailedPrecondition()) << s;
  EXPECT_FALSE(artifacts_->Stat(t.id)->has_value()) << "the failed trial's checkpoint was deleted";
}

TEST_F(EngineCheckpointsTest, ARestartDropsTheStepsAndTheCheckpointAndSaysWhy) {
  const auto t = LeasedTrial(a_, 2);
  ReportSteps(a_, t.id, 1, 2);
  ASSERT_TRUE(Upload(a_, t.id, 2, "state").ok());
  ASSERT_TRUE(engine_->PauseTrial(a_.caller, t.id, 2, true).ok());
  ASSERT_TRUE(store_->ResumeTrial(t.id, b_.owner, 60'000, std::nullopt).ok());
  ASSERT_TRUE(
      engine_->RestartTrial(b_.caller, t.id, "checkpoint is corrupt: SHA-256 mismatch").ok());
  const auto trial = *store_->GetTrial(t.id);
  EXPECT_EQ(trial.resume_step, 0);
  EXPECT_EQ(trial.lease_owner, b_.owner) << "the same lease goes on, from scratch";
  EXPECT_TRUE(store_->ListMeasurements(t.id)->empty());
  EXPECT_FALSE(artifacts_->Stat(t.id)->has_value());
  const auto restarted = Events("trial.restarted");
  ASSERT_EQ(restarted.size(), 1u);
  EXPECT_EQ(restarted[0], json({{"experiment_id", experiment_},
                                {"trial_id", t.id},
                                {"number", t.number},
                                {"reason", "checkpoint is corrupt: SHA-256 mismatch"},
                                {"by", "worker"}}));
  // A retried restart changes nothing more.
  ASSERT_TRUE(engine_->RestartTrial(b_.caller, t.id, "again").ok());
  EXPECT_EQ(Events("trial.restarted").size(), 1u);
  // And a trial from scratch has nothing to download.
  auto none = engine_->OpenCheckpoint(b_.caller, t.id);
  ASSERT_FALSE(none.ok());
  EXPECT_TRUE(none.status().IsFailedPrecondition()) << none.status();
  EXPECT_NE(none.status().message().find("starts from scratch"), std::string::npos)
      << none.status();
  ReportSteps(b_, t.id, 1, 1);
}

TEST_F(EngineCheckpointsTest, TheSweepDeletesCheckpointsOfTrialsThatEnded) {
  const auto t = LeasedTrial(a_, 2);
  ReportSteps(a_, t.id, 1, 2);
  ASSERT_TRUE(Upload(a_, t.id, 2, "state").ok());
  ASSERT_TRUE(engine_->PauseTrial(a_.caller, t.id, 2, true).ok());
  const auto live = LeasedTrial(a_, 2);
  ASSERT_TRUE(Upload(a_, live.id, 0, "live").ok());
  // Cancelling ends the paused trial without a path that deletes it.
  ASSERT_TRUE(engine_->CancelExperiment(experiment_, "done").ok());
  EXPECT_TRUE(artifacts_->Stat(t.id)->has_value());
  ASSERT_TRUE(engine_->Tick().ok());
  EXPECT_FALSE(artifacts_->Stat(t.id)->has_value());
  EXPECT_FALSE(artifacts_->Stat(live.id)->has_value()) << "cancelled too";
  // A checkpoint of a trial the store does not know goes as well.
  auto w = artifacts_->Begin(999'999, 1, 1);
  ASSERT_TRUE((*w)->Append("x").ok());
  ASSERT_TRUE((*w)->Commit(Sha256Hex("x")).ok());
  ASSERT_TRUE(engine_->SweepCheckpoints().ok());
  EXPECT_TRUE(artifacts_->List()->empty());
}

// Issue #46: a budget that ends with every trial paused at a rung (none
// promoted, none completed) still has a best: the best report of any trial,
// marked partial, and the sweep keeps that trial's checkpoint alone.
TEST_F(EngineCheckpointsTest,
       AnExperimentEndedWithOnlyPausedTrialsHasAPartialBestWithItsCheckpoint) {
  auto none = engine_->BestTrial(experiment_);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value()) << "no trial measured anything yet";
  const auto report = [&](store::Id trial, int64_t step, double loss) {
    TrialReport r;
    r.trial_id = trial;
    r.step = step;
    r.metrics = {{"loss", loss}};
    auto reply = engine_->Report(a_.caller, r);
    ASSERT_TRUE(reply.ok()) << reply.status();
  };
  const auto worse = LeasedTrial(a_, 2);
  report(worse.id, 1, 0.7);
  report(worse.id, 2, 0.6);
  ASSERT_TRUE(Upload(a_, worse.id, 2, "worse").ok());
  ASSERT_TRUE(engine_->PauseTrial(a_.caller, worse.id, 2, true).ok());
  const auto better = LeasedTrial(a_, 2);
  report(better.id, 1, 0.3);  // its best, at step 1
  report(better.id, 2, 0.4);
  ASSERT_TRUE(Upload(a_, better.id, 2, "better").ok());
  ASSERT_TRUE(engine_->PauseTrial(a_.caller, better.id, 2, true).ok());
  // The budget ends as the wall-time check ends it: the paused trials are
  // pruned, "not promoted before the experiment ended".
  ASSERT_TRUE(
      store_->FinishExperiment(experiment_, store::ExperimentState::kCompleted, "budget").ok());
  ASSERT_EQ(store_->GetTrial(better.id)->state, TrialState::kPruned);

  auto best = engine_->BestTrial(experiment_);
  ASSERT_TRUE(best.ok()) << best.status();
  ASSERT_TRUE(best->has_value()) << "an experiment whose trials measured something has a best";
  EXPECT_TRUE((*best)->partial);
  EXPECT_EQ((*best)->trial.id, better.id);
  EXPECT_EQ((*best)->trial.state, TrialState::kPruned);
  EXPECT_EQ((*best)->step, 1);
  EXPECT_EQ(json::parse((*best)->metrics_json), json({{"loss", 0.3}}));
  EXPECT_EQ((*best)->checkpoint_step, 2);

  ASSERT_TRUE(engine_->Tick().ok());
  EXPECT_TRUE(artifacts_->Stat(better.id)->has_value())
      << "the partial best's checkpoint is its only result";
  EXPECT_FALSE(artifacts_->Stat(worse.id)->has_value());
  ASSERT_TRUE(engine_->SweepCheckpoints().ok());
  EXPECT_TRUE(artifacts_->Stat(better.id)->has_value()) << "and stays";
}

TEST_F(EngineCheckpointsTest, WithoutAnArtifactStoreAPauseHasNoCheckpoint) {
  Engine bare(*store_);
  const auto t = LeasedTrial(a_, 2);
  ReportSteps(a_, t.id, 1, 2);
  auto up = bare.BeginCheckpointUpload(a_.caller, t.id, 2, 1);
  ASSERT_FALSE(up.ok());
  EXPECT_TRUE(up.status().IsFailedPrecondition());
  EXPECT_NE(up.status().message().find("keeps no checkpoints"), std::string::npos);
  ASSERT_TRUE(bare.PauseTrial(a_.caller, t.id, 2, true).ok());
  EXPECT_FALSE(*bare.CheckpointUsable(*store_->GetTrial(t.id)));
}

}  // namespace
}  // namespace hpo::server
