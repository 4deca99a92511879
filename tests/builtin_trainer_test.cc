// The LibTorch trainers on the real Fashion-MNIST data.
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

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
