// Speed model: how fast a workload trains on a device class under a system
// setting, with its uncertainty. Pure (no I/O): the server feeds it the
// workers' benchmarks (the prior) and the trials' reports (observations).
//
// Keys:
//   device_class  what workers report, e.g. "cpu:AMD EPYC:x2.0", "cuda:NVIDIA H100"
//   workload      Engine::Workload, e.g. "fashion-mnist-cnn/cnn"
//   setting       the system setting as canonical JSON (sorted keys), or ""
//                 for "whatever setting" (all observations of the pair)
#pragma once

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace hpo::scheduler {

struct SpeedEstimate {
  double samples_per_sec = 0;
  double stddev = 0;     // of the estimate (not of single observations)
  int observations = 0;  // 0: from the prior only
};

class SpeedModel {
 public:
  // The device class's GEMM benchmark (GFLOP/s); the prior for workloads
  // never seen on it.
  void AddBenchmark(const std::string& device_class, double gflops);
  // One report's measured throughput.
  void Observe(const std::string& device_class, const std::string& workload,
               const std::string& setting, double samples_per_sec);

  // Observations of (class, workload[, setting]) when there are any;
  // otherwise the prior: the class's benchmark times the samples-per-GFLOP
  // ratio this workload shows on other classes (or on average over all
  // workloads), with a wide uncertainty. nullopt when nothing is known.
  //
  // Precisely, the first of these that applies:
  //   1. `setting` non-empty and observed on (class, workload): its mean;
  //   2. (class, workload) observed under any setting: the mean of all;
  //      for 1 and 2, stddev = max(sqrt(variance / n), 5% of the mean);
  //   3. the class has a benchmark: gflops * r, stddev = 50% of that, with r
  //      the median of mean / gflops over the other benchmarked classes
  //      that observed this workload, else over every benchmarked
  //      (class, workload) pair observed, else 1 (then samples/s is just
  //      GFLOP/s: only the order of classes means anything);
  //   4. nullopt.
  // Non-positive or non-finite benchmarks and observations are ignored.
  std::optional<SpeedEstimate> Estimate(const std::string& device_class,
                                        const std::string& workload,
                                        const std::string& setting = "") const;
  // The setting with the highest observed mean for (class, workload), with
  // at least `min_observations` observations; the lexicographically
  // smallest on ties. The empty setting ("whatever setting") never wins.
  std::optional<std::string> BestSetting(const std::string& device_class,
                                         const std::string& workload,
                                         int min_observations = 1) const;
  // Classes with a benchmark or an observation, sorted.
  std::vector<std::string> DeviceClasses() const;

 private:
  struct Stats {
    int n = 0;
    double mean = 0, m2 = 0;  // Welford
    void Add(double x);
    double Variance() const { return n > 1 ? m2 / (n - 1) : 0; }
  };
  // r of Estimate's step 3, or nullopt when no pair qualifies.
  std::optional<double> PriorRatio(const std::string& device_class,
                                   const std::string& workload) const;

  std::map<std::string, double> gflops_;
  std::map<std::tuple<std::string, std::string, std::string>, Stats> by_setting_;
  std::map<std::pair<std::string, std::string>, Stats> by_pair_;
};

}  // namespace hpo::scheduler
