// The LibTorch trainers on the real Fashion-MNIST data.
#include "worker/builtin_trainer.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <vector>

#include "worker/blas.h"
#include "worker/builtin_trainer_parts.h"
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
  Verdict ReportApplied(int64_t step, const std::map<std::string, double>& metrics, double sps,
                        const json& system, const json& applied) override {
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
  EXPECT_EQ(ParseIdx(std::string("\x00\x00\x08\x01\x00\x00\x00\x05"
                                 "ab",
                                 10),
                     "x")
                .status()
                .code(),
            StatusCode::kDataLoss);
}

TEST(BuiltinTrainer, MlpLearnsFashionMnistInOneEpochAndLossFalls) {
  auto exec = MakeBuiltinExecutor();
  RecordingReporter reporter;
  auto r = exec->Run(Mlp(2), reporter);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(reporter.steps.size(), 2u);
  EXPECT_EQ(reporter.steps[0].step, 1);
  EXPECT_GT(reporter.steps[0].metrics.at("accuracy"), 0.80)
      << "validation accuracy after one epoch";
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
  if (!torch::cuda::is_available())
    GTEST_SKIP() << "no CUDA device (LibTorch sees none): the CUDA path is not run";
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
  EXPECT_EQ(exec->DeclaredSystemChanges(run),
            (SystemChanges{{"batch_size", SystemChange::kMidTrial},
                           {"threads", SystemChange::kMidTrial},
                           {"inter_op_threads", SystemChange::kAtRestart}}));
  RecordingReporter reporter;
  auto r = exec->Run(run, reporter);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(reporter.steps.size(), 1u);
  EXPECT_EQ(reporter.steps[0].applied, json({{"batch_size", 64},
                                             {"threads", 1},
                                             {"inter_op_threads", at::get_num_interop_threads()}}));
  EXPECT_EQ(reporter.steps[0].system["inter_op_threads"], at::get_num_interop_threads())
      << "the value the process has, whatever was asked";
}

TEST(BuiltinTrainer, CnnRunsAndSystemChangesApplyAtTheNextEpoch) {
  auto exec = MakeBuiltinExecutor();
  RecordingReporter reporter;
  TrialRun run = Mlp(2);
  run.trainer = "fashion-mnist-cnn";
  run.params = {{"lr", 2e-3},         {"channels", 8},   {"conv_layers", 2},
                {"width", 64},        {"depth", 1},      {"batch_norm", true},
                {"optimizer", "sgd"}, {"momentum", 0.9}, {"nesterov", true}};
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
// A step whose examples leave one over after its last whole batch (257 =
// 2 x 128 + 1) trains it with the batch before: batch norm cannot train on a
// batch of one, and LibTorch threw, failing the trial (bench/hetero's long
// workload: 4,000 examples a step, a searched batch size of 129).
TEST(BuiltinTrainer, ALoneLastExampleJoinsTheBatchBeforeIt) {
  auto exec = MakeBuiltinExecutor();
  RecordingReporter reporter;
  TrialRun run = Mlp(1);
  run.trainer = "fashion-mnist-cnn";
  run.params = {{"lr", 2e-3},  {"channels", 8}, {"conv_layers", 1},
                {"width", 64}, {"depth", 1},    {"batch_norm", true}};
  run.trainer_args = {{"max_train_samples", 2000}, {"samples_per_step", 257}};
  auto r = exec->Run(run, reporter);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(reporter.steps.size(), 1u);
  EXPECT_EQ(reporter.steps[0].system["batch_size"], 128);
}

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
    r.params = {{"lr", 2e-3},
                {"optimizer", "adam"},
                {"width", 64},
                {"depth", 2},
                {"dropout", 0.3},
                {"batch_norm", true},
                {"lr_schedule", "cosine"}};
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
  EXPECT_NE(r->checkpoint_error.find("no checkpoint directory"), std::string::npos)
      << r->checkpoint_error;
}

}  // namespace
}  // namespace hpo::worker

// The parts, one by one (worker/builtin_trainer_parts.h) ----------------

namespace hpo::worker::builtin {
namespace {

namespace fs = std::filesystem;

constexpr const char* kData = "/usr/share/datasets/fashion-mnist";

// One copy per process, whoever asks.
TEST(BuiltinData, IsLoadedOnceAndSharedByEveryCaller) {
  auto a = LoadDataset(kData);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = LoadDataset(kData);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->get(), b->get()) << "every caller shares the first load";
  EXPECT_TRUE(LoadBuiltinData(kData).ok());
  EXPECT_EQ((*a)->train.images.size(0), 60000);
  EXPECT_EQ((*a)->test.labels.size(0), 10000);
}

TEST(BuiltinData, AMissingDirectoryIsAnErrorNamingItAndIsNotRemembered) {
  char tmpl[] = "/tmp/hpo-builtin-data-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  Status missing = LoadBuiltinData(dir);
  EXPECT_TRUE(missing.IsNotFound()) << missing;
  EXPECT_NE(missing.message().find("cannot be loaded from '" + dir + "'"), std::string::npos)
      << missing;
  EXPECT_NE(missing.message().find("train-images-idx3-ubyte.gz"), std::string::npos) << missing;
  // The files arrive: the next call loads them.
  for (const char* f : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                        "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}) {
    fs::create_symlink(std::string(kData) + "/" + f, dir + "/" + f);
  }
  EXPECT_TRUE(LoadBuiltinData(dir).ok());
  // A trial whose data cannot be read fails saying so.
  TrialRun run = Mlp(1);
  run.trainer_args = {{"data_dir", dir + "/gone"}};
  RecordingReporter reporter;
  auto r = MakeBuiltinExecutor()->Run(run, reporter);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("Fashion-MNIST) cannot be loaded from"), std::string::npos)
      << r.status();
  fs::remove_all(dir);
}

// A model that has learned a little, so that its predictions differ by
// example.
torch::nn::Sequential Trained(const ModelConfig& mc, const Split& train) {
  torch::manual_seed(3);
  auto net = BuildModel(mc);
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(2e-3));
  for (int64_t b = 0; b < 20; ++b) {
    opt.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(
        net->forward(train.images.slice(0, b * 64, b * 64 + 64)),
        train.labels.slice(0, b * 64, b * 64 + 64));
    loss.backward();
    opt.step();
  }
  return net;
}

TEST(BuiltinEvaluate, ChunksKeepTheLargestActivationNearTwelveAndAHalfMegabytes) {
  const torch::Device cpu("cpu");
  ModelConfig mlp;
  EXPECT_EQ(EvalChunk(mlp, cpu), 2000);
  mlp.width = 100'000;
  EXPECT_EQ(EvalChunk(mlp, cpu), 32);
  ModelConfig cnn;
  cnn.cnn = true;
  EXPECT_EQ(EvalChunk(cnn, cpu), 130) << "the default CNN: 32 channels at 28x28, 100 KB an example";
  cnn.channels = 64;
  EXPECT_EQ(EvalChunk(cnn, cpu), 65);
  cnn.channels = 1'000'000;
  EXPECT_EQ(EvalChunk(cnn, cpu), 1) << "at least one";
  EXPECT_EQ(EvalChunk(cnn, torch::Device("cuda:0")), 2000);
}

// The chunk size is a matter of speed only: the same loss (to rounding in
// the sum) and the same accuracy for any chunk, with the rows gathered
// from the shared data or given as a copy.
TEST(BuiltinEvaluate, GivesTheSameLossAndAccuracyWhateverTheChunk) {
  auto data = LoadDataset(kData);
  ASSERT_TRUE(data.ok()) << data.status();
  torch::set_num_threads(1);
  const torch::Device cpu("cpu");
  torch::manual_seed(5);
  const torch::Tensor rows = torch::randperm(60000, torch::kInt64).slice(0, 0, 3001);
  const Split copy{(*data)->train.images.index_select(0, rows),
                   (*data)->train.labels.index_select(0, rows)};
  for (const bool cnn : {false, true}) {
    ModelConfig mc;
    mc.cnn = cnn;
    mc.channels = 8;
    mc.batch_norm = true;
    auto net = Trained(mc, (*data)->train);
    const Evaluation big = Evaluate(net, (*data)->train, rows, cpu, 2000);
    EXPECT_TRUE(net->is_training()) << "back in training mode";
    EXPECT_GT(big.accuracy, 0.3);
    EXPECT_LT(big.accuracy, 1.0);
    EXPECT_EQ(EvalChunk(mc, cpu), cnn ? 522 : 2000) << "8 channels: 25 KB an example";
    for (const int64_t chunk : {int64_t{128}, int64_t{100}, int64_t{3001}, int64_t{7}}) {
      const Evaluation small = Evaluate(net, (*data)->train, rows, cpu, chunk);
      EXPECT_NEAR(small.loss, big.loss, 1e-6 * big.loss)
          << (cnn ? "cnn" : "mlp") << " chunk " << chunk;
      EXPECT_EQ(small.accuracy, big.accuracy) << (cnn ? "cnn" : "mlp") << " chunk " << chunk;
    }
    const Evaluation copied = Evaluate(net, copy, torch::Tensor(), cpu, 2000);
    EXPECT_EQ(copied.loss, big.loss) << "the same examples in the same chunks";
    EXPECT_EQ(copied.accuracy, big.accuracy);
  }
}

// What a checkpoint holds comes back exactly: every parameter and
// batch-norm buffer, and the optimizer's moments and step counts.
TEST(BuiltinCheckpoint, ARoundTripRestoresIdenticalParametersAndOptimizerState) {
  auto data = LoadDataset(kData);
  ASSERT_TRUE(data.ok()) << data.status();
  char tmpl[] = "/tmp/hpo-builtin-ckpt-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const torch::Device cpu("cpu");
  ModelConfig mc;
  mc.cnn = true;
  mc.channels = 8;
  mc.batch_norm = true;
  TrialRun run = Mlp(3);
  run.trainer = "fashion-mnist-cnn";
  run.checkpoint_dir = dir;
  auto net = Trained(mc, (*data)->train);
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(2e-3));
  opt.zero_grad();
  torch::nn::functional::cross_entropy(net->forward((*data)->train.images.slice(0, 0, 32)),
                                       (*data)->train.labels.slice(0, 0, 32))
      .backward();
  opt.step();
  ASSERT_TRUE(SaveCheckpoint(run, net, opt, 2, cpu).ok());
  EXPECT_FALSE(fs::exists(dir + "/trainer.pt.tmp"));

  torch::manual_seed(99);  // another initialization, to be overwritten
  auto restored = BuildModel(mc);
  torch::optim::Adam restored_opt(restored->parameters(), torch::optim::AdamOptions(2e-3));
  Status loaded = LoadCheckpoint(run, restored, restored_opt, 2, cpu);
  ASSERT_TRUE(loaded.ok()) << loaded;
  const auto want = net->named_parameters(), have = restored->named_parameters();
  ASSERT_EQ(want.size(), have.size());
  for (const auto& p : want) EXPECT_TRUE(torch::equal(p.value(), have[p.key()])) << p.key();
  const auto want_buffers = net->named_buffers(), have_buffers = restored->named_buffers();
  ASSERT_GT(want_buffers.size(), 0u);
  for (const auto& b : want_buffers)
    EXPECT_TRUE(torch::equal(b.value(), have_buffers[b.key()])) << b.key();
  const auto params = net->parameters(), restored_params = restored->parameters();
  ASSERT_EQ(opt.state().size(), restored_opt.state().size());
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& a = static_cast<const torch::optim::AdamParamState&>(
        *opt.state().at(c10::guts::to_string(params[i].unsafeGetTensorImpl())));
    const auto& b = static_cast<const torch::optim::AdamParamState&>(
        *restored_opt.state().at(c10::guts::to_string(restored_params[i].unsafeGetTensorImpl())));
    EXPECT_EQ(a.step(), b.step());
    EXPECT_TRUE(torch::equal(a.exp_avg(), b.exp_avg())) << "parameter " << i;
    EXPECT_TRUE(torch::equal(a.exp_avg_sq(), b.exp_avg_sq())) << "parameter " << i;
  }
  fs::remove_all(dir);
}

// A run says where its time went besides its steps: the worker's
// per-segment line is made of these.
TEST(BuiltinOverheads, ARunReportsItsSetupEvaluationSaveAndRestore) {
  char tmpl[] = "/tmp/hpo-builtin-overheads-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  TrialRun first = Mlp(3);
  first.trainer_args = {{"max_train_samples", 500}};
  first.checkpoint_dir = dir;
  struct Pause : RecordingReporter {
    Verdict Report(int64_t step, const std::map<std::string, double>& m, double sps,
                   const json& sys) override {
      RecordingReporter::Report(step, m, sps, sys);
      return Verdict::kPause;
    }
  } pause;
  auto paused = MakeBuiltinExecutor()->Run(first, pause);
  ASSERT_TRUE(paused.ok()) << paused.status();
  ASSERT_TRUE(paused->checkpoint_saved) << paused->checkpoint_error;
  EXPECT_GT(paused->overheads.setup_ms, 0);
  EXPECT_GT(paused->overheads.eval_ms, 0);
  EXPECT_GT(paused->overheads.save_ms, 0);
  EXPECT_EQ(paused->overheads.restore_ms, 0);

  TrialRun second = first;
  second.resume_step = 1;
  RecordingReporter rest;
  auto resumed = MakeBuiltinExecutor()->Run(second, rest);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  ASSERT_EQ(rest.steps.size(), 2u);
  EXPECT_GT(resumed->overheads.restore_ms, 0);
  EXPECT_GE(resumed->overheads.setup_ms, resumed->overheads.restore_ms)
      << "the restore is part of the setup";
  EXPECT_EQ(resumed->overheads.save_ms, 0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hpo::worker::builtin
