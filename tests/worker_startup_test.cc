// A real hpo-worker against an in-process server: it loads the built-in
// trainers' data before it registers, so that no lease pays for it; without
// the data it still starts, says so once, and a built-in trial fails saying
// why; and every segment ends with one line of its overheads, which
// bench/hetero reads.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "server/engine/engine.h"
#include "server/grpc/worker_service.h"
#include "testing/files.h"
#include "testing/process.h"

namespace hpo::server {
namespace {

namespace fs = std::filesystem;
using store::TrialState;

constexpr const char* kData = "/usr/share/datasets/fashion-mnist";

const char* kSpec =
    R"({"name": "startup", "objective": {"metric": "accuracy", "direction": "maximize"},
  "spaces": [{"name": "a", "params": {"lr": {"type": "float", "low": 0.001, "high": 0.002}}}],
  "algorithm": {"sampler": "random", "seed": 3},
  "budget": {"max_trials": 1, "max_parallel": 1, "steps_per_trial": 2},
  "executor": {"builtin": {"trainer": "fashion-mnist-mlp", "args": {"max_train_samples": 500}}}})";

// The key=value pairs of the first line of `log` that holds `prefix`.
std::map<std::string, std::string> Fields(const std::string& log, const std::string& prefix) {
  std::map<std::string, std::string> out;
  const size_t at = log.find(prefix);
  if (at == std::string::npos) return out;
  std::istringstream line(log.substr(at, log.find('\n', at) - at));
  for (std::string word; line >> word;) {
    const size_t eq = word.find('=');
    if (eq != std::string::npos) out[word.substr(0, eq)] = word.substr(eq + 1);
  }
  return out;
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

class WorkerStartupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "hpo-worker-startup-" + std::to_string(getpid()) + "-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    auto s = store::OpenStore("sqlite://" + dir_ + "/hpo.db");
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = std::move(s).value();
    engine_ = std::make_unique<Engine>(*store_, EngineOptions{});
    auto e = engine_->CreateExperiment(kSpec);
    ASSERT_TRUE(e.ok()) << e.status();
    experiment_ = e->id;
    WorkerServiceOptions options;
    options.retry_after_ms = 100;
    service_ = std::make_unique<WorkerServiceImpl>(*engine_, options);
    auto server = GrpcServer::Start("127.0.0.1:0", service_.get());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::seconds(1));
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // Runs a worker with `data_dir` for one trial; its log. A worker still
  // running after 120 s is killed (the test then fails on what is missing).
  std::string RunWorker(const std::string& data_dir) {
    const std::string log = dir_ + "/worker.log";
    const pid_t pid =
        testing::Spawn({HPO_WORKER_BIN, "--server", "127.0.0.1:" + std::to_string(server_->port()),
                        "--device", "cpu", "--threads", "1", "--benchmark-seconds", "0.1",
                        "--heartbeat-ms", "500", "--max-trials", "1", "--data-dir", data_dir},
                       log);
    const std::optional<int> status = testing::WaitExit(pid, std::chrono::seconds(120));
    if (!status) testing::KillAndReap(pid);
    EXPECT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
        << "the worker did not exit 0";
    return hpo::testing::ReadFile(log);
  }

  store::TrialRecord OnlyTrial() {
    auto all = store_->ListTrials(experiment_, {});
    EXPECT_TRUE(all.ok()) << all.status();
    EXPECT_EQ(all.ok() ? all->size() : 0u, 1u);
    return all.ok() && !all->empty() ? all->at(0) : store::TrialRecord{};
  }

  std::string dir_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Engine> engine_;
  store::Id experiment_ = 0;
  std::unique_ptr<WorkerServiceImpl> service_;
  std::unique_ptr<GrpcServer> server_;
};

TEST_F(WorkerStartupTest, LoadsTheTrainersDataBeforeItRegistersAndLogsEachSegmentsOverheads) {
  const std::string log = RunWorker(kData);
  const size_t loaded = log.find(std::string("built-in trainers' data loaded from ") + kData);
  const size_t registered = log.find("registered as worker");
  ASSERT_NE(loaded, std::string::npos) << log;
  ASSERT_NE(registered, std::string::npos) << log;
  EXPECT_LT(loaded, registered) << "loaded before it asked for work\n" << log;
  const store::TrialRecord trial = OnlyTrial();
  EXPECT_EQ(trial.state, TrialState::kCompleted) << trial.reason << "\n" << log;

  // One line per segment, with every figure bench/hetero reads.
  EXPECT_EQ(Count(log, " segment trial="), 1u) << log;
  auto f = Fields(log, " segment trial=");
  EXPECT_EQ(f["trial"], std::to_string(trial.id)) << log;
  EXPECT_EQ(f["resume_step"], "0");
  EXPECT_EQ(f["end"], "completed");
  EXPECT_EQ(f["reports"], "2");
  EXPECT_EQ(f["checkpoint_restore_ms"], "0");
  EXPECT_EQ(f["checkpoint_save_ms"], "0");
  for (const char* key : {"lease_to_first_step_ms", "report_ms", "lease_to_first_report_ms",
                          "eval_ms", "segment_ms"}) {
    ASSERT_TRUE(f.count(key)) << key << "\n" << log;
    EXPECT_GE(std::stod(f[key]), 0) << key;
  }
  EXPECT_LE(std::stod(f["lease_to_first_step_ms"]), std::stod(f["lease_to_first_report_ms"]));
  EXPECT_LE(std::stod(f["lease_to_first_report_ms"]), std::stod(f["segment_ms"]));
}

TEST_F(WorkerStartupTest, WithoutItsDataAWorkerStartsSaysSoOnceAndABuiltinTrialFailsSayingWhy) {
  const std::string missing = dir_ + "/no-data";
  const std::string log = RunWorker(missing);
  const std::string why = "cannot be loaded from '" + missing + "'";
  EXPECT_EQ(Count(log, "trials of the built-in trainers will fail on this worker"), 1u) << log;
  const size_t warned = log.find(why);
  const size_t registered = log.find("registered as worker");
  ASSERT_NE(warned, std::string::npos) << log;
  ASSERT_NE(registered, std::string::npos) << "it starts all the same\n" << log;
  EXPECT_LT(warned, registered) << log;
  const store::TrialRecord trial = OnlyTrial();
  EXPECT_EQ(trial.state, TrialState::kFailed) << log;
  EXPECT_NE(trial.reason.find(why), std::string::npos) << trial.reason;
  EXPECT_NE(trial.reason.find("train-images-idx3-ubyte.gz"), std::string::npos) << trial.reason;
  EXPECT_EQ(Fields(log, " segment trial=")["end"], "failed") << log;
}

}  // namespace
}  // namespace hpo::server
