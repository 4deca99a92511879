#include "server/engine/report_check.h"

#include <cmath>

#include "common/json_limits.h"

namespace hpo::server {

using nlohmann::json;

Status CheckMetrics(const json& metrics, const std::string& field) {
  if (!metrics.is_object()) return Status::InvalidArgument(field + ": must be an object");
  if (metrics.size() > kMaxMetricsPerReport) {
    return Status::InvalidArgument(field + ": " + std::to_string(metrics.size()) +
                                   " metrics, more than the limit of " +
                                   std::to_string(kMaxMetricsPerReport));
  }
  for (auto it = metrics.begin(); it != metrics.end(); ++it) {
    if (it.key().empty() || it.key().size() > kMaxNameLength) {
      return Status::InvalidArgument(
          field + ": a metric name must be 1 to " + std::to_string(kMaxNameLength) + " bytes ('" +
          it.key().substr(0, 40) + "' is " + std::to_string(it.key().size()) + ")");
    }
    if (!it->is_number())
      return Status::InvalidArgument(field + "." + it.key() + ": must be a number");
  }
  return Status::OK();
}

Status CheckSystem(const json& system, const std::string& field) {
  if (system.is_null()) return Status::OK();
  if (!system.is_object()) return Status::InvalidArgument(field + ": must be an object");
  if (system.size() > kMaxSystemKeys) {
    return Status::InvalidArgument(field + ": " + std::to_string(system.size()) +
                                   " keys, more than the limit of " +
                                   std::to_string(kMaxSystemKeys));
  }
  for (auto it = system.begin(); it != system.end(); ++it) {
    if (it.key().empty() || it.key().size() > kMaxNameLength) {
      return Status::InvalidArgument(field + ": a key must be 1 to " +
                                     std::to_string(kMaxNameLength) + " bytes");
    }
    // Parsed values are bounded by json_limits.h; one built in code may not
    // be, and dump() recurses: measure the depth without recursion first.
    if (JsonDepth(*it, kMaxJsonDepth) > kMaxJsonDepth) {
      return Status::InvalidArgument(field + "." + it.key() + ": nested more than " +
                                     std::to_string(kMaxJsonDepth) + " levels deep");
    }
    if (it->dump(-1, ' ', false, json::error_handler_t::replace).size() > kMaxValueLength) {
      return Status::InvalidArgument(field + "." + it.key() + ": longer than " +
                                     std::to_string(kMaxValueLength) + " bytes");
    }
  }
  return Status::OK();
}

Result<TrialReport> CheckedReport(const ExperimentSpec& spec, const TrialReport& given) {
  // A step past the trial's budget is no step of it, and every one would be
  // a row (a program printing thousands of lines).
  HPO_RETURN_IF_ERROR(CheckStep(spec, given.step));
  HPO_RETURN_IF_ERROR(CheckMetrics(given.metrics, "metrics"));
  HPO_RETURN_IF_ERROR(CheckSystem(given.system));
  HPO_RETURN_IF_ERROR(CheckSystem(given.applied, "applied"));
  if (given.system_changes.size() > kMaxSystemKeys) {
    return Status::InvalidArgument(
        "system_changes: " + std::to_string(given.system_changes.size()) +
        " parameters, more than the limit of " + std::to_string(kMaxSystemKeys));
  }
  for (const auto& [name, change] : given.system_changes) {
    if (name.empty() || name.size() > kMaxNameLength) {
      return Status::InvalidArgument("system_changes: a name must be 1 to " +
                                     std::to_string(kMaxNameLength) + " bytes");
    }
  }
  TrialReport r = given;
  if (r.applied.is_object() && !r.applied.empty()) {
    if (!r.system.is_object()) r.system = json::object();
    for (auto it = r.applied.begin(); it != r.applied.end(); ++it) r.system[it.key()] = *it;
  }
  const auto finite = [&r](const std::string& metric) {
    const auto it = r.metrics.find(metric);
    return it != r.metrics.end() && it->is_number() && std::isfinite(it->get<double>());
  };
  if (!finite(spec.metric)) {
    return Status::InvalidArgument(
        "metrics." + spec.metric + ": missing or not a finite number (" +
        (spec.SeveralObjectives() ? "the first objective" : "it is the objective") + ")");
  }
  // A rung ranks trials by every objective: each report carries them all
  // (the server adds the derived ones).
  if (spec.SeveralObjectives() && spec.early_stopping != "none") {
    for (size_t i = 1; i < spec.objectives.size(); ++i) {
      const std::string& metric = spec.objectives[i].metric;
      if (IsDerivedMetric(metric) || finite(metric)) continue;
      return Status::InvalidArgument(
          "metrics." + metric + ": missing or not a finite number (objectives[" +
          std::to_string(i) + "]; early stopping ranks each report by every objective)");
    }
  }
  return r;
}

}  // namespace hpo::server
