// The fleet simulator (scheduler/simulator.h) on a small deterministic
// fleet: what it must get right for its figures to mean anything. No
// timings are asserted, only behaviour of the simulated run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "scheduler/policy.h"
#include "scheduler/simulator.h"

namespace hpo::scheduler {
namespace {

// 8 workers in 8 classes, 1x to 10x; a budget of 60 trials run to its end
// (the target is out of reach), promotion-type ASHA at steps 3, 9 and 27.
SimulatorOptions SmallFleet(PolicyKind kind, uint64_t seed) {
  SimulatorOptions o;
  o.workers = 8;
  o.spread = 10;
  o.seed = seed;
  o.max_trials = 60;
  o.max_parallel = 6;  // below the fleet: the cap binds
  o.target = -std::numeric_limits<double>::infinity();
  o.policy.kind = kind;
  return o;
}

SimResult RunOrDie(const SimulatorOptions& o) {
  auto sim = Simulator::Create(o);
  EXPECT_TRUE(sim.ok()) << sim.status().message();
  if (!sim.ok()) return {};
  return (*sim)->Run();
}

// Mean true-speed percentile of the devices that ran promoted segments
// (level > 0) and of those that ran first segments (level 0).
void SpeedOfLevels(const SimResult& r, double* promoted, double* first) {
  double sum = 0;
  int64_t n = 0;
  for (size_t l = 1; l < r.levels.size(); ++l) {
    sum += r.levels[l].speed_percentile_sum;
    n += r.levels[l].segments;
  }
  *promoted = n ? sum / n : 0;
  *first = r.levels.empty() ? 0 : r.levels[0].MeanSpeedPercentile();
}

TEST(Simulator, RunsTheBudgetToTheEndWithEveryTrialFinishedOrPaused) {
  for (PolicyKind kind : {PolicyKind::kSpeed, PolicyKind::kFifo, PolicyKind::kShadho}) {
    SCOPED_TRACE(PolicyName(kind));
    const SimResult r = RunOrDie(SmallFleet(kind, 1));
    EXPECT_EQ(r.trials, 60) << "the whole budget is used";
    EXPECT_EQ(r.unfinished, 0) << "nothing pending or on a device at the end";
    EXPECT_EQ(r.completed + r.pruned + r.failed + r.paused, r.trials);
    EXPECT_GT(r.completed, 0);
    EXPECT_TRUE(std::isnan(r.time_to_target_s));
  }
}

TEST(Simulator, PromotesPausedTrialsUpTheRungs) {
  const SimResult r = RunOrDie(SmallFleet(PolicyKind::kSpeed, 1));
  EXPECT_GT(r.promotions, 0);
  EXPECT_EQ(r.max_level, 2) << "rungs 3, 9, 27: levels 0, 1, 2";
  ASSERT_EQ(r.levels.size(), 3u);
  // ASHA keeps about 1/eta at each rung.
  EXPECT_LT(r.levels[1].segments, r.levels[0].segments);
  EXPECT_LT(r.levels[2].segments, r.levels[1].segments);
  EXPECT_EQ(r.levels[2].segments, r.completed) << "a trial completes only from the top rung";
  EXPECT_GT(r.paused, 0) << "trials the rule never promoted stay paused";
}

TEST(Simulator, SpeedPolicySendsPromotionsToFasterDevicesThanFirstSegments) {
  for (uint64_t seed : {1, 2, 3}) {
    SCOPED_TRACE(seed);
    const SimResult r = RunOrDie(SmallFleet(PolicyKind::kSpeed, seed));
    double promoted = 0, first = 0;
    SpeedOfLevels(r, &promoted, &first);
    EXPECT_GT(promoted, first + 0.1) << "promotions " << promoted << ", first segments " << first;
  }
}

TEST(Simulator, NeverExceedsMaxParallel) {
  for (PolicyKind kind : {PolicyKind::kSpeed, PolicyKind::kFifo, PolicyKind::kShadho}) {
    SCOPED_TRACE(PolicyName(kind));
    const SimResult r = RunOrDie(SmallFleet(kind, 2));
    EXPECT_EQ(r.max_parallel, 6);
    EXPECT_EQ(r.peak_unfinished, 6) << "the cap is reached and never passed";
  }
}

TEST(Simulator, IsDeterministicForASeed) {
  SimulatorOptions o = SmallFleet(PolicyKind::kSpeed, 4);
  o.failure = 0.2;
  const SimResult a = RunOrDie(o);
  const SimResult b = RunOrDie(o);
  EXPECT_EQ(a.trace, b.trace);
  EXPECT_EQ(a.decisions, b.decisions);
  EXPECT_EQ(a.completed, b.completed);
  EXPECT_DOUBLE_EQ(a.end_s, b.end_s);
  EXPECT_DOUBLE_EQ(a.best, b.best);
  o.seed = 5;
  EXPECT_NE(RunOrDie(o).trace, a.trace) << "another seed is another run";
}

TEST(Simulator, LostWorkersRequeueTheirTrialsAndTheRunStillEnds) {
  // Over a few seeds: whether one run loses a worker twice in one segment
  // is the seed's luck.
  int failed = 0, completed = 0;
  for (uint64_t seed = 6; seed < 11; ++seed) {
    SCOPED_TRACE(seed);
    SimulatorOptions o = SmallFleet(PolicyKind::kSpeed, seed);
    o.failure = 0.6;
    o.max_attempts = 2;
    const SimResult r = RunOrDie(o);
    EXPECT_EQ(r.unfinished, 0);
    EXPECT_EQ(r.completed + r.failed + r.paused, r.trials);
    failed += r.failed;
    completed += r.completed;
  }
  EXPECT_GT(failed, 0) << "some trials lost their worker in both attempts of a segment";
  EXPECT_GT(completed, 0) << "requeued trials went on";
}

// A dead worker's lease expires and its segment is offered again: with
// attempts to spare nothing fails, nothing is left on a device, and every
// trial ends completed or paused at a rung (a resumed segment that lost its
// worker goes back to paused, not lost and not stuck "on a device").
TEST(Simulator, ExpiredLeasesGiveTheirWorkBack) {
  for (PolicyKind kind : {PolicyKind::kSpeed, PolicyKind::kFifo}) {
    SCOPED_TRACE(PolicyName(kind));
    SimulatorOptions o = SmallFleet(kind, 7);
    o.failure = 0.5;
    o.max_attempts = 1000;
    const SimResult r = RunOrDie(o);
    EXPECT_EQ(r.failed, 0);
    EXPECT_EQ(r.unfinished, 0);
    EXPECT_EQ(r.trials, 60);
    EXPECT_EQ(r.completed + r.paused, r.trials);
    EXPECT_GT(r.promotions, 0);
  }
}

TEST(Simulator, StoppingTypeAshaPrunesInsteadOfPausing) {
  SimulatorOptions o = SmallFleet(PolicyKind::kSpeed, 1);
  o.promotion = false;
  const SimResult r = RunOrDie(o);
  EXPECT_EQ(r.promotions, 0);
  EXPECT_EQ(r.paused, 0);
  EXPECT_GT(r.pruned, 0);
  EXPECT_EQ(r.moves, 0) << "migrate is off";
  EXPECT_EQ(r.completed + r.pruned + r.failed, r.trials);
  ASSERT_EQ(r.levels.size(), 1u) << "one segment per trial, from step 0";
}

// Migration (stop-type with migrate, the engine's MaybeMove): trials that
// survive a rung on slow devices pause there and go on on faster ones,
// preempting less advanced work there; every trial still ends, none stays
// paused, and the run is deterministic.
TEST(Simulator, MigrationMovesRungSurvivorsToFasterDevices) {
  for (uint64_t seed : {1, 2, 3}) {
    SCOPED_TRACE(seed);
    SimulatorOptions o = SmallFleet(PolicyKind::kSpeed, seed);
    o.promotion = false;
    o.migrate = true;
    const SimResult r = RunOrDie(o);
    EXPECT_GT(r.moves, 0);
    EXPECT_GT(r.promotions, 0) << "moved and preempted trials are resumed";
    EXPECT_EQ(r.paused, 0) << "a paused trial of a stop-type run is always resumed";
    EXPECT_EQ(r.unfinished, 0);
    EXPECT_EQ(r.completed + r.pruned + r.failed, r.trials);
    EXPECT_GT(r.moves_resumed, 0);
    EXPECT_GE(r.moves_resumed_faster * 4, r.moves_resumed * 3)
        << r.moves_resumed_faster << " of " << r.moves_resumed
        << " moves went on on a faster device";
    EXPECT_EQ(RunOrDie(o).trace, r.trace);
  }
  SimulatorOptions o = SmallFleet(PolicyKind::kSpeed, 1);
  o.promotion = false;
  o.migrate = true;
  o.max_parallel = 8;  // every device busy: only preemption makes room on a fast one
  EXPECT_GT(RunOrDie(o).preemptions, 0);
}

TEST(Simulator, StopsAtTheTargetAndSaysWhichTrialReachedIt) {
  SimulatorOptions o = SmallFleet(PolicyKind::kSpeed, 1);
  o.target = 10;  // the first report reaches it, as bench/hetero's target event
  const SimResult r = RunOrDie(o);
  EXPECT_EQ(r.completed, 0);
  EXPECT_DOUBLE_EQ(r.time_to_target_s, r.end_s);
  ASSERT_EQ(r.winner.size(), 1u) << "the segment it ran when it reported";
  EXPECT_EQ(r.winner.back().level, 0);
}

TEST(Simulator, EveryDecisionGoesThroughTheHook) {
  SimulatorOptions o = SmallFleet(PolicyKind::kFifo, 1);
  int64_t calls = 0;
  o.decide = [&calls](const AskingDevice& d, const FleetSummary& fleet, double now_s,
                      const std::vector<WorkItem>& items, const SpeedModel& speeds,
                      const PolicyOptions& options) {
    ++calls;
    EXPECT_EQ(fleet.size(), 8u) << "every live device, no failures here";
    return Decide(d, fleet, now_s, items, speeds, options);
  };
  o.failure = 0;
  const SimResult r = RunOrDie(o);
  EXPECT_EQ(calls, r.decisions);
  EXPECT_GT(calls, 60);
}

TEST(Simulator, ShadhoIsToldTheTrueClassOrder) {
  SimulatorOptions o = SmallFleet(PolicyKind::kShadho, 1);
  auto sim = Simulator::Create(o);
  ASSERT_TRUE(sim.ok());
  const auto order = (*sim)->ClassesStrongestFirst();
  ASSERT_EQ(order.size(), 8u);
  EXPECT_EQ(order.front(), "class1") << "the class pinned at spread x";
  EXPECT_EQ(order.back(), "class0") << "the class pinned at 1x";
  EXPECT_EQ((*sim)->options().policy.class_order, order);
}

TEST(Simulator, BadOptionsAreErrorsNamingTheOption) {
  SimulatorOptions o = SmallFleet(PolicyKind::kSpeed, 1);
  o.sampler = "magic";
  auto sim = Simulator::Create(o);
  ASSERT_FALSE(sim.ok());
  EXPECT_NE(sim.status().message().find("sampler"), std::string::npos) << sim.status().message();

  o = SmallFleet(PolicyKind::kSpeed, 1);
  o.early_stopping = "median";  // promotion needs rungs
  sim = Simulator::Create(o);
  ASSERT_FALSE(sim.ok());
  EXPECT_NE(sim.status().message().find("promotion"), std::string::npos) << sim.status().message();

  o = SmallFleet(PolicyKind::kSpeed, 1);
  o.migrate = true;  // promotion-type: nothing to migrate
  sim = Simulator::Create(o);
  ASSERT_FALSE(sim.ok());
  EXPECT_NE(sim.status().message().find("migrate"), std::string::npos) << sim.status().message();

  o = SmallFleet(PolicyKind::kSpeed, 1);
  o.reduction_factor = 1.1;
  sim = Simulator::Create(o);
  ASSERT_FALSE(sim.ok());
  EXPECT_NE(sim.status().message().find("reduction_factor"), std::string::npos)
      << sim.status().message();

  o = SmallFleet(PolicyKind::kSpeed, 1);
  o.workers = 0;
  EXPECT_FALSE(Simulator::Create(o).ok());
}

}  // namespace
}  // namespace hpo::scheduler
