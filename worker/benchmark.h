// The device speed benchmark a worker runs at start-up and registers with
// each device (Device.benchmark_gflops): float32 matrix-multiply throughput,
// the operation that dominates training. The server uses it to rank devices
// before it has measured any trial on them.
//
// No LibTorch in this header: it is included by code that must build without
// it; only benchmark.cc includes <torch/torch.h>.
#pragma once

#include <string>

#include "common/status.h"

namespace hpo::worker {

struct BenchmarkOptions {
  // "cpu", "cuda" (= "cuda:0") or "cuda:N".
  std::string device = "cpu";
  // LibTorch intra-op threads for the measurement (CPU only); 0 leaves the
  // current setting. The previous setting is restored before returning.
  int threads = 0;
  // Wall-clock budget for choosing the matrix size and measuring. Not counted:
  // the very first matmul on the device (CUDA context and cuBLAS start-up,
  // thread-pool creation), which can take seconds and says nothing of speed.
  // A throttled device can take up to about 1.75x as long: the measured
  // window always lasts at least 3/4 of the budget.
  double max_seconds = 2.0;
};

// Multiplies square float32 matrices with LibTorch on options.device and
// returns the throughput in GFLOP/s (2*n^3 floating-point operations per n x n
// matmul): all products over the wall time they took (throttling pauses
// included) at the largest size (a power of two, 128 up to 4096 on CPU and
// 8192 on CUDA) whose single matmul takes at most about 1/16 of the budget,
// found in the first quarter of it; the window measured lasts at least 3/4
// of the budget, so a CPU quota shows in the result, not only a burst.
//
// Errors: InvalidArgument for a device string that is not cpu/cuda[:N], a
// negative thread count or a max_seconds that is not a positive number;
// FailedPrecondition when CUDA is asked for but unavailable (LibTorch built
// without it, no driver) or the ordinal is not below the device count;
// Internal when LibTorch fails (out of device memory, for one).
//
// Not thread-safe with other LibTorch work in the process: it changes the
// global thread count while it runs and competes for the device. Call it at
// start-up, before any trial runs.
Result<double> MeasureGemmGflops(const BenchmarkOptions& options);

}  // namespace hpo::worker
