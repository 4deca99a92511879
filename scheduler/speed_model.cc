#include "scheduler/speed_model.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace hpo::scheduler {
namespace {

// A single observation says little about spread, and timing noise on real
// devices rarely drops below a few percent; the floor keeps one lucky
// report from looking certain.
constexpr double kMinRelativeStddev = 0.05;
// A benchmark-derived prior can be off by a lot (GEMM speed is not training
// speed), so it is marked as uncertain.
constexpr double kPriorRelativeStddev = 0.5;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

void SpeedModel::Stats::Add(double x) {
  ++n;
  const double delta = x - mean;
  mean += delta / n;
  m2 += delta * (x - mean);
}

void SpeedModel::AddBenchmark(const std::string& device_class, double gflops) {
  // A zero or broken benchmark would turn every prior on this class into 0
  // samples/s; better to know nothing.
  if (!(gflops > 0) || !std::isfinite(gflops)) return;
  gflops_[device_class] = gflops;
}

void SpeedModel::Observe(const std::string& device_class, const std::string& workload,
                         const std::string& setting, double samples_per_sec) {
  if (!(samples_per_sec > 0) || !std::isfinite(samples_per_sec)) return;
  by_setting_[{device_class, workload, setting}].Add(samples_per_sec);
  by_pair_[{device_class, workload}].Add(samples_per_sec);
}

std::optional<double> SpeedModel::PriorRatio(const std::string& device_class,
                                             const std::string& workload) const {
  std::vector<double> same_workload, all;
  for (const auto& [key, stats] : by_pair_) {
    const auto& [cls, wl] = key;
    if (cls == device_class) continue;
    const auto g = gflops_.find(cls);
    if (g == gflops_.end()) continue;
    const double ratio = stats.mean / g->second;
    all.push_back(ratio);
    if (wl == workload) same_workload.push_back(ratio);
  }
  if (!same_workload.empty()) return Median(std::move(same_workload));
  if (!all.empty()) return Median(std::move(all));
  return std::nullopt;
}

std::optional<SpeedEstimate> SpeedModel::Estimate(const std::string& device_class,
                                                  const std::string& workload,
                                                  const std::string& setting) const {
  const Stats* stats = nullptr;
  if (!setting.empty()) {
    const auto it = by_setting_.find({device_class, workload, setting});
    if (it != by_setting_.end()) stats = &it->second;
  }
  if (stats == nullptr) {
    const auto it = by_pair_.find({device_class, workload});
    if (it != by_pair_.end()) stats = &it->second;
  }
  if (stats != nullptr && stats->n > 0) {
    SpeedEstimate e;
    e.samples_per_sec = stats->mean;
    e.stddev = std::max(std::sqrt(stats->Variance() / stats->n), kMinRelativeStddev * stats->mean);
    e.observations = stats->n;
    return e;
  }
  const auto g = gflops_.find(device_class);
  if (g == gflops_.end()) return std::nullopt;
  SpeedEstimate e;
  e.samples_per_sec = g->second * PriorRatio(device_class, workload).value_or(1.0);
  e.stddev = kPriorRelativeStddev * e.samples_per_sec;
  e.observations = 0;
  return e;
}

std::optional<std::string> SpeedModel::BestSetting(const std::string& device_class,
                                                   const std::string& workload,
                                                   int min_observations) const {
  std::optional<std::string> best;
  double best_mean = 0;
  // The map is ordered by (class, workload, setting): the pair's settings
  // are one contiguous run, visited in setting order, so ties keep the
  // lexicographically smallest setting.
  for (auto it = by_setting_.lower_bound({device_class, workload, std::string()});
       it != by_setting_.end(); ++it) {
    const auto& [cls, wl, setting] = it->first;
    if (cls != device_class || wl != workload) break;
    if (setting.empty() || it->second.n < std::max(1, min_observations)) continue;
    if (!best || it->second.mean > best_mean) {
      best = setting;
      best_mean = it->second.mean;
    }
  }
  return best;
}

std::vector<std::string> SpeedModel::DeviceClasses() const {
  std::set<std::string> classes;
  for (const auto& [cls, g] : gflops_) classes.insert(cls);
  for (const auto& [key, s] : by_pair_) classes.insert(key.first);
  return {classes.begin(), classes.end()};
}

}  // namespace hpo::scheduler
