// Several objectives and constraints in the samplers and early stopping:
// TPE's Pareto good set (MOTPE), the GP through ParEGO's scalarization,
// constraints with one objective, and ASHA's rung rule by Pareto order.
// Behaviour over seeded runs against random search, the rung decisions, and
// the scalarization's values themselves.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "search/gp_sampler.h"
#include "search/parego.h"
#include "search/pareto.h"
#include "search/pruner.h"
#include "search/sampler.h"
#include "search/tpe.h"
#include "testing/objectives.h"

namespace hpo::search {
namespace {

// ZDT1 on 4 variables: f1 = x0, f2 = g (1 - sqrt(x0 / g)), g = 1 + 3 mean(x1..x3).
std::vector<double> Zdt1(const Assignment& x) {
  double rest = 0;
  for (size_t i = 1; i < x.size(); ++i) rest += x[i];
  const double g = 1 + 9 * rest / static_cast<double>(x.size() - 1);
  return {x[0], g * (1 - std::sqrt(x[0] / g))};
}

struct Evaluated {
  std::vector<double> values;
  double violation;
};

// Sequential suggestions, each completed with every objective (and its
// violation when `constraint` is given); returns the evaluations in order.
std::vector<Evaluated> RunTrials(
    Sampler& sampler, const SearchSpace& space, int trials, uint64_t seed,
    const std::function<std::vector<double>(const Assignment&)>& f,
    const std::function<double(const Assignment&)>& constraint = nullptr) {
  Rng rng(seed);
  History h;
  std::vector<Evaluated> out;
  for (int t = 0; t < trials; ++t) {
    Assignment a = sampler.Suggest(space, h, 1, rng).at(0);
    EXPECT_TRUE(space.Validate(a).ok());
    Observation o;
    o.number = t;
    o.status = TrialStatus::kCompleted;
    o.values = f(a);
    o.value = o.values[0];
    if (o.values.size() == 1) o.values.clear();
    double violation = 0;
    if (constraint) {
      violation = std::max(0.0, constraint(a));
      o.violation = violation;
    }
    o.params = std::move(a);
    out.push_back({f(o.params), violation});
    h.trials.push_back(std::move(o));
  }
  return out;
}

double FeasibleHypervolume(const std::vector<Evaluated>& evals, const ObjectivePoint& reference) {
  std::vector<ObjectivePoint> points;
  for (const auto& e : evals) {
    if (e.violation <= 0) points.push_back(e.values);
  }
  return Hypervolume(points, reference);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median hypervolume over seeds 1..seeds of `trials` trials on ZDT1.
double MedianZdt1Hypervolume(const std::function<std::unique_ptr<Sampler>()>& make, int seeds,
                             int trials) {
  const SearchSpace space = testing::Box("zdt1", 4, 0, 1);
  std::vector<double> hv;
  for (int seed = 1; seed <= seeds; ++seed) {
    auto sampler = make();
    hv.push_back(FeasibleHypervolume(RunTrials(*sampler, space, trials, seed, Zdt1), {1.1, 11}));
  }
  return Median(hv);
}

TEST(MultiObjective, TpeFindsABetterFrontThanRandomSearch) {
  const double tpe = MedianZdt1Hypervolume([] { return MakeTpeSampler(); }, 9, 60);
  const double random = MedianZdt1Hypervolume([] { return MakeRandomSampler(); }, 9, 60);
  // The best possible is about 11.1 - 0.33 (the front's area above it);
  // random search's points mostly lie far from the front.
  EXPECT_GT(tpe, random + 0.3) << "tpe " << tpe << ", random " << random;
}

TEST(MultiObjective, GpThroughParEgoFindsABetterFrontThanRandomSearch) {
  const double gp = MedianZdt1Hypervolume([] { return MakeGpSampler(); }, 5, 40);
  const double random = MedianZdt1Hypervolume([] { return MakeRandomSampler(); }, 5, 40);
  EXPECT_GT(gp, random + 0.3) << "gp " << gp << ", random " << random;
}

// The best feasible value of a one-objective run.
double BestFeasible(const std::vector<Evaluated>& evals) {
  double best = INFINITY;
  for (const auto& e : evals) {
    if (e.violation <= 0) best = std::min(best, e.values[0]);
  }
  return best;
}

// One objective, (x0 - 0.9)^2 + (x1 - 0.5)^2, and the constraint x0 <= 0.5:
// the best feasible point is (0.5, 0.5), value 0.16.
TEST(MultiObjective, ConstraintsKeepOneObjectiveSamplersInsideTheFeasibleRegion) {
  const SearchSpace space = testing::Box("constrained", 2, 0, 1);
  auto f = [](const Assignment& x) {
    return std::vector<double>{(x[0] - 0.9) * (x[0] - 0.9) + (x[1] - 0.5) * (x[1] - 0.5)};
  };
  auto constraint = [](const Assignment& x) { return x[0] - 0.5; };
  for (const char* name : {"tpe", "gp"}) {
    int feasible_late = 0, late = 0;
    std::vector<double> best;
    for (int seed = 1; seed <= 5; ++seed) {
      auto sampler = std::string(name) == "tpe" ? MakeTpeSampler() : MakeGpSampler();
      const auto evals = RunTrials(*sampler, space, 40, seed, f, constraint);
      for (size_t t = 20; t < evals.size(); ++t) {
        feasible_late += evals[t].violation <= 0;
        ++late;
      }
      best.push_back(BestFeasible(evals));
    }
    // The unconstrained optimum (0.9, 0.5) is infeasible: a sampler that
    // ignored the constraint would spend its late trials around it.
    EXPECT_GT(feasible_late, late * 6 / 10) << name;
    EXPECT_LT(Median(best), 0.16 + 0.02) << name;
  }
}

// A history of trials that reported one step with the given points (two
// objectives); the last is the one judged.
History AtFirstRung(const std::vector<std::vector<double>>& points) {
  History h;
  for (size_t i = 0; i < points.size(); ++i) {
    Observation o(static_cast<int64_t>(i), TrialStatus::kRunning, {0.5}, std::nullopt,
                  {{1, points[i][0]}});
    o.curve_values = {{1, points[i]}};
    h.trials.push_back(std::move(o));
  }
  return h;
}

bool Prunes(const std::vector<std::vector<double>>& points) {
  auto pruner = MakeAshaPruner({});  // rungs at steps 1, 3, 9, ...; each keeps 1/3
  EXPECT_TRUE(pruner.ok());
  const History h = AtFirstRung(points);
  return (*pruner)->ShouldPrune(h, h.trials.back());
}

TEST(MultiObjectiveAsha, ADominatedTrialStopsAndOneOnTheFrontGoesOn) {
  // Three at the rung keep one. (2,2) is dominated by (1,1): it stops.
  EXPECT_TRUE(Prunes({{1, 1}, {0.5, 3}, {2, 2}}));
  // (3, 0.5) is the worst in the first objective, which alone would stop
  // it, but no one dominates it: on the front, and one of its extremes.
  EXPECT_FALSE(Prunes({{1, 1}, {2, 2}, {3, 0.5}}));
}

TEST(MultiObjectiveAsha, ANonFiniteObjectiveStopsTheTrialAndIsNoPeer) {
  EXPECT_TRUE(Prunes({{1, 1}, {2, 2}, {0.5, NAN}}));
  // A peer's NaN takes no place among the three: (2,2) is alone beside (1,1)
  // and, with two points, still the one kept is (1,1).
  EXPECT_TRUE(Prunes({{NAN, 0}, {1, 1}, {2, 2}}));
  EXPECT_FALSE(Prunes({{NAN, 0}, {2, 2}, {1, 1}}));
}

TEST(MultiObjectiveAsha, ATrialAlreadyOutsideAConstraintThatOnlyGetsWorseStopsAtItsRung) {
  auto pruner = MakeAshaPruner({});
  ASSERT_TRUE(pruner.ok());
  History h = AtFirstRung({{2, 2}, {1, 1}});  // (1,1) would go on: it dominates
  h.trials.back().known_violation = 0.5;
  EXPECT_TRUE((*pruner)->ShouldPrune(h, h.trials.back()));
  h.trials.back().known_violation = 0.0;  // inside every bound: judged by its point
  EXPECT_FALSE((*pruner)->ShouldPrune(h, h.trials.back()));
  // Between rungs nothing is judged, a violation included.
  h.trials.back().curve.emplace_back(2, 1.0);
  h.trials.back().curve_values.push_back({2, {1, 1}});
  h.trials.back().known_violation = 0.5;
  EXPECT_FALSE((*pruner)->ShouldPrune(h, h.trials.back()));
}

TEST(MultiObjectiveAsha, APeerThatMustEndInfeasibleRanksBehindTheOthers) {
  auto pruner = MakeAshaPruner({});
  ASSERT_TRUE(pruner.ok());
  // (1,1) dominates (2,2), and two at the rung keep one: (2,2) would stop.
  History h = AtFirstRung({{1, 1}, {2, 2}});
  EXPECT_TRUE((*pruner)->ShouldPrune(h, h.trials.back()));
  // Outside a constraint that only gets worse, (1,1) cannot end feasible:
  // it still counts at the rung, behind (2,2), which goes on.
  h.trials.front().known_violation = 0.5;
  EXPECT_FALSE((*pruner)->ShouldPrune(h, h.trials.back()));
  // The same with one objective.
  History one = AtFirstRung({{1, 1}, {2, 2}});
  for (auto& o : one.trials) o.curve_values.clear();
  EXPECT_TRUE((*pruner)->ShouldPrune(one, one.trials.back()));
  one.trials.front().known_violation = 0.5;
  EXPECT_FALSE((*pruner)->ShouldPrune(one, one.trials.back()));
}

TEST(MultiObjectiveAsha, TheFrontGoesOnAndTheLonelierOfTheNextFillTheRest) {
  // Six at the rung keep two, but the front has four: (0,10) and (10,0),
  // and (5,5) and (5.1,4.9) crowded between them. Every one goes on, the
  // crowded middle too (by Pareto order alone it would stop): a front cut
  // to a third by crowding at each rung ends with fewer of its points than
  // random search finds (pruner.h).
  EXPECT_FALSE(Prunes({{0, 10}, {10, 0}, {5, 5}, {8, 8}, {9, 9}, {5.1, 4.9}}));
  EXPECT_TRUE(Prunes({{0, 10}, {10, 0}, {5, 5}, {8, 8}, {9, 9}, {8.5, 8.5}}))
      << "dominated, and not among the first two";
  // Nine keep three: (0,0) alone on the front, then of the next front
  // (1,9), (9,1), (5,5) and (5.1,4.9) the lonelier, its two extremes; the
  // crowded middle stops.
  const std::vector<std::vector<double>> nine = {{0, 0}, {1, 9},   {9, 1},   {5, 5},    {8, 8},
                                                 {9, 9}, {7, 7.5}, {7.5, 7}, {5.1, 4.9}};
  EXPECT_TRUE(Prunes(nine));
  std::vector<std::vector<double>> extreme_last = nine;
  std::swap(extreme_last[1], extreme_last.back());
  EXPECT_FALSE(Prunes(extreme_last)) << "(1,9), an extreme of the second front";
}

TEST(ParEgo, ScalarizesFeasibleTrialsIntoTheUnitRangeAndRanksInfeasibleOnesAfter) {
  History h;
  auto add = [&](int64_t n, TrialStatus status, std::vector<double> values,
                 std::optional<double> v) {
    Observation o;
    o.number = n;
    o.status = status;
    o.params = {0.5};
    if (!values.empty()) o.value = values[0];
    o.values = std::move(values);
    o.violation = v;
    h.trials.push_back(std::move(o));
  };
  add(0, TrialStatus::kCompleted, {0, 10}, 0.0);   // best in the first objective
  add(1, TrialStatus::kCompleted, {4, 0}, 0.0);    // best in the second
  add(2, TrialStatus::kCompleted, {4, 10}, 0.0);   // worst in both: max(w) + 0.05
  add(3, TrialStatus::kCompleted, {0, 0}, 2.0);    // better than all, but infeasible
  add(4, TrialStatus::kCompleted, {0, 0}, 1.0);    // less infeasible
  add(5, TrialStatus::kPruned, {}, std::nullopt);  // a partial curve: not on this scale
  h.trials.back().curve = {{1, 3.0}};
  add(6, TrialStatus::kRunning, {}, std::nullopt);
  ASSERT_TRUE(NeedsScalarizing(h));
  Rng rng(3);
  const History s = ScalarizeParEgo(h, rng);
  EXPECT_FALSE(NeedsScalarizing(s));
  ASSERT_EQ(s.trials.size(), h.trials.size());
  for (int i = 0; i <= 2; ++i) {
    EXPECT_GE(*s.trials[i].value, 0.0);
    EXPECT_LE(*s.trials[i].value, 1.05 + 1e-12);
  }
  EXPECT_GT(*s.trials[2].value, *s.trials[0].value) << "dominated by both";
  EXPECT_GT(*s.trials[2].value, *s.trials[1].value);
  EXPECT_LT(*s.trials[0].value + *s.trials[1].value, 1.05) << "each is best in one objective";
  EXPECT_DOUBLE_EQ(*s.trials[3].value, 1.05 + 1.0);
  EXPECT_DOUBLE_EQ(*s.trials[4].value, 1.05 + 0.5);
  EXPECT_EQ(s.trials[5].status, TrialStatus::kFailed);
  EXPECT_EQ(s.trials[6].status, TrialStatus::kRunning);
  // New weights at every call: the two single-objective champions trade places.
  bool first_wins = false, second_wins = false;
  for (int k = 0; k < 50; ++k) {
    const History t = ScalarizeParEgo(h, rng);
    (*t.trials[0].value < *t.trials[1].value ? first_wins : second_wins) = true;
  }
  EXPECT_TRUE(first_wins && second_wins);
}

TEST(ParEgo, OneObjectiveWithoutConstraintsNeedsNoScalarizing) {
  History h;
  h.trials.push_back({0, TrialStatus::kCompleted, {0.5}, 1.0, {}});
  EXPECT_FALSE(NeedsScalarizing(h));
}

}  // namespace
}  // namespace hpo::search
