// bench/trainer_bench: training speed of the built-in trainers per system
// setting (intra-op threads, batch size), one epoch on a slice of
// Fashion-MNIST, side by side with a plain LibTorch loop: the same model,
// data and optimizer, with no HeteroTune code (no reporter, no stop checks,
// no metrics), in the same process and the same run. The two alternate,
// twice per point, and each keeps its faster epoch (these machines are
// noisy). Run it under OMP_WAIT_POLICY=ACTIVE and PASSIVE to see why
// hpo-worker picks passive.
//
//   trainer_bench [--samples N] [--threads 1,2] [--batch 64,128,256] [--models mlp,cnn]
//                 [--data-dir DIR] [--device cpu|cuda:N]
//   bench=trainer model=M batch=B threads=T samples_per_s=X reference_samples_per_s=Y ratio=X/Y
//   omp_wait=W
//
// With --eval-chunks 2000,256,...: instead, the time of one evaluation of
// each model (mlp, cnn, or cnnN: the CNN with N channels) on a
// 6,000-example validation split per chunk size (0: the trainer's own,
// worker/builtin_trainer_parts.h EvalChunk), the median of 5, with the
// process's user and system CPU per evaluation (system time is the pages
// faulted in afresh), on a thread of its own as in hpo-worker; then the
// default CNN's checkpoint (Adam): the trainer's save and restore and the
// worker's archive and unpack, each the median of 7. First, the time the
// data took to load (hpo-worker does it before it registers).
//   bench=trainer_load load_ms=X user_ms=U sys_ms=S
//   bench=trainer_eval model=M threads=T chunk=C eval_ms=X user_ms=U sys_ms=S
//   bench=trainer_checkpoint model=cnn bytes=B save_ms=X pack_ms=Y unpack_ms=Z restore_ms=W
#include <sys/resource.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "worker/blas.h"
#include "worker/builtin_trainer.h"
#include "worker/builtin_trainer_parts.h"
#include "worker/checkpoint_archive.h"
#include "worker/executor.h"
#include "worker/idx.h"

using namespace hpo::worker;

namespace {

struct Recorder : Reporter {
  double sps = 0;
  Verdict Report(int64_t, const std::map<std::string, double>&, double samples_per_sec,
                 const nlohmann::json&) override {
    sps = samples_per_sec;
    return Verdict::kContinue;
  }
  bool stop_requested() const override { return false; }
};

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');) out.push_back(x);
  return out;
}

// The built-in trainers' default models (worker/builtin_trainer.cc,
// BuildModel with no parameters given), written out in plain LibTorch.
torch::nn::Sequential ReferenceModel(bool cnn) {
  torch::nn::Sequential net;
  int64_t features = 28 * 28;
  if (cnn) {
    net->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3).padding(1)));
    net->push_back(torch::nn::ReLU());
    net->push_back(torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(2)));
    net->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).padding(1)));
    net->push_back(torch::nn::ReLU());
    net->push_back(torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(2)));
    features = 64 * 7 * 7;
  }
  net->push_back(torch::nn::Flatten());
  for (int i = 0; i < 2; ++i) {
    net->push_back(torch::nn::Linear(features, 256));
    net->push_back(torch::nn::ReLU());
    net->push_back(torch::nn::Dropout(0.1));
    features = 256;
  }
  net->push_back(torch::nn::Linear(features, 10));
  return net;
}

// One epoch of the plain loop over (x, y), in samples per second.
double ReferenceEpoch(bool cnn, const torch::Tensor& x, const torch::Tensor& y, int64_t batch,
                      int threads, const torch::Device& device) {
  // The BLAS pool sized as the trainer sizes it (worker/blas.h), so the
  // two loops differ in nothing but the loop: Debian's LibTorch does its
  // matrix products in OpenBLAS, whose pool set_num_threads leaves alone.
  torch::set_num_threads(threads);
  hpo::worker::SetBlasThreads(threads);
  torch::manual_seed(1);
  auto net = ReferenceModel(cnn);
  net->to(device);
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-3));
  const int64_t n = x.size(0);
  auto order = torch::randperm(n, torch::TensorOptions().dtype(torch::kInt64).device(device));
  const auto start = std::chrono::steady_clock::now();
  torch::Tensor last;
  for (int64_t b = 0; b < n; b += batch) {
    auto idx = order.slice(0, b, std::min(n, b + batch));
    opt.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(net->forward(x.index_select(0, idx)),
                                                     y.index_select(0, idx));
    loss.backward();
    opt.step();
    last = loss;
  }
  last.item<double>();  // waits for queued device work
  return n / std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double Ms(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since)
      .count();
}

// The process's user and system CPU so far, in ms.
std::pair<double, double> CpuMs() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return {r.ru_utime.tv_sec * 1e3 + r.ru_utime.tv_usec / 1e3,
          r.ru_stime.tv_sec * 1e3 + r.ru_stime.tv_usec / 1e3};
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int EvalAndCheckpoint(const std::string& data_dir, const std::string& models,
                      const std::string& threads, const std::string& chunks,
                      const std::string& device_name) {
  namespace b = hpo::worker::builtin;
  const auto loading = std::chrono::steady_clock::now();
  const auto cpu_before_load = CpuMs();
  auto data = b::LoadDataset(data_dir);
  if (!data.ok()) {
    std::fprintf(stderr, "trainer_bench: %s\n", data.status().ToString().c_str());
    return 1;
  }
  const auto cpu_after_load = CpuMs();
  std::printf("bench=trainer_load load_ms=%.0f user_ms=%.0f sys_ms=%.0f\n", Ms(loading),
              cpu_after_load.first - cpu_before_load.first,
              cpu_after_load.second - cpu_before_load.second);
  const torch::Device device(device_name);
  torch::manual_seed(1);
  const torch::Tensor rows = torch::randperm(60000, torch::kInt64).slice(0, 0, 6000);
  for (const std::string& t_text : Split(threads)) {
    const int t = std::atoi(t_text.c_str());
    torch::set_num_threads(t);
    SetBlasThreads(t);
    for (const std::string& model : Split(models)) {
      b::ModelConfig mc;
      // "cnn16": the CNN with 16 channels (bench/hetero's spaces have 8 and 16).
      mc.cnn = model.rfind("cnn", 0) == 0;
      if (mc.cnn && model.size() > 3) mc.channels = std::atoi(model.c_str() + 3);
      auto net = b::BuildModel(mc);
      net->to(device);
      for (const std::string& c_text : Split(chunks)) {
        const int64_t asked = std::atoll(c_text.c_str());
        const int64_t chunk = asked > 0 ? asked : b::EvalChunk(mc, device);
        // The first, with its one-off costs, is not counted.
        b::Evaluate(net, (*data)->train, rows, device, chunk);
        std::vector<double> wall;
        const auto cpu0 = CpuMs();
        for (int i = 0; i < 5; ++i) {
          const auto start = std::chrono::steady_clock::now();
          b::Evaluate(net, (*data)->train, rows, device, chunk);
          wall.push_back(Ms(start));
        }
        const auto cpu1 = CpuMs();
        std::printf(
            "bench=trainer_eval model=%s threads=%d chunk=%lld eval_ms=%.1f user_ms=%.1f "
            "sys_ms=%.1f\n",
            model.c_str(), t, static_cast<long long>(chunk), Median(wall),
            (cpu1.first - cpu0.first) / 5, (cpu1.second - cpu0.second) / 5);
        std::fflush(stdout);
      }
    }
  }
  // The default CNN's checkpoint, with Adam's moments after a few steps.
  b::ModelConfig mc;
  mc.cnn = true;
  auto net = b::BuildModel(mc);
  net->to(device);
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-3));
  for (int i = 0; i < 3; ++i) {
    opt.zero_grad();
    torch::nn::functional::cross_entropy(
        net->forward((*data)->train.images.slice(0, i * 128, i * 128 + 128).to(device)),
        (*data)->train.labels.slice(0, i * 128, i * 128 + 128).to(device))
        .backward();
    opt.step();
  }
  TrialRun run;
  run.trainer = "fashion-mnist-cnn";
  run.params = {{"lr", 1e-3}};
  const std::string root =
      std::filesystem::temp_directory_path() / ("hpo-trainer-bench-" + std::to_string(getpid()));
  std::vector<double> save, pack, unpack, restore;
  uintmax_t bytes = 0;
  for (int i = 0; i < 7; ++i) {
    std::filesystem::remove_all(root);
    std::filesystem::create_directories(root + "/state");
    run.checkpoint_dir = root + "/state";
    auto start = std::chrono::steady_clock::now();
    hpo::Status s = b::SaveCheckpoint(run, net, opt, 1, device);
    save.push_back(Ms(start));
    start = std::chrono::steady_clock::now();
    if (s.ok()) s = PackDirectory(root + "/state", root + "/archive");
    pack.push_back(Ms(start));
    start = std::chrono::steady_clock::now();
    if (s.ok()) s = UnpackDirectory(root + "/archive", root + "/restored");
    unpack.push_back(Ms(start));
    auto fresh = b::BuildModel(mc);
    fresh->to(device);
    torch::optim::Adam fresh_opt(fresh->parameters(), torch::optim::AdamOptions(1e-3));
    run.checkpoint_dir = root + "/restored";
    start = std::chrono::steady_clock::now();
    if (s.ok()) s = b::LoadCheckpoint(run, fresh, fresh_opt, 1, device);
    restore.push_back(Ms(start));
    if (!s.ok()) {
      std::fprintf(stderr, "trainer_bench: checkpoint: %s\n", s.ToString().c_str());
      return 1;
    }
    bytes = std::filesystem::file_size(root + "/archive");
  }
  std::filesystem::remove_all(root);
  std::printf(
      "bench=trainer_checkpoint model=cnn bytes=%ju save_ms=%.1f pack_ms=%.1f unpack_ms=%.1f "
      "restore_ms=%.1f\n",
      bytes, Median(save), Median(pack), Median(unpack), Median(restore));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int samples = 10000;
  std::string threads = "1,2", batches = "128", models = "mlp,cnn",
              data_dir = BuiltinOptions().data_dir, device_name = "cpu", eval_chunks;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--samples")
      samples = std::atoi(argv[i + 1]);
    else if (a == "--threads")
      threads = argv[i + 1];
    else if (a == "--batch")
      batches = argv[i + 1];
    else if (a == "--models")
      models = argv[i + 1];
    else if (a == "--data-dir")
      data_dir = argv[i + 1];
    else if (a == "--device")
      device_name = argv[i + 1];
    else if (a == "--eval-chunks")
      eval_chunks = argv[i + 1];
    else {
      std::fprintf(stderr, "trainer_bench: unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (!eval_chunks.empty()) {
    // On a thread of its own, as a trial runs in hpo-worker: glibc serves a
    // thread's allocations from an arena of its own, with its own limits.
    int rc = 0;
    std::thread([&] {
      rc = EvalAndCheckpoint(data_dir, models, threads, eval_chunks, device_name);
    }).join();
    return rc;
  }
  const torch::Device device(device_name);
  // The reference's data: the first `samples` training images, normalized
  // as the trainer does (worker/builtin_trainer.cc, LoadSplit).
  auto img = ReadGzipFile(data_dir + "/train-images-idx3-ubyte.gz");
  auto lab = ReadGzipFile(data_dir + "/train-labels-idx1-ubyte.gz");
  if (!img.ok() || !lab.ok()) {
    std::fprintf(stderr, "trainer_bench: %s\n",
                 (img.ok() ? lab.status() : img.status()).ToString().c_str());
    return 1;
  }
  auto images = ParseIdx(*img, "images");
  auto labels = ParseIdx(*lab, "labels");
  if (!images.ok() || !labels.ok()) {
    std::fprintf(stderr, "trainer_bench: %s\n",
                 (images.ok() ? labels.status() : images.status()).ToString().c_str());
    return 1;
  }
  const int64_t n = std::min<int64_t>(samples, images->dims[0]);
  const auto x = torch::from_blob(images->data.data(), {images->dims[0], 1, 28, 28}, torch::kUInt8)
                     .slice(0, 0, n)
                     .to(torch::kFloat32)
                     .div_(255.0)
                     .sub_(0.2860)
                     .div_(0.3530)
                     .to(device);
  const auto y = torch::from_blob(labels->data.data(), {labels->dims[0]}, torch::kUInt8)
                     .slice(0, 0, n)
                     .to(torch::kInt64)
                     .to(device);

  const char* wait = std::getenv("OMP_WAIT_POLICY");
  BuiltinOptions options;
  options.data_dir = data_dir;
  auto exec = MakeBuiltinExecutor(options);
  for (const std::string& model : Split(models)) {
    for (const std::string& t_text : Split(threads)) {
      for (const std::string& b_text : Split(batches)) {
        const int t = std::atoi(t_text.c_str());
        const int b = std::atoi(b_text.c_str());
        double ours = 0, reference = 0;
        for (int rep = 0; rep < 2; ++rep) {
          TrialRun r;
          r.seed = 1;
          r.trainer = "fashion-mnist-" + model;
          r.max_steps = 1;
          r.threads = t;
          r.device = device_name;
          r.params = {{"lr", 1e-3}};
          r.system = {{"batch_size", b}, {"threads", t}};
          // The validation split comes off the top, so the epoch trains on
          // exactly `samples` images, as the reference does.
          r.trainer_args = {{"max_train_samples", n}, {"data_dir", data_dir}};
          Recorder rec;
          auto res = exec->Run(r, rec);
          if (!res.ok()) {
            std::fprintf(stderr, "trainer_bench: %s\n", res.status().ToString().c_str());
            return 1;
          }
          ours = std::max(ours, rec.sps);
          reference = std::max(reference, ReferenceEpoch(model == "cnn", x, y, b, t, device));
        }
        std::printf(
            "bench=trainer model=%s batch=%d threads=%d samples_per_s=%.0f "
            "reference_samples_per_s=%.0f "
            "ratio=%.3f omp_wait=%s\n",
            model.c_str(), b, t, ours, reference, ours / reference, wait ? wait : "default");
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
