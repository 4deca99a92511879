#include "server/http/dashboard.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "scheduler/cotuner.h"
#include "scheduler/speed_model.h"

namespace hpo::server::dashboard {

using nlohmann::json;

namespace {

struct Curve {
  store::Id trial_id = 0;
  std::vector<int64_t> steps;
  std::vector<double> values;
};

std::vector<Curve> ReadCurves(const std::vector<store::MeasurementRecord>& measurements,
                              const std::string& metric) {
  std::vector<Curve> curves;
  for (const auto& m : measurements) {
    const json metrics = json::parse(m.metrics_json, nullptr, false);
    if (!metrics.is_object()) continue;
    const auto it = metrics.find(metric);
    if (it == metrics.end() || !it->is_number() || !std::isfinite(it->get<double>())) continue;
    if (curves.empty() || curves.back().trial_id != m.trial_id)
      curves.push_back({m.trial_id, {}, {}});
    curves.back().steps.push_back(m.step);
    curves.back().values.push_back(it->get<double>());
  }
  return curves;
}

// Keeps `keep` of the curve's points, evenly spaced by index, first and last included.
void Thin(Curve& c, size_t keep) {
  const size_t n = c.steps.size();
  if (n <= keep) return;
  Curve out{c.trial_id, {}, {}};
  for (size_t i = 0; i < keep; ++i) {
    const size_t at =
        static_cast<size_t>(std::llround(static_cast<double>(i) * (n - 1) / (keep - 1)));
    out.steps.push_back(c.steps[at]);
    out.values.push_back(c.values[at]);
  }
  c = std::move(out);
}

}  // namespace

json LearningCurves(const std::vector<store::MeasurementRecord>& measurements,
                    const std::string& metric, int64_t max_points) {
  std::vector<Curve> curves = ReadCurves(measurements, metric);
  const size_t per_trial =
      curves.empty() ? 2 : std::max<size_t>(2, static_cast<size_t>(max_points) / curves.size());
  bool downsampled = false;
  size_t points = 0;
  json trials = json::array();
  for (Curve& c : curves) {
    downsampled |= c.steps.size() > per_trial;
    Thin(c, per_trial);
    points += c.steps.size();
    trials.push_back({{"trial_id", c.trial_id}, {"steps", c.steps}, {"values", c.values}});
  }
  return {{"metric", metric}, {"points", points}, {"downsampled", downsampled}, {"trials", trials}};
}

json SystemTuning(const std::vector<store::SpeedObservationRecord>& observations,
                  const std::vector<std::string>& workloads,
                  const std::vector<std::string>& tunable, int min_observations) {
  struct Point {
    json tunables;
    double sum = 0;
    int n = 0;
  };
  // A searched batch size is a covariate (one line per bucket); a tunable
  // one is on the x axis with the others.
  const bool batch_searched =
      std::find(tunable.begin(), tunable.end(), "batch_size") == tunable.end();
  auto bucket_of = [&](const json& setting) -> std::optional<int64_t> {
    if (!batch_searched) return std::nullopt;
    const auto b = setting.find("batch_size");
    if (b == setting.end() || !b->is_number() || !(b->get<double>() >= 1)) return std::nullopt;
    int64_t lo = 1;
    while (lo * 2 <= b->get<double>() && lo < (int64_t{1} << 40)) lo *= 2;
    return lo;
  };
  scheduler::SpeedModel model;
  // workload -> device class -> batch bucket (-1: none) -> tunables' key -> what was measured
  std::map<std::string, std::map<std::string, std::map<int64_t, std::map<std::string, Point>>>>
      measured;
  const std::set<std::string> wanted(workloads.begin(), workloads.end());
  for (const auto& o : observations) {
    if (!wanted.count(o.workload) || !(o.samples_per_sec > 0) || !std::isfinite(o.samples_per_sec))
      continue;
    const json setting = json::parse(o.system_setting_json, nullptr, false);
    if (!setting.is_object()) continue;
    model.Observe(o.device_class, o.workload, scheduler::SettingKey(setting), o.samples_per_sec);
    json t = json::object();
    for (const auto& name : tunable) {
      if (const auto v = setting.find(name); v != setting.end()) t[name] = *v;
    }
    Point& p = measured[o.workload][o.device_class][bucket_of(setting).value_or(-1)]
                       [scheduler::SettingKey(t)];
    p.tunables = t;
    p.sum += o.samples_per_sec;
    ++p.n;
  }
  json out = json::array();
  for (const std::string& workload : workloads) {
    json classes = json::array();
    for (const auto& [device_class, buckets] : measured[workload]) {
      json rows = json::array();
      for (const auto& [lo, points] : buckets) {
        json given = json::object();
        // The geometric middle of [lo, 2 lo).
        if (lo > 0) given["batch_size"] = static_cast<double>(lo) * std::sqrt(2.0);
        json line = json::array();
        for (const auto& [key, p] : points) {
          line.push_back(
              {{"tunables", p.tunables}, {"samples_per_sec", p.sum / p.n}, {"observations", p.n}});
        }
        const auto chosen =
            model.BestTunables(device_class, workload, tunable, given, min_observations);
        rows.push_back({{"batch_size", lo > 0 ? json(lo) : json(nullptr)},
                        {"chosen", chosen ? *chosen : json(nullptr)},
                        {"points", line}});
      }
      classes.push_back({{"device_class", device_class}, {"buckets", rows}});
    }
    out.push_back({{"workload", workload}, {"tunable", tunable}, {"device_classes", classes}});
  }
  return {{"workloads", out}};
}

}  // namespace hpo::server::dashboard
