#include "worker/benchmark.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "worker/blas.h"

namespace hpo::worker {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kStartSize = 128;
// Large enough to reach peak throughput on current hardware; the caps keep
// memory modest (3 matrices: 192 MiB on CPU, 768 MiB on a GPU).
constexpr int64_t kMaxCpuSize = 4096;
constexpr int64_t kMaxCudaSize = 8192;
// One matmul may take up to this share of the budget, so that the measured
// window holds a dozen or more products.
constexpr double kMaxShareOfBudget = 1.0 / 16;
// Growing the matrix stops after this share of the budget ...
constexpr double kGrowthShare = 0.25;
// ... and the measured window lasts at least this share of it: 7.5 CFS
// quota periods (100 ms by default) at the worker's 1 s default, 3.75 at
// the 0.5 s the tests use.
constexpr double kMinMeasureShare = 0.75;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Sets LibTorch's intra-op thread count and OpenBLAS's (when threads > 0:
// the GEMM runs in OpenBLAS, whose pool would otherwise use every host core
// whatever the cgroup quota) and restores both, whatever way the benchmark
// ends.
class ThreadCountGuard {
 public:
  explicit ThreadCountGuard(int threads)
      : previous_(torch::get_num_threads()), previous_blas_(BlasThreads()) {
    if (threads > 0) {
      torch::set_num_threads(threads);
      SetBlasThreads(threads);
      changed_ = true;
    }
  }
  ~ThreadCountGuard() {
    if (!changed_) return;
    torch::set_num_threads(previous_);
    if (previous_blas_ > 0) SetBlasThreads(previous_blas_);
  }
  ThreadCountGuard(const ThreadCountGuard&) = delete;
  ThreadCountGuard& operator=(const ThreadCountGuard&) = delete;

 private:
  int previous_;
  int previous_blas_;  // 0: the BLAS cannot say
  bool changed_ = false;
};

// c = a x b on one device, n x n; Run() returns the seconds one product
// took, including the wait for an asynchronous device to finish.
class Gemm {
 public:
  Gemm(int64_t n, const torch::Device& device)
      : n_(n),
        device_(device),
        a_(torch::rand({n, n}, torch::TensorOptions().dtype(torch::kFloat32).device(device))),
        b_(torch::rand({n, n}, a_.options())),
        c_(torch::empty({n, n}, a_.options())) {}

  int64_t n() const { return n_; }

  double Run() {
    // The inputs are ready before timing starts: torch::rand is queued too.
    Synchronize();
    const Clock::time_point start = Clock::now();
    torch::mm_out(c_, a_, b_);
    Synchronize();
    return Seconds(Clock::now() - start);
  }

 private:
  void Synchronize() {
    if (device_.is_cuda()) torch::cuda::synchronize(device_.index());
  }

  int64_t n_;
  torch::Device device_;
  torch::Tensor a_, b_, c_;
};

Result<torch::Device> ParseDevice(const std::string& text) {
  std::optional<torch::Device> device;
  try {
    device = torch::Device(text);
  } catch (const std::exception&) {
    return Status::InvalidArgument("device: \"" + text + "\" is not cpu, cuda or cuda:N");
  }
  if (device->is_cpu()) {
    if (device->has_index() && device->index() != 0) {
      return Status::InvalidArgument("device: \"" + text + "\": there is only one CPU device");
    }
    return torch::Device(torch::kCPU);
  }
  if (!device->is_cuda()) {
    return Status::InvalidArgument("device: \"" + text + "\" is not cpu, cuda or cuda:N");
  }
  if (!torch::cuda::is_available()) {
    return Status::FailedPrecondition("device: \"" + text +
                                      "\": CUDA is not available (LibTorch built without it, "
                                      "or no driver or GPU)");
  }
  // A bare "cuda" means the first GPU; an explicit index makes the
  // synchronization below wait on the right device.
  const int64_t index = device->has_index() ? device->index() : 0;
  const int64_t count = static_cast<int64_t>(torch::cuda::device_count());
  if (index >= count) {
    return Status::FailedPrecondition("device: \"" + text + "\": this machine has " +
                                      std::to_string(count) + " CUDA device(s)");
  }
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

Result<double> Measure(const torch::Device& device, double budget) {
  torch::NoGradGuard no_grad;
  const int64_t max_size = device.is_cuda() ? kMaxCudaSize : kMaxCpuSize;

  Gemm gemm(kStartSize, device);
  gemm.Run();  // warm-up: thread pools, CUDA context, cuBLAS handle

  const Clock::time_point begin = Clock::now();
  const auto at = [&](double share) {
    return begin + std::chrono::duration_cast<Clock::duration>(
                       std::chrono::duration<double>(budget * share));
  };
  // Grow while a product twice as wide (8x the work) stays within its share
  // of the budget: small matrices underuse wide devices. Growing stops at a
  // quarter of the budget, so that most of it is left to measure.
  double seconds = gemm.Run();
  while (gemm.n() < max_size && seconds * 8 <= budget * kMaxShareOfBudget &&
         Clock::now() < at(kGrowthShare)) {
    gemm = Gemm(gemm.n() * 2, device);
    gemm.Run();  // first product at a new size picks kernels, touches memory
    seconds = gemm.Run();
  }

  // Sustained throughput: all products over the wall time they took, gaps
  // included. A median of single products would miss what a CPU quota does
  // (cgroup throttling pauses the process between bursts at full speed),
  // and the quota is what a trial on this device will live with. So the
  // window is never shorter than kMinMeasureShare of the budget, however
  // long growing took: a throttled process that spent its budget growing
  // would otherwise measure one product in the fresh burst at the start of
  // a quota period and report full speed (seen: a 0.25-CPU worker measured
  // twice the GFLOP/s of a 1-CPU one).
  const Clock::time_point start = Clock::now();
  const Clock::time_point end =
      std::max(at(1.0), start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(budget * kMinMeasureShare)));
  int64_t products = 0;
  do {
    gemm.Run();
    ++products;
  } while (Clock::now() < end);
  const double elapsed = Seconds(Clock::now() - start);
  if (!(elapsed > 0)) return Status::Internal("matmul took no measurable time");
  const double n = static_cast<double>(gemm.n());
  return static_cast<double>(products) * 2 * n * n * n / elapsed / 1e9;
}

}  // namespace

Result<double> MeasureGemmGflops(const BenchmarkOptions& options) {
  if (options.threads < 0) return Status::InvalidArgument("threads: must be >= 0");
  if (!std::isfinite(options.max_seconds) || options.max_seconds <= 0) {
    return Status::InvalidArgument("max_seconds: must be a positive number");
  }
  try {
    HPO_ASSIGN_OR_RETURN(const torch::Device device, ParseDevice(options.device));
    ThreadCountGuard threads(options.threads);
    return Measure(device, options.max_seconds);
  } catch (const c10::Error& e) {
    // what() carries a C++ backtrace; the short form is what a person reads.
    return Status::Internal("GEMM benchmark on " + options.device + ": " +
                            e.what_without_backtrace());
  } catch (const std::exception& e) {
    return Status::Internal("GEMM benchmark on " + options.device + ": " + e.what());
  }
}

}  // namespace hpo::worker
