// Speed model: how fast a workload trains on a device class under a system
// setting, with its uncertainty. Pure (no I/O): the server feeds it the
// workers' benchmarks (the prior) and the trials' reports (observations).
//
// Keys:
//   device_class  what workers report, e.g. "cpu:AMD EPYC:x2.0", "cuda:NVIDIA H100"
//   workload      Engine::Workload, e.g. "fashion-mnist-cnn/cnn@6f1c0e9a2b3d4c5e", or
//                 the spec's own `workload:` name plus the space
//   setting       the whole reported system setting as canonical JSON (sorted
//                 keys, SettingKey), or "" for "whatever setting"
//
// Which throughput-only values to start a trial with (BestTunables). The
// system parameters are of two kinds: tunable ones (`affects_accuracy:
// false`, e.g. threads) only change speed, and the trial may take any
// value; searched ones (a `batch_size` with affects_accuracy) are fixed by
// the trial's hyperparameters and change speed too. Comparing whole
// settings would confound the two: the fastest setting is then the one that
// happened to run with the biggest batch, and its threads win whatever
// batch the next trial has. So for each (class, workload) the model fits,
// per tunable setting t (the tunable parameters' values),
//
//     log(samples/s) = a_t + b_t * log(batch_size)          (1)
//
// by weighted least squares over the observed whole settings (weight: the
// number of observations; y: the log of their mean). The slopes are shrunk
// toward the pooled within-setting slope b (one slope fitted to every t
// with its own intercept), b_t = (Sxy_t + kSlopePrior * b) / (Sxx_t +
// kSlopePrior), so a tunable setting seen at one batch size only still
// moves with the batch the way the others do; with no spread in batch size
// at all, b = 0 and (1) is the mean. The answer for a trial with batch size
// B is the t with the highest prediction a_t + b_t * log B among those with
// at least `min_observations` observations. Without a searched batch size
// (none in the spec, or it is itself tunable) the covariate is absent and
// the rule is the highest mean.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
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
  // The best values of the parameters named in `tunable` for a trial on
  // (class, workload) whose searched values are `given` (its system setting,
  // of which only a searched "batch_size" is read), by the fit at the top of
  // this file; ties go to the lexicographically smallest setting. nullopt
  // when no tunable setting has `min_observations` observations. The result
  // holds only the tunable parameters the observations carry.
  std::optional<nlohmann::json> BestTunables(const std::string& device_class,
                                             const std::string& workload,
                                             const std::vector<std::string>& tunable,
                                             const nlohmann::json& given,
                                             int min_observations = 1) const;
  // Predicted samples/s of one tunable setting (as BestTunables returns it)
  // for `given`, by the same fit; nullopt when that setting was never seen.
  std::optional<double> PredictTunables(const std::string& device_class,
                                        const std::string& workload,
                                        const std::vector<std::string>& tunable,
                                        const nlohmann::json& tunables,
                                        const nlohmann::json& given) const;
  // PredictTunables of every tunable setting with at least
  // `min_observations` observations, by the SettingKey of its tunables (as
  // BestTunables returns them): what earlier trials measured, for these
  // searched values, in one fit.
  std::map<std::string, double> PredictAllTunables(const std::string& device_class,
                                                   const std::string& workload,
                                                   const std::vector<std::string>& tunable,
                                                   const nlohmann::json& given,
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
  // The fit (1) for one (class, workload), the tunable settings by key.
  struct Line {
    nlohmann::json tunables;
    int n = 0;
    double x_mean = 0, y_mean = 0,
           slope = 0;  // log(samples/s) = y_mean + slope * (log(batch) - x_mean)
    double Predict(std::optional<double> log_batch) const {
      return log_batch ? y_mean + slope * (*log_batch - x_mean) : y_mean;
    }
  };
  std::map<std::string, Line> Fit(const std::string& device_class, const std::string& workload,
                                  const std::vector<std::string>& tunable) const;

  struct Observed {
    Stats stats;
    nlohmann::json setting;  // parsed once; null for the empty setting
  };
  std::map<std::tuple<std::string, std::string, std::string>, Observed> by_setting_;
  std::map<std::pair<std::string, std::string>, Stats> by_pair_;
};

}  // namespace hpo::scheduler
