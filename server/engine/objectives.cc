#include "server/engine/objectives.h"

#include <cmath>
#include <cstdio>

namespace hpo::server {

using nlohmann::json;

namespace {
std::optional<double> FiniteMetric(const json& metrics, const std::string& name) {
  const auto it = metrics.find(name);
  if (it == metrics.end() || !it->is_number()) return std::nullopt;
  const double v = it->get<double>();
  if (!std::isfinite(v)) return std::nullopt;
  return v;
}

std::string Number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}
}  // namespace

bool KnownAtRung(const Constraint& c) {
  if (c.metric == "params") return true;
  return (c.metric == "device_seconds" || c.metric == "cost") && c.max && !c.min;
}

double Outside(const Constraint& c, double v) {
  const auto scaled = [](double over, double bound) {
    return std::fabs(bound) > 0 ? over / std::fabs(bound) : over;
  };
  if (c.max && v > *c.max) return scaled(v - *c.max, *c.max);
  if (c.min && v < *c.min) return scaled(*c.min - v, *c.min);
  return 0;
}

std::optional<ObjectiveReading> PointOf(const ExperimentSpec& spec, const json& metrics) {
  if (!metrics.is_object()) return std::nullopt;
  const std::optional<double> first = FiniteMetric(metrics, spec.metric);
  if (!first) return std::nullopt;
  ObjectiveReading p;
  p.value = search::Minimized(spec.direction, *first);
  if (spec.SeveralObjectives()) {
    for (const auto& o : spec.objectives) {
      const std::optional<double> v = FiniteMetric(metrics, o.metric);
      if (!v) {
        p.values.clear();
        break;
      }
      p.values.push_back(search::Minimized(o.direction, *v));
    }
  }
  if (!spec.constraints.empty()) {
    double all = 0;
    double known = 0;
    bool any_known = false;
    for (const auto& c : spec.constraints) {
      const std::optional<double> v = FiniteMetric(metrics, c.metric);
      const double out = v ? Outside(c, *v) : kMissingViolation;
      all += out;
      if (KnownAtRung(c) && v) {
        known += out;
        any_known = true;
      }
    }
    p.violation = all;
    if (any_known) p.known_violation = known;
  }
  return p;
}

std::optional<ObjectiveReading> PointOf(const ExperimentSpec& spec,
                                        const std::string& metrics_json) {
  const json m = json::parse(metrics_json, nullptr, false);
  if (m.is_discarded()) return std::nullopt;
  return PointOf(spec, m);
}

Feasibility FeasibilityOf(const ExperimentSpec& spec, const json& final_metrics) {
  Feasibility f;
  for (const auto& c : spec.constraints) {
    const std::optional<double> v =
        final_metrics.is_object() ? FiniteMetric(final_metrics, c.metric) : std::nullopt;
    if (!v) {
      f.violation += kMissingViolation;
      f.reasons.push_back(c.metric + ": not reported");
      continue;
    }
    const double out = Outside(c, *v);
    if (out <= 0) continue;
    f.violation += out;
    f.reasons.push_back(c.max && *v > *c.max
                            ? c.metric + ": " + Number(*v) + " is above the max " + Number(*c.max)
                            : c.metric + ": " + Number(*v) + " is below the min " + Number(*c.min));
  }
  f.feasible = f.reasons.empty();
  return f;
}

void AddDerivedMetrics(const ExperimentSpec& spec,
                       const std::vector<store::MeasurementRecord>& measurements,
                       std::optional<int64_t> before, const store::Measurement* current,
                       json& metrics) {
  if (!spec.UsesDerivedMetrics()) return;
  int64_t device_ms = 0;
  double cost = 0;
  double speed_sum = 0;
  int speeds = 0;
  const auto add = [&](const store::Measurement& m) {
    device_ms += m.device_ms;
    cost += m.cost;
    if (m.samples_per_sec > 0 && std::isfinite(m.samples_per_sec)) {
      speed_sum += m.samples_per_sec;
      ++speeds;
    }
  };
  for (const auto& m : measurements) {
    if (!before || m.step < *before) add(m);
  }
  if (current) add(*current);
  metrics["device_seconds"] = static_cast<double>(device_ms) / 1000.0;
  metrics["samples_per_sec"] = speeds > 0 ? speed_sum / speeds : 0.0;
  if (!spec.prices.empty()) metrics["cost"] = cost;
}

}  // namespace hpo::server
