// Early-stopping rules on hand-made curves: every expectation below can be
// checked with pencil and paper against the formulas in search/pruner.h.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "search/pruner.h"

namespace hpo::search {
namespace {

using Curve = std::vector<std::pair<int64_t, double>>;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

Observation Trial(int64_t number, TrialStatus status, Curve curve) {
  Observation o;
  o.number = number;
  o.status = status;
  o.curve = std::move(curve);
  if (status == TrialStatus::kCompleted && !o.curve.empty()) o.value = o.curve.back().second;
  return o;
}

// A curve that reports `value` at every step in [first, last].
Curve Flat(double value, int64_t first, int64_t last) {
  Curve c;
  for (int64_t s = first; s <= last; ++s) c.emplace_back(s, value);
  return c;
}

// Default options with one field changed (C++17 has no designated initializers).
template <typename Options, typename Field, typename Value>
Options Set(Field Options::*field, Value value) {
  Options o;
  o.*field = static_cast<Field>(value);
  return o;
}

// Appends `trial` to `history` (the server's snapshot always holds the
// reporting trial) and asks the pruner.
bool Judge(const Pruner& pruner, History history, const Observation& trial) {
  history.trials.push_back(trial);
  return pruner.ShouldPrune(history, trial);
}

std::unique_ptr<Pruner> Median(const std::function<void(MedianOptions&)>& edit = nullptr) {
  MedianOptions o;
  if (edit) edit(o);
  auto p = MakeMedianPruner(o);
  EXPECT_TRUE(p.ok()) << p.status();
  return std::move(p).value();
}

std::unique_ptr<Pruner> Asha(const std::function<void(AshaOptions&)>& edit = nullptr) {
  AshaOptions o;
  if (edit) edit(o);
  auto p = MakeAshaPruner(o);
  EXPECT_TRUE(p.ok()) << p.status();
  return std::move(p).value();
}

std::unique_ptr<Pruner> Hyperband(const std::function<void(HyperbandOptions&)>& edit = nullptr) {
  HyperbandOptions o;
  if (edit) edit(o);
  auto p = MakeHyperbandPruner(o);
  EXPECT_TRUE(p.ok()) << p.status();
  return std::move(p).value();
}

TEST(NopPrunerTest, NeverPrunes) {
  auto p = MakeNopPruner();
  History h;
  h.trials.push_back(Trial(0, TrialStatus::kCompleted, Flat(0, 0, 9)));
  EXPECT_FALSE(Judge(*p, h, Trial(1, TrialStatus::kRunning, Flat(1e9, 0, 9))));
}

// --- Median ------------------------------------------------------------------

// Five completed trials, values 1.0 .. 1.4 at every step 0..9: the median of
// the others at any step is 1.2.
History FiveCompleted() {
  History h;
  for (int i = 0; i < 5; ++i) {
    h.trials.push_back(Trial(i, TrialStatus::kCompleted, Flat(1.0 + 0.1 * i, 0, 9)));
  }
  return h;
}

TEST(MedianPrunerTest, PrunesClearlyWorseCurveAndKeepsBetterOne) {
  auto p = Median();
  EXPECT_EQ(p->name(), "median");
  EXPECT_TRUE(Judge(*p, FiveCompleted(), Trial(5, TrialStatus::kRunning, Flat(5.0, 0, 3))));
  EXPECT_FALSE(Judge(*p, FiveCompleted(), Trial(5, TrialStatus::kRunning, Flat(0.5, 0, 3))));
  // Equal to the median is not worse than it.
  EXPECT_FALSE(Judge(*p, FiveCompleted(), Trial(5, TrialStatus::kRunning, Flat(1.2, 0, 3))));
  EXPECT_TRUE(Judge(*p, FiveCompleted(), Trial(5, TrialStatus::kRunning, Flat(1.21, 0, 3))));
}

TEST(MedianPrunerTest, ComparesTheBestValueSoFar) {
  auto p = Median();
  // Worse than the median now, but it was better at step 0.
  EXPECT_FALSE(
      Judge(*p, FiveCompleted(), Trial(5, TrialStatus::kRunning, {{0, 0.5}, {1, 3.0}, {2, 3.0}})));
}

TEST(MedianPrunerTest, EvenCountTakesMeanOfMiddleValues) {
  History h;
  h.trials.push_back(Trial(0, TrialStatus::kCompleted, Flat(1.0, 0, 5)));
  h.trials.push_back(Trial(1, TrialStatus::kCompleted, Flat(3.0, 0, 5)));
  auto p = Median([](MedianOptions& o) { o.startup_trials = 2; });
  EXPECT_TRUE(Judge(*p, h, Trial(2, TrialStatus::kRunning, Flat(2.5, 0, 2))));
  EXPECT_FALSE(Judge(*p, h, Trial(2, TrialStatus::kRunning, Flat(1.5, 0, 2))));
}

TEST(MedianPrunerTest, WaitsForStartupTrialsToComplete) {
  History h = FiveCompleted();
  h.trials[4].status = TrialStatus::kRunning;  // four completed, one running
  h.trials[4].value.reset();
  const Observation bad = Trial(5, TrialStatus::kRunning, Flat(5.0, 0, 3));
  EXPECT_FALSE(Judge(*Median([](MedianOptions& o) { o.startup_trials = 5; }), h, bad));
  EXPECT_TRUE(Judge(*Median([](MedianOptions& o) { o.startup_trials = 4; }), h, bad));
  EXPECT_TRUE(Judge(*Median([](MedianOptions& o) { o.startup_trials = 5; }), FiveCompleted(), bad));
}

TEST(MedianPrunerTest, RespectsWarmupSteps) {
  auto p = Median([](MedianOptions& o) { o.warmup_steps = 3; });
  EXPECT_FALSE(Judge(*p, FiveCompleted(), Trial(5, TrialStatus::kRunning, Flat(5.0, 0, 2))));
  EXPECT_TRUE(Judge(*p, FiveCompleted(), Trial(5, TrialStatus::kRunning, Flat(5.0, 0, 3))));
}

TEST(MedianPrunerTest, JudgesOncePerInterval) {
  auto p = Median([](MedianOptions& o) {
    o.warmup_steps = 1;
    o.interval_steps = 3;
  });  // steps 1, 4, 7
  std::vector<bool> pruned_at;
  for (int64_t last = 0; last <= 9; ++last) {
    pruned_at.push_back(
        Judge(*p, FiveCompleted(), Trial(5, TrialStatus::kRunning, Flat(5, 0, last))));
  }
  EXPECT_EQ(pruned_at,
            (std::vector<bool>{false, true, false, false, true, false, false, true, false, false}));
  // A report that skips the window's first step is still judged once: 2 -> 5
  // enters the window [4, 7), then 5 -> 6 stays in it.
  EXPECT_TRUE(Judge(*p, FiveCompleted(), Trial(5, TrialStatus::kRunning, {{2, 5}, {5, 5}})));
  EXPECT_FALSE(
      Judge(*p, FiveCompleted(), Trial(5, TrialStatus::kRunning, {{2, 5}, {5, 5}, {6, 5}})));
}

TEST(MedianPrunerTest, NeedsMinTrialsThatReachedTheStep) {
  History h;
  for (int i = 0; i < 5; ++i) {
    h.trials.push_back(Trial(i, TrialStatus::kCompleted, Flat(1.0, 0, i < 2 ? 9 : 4)));
  }
  const Observation bad = Trial(5, TrialStatus::kRunning, Flat(5.0, 0, 6));
  // Only trials 0 and 1 reached step 6.
  EXPECT_TRUE(Judge(*Median([](MedianOptions& o) { o.min_trials_at_step = 2; }), h, bad));
  EXPECT_FALSE(Judge(*Median([](MedianOptions& o) { o.min_trials_at_step = 3; }), h, bad));
  // Nobody reached step 12.
  EXPECT_FALSE(Judge(*Median(), h, Trial(5, TrialStatus::kRunning, Flat(5.0, 0, 12))));
}

TEST(MedianPrunerTest, CountsRunningAndPrunedTrialsButNotFailedOnes) {
  auto p = Median();
  const Observation trial = Trial(9, TrialStatus::kRunning, Flat(1.15, 0, 3));
  EXPECT_FALSE(Judge(*p, FiveCompleted(), trial));  // 1.15 < median 1.2
  // Two good peers, one running and one pruned, pull the median of the
  // seven to 1.1.
  History with_good = FiveCompleted();
  with_good.trials.push_back(Trial(5, TrialStatus::kRunning, Flat(0.1, 0, 5)));
  with_good.trials.push_back(Trial(6, TrialStatus::kPruned, Flat(0.1, 0, 3)));
  EXPECT_TRUE(Judge(*p, with_good, trial));
  // Failed ones say nothing.
  History with_failed = FiveCompleted();
  with_failed.trials.push_back(Trial(5, TrialStatus::kFailed, Flat(0.1, 0, 5)));
  with_failed.trials.push_back(Trial(6, TrialStatus::kFailed, Flat(0.1, 0, 3)));
  EXPECT_FALSE(Judge(*p, with_failed, trial));
}

TEST(MedianPrunerTest, OtherTrialsCountByTheirLastValueAtOrBeforeTheStep) {
  History h;
  // Reported at steps 0 and 10 only: its value at step 5 is the one of step 0.
  h.trials.push_back(Trial(0, TrialStatus::kCompleted, {{0, 1.0}, {10, 9.0}}));
  auto p = Median([](MedianOptions& o) { o.startup_trials = 1; });
  EXPECT_TRUE(Judge(*p, h, Trial(1, TrialStatus::kRunning, Flat(2.0, 4, 5))));
  EXPECT_FALSE(Judge(*p, h, Trial(1, TrialStatus::kRunning, Flat(0.5, 4, 5))));
}

TEST(MedianPrunerTest, PrunesACurveOfNaN) {
  auto p = Median();
  EXPECT_TRUE(Judge(*p, FiveCompleted(), Trial(5, TrialStatus::kRunning, Flat(kNaN, 0, 2))));
  // NaN points among good ones are skipped.
  EXPECT_FALSE(Judge(*p, FiveCompleted(), Trial(5, TrialStatus::kRunning, {{0, 0.5}, {1, kNaN}})));
}

// --- ASHA --------------------------------------------------------------------

// Trials that reached `step` with the given values, reported at every step.
History Reached(const std::vector<double>& values, int64_t step, int64_t first_number = 100) {
  History h;
  for (size_t i = 0; i < values.size(); ++i) {
    h.trials.push_back(Trial(first_number + static_cast<int64_t>(i), TrialStatus::kRunning,
                             Flat(values[i], 1, step)));
  }
  return h;
}

TEST(AshaPrunerTest, KeepsExactlyTheTopThirdAtEachRung) {
  auto p = Asha();  // rungs at 1, 3, 9, 27, ...
  EXPECT_EQ(p->name(), "asha");
  const std::vector<double> values = {5, 1, 9, 3, 7, 2, 8, 4, 6};
  for (int64_t rung : {1, 3, 9}) {
    History h;
    for (size_t i = 0; i < values.size(); ++i) {
      h.trials.push_back(
          Trial(static_cast<int64_t>(i), TrialStatus::kRunning, Flat(values[i], 1, rung)));
    }
    // Judge each as the one that just reported the rung step, the others
    // having reached it already: 9 at the rung, so the best 3 go on.
    std::set<double> kept;
    for (const Observation& t : h.trials) {
      if (!p->ShouldPrune(h, t)) kept.insert(t.curve.back().second);
    }
    EXPECT_EQ(kept, (std::set<double>{1, 2, 3})) << "rung " << rung;
  }
}

TEST(AshaPrunerTest, KeepsTheTopThirdOfTheTrialsSeenSoFar) {
  auto p = Asha();
  // 1 at the rung: keep 1; 2..5: still keep 1; 6..8: keep 2.
  EXPECT_FALSE(Judge(*p, {}, Trial(0, TrialStatus::kRunning, Flat(100, 1, 1))));
  EXPECT_TRUE(Judge(*p, Reached({1}, 1), Trial(0, TrialStatus::kRunning, Flat(2, 1, 1))));
  EXPECT_FALSE(Judge(*p, Reached({3}, 1), Trial(0, TrialStatus::kRunning, Flat(2, 1, 1))));
  EXPECT_TRUE(Judge(*p, Reached({1, 5, 6, 7}, 1), Trial(0, TrialStatus::kRunning, Flat(2, 1, 1))));
  EXPECT_FALSE(
      Judge(*p, Reached({1, 5, 6, 7, 8}, 1), Trial(0, TrialStatus::kRunning, Flat(2, 1, 1))));
  // Ties go on.
  EXPECT_FALSE(Judge(*p, Reached({2}, 1), Trial(0, TrialStatus::kRunning, Flat(2, 1, 1))));
}

TEST(AshaPrunerTest, FirstTrialAtARungGoesOn) {
  auto p = Asha();
  // Others are at rung 1 only; this one is the first to reach rung 3.
  EXPECT_FALSE(Judge(*p, Reached({1, 1, 1}, 2), Trial(0, TrialStatus::kRunning, Flat(50, 1, 3))));
}

TEST(AshaPrunerTest, DoesNotJudgeBetweenRungs) {
  auto p = Asha();
  const History h = Reached({1, 1, 1, 1, 1, 1}, 30);
  for (int64_t last = 1; last <= 30; ++last) {
    const bool rung = last == 1 || last == 3 || last == 9 || last == 27;
    EXPECT_EQ(Judge(*p, h, Trial(0, TrialStatus::kRunning, Flat(50, 1, last))), rung)
        << "step " << last;
  }
}

TEST(AshaPrunerTest, JudgesARungThatAReportSkippedOver) {
  auto p = Asha();
  const History h = Reached({1, 1, 1, 1, 1, 1}, 30);
  // 2 -> 4 crosses rung 3, judged by the value the trial had at step 3.
  EXPECT_TRUE(Judge(*p, h, Trial(0, TrialStatus::kRunning, {{2, 50}, {4, 0}})));
  EXPECT_FALSE(Judge(*p, h, Trial(0, TrialStatus::kRunning, {{2, 0}, {4, 50}})));
  // 4 -> 8 crosses none.
  EXPECT_FALSE(Judge(*p, h, Trial(0, TrialStatus::kRunning, {{2, 0}, {4, 50}, {8, 50}})));
  // A first report at step 10 crosses 1, 3 and 9; its first value stands
  // for the rungs before it.
  EXPECT_TRUE(Judge(*p, h, Trial(0, TrialStatus::kRunning, {{10, 50}})));
  EXPECT_FALSE(Judge(*p, h, Trial(0, TrialStatus::kRunning, {{10, 0}})));
}

TEST(AshaPrunerTest, OthersCountByTheirValueAtTheRung) {
  auto p = Asha();
  History h;
  // Good at step 3, bad afterwards: at rung 3 it counts as good.
  h.trials.push_back(Trial(1, TrialStatus::kPruned, {{1, 5}, {2, 5}, {3, 0}, {4, 99}}));
  EXPECT_TRUE(Judge(*p, h, Trial(0, TrialStatus::kRunning, Flat(1, 1, 3))));
  // Another that has not reached rung 3 is not counted there.
  History early;
  early.trials.push_back(Trial(1, TrialStatus::kRunning, Flat(0, 1, 2)));
  EXPECT_FALSE(Judge(*p, early, Trial(0, TrialStatus::kRunning, Flat(1, 1, 3))));
}

TEST(AshaPrunerTest, IgnoresFailedTrialsAndPrunesNaN) {
  auto p = Asha();
  History h = Reached({0, 0}, 3);
  for (Observation& o : h.trials) o.status = TrialStatus::kFailed;
  EXPECT_FALSE(Judge(*p, h, Trial(0, TrialStatus::kRunning, Flat(5, 1, 3))));
  EXPECT_TRUE(Judge(*p, {}, Trial(0, TrialStatus::kRunning, Flat(kNaN, 1, 1))));
}

TEST(AshaPrunerTest, MinResourceSetsTheFirstRung) {
  auto p = Asha([](AshaOptions& o) { o.min_resource = 2; });  // rungs 2, 6, 18
  const History h = Reached({1, 1, 1}, 20);
  EXPECT_FALSE(Judge(*p, h, Trial(0, TrialStatus::kRunning, Flat(50, 1, 1))));
  EXPECT_TRUE(Judge(*p, h, Trial(0, TrialStatus::kRunning, Flat(50, 1, 2))));
  EXPECT_FALSE(Judge(*p, h, Trial(0, TrialStatus::kRunning, Flat(50, 1, 3))));
  EXPECT_TRUE(Judge(*p, h, Trial(0, TrialStatus::kRunning, Flat(50, 1, 6))));
}

TEST(AshaPrunerTest, MinEarlyStoppingRateSkipsRungs) {
  auto p = Asha([](AshaOptions& o) { o.min_early_stopping_rate = 1; });  // rungs 3, 9, 27
  const History h = Reached({1, 1, 1}, 30);
  EXPECT_FALSE(Judge(*p, h, Trial(0, TrialStatus::kRunning, Flat(50, 1, 1))));
  EXPECT_TRUE(Judge(*p, h, Trial(0, TrialStatus::kRunning, Flat(50, 1, 3))));
  EXPECT_TRUE(Judge(*p, h, Trial(0, TrialStatus::kRunning, Flat(50, 1, 9))));
}

TEST(AshaPrunerTest, BootstrapCountWaitsForTheRungToFill) {
  auto p = Asha([](AshaOptions& o) { o.bootstrap_count = 4; });
  const Observation bad = Trial(0, TrialStatus::kRunning, Flat(50, 1, 1));
  EXPECT_FALSE(Judge(*p, Reached({1, 1}, 1), bad));    // 3 at the rung
  EXPECT_TRUE(Judge(*p, Reached({1, 1, 1}, 1), bad));  // 4
  // Without bootstrap one better trial is enough.
  EXPECT_TRUE(Judge(*Asha(), Reached({1}, 1), bad));
}

TEST(AshaPrunerTest, MaxResourceEndsTheRungs) {
  auto p =
      Asha([](AshaOptions& o) { o.max_resource = 9; });  // rungs 1, 3; step 9 is the full budget
  const History h = Reached({1, 1, 1}, 9);
  EXPECT_TRUE(Judge(*p, h, Trial(0, TrialStatus::kRunning, Flat(50, 1, 3))));
  EXPECT_FALSE(Judge(*p, h, Trial(0, TrialStatus::kRunning, Flat(50, 1, 9))));
  EXPECT_TRUE(Judge(*Asha(), h, Trial(0, TrialStatus::kRunning, Flat(50, 1, 9))));
}

TEST(AshaPrunerTest, NonIntegerReductionFactorRoundsRungsUp) {
  auto p = Asha([](AshaOptions& o) {
    o.min_resource = 2;
    o.reduction_factor = 2.5;
  });  // 2, 5, 12.5 -> 13
  const History h = Reached({1, 1, 1}, 20);
  for (int64_t last = 1; last <= 20; ++last) {
    const bool rung = last == 2 || last == 5 || last == 13;
    EXPECT_EQ(Judge(*p, h, Trial(0, TrialStatus::kRunning, Flat(50, 1, last))), rung)
        << "step " << last;
  }
}

// A report at the top of the int64 range is judged at the rungs it crossed,
// and not at one whose step, computed as a double, is 2^63: no step reaches
// that. With min_resource 2^49 + 563 and eta 2, rung 14 is 2^63 after the
// rounding of Rungs::Step; it used to be judged with that double converted
// to int64 (undefined; on x86 it became INT64_MIN), so trials that never got
// past step 1 were ranked against this one and pruned it.
TEST(AshaPrunerTest, AReportAtTheTopOfTheStepRangeIsJudgedOnlyAtTheRungsItCrossed) {
  constexpr int64_t kMin = (int64_t{1} << 49) + 563;
  auto p = Asha([](AshaOptions& o) {
    o.min_resource = kMin;
    o.reduction_factor = 2;
  });
  constexpr int64_t kTop = std::numeric_limits<int64_t>::max();
  History h;
  h.trials.push_back(
      Trial(1, TrialStatus::kRunning, {{1, 10}, {kTop, 10}}));    // worse, reached the top
  h.trials.push_back(Trial(2, TrialStatus::kRunning, {{1, 0}}));  // better, stopped at step 1
  h.trials.push_back(Trial(3, TrialStatus::kRunning, {{1, 0}}));
  EXPECT_FALSE(Judge(*p, h, Trial(0, TrialStatus::kRunning, {{kMin, 5}, {kTop, 5}})));
  // Worse than trial 1 at the rungs crossed, it stops at the first of them.
  EXPECT_TRUE(Judge(*p, h, Trial(0, TrialStatus::kRunning, {{kMin, 50}, {kTop, 50}})));
}

// --- Hyperband -----------------------------------------------------------------

TEST(HyperbandPrunerTest, BracketCountIsFloorLogEtaOfTheRange) {
  EXPECT_EQ(HyperbandBracketCount({}), 5);  // log3(81) = 4
  EXPECT_EQ(HyperbandBracketCount(Set(&HyperbandOptions::max_resource, 80)), 4);
  EXPECT_EQ(HyperbandBracketCount(Set(&HyperbandOptions::max_resource, 1)), 1);
  HyperbandOptions o;
  o.min_resource = 2;
  o.max_resource = 64;
  o.reduction_factor = 2;
  EXPECT_EQ(HyperbandBracketCount(o), 6);  // log2(32) = 5
}

TEST(HyperbandPrunerTest, AssignsBracketsDeterministically) {
  // Sizes 81, 34, 15, 8, 5 (of 143); the golden-ratio point of trial t is
  // frac(0.618034 t): t=1 -> 0.618 * 143 = 88.4 -> bracket 1; t=3 -> 122.1
  // -> bracket 2; t=8 -> 135.0 -> bracket 3; t=21 -> 140.0 -> bracket 4.
  const HyperbandOptions o;
  EXPECT_EQ(HyperbandBracket(o, 0), 0);
  EXPECT_EQ(HyperbandBracket(o, 1), 1);
  EXPECT_EQ(HyperbandBracket(o, 2), 0);
  EXPECT_EQ(HyperbandBracket(o, 3), 2);
  EXPECT_EQ(HyperbandBracket(o, 8), 3);
  EXPECT_EQ(HyperbandBracket(o, 21), 4);
  for (int64_t t = 0; t < 1000; ++t) {
    ASSERT_GE(HyperbandBracket(o, t), 0);
    ASSERT_LT(HyperbandBracket(o, t), 5);
  }
}

TEST(HyperbandPrunerTest, SpreadsTrialsOverAllBracketsInProportion) {
  const HyperbandOptions o;
  const std::vector<int> sizes = {81, 34, 15, 8, 5};
  std::map<int, int> first30;
  for (int64_t t = 0; t < 30; ++t) ++first30[HyperbandBracket(o, t)];
  EXPECT_EQ(first30.size(), 5u);
  for (int64_t start : {int64_t{0}, int64_t{1000}, int64_t{123456789}}) {
    std::vector<int> count(5, 0);
    for (int64_t t = start; t < start + 143 * 10; ++t) ++count[HyperbandBracket(o, t)];
    for (int s = 0; s < 5; ++s) {
      EXPECT_NEAR(count[s], sizes[s] * 10, 4) << "bracket " << s << " from " << start;
    }
  }
}

// The first n trial numbers of bracket `s` at or above `from`.
std::vector<int64_t> NumbersInBracket(const HyperbandOptions& o, int s, int n, int64_t from = 0) {
  std::vector<int64_t> out;
  for (int64_t t = from; static_cast<int>(out.size()) < n; ++t) {
    if (HyperbandBracket(o, t) == s) out.push_back(t);
  }
  return out;
}

TEST(HyperbandPrunerTest, ComparesOnlyWithinABracket) {
  const HyperbandOptions o;
  auto p = Hyperband();
  EXPECT_EQ(p->name(), "hyperband");
  const std::vector<int64_t> b0 = NumbersInBracket(o, 0, 2);
  const std::vector<int64_t> b1 = NumbersInBracket(o, 1, 3);
  // Bracket 0 has rungs at 1, 3, 9, 27. Much better trials of bracket 1
  // at step 1 do not count against a bracket-0 trial.
  History h;
  for (int64_t t : b1) h.trials.push_back(Trial(t, TrialStatus::kRunning, Flat(0, 1, 3)));
  const Observation bad = Trial(b0[0], TrialStatus::kRunning, Flat(50, 1, 1));
  EXPECT_FALSE(Judge(*p, h, bad));
  h.trials.push_back(Trial(b0[1], TrialStatus::kRunning, Flat(0, 1, 1)));
  EXPECT_TRUE(Judge(*p, h, bad));
}

TEST(HyperbandPrunerTest, BracketSetsTheFirstRung) {
  const HyperbandOptions o;
  auto p = Hyperband();
  for (int s = 0; s < 5; ++s) {
    const std::vector<int64_t> numbers = NumbersInBracket(o, s, 4);
    History h;
    for (size_t i = 1; i < numbers.size(); ++i) {
      h.trials.push_back(Trial(numbers[i], TrialStatus::kRunning, Flat(0, 1, 81)));
    }
    // Rungs of bracket s: 3^s, 3^(s+1), ... below 81; bracket 4 never stops.
    std::vector<int64_t> judged;
    for (int64_t last = 1; last <= 81; ++last) {
      if (Judge(*p, h, Trial(numbers[0], TrialStatus::kRunning, Flat(50, 1, last)))) {
        judged.push_back(last);
      }
    }
    std::vector<int64_t> want;
    for (int64_t r = static_cast<int64_t>(std::pow(3, s)); r < 81; r *= 3) want.push_back(r);
    EXPECT_EQ(judged, want) << "bracket " << s;
  }
}

// --- Option validation -------------------------------------------------------------

TEST(PrunerOptionsTest, DefaultsAreValid) {
  EXPECT_TRUE(MakeMedianPruner({}).ok());
  EXPECT_TRUE(MakeAshaPruner({}).ok());
  EXPECT_TRUE(MakeHyperbandPruner({}).ok());
  AshaOptions asha;
  asha.min_resource = asha.max_resource = 5;
  EXPECT_TRUE(MakeAshaPruner(asha).ok());
  HyperbandOptions hyperband;
  hyperband.min_resource = hyperband.max_resource = 5;
  EXPECT_TRUE(MakeHyperbandPruner(hyperband).ok());
}

// Nearer 1 a report is judged at ever more rungs: at 1.000001 one report
// from step 1 to step 2^62 crossed some 43 million (2 s under the
// experiment's lock). See kMinReductionFactor.
TEST(PrunerOptionsTest, ReductionFactorIsAtLeastOnePointFive) {
  for (double eta : {1.000001, 1.2, 1.4999}) {
    for (const Status& s :
         {MakeAshaPruner(Set(&AshaOptions::reduction_factor, eta)).status(),
          MakeHyperbandPruner(Set(&HyperbandOptions::reduction_factor, eta)).status()}) {
      EXPECT_TRUE(s.IsInvalidArgument()) << eta;
      EXPECT_EQ(s.message().rfind("reduction_factor: must be a finite number >= 1.5 ", 0), 0u) << s;
    }
  }
  EXPECT_TRUE(MakeAshaPruner(Set(&AshaOptions::reduction_factor, 1.5)).ok());
  EXPECT_TRUE(MakeHyperbandPruner(Set(&HyperbandOptions::reduction_factor, 1.5)).ok());
  // At 1.5, from the first step to the last int64 one: 108 rungs, judged in
  // one report (a trial better than its one peer at every rung goes on).
  auto p = Asha([](AshaOptions& o) { o.reduction_factor = 1.5; });
  constexpr int64_t kTop = std::numeric_limits<int64_t>::max();
  History h;
  h.trials.push_back(Trial(1, TrialStatus::kRunning, {{1, 10}, {kTop, 10}}));
  EXPECT_FALSE(Judge(*p, h, Trial(0, TrialStatus::kRunning, {{1, 5}, {kTop, 5}})));
  EXPECT_TRUE(Judge(*p, h, Trial(0, TrialStatus::kRunning, {{1, 50}, {kTop, 50}})));
}

TEST(PrunerOptionsTest, ErrorsNameTheField) {
  AshaOptions asha_max_below_min;
  asha_max_below_min.min_resource = 5;
  asha_max_below_min.max_resource = 4;
  HyperbandOptions hyperband_max_below_min;
  hyperband_max_below_min.min_resource = 9;
  hyperband_max_below_min.max_resource = 3;
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<std::pair<std::string, Status>> cases = {
      {"startup_trials", MakeMedianPruner(Set(&MedianOptions::startup_trials, -1)).status()},
      {"warmup_steps", MakeMedianPruner(Set(&MedianOptions::warmup_steps, -1)).status()},
      {"interval_steps", MakeMedianPruner(Set(&MedianOptions::interval_steps, 0)).status()},
      {"min_trials_at_step", MakeMedianPruner(Set(&MedianOptions::min_trials_at_step, 0)).status()},
      {"min_resource", MakeAshaPruner(Set(&AshaOptions::min_resource, 0)).status()},
      {"reduction_factor", MakeAshaPruner(Set(&AshaOptions::reduction_factor, 1)).status()},
      {"reduction_factor", MakeAshaPruner(Set(&AshaOptions::reduction_factor, kNaN)).status()},
      {"reduction_factor", MakeAshaPruner(Set(&AshaOptions::reduction_factor, inf)).status()},
      {"max_resource", MakeAshaPruner(Set(&AshaOptions::max_resource, -1)).status()},
      {"max_resource", MakeAshaPruner(asha_max_below_min).status()},
      {"min_early_stopping_rate",
       MakeAshaPruner(Set(&AshaOptions::min_early_stopping_rate, -1)).status()},
      {"bootstrap_count", MakeAshaPruner(Set(&AshaOptions::bootstrap_count, -1)).status()},
      {"min_resource", MakeHyperbandPruner(Set(&HyperbandOptions::min_resource, 0)).status()},
      {"max_resource", MakeHyperbandPruner(hyperband_max_below_min).status()},
      {"reduction_factor",
       MakeHyperbandPruner(Set(&HyperbandOptions::reduction_factor, 0.5)).status()},
      // log_1.0001(81) would be some 44000 brackets.
      {"reduction_factor",
       MakeHyperbandPruner(Set(&HyperbandOptions::reduction_factor, 1.0001)).status()},
  };
  for (const auto& [field, status] : cases) {
    EXPECT_TRUE(status.IsInvalidArgument()) << field << ": " << status;
    EXPECT_EQ(status.message().rfind(field + ": ", 0), 0u) << status;
  }
}

}  // namespace
}  // namespace hpo::search
