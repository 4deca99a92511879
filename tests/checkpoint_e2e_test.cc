// Checkpoints end to end with real hpo-worker processes: a trial pauses at
// its stop_step on one worker, which saves, archives and uploads its state;
// another worker downloads, restores and finishes it, on the same curve as
// a trial that never stopped. A corrupt checkpoint at resume restarts the
// trial from step 1, with a trial.restarted event saying why.
//
// The server runs in this process. Every RPC is the real WorkerServiceImpl's
// but Lease: the placement policy that hands out trials with stop_step and
// resume_step set is not this test's subject, so a stand-in (LeaseScript)
// decides what each worker runs next, using the store's own calls for it -
// CreateTrialsUpTo with NewTrial.lease_owner and stop_step for a new trial,
// ResumeTrial for a promotion - and answers with FillTrial, as Lease does.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "proto/grpc_status.h"
#include "server/engine/engine.h"
#include "server/grpc/worker_service.h"
#include "testing/files.h"
#include "testing/server_process.h"
#include "testing/store_backends.h"

namespace hpo::server {
namespace {

namespace fs = std::filesystem;
namespace v1 = hpo::v1;
using nlohmann::json;
using store::TrialState;

// What the next lease of a worker is: a new trial that pauses after
// `stop_step` (0: runs to its end), or the promotion of a paused trial.
struct Next {
  std::optional<int64_t> resume_trial;
  int64_t stop_step = 0;
};

class LeaseScript final : public v1::WorkerService::Service {
 public:
  LeaseScript(WorkerServiceImpl& real, Engine& engine, store::Store& store, store::Id experiment)
      : real_(real), engine_(engine), store_(store), experiment_(experiment) {}

  // The leases to hand out, in order, to whichever worker asks.
  void Push(Next n) {
    std::lock_guard lock(mu_);
    script_.push_back(n);
  }

  ::grpc::Status Lease(::grpc::ServerContext*, const v1::LeaseRequest* req,
                       v1::LeaseResponse* res) override {
    Status auth = engine_.AuthenticateWorker({req->worker_id(), req->session()});
    if (!auth.ok()) return ToGrpcStatus(auth);
    std::optional<Next> next;
    {
      std::lock_guard lock(mu_);
      if (!script_.empty()) {
        next = script_.front();
        script_.pop_front();
      }
    }
    if (!next) {
      res->set_retry_after_ms(100);
      return ::grpc::Status::OK;
    }
    const std::string owner = Engine::WorkerOwner(req->worker_id());
    Result<store::TrialRecord> trial = Status::Internal("unset");
    if (next->resume_trial) {
      trial = store_.ResumeTrial(*next->resume_trial, owner, 60'000, std::nullopt);
    } else {
      store::NewTrial t;
      t.params_json = R"({"x": 0.3})";
      t.space_id = store_.GetExperiment(experiment_)->spaces.at(0).id;
      t.lease_owner = owner;
      t.lease_ms = 60'000;
      if (next->stop_step > 0) t.stop_step = next->stop_step;
      auto created = store_.CreateTrials(experiment_, {t});
      if (created.ok())
        trial = created->at(0);
      else
        trial = created.status();
    }
    if (!trial.ok()) return ToGrpcStatus(trial.status());
    auto spec = engine_.Spec(experiment_);
    if (!spec.ok()) return ToGrpcStatus(spec.status());
    return ToGrpcStatus(FillTrial(server::Lease{*trial, *spec, "a"}, *res->mutable_trial()));
  }

  // The rest is the real service's.
  ::grpc::Status Register(::grpc::ServerContext* c, const v1::RegisterRequest* q,
                          v1::RegisterResponse* r) override {
    return real_.Register(c, q, r);
  }
  ::grpc::Status Report(::grpc::ServerContext* c, const v1::ReportRequest* q,
                        v1::ReportResponse* r) override {
    return real_.Report(c, q, r);
  }
  ::grpc::Status Complete(::grpc::ServerContext* c, const v1::CompleteRequest* q,
                          v1::CompleteResponse* r) override {
    return real_.Complete(c, q, r);
  }
  ::grpc::Status Heartbeat(::grpc::ServerContext* c, const v1::HeartbeatRequest* q,
                           v1::HeartbeatResponse* r) override {
    return real_.Heartbeat(c, q, r);
  }
  ::grpc::Status Pause(::grpc::ServerContext* c, const v1::PauseRequest* q,
                       v1::PauseResponse* r) override {
    return real_.Pause(c, q, r);
  }
  ::grpc::Status Restart(::grpc::ServerContext* c, const v1::RestartRequest* q,
                         v1::RestartResponse* r) override {
    return real_.Restart(c, q, r);
  }
  ::grpc::Status UploadCheckpoint(::grpc::ServerContext* c,
                                  ::grpc::ServerReader<v1::CheckpointChunk>* q,
                                  v1::UploadCheckpointResponse* r) override {
    return real_.UploadCheckpoint(c, q, r);
  }
  ::grpc::Status DownloadCheckpoint(::grpc::ServerContext* c,
                                    const v1::DownloadCheckpointRequest* q,
                                    ::grpc::ServerWriter<v1::CheckpointChunk>* w) override {
    if (unavailable_downloads_ > 0) {
      --unavailable_downloads_;
      return ::grpc::Status(::grpc::StatusCode::UNAVAILABLE, "the server is restarting");
    }
    return real_.DownloadCheckpoint(c, q, w);
  }
  // The next `n` downloads fail as a server that is away would answer.
  void FailDownloads(int n) { unavailable_downloads_ = n; }

 private:
  WorkerServiceImpl& real_;
  Engine& engine_;
  store::Store& store_;
  const store::Id experiment_;
  std::mutex mu_;
  std::deque<Next> script_;  // GUARDED_BY(mu_)
  std::atomic<int> unavailable_downloads_{0};
};

using hpo::testing::ReadFile;

// The example program, with a fixed seed so that every trial of it draws the
// same data and the same shuffles: trials differ only in how they ran.
const char* kCommandSpec =
    R"({"name": "e2e", "objective": {"metric": "loss", "direction": "minimize"},
  "spaces": [{"name": "a", "params": {"x": {"type": "float", "low": 0.1, "high": 0.5}}}],
  "algorithm": {"sampler": "random", "seed": 3},
  "budget": {"max_trials": 50, "max_parallel": 1, "steps_per_trial": 5},
  "executor": {"command": {"argv": ["python3", ")" HPO_SOURCE_DIR R"(/examples/train_example.py",
                                    "--lr={x}", "--width=6", "--seed=11"], "timeout_s": 60}}})";

const char* kBuiltinSpec =
    R"({"name": "e2e-builtin", "objective": {"metric": "accuracy", "direction": "maximize"},
  "spaces": [{"name": "a", "params": {"x": {"type": "float", "low": 0.1, "high": 0.5}}}],
  "algorithm": {"sampler": "random", "seed": 3},
  "budget": {"max_trials": 50, "max_parallel": 1, "steps_per_trial": 3},
  "executor": {"builtin": {"trainer": "fashion-mnist-mlp", "args": {"max_train_samples": 2000}}}})";

class CheckpointE2eTest : public ::testing::Test {
 protected:
  void Start(const char* spec) {
    dir_ = ::testing::TempDir() + "hpo-ckpt-e2e-" + std::to_string(getpid()) + "-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_ + "/scratch");
    auto s = store::OpenStore("sqlite://" + dir_ + "/hpo.db");
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = std::move(s).value();
    auto a = store::OpenArtifactStore("", "sqlite://" + dir_ + "/hpo.db");
    ASSERT_TRUE(a.ok()) << a.status();
    artifacts_ = std::move(a).value();
    EngineOptions eo;
    eo.artifacts = artifacts_.get();
    eo.on_event = [this](std::string type, const json& data) {
      std::lock_guard lock(mu_);
      events_.emplace_back(std::move(type), data);
    };
    engine_ = std::make_unique<Engine>(*store_, eo);
    auto e = engine_->CreateExperiment(spec);
    ASSERT_TRUE(e.ok()) << e.status();
    experiment_ = e->id;
    real_ = std::make_unique<WorkerServiceImpl>(*engine_, WorkerServiceOptions{"", 100});
    script_ = std::make_unique<LeaseScript>(*real_, *engine_, *store_, experiment_);
    auto server = GrpcServer::Start("127.0.0.1:0", script_.get());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::seconds(1));
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // Runs a worker until it has run `trials` leases; true when it exited 0.
  bool RunWorker(const std::string& name, int trials) {
    const std::string log = dir_ + "/" + name + ".log";
    const pid_t pid = testing::Spawn(
        {HPO_WORKER_BIN, "--server", "127.0.0.1:" + std::to_string(server_->port()), "--device",
         "cpu", "--threads", "1", "--benchmark-seconds", "0.1", "--heartbeat-ms", "500",
         "--max-trials", std::to_string(trials), "--scratch-dir", dir_ + "/scratch"},
        log);
    // 150 s: a hang fails the test instead of stalling it.
    const std::optional<int> status = testing::WaitExit(pid, std::chrono::seconds(150));
    if (!status) {
      testing::KillAndReap(pid);
      return false;
    }
    logs_ += "--- " + name + "\n" + ReadFile(log);
    return WIFEXITED(*status) && WEXITSTATUS(*status) == 0;
  }

  std::vector<json> Events(const std::string& type) {
    std::lock_guard lock(mu_);
    std::vector<json> out;
    for (const auto& [t, d] : events_) {
      if (t == type) out.push_back(d);
    }
    return out;
  }
  // The trial the script created last.
  store::TrialRecord Newest() {
    store::TrialFilter f;
    f.limit = 1000;
    auto all = *store_->ListTrials(experiment_, f);
    return all.back();
  }
  std::vector<std::string> Curve(store::Id trial) {
    std::vector<std::string> out;
    for (const auto& m : *store_->ListMeasurements(trial)) {
      out.push_back(std::to_string(m.step) + " " + m.metrics_json);
    }
    return out;
  }
  bool ScratchIsClean() { return fs::is_empty(dir_ + "/scratch"); }

  std::string dir_, logs_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<store::ArtifactStore> artifacts_;
  std::unique_ptr<Engine> engine_;
  store::Id experiment_ = 0;
  std::unique_ptr<WorkerServiceImpl> real_;
  std::unique_ptr<LeaseScript> script_;
  std::unique_ptr<GrpcServer> server_;
  std::mutex mu_;
  std::vector<std::pair<std::string, json>> events_;  // GUARDED_BY(mu_)
};

TEST_F(CheckpointE2eTest, ACommandTrialPausedOnOneWorkerResumesOnAnotherOnTheSameCurve) {
  Start(kCommandSpec);
  // Worker a: a trial that pauses after step 2.
  script_->Push({std::nullopt, 2});
  ASSERT_TRUE(RunWorker("a", 1)) << logs_;
  const store::TrialRecord paused = Newest();
  ASSERT_EQ(paused.state, TrialState::kPaused) << logs_;
  EXPECT_EQ(paused.resume_step, 2);
  const auto pause_events = Events("trial.paused");
  ASSERT_EQ(pause_events.size(), 1u);
  EXPECT_EQ(pause_events[0]["checkpoint"], true) << logs_;
  ASSERT_TRUE(artifacts_->Stat(paused.id)->has_value());

  // Worker b: the promotion, then a trial of the same program straight
  // through, to compare with.
  script_->Push({paused.id, 0});
  script_->Push({std::nullopt, 0});
  ASSERT_TRUE(RunWorker("b", 2)) << logs_;
  const store::TrialRecord straight = Newest();
  ASSERT_NE(straight.id, paused.id);
  EXPECT_EQ(store_->GetTrial(paused.id)->state, TrialState::kCompleted) << logs_;
  EXPECT_EQ(straight.state, TrialState::kCompleted) << logs_;
  EXPECT_NE(logs_.find("trial " + std::to_string(paused.number) + " of experiment " +
                       std::to_string(paused.experiment_id) + " (id " + std::to_string(paused.id) +
                       "): resuming after step 2"),
            std::string::npos)
      << logs_;
  EXPECT_TRUE(Events("trial.restarted").empty()) << logs_;
  // Steps 1 and 2 from worker a, 3 to 5 from worker b: the curve of a trial
  // that never stopped, to the last printed digit.
  const auto resumed_curve = Curve(paused.id);
  ASSERT_EQ(resumed_curve.size(), 5u);
  EXPECT_EQ(resumed_curve, Curve(straight.id));
  EXPECT_EQ(store_->GetTrial(paused.id)->final_metrics_json, straight.final_metrics_json);
  EXPECT_FALSE(artifacts_->Stat(paused.id)->has_value()) << "deleted when it completed";
  EXPECT_TRUE(ScratchIsClean()) << "the workers leave no checkpoint directories behind";
}

TEST_F(CheckpointE2eTest, ACorruptCheckpointAtResumeRestartsTheTrialFromStepOne) {
  Start(kCommandSpec);
  script_->Push({std::nullopt, 2});
  ASSERT_TRUE(RunWorker("a", 1)) << logs_;
  const store::TrialRecord paused = Newest();
  ASSERT_EQ(paused.state, TrialState::kPaused) << logs_;
  {
    const std::string file =
        artifacts_->description().substr(6) + "/trial-" + std::to_string(paused.id) + ".ckpt";
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(256 + 100);
    f.write("!!", 2);
  }
  script_->Push({paused.id, 0});
  script_->Push({std::nullopt, 0});
  ASSERT_TRUE(RunWorker("b", 2)) << logs_;
  const store::TrialRecord straight = Newest();
  const auto restarted = Events("trial.restarted");
  ASSERT_EQ(restarted.size(), 1u) << logs_;
  EXPECT_EQ(restarted[0]["trial_id"], paused.id);
  EXPECT_EQ(restarted[0]["by"], "worker");
  const std::string reason = restarted[0]["reason"];
  EXPECT_NE(reason.find("could not be restored"), std::string::npos) << reason;
  EXPECT_NE(reason.find("corrupt"), std::string::npos) << reason;
  // Trained again from step 1, not from what arrived.
  EXPECT_EQ(store_->GetTrial(paused.id)->state, TrialState::kCompleted) << logs_;
  EXPECT_EQ(Curve(paused.id), Curve(straight.id));
  EXPECT_TRUE(ScratchIsClean());
}

// A server that is away through every try of the download (a restart
// that outlasts them) says nothing of the checkpoint: the worker leaves the
// trial to the server instead of starting it over, and the trial later
// resumes from that checkpoint on the curve of a trial that never paused.
TEST_F(CheckpointE2eTest, ACheckpointThatCannotBeFetchedIsKeptAndTheTrialResumesFromItLater) {
  Start(kCommandSpec);
  script_->Push({std::nullopt, 2});
  ASSERT_TRUE(RunWorker("a", 1)) << logs_;
  const store::TrialRecord paused = Newest();
  ASSERT_EQ(paused.state, TrialState::kPaused) << logs_;
  const std::vector<std::string> before = Curve(paused.id);
  ASSERT_EQ(before.size(), 2u) << logs_;

  script_->FailDownloads(kCheckpointTransferAttempts);
  script_->Push({paused.id, 0});
  ASSERT_TRUE(RunWorker("b", 1)) << logs_;
  EXPECT_TRUE(Events("trial.restarted").empty()) << logs_;
  EXPECT_EQ(Curve(paused.id), before) << "the steps before the checkpoint were dropped\n" << logs_;
  auto kept = artifacts_->Stat(paused.id);
  ASSERT_TRUE(kept.ok() && kept->has_value()) << "the checkpoint was deleted\n" << logs_;
  EXPECT_EQ((*kept)->step, 2);
  EXPECT_NE(logs_.find("leaving it to the server"), std::string::npos) << logs_;

  // What the server does at b's next lease, which lists the trial no longer:
  // it ends the lease, and the trial is paused at its rung again.
  const store::TrialRecord left = *store_->GetTrial(paused.id);
  ASSERT_TRUE(store_->ExpireLeasesNotHeld(left.lease_owner, {}).ok());
  ASSERT_TRUE(store_->ReclaimExpiredLeases(3).ok());
  ASSERT_EQ(store_->GetTrial(paused.id)->state, TrialState::kPaused);
  EXPECT_EQ(Curve(paused.id), before);

  script_->Push({paused.id, 0});
  script_->Push({std::nullopt, 0});
  ASSERT_TRUE(RunWorker("c", 2)) << logs_;
  const store::TrialRecord straight = Newest();
  EXPECT_EQ(store_->GetTrial(paused.id)->state, TrialState::kCompleted) << logs_;
  EXPECT_TRUE(Events("trial.restarted").empty()) << logs_;
  EXPECT_EQ(Curve(paused.id), Curve(straight.id)) << logs_;
  EXPECT_TRUE(ScratchIsClean());
}

TEST_F(CheckpointE2eTest, TheBuiltinTrainerPausesAndResumesOnAnotherWorker) {
  Start(kBuiltinSpec);
  script_->Push({std::nullopt, 1});
  ASSERT_TRUE(RunWorker("a", 1)) << logs_;
  const store::TrialRecord paused = Newest();
  ASSERT_EQ(paused.state, TrialState::kPaused) << logs_;
  ASSERT_EQ(Events("trial.paused").at(0)["checkpoint"], true) << logs_;
  script_->Push({paused.id, 0});
  ASSERT_TRUE(RunWorker("b", 1)) << logs_;
  const auto done = *store_->GetTrial(paused.id);
  EXPECT_EQ(done.state, TrialState::kCompleted) << logs_;
  EXPECT_EQ(store_->ListMeasurements(paused.id)->size(), 3u);
  EXPECT_NE(logs_.find("resuming after step 1"), std::string::npos) << logs_;
  EXPECT_TRUE(Events("trial.restarted").empty()) << logs_;
  EXPECT_GT(json::parse(done.final_metrics_json).value("test_accuracy", 0.0), 0.5);
}

}  // namespace
}  // namespace hpo::server
