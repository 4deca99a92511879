#include "worker/builtin_trainer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <dlfcn.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <mutex>

#include "common/sha256.h"
#include "worker/blas.h"
#include "worker/idx.h"

namespace hpo::worker {
namespace {

// OpenBLAS's pool is its own (worker/blas.h): a trial asked to use 1 thread
// still ran its GEMMs on 2 until the trainer sized it (bench/trainer_bench
// and bench/cotune measured it: in a 0.25-core cgroup both loops ran 2x
// faster with OPENBLAS_NUM_THREADS=1).

using nlohmann::json;

struct Split {
  torch::Tensor images;  // [N, 1, 28, 28] float, normalized
  torch::Tensor labels;  // [N] int64
};

struct Dataset {
  Split train, test;
};

Result<Split> LoadSplit(const std::string& dir, const std::string& prefix) {
  HPO_ASSIGN_OR_RETURN(std::string img_bytes, ReadGzipFile(dir + "/" + prefix + "-images-idx3-ubyte.gz"));
  HPO_ASSIGN_OR_RETURN(IdxArray img, ParseIdx(img_bytes, prefix + " images"));
  HPO_ASSIGN_OR_RETURN(std::string lab_bytes, ReadGzipFile(dir + "/" + prefix + "-labels-idx1-ubyte.gz"));
  HPO_ASSIGN_OR_RETURN(IdxArray lab, ParseIdx(lab_bytes, prefix + " labels"));
  if (img.dims.size() != 3 || lab.dims.size() != 1 || img.dims[0] != lab.dims[0]) {
    return Status::DataLoss(dir + ": " + prefix + " images and labels do not match");
  }
  const int64_t n = img.dims[0];
  Split s;
  // Fashion-MNIST's training-set mean and standard deviation.
  s.images = torch::from_blob(img.data.data(), {n, 1, img.dims[1], img.dims[2]}, torch::kUInt8)
                 .to(torch::kFloat32)
                 .div_(255.0)
                 .sub_(0.2860)
                 .div_(0.3530);
  s.labels = torch::from_blob(lab.data.data(), {n}, torch::kUInt8).to(torch::kInt64);
  return s;
}

// Loaded once per process and shared by every trial.
Result<std::shared_ptr<const Dataset>> LoadDataset(const std::string& dir) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const Dataset>> cache;
  std::lock_guard lock(mu);
  auto it = cache.find(dir);
  if (it != cache.end()) return it->second;
  auto d = std::make_shared<Dataset>();
  HPO_ASSIGN_OR_RETURN(d->train, LoadSplit(dir, "train"));
  HPO_ASSIGN_OR_RETURN(d->test, LoadSplit(dir, "t10k"));
  cache[dir] = d;
  return std::shared_ptr<const Dataset>(d);
}

// Typed access to params with defaults and errors that name the param.
class Params {
 public:
  explicit Params(const json& j) : j_(j) {}
  Result<double> Num(const char* key, double fallback) const {
    auto it = j_.find(key);
    if (it == j_.end()) return fallback;
    if (it->is_boolean()) return it->get<bool>() ? 1.0 : 0.0;
    if (!it->is_number()) return Status::InvalidArgument(std::string("params.") + key + ": must be a number");
    return it->get<double>();
  }
  Result<std::string> Str(const char* key, const char* fallback) const {
    auto it = j_.find(key);
    if (it == j_.end()) return std::string(fallback);
    if (!it->is_string()) return Status::InvalidArgument(std::string("params.") + key + ": must be a string");
    return it->get<std::string>();
  }

 private:
  const json& j_;
};

torch::nn::AnyModule Activation(const std::string& name) {
  if (name == "gelu") return torch::nn::AnyModule(torch::nn::GELU());
  if (name == "tanh") return torch::nn::AnyModule(torch::nn::Tanh());
  return torch::nn::AnyModule(torch::nn::ReLU());
}

struct ModelConfig {
  bool cnn = false;
  int depth = 2, width = 256, conv_layers = 2, channels = 32;
  double dropout = 0.1;
  bool batch_norm = false;
  std::string activation = "relu";
};

torch::nn::Sequential BuildModel(const ModelConfig& c) {
  torch::nn::Sequential net;
  int64_t features = 28 * 28;
  if (c.cnn) {
    int64_t in = 1, side = 28;
    for (int i = 0; i < c.conv_layers; ++i) {
      const int64_t out = int64_t{c.channels} << i;
      net->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).padding(1)));
      if (c.batch_norm) net->push_back(torch::nn::BatchNorm2d(out));
      net->push_back(Activation(c.activation));
      net->push_back(torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(2)));
      in = out;
      side /= 2;
    }
    features = in * side * side;
  }
  net->push_back(torch::nn::Flatten());
  for (int i = 0; i < c.depth; ++i) {
    net->push_back(torch::nn::Linear(features, c.width));
    if (c.batch_norm) net->push_back(torch::nn::BatchNorm1d(c.width));
    net->push_back(Activation(c.activation));
    if (c.dropout > 0) net->push_back(torch::nn::Dropout(c.dropout));
    features = c.width;
  }
  net->push_back(torch::nn::Linear(features, 10));
  return net;
}

// Mean loss and accuracy of `net` on a split, in chunks.
std::pair<double, double> Evaluate(torch::nn::Sequential& net, const torch::Tensor& x,
                                   const torch::Tensor& y, const torch::Device& device) {
  torch::NoGradGuard no_grad;
  net->eval();
  double loss = 0;
  int64_t correct = 0;
  const int64_t n = x.size(0);
  for (int64_t start = 0; start < n; start += 2000) {
    const int64_t end = std::min(n, start + 2000);
    auto xb = x.slice(0, start, end).to(device);
    auto yb = y.slice(0, start, end).to(device);
    auto logits = net->forward(xb);
    loss += torch::nn::functional::cross_entropy(
                logits, yb, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                .item<double>();
    correct += logits.argmax(1).eq(yb).sum().item<int64_t>();
  }
  net->train();
  return {loss / n, static_cast<double>(correct) / n};
}

// The generator a device's random numbers come from: the CPU's, or the
// CUDA device's (dropout and shuffling there draw from it).
at::Generator DefaultGenerator(const torch::Device& device) {
  if (device.is_cuda()) return at::detail::getCUDAHooks().getDefaultCUDAGenerator(device.index());
  return at::detail::getDefaultCPUGenerator();
}

// A trial's state after an epoch, in TrialRun::checkpoint_dir: one
// LibTorch archive holding the model, the optimizer (moments, step counts),
// the epoch (the schedule's position) and the generators' states, so that
// a resumed trial draws the same shuffles and dropout masks as one that
// never stopped. "trial" names what it belongs to: a checkpoint of another
// trainer or other hyperparameters is refused, never half-loaded.
// LibTorch's reader does not check its records' CRCs (damaged weights load
// as if good), so trainer.pt.sha256 holds the file's SHA-256, checked first.
constexpr const char* kCheckpointFile = "trainer.pt";
constexpr int64_t kCheckpointFormat = 1;

Result<std::string> FileSha256(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot read " + path);
  Sha256 sha;
  std::string buf(1 << 20, '\0');
  while (in.read(buf.data(), static_cast<std::streamsize>(buf.size())) || in.gcount() > 0) {
    sha.Update(std::string_view(buf.data(), static_cast<size_t>(in.gcount())));
  }
  return sha.HexDigest();
}

std::string TrialIdentity(const TrialRun& run) { return run.trainer + " " + run.params.dump(); }

Status SaveCheckpoint(const TrialRun& run, torch::nn::Sequential& net, torch::optim::Optimizer& opt,
                      int64_t epochs_done, const torch::Device& device) {
  if (run.checkpoint_dir.empty()) return Status::FailedPrecondition("the worker gave no checkpoint directory");
  // A checkpoint that cannot be written pauses the trial without one; it
  // must not fail the trial.
  try {
  torch::serialize::OutputArchive archive, model, optimizer;
  net->save(model);
  opt.save(optimizer);
  archive.write("model", model);
  archive.write("optimizer", optimizer);
  archive.write("format", c10::IValue(kCheckpointFormat));
  archive.write("trial", c10::IValue(TrialIdentity(run)));
  archive.write("epochs_done", c10::IValue(epochs_done));
  {
    at::Generator cpu = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(cpu.mutex());
    archive.write("rng_cpu", cpu.get_state());
  }
  if (device.is_cuda()) {
    at::Generator gpu = DefaultGenerator(device);
    std::lock_guard<std::mutex> lock(gpu.mutex());
    archive.write("rng_device", gpu.get_state());
  }
  // Whole or not there: the worker archives whatever the directory holds.
  const std::string path = run.checkpoint_dir + "/" + kCheckpointFile;
  archive.save_to(path + ".tmp");
  HPO_ASSIGN_OR_RETURN(const std::string digest, FileSha256(path + ".tmp"));
  if (!(std::ofstream(path + ".sha256") << digest << "\n")) return Status::Internal("cannot write " + path + ".sha256");
  if (std::rename((path + ".tmp").c_str(), path.c_str()) != 0) {
    return Status::Internal("cannot rename " + path + ".tmp");
  }
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("LibTorch cannot save it: ") + e.what_without_backtrace());
  }
  return Status::OK();
}

// Restores what SaveCheckpoint wrote after `epochs_done`; the error says
// why it cannot be used.
Status LoadCheckpoint(const TrialRun& run, torch::nn::Sequential& net, torch::optim::Optimizer& opt,
                      int64_t epochs_done, const torch::Device& device) {
  const std::string path = run.checkpoint_dir + "/" + kCheckpointFile;
  if (run.checkpoint_dir.empty() || !std::ifstream(path)) {
    return Status::NotFound("no " + std::string(kCheckpointFile) + " in the checkpoint directory");
  }
  std::string want;
  std::ifstream(path + ".sha256") >> want;
  HPO_ASSIGN_OR_RETURN(const std::string have, FileSha256(path));
  if (want != have) {
    return Status::DataLoss(std::string(kCheckpointFile) + " does not match its SHA-256 (" + kCheckpointFile +
                            ".sha256): it is damaged");
  }
  try {
    torch::serialize::InputArchive archive, model, optimizer;
    archive.load_from(path, device);
    c10::IValue format, trial, epoch;
    archive.read("format", format);
    archive.read("trial", trial);
    archive.read("epochs_done", epoch);
    if (!format.isInt() || format.toInt() != kCheckpointFormat) {
      return Status::FailedPrecondition("the checkpoint is of another format");
    }
    if (!trial.isString() || trial.toStringRef() != TrialIdentity(run)) {
      return Status::FailedPrecondition("the checkpoint is of another trainer or other hyperparameters");
    }
    if (!epoch.isInt() || epoch.toInt() != epochs_done) {
      return Status::FailedPrecondition("the checkpoint was taken after epoch " +
                                        (epoch.isInt() ? std::to_string(epoch.toInt()) : std::string("?")) +
                                        ", not " + std::to_string(epochs_done));
    }
    archive.read("model", model);
    archive.read("optimizer", optimizer);
    net->load(model);
    opt.load(optimizer);
    torch::Tensor cpu_state;
    archive.read("rng_cpu", cpu_state);
    {
      at::Generator cpu = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(cpu.mutex());
      cpu.set_state(cpu_state.to(torch::kCPU));
    }
    if (device.is_cuda()) {
      torch::Tensor device_state;
      // A checkpoint taken on a CPU has none: the device's generator keeps
      // its seed (the run is then reproducible, not identical).
      if (archive.try_read("rng_device", device_state)) {
        at::Generator gpu = DefaultGenerator(device);
        std::lock_guard<std::mutex> lock(gpu.mutex());
        gpu.set_state(device_state.to(torch::kCPU));
      }
    }
  } catch (const c10::Error& e) {
    return Status::DataLoss(std::string("LibTorch cannot read it: ") + e.what_without_backtrace());
  }
  return Status::OK();
}

class BuiltinExecutor final : public Executor {
 public:
  explicit BuiltinExecutor(BuiltinOptions o) : options_(std::move(o)) {}

  Result<RunResult> Run(const TrialRun& run, Reporter& reporter) override {
    if (!IsBuiltinTrainer(run.trainer)) {
      return Status::InvalidArgument("trainer '" + run.trainer +
                                     "' is not built in (fashion-mnist-mlp, fashion-mnist-cnn, or "
                                     "fashion-mnist with spaces named mlp and cnn)");
    }
    TrialRun resolved = run;
    if (run.trainer == "fashion-mnist") {
      // One experiment, two models: the search space names the model.
      if (run.space != "mlp" && run.space != "cnn") {
        return Status::InvalidArgument("trainer fashion-mnist: space '" + run.space +
                                       "' must be named mlp or cnn");
      }
      resolved.trainer = "fashion-mnist-" + run.space;
    }
    try {
      return Train(resolved, reporter);
    } catch (const c10::Error& e) {
      return Status::Internal(std::string("LibTorch: ") + e.what_without_backtrace());
    } catch (const std::exception& e) {
      return Status::Internal(e.what());
    }
  }

 private:
  Result<RunResult> Train(const TrialRun& run, Reporter& reporter) {
    const std::string dir = run.trainer_args.value("data_dir", options_.data_dir);
    HPO_ASSIGN_OR_RETURN(auto data, LoadDataset(dir));
    const Params p(run.params);
    ModelConfig mc;
    mc.cnn = run.trainer == "fashion-mnist-cnn";
    HPO_ASSIGN_OR_RETURN(double lr, p.Num("lr", 1e-3));
    HPO_ASSIGN_OR_RETURN(std::string optimizer, p.Str("optimizer", "adam"));
    HPO_ASSIGN_OR_RETURN(double momentum, p.Num("momentum", 0.9));
    HPO_ASSIGN_OR_RETURN(double nesterov, p.Num("nesterov", 0));
    HPO_ASSIGN_OR_RETURN(double weight_decay, p.Num("weight_decay", 0));
    HPO_ASSIGN_OR_RETURN(double depth, p.Num("depth", 2));
    HPO_ASSIGN_OR_RETURN(double width, p.Num("width", 256));
    HPO_ASSIGN_OR_RETURN(mc.dropout, p.Num("dropout", 0.1));
    HPO_ASSIGN_OR_RETURN(mc.activation, p.Str("activation", "relu"));
    HPO_ASSIGN_OR_RETURN(double batch_norm, p.Num("batch_norm", 0));
    HPO_ASSIGN_OR_RETURN(std::string schedule, p.Str("lr_schedule", "constant"));
    HPO_ASSIGN_OR_RETURN(double conv_layers, p.Num("conv_layers", 2));
    HPO_ASSIGN_OR_RETURN(double channels, p.Num("channels", 32));
    mc.depth = static_cast<int>(depth);
    mc.width = static_cast<int>(width);
    mc.batch_norm = batch_norm != 0;
    mc.conv_layers = static_cast<int>(conv_layers);
    mc.channels = static_cast<int>(channels);
    if (!(lr > 0) || mc.width < 1 || mc.depth < 0 || mc.dropout < 0 || mc.dropout >= 1 ||
        mc.conv_layers < 0 || mc.conv_layers > 4 || mc.channels < 1) {
      return Status::InvalidArgument("params: lr > 0, width >= 1, depth >= 0, 0 <= dropout < 1, "
                                     "0 <= conv_layers <= 4 and channels >= 1 are required");
    }
    if (optimizer != "sgd" && optimizer != "adam" && optimizer != "adamw") {
      return Status::InvalidArgument("params.optimizer: '" + optimizer + "' is not sgd, adam or adamw");
    }
    if (schedule != "constant" && schedule != "cosine" && schedule != "step") {
      return Status::InvalidArgument("params.lr_schedule: '" + schedule + "' is not constant, cosine or step");
    }

    json system = run.system;
    int64_t batch_size = system.value("batch_size", 128);
    int threads = system.value("threads", run.threads);
    ApplyThreads(threads, system.value("inter_op_threads", 1));
    const torch::Device device(run.device);

    torch::manual_seed(run.seed);
    const double val_fraction = run.trainer_args.value("validation_fraction", 0.1);
    const int64_t n_all = data->train.images.size(0);
    const int64_t n_val = std::clamp<int64_t>(static_cast<int64_t>(n_all * val_fraction), 1, n_all - 1);
    auto perm = torch::randperm(n_all, torch::TensorOptions().dtype(torch::kInt64));
    auto val_idx = perm.slice(0, 0, n_val);
    auto train_idx = perm.slice(0, n_val, n_all);
    // For quick runs (tests, smoke checks): train on a prefix only.
    const int64_t limit = run.trainer_args.value("max_train_samples", int64_t{0});
    if (limit > 0 && limit < train_idx.size(0)) train_idx = train_idx.slice(0, 0, limit);
    auto train_x = data->train.images.index_select(0, train_idx).to(device);
    auto train_y = data->train.labels.index_select(0, train_idx).to(device);
    auto val_x = data->train.images.index_select(0, val_idx);
    auto val_y = data->train.labels.index_select(0, val_idx);
    const int64_t n_train = train_x.size(0);
    // A step (one report, one unit of the budget) is a full pass over the
    // training set, or with samples_per_step that many examples drawn afresh
    // each step (no repeats within a step), so that a trial's accuracy keeps
    // rising over many short steps instead of plateauing after a few passes.
    const int64_t per_step_arg = run.trainer_args.value("samples_per_step", int64_t{0});
    if (per_step_arg < 0) {
      return Status::InvalidArgument("executor.builtin.args.samples_per_step: " + std::to_string(per_step_arg) +
                                     " must be 0 (a full pass per step) or positive");
    }
    const int64_t per_step = per_step_arg > 0 ? std::min(per_step_arg, n_train) : n_train;

    auto net = BuildModel(mc);
    net->to(device);
    std::unique_ptr<torch::optim::Optimizer> opt;
    if (optimizer == "sgd") {
      opt = std::make_unique<torch::optim::SGD>(
          net->parameters(),
          torch::optim::SGDOptions(lr).momentum(momentum).nesterov(nesterov != 0 && momentum > 0).weight_decay(weight_decay));
    } else if (optimizer == "adamw") {
      opt = std::make_unique<torch::optim::AdamW>(net->parameters(),
                                                  torch::optim::AdamWOptions(lr).weight_decay(weight_decay));
    } else {
      opt = std::make_unique<torch::optim::Adam>(net->parameters(),
                                                 torch::optim::AdamOptions(lr).weight_decay(weight_decay));
    }

    RunResult result;
    const int64_t epochs = std::max<int64_t>(1, run.max_steps);
    int64_t first_epoch = 0;
    if (run.resume_step > 0) {
      Status restored = run.resume_step < epochs
                            ? LoadCheckpoint(run, net, *opt, run.resume_step, device)
                            : Status::FailedPrecondition("resume_step " + std::to_string(run.resume_step) +
                                                         " is not before the last epoch");
      if (!restored.ok()) {
        result.restore_error = "cannot restore the checkpoint taken after epoch " + std::to_string(run.resume_step) +
                               ": " + restored.message();
        return result;
      }
      first_epoch = run.resume_step;
    }
    std::pair<double, double> val{0, 0};
    for (int64_t epoch = first_epoch; epoch < epochs; ++epoch) {
      double epoch_lr = lr;
      if (schedule == "cosine") epoch_lr = lr * 0.5 * (1 + std::cos(M_PI * epoch / epochs));
      if (schedule == "step") epoch_lr = lr * std::pow(0.1, epoch / std::max<int64_t>(1, epochs / 3));
      for (auto& group : opt->param_groups()) group.options().set_lr(epoch_lr);

      net->train();
      auto order = torch::randperm(n_train, torch::TensorOptions().dtype(torch::kInt64).device(device))
                       .slice(0, 0, per_step);
      // The loss stays on the device and is read once per epoch: reading it
      // per batch (item()) would wait for the GPU every batch, and the
      // measured speed that placement uses would be the synchronized one.
      auto train_loss = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(device));
      int64_t batches = 0;
      const auto start = std::chrono::steady_clock::now();
      for (int64_t b = 0; b < per_step; b += batch_size) {
        if (batches % 20 == 0 && reporter.stop_requested()) {
          result.stopped = true;
          return result;
        }
        auto idx = order.slice(0, b, std::min(per_step, b + batch_size));
        auto x = train_x.index_select(0, idx);
        auto y = train_y.index_select(0, idx);
        opt->zero_grad();
        auto loss = torch::nn::functional::cross_entropy(net->forward(x), y);
        loss.backward();
        opt->step();
        train_loss += loss.detach().to(torch::kFloat64);
        ++batches;
      }
      // Reading the loss waits for the device's queued work, so the epoch's
      // time includes it.
      const double epoch_loss = train_loss.item<double>() / std::max<int64_t>(1, batches);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      val = Evaluate(net, val_x, val_y, device);
      const double sps = per_step / std::max(seconds, 1e-9);
      result.final_metrics = {{"accuracy", val.second}, {"loss", val.first}, {"train_loss", epoch_loss}};
      // Applied: what this epoch really ran with. inter_op_threads is the
      // process's (a later trial asking for another value does not get it).
      json applied = {{"batch_size", batch_size}, {"threads", threads > 0 ? threads : torch::get_num_threads()}};
      if (system.contains("inter_op_threads")) applied["inter_op_threads"] = at::get_num_interop_threads();
      system.update(applied);
      const Verdict v = reporter.ReportApplied(epoch + 1, result.final_metrics, sps, system, applied);
      if (v == Verdict::kStop || reporter.stop_requested()) {
        result.stopped = true;
        return result;
      }
      if (v == Verdict::kPause) {
        result.paused = true;
        Status saved = SaveCheckpoint(run, net, *opt, epoch + 1, device);
        result.checkpoint_saved = saved.ok();
        if (!saved.ok()) result.checkpoint_error = saved.message();
        return result;
      }
      if (v == Verdict::kChangeSystem) {
        const json next = reporter.new_system();
        batch_size = next.value("batch_size", batch_size);
        threads = next.value("threads", threads);
        ApplyThreads(threads, -1);
      }
    }
    const auto test = Evaluate(net, data->test.images, data->test.labels, device);
    result.final_metrics["test_accuracy"] = test.second;
    result.final_metrics["test_loss"] = test.first;
    return result;
  }

  // What Run does with each system parameter: threads (set_num_threads)
  // and batch_size (the next epoch's slices) between epochs; inter_op_threads
  // once per process (ApplyThreads). Nothing else is read.
  SystemChanges DeclaredSystemChanges(const TrialRun&) const override {
    return {{"batch_size", SystemChange::kMidTrial},
            {"threads", SystemChange::kMidTrial},
            {"inter_op_threads", SystemChange::kAtRestart}};
  }

  // Intra-op threads may change any time; inter-op threads only once per
  // process, before any parallel work (LibTorch refuses later calls).
  static void ApplyThreads(int threads, int inter_op) {
    if (threads > 0) {
      torch::set_num_threads(threads);
      SetBlasThreads(threads);
    }
    static std::once_flag once;
    if (inter_op > 0) {
      std::call_once(once, [&] {
        try {
          torch::set_num_interop_threads(inter_op);
        } catch (const c10::Error&) {
        }
      });
    }
  }

  BuiltinOptions options_;
};

}  // namespace

bool IsBuiltinTrainer(const std::string& trainer) {
  return trainer == "fashion-mnist" || trainer == "fashion-mnist-mlp" || trainer == "fashion-mnist-cnn";
}

std::unique_ptr<Executor> MakeBuiltinExecutor(BuiltinOptions options) {
  return std::make_unique<BuiltinExecutor>(std::move(options));
}

}  // namespace hpo::worker
