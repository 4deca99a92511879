#include "search/pruner.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "search/pareto.h"

namespace hpo::search {
namespace {

// Hyperband with more brackets than this comes only from a reduction factor
// a hair above 1; each call walks the bracket table, so refuse it up front.
constexpr int kMaxHyperbandBrackets = 1000;

// Rung steps, bracket counts and bracket sizes come out of pow() and
// division on doubles; a non-integer eta can land a rounding error above an
// integer (3.0000000000000004), which must not push ceil() one step up.
constexpr double kRelTolerance = 1e-12;

}  // namespace

std::optional<int64_t> RungStep(int64_t min_resource, double eta, int64_t exponent) {
  // Computed as a double, which saturates to infinity rather than
  // overflowing, and converted only when it is in range.
  const double x = static_cast<double>(min_resource) * std::pow(eta, static_cast<double>(exponent));
  const double rung = std::ceil(x * (1 - kRelTolerance));
  if (!(rung < 0x1p63)) return std::nullopt;
  return static_cast<int64_t>(rung);
}

std::vector<int64_t> RungStepsBelow(int64_t min_resource, double eta, int64_t first_exponent,
                                    int64_t end) {
  std::vector<int64_t> steps;
  for (int64_t k = 0; k < kMaxRungs; ++k) {
    const std::optional<int64_t> step = RungStep(min_resource, eta, first_exponent + k);
    if (!step || *step >= end) break;
    steps.push_back(*step);
  }
  return steps;
}

int RungsPassed(const std::vector<int64_t>& rung_steps, int64_t step) {
  return static_cast<int>(std::upper_bound(rung_steps.begin(), rung_steps.end(), step) -
                          rung_steps.begin());
}

namespace {

class NopPruner : public Pruner {
 public:
  std::string_view name() const override { return "none"; }
  bool ShouldPrune(const History&, const Observation&) const override { return false; }
};

// Another trial whose curve may be compared with `trial`'s.
bool IsPeer(const Observation& o, const Observation& trial) {
  return o.number != trial.number && o.status != TrialStatus::kFailed;
}

// The step of the point before the newest one, if the curve has one.
std::optional<int64_t> PreviousStep(const Observation& trial) {
  const size_t n = trial.curve.size();
  if (n < 2) return std::nullopt;
  return trial.curve[n - 2].first;
}

Status Invalid(const std::string& field, const std::string& why) {
  return Status::InvalidArgument(field + ": " + why);
}

// --- Median ----------------------------------------------------------------

class MedianPruner : public Pruner {
 public:
  explicit MedianPruner(const MedianOptions& options) : options_(options) {}

  std::string_view name() const override { return "median"; }

  bool ShouldPrune(const History& history, const Observation& trial) const override {
    if (trial.curve.empty()) return false;
    if (history.CountCompleted() < options_.startup_trials) return false;
    const int64_t step = trial.curve.back().first;
    if (step < options_.warmup_steps) return false;

    // Judge once per interval window even when reports skip steps: the
    // newest point is judged only if it is the first one in its window.
    const int64_t window_start = options_.warmup_steps + (step - options_.warmup_steps) /
                                                             options_.interval_steps *
                                                             options_.interval_steps;
    const std::optional<int64_t> prev = PreviousStep(trial);
    if (prev && *prev >= window_start) return false;

    double best = std::numeric_limits<double>::quiet_NaN();
    for (const auto& [s, v] : trial.curve) {
      if (!std::isnan(v) && (std::isnan(best) || v < best)) best = v;
    }
    // A curve of nothing but NaN has diverged; no median can save it.
    if (std::isnan(best)) return true;

    std::vector<double> values;
    for (const Observation& o : history.trials) {
      if (!IsPeer(o, trial)) continue;
      const std::optional<int64_t> last = o.LastStep();
      if (!last || *last < step) continue;
      const std::optional<double> v = o.ValueAt(step);
      if (!v || std::isnan(*v)) continue;
      values.push_back(*v);
    }
    if (static_cast<int64_t>(values.size()) < options_.min_trials_at_step) return false;
    return best > Median(std::move(values));
  }

 private:
  // REQUIRES: !values.empty(). An even count takes the mean of the two
  // middle values, as numpy's percentile(50) does.
  static double Median(std::vector<double> values) {
    const size_t n = values.size();
    const auto mid = values.begin() + static_cast<std::ptrdiff_t>(n / 2);
    std::nth_element(values.begin(), mid, values.end());
    const double upper = *mid;
    if (n % 2 == 1) return upper;
    const double lower = *std::max_element(values.begin(), mid);
    return lower + (upper - lower) / 2;
  }

  MedianOptions options_;
};

// --- ASHA core ---------------------------------------------------------------

// One ASHA rule: what AshaOptions says, shared with each Hyperband bracket.
struct Rungs {
  int64_t min_resource;
  double eta;
  int64_t max_resource;  // 0 = unbounded
  int early_stopping_rate;
  int bootstrap_count;

  // The step of rung k, or nullopt when that is beyond every int64 step (no
  // trial reaches it). Computed as a double, which saturates to infinity
  // rather than overflowing, and converted only when it is in range.
  std::optional<int64_t> Step(int64_t k) const {
    return RungStep(min_resource, eta, early_stopping_rate + k);
  }

  // The lowest rung whose step is beyond `step`, in closed form: k is about
  // log_eta(step / r_0); the logarithm lands within a rung or two of the
  // answer, which Step() then settles exactly. kMaxRungs bounds the result
  // (eta >= kMinReductionFactor keeps every rung below 2^63 well within it).
  int64_t FirstRungAfter(int64_t step) const {
    const std::optional<int64_t> first = Step(0);
    if (!first || step < *first) return 0;
    const double estimate =
        std::floor(std::log(static_cast<double>(step) / static_cast<double>(*first)) /
                   std::log(eta)) -
        1;
    int64_t k = estimate > 0 ? static_cast<int64_t>(std::min(estimate, double{kMaxRungs})) : 0;
    for (std::optional<int64_t> r = Step(k); k < kMaxRungs && r && *r <= step; r = Step(k)) ++k;
    return k;
  }
};

// The value `o` had at rung step `rung`: its last one at or before the rung,
// or its first one when it first reported beyond the rung.
// REQUIRES: !o.curve.empty().
double RungValue(const Observation& o, int64_t rung) {
  const std::optional<double> v = o.ValueAt(rung);
  return v ? *v : o.curve.front().second;
}

// A trial that must end infeasible (Observation::MustEndInfeasible) stops
// at its next rung, and ranks behind every peer that may still end feasible
// at the rungs it reached, as constrained domination (Deb's) ranks an
// infeasible point behind every feasible one.

// With several objectives: the point `o` had at rung step `rung`, chosen as
// RungValue chooses; empty when `o` has no multi-objective curve.
ObjectivePoint RungPoint(const Observation& o, int64_t rung) {
  if (o.curve_values.empty()) return {};
  const std::vector<double>* at = o.ValuesAt(rung);
  return at ? *at : o.curve_values.front().second;
}

// Whether `trial` goes on at a rung of several objectives, `points[0]` being
// its own: when no other point there dominates it, or when it is among the
// top m by Pareto order (non-domination rank, then the lonelier by crowding
// distance first; ties to the trial), so that what goes on keeps the front
// and its spread (MO-ASHA's rule, Schmucker et al. 2021, with NSGA-II's
// order; pruner.h says why the front always goes on).
bool AmongParetoTop(const std::vector<ObjectivePoint>& points, int64_t m) {
  if (std::none_of(points.begin() + 1, points.end(),
                   [&](const ObjectivePoint& p) { return Dominates(p, points[0]); })) {
    return true;
  }
  const std::vector<size_t> order = ParetoOrder(points);
  for (int64_t k = 0; k < m && k < static_cast<int64_t>(order.size()); ++k) {
    if (order[static_cast<size_t>(k)] == 0) return true;
  }
  return false;
}

// Whether `trial` is among the top 1/eta at `rung` of the trials that reached
// it and for which `in_group` holds.
template <typename InGroup>
bool ContinuesAtRung(const Rungs& rungs, const History& history, const Observation& trial,
                     int64_t rung, const InGroup& in_group) {
  if (!trial.curve_values.empty()) {
    const auto finite = [](const ObjectivePoint& p) {
      return std::all_of(p.begin(), p.end(), [](double v) { return std::isfinite(v); });
    };
    std::vector<ObjectivePoint> points{RungPoint(trial, rung)};
    if (!finite(points[0])) return false;  // as a NaN value stops it with one objective
    int64_t behind = 0;                    // peers that must end infeasible: counted, ranked last
    for (const Observation& o : history.trials) {
      if (!IsPeer(o, trial) || !in_group(o)) continue;
      const std::optional<int64_t> last = o.LastStep();
      if (!last || *last < rung) continue;
      ObjectivePoint p = RungPoint(o, rung);
      if (p.size() != points[0].size() || !finite(p)) continue;
      if (o.MustEndInfeasible()) {
        ++behind;
      } else {
        points.push_back(std::move(p));
      }
    }
    const int64_t n = static_cast<int64_t>(points.size()) + behind;
    if (n < rungs.bootstrap_count) return true;
    const int64_t keep = std::max<int64_t>(
        1, static_cast<int64_t>(std::floor(static_cast<double>(n) / rungs.eta + kRelTolerance)));
    return AmongParetoTop(points, keep);
  }
  const double mine = RungValue(trial, rung);
  if (std::isnan(mine)) return false;
  std::vector<double> values{mine};
  for (const Observation& o : history.trials) {
    if (!IsPeer(o, trial) || !in_group(o)) continue;
    const std::optional<int64_t> last = o.LastStep();
    if (!last || *last < rung) continue;
    const double v = RungValue(o, rung);
    if (std::isnan(v)) continue;
    values.push_back(o.MustEndInfeasible() ? std::numeric_limits<double>::infinity() : v);
  }
  const int64_t n = static_cast<int64_t>(values.size());
  if (n < rungs.bootstrap_count) return true;
  // The first trials at a rung cannot wait for it to fill (trials are never
  // paused), so at least one always goes on, as in Optuna.
  const int64_t keep = std::max<int64_t>(
      1, static_cast<int64_t>(std::floor(static_cast<double>(n) / rungs.eta + kRelTolerance)));
  const auto kth = values.begin() + static_cast<std::ptrdiff_t>(keep - 1);
  std::nth_element(values.begin(), kth, values.end());
  return mine <= *kth;
}

template <typename InGroup>
bool AshaShouldPrune(const Rungs& rungs, const History& history, const Observation& trial,
                     const InGroup& in_group) {
  if (trial.curve.empty()) return false;
  const int64_t step = trial.curve.back().first;
  const std::optional<int64_t> prev = PreviousStep(trial);
  // Each rung is judged on the one report that first reaches it: the rungs in
  // (previous step, newest step]. Statelessness needs nothing more. Both ends
  // come in closed form, so a report far beyond the last one costs one
  // judgment per rung crossed (at most kMaxRungs), never a walk over steps.
  const int64_t first = prev ? rungs.FirstRungAfter(*prev) : 0;
  const int64_t end = rungs.FirstRungAfter(step);
  int64_t judged = 0;  // rung steps are >= 1
  for (int64_t k = first; k < end; ++k) {
    const std::optional<int64_t> rung = rungs.Step(k);
    if (!rung) break;  // (not reached: every rung below `end` is <= step)
    if (rungs.max_resource > 0 && *rung >= rungs.max_resource) break;
    // Rounding up can land two rungs on one step; they are one rung.
    if (*rung == judged) continue;
    judged = *rung;
    // Already outside a constraint that only gets worse: it cannot end
    // feasible, whatever its objective.
    if (trial.MustEndInfeasible()) return true;
    if (!ContinuesAtRung(rungs, history, trial, *rung, in_group)) return true;
  }
  return false;
}

class AshaPruner : public Pruner {
 public:
  explicit AshaPruner(const Rungs& rungs) : rungs_(rungs) {}

  std::string_view name() const override { return "asha"; }

  bool ShouldPrune(const History& history, const Observation& trial) const override {
    return AshaShouldPrune(rungs_, history, trial, [](const Observation&) { return true; });
  }

 private:
  Rungs rungs_;
};

// --- Hyperband ---------------------------------------------------------------

// s_max = floor(log_eta(max / min)), settled exactly against pow() after a
// logarithm estimate. REQUIRES: valid options.
int HyperbandMaxRate(const HyperbandOptions& o) {
  const double ratio = static_cast<double>(o.max_resource) / static_cast<double>(o.min_resource);
  const double limit = ratio * (1 + kRelTolerance);
  const double estimate = std::floor(std::log(ratio) / std::log(o.reduction_factor));
  // Clamped so a reduction factor next to 1 cannot overflow the int.
  int s = static_cast<int>(std::clamp(estimate, 0.0, double{kMaxHyperbandBrackets}));
  while (s > 0 && std::pow(o.reduction_factor, s) > limit) --s;
  while (s <= kMaxHyperbandBrackets && std::pow(o.reduction_factor, s + 1) <= limit) ++s;
  return s;
}

// Cumulative bracket sizes w_0, w_0 + w_1, ... (see pruner.h).
// REQUIRES: valid options.
std::vector<double> HyperbandCumulativeSizes(const HyperbandOptions& o) {
  const int s_max = HyperbandMaxRate(o);
  std::vector<double> cumulative;
  cumulative.reserve(static_cast<size_t>(s_max) + 1);
  double total = 0;
  for (int s = 0; s <= s_max; ++s) {
    const int hb_s = s_max - s;  // Hyperband's own bracket index
    const double n =
        (s_max + 1) * std::pow(o.reduction_factor, hb_s) / static_cast<double>(hb_s + 1);
    total += std::ceil(n * (1 - kRelTolerance));
    cumulative.push_back(total);
  }
  return cumulative;
}

int BracketFromSizes(const std::vector<double>& cumulative, int64_t trial_number) {
  // Golden-ratio (Weyl) sequence in 64-bit fixed point: exact for every
  // number, and evenly spread over any run of consecutive numbers.
  const uint64_t x = static_cast<uint64_t>(trial_number) * 0x9E3779B97F4A7C15ull;
  const double u = static_cast<double>(x >> 11) * 0x1.0p-53;
  const double target = u * cumulative.back();
  const auto it = std::upper_bound(cumulative.begin(), cumulative.end(), target);
  // Rounding can put target on the total itself; that belongs to the last.
  if (it == cumulative.end()) return static_cast<int>(cumulative.size()) - 1;
  return static_cast<int>(it - cumulative.begin());
}

class HyperbandPruner : public Pruner {
 public:
  explicit HyperbandPruner(const HyperbandOptions& options)
      : options_(options), cumulative_(HyperbandCumulativeSizes(options)) {}

  std::string_view name() const override { return "hyperband"; }

  bool ShouldPrune(const History& history, const Observation& trial) const override {
    const int bracket = BracketFromSizes(cumulative_, trial.number);
    const Rungs rungs{options_.min_resource, options_.reduction_factor, options_.max_resource,
                      bracket, /*bootstrap_count=*/0};
    return AshaShouldPrune(rungs, history, trial, [&](const Observation& o) {
      return BracketFromSizes(cumulative_, o.number) == bracket;
    });
  }

 private:
  HyperbandOptions options_;
  std::vector<double> cumulative_;
};

}  // namespace

Status CheckReductionFactor(double eta) {
  // `!(eta >= ...)` also catches NaN.
  if (!(eta >= kMinReductionFactor) || !std::isfinite(eta)) {
    std::ostringstream min;
    min << kMinReductionFactor;
    return Invalid("reduction_factor",
                   "must be a finite number >= " + min.str() +
                       " (each rung keeps 1/reduction_factor of the trials; closer to 1 "
                       "prunes almost nothing and judges far more often)");
  }
  return Status::OK();
}

std::unique_ptr<Pruner> MakeNopPruner() { return std::make_unique<NopPruner>(); }

Result<std::unique_ptr<Pruner>> MakeMedianPruner(const MedianOptions& options) {
  if (options.startup_trials < 0) return Invalid("startup_trials", "must be >= 0");
  if (options.warmup_steps < 0) return Invalid("warmup_steps", "must be >= 0");
  if (options.interval_steps < 1) return Invalid("interval_steps", "must be >= 1");
  if (options.min_trials_at_step < 1) return Invalid("min_trials_at_step", "must be >= 1");
  return std::unique_ptr<Pruner>(std::make_unique<MedianPruner>(options));
}

Result<std::unique_ptr<Pruner>> MakeAshaPruner(const AshaOptions& options) {
  if (options.min_resource < 1) return Invalid("min_resource", "must be >= 1");
  HPO_RETURN_IF_ERROR(CheckReductionFactor(options.reduction_factor));
  if (options.max_resource < 0) {
    return Invalid("max_resource", "must be >= 0 (0 = unbounded)");
  }
  if (options.max_resource > 0 && options.max_resource < options.min_resource) {
    return Invalid("max_resource", "must be 0 (unbounded) or >= min_resource (" +
                                       std::to_string(options.min_resource) + ")");
  }
  if (options.min_early_stopping_rate < 0) {
    return Invalid("min_early_stopping_rate", "must be >= 0");
  }
  if (options.bootstrap_count < 0) return Invalid("bootstrap_count", "must be >= 0");
  const Rungs rungs{options.min_resource, options.reduction_factor, options.max_resource,
                    options.min_early_stopping_rate, options.bootstrap_count};
  return std::unique_ptr<Pruner>(std::make_unique<AshaPruner>(rungs));
}

Result<std::unique_ptr<Pruner>> MakeHyperbandPruner(const HyperbandOptions& options) {
  if (options.min_resource < 1) return Invalid("min_resource", "must be >= 1");
  if (options.max_resource < options.min_resource) {
    return Invalid("max_resource",
                   "must be >= min_resource (" + std::to_string(options.min_resource) + ")");
  }
  HPO_RETURN_IF_ERROR(CheckReductionFactor(options.reduction_factor));
  if (HyperbandMaxRate(options) + 1 > kMaxHyperbandBrackets) {
    return Invalid("reduction_factor",
                   "too close to 1 for max_resource / min_resource: more than " +
                       std::to_string(kMaxHyperbandBrackets) + " brackets");
  }
  return std::unique_ptr<Pruner>(std::make_unique<HyperbandPruner>(options));
}

int HyperbandBracket(const HyperbandOptions& options, int64_t trial_number) {
  return BracketFromSizes(HyperbandCumulativeSizes(options), trial_number);
}

int HyperbandBracketCount(const HyperbandOptions& options) { return HyperbandMaxRate(options) + 1; }

}  // namespace hpo::search
