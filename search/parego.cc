#include "search/parego.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace hpo::search {

namespace {

// A completed trial's objectives: `values`, or its one `value`.
std::vector<double> Objectives(const Observation& t) {
  if (!t.values.empty()) return t.values;
  if (t.value) return {*t.value};
  return {};
}

}  // namespace

bool NeedsScalarizing(const History& history) {
  return std::any_of(history.trials.begin(), history.trials.end(), [](const Observation& t) {
    return t.status == TrialStatus::kCompleted && (t.values.size() >= 2 || t.violation);
  });
}

History ScalarizeParEgo(const History& history, Rng& rng) {
  constexpr double kAugment = 0.05;
  size_t dims = 1;
  for (const Observation& t : history.trials) dims = std::max(dims, t.values.size());
  auto usable = [dims](const Observation& t) {
    const std::vector<double> f = Objectives(t);
    return t.status == TrialStatus::kCompleted && f.size() == dims &&
           std::all_of(f.begin(), f.end(), [](double v) { return std::isfinite(v); });
  };
  // Each objective's range over the feasible completed trials.
  std::vector<double> lo(dims, std::numeric_limits<double>::infinity());
  std::vector<double> hi(dims, -std::numeric_limits<double>::infinity());
  double worst_violation = 0;
  for (const Observation& t : history.trials) {
    if (!usable(t)) continue;
    if (!t.Feasible()) {
      worst_violation = std::max(worst_violation, *t.violation);
      continue;
    }
    const std::vector<double> f = Objectives(t);
    for (size_t i = 0; i < dims; ++i) {
      lo[i] = std::min(lo[i], f[i]);
      hi[i] = std::max(hi[i], f[i]);
    }
  }
  // Uniform on the simplex: normalized exponentials.
  std::vector<double> w(dims);
  double total = 0;
  for (double& x : w) {
    double u = rng.Uniform();
    while (u <= 0) u = rng.Uniform();
    x = -std::log(u);
    total += x;
  }
  for (double& x : w) x /= total;

  History out;
  out.trials.reserve(history.trials.size());
  for (const Observation& t : history.trials) {
    Observation o = t;
    o.values.clear();
    o.violation.reset();
    if (usable(t)) {
      if (!t.Feasible()) {
        o.value = 1 + kAugment + *t.violation / std::max(worst_violation, 1e-300);
      } else {
        const std::vector<double> objectives = Objectives(t);
        double worst = 0, sum = 0;
        for (size_t i = 0; i < dims; ++i) {
          const double range = hi[i] - lo[i];
          const double f = range > 0 ? (objectives[i] - lo[i]) / range : 0.0;
          worst = std::max(worst, w[i] * f);
          sum += w[i] * f;
        }
        o.value = worst + kAugment * sum;
      }
    } else if (t.status == TrialStatus::kPruned || t.status == TrialStatus::kCompleted) {
      o.status = TrialStatus::kFailed;
      o.curve.clear();
    }
    out.trials.push_back(std::move(o));
  }
  return out;
}

}  // namespace hpo::search
