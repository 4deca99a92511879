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
#include "worker/builtin_trainer_parts.h"
#include "worker/idx.h"

namespace hpo::worker {
namespace builtin {
namespace {

// OpenBLAS's pool is its own (worker/blas.h): a trial asked to use 1 thread
// still ran its GEMMs on 2 until the trainer sized it (bench/trainer_bench
// and bench/cotune measured it: in a 0.25-core cgroup both loops ran 2x
// faster with OPENBLAS_NUM_THREADS=1).

using nlohmann::json;
using Clock = std::chrono::steady_clock;

Result<Split> LoadSplit(const std::string& dir, const std::string& prefix) {
  HPO_ASSIGN_OR_RETURN(std::string img_bytes,
                       ReadGzipFile(dir + "/" + prefix + "-images-idx3-ubyte.gz"));
  HPO_ASSIGN_OR_RETURN(IdxArray img, ParseIdx(img_bytes, prefix + " images"));
  HPO_ASSIGN_OR_RETURN(std::string lab_bytes,
                       ReadGzipFile(dir + "/" + prefix + "-labels-idx1-ubyte.gz"));
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

}  // namespace

Result<std::shared_ptr<const Dataset>> LoadDataset(const std::string& dir) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const Dataset>> cache;
  std::lock_guard lock(mu);
  auto it = cache.find(dir);
  if (it != cache.end()) return it->second;
  auto d = std::make_shared<Dataset>();
  auto load = [&]() -> Status {
    HPO_ASSIGN_OR_RETURN(d->train, LoadSplit(dir, "train"));
    HPO_ASSIGN_OR_RETURN(d->test, LoadSplit(dir, "t10k"));
    return Status::OK();
  };
  Status loaded = load();
  if (!loaded.ok()) {
    return Status(loaded.code(),
                  "the built-in trainers' data (Fashion-MNIST) cannot be loaded from '" + dir +
                      "': " + loaded.message());
  }
  cache[dir] = d;
  return std::shared_ptr<const Dataset>(d);
}

namespace {

// Typed access to params with defaults and errors that name the param.
class Params {
 public:
  explicit Params(const json& j) : j_(j) {}
  Result<double> Num(const char* key, double fallback) const {
    auto it = j_.find(key);
    if (it == j_.end()) return fallback;
    if (it->is_boolean()) return it->get<bool>() ? 1.0 : 0.0;
    if (!it->is_number())
      return Status::InvalidArgument(std::string("params.") + key + ": must be a number");
    return it->get<double>();
  }
  Result<std::string> Str(const char* key, const char* fallback) const {
    auto it = j_.find(key);
    if (it == j_.end()) return std::string(fallback);
    if (!it->is_string())
      return Status::InvalidArgument(std::string("params.") + key + ": must be a string");
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

}  // namespace

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

int64_t EvalChunk(const ModelConfig& c, const torch::Device& device) {
  constexpr int64_t kMost = 2000;
  if (!device.is_cpu()) return kMost;
  constexpr int64_t kActivationBytes = int64_t{25} << 19;  // 12.5 MiB
  const int64_t widest = std::max<int64_t>(
      {28 * 28, c.width, c.cnn && c.conv_layers > 0 ? int64_t{c.channels} * 28 * 28 : 0});
  return std::clamp<int64_t>(kActivationBytes / (widest * int64_t{sizeof(float)}), 1, kMost);
}

Evaluation Evaluate(torch::nn::Sequential& net, const Split& data, const torch::Tensor& rows,
                    const torch::Device& device, int64_t chunk) {
  c10::InferenceMode inference;
  net->eval();
  const int64_t n = rows.defined() ? rows.size(0) : data.images.size(0);
  // The sums stay on the device and are read once: a read per chunk would
  // wait for a GPU every chunk. Chunk sums are added in chunk order, in
  // double, as before they were kept there.
  auto loss = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(device));
  auto correct = torch::zeros({}, torch::TensorOptions().dtype(torch::kInt64).device(device));
  torch::Tensor x_buffer, y_buffer;
  if (rows.defined()) {
    auto shape = data.images.sizes().vec();
    shape[0] = std::min(n, chunk);
    x_buffer = torch::empty(shape, data.images.options());
    y_buffer = torch::empty({shape[0]}, data.labels.options());
  }
  for (int64_t start = 0; start < n; start += chunk) {
    const int64_t end = std::min(n, start + chunk);
    torch::Tensor xb, yb;
    if (rows.defined()) {
      const torch::Tensor idx = rows.slice(0, start, end);
      xb = x_buffer.narrow(0, 0, end - start);
      yb = y_buffer.narrow(0, 0, end - start);
      torch::index_select_out(xb, data.images, 0, idx);
      torch::index_select_out(yb, data.labels, 0, idx);
    } else {
      xb = data.images.slice(0, start, end);
      yb = data.labels.slice(0, start, end);
    }
    xb = xb.to(device);
    yb = yb.to(device);
    const torch::Tensor logits = net->forward(xb);
    loss += torch::nn::functional::cross_entropy(
                logits, yb, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                .to(torch::kFloat64);
    correct += logits.argmax(1).eq(yb).sum();
  }
  net->train();
  return {loss.item<double>() / n, static_cast<double>(correct.item<int64_t>()) / n};
}

namespace {

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

std::string TrialIdentity(const TrialRun& run) { return run.trainer + " " + run.params.dump(); }

// The whole file in memory: LibTorch then reads its records from there, so
// the file is read once for its digest and its contents alike.
Result<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return Status::NotFound("cannot read " + path);
  const std::streamoff size = in.tellg();
  if (size < 0) return Status::Internal("cannot read " + path);
  std::string bytes(static_cast<size_t>(size), '\0');
  in.seekg(0);
  if (!in.read(bytes.data(), size)) return Status::Internal("cannot read " + path);
  return bytes;
}

}  // namespace

Status SaveCheckpoint(const TrialRun& run, torch::nn::Sequential& net, torch::optim::Optimizer& opt,
                      int64_t epochs_done, const torch::Device& device) {
  if (run.checkpoint_dir.empty())
    return Status::FailedPrecondition("the worker gave no checkpoint directory");
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
    // The digest is taken as the bytes are written, not by reading the file
    // back.
    const std::string path = run.checkpoint_dir + "/" + kCheckpointFile;
    std::ofstream out(path + ".tmp", std::ios::binary | std::ios::trunc);
    if (!out) return Status::Internal("cannot write " + path + ".tmp");
    Sha256 sha;
    archive.save_to([&](const void* data, size_t n) -> size_t {
      out.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
      sha.Update(std::string_view(static_cast<const char*>(data), n));
      return out ? n : 0;
    });
    out.close();
    if (!out) return Status::Internal("cannot write " + path + ".tmp");
    if (!(std::ofstream(path + ".sha256") << sha.HexDigest() << "\n")) {
      return Status::Internal("cannot write " + path + ".sha256");
    }
    if (std::rename((path + ".tmp").c_str(), path.c_str()) != 0) {
      return Status::Internal("cannot rename " + path + ".tmp");
    }
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("LibTorch cannot save it: ") + e.what_without_backtrace());
  }
  return Status::OK();
}

Status LoadCheckpoint(const TrialRun& run, torch::nn::Sequential& net, torch::optim::Optimizer& opt,
                      int64_t epochs_done, const torch::Device& device) {
  const std::string path = run.checkpoint_dir + "/" + kCheckpointFile;
  if (run.checkpoint_dir.empty() || !std::ifstream(path)) {
    return Status::NotFound("no " + std::string(kCheckpointFile) + " in the checkpoint directory");
  }
  std::string want;
  std::ifstream(path + ".sha256") >> want;
  HPO_ASSIGN_OR_RETURN(const std::string bytes, ReadWholeFile(path));
  Sha256 sha;
  sha.Update(bytes);
  if (want != sha.HexDigest()) {
    return Status::DataLoss(std::string(kCheckpointFile) + " does not match its SHA-256 (" +
                            kCheckpointFile + ".sha256): it is damaged");
  }
  try {
    torch::serialize::InputArchive archive, model, optimizer;
    archive.load_from(bytes.data(), bytes.size(), device);
    c10::IValue format, trial, epoch;
    archive.read("format", format);
    archive.read("trial", trial);
    archive.read("epochs_done", epoch);
    if (!format.isInt() || format.toInt() != kCheckpointFormat) {
      return Status::FailedPrecondition("the checkpoint is of another format");
    }
    if (!trial.isString() || trial.toStringRef() != TrialIdentity(run)) {
      return Status::FailedPrecondition(
          "the checkpoint is of another trainer or other hyperparameters");
    }
    if (!epoch.isInt() || epoch.toInt() != epochs_done) {
      return Status::FailedPrecondition(
          "the checkpoint was taken after epoch " +
          (epoch.isInt() ? std::to_string(epoch.toInt()) : std::string("?")) + ", not " +
          std::to_string(epochs_done));
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

namespace {

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
    const auto began = Clock::now();
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
      return Status::InvalidArgument(
          "params: lr > 0, width >= 1, depth >= 0, 0 <= dropout < 1, "
          "0 <= conv_layers <= 4 and channels >= 1 are required");
    }
    if (optimizer != "sgd" && optimizer != "adam" && optimizer != "adamw") {
      return Status::InvalidArgument("params.optimizer: '" + optimizer +
                                     "' is not sgd, adam or adamw");
    }
    if (schedule != "constant" && schedule != "cosine" && schedule != "step") {
      return Status::InvalidArgument("params.lr_schedule: '" + schedule +
                                     "' is not constant, cosine or step");
    }

    json system = run.system;
    int64_t batch_size = system.value("batch_size", 128);
    int threads = system.value("threads", run.threads);
    ApplyThreads(threads, system.value("inter_op_threads", 1));
    const torch::Device device(run.device);

    torch::manual_seed(run.seed);
    const double val_fraction = run.trainer_args.value("validation_fraction", 0.1);
    const int64_t n_all = data->train.images.size(0);
    const int64_t n_val =
        std::clamp<int64_t>(static_cast<int64_t>(n_all * val_fraction), 1, n_all - 1);
    auto perm = torch::randperm(n_all, torch::TensorOptions().dtype(torch::kInt64));
    auto val_idx = perm.slice(0, 0, n_val);
    auto train_idx = perm.slice(0, n_val, n_all);
    // For quick runs (tests, smoke checks): train on a prefix only.
    const int64_t limit = run.trainer_args.value("max_train_samples", int64_t{0});
    if (limit > 0 && limit < train_idx.size(0)) train_idx = train_idx.slice(0, 0, limit);
    const int64_t n_train = train_idx.size(0);
    // A batch is gathered from the process's one copy of the data through
    // train_rows: no copy per trial, which cost each lease (and each resume)
    // a pass over up to 170 MB. A GPU gets this trial's examples once, on
    // the device (train_rows undefined: batch indices are its own).
    Split train = data->train;
    torch::Tensor train_rows = train_idx;
    if (!device.is_cpu()) {
      train = {data->train.images.index_select(0, train_idx).to(device),
               data->train.labels.index_select(0, train_idx).to(device)};
      train_rows = torch::Tensor();
    }
    // A step (one report, one unit of the budget) is a full pass over the
    // training set, or with samples_per_step that many examples drawn afresh
    // each step (no repeats within a step), so that a trial's accuracy keeps
    // rising over many short steps instead of plateauing after a few passes.
    const int64_t per_step_arg = run.trainer_args.value("samples_per_step", int64_t{0});
    if (per_step_arg < 0) {
      return Status::InvalidArgument(
          "executor.builtin.args.samples_per_step: " + std::to_string(per_step_arg) +
          " must be 0 (a full pass per step) or positive");
    }
    const int64_t per_step = per_step_arg > 0 ? std::min(per_step_arg, n_train) : n_train;

    auto net = BuildModel(mc);
    net->to(device);
    // The model's size, reported with every epoch: an objective or a
    // constraint a spec may name (`params`), known from the first report.
    int64_t param_count = 0;
    for (const auto& weights : net->parameters()) param_count += weights.numel();
    const int64_t eval_chunk = EvalChunk(mc, device);
    std::unique_ptr<torch::optim::Optimizer> opt;
    if (optimizer == "sgd") {
      opt = std::make_unique<torch::optim::SGD>(net->parameters(),
                                                torch::optim::SGDOptions(lr)
                                                    .momentum(momentum)
                                                    .nesterov(nesterov != 0 && momentum > 0)
                                                    .weight_decay(weight_decay));
    } else if (optimizer == "adamw") {
      opt = std::make_unique<torch::optim::AdamW>(
          net->parameters(), torch::optim::AdamWOptions(lr).weight_decay(weight_decay));
    } else {
      opt = std::make_unique<torch::optim::Adam>(
          net->parameters(), torch::optim::AdamOptions(lr).weight_decay(weight_decay));
    }

    RunResult result;
    auto since = [](Clock::time_point t) {
      return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
    };
    const int64_t epochs = std::max<int64_t>(1, run.max_steps);
    int64_t first_epoch = 0;
    if (run.resume_step > 0) {
      const auto restoring = Clock::now();
      Status restored =
          run.resume_step < epochs
              ? LoadCheckpoint(run, net, *opt, run.resume_step, device)
              : Status::FailedPrecondition("resume_step " + std::to_string(run.resume_step) +
                                           " is not before the last epoch");
      result.overheads.restore_ms = since(restoring);
      if (!restored.ok()) {
        result.restore_error = "cannot restore the checkpoint taken after epoch " +
                               std::to_string(run.resume_step) + ": " + restored.message();
        return result;
      }
      first_epoch = run.resume_step;
    }
    result.overheads.setup_ms = since(began);
    for (int64_t epoch = first_epoch; epoch < epochs; ++epoch) {
      double epoch_lr = lr;
      if (schedule == "cosine") epoch_lr = lr * 0.5 * (1 + std::cos(M_PI * epoch / epochs));
      if (schedule == "step")
        epoch_lr = lr * std::pow(0.1, epoch / std::max<int64_t>(1, epochs / 3));
      for (auto& group : opt->param_groups()) group.options().set_lr(epoch_lr);

      net->train();
      auto order =
          torch::randperm(n_train, torch::TensorOptions().dtype(torch::kInt64).device(device))
              .slice(0, 0, per_step);
      // The loss stays on the device and is read once per epoch: reading it
      // per batch (item()) would wait for the GPU every batch, and the
      // measured speed that placement uses would be the synchronized one.
      auto train_loss =
          torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(device));
      int64_t batches = 0;
      const auto start = Clock::now();
      for (int64_t b = 0, end = 0; b < per_step; b = end) {
        if (batches % 20 == 0 && reporter.stop_requested()) {
          result.stopped = true;
          return result;
        }
        end = std::min(per_step, b + batch_size);
        // No batch of one example: batch norm cannot train on it (LibTorch
        // throws), so a lone last example joins the batch before it.
        if (per_step - end == 1) end = per_step;
        auto idx = order.slice(0, b, end);
        if (train_rows.defined()) idx = train_rows.index_select(0, idx);
        auto x = train.images.index_select(0, idx);
        auto y = train.labels.index_select(0, idx);
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
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      const auto evaluating = Clock::now();
      const Evaluation val = Evaluate(net, data->train, val_idx, device, eval_chunk);
      result.overheads.eval_ms += since(evaluating);
      const double sps = per_step / std::max(seconds, 1e-9);
      result.final_metrics = {{"accuracy", val.accuracy},
                              {"loss", val.loss},
                              {"train_loss", epoch_loss},
                              {"params", static_cast<double>(param_count)}};
      // Applied: what this epoch really ran with. inter_op_threads is the
      // process's (a later trial asking for another value does not get it).
      json applied = {{"batch_size", batch_size},
                      {"threads", threads > 0 ? threads : torch::get_num_threads()}};
      if (system.contains("inter_op_threads"))
        applied["inter_op_threads"] = at::get_num_interop_threads();
      system.update(applied);
      const Verdict v =
          reporter.ReportApplied(epoch + 1, result.final_metrics, sps, system, applied);
      if (v == Verdict::kStop || reporter.stop_requested()) {
        result.stopped = true;
        return result;
      }
      if (v == Verdict::kPause) {
        result.paused = true;
        const auto saving = Clock::now();
        Status saved = SaveCheckpoint(run, net, *opt, epoch + 1, device);
        result.overheads.save_ms = since(saving);
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
    const auto evaluating = Clock::now();
    const Evaluation test = Evaluate(net, data->test, torch::Tensor(), device, eval_chunk);
    result.overheads.eval_ms += since(evaluating);
    result.final_metrics["test_accuracy"] = test.accuracy;
    result.final_metrics["test_loss"] = test.loss;
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
}  // namespace builtin

bool IsBuiltinTrainer(const std::string& trainer) {
  return trainer == "fashion-mnist" || trainer == "fashion-mnist-mlp" ||
         trainer == "fashion-mnist-cnn";
}

Status LoadBuiltinData(const std::string& data_dir) {
  return builtin::LoadDataset(data_dir).status();
}

std::unique_ptr<Executor> MakeBuiltinExecutor(BuiltinOptions options) {
  return std::make_unique<builtin::BuiltinExecutor>(std::move(options));
}

}  // namespace hpo::worker
