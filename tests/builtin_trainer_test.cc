// The LibTorch trainers on the real Fashion-MNIST data.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <vector>

#include <ATen/Parallel.h>
#include <torch/cuda.h>

#include "worker/blas.h"
#include "worker/builtin_trainer.h"
#include "worker/idx.h"

namespace hpo::worker {
namespace {

using nlohmann::json;

struct Step {
  int64_t step;
  std::map<std::string, double> metrics;
  double samples_per_sec;
  json system;
  json applied = nullptr;  // ReportApplied's; null from Report
};

class RecordingReporter : public Reporter {
 public:
  Verdict Report(int64_t step, const std::map<std::string, double>& metrics, double sps,
                 const json& system) override {
    steps.push_back({step, metrics, sps, system});
    if (stop_after && static_cast<int>(steps.size()) >= stop_after) return Verdict::kStop;
    if (change_to.is_object() && steps.size() == 1) return Verdict::kChangeSystem;
    return Verdict::kContinue;
  }
  Verdict ReportApplied(int64_t step, const std::map<std::string, double>& metrics, double sps, const json& system,
                        const json& applied) override {
    const Verdict v = Report(step, metrics, sps, system);
    steps.back().applied = applied;
    return v;
  }
  json new_system() const override { return change_to; }
  bool stop_requested() const override { return stop; }

  std::vector<Step> steps;
  int stop_after = 0;
  json change_to;
  std::atomic<bool> stop{false};
};

TrialRun Mlp(int epochs) {
  TrialRun r;
  r.trial_id = 1;
  r.seed = 7;
  r.trainer = "fashion-mnist-mlp";
  r.params = {{"lr", 1e-3}, {"optimizer", "adam"}, {"width", 256}, {"depth", 2}, {"dropout", 0.1}};
  r.system = {{"batch_size", 128}};
  r.max_steps = epochs;
  r.threads = 2;
  return r;
}

TEST(Idx, ReadsTheRealFiles) {
  auto bytes = ReadGzipFile("/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto labels = ParseIdx(*bytes, "t10k labels");
  ASSERT_TRUE(labels.ok()) << labels.status();
  EXPECT_EQ(labels->dims, std::vector<int64_t>{10000});
  EXPECT_TRUE(ReadGzipFile("/nonexistent.gz").status().IsNotFound());
  EXPECT_EQ(ParseIdx(std::string("\x00\x00\x08\x01\x00\x00\x00\x05" "ab", 10), "x").status().code(),
            StatusCode::kDataLoss);
}

TEST(BuiltinTrainer, MlpLearnsFashionMnistInOneEpochAndLossFalls) {
  auto exec = MakeBuiltinExecutor();
  RecordingReporter reporter;
  auto r = exec->Run(Mlp(2), reporter);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(reporter.steps.size(), 2u);
  EXPECT_EQ(reporter.steps[0].step, 1);
  EXPECT_GT(reporter.steps[0].metrics.at("accuracy"), 0.80) << "validation accuracy after one epoch";
  EXPECT_LT(reporter.steps[1].metrics.at("train_loss"), reporter.steps[0].metrics.at("train_loss"));
  EXPECT_LT(reporter.steps[1].metrics.at("loss"), reporter.steps[0].metrics.at("loss"));
  EXPECT_GT(reporter.steps[0].samples_per_sec, 0);
  EXPECT_EQ(reporter.steps[0].system["batch_size"], 128);
  EXPECT_GT(r->final_metrics.at("test_accuracy"), 0.80);
  EXPECT_FALSE(r->stopped);
}

// The CUDA path: the same trainer on a GPU learns as on the CPU, and
// reports the loss it kept on the device. Runs where LibTorch sees a GPU.
TEST(BuiltinTrainer, LearnsOnACudaDevice) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device (LibTorch sees none): the CUDA path is not run";
  auto exec = MakeBuiltinExecutor();
  RecordingReporter reporter;
  TrialRun run = Mlp(2);
  run.device = "cuda:0";
  auto r = exec->Run(run, reporter);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(reporter.steps.size(), 2u);
  EXPECT_GT(reporter.steps[0].metrics.at("accuracy"), 0.80);
  EXPECT_LT(reporter.steps[1].metrics.at("train_loss"), reporter.steps[0].metrics.at("train_loss"));
  EXPECT_GT(r->final_metrics.at("test_accuracy"), 0.80);
}

// What the trainer declares is what its code does, and each report's
// applied values are what ran: inter_op_threads as the process has it
// (LibTorch takes it once), never a parameter it does not know.
TEST(BuiltinTrainer, DeclaresWhatItCanChangeAndReportsWhatItApplied) {
  auto exec = MakeBuiltinExecutor();
  TrialRun run = Mlp(1);
  run.trainer_args = {{"max_train_samples", 1000}};
  run.system = {{"batch_size", 64}, {"threads", 1}, {"inter_op_threads", 3}, {"foo", 7}};
  EXPECT_EQ(exec->DeclaredSystemChanges(run), (SystemChanges{{"batch_size", SystemChange::kMidTrial},
                                                             {"threads", SystemChange::kMidTrial},
                                                             {"inter_op_threads", SystemChange::kAtRestart}}));
  RecordingReporter reporter;
  auto r = exec->Run(run, reporter);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(reporter.steps.size(), 1u);
  EXPECT_EQ(reporter.steps[0].applied,
            json({{"batch_size", 64}, {"threads", 1}, {"inter_op_threads", at::get_num_interop_threads()}}));
  EXPECT_EQ(reporter.steps[0].system["inter_op_threads"], at::get_num_interop_threads())
      << "the value the process has, whatever was asked";
}

TEST(BuiltinTrainer, CnnRunsAndSystemChangesApplyAtTheNextEpoch) {
  auto exec = MakeBuiltinExecutor();
  RecordingReporter reporter;
  TrialRun run = Mlp(2);
  run.trainer = "fashion-mnist-cnn";
  run.params = {{"lr", 2e-3}, {"channels", 8}, {"conv_layers", 2}, {"width", 64}, {"depth", 1},
                {"batch_norm", true}, {"optimizer", "sgd"}, {"momentum", 0.9}, {"nesterov", true}};
  run.trainer_args = {{"max_train_samples", 4000}};
  reporter.change_to = {{"batch_size", 64}, {"threads", 1}};
  auto r = exec->Run(run, reporter);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(reporter.steps.size(), 2u);
  EXPECT_EQ(reporter.steps[0].system["batch_size"], 128);
  EXPECT_EQ(reporter.steps[1].system["batch_size"], 64);
  EXPECT_EQ(reporter.steps[1].system["threads"], 1);
  EXPECT_GT(reporter.steps[1].metrics.at("accuracy"), 0.5);
  // OpenBLAS's own pool follows `threads` too (it stayed at every core).
  if (BlasThreads() == 0) GTEST_SKIP() << "the BLAS in this process does not report its threads";
  EXPECT_EQ(BlasThreads(), 1);
}

TEST(BuiltinTrainer, StopsWhenToldAndRejectsBadParams) {
  auto exec = MakeBuiltinExecutor();
  RecordingReporter reporter;
  reporter.stop_after = 1;
  TrialRun run = Mlp(5);
  run.trainer_args = {{"max_train_samples", 2000}};
  auto r = exec->Run(run, reporter);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->stopped);
  EXPECT_EQ(reporter.steps.size(), 1u);

  RecordingReporter stopped;
  stopped.stop = true;
  auto early = exec->Run(run, stopped);
  ASSERT_TRUE(early.ok());
  EXPECT_TRUE(early->stopped);
  EXPECT_TRUE(stopped.steps.empty());

  run.params["optimizer"] = "lbfgs";
  auto bad = exec->Run(run, reporter);
  ASSERT_TRUE(bad.status().IsInvalidArgument());
  EXPECT_NE(bad.status().message().find("params.optimizer"), std::string::npos);
  run.trainer = "imagenet-resnet";
  EXPECT_TRUE(exec->Run(run, reporter).status().IsInvalidArgument());
}

// samples_per_step makes a step a fresh draw of that many examples rather
// than a pass: one step of 200 learns less than a pass over 8,000, and the
// steps go on learning.
TEST(BuiltinTrainer, SamplesPerStepMakesAStepThatManyExamples) {
  auto exec = MakeBuiltinExecutor();
  TrialRun pass = Mlp(1);
  pass.trainer_args = {{"max_train_samples", 8000}};
  RecordingReporter full;
  ASSERT_TRUE(exec->Run(pass, full).ok());

  TrialRun drawn = Mlp(6);
  drawn.trainer_args = {{"max_train_samples", 8000}, {"samples_per_step", 200}};
  RecordingReporter small;
  auto r = exec->Run(drawn, small);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(small.steps.size(), 6u);
  EXPECT_LT(small.steps[0].metrics.at("accuracy") + 0.05, full.steps[0].metrics.at("accuracy"))
      << "one step of 200 examples against a pass over 8,000";
  EXPECT_GT(small.steps[5].metrics.at("accuracy"), small.steps[0].metrics.at("accuracy"));

  drawn.trainer_args["samples_per_step"] = -5;
  auto bad = exec->Run(drawn, small);
  ASSERT_TRUE(bad.status().IsInvalidArgument()) << bad.status();
  EXPECT_NE(bad.status().message().find("samples_per_step"), std::string::npos) << bad.status();
}

}  // namespace
}  // namespace hpo::worker

namespace hpo::worker {
namespace {

TEST(BuiltinTrainer, IsDeterministicForASeed) {
  auto exec = MakeBuiltinExecutor();
  TrialRun run = Mlp(1);
  run.trainer_args = {{"max_train_samples", 3000}};
  RecordingReporter a, b, c;
  ASSERT_TRUE(exec->Run(run, a).ok());
  ASSERT_TRUE(exec->Run(run, b).ok());
  run.seed = 8;
  ASSERT_TRUE(exec->Run(run, c).ok());
  EXPECT_EQ(a.steps[0].metrics.at("loss"), b.steps[0].metrics.at("loss"));
  EXPECT_EQ(a.steps[0].metrics.at("accuracy"), b.steps[0].metrics.at("accuracy"));
  EXPECT_NE(a.steps[0].metrics.at("loss"), c.steps[0].metrics.at("loss"));
}

}  // namespace
}  // namespace hpo::worker

// Checkpoints -------------------------------------------------------------

namespace hpo::worker {
namespace {

namespace fs = std::filesystem;

// Answers kPause to the report of `pause_at` (0: never), continue otherwise.
class PausingReporter : public RecordingReporter {
 public:
  explicit PausingReporter(int64_t pause_at) : pause_at_(pause_at) {}
  Verdict Report(int64_t step, const std::map<std::string, double>& metrics, double sps,
                 const json& system) override {
    RecordingReporter::Report(step, metrics, sps, system);
    return step == pause_at_ ? Verdict::kPause : Verdict::kContinue;
  }

 private:
  int64_t pause_at_;
};

class BuiltinCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/hpo-trainer-ckpt-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Dropout, batch norm (buffers), Adam (moments) and a cosine schedule
  // (the epoch): everything a resume must bring back.
  static TrialRun Run(int epochs) {
    TrialRun r = Mlp(epochs);
    r.params = {{"lr", 2e-3},        {"optimizer", "adam"}, {"width", 64},           {"depth", 2},
                {"dropout", 0.3},    {"batch_norm", true},  {"lr_schedule", "cosine"}};
    r.trainer_args = {{"max_train_samples", 3000}};
    r.threads = 1;  // one thread: the sums run in one order, so results are bit for bit
    return r;
  }

  std::string dir_;
};

TEST_F(BuiltinCheckpointTest, APausedAndResumedTrialEndsExactlyAsOneThatNeverStopped) {
  RecordingReporter straight;
  auto whole = MakeBuiltinExecutor()->Run(Run(4), straight);
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_EQ(straight.steps.size(), 4u);

  TrialRun first = Run(4);
  first.stop_step = 2;
  first.checkpoint_dir = dir_;
  PausingReporter pausing(2);
  auto paused = MakeBuiltinExecutor()->Run(first, pausing);
  ASSERT_TRUE(paused.ok()) << paused.status();
  EXPECT_TRUE(paused->paused);
  EXPECT_TRUE(paused->checkpoint_saved) << paused->checkpoint_error;
  EXPECT_FALSE(paused->stopped);
  ASSERT_EQ(pausing.steps.size(), 2u);
  EXPECT_TRUE(fs::exists(dir_ + "/trainer.pt"));
  EXPECT_FALSE(fs::exists(dir_ + "/trainer.pt.tmp"));

  // Another trial in between moves the process's generators on: the resume
  // must not depend on them being where the pause left them.
  RecordingReporter other;
  TrialRun noise = Run(1);
  noise.seed = 99;
  ASSERT_TRUE(MakeBuiltinExecutor()->Run(noise, other).ok());

  TrialRun second = Run(4);
  second.resume_step = 2;
  second.checkpoint_dir = dir_;
  RecordingReporter resumed;
  auto rest = MakeBuiltinExecutor()->Run(second, resumed);  // a fresh trainer, as on another worker
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_TRUE(rest->restore_error.empty()) << rest->restore_error;
  ASSERT_EQ(resumed.steps.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(pausing.steps[i].metrics, straight.steps[i].metrics) << "step " << i + 1;
    EXPECT_EQ(resumed.steps[i].step, static_cast<int64_t>(i + 3));
    // Bit for bit: the same model, optimizer state, schedule position and
    // random draws (shuffles, dropout masks) as the trial that never stopped.
    EXPECT_EQ(resumed.steps[i].metrics, straight.steps[i + 2].metrics) << "step " << i + 3;
  }
  EXPECT_EQ(rest->final_metrics, whole->final_metrics);
  EXPECT_GT(rest->final_metrics.at("test_accuracy"), 0.5);
}

TEST_F(BuiltinCheckpointTest, ACheckpointThatCannotBeUsedIsRefusedBeforeAnyStep) {
  TrialRun first = Run(3);
  first.checkpoint_dir = dir_;
  PausingReporter pausing(1);
  ASSERT_TRUE(MakeBuiltinExecutor()->Run(first, pausing)->checkpoint_saved);

  auto refused = [&](TrialRun run, const std::string& why) {
    run.resume_step = run.resume_step ? run.resume_step : 1;
    run.checkpoint_dir = dir_;
    RecordingReporter reporter;
    auto r = MakeBuiltinExecutor()->Run(run, reporter);
    ASSERT_TRUE(r.ok()) << "a bad checkpoint does not fail the trial: " << r.status();
    EXPECT_NE(r->restore_error.find(why), std::string::npos)
        << "want \"" << why << "\" in \"" << r->restore_error << "\"";
    EXPECT_TRUE(reporter.steps.empty()) << "nothing ran from a checkpoint it could not use";
  };
  TrialRun other_params = Run(3);
  other_params.params["lr"] = 0.5;
  refused(other_params, "other hyperparameters");
  TrialRun other_epoch = Run(3);
  other_epoch.resume_step = 2;
  refused(other_epoch, "taken after epoch 1, not 2");
  // Damaged in the weights (which LibTorch alone would load as if good).
  {
    const auto size = static_cast<std::streamoff>(fs::file_size(dir_ + "/trainer.pt"));
    std::fstream f(dir_ + "/trainer.pt", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(size / 2);
    f.write("garbage garbage garbage", 23);
  }
  refused(Run(3), "does not match its SHA-256");
  fs::remove(dir_ + "/trainer.pt");
  refused(Run(3), "no trainer.pt");
}

TEST_F(BuiltinCheckpointTest, APauseWithNowhereToSaveIsAPauseWithoutACheckpoint) {
  TrialRun run = Run(3);  // no checkpoint_dir
  PausingReporter pausing(1);
  auto r = MakeBuiltinExecutor()->Run(run, pausing);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->paused);
  EXPECT_FALSE(r->checkpoint_saved);
  EXPECT_NE(r->checkpoint_error.find("no checkpoint directory"), std::string::npos) << r->checkpoint_error;
}

}  // namespace
}  // namespace hpo::worker
