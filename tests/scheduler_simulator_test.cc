// The fleet simulator (scheduler/simulator.h) on a small deterministic
// fleet: what it must get right for its figures to mean anything. No
// timings are asserted, only behaviour of the simulated run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
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

// --- The traced world (SimTrace) and the server's long poll.

// One space, x in [0, 1] and kind in {a, b}; one device per speed; no
// noise, no failures, no early stopping, three steps per trial.
SimulatorOptions Traced(std::vector<TracedTrial> trials, std::vector<double> speeds) {
  auto trace = std::make_shared<SimTrace>();
  search::SearchSpace space;
  space.name = "only";
  space.params = {search::Param::Float("x", 0, 1), search::Param::Categorical("kind", {"a", "b"})};
  trace->spaces = {space};
  trace->trials = std::move(trials);
  trace->device_speeds = std::move(speeds);
  SimulatorOptions o;
  o.trace = std::move(trace);
  o.sampler = "random";
  o.early_stopping = "none";
  o.promotion = false;
  o.steps_per_trial = 3;
  o.failure = 0;
  o.lease_sigma = 0;
  o.max_trials = 1;
  o.target = -std::numeric_limits<double>::infinity();
  o.seed = 1;
  return o;
}

TracedTrial Curve(double kind, std::vector<double> values, double step_s) {
  return {0, {0.5, kind}, std::move(values), step_s};
}

TEST(SimulatorTraced, ATrialReportsItsTracedCurveAtItsCostOverTheDevicesSpeed) {
  SimulatorOptions o = Traced({Curve(0, {0.5, 0.3, 0.2}, 2)}, {0.5});
  o.target = 0.25;
  std::vector<std::pair<double, double>> reports;  // (t, value)
  o.on_event = [&](const SimEvent& e) {
    if (e.kind == SimEvent::Kind::kReport) reports.emplace_back(e.t, e.value);
  };
  const SimResult r = RunOrDie(o);
  ASSERT_EQ(reports.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(reports[i].first, 4.0 * static_cast<double>(i + 1), 1e-9)
        << "2 s a step at speed 0.5";
  }
  EXPECT_EQ(reports[1].second, 0.3);
  EXPECT_NEAR(r.time_to_target_s, 12, 1e-9) << "the third step's 0.2 is the first at or below 0.25";
}

TEST(SimulatorTraced, PastItsTracedEndATrialChangesAsTheFiveClosestInValueDid) {
  // Kind a's only traced trial stopped after step 1, at 0.6; kind b's went
  // on. Of these, the five closest to 0.6 at step 1 change by -0.05 to step
  // 2 and by -0.4, -0.2, -0.1, -0.1 and -0.3 to step 3 (median -0.2); the
  // sixth, far off at 0.0, would make it -0.25.
  SimulatorOptions o =
      Traced({Curve(0, {0.6}, 1), Curve(1, {0.5, 0.45, 0.1}, 2), Curve(1, {0.9, 0.85, 0.7}, 2),
              Curve(1, {0.6, 0.55, 0.5}, 2), Curve(1, {0.65, 0.6, 0.55}, 2),
              Curve(1, {0.55, 0.5, 0.25}, 2), Curve(1, {0.0, -0.05, -1.0}, 2)},
             {1.0});
  o.max_trials = 20;
  std::map<int64_t, double> kind;                 // trial -> its kind
  std::map<int64_t, std::vector<double>> values;  // trial -> its reports
  std::map<int64_t, std::vector<double>> times;
  o.on_event = [&](const SimEvent& e) {
    if (e.kind == SimEvent::Kind::kAsk && e.ran && e.item == WorkItem::Kind::kNew) {
      ASSERT_EQ(e.params.size(), 2u);
      kind[e.trial] = e.params[1];
    }
    if (e.kind == SimEvent::Kind::kReport) {
      values[e.trial].push_back(e.value);
      times[e.trial].push_back(e.t);
    }
  };
  const SimResult r = RunOrDie(o);
  EXPECT_EQ(r.completed, 20);
  int seen[2] = {0, 0};
  for (const auto& [trial, k] : kind) {
    ASSERT_EQ(values[trial].size(), 3u);
    ++seen[static_cast<int>(k)];
    // Its cost per step too is its nearest traced trial's.
    EXPECT_NEAR(times[trial][2] - times[trial][1], k == 0 ? 1 : 2, 1e-9);
    if (k == 0) {
      EXPECT_NEAR(values[trial][0], 0.6, 1e-12);
      EXPECT_NEAR(values[trial][1], 0.55, 1e-12);
      EXPECT_NEAR(values[trial][2], 0.4, 1e-12);
    } else {  // all of kind b's are as near: the first traced one
      EXPECT_EQ(values[trial], (std::vector<double>{0.5, 0.45, 0.1}));
    }
  }
  EXPECT_GT(seen[0], 0);
  EXPECT_GT(seen[1], 0);
}

// Replaying a traced run: its configurations are created in its order, each
// reports its own traced curve at its own cost, and past the list the
// sampler draws.
TEST(SimulatorTraced, AReplayedRunCreatesItsConfigurationsInItsOrder) {
  const std::vector<TracedTrial> traced = {{0, {0.1, 0}, {0.7, 0.6, 0.5}, 1},
                                           {0, {0.9, 1}, {0.4, 0.3, 0.2}, 2},
                                           {0, {0.3, 1}, {0.8, 0.8, 0.8}, 3}};
  SimulatorOptions o = Traced(traced, {1.0});
  auto trace = std::make_shared<SimTrace>(*o.trace);
  trace->replay = {{traced[1].params, traced[2].params, traced[0].params}};
  o.trace = trace;
  o.max_trials = 5;
  std::vector<search::Assignment> created;
  std::map<int64_t, std::vector<double>> values, times;
  o.on_event = [&](const SimEvent& e) {
    if (e.kind == SimEvent::Kind::kAsk && e.ran && e.item == WorkItem::Kind::kNew)
      created.push_back(e.params);
    if (e.kind == SimEvent::Kind::kReport) {
      values[e.trial].push_back(e.value);
      times[e.trial].push_back(e.t);
    }
  };
  const SimResult r = RunOrDie(o);
  EXPECT_EQ(r.completed, 5);
  ASSERT_EQ(created.size(), 5u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(created[i], trace->replay[0][i]) << "trial " << i;
  const std::vector<size_t> own = {1, 2, 0};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(values[static_cast<int64_t>(i)], traced[own[i]].values) << "trial " << i;
    EXPECT_NEAR(times[static_cast<int64_t>(i)][1] - times[static_cast<int64_t>(i)][0],
                traced[own[i]].step_s, 1e-9);
  }
  // The sampler's (random) fourth and fifth are none of the replayed ones.
  for (size_t i = 3; i < 5; ++i) {
    for (const auto& x : trace->replay[0]) EXPECT_NE(created[i], x) << "trial " << i;
  }
}

// Three devices, two trials of two 0.7 s steps: the third device finds
// nothing from the start. Polling, it waits for the offer to change, which
// it never does. In a long poll of 0.5 s it asks again 0.1 s after each
// wait ends, and at once when a trial finishes.
TEST(SimulatorTraced, AnIdleDeviceInALongPollAsksAgainWhenATrialFinishes) {
  for (const double wait : {0.0, 0.5}) {
    SimulatorOptions o = Traced({Curve(0, {0.5, 0.4}, 0.7)}, {1, 1, 1});
    o.steps_per_trial = 2;
    o.max_trials = 2;
    o.lease_wait_s = wait;
    o.long_poll_retry_s = 0.1;
    std::vector<double> third;
    o.on_event = [&](const SimEvent& e) {
      if (e.kind == SimEvent::Kind::kAsk && e.device == 2) third.push_back(e.t);
    };
    const SimResult r = RunOrDie(o);
    EXPECT_EQ(r.completed, 2);
    if (wait == 0) {
      EXPECT_EQ(third, std::vector<double>{0.0});
    } else {
      const std::vector<double> want = {0.0, 0.6, 1.2, 1.4};
      ASSERT_EQ(third.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(third[i], want[i], 1e-9) << i;
    }
  }
}

TEST(SimulatorTraced, ABadTraceIsAnErrorNamingTheField) {
  const auto message = [](const SimulatorOptions& o) {
    auto sim = Simulator::Create(o);
    return sim.ok() ? std::string("ok") : sim.status().message();
  };
  SimulatorOptions o = Traced({Curve(0, {0.5}, 1)}, {});
  EXPECT_NE(message(o).find("trace.device_speeds"), std::string::npos) << message(o);
  o = Traced({Curve(0, {0.5}, 1)}, {1, -1});
  EXPECT_NE(message(o).find("trace.device_speeds"), std::string::npos) << message(o);
  o = Traced({{0, {0.5}, {0.5}, 1}}, {1});
  EXPECT_NE(message(o).find("trace.trials[0].params"), std::string::npos) << message(o);
  o = Traced({Curve(0, {0.5}, 1), Curve(3, {0.5}, 1)}, {1});  // kind 3: no such choice
  EXPECT_NE(message(o).find("trace.trials[1].params"), std::string::npos) << message(o);
  o = Traced({Curve(0, {}, 1)}, {1});
  EXPECT_NE(message(o).find("trace.trials[0].values"), std::string::npos) << message(o);
  o = Traced({Curve(0, {0.5}, 0)}, {1});
  EXPECT_NE(message(o).find("trace.trials[0].step_s"), std::string::npos) << message(o);
  o = Traced({}, {1});
  EXPECT_NE(message(o).find("no traced trial in space only"), std::string::npos) << message(o);
  o = Traced({Curve(0, {0.5}, 1)}, {1});
  auto replayed = std::make_shared<SimTrace>(*o.trace);
  replayed->replay = {{{0.5, 1}, {0.5}}};
  o.trace = replayed;
  EXPECT_NE(message(o).find("trace.replay[0][1]"), std::string::npos) << message(o);
  replayed->replay = {{{0.5, 2}}};  // kind 2: no such choice
  EXPECT_NE(message(o).find("trace.replay[0][0]"), std::string::npos) << message(o);
  replayed->replay = {{}, {}};
  EXPECT_NE(message(o).find("trace.replay"), std::string::npos) << message(o);
  o = Traced({Curve(0, {0.5}, 1)}, {1});
  o.lease_wait_s = -1;
  EXPECT_NE(message(o).find("lease_wait_s"), std::string::npos) << message(o);
  EXPECT_EQ(message(Traced({Curve(0, {0.5}, 1)}, {1})), "ok");
}

}  // namespace
}  // namespace hpo::scheduler
