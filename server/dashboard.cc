#include "server/dashboard.h"

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
    if (curves.empty() || curves.back().trial_id != m.trial_id) curves.push_back({m.trial_id, {}, {}});
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
    const size_t at = static_cast<size_t>(std::llround(static_cast<double>(i) * (n - 1) / (keep - 1)));
    out.steps.push_back(c.steps[at]);
    out.values.push_back(c.values[at]);
  }
  c = std::move(out);
}

}  // namespace

json LearningCurves(const std::vector<store::MeasurementRecord>& measurements, const std::string& metric,
                    int64_t max_points) {
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
                  const std::vector<std::string>& workloads, int min_observations) {
  struct Tried {
    json setting;
    double sum = 0;
    int n = 0;
  };
  scheduler::SpeedModel model;
  // workload -> device class -> canonical setting -> what was measured
  std::map<std::string, std::map<std::string, std::map<std::string, Tried>>> tried;
  const std::set<std::string> wanted(workloads.begin(), workloads.end());
  for (const auto& o : observations) {
    if (!wanted.count(o.workload) || !(o.samples_per_sec > 0) || !std::isfinite(o.samples_per_sec)) continue;
    const json setting = json::parse(o.system_setting_json, nullptr, false);
    if (!setting.is_object()) continue;
    const std::string key = scheduler::SettingKey(setting);
    model.Observe(o.device_class, o.workload, key, o.samples_per_sec);
    Tried& t = tried[o.workload][o.device_class][key];
    t.setting = setting;
    t.sum += o.samples_per_sec;
    ++t.n;
  }
  json out = json::array();
  for (const std::string& workload : workloads) {
    json classes = json::array();
    for (const auto& [device_class, settings] : tried[workload]) {
      json rows = json::array();
      for (const auto& [key, t] : settings) {
        rows.push_back({{"setting", t.setting}, {"samples_per_sec", t.sum / t.n}, {"observations", t.n}});
      }
      const auto chosen = model.BestSetting(device_class, workload, min_observations);
      classes.push_back({{"device_class", device_class},
                         {"chosen", chosen ? settings.at(*chosen).setting : json(nullptr)},
                         {"settings", rows}});
    }
    out.push_back({{"workload", workload}, {"device_classes", classes}});
  }
  return {{"workloads", out}};
}

}  // namespace hpo::server::dashboard
