// What a trial's metrics say about its experiment's objectives and
// constraints, in the form search/ reads them (search::Observation: values
// minimized, how far outside the constraints), and the metrics the server
// derives from a trial's measurements (IsDerivedMetric).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "server/spec/spec.h"
#include "server/store/store.h"

namespace hpo::server {

// One report's, or the final metrics', reading.
struct ObjectiveReading {
  double value = 0;  // the first objective, minimized
  // With several objectives: each, minimized, in spec order; empty when one
  // is missing or not finite (a report without it has no place on a rung).
  std::vector<double> values;
  // With constraints: how far the metrics lie outside them (Violation).
  std::optional<double> violation;
  // With constraints whose metric can only get worse as the trial runs
  // (KnownAtRung): how far outside those the metrics already lie.
  std::optional<double> known_violation;
};

// nullopt when the first objective is missing or not finite.
std::optional<ObjectiveReading> PointOf(const ExperimentSpec& spec, const nlohmann::json& metrics);
std::optional<ObjectiveReading> PointOf(const ExperimentSpec& spec,
                                        const std::string& metrics_json);

// A constraint's metric that can only get worse as a trial runs, so that
// a report already outside it says the trial will end infeasible: `params`
// (a model's size does not change), and the maximum of `device_seconds` and
// `cost` (they only grow).
bool KnownAtRung(const Constraint& c);

// How far a value lies outside one constraint: 0 inside; else the distance
// to the bound, relative to the bound (absolute when the bound is 0).
double Outside(const Constraint& c, double v);
// A constraint's metric that a trial never reported counts as this far
// outside: infeasible, behind every trial that reported it.
inline constexpr double kMissingViolation = 1e3;

// Whether a finished trial's final metrics satisfy every constraint, and
// why not ("params: 412000 is above the max 200000", "params: not
// reported").
struct Feasibility {
  bool feasible = true;
  double violation = 0;
  std::vector<std::string> reasons;
};
Feasibility FeasibilityOf(const ExperimentSpec& spec, const nlohmann::json& final_metrics);

// Adds the derived metrics the spec names (device_seconds, cost,
// samples_per_sec) to `metrics`: the totals over `measurements` with a step
// below `before` (all of them when nullopt), plus `current` when given (the
// step being reported). The server's figures replace any of the same name.
void AddDerivedMetrics(const ExperimentSpec& spec,
                       const std::vector<store::MeasurementRecord>& measurements,
                       std::optional<int64_t> before, const store::Measurement* current,
                       nlohmann::json& metrics);

}  // namespace hpo::server
