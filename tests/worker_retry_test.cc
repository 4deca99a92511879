// A real hpo-worker against a server that answers some calls ABORTED (a lost
// race: a PostgreSQL serialization failure the store could not win) retries
// them, and finishes the trial, instead of giving it up; a call that can
// never win is given up after kMaxAbortedAttempts tries, not retried
// forever.
//
// The server runs in this process and every RPC is the real
// WorkerServiceImpl's. A forwarding service in front of it (STYLE.md: fault
// injection by a wrapper that overrides one call) answers the first
// `aborts` Reports of each step, and the first Complete, ABORTED before
// they reach the real one: a real conflict on PostgreSQL is retried inside
// the store (store_retry_test.cc), so one that reaches the worker is not
// something a test can force on a real database without this.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

#include "proto/grpc_status.h"
#include "server/engine/engine.h"
#include "server/grpc/worker_service.h"
#include "testing/files.h"
#include "testing/server_process.h"

namespace hpo::server {
namespace {

namespace fs = std::filesystem;
namespace v1 = hpo::v1;
using store::TrialState;

class AbortingService final : public v1::WorkerService::Service {
 public:
  // The first `aborts` Reports of each step and the first `aborts`
  // Completes of each trial are answered ABORTED.
  // With `lose_first_lease`, the first Lease that grants a trial is
  // answered UNAVAILABLE after the real service granted it: what a server
  // killed before its answer left does.
  AbortingService(WorkerServiceImpl& real, int aborts, bool lose_first_lease = false)
      : real_(real), aborts_(aborts), lose_lease_(lose_first_lease) {}

  ::grpc::Status Report(::grpc::ServerContext* c, const v1::ReportRequest* q,
                        v1::ReportResponse* r) override {
    if (Abort("report", q->trial_id(), q->step())) return Aborted();
    return real_.Report(c, q, r);
  }
  ::grpc::Status Complete(::grpc::ServerContext* c, const v1::CompleteRequest* q,
                          v1::CompleteResponse* r) override {
    if (Abort("complete", q->trial_id(), 0)) return Aborted();
    return real_.Complete(c, q, r);
  }

  // How many calls of `what` ("report", "complete", "lease", "lease listing
  // held") arrived, aborted or not.
  int Calls(const std::string& what) {
    std::lock_guard lock(mu_);
    int n = 0;
    for (const auto& [key, count] : calls_) {
      if (std::get<0>(key) == what) n += count;
    }
    return n;
  }

  // The rest is the real service's.
  ::grpc::Status Register(::grpc::ServerContext* c, const v1::RegisterRequest* q,
                          v1::RegisterResponse* r) override {
    return real_.Register(c, q, r);
  }
  ::grpc::Status Lease(::grpc::ServerContext* c, const v1::LeaseRequest* q,
                       v1::LeaseResponse* r) override {
    ::grpc::Status s = real_.Lease(c, q, r);
    std::lock_guard lock(mu_);
    ++calls_[{"lease", 0, 0}];
    if (q->lists_held()) ++calls_[{"lease listing held", 0, 0}];
    if (s.ok() && r->has_trial() && lose_lease_) {
      lose_lease_ = false;
      return ToGrpcStatus(Status::Unavailable("connection reset (the answer was lost)"));
    }
    return s;
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

 private:
  static ::grpc::Status Aborted() {
    // What the real service sends when the store gave up on a conflict.
    return ToGrpcStatus(
        Status::Aborted("postgresql://db: could not serialize access due to concurrent update"));
  }
  bool Abort(const std::string& what, int64_t trial, int64_t step) {
    std::lock_guard lock(mu_);
    return ++calls_[{what, trial, step}] <= aborts_;
  }

  WorkerServiceImpl& real_;
  const int aborts_;
  std::mutex mu_;
  bool lose_lease_;                                                 // GUARDED_BY(mu_)
  std::map<std::tuple<std::string, int64_t, int64_t>, int> calls_;  // GUARDED_BY(mu_)
};

using hpo::testing::ReadFile;

constexpr int kSteps = 3;
const char* kSpec = R"({"name": "retry", "objective": {"metric": "loss", "direction": "minimize"},
  "spaces": [{"name": "a", "params": {"x": {"type": "float", "low": 0.1, "high": 0.5}}}],
  "algorithm": {"sampler": "random", "seed": 3},
  "early_stopping": {"rule": "none"},
  "budget": {"max_trials": 1, "max_parallel": 1, "steps_per_trial": 3},
  "executor": {"command": {"argv": ["python3", ")" HPO_SOURCE_DIR R"(/examples/train_example.py",
                                    "--lr={x}", "--width=6", "--seed=11"], "timeout_s": 60}}})";

class WorkerRetryTest : public ::testing::Test {
 protected:
  // An experiment of kSpec with `trials` trials in all, one at a time.
  void Start(int aborts, bool lose_first_lease = false, int trials = 1) {
    dir_ = ::testing::TempDir() + "hpo-worker-retry-" + std::to_string(getpid()) + "-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    auto s = store::OpenStore("sqlite://" + dir_ + "/hpo.db");
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = std::move(s).value();
    engine_ = std::make_unique<Engine>(*store_, EngineOptions{});
    std::string spec = kSpec;
    const std::string one = R"("max_trials": 1,)";
    spec.replace(spec.find(one), one.size(), R"("max_trials": )" + std::to_string(trials) + ",");
    auto e = engine_->CreateExperiment(spec);
    ASSERT_TRUE(e.ok()) << e.status();
    experiment_ = e->id;
    real_ = std::make_unique<WorkerServiceImpl>(*engine_, WorkerServiceOptions{"", 100});
    aborting_ = std::make_unique<AbortingService>(*real_, aborts, lose_first_lease);
    auto server = GrpcServer::Start("127.0.0.1:0", aborting_.get());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::seconds(1));
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // Runs a worker for `trials` trials; true when it exited 0. Its log is in
  // log_.
  bool RunWorker(int trials = 1) {
    const std::string log = dir_ + "/worker.log";
    const pid_t pid =
        testing::Spawn({HPO_WORKER_BIN, "--server", "127.0.0.1:" + std::to_string(server_->port()),
                        "--device", "cpu", "--threads", "1", "--benchmark-seconds", "0.1",
                        "--heartbeat-ms", "500", "--max-trials", std::to_string(trials)},
                       log);
    // 120 s: a hang fails the test instead of stalling it.
    const std::optional<int> status = testing::WaitExit(pid, std::chrono::seconds(120));
    if (!status) testing::KillAndReap(pid);
    log_ = ReadFile(log);
    return status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0;
  }

  store::TrialRecord OnlyTrial() {
    auto all = store_->ListTrials(experiment_, {});
    EXPECT_TRUE(all.ok()) << all.status();
    EXPECT_EQ(all.ok() ? all->size() : 0u, 1u);
    return all.ok() && !all->empty() ? all->at(0) : store::TrialRecord{};
  }

  std::string dir_, log_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Engine> engine_;
  store::Id experiment_ = 0;
  std::unique_ptr<WorkerServiceImpl> real_;
  std::unique_ptr<AbortingService> aborting_;
  std::unique_ptr<GrpcServer> server_;
};

TEST_F(WorkerRetryTest, AbortedReportsAndCompletionsAreRetriedAndTheTrialCompletes) {
  Start(/*aborts=*/2);
  ASSERT_TRUE(RunWorker()) << log_;
  const store::TrialRecord trial = OnlyTrial();
  EXPECT_EQ(trial.state, TrialState::kCompleted) << trial.reason << "\n" << log_;
  auto curve = store_->ListMeasurements(trial.id);
  ASSERT_TRUE(curve.ok()) << curve.status();
  EXPECT_EQ(curve->size(), static_cast<size_t>(kSteps)) << log_;
  // Each step: two refused, the third through; the completion likewise.
  EXPECT_EQ(aborting_->Calls("report"), 3 * kSteps) << log_;
  EXPECT_EQ(aborting_->Calls("complete"), 3) << log_;
  EXPECT_NE(log_.find("report: ABORTED"), std::string::npos) << log_;
  EXPECT_EQ(log_.find("report refused"), std::string::npos) << log_;
}

// The server granted a lease whose answer never arrived. The worker's next
// lease says it holds nothing, so the trial runs again at once; without that
// it stayed leased to nobody for the lease timeout (60 s here), holding the
// experiment's only slot.
TEST_F(WorkerRetryTest, ALeaseWhoseAnswerWasLostRunsAgainAtTheNextLease) {
  Start(/*aborts=*/0, /*lose_first_lease=*/true);
  ASSERT_TRUE(RunWorker()) << log_;
  const store::TrialRecord trial = OnlyTrial();
  EXPECT_EQ(trial.state, TrialState::kCompleted) << trial.reason << "\n" << log_;
  EXPECT_EQ(trial.attempt, 2) << "the lost lease was not the one handed back";
  EXPECT_GE(aborting_->Calls("lease"), 2) << log_;
  // The first lease lists (a worker starts unsure), and so does the one
  // after the lost answer.
  EXPECT_EQ(aborting_->Calls("lease listing held"), 2) << log_;
}

// Where no call failed, the server and the worker agree on what it holds:
// only the first lease lists it, and the others spare the server the read.
TEST_F(WorkerRetryTest, AWorkerWhoseCallsAllWentThroughListsWhatItHoldsOnlyOnItsFirstLease) {
  Start(/*aborts=*/0, /*lose_first_lease=*/false, /*trials=*/3);
  ASSERT_TRUE(RunWorker(3)) << log_;
  auto all = store_->ListTrials(experiment_, {});
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 3u) << log_;
  for (const auto& t : *all) EXPECT_EQ(t.state, TrialState::kCompleted) << t.reason << "\n" << log_;
  EXPECT_GE(aborting_->Calls("lease"), 3) << log_;
  EXPECT_EQ(aborting_->Calls("lease listing held"), 1) << log_;
}

// A trial given up after a report that never won is still leased to the
// worker as far as the server knows. The failed calls make the next lease
// list what the worker holds, so that lease ends at once and the trial runs
// again, instead of holding the experiment's only slot for the lease
// timeout (60 s).
TEST_F(WorkerRetryTest, ATrialGivenUpAfterRefusedCallsIsHandedBackAtTheNextLease) {
  Start(/*aborts=*/1'000'000);
  ASSERT_TRUE(RunWorker(2)) << log_;
  const store::TrialRecord trial = OnlyTrial();
  EXPECT_EQ(trial.attempt, 2) << "the given-up lease was not handed back\n" << log_;
  EXPECT_EQ(aborting_->Calls("lease listing held"), 2) << log_;
}

TEST_F(WorkerRetryTest, AReportThatNeverWinsIsGivenUpAfterABoundedNumberOfTries) {
  Start(/*aborts=*/1'000'000);
  ASSERT_TRUE(RunWorker()) << log_;
  // Given up like any refused report: the worker stops the trial and leaves
  // it to its lease.
  EXPECT_EQ(aborting_->Calls("report"), kMaxAbortedAttempts) << log_;
  EXPECT_EQ(aborting_->Calls("complete"), 0) << log_;
  EXPECT_NE(log_.find("report refused"), std::string::npos) << log_;
  EXPECT_EQ(OnlyTrial().state, TrialState::kLeased) << log_;
}

}  // namespace
}  // namespace hpo::server
