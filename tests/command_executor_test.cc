// The command executor against real programs: small shell scripts written
// into a temporary directory.
#include "worker/command_executor.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "testing/files.h"

namespace hpo::worker {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
using Metrics = std::map<std::string, double>;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Records every call; answers with `verdict` (kContinue when unset).
class FakeReporter : public Reporter {
 public:
  struct Call {
    int64_t step;
    Metrics metrics;
    double samples_per_sec;
    json system;
    Clock::time_point at;
    json applied = nullptr;  // ReportApplied's; null from Report
  };

  Verdict Report(int64_t step, const Metrics& metrics, double samples_per_sec,
                 const json& system) override {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.push_back({step, metrics, samples_per_sec, system, Clock::now()});
    return verdict ? verdict(calls_.back()) : Verdict::kContinue;
  }
  Verdict ReportApplied(int64_t step, const Metrics& metrics, double samples_per_sec,
                        const json& system, const json& applied) override {
    const Verdict v = Report(step, metrics, samples_per_sec, system);
    std::lock_guard<std::mutex> lock(mu_);
    calls_.back().applied = applied;
    return v;
  }
  json new_system() const override { return next_system; }
  bool stop_requested() const override { return stop.load(); }

  std::vector<Call> calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

  std::function<Verdict(const Call&)> verdict;
  json next_system = json::object();
  std::atomic<bool> stop{false};

 private:
  mutable std::mutex mu_;
  std::vector<Call> calls_;
};

using hpo::testing::ReadFile;

// A process that has ended: gone, or a zombie nobody has reaped yet (in a
// container whose init does not reap, orphans stay zombies).
bool Ended(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z';
}

bool EndsWithin(pid_t pid, double seconds) {
  const auto start = Clock::now();
  while (SecondsSince(start) < seconds) {
    if (Ended(pid)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return Ended(pid);
}

class CommandExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "hpo-cmd-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  // Writes an executable /bin/sh script and returns its path.
  std::string Script(const std::string& name, const std::string& body) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
    ::chmod(path.c_str(), 0755);
    return path;
  }

  TrialRun MakeRun(std::vector<std::string> argv) {
    TrialRun run;
    run.trial_id = 42;
    run.experiment_id = 7;
    run.seed = 1234;
    run.max_steps = 5;
    run.argv = std::move(argv);
    run.timeout_ms = 20000;  // a hang shows as a failure, not as a stuck test
    return run;
  }

  CommandExecutor Executor() {
    CommandExecutor::Options options;
    options.working_dir = dir_;
    options.kill_grace = std::chrono::milliseconds(1000);
    return CommandExecutor(options);
  }

  std::string dir_;
};

TEST_F(CommandExecutorTest, ReportsMetricLinesInOrder) {
  const std::string script = Script("train.sh", R"sh(
echo "starting"
echo "hpo: step=1 loss=0.5 accuracy=0.8 samples_per_sec=100 batch_size=64"
echo "some noise" >&2
echo '{"step": 2, "loss": 0.4, "threads": 2, "note": "json"}'
echo "hpo: loss=0.3 precision=bf16"
echo "hpo: step=x loss=1"
printf 'hpo: step=10 loss=0.2\r\n'
printf 'hpo: loss=0.1'
)sh");
  TrialRun run = MakeRun({script});
  run.max_steps = 11;
  run.system = {{"batch_size", 32}, {"threads", 1}, {"precision", "fp32"}};
  FakeReporter reporter;
  auto r = Executor().Run(run, reporter);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->stopped);

  const auto calls = reporter.calls();
  ASSERT_EQ(calls.size(), 5u);
  EXPECT_EQ(calls[0].step, 1);
  EXPECT_EQ(calls[0].metrics, (Metrics{{"loss", 0.5}, {"accuracy", 0.8}}));
  EXPECT_DOUBLE_EQ(calls[0].samples_per_sec, 100);
  EXPECT_EQ(calls[0].system, (json{{"batch_size", 64}, {"threads", 1}, {"precision", "fp32"}}));
  EXPECT_EQ(calls[0].applied, (json{{"batch_size", 64}})) << "applied: only what the line says ran";
  EXPECT_TRUE(Executor().DeclaredSystemChanges(run).empty())
      << "it cannot know what a program does with a new setting: the spec's `mutable` says";

  EXPECT_EQ(calls[1].step, 2);
  EXPECT_EQ(calls[1].metrics, (Metrics{{"loss", 0.4}}));
  EXPECT_DOUBLE_EQ(calls[1].samples_per_sec, 0);
  EXPECT_EQ(calls[1].system, (json{{"batch_size", 32}, {"threads", 2}, {"precision", "fp32"}}));

  EXPECT_EQ(calls[2].step, 3) << "no step: one more than the previous";
  EXPECT_EQ(calls[2].metrics, (Metrics{{"loss", 0.3}}));
  EXPECT_EQ(calls[2].system["precision"], "bf16") << "the trial's own system keys are system";

  EXPECT_EQ(calls[3].step, 10);
  EXPECT_EQ(calls[4].step, 11);
  EXPECT_EQ(calls[4].metrics, (Metrics{{"loss", 0.1}})) << "a last line without a newline counts";

  EXPECT_EQ(r->final_metrics, (Metrics{{"loss", 0.1}}));
  EXPECT_NE(r->log_tail.find("starting\n"), std::string::npos) << r->log_tail;
  EXPECT_NE(r->log_tail.find("some noise"), std::string::npos) << r->log_tail;
  EXPECT_NE(r->log_tail.find("not a valid metric line: step: 'x'"), std::string::npos)
      << r->log_tail;
}

TEST_F(CommandExecutorTest, LinesWithoutTheObjectiveAreNotReported) {
  const std::string script = Script("train.sh", R"sh(
echo "hpo: step=1 train_loss=0.9"
echo "hpo: step=1 val_loss=0.8 train_loss=0.9"
echo "hpo: step=2 train_loss=0.7"
echo "hpo: step=2 val_loss=0.6"
)sh");
  TrialRun run = MakeRun({script});
  run.objective_metric = "val_loss";
  FakeReporter reporter;
  auto r = Executor().Run(run, reporter);
  ASSERT_TRUE(r.ok()) << r.status();
  const auto calls = reporter.calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].step, 1);
  EXPECT_EQ(calls[1].step, 2);
  EXPECT_EQ(r->final_metrics, (Metrics{{"val_loss", 0.6}}));
  EXPECT_NE(r->log_tail.find("without 'val_loss' are not reported"), std::string::npos);
}

TEST_F(CommandExecutorTest, SetsTheEnvironment) {
  const std::string script = Script("env.sh", R"sh(
{
  echo "HPO_TRIAL_ID=$HPO_TRIAL_ID"
  echo "HPO_EXPERIMENT_ID=$HPO_EXPERIMENT_ID"
  echo "HPO_PARAMS=$HPO_PARAMS"
  echo "HPO_SYSTEM=$HPO_SYSTEM"
  echo "HPO_THREADS=$HPO_THREADS"
  echo "OMP_NUM_THREADS=$OMP_NUM_THREADS"
  echo "HPO_BATCH_SIZE=$HPO_BATCH_SIZE"
  echo "HPO_MAX_STEPS=$HPO_MAX_STEPS"
  echo "HPO_SEED=$HPO_SEED"
  echo "HPO_DEVICE=$HPO_DEVICE"
  echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset}"
  echo "MY_VAR=$MY_VAR"
  echo "PYTHONUNBUFFERED=$PYTHONUNBUFFERED"
  echo "SYSTEM_FILE=$(cat "$HPO_SYSTEM_FILE")"
  echo "PWD=$(pwd)"
  read line; echo "STDIN_EOF=$?"
  echo "ARGS=$*"
} > "$1"
echo "hpo: loss=1 threads=$HPO_THREADS"
)sh");
  const std::string out = dir_ + "/env.txt";
  // argv[0] without a '/' is looked up on PATH.
  TrialRun run = MakeRun({"sh", script, out, "--lr=0.1"});
  run.params = {{"lr", 0.1}, {"width", 64}};
  run.system = {{"batch_size", 128.0}, {"threads", 8}};
  run.threads = 4;
  run.env = {{"MY_VAR", "hello world"}, {"HPO_SEED", "overridden by the worker"}};
  FakeReporter reporter;
  auto r = Executor().Run(run, reporter);
  ASSERT_TRUE(r.ok()) << r.status();

  std::set<std::string> lines;
  std::istringstream env(ReadFile(out));
  for (std::string line; std::getline(env, line);) lines.insert(line);
  const std::string real_dir = std::filesystem::canonical(dir_).string();
  for (const std::string& expected : std::vector<std::string>{
           "HPO_TRIAL_ID=42",
           "HPO_EXPERIMENT_ID=7",
           R"(HPO_PARAMS={"lr":0.1,"width":64})",
           R"(HPO_SYSTEM={"batch_size":128.0,"threads":8})",
           "HPO_THREADS=8",  // the tuned system.threads, not the device's 4
           "OMP_NUM_THREADS=8",
           "HPO_BATCH_SIZE=128",
           "HPO_MAX_STEPS=5",
           "HPO_SEED=1234",
           "HPO_DEVICE=cpu",
           "CUDA_VISIBLE_DEVICES=",  // set and empty: no GPU
           "MY_VAR=hello world",
           "PYTHONUNBUFFERED=1",
           R"(SYSTEM_FILE={"batch_size":128.0,"threads":8})",
           "PWD=" + real_dir,
           "STDIN_EOF=1",
           "ARGS=" + out + " --lr=0.1",
       }) {
    EXPECT_TRUE(lines.count(expected)) << "missing " << expected;
  }
  ASSERT_EQ(reporter.calls().size(), 1u);
  EXPECT_EQ(reporter.calls()[0].metrics, (Metrics{{"loss", 1}}));
}

TEST_F(CommandExecutorTest, GpuDeviceAndThreadsWithoutASystemSetting) {
  const std::string script = Script("env.sh", R"sh(
echo "hpo: loss=1 gpu=$CUDA_VISIBLE_DEVICES threads=$HPO_THREADS"
)sh");
  TrialRun run = MakeRun({script});
  run.device = "cuda:3";
  run.threads = 6;
  FakeReporter reporter;
  auto r = Executor().Run(run, reporter);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(reporter.calls().size(), 1u);
  EXPECT_EQ(reporter.calls()[0].metrics, (Metrics{{"loss", 1}, {"gpu", 3}}));
  EXPECT_EQ(reporter.calls()[0].system, (json{{"threads", 6}}));

  run.device = "tpu:0";
  auto bad = Executor().Run(run, reporter);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(bad.status().IsInvalidArgument()) << bad.status();
}

TEST_F(CommandExecutorTest, ChangeSystemRewritesTheSystemFile) {
  const std::string script = Script("train.sh", R"sh(
echo "$HPO_SYSTEM_FILE" > system_path.txt
echo "hpo: step=1 loss=1 batch_size=$(sed 's/.*"batch_size":\([0-9]*\).*/\1/' "$HPO_SYSTEM_FILE")"
i=0
while [ $i -lt 100 ] && ! grep -q 256 "$HPO_SYSTEM_FILE"; do sleep 0.05; i=$((i+1)); done
cp "$HPO_SYSTEM_FILE" second.json
echo "hpo: step=2 loss=0.5 batch_size=$(sed 's/.*"batch_size":\([0-9]*\).*/\1/' "$HPO_SYSTEM_FILE")"
)sh");
  TrialRun run = MakeRun({script});
  run.system = {{"batch_size", 64}, {"threads", 2}};
  FakeReporter reporter;
  reporter.next_system = {{"batch_size", 256}};
  reporter.verdict = [](const FakeReporter::Call& c) {
    return c.step == 1 ? Verdict::kChangeSystem : Verdict::kContinue;
  };
  auto r = Executor().Run(run, reporter);
  ASSERT_TRUE(r.ok()) << r.status();
  const auto calls = reporter.calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].system, (json{{"batch_size", 64}, {"threads", 2}}));
  EXPECT_EQ(calls[1].system, (json{{"batch_size", 256}, {"threads", 2}}))
      << "the program echoed the setting it read from HPO_SYSTEM_FILE";
  EXPECT_EQ(json::parse(ReadFile(dir_ + "/second.json")),
            (json{{"batch_size", 256}, {"threads", 2}}));
  std::string system_path = ReadFile(dir_ + "/system_path.txt");
  ASSERT_FALSE(system_path.empty());
  system_path.pop_back();
  EXPECT_FALSE(std::filesystem::exists(system_path)) << "the scratch directory is removed";
}

TEST_F(CommandExecutorTest, NonZeroExitFailsWithTheTail) {
  const std::string script = Script("fail.sh", R"sh(
echo "hpo: step=1 loss=1"
echo "loading data"
echo "Traceback: something broke" >&2
exit 3
)sh");
  FakeReporter reporter;
  auto r = Executor().Run(MakeRun({script}), reporter);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsFailedPrecondition()) << r.status();
  EXPECT_EQ(r.status().message(),
            "exit status 3; last output:\nhpo: step=1 loss=1\nloading data\n"
            "Traceback: something broke");
  EXPECT_EQ(reporter.calls().size(), 1u);
}

TEST_F(CommandExecutorTest, ACrashFailsNamingTheSignal) {
  const std::string script = Script("crash.sh", "echo 'about to crash'\nkill -9 $$\n");
  FakeReporter reporter;
  auto r = Executor().Run(MakeRun({script}), reporter);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal) << r.status();
  EXPECT_EQ(r.status().message(), "killed by signal 9 (SIGKILL); last output:\nabout to crash");
}

TEST_F(CommandExecutorTest, ExitZeroWithoutMetricsFails) {
  const std::string script = Script("quiet.sh", "echo 'Epoch 1: loss 0.5'\n");
  FakeReporter reporter;
  TrialRun run = MakeRun({script});
  run.objective_metric = "loss";
  auto r = Executor().Run(run, reporter);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsFailedPrecondition()) << r.status();
  EXPECT_NE(r.status().message().find("without printing a metric line (such as 'hpo: step=1 "
                                      "loss=0.5'); last output:\nEpoch 1: loss 0.5"),
            std::string::npos)
      << r.status();
}

TEST_F(CommandExecutorTest, TimeoutKillsTheWholeProcessGroup) {
  const std::string script = Script("hang.sh", R"sh(
sleep 100 &
echo $! > background.pid
echo "hpo: step=1 loss=1"
sleep 100
touch finished
)sh");
  TrialRun run = MakeRun({script});
  run.timeout_ms = 1000;
  FakeReporter reporter;
  auto r = Executor().Run(run, reporter);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_EQ(r.status().message(), "timed out after 1 s; last output:\nhpo: step=1 loss=1");
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/finished")) << "the program ran to its end";
  EXPECT_EQ(reporter.calls().size(), 1u);

  const pid_t background = std::stoi(ReadFile(dir_ + "/background.pid"));
  ASSERT_GT(background, 0);
  EXPECT_TRUE(EndsWithin(background, 2.0)) << "the background sleep outlived the trial";
}

TEST_F(CommandExecutorTest, AProgramIgnoringSigtermIsKilled) {
  const std::string script = Script("stubborn.sh", R"sh(
trap '' TERM
sleep 100 &
echo $! > background.pid
sleep 100
touch finished
)sh");
  TrialRun run = MakeRun({script});
  run.timeout_ms = 300;
  CommandExecutor::Options options;
  options.working_dir = dir_;
  options.kill_grace = std::chrono::milliseconds(300);
  FakeReporter reporter;
  auto r = CommandExecutor(options).Run(run, reporter);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_EQ(r.status().message(), "timed out after 0.3 s; no output");
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/finished"))
      << "SIGTERM was ignored, so SIGKILL must have ended it";
  const pid_t background = std::stoi(ReadFile(dir_ + "/background.pid"));
  EXPECT_TRUE(EndsWithin(background, 2.0));
}

TEST_F(CommandExecutorTest, StopVerdictEndsTheRunPromptly) {
  const std::string script = Script("train.sh", R"sh(
sleep 100 &
echo $! > background.pid
echo "hpo: step=1 loss=1"
echo "hpo: step=2 loss=0.9"
sleep 100
touch finished
)sh");
  FakeReporter reporter;
  reporter.verdict = [](const FakeReporter::Call&) { return Verdict::kStop; };
  auto r = Executor().Run(MakeRun({script}), reporter);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->stopped);
  EXPECT_EQ(r->final_metrics, (Metrics{{"loss", 1}}));
  const auto calls = reporter.calls();
  ASSERT_EQ(calls.size(), 1u) << "nothing is reported after a stop";
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/finished")) << "the program ran to its end";
  const pid_t background = std::stoi(ReadFile(dir_ + "/background.pid"));
  EXPECT_TRUE(EndsWithin(background, 2.0));
}

TEST_F(CommandExecutorTest, StopRequestedFromAnotherThread) {
  const std::string script = Script("train.sh", R"sh(
echo "hpo: step=1 loss=1"
sleep 100
touch finished
)sh");
  FakeReporter reporter;
  std::thread stopper([&] {
    while (reporter.calls().empty()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    reporter.stop = true;
  });
  auto r = Executor().Run(MakeRun({script}), reporter);
  stopper.join();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->stopped);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/finished")) << "the program ran to its end";
}

TEST_F(CommandExecutorTest, AStopBeforeTheStartRunsNothing) {
  const std::string script = Script("train.sh", "touch ran.txt\necho 'hpo: loss=1'\n");
  FakeReporter reporter;
  reporter.stop = true;
  auto r = Executor().Run(MakeRun({script}), reporter);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->stopped);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/ran.txt"));
}

TEST_F(CommandExecutorTest, HugeOutputDoesNotDeadlockAndTheTailIsBounded) {
  // 5 MB on standard output without a newline, and 4 MB of lines on standard
  // error at the same time: a reader that waits on one pipe would hang.
  const std::string script = Script("loud.sh", R"sh(
yes 'a line on standard error' | head -n 160000 >&2 &
head -c 5000000 /dev/zero | tr '\0' 'x'
echo
wait
head -c 100000 /dev/zero | tr '\0' 'y'
echo
echo "hpo: step=1 loss=1"
)sh");
  FakeReporter reporter;
  auto r = Executor().Run(MakeRun({script}), reporter);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(reporter.calls().size(), 1u);
  EXPECT_LE(r->log_tail.size(), 16u * 1024);
  EXPECT_LE(std::count(r->log_tail.begin(), r->log_tail.end(), '\n'), 49);
  const std::string last = "\nhpo: step=1 loss=1";
  ASSERT_GE(r->log_tail.size(), last.size());
  EXPECT_EQ(r->log_tail.substr(r->log_tail.size() - last.size()), last);
  EXPECT_NE(r->log_tail.find("yyyy [...]\nhpo: step=1"), std::string::npos)
      << "a long line is cut short, not left to push the others out";
}

// A program that prints far more steps than the trial has: only the
// trial's steps are reported (the server would refuse the rest, and its
// refusal would stop the trial), the program runs on to its end, and the
// tail says why the rest went unreported.
TEST_F(CommandExecutorTest, LinesPastTheTrialsLastStepAreNotReported) {
  const std::string script = Script("chatty.sh", R"sh(
i=1
while [ $i -le 20000 ]; do echo "hpo: loss=$i"; i=$((i+1)); done
echo "hpo: step=9223372036854775807 loss=0.5"
echo "hpo: loss=0.25"
echo "hpo: step=2 loss=0.125"
touch finished
)sh");
  TrialRun run = MakeRun({script});
  run.max_steps = 3;
  FakeReporter reporter;
  auto r = Executor().Run(run, reporter);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<int64_t> steps;
  for (const auto& c : reporter.calls()) steps.push_back(c.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 2}))
      << "a line of a step within the trial still counts";
  EXPECT_EQ(r->final_metrics, (Metrics{{"loss", 0.125}}));
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/finished"))
      << "the program was not stopped for its lines";
  EXPECT_NE(r->log_tail.find("19999 metric line(s) past step 3 (HPO_MAX_STEPS"), std::string::npos)
      << r->log_tail;
}

// A timeout beyond any the server hands out is refused before the program
// starts: added to the clock's now it could overflow.
TEST_F(CommandExecutorTest, ATimeoutBeyondTenYearsIsInvalidArgument) {
  TrialRun run = MakeRun({Script("train.sh", "touch ran.txt\necho 'hpo: loss=1'\n")});
  run.timeout_ms = INT64_MAX;
  FakeReporter reporter;
  auto r = Executor().Run(run, reporter);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status();
  EXPECT_NE(r.status().message().find("(ten years)"), std::string::npos) << r.status();
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/ran.txt"));
}

TEST_F(CommandExecutorTest, TheTailIsValidUtf8) {
  const std::string script = Script("bytes.sh", R"sh(
printf 'caf\303\251 \377\376 done\n'
exit 1
)sh");
  FakeReporter reporter;
  auto r = Executor().Run(MakeRun({script}), reporter);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "exit status 1; last output:\ncaf\xC3\xA9 \xEF\xBF\xBD\xEF\xBF\xBD done");
}

TEST_F(CommandExecutorTest, AProgramThatCannotRunIsInvalidArgument) {
  const std::string not_executable = dir_ + "/data.txt";
  std::ofstream(not_executable) << "not a program\n";
  for (const std::string& program :
       {std::string("no-such-program-hpo"), dir_ + "/missing.sh", not_executable}) {
    FakeReporter reporter;
    auto r = Executor().Run(MakeRun({program, "--lr=1"}), reporter);
    ASSERT_FALSE(r.ok()) << program;
    EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status();
    EXPECT_NE(r.status().message().find("cannot run '" + program + "'"), std::string::npos)
        << r.status();
  }
  FakeReporter reporter;
  auto r = Executor().Run(MakeRun({}), reporter);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status();
}

TEST_F(CommandExecutorTest, AMissingWorkingDirectoryIsFailedPrecondition) {
  CommandExecutor::Options options;
  options.working_dir = dir_ + "/nowhere";
  FakeReporter reporter;
  auto r = CommandExecutor(options).Run(MakeRun({"true"}), reporter);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsFailedPrecondition()) << r.status();
}

// Checkpoints (the contract in command_executor.h) -------------------------

// Answers kPause to the report of `step`.
std::function<Verdict(const FakeReporter::Call&)> PauseAt(int64_t step) {
  return [step](const FakeReporter::Call& c) {
    return c.step == step ? Verdict::kPause : Verdict::kContinue;
  };
}

// The worker's bearer token is not the program's: a program that prints its
// environment would put it into the log tail the server stores.
TEST_F(CommandExecutorTest, TheWorkersCredentialsAreNotInTheProgramsEnvironment) {
  ::setenv("HPO_TOKEN", "the-workers-token", 1);
  ::setenv("HPO_TOKEN_FILE", "/the/workers/token-file", 1);
  ::setenv("HPO_SOMETHING_ELSE", "kept", 1);
  const std::string script = Script("creds.sh", R"sh(
echo "token=${HPO_TOKEN-unset} file=${HPO_TOKEN_FILE-unset} other=${HPO_SOMETHING_ELSE-unset}"
echo "hpo: step=1 loss=1"
)sh");
  FakeReporter reporter;
  auto r = Executor().Run(MakeRun({script}), reporter);
  ::unsetenv("HPO_TOKEN");
  ::unsetenv("HPO_TOKEN_FILE");
  ::unsetenv("HPO_SOMETHING_ELSE");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(r->log_tail.find("token=unset file=unset other=kept"), std::string::npos)
      << r->log_tail;
}

TEST_F(CommandExecutorTest, TheCheckpointVariablesAreSetOnlyWhenTheyApply) {
  // From the worker's own environment they must not leak through.
  ::setenv("HPO_STOP_STEP", "99", 1);
  ::setenv("HPO_RESUME_STEP", "98", 1);
  const std::string script = Script("env.sh", R"sh(
echo "dir=$HPO_CHECKPOINT_DIR stop=${HPO_STOP_STEP-unset} resume=${HPO_RESUME_STEP-unset}"
test -d "$HPO_CHECKPOINT_DIR" && echo "is a directory"
echo "hpo: step=1 loss=1"
)sh");
  FakeReporter reporter;
  auto plain = Executor().Run(MakeRun({script}), reporter);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_NE(plain->log_tail.find("stop=unset resume=unset"), std::string::npos) << plain->log_tail;
  EXPECT_NE(plain->log_tail.find("is a directory"), std::string::npos) << plain->log_tail;

  TrialRun run = MakeRun({script});
  run.stop_step = 4;
  run.resume_step = 2;
  run.checkpoint_dir = dir_ + "/ckpt";
  std::filesystem::create_directories(run.checkpoint_dir);
  auto r = Executor().Run(run, reporter);
  ::unsetenv("HPO_STOP_STEP");
  ::unsetenv("HPO_RESUME_STEP");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(r->log_tail.find("dir=" + dir_ + "/ckpt stop=4 resume=2"), std::string::npos)
      << r->log_tail;
}

// A resumed program's lines without step= go on from HPO_RESUME_STEP, as
// the contract numbers them: not from 1, which would land on steps the
// trial already reported and miss the rung it is to pause at.
TEST_F(CommandExecutorTest, AResumedProgramsLinesWithoutAStepGoOnAfterTheResumeStep) {
  const std::string script = Script("nostep.sh", R"sh(
echo "hpo: loss=0.5"
echo "hpo: loss=0.4"
echo "hpo: loss=0.3"
)sh");
  TrialRun run = MakeRun({script});
  run.max_steps = 6;
  run.resume_step = 3;
  run.checkpoint_dir = dir_ + "/ckpt";
  std::filesystem::create_directories(run.checkpoint_dir);
  FakeReporter reporter;
  auto r = Executor().Run(run, reporter);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<int64_t> steps;
  for (const auto& c : reporter.calls()) steps.push_back(c.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{4, 5, 6}));
}

// The real example program: straight through, and paused then resumed in a
// new run (as on another worker), the same curve to the last digit.
TEST_F(CommandExecutorTest, TheExampleProgramPausesAndResumesExactlyWhereItStopped) {
  const std::vector<std::string> argv = {"python3", HPO_SOURCE_DIR "/examples/train_example.py",
                                         "--lr=0.3", "--width=6"};
  FakeReporter straight;
  auto whole = Executor().Run(MakeRun(argv), straight);
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_EQ(straight.calls().size(), 5u);

  TrialRun first = MakeRun(argv);
  first.stop_step = 2;
  first.checkpoint_dir = dir_ + "/ckpt";
  FakeReporter pausing;
  pausing.verdict = PauseAt(2);
  auto paused = Executor().Run(first, pausing);
  ASSERT_TRUE(paused.ok()) << paused.status();
  EXPECT_TRUE(paused->paused);
  EXPECT_TRUE(paused->checkpoint_saved) << paused->checkpoint_error << "\n" << paused->log_tail;
  EXPECT_FALSE(paused->stopped);
  ASSERT_EQ(pausing.calls().size(), 2u);
  EXPECT_TRUE(std::filesystem::exists(first.checkpoint_dir + "/state.json"));

  TrialRun second = MakeRun(argv);
  second.resume_step = 2;
  second.checkpoint_dir = first.checkpoint_dir;
  FakeReporter resumed;
  auto rest = Executor().Run(second, resumed);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_TRUE(rest->restore_error.empty()) << rest->restore_error;
  const auto calls = resumed.calls();
  ASSERT_EQ(calls.size(), 3u) << rest->log_tail;
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i].step, static_cast<int64_t>(i + 3));
    EXPECT_EQ(calls[i].metrics, straight.calls()[i + 2].metrics) << "step " << i + 3;
  }
  EXPECT_EQ(rest->final_metrics, whole->final_metrics);

  // A state that is not the one asked for is refused, not trained from.
  second.resume_step = 3;
  FakeReporter refused;
  auto wrong = Executor().Run(second, refused);
  ASSERT_TRUE(wrong.ok()) << wrong.status();
  EXPECT_NE(
      wrong->restore_error.find("could not restore the state saved after step 3 (exit status 65)"),
      std::string::npos)
      << wrong->restore_error;
  EXPECT_TRUE(refused.calls().empty());
}

TEST_F(CommandExecutorTest, APauseWhoseProgramFailsIsAPauseWithoutACheckpoint) {
  struct Case {
    std::string body;
    std::string why;
  };
  const std::vector<Case> cases = {
      {R"sh(echo "hpo: step=1 loss=1"; echo state > "$HPO_CHECKPOINT_DIR/s"; exit 3)sh",
       "exit status 3 after its stop step"},
      {R"sh(echo "hpo: step=1 loss=1"; exit 0)sh", "left HPO_CHECKPOINT_DIR empty"},
      {R"sh(echo "hpo: step=1 loss=1"; echo state > "$HPO_CHECKPOINT_DIR/s"; kill -KILL $$)sh",
       "killed by signal 9"},
      // It does not know the contract and trains on: stopped after the grace.
      {R"sh(echo "hpo: step=1 loss=1"; echo "hpo: step=2 loss=0.5"; sleep 30)sh",
       "did not exit within 0.3 s"},
  };
  for (const auto& c : cases) {
    TrialRun run = MakeRun({Script("pause.sh", c.body)});
    run.stop_step = 1;
    run.checkpoint_dir = dir_ + "/ckpt-" + std::to_string(&c - cases.data());
    CommandExecutor::Options options;
    options.working_dir = dir_;
    options.kill_grace = std::chrono::milliseconds(200);
    options.pause_grace = std::chrono::milliseconds(300);
    FakeReporter reporter;
    reporter.verdict = PauseAt(1);
    auto r = CommandExecutor(options).Run(run, reporter);
    ASSERT_TRUE(r.ok()) << "a failed save never fails the trial: " << r.status();
    EXPECT_TRUE(r->paused) << c.why;
    EXPECT_FALSE(r->checkpoint_saved) << c.why;
    EXPECT_NE(r->checkpoint_error.find(c.why), std::string::npos)
        << "want \"" << c.why << "\" in \"" << r->checkpoint_error << "\"";
    EXPECT_EQ(reporter.calls().size(), 1u) << "nothing after the stop step is reported";
  }
}

TEST_F(CommandExecutorTest, AStopWhileSavingIsAStop) {
  TrialRun run = MakeRun({Script("slow.sh", R"sh(echo "hpo: step=1 loss=1"; sleep 30)sh")});
  run.stop_step = 1;
  run.checkpoint_dir = dir_ + "/ckpt";
  FakeReporter reporter;
  reporter.verdict = [&](const FakeReporter::Call&) {
    reporter.stop = true;  // pruned while it saves
    return Verdict::kPause;
  };
  auto r = Executor().Run(run, reporter);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->stopped);
  EXPECT_FALSE(r->paused);
}

TEST_F(CommandExecutorTest, ExitStatus65IsARefusedRestoreOnlyWhenResuming) {
  const std::string script = Script("refuse.sh", "echo 'bad state' >&2; exit 65");
  TrialRun run = MakeRun({script});
  FakeReporter reporter;
  auto fresh = Executor().Run(run, reporter);
  EXPECT_TRUE(fresh.status().IsFailedPrecondition()) << "an ordinary failure when not resuming";
  run.resume_step = 2;
  run.checkpoint_dir = dir_ + "/ckpt";
  auto resumed = Executor().Run(run, reporter);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_NE(resumed->restore_error.find("exit status 65"), std::string::npos)
      << resumed->restore_error;
  EXPECT_NE(resumed->restore_error.find("bad state"), std::string::npos)
      << "with the program's words";
}

}  // namespace
}  // namespace hpo::worker
