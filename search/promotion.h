// Promotion-type successive halving (ASHA's Algorithm 2; Syne Tune's
// "promotion" type): trials run rung by rung and pause at each, with a
// checkpoint; a free device resumes a paused trial that earned it, or starts
// a new one. Unlike the stopping type (pruner.h), nothing runs past a rung
// on speculation, and the work that goes on is chosen when a device is
// free: the decision of *which* paused trial and *which* device is the
// placement policy's (scheduler/policy.h); this file says which trials may
// be promoted at all.
//
// Rungs. For a trial of bracket s (always 0 for ASHA; Hyperband's bracket
// of the trial's number, see HyperbandBracket), with eta the reduction
// factor, r the minimum resource and R the trial's budget in steps:
//   rung steps  R_0 < R_1 < ... < R_L = R, with R_j = ceil(r * eta^(s + j))
//               for every j with that value < R, then R itself.
// Level j of a trial is the segment that ends at R_j: a new trial runs
// level 0 (steps 1..R_0) and pauses after step R_0; promoted from level j it
// resumes at R_j + 1 and runs to R_{j+1}; at level L it completes.
//
// Promotability (asynchronous: judged on what is known now). Among the
// trials of the same bracket that reached R_j (their curve has a point at or
// beyond R_j, or they paused there), n of them with values V, a trial paused
// at level j with value v at R_j may be promoted when, by the criterion:
//   top fraction (ASHA's own rule): v is among the best floor(n / eta) of V
//     (the first eta trials at a rung earn one promotion; ties go to the
//     lower trial number);
//   quantile (Syne Tune's promotion ASHA): n >= 2 and v <= Q_p(V), the
//     p-quantile of V with p = R_j / R_{j+1} (about 1/eta), interpolated
//     linearly between order statistics: with x_0 <= ... <= x_{n-1} sorted
//     and h = (n - 1) p, Q_p = x_floor(h) + (h - floor(h)) (x_floor(h)+1 -
//     x_floor(h)). So the better of the first two results at a rung goes on
//     at once, where the top fraction waits for eta of them; with many
//     results both keep about 1/eta. Ties with Q_p go on.
// Trials promoted from R_j count in n and in V; a failed trial counts
// nowhere.
//
// Several objectives (trials with curve_values): a rung ranks the points
// its trials had at R_j (curve_values' last at or before it) by ParetoOrder
// (pareto.h: non-domination rank, then the lonelier by crowding distance,
// then the lower trial number), so that what goes on keeps the front and
// its spread, as the stopping type's rule does (MO-ASHA). A paused trial may
// be promoted when it is among the best k of the n: k = floor(n / eta) for
// the top fraction; for the quantile, with n >= 2, k = floor((n - 1) p) + 1,
// the order statistics at or below Q_p; and, once k >= 1, when no other
// point at the rung dominates it (the rung's whole front goes on, as with
// the stopping type: pruner.h says why). Promotion::value is then its place
// in that order (0: the best).
//
// Constraints known at a rung (Observation::MustEndInfeasible): such a
// trial is never promoted, and ranks behind every other at the rungs it
// reached (it counts in n), as constrained domination ranks an infeasible
// point behind every feasible one; one objective or several.
//
// Pure and deterministic; values are minimized (history.h).
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "common/status.h"
#include "search/history.h"
#include "search/pareto.h"
#include "search/pruner.h"

namespace hpo::search {

// A trial that paused after the segment of `level`.
struct PausedTrial {
  size_t index = 0;  // in History::trials
  int level = 0;
};

struct Promotion {
  size_t index = 0;       // in History::trials
  int from_level = 0;     // it paused after R_from_level
  int64_t from_step = 0;  // R_from_level: it resumes at from_step + 1
  int64_t to_step = 0;    // R_{from_level + 1}: where the promoted segment ends
  bool to_end = false;    // to_step is the trial's budget: it completes there
  // At from_step (minimized); with several objectives its place at the
  // rung (0: the best). The best first.
  double value = 0;
  // RungResults::Promotable with a limit per rung: on the last one it lists
  // of a rung, how many more of that rung may go on (worse, so later).
  int64_t more = 0;
};

// Which trials paused at a rung may go on (see above).
enum class PromotionCriterion { kTopFraction, kQuantile };
// "top_fraction", "quantile"; nullopt for another name.
std::optional<PromotionCriterion> ParsePromotionCriterion(std::string_view name);
const char* PromotionCriterionName(PromotionCriterion criterion);

class PromotionRule {
 public:
  // Errors as MakeAshaPruner's / MakeHyperbandPruner's, naming the field;
  // max_resource 0 means steps_per_trial. REQUIRES: steps_per_trial >= 1.
  static Result<PromotionRule> Asha(
      const AshaOptions& options, int64_t steps_per_trial,
      PromotionCriterion criterion = PromotionCriterion::kTopFraction);
  static Result<PromotionRule> Hyperband(
      const HyperbandOptions& options, int64_t steps_per_trial,
      PromotionCriterion criterion = PromotionCriterion::kTopFraction);
  PromotionCriterion criterion() const { return criterion_; }

  // R_0 .. R_L of a trial with this number (its bracket's rungs).
  std::vector<int64_t> Rungs(int64_t trial_number) const;
  // Where a new trial's first segment ends, and whether that is its end.
  int64_t FirstStop(int64_t trial_number) const { return Rungs(trial_number).front(); }

  // The paused trials of `paused` that may be promoted now, the highest
  // level first (ASHA promotes from the top rung down), then the best value.
  std::vector<Promotion> Promotable(const History& history,
                                    const std::vector<PausedTrial>& paused) const;

 private:
  friend class RungResults;
  PromotionRule() = default;
  int Bracket(int64_t trial_number) const;
  double eta() const { return eta_; }

  PromotionCriterion criterion_ = PromotionCriterion::kTopFraction;
  double eta_ = 3;
  int64_t min_resource_ = 1;
  int64_t steps_ = 1;
  int min_early_stopping_rate_ = 0;
  bool hyperband_ = false;
  HyperbandOptions hyperband_options_;
};

// A rung's results with several objectives: the point of each trial that
// reached it and may still end feasible, by trial number, and how many more
// reached it that must end infeasible (they rank behind every other).
struct ParetoRungResults {
  std::map<int64_t, ObjectivePoint> points;
  int64_t behind = 0;
  size_t size() const { return points.size() + static_cast<size_t>(behind); }
  // The numbers of the best `count` by ParetoOrder (ties to the lower
  // number), and with count >= 1 every non-dominated one (the first of that
  // order), each with its place in that order.
  std::map<int64_t, size_t> Best(size_t count) const;
};

// PromotionRule::Promotable kept as trials change, for callers that ask it
// on every lease of a large experiment: per space and rung, the results
// that reached the rung, split where the rule's threshold falls (the best
// k of them and the rest, k as the criterion says), and the paused trials
// there by value. Set() costs O(rungs log n) and Promotable() O(p log p)
// for p promotable trials, where the rule's own Promotable walks every
// trial and its curve (at 10,000 simulated workers with 27,000 paused
// trials, 13 ms a lease). Gives what the rule's Promotable gives over the
// same trials (tests/search_promotion_test.cc checks it against it).
class RungResults {
 public:
  explicit RungResults(const PromotionRule& rule);

  // What trial `index` of space `space` gives now: its observation, and the
  // level it paused after if it is paused and may be offered (nullopt:
  // not paused, or not to be offered). Call it whenever either changed.
  void Set(size_t space, size_t index, const Observation& o, std::optional<int> paused_level);
  // rule.Promotable(history, paused) over what was Set for `space`; with
  // `per_rung`, only the best that many of each rung, the last of them
  // saying how many more there are (Promotion::more). With several
  // objectives a rung's ranking is computed here, O(n^2) for its n results,
  // and kept until a Set changes that rung.
  std::vector<Promotion> Promotable(size_t space,
                                    size_t per_rung = std::numeric_limits<size_t>::max());
  void Clear();

 private:
  using Result = std::pair<double, int64_t>;  // (value, trial number)
  struct Rung {
    std::vector<int64_t> steps;  // its bracket's rungs
    int level = 0;
    double p = 0;                                          // the quantile criterion's R_j / R_j+1
    std::set<Result> best, rest;                           // the best k results and the others
    std::set<std::tuple<double, int64_t, size_t>> paused;  // (value, number, index)
    // Several objectives, instead of best and rest (paused then holds 0 as
    // each value); its best, ParetoRungResults::Best, until it changes.
    ParetoRungResults pareto;
    std::optional<std::map<int64_t, size_t>> pareto_best;
  };
  using RungKey = std::pair<int, int>;  // (bracket, level)
  // A trial's point at a rung of several objectives; none when it must end
  // infeasible.
  using PointAt = std::pair<RungKey, std::pair<int64_t, std::optional<ObjectivePoint>>>;
  struct Kept {
    std::vector<std::pair<RungKey, Result>> reached;
    std::vector<PointAt> reached_points;
    std::optional<std::pair<RungKey, std::tuple<double, int64_t, size_t>>> paused;
    bool operator==(const Kept& o) const {
      return reached == o.reached && reached_points == o.reached_points && paused == o.paused;
    }
  };
  struct Space {
    std::map<RungKey, Rung> rungs;
    std::vector<std::optional<Kept>> trials;  // by index
    size_t paused = 0;
  };
  const std::vector<int64_t>& StepsOf(int bracket, int64_t number);
  Rung& RungAt(Space& space, const RungKey& key);
  size_t BestCount(const Rung& rung, size_t n) const;
  void Rebalance(Rung& rung) const;
  void Insert(Rung& rung, const Result& r) const;
  void Erase(Rung& rung, const Result& r) const;
  // How many of a rung of several objectives go on (see above).
  size_t ParetoCount(const Rung& rung) const;
  // The (value, number) a paused trial's must not exceed, if any.
  std::optional<Result> Limit(const Rung& rung) const;

  PromotionRule rule_;
  double eta_ = 3;
  std::map<int, std::vector<int64_t>> steps_of_bracket_;
  std::vector<Space> spaces_;
};

// The fewest trials (numbered 0..n-1, all of one search space) of which at
// least one can be promoted to its budget's end under the top-fraction
// criterion: a rung that n trials reach promotes floor(n / eta) of them, so
// a trial of L + 1 rungs needs m_0 trials at its first rung, with m_L = 1 and
// m_j = ceil(eta * m_{j+1}) (about eta^L). Hyperband's brackets count apart
// (trials of one rung list are taken as one bracket). The quantile criterion
// promotes as results arrive, so no count holds for it: this answers the
// top fraction's. At most `limit`; limit + 1 when even that many fall short.
// REQUIRES: eta is the reduction factor `rule` was made with.
int64_t TrialsToReachLastRung(const PromotionRule& rule, double eta, int64_t limit = 100'000);

}  // namespace hpo::search
