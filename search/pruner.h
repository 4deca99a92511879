// Early stopping: should a running trial stop now?
//
// Call order: each time a trial reports a step, the server builds the
// space's History (the reporting trial included, with its new point at the
// end of its curve) and calls ShouldPrune(history, trial). The answer goes
// back in the report's reply. Pruners keep no state between calls and are
// deterministic; values are minimized (see history.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "search/history.h"

namespace hpo::search {

class Pruner {
 public:
  virtual ~Pruner() = default;
  virtual std::string_view name() const = 0;
  // REQUIRES: trial.curve is not empty; trial is one of history.trials.
  virtual bool ShouldPrune(const History& history, const Observation& trial) const = 0;
};

// Never prunes.
std::unique_ptr<Pruner> MakeNopPruner();

// ---------------------------------------------------------------------------
// Early-stopping rules. Each factory checks its options and names the bad
// field in the error ("reduction_factor: must be >= 1.5 ..."). In every rule `step`
// is the trial's newest step (the last point of its curve), the other trials
// are those of `history` with a different number, and failed trials are
// ignored (they say nothing about the objective). NaN intermediate values of
// other trials are skipped; a trial whose own value under judgment is NaN is
// pruned.

// Median stopping (Optuna's MedianPruner).
struct MedianOptions {
  // Nothing is pruned until this many trials of the space have completed
  // (History::CountCompleted), so the median means something.
  int startup_trials = 5;
  // Nothing is pruned before this step: early curves are noisy.
  int64_t warmup_steps = 0;
  // Judged at most once per window of this many steps after the warm-up.
  int64_t interval_steps = 1;
  // At least this many other trials must have reached `step`.
  int min_trials_at_step = 1;
};

// Prunes when all of these hold:
//   CountCompleted() >= startup_trials, and step >= warmup_steps, and
//   the newest point is the first of its window: with
//     p = warmup_steps + floor((step - warmup_steps) / interval_steps) * interval_steps,
//     the previous point of the curve (if any) is at a step < p, and
//   min(trial's curve values so far) > median{ o.ValueAt(step) : o another
//     running, completed or pruned trial with o.LastStep() >= step },
//     where that set has >= min_trials_at_step values (median of an even
//     count = mean of the two middle values).
// Unlike Optuna, running and pruned trials count in the median (by their
// last value at or before `step`), so a space whose trials are mostly still
// running is not judged against a handful of finished ones only.
// Errors: startup_trials < 0, warmup_steps < 0, interval_steps < 1,
// min_trials_at_step < 1.
Result<std::unique_ptr<Pruner>> MakeMedianPruner(const MedianOptions& options = {});

// The smallest reduction factor (eta) ASHA and Hyperband take. Why 1.5:
// - Work. A report is judged at every rung it crosses, and a rung is one
//   ranking of all the space's trials, done under the experiment's history
//   lock. There are about log_eta(steps) rungs, which grows like 1/(eta - 1)
//   as eta nears 1: with eta = 1.000001 a report that jumped from step 1 to
//   step 2^62 crossed some 43 million rungs (2 s, every other report of the
//   experiment waiting). At 1.5 every int64 step lies below rung 108
//   (log_1.5(2^63) = 107.7), so a report costs at most that many rankings.
// - Use. A rung keeps 1/eta of its trials: at 1.5 two thirds go on, and
//   below it early stopping saves little while judging ever more often.
//   The papers and tools use 2 to 4 (ASHA and Optuna 4, Hyperband 3).
inline constexpr double kMinReductionFactor = 1.5;
// No rule looks at rungs beyond this many: more than the 108 that eta >=
// kMinReductionFactor and int64 steps allow, so it never changes a decision;
// it bounds the loops all the same.
inline constexpr int64_t kMaxRungs = 128;

// OK for a finite eta >= kMinReductionFactor, else InvalidArgument
// "reduction_factor: must be ..." (the check of both factories below).
Status CheckReductionFactor(double eta);

// Asynchronous successive halving (ASHA; Optuna's SuccessiveHalvingPruner).
struct AshaOptions {
  // The step of the lowest rung (before min_early_stopping_rate applies).
  int64_t min_resource = 1;
  // eta: each rung is eta times further than the previous and keeps 1/eta.
  // At least kMinReductionFactor (see there for why).
  double reduction_factor = 3;
  // The step at which a trial has had its full budget; rungs at or beyond it
  // are not judged (stopping a finished trial saves nothing). 0 = unbounded.
  int64_t max_resource = 0;
  // s: skips the first s rungs (the Hyperband bracket index).
  int min_early_stopping_rate = 0;
  // A rung prunes nothing until at least this many trials (the judged one
  // included) have reached it. 0 and 1 mean no bootstrap.
  int bootstrap_count = 0;
};

// ceil(min_resource * eta^exponent), the step of a rung: the one formula
// the stopping rules here and the promotion rule (promotion.h) share;
// nullopt when it is beyond every int64 step. A rounding error of pow() a
// hair above an integer does not push it a step up.
std::optional<int64_t> RungStep(int64_t min_resource, double eta, int64_t exponent);
// RungStep(min_resource, eta, first_exponent + k) for k = 0, 1, ... while it
// is below `end` (and k < kMaxRungs): the rungs of one ASHA bracket that
// still judge something, ascending. REQUIRES: min_resource >= 1 and eta >=
// kMinReductionFactor.
std::vector<int64_t> RungStepsBelow(int64_t min_resource, double eta, int64_t first_exponent,
                                    int64_t end);
// How many of `rung_steps` (ascending) lie at or before `step`: the rungs a
// trial whose curve reached `step` has passed.
int RungsPassed(const std::vector<int64_t>& rung_steps, int64_t step);

// Rung k (k = 0, 1, ...) is at step r_k = ceil(min_resource * eta^(s + k)),
// judged only if max_resource == 0 or r_k < max_resource, and only while
// r_k < 2^63 and k < kMaxRungs. The rungs a report crosses are found in
// closed form (k from log_eta(step / r_0)), not by walking the steps. A trial is judged
// at rung k on the report whose point is its first at or beyond r_k, that is
// when prev < r_k <= step with prev the step of the previous point (none on
// the first report); a report that crosses several rungs is judged at each,
// lowest first. Between rungs nothing is judged.
// At a rung, v(o) = o.ValueAt(r_k), or o's first value when its curve starts
// beyond r_k, for the trial and for every other trial with
// o.LastStep() >= r_k. With n such values (the trial's included), the trial
// continues iff n < bootstrap_count or
//   v(trial) <= the m-th smallest value, m = max(1, floor(n / eta)),
// so the first trial at a rung always continues and ties continue.
// Several objectives (the trial's Observation::curve_values): the points at
// the rung, chosen the same way, are put in Pareto order (pareto.h:
// non-domination rank, then the lonelier by crowding distance), and the
// trial continues iff it is among the first m, ties to the trial (MO-ASHA,
// Schmucker et al. 2021), or no other point there dominates it: what the
// one-objective rule's "the best so far always continues" (m >= 1) means
// for a front. Without it a rung cut its own front to a third by crowding
// once the trials that reached it were mostly non-dominated (as at the
// upper rungs), so fewer front points ended than random search finds: on
// bench/mo_compare's BNH even exact early values did worse than stopping
// nothing. Hyperband's brackets judge the same way. A trial
// whose Observation::known_violation is above 0 (outside a constraint that
// only gets worse) stops at any rung it reaches, whatever its value.
// Errors: min_resource < 1, reduction_factor < kMinReductionFactor (or not
// finite), max_resource < 0 or 0 < max_resource < min_resource,
// min_early_stopping_rate < 0, bootstrap_count < 0.
Result<std::unique_ptr<Pruner>> MakeAshaPruner(const AshaOptions& options = {});

// Hyperband as brackets of ASHA (Optuna's HyperbandPruner).
struct HyperbandOptions {
  int64_t min_resource = 1;
  // The full budget of a trial, in steps; sets how many brackets there are.
  int64_t max_resource = 81;
  double reduction_factor = 3;  // at least kMinReductionFactor
};

// Brackets s = 0..s_max, s_max = floor(log_eta(max_resource / min_resource)).
// Bracket s is the ASHA rule above with min_early_stopping_rate = s, the same
// min_resource, eta and max_resource, no bootstrap, and only the trials of
// bracket s as competitors (so bracket 0 stops hardest and bracket s_max,
// when eta^s_max * min_resource == max_resource, never stops anything).
// Bracket sizes follow Hyperband's n = ceil(B/R * eta^s' / (s' + 1)), s' = s_max - s:
//   w_s = ceil((s_max + 1) * eta^(s_max - s) / (s_max - s + 1)).
// A trial's bracket depends on its number t only: u = frac(t * (sqrt(5) - 1) / 2),
// computed as (t * 0x9E3779B97F4A7C15 mod 2^64) / 2^64 (top 53 bits), and the
// bracket is the first s with u * sum(w) < w_0 + ... + w_s. This golden-ratio
// sequence fills the brackets in proportion to w over any run of consecutive
// numbers, so even the first handful of trials reach several brackets.
// Errors: min_resource < 1, max_resource < min_resource, reduction_factor <
// kMinReductionFactor (or not finite). (That bound leaves at most 108
// brackets; the rule also refuses more than 1000 outright.)
Result<std::unique_ptr<Pruner>> MakeHyperbandPruner(const HyperbandOptions& options = {});

// The bracket (0..s_max) of trial `trial_number`, for display and tests.
// REQUIRES: MakeHyperbandPruner(options) succeeds.
int HyperbandBracket(const HyperbandOptions& options, int64_t trial_number);
// The number of brackets, s_max + 1. REQUIRES: as above.
int HyperbandBracketCount(const HyperbandOptions& options);

}  // namespace hpo::search
