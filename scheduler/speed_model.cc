#include "scheduler/speed_model.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "scheduler/cotuner.h"

namespace hpo::scheduler {
namespace {

// A single observation says little about spread, and timing noise on real
// devices rarely drops below a few percent; the floor keeps one lucky
// report from looking certain.
constexpr double kMinRelativeStddev = 0.05;
// A benchmark-derived prior can be off by a lot (GEMM speed is not training
// speed), so it is marked as uncertain.
constexpr double kPriorRelativeStddev = 0.5;
// How strongly a tunable setting's slope in log batch size is pulled toward
// the pooled slope, in units of Sxx (weighted squared spread of log batch):
// one observation an e-fold batch away from the setting's mean counts as
// much as the prior.
constexpr double kSlopePrior = 1.0;

// The covariate of equation (1): log of a searched (not tunable), positive
// batch size; nullopt otherwise.
std::optional<double> LogBatch(const nlohmann::json& setting,
                               const std::vector<std::string>& tunable) {
  if (std::find(tunable.begin(), tunable.end(), "batch_size") != tunable.end()) return std::nullopt;
  if (!setting.is_object()) return std::nullopt;
  const auto it = setting.find("batch_size");
  if (it == setting.end() || !it->is_number()) return std::nullopt;
  const double b = it->get<double>();
  if (!(b > 0) || !std::isfinite(b)) return std::nullopt;
  return std::log(b);
}

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
  Observed& o = by_setting_[{device_class, workload, setting}];
  if (o.stats.n == 0 && !setting.empty())
    o.setting = nlohmann::json::parse(setting, nullptr, false);
  o.stats.Add(samples_per_sec);
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
    if (it != by_setting_.end()) stats = &it->second.stats;
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

std::map<std::string, SpeedModel::Line> SpeedModel::Fit(
    const std::string& device_class, const std::string& workload,
    const std::vector<std::string>& tunable) const {
  struct Point {
    double x = 0, y = 0, w = 0;
  };
  struct Group {
    nlohmann::json tunables = nlohmann::json::object();
    std::vector<Point> points;
  };
  std::map<std::string, Group> groups;
  // The map is ordered by (class, workload, setting): the pair's settings
  // are one contiguous run.
  for (auto it = by_setting_.lower_bound({device_class, workload, std::string()});
       it != by_setting_.end(); ++it) {
    const auto& [cls, wl, key] = it->first;
    if (cls != device_class || wl != workload) break;
    const Observed& o = it->second;
    if (!o.setting.is_object() || o.stats.n == 0 || !(o.stats.mean > 0)) continue;
    nlohmann::json t = nlohmann::json::object();
    for (const auto& name : tunable) {
      if (const auto v = o.setting.find(name); v != o.setting.end()) t[name] = *v;
    }
    Group& g = groups[SettingKey(t)];
    g.tunables = t;
    g.points.push_back(
        {LogBatch(o.setting, tunable).value_or(0), std::log(o.stats.mean), double(o.stats.n)});
  }
  std::map<std::string, Line> lines;
  double pooled_sxy = 0, pooled_sxx = 0;
  std::map<std::string, std::pair<double, double>> spread;  // key -> (Sxx, Sxy)
  for (const auto& [key, g] : groups) {
    Line l;
    l.tunables = g.tunables;
    double w = 0;
    for (const Point& p : g.points) {
      w += p.w;
      l.x_mean += p.w * p.x;
      l.y_mean += p.w * p.y;
    }
    l.x_mean /= w;
    l.y_mean /= w;
    l.n = static_cast<int>(w);
    double sxx = 0, sxy = 0;
    for (const Point& p : g.points) {
      sxx += p.w * (p.x - l.x_mean) * (p.x - l.x_mean);
      sxy += p.w * (p.x - l.x_mean) * (p.y - l.y_mean);
    }
    pooled_sxx += sxx;
    pooled_sxy += sxy;
    spread[key] = {sxx, sxy};
    lines[key] = l;
  }
  const double pooled = pooled_sxx > 1e-12 ? pooled_sxy / pooled_sxx : 0;
  for (auto& [key, l] : lines) {
    const auto [sxx, sxy] = spread[key];
    l.slope = (sxy + kSlopePrior * pooled) / (sxx + kSlopePrior);
  }
  return lines;
}

std::optional<nlohmann::json> SpeedModel::BestTunables(const std::string& device_class,
                                                       const std::string& workload,
                                                       const std::vector<std::string>& tunable,
                                                       const nlohmann::json& given,
                                                       int min_observations) const {
  const std::optional<double> x = LogBatch(given, tunable);
  std::optional<nlohmann::json> best;
  double best_y = 0;
  // Ordered by key: ties keep the lexicographically smallest setting.
  for (const auto& [key, l] : Fit(device_class, workload, tunable)) {
    if (l.tunables.empty() || l.n < std::max(1, min_observations)) continue;
    const double y = l.Predict(x);
    if (!best || y > best_y) {
      best = l.tunables;
      best_y = y;
    }
  }
  return best;
}

std::optional<double> SpeedModel::PredictTunables(const std::string& device_class,
                                                  const std::string& workload,
                                                  const std::vector<std::string>& tunable,
                                                  const nlohmann::json& tunables,
                                                  const nlohmann::json& given) const {
  const auto lines = Fit(device_class, workload, tunable);
  const auto it = lines.find(SettingKey(tunables));
  if (it == lines.end()) return std::nullopt;
  return std::exp(it->second.Predict(LogBatch(given, tunable)));
}

std::map<std::string, double> SpeedModel::PredictAllTunables(
    const std::string& device_class, const std::string& workload,
    const std::vector<std::string>& tunable, const nlohmann::json& given,
    int min_observations) const {
  const std::optional<double> x = LogBatch(given, tunable);
  std::map<std::string, double> out;
  for (const auto& [key, l] : Fit(device_class, workload, tunable)) {
    if (l.tunables.empty() || l.n < std::max(1, min_observations)) continue;
    out[key] = std::exp(l.Predict(x));
  }
  return out;
}

std::vector<std::string> SpeedModel::DeviceClasses() const {
  std::set<std::string> classes;
  for (const auto& [cls, g] : gflops_) classes.insert(cls);
  for (const auto& [key, s] : by_pair_) classes.insert(key.first);
  return {classes.begin(), classes.end()};
}

}  // namespace hpo::scheduler
