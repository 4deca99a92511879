// The read-only snapshot of one search space's trials that samplers and
// pruners decide from. The server builds it from the store; tests build it
// by hand. Objectives are always minimized here: the server negates
// maximized metrics when it builds the snapshot (see Minimized).
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "search/space.h"

namespace hpo::search {

enum class Direction { kMinimize, kMaximize };
inline double Minimized(Direction d, double v) { return d == Direction::kMaximize ? -v : v; }

enum class TrialStatus {
  kRunning,    // pending, leased or running: its result is still to come
  kCompleted,  // `value` holds its final objective
  kPruned,     // stopped early; `curve` holds what it reached
  kFailed,     // says nothing about the objective
};

struct Observation {
  Observation() = default;
  // The one-objective form most callers build.
  Observation(int64_t number, TrialStatus status, Assignment params, std::optional<double> value,
              std::vector<std::pair<int64_t, double>> curve)
      : number(number),
        status(status),
        params(std::move(params)),
        value(value),
        curve(std::move(curve)) {}

  int64_t number = 0;  // the trial's number in its experiment
  TrialStatus status = TrialStatus::kRunning;
  Assignment params;            // internal form, NaN for inactive params
  std::optional<double> value;  // final objective, minimized (completed trials)
  // Intermediate objective values (minimized) by step, steps increasing.
  std::vector<std::pair<int64_t, double>> curve;
  // With several objectives: every final objective value (minimized), in the
  // spec's objective order, of a completed trial (`value` is the first).
  // Empty with one objective.
  std::vector<double> values;
  // With several objectives: every objective's intermediate value
  // (minimized) by step, steps increasing, as `curve` holds the first's.
  // Empty with one objective.
  std::vector<std::pair<int64_t, std::vector<double>>> curve_values;
  // With constraints: how far the trial's final metrics lie outside their
  // bounds (the sum over the constraints; 0 when it satisfies them all).
  // nullopt without constraints, or before its final metrics.
  std::optional<double> violation;
  // With constraints whose values can only get worse as a trial runs (its
  // model size, the cost it has spent): how far its latest report already
  // lies outside them. Above 0, the trial must end infeasible, and early
  // stopping stops it at its next rung.
  std::optional<double> known_violation;

  bool Feasible() const { return !violation || *violation <= 0; }
  // Already outside a constraint that only gets worse (known_violation > 0).
  bool MustEndInfeasible() const { return known_violation && *known_violation > 0; }

  // The last intermediate value at or before `step`, if any.
  std::optional<double> ValueAt(int64_t step) const;
  // With several objectives: the last point of curve_values at or before
  // `step`; null when there is none.
  const std::vector<double>* ValuesAt(int64_t step) const;
  std::optional<int64_t> LastStep() const {
    return curve.empty() ? std::nullopt : std::optional<int64_t>(curve.back().first);
  }
};

struct History {
  std::vector<Observation> trials;

  int CountCompleted() const;
  // Completed trials' values, in trial order.
  std::vector<double> CompletedValues() const;
};

}  // namespace hpo::search
