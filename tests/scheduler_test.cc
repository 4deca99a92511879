#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "scheduler/placement.h"
#include "scheduler/speed_model.h"
#include "search/random.h"

namespace hpo::scheduler {
namespace {

constexpr char kCnn[] = "fashion-mnist-cnn/cnn";
constexpr char kMlp[] = "mnist-mlp/mlp";

TEST(SpeedModel, EstimateConvergesToObservations) {
  SpeedModel m;
  m.AddBenchmark("gpu", 1000);
  search::Rng rng(7);
  double stddev_at_10 = 0;
  for (int n = 1; n <= 400; ++n) {
    m.Observe("gpu", kCnn, "", 5000 * (1 + 0.2 * rng.Normal()));
    if (n == 10) stddev_at_10 = m.Estimate("gpu", kCnn)->stddev;
  }
  const auto e = m.Estimate("gpu", kCnn);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->observations, 400);
  EXPECT_NEAR(e->samples_per_sec, 5000, 150);
  EXPECT_LT(e->stddev, stddev_at_10) << "more observations, less doubt";
  // The stddev of the mean (1000 / sqrt(400) = 50) is below the 5% floor,
  // which wins: timing noise never makes an estimate look that certain.
  EXPECT_DOUBLE_EQ(e->stddev, 0.05 * e->samples_per_sec);
}

TEST(SpeedModel, StddevIsOfTheMeanAboveTheFloor) {
  SpeedModel m;
  for (double x : {100.0, 300.0, 100.0, 300.0}) m.Observe("cpu", kCnn, "", x);
  const auto e = m.Estimate("cpu", kCnn);
  ASSERT_TRUE(e);
  EXPECT_DOUBLE_EQ(e->samples_per_sec, 200);
  // Sample variance 40000/3; stddev of the mean sqrt(40000 / 3 / 4).
  EXPECT_NEAR(e->stddev, std::sqrt(40000.0 / 3 / 4), 1e-9);
}

TEST(SpeedModel, PriorScalesTheBenchmarkByAnotherClasssRatio) {
  SpeedModel m;
  m.AddBenchmark("cpu", 100);
  m.AddBenchmark("gpu", 2000);
  m.AddBenchmark("other", 50);
  for (int i = 0; i < 5; ++i) m.Observe("cpu", kCnn, "", 300);  // 3 samples per GFLOP
  m.Observe("other", kMlp, "", 5000);                           // 100 per GFLOP, other workload
  const auto e = m.Estimate("gpu", kCnn);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->observations, 0);
  EXPECT_DOUBLE_EQ(e->samples_per_sec, 2000 * 3.0) << "this workload's ratio, not the mlp's";
  EXPECT_DOUBLE_EQ(e->stddev, 0.5 * e->samples_per_sec);

  // A workload never seen anywhere: the median over all observed pairs.
  const auto unseen = m.Estimate("gpu", "new/workload");
  ASSERT_TRUE(unseen);
  EXPECT_DOUBLE_EQ(unseen->samples_per_sec, 2000 * (3.0 + 100.0) / 2);

  EXPECT_FALSE(m.Estimate("tpu", kCnn)) << "no benchmark, no observation";
}

TEST(SpeedModel, SettingFallsBackToThePair) {
  SpeedModel m;
  m.Observe("gpu", kCnn, R"({"batch_size":64})", 1000);
  m.Observe("gpu", kCnn, R"({"batch_size":256})", 3000);
  EXPECT_DOUBLE_EQ(m.Estimate("gpu", kCnn, R"({"batch_size":256})")->samples_per_sec, 3000);
  EXPECT_DOUBLE_EQ(m.Estimate("gpu", kCnn, R"({"batch_size":999})")->samples_per_sec, 2000);
  EXPECT_DOUBLE_EQ(m.Estimate("gpu", kCnn)->samples_per_sec, 2000);
}

TEST(SpeedModel, BestSettingPicksTheFastest) {
  SpeedModel m;
  m.Observe("gpu", kCnn, R"({"batch_size":64})", 1000);
  m.Observe("gpu", kCnn, R"({"batch_size":64})", 1200);
  m.Observe("gpu", kCnn, R"({"batch_size":256})", 3000);
  m.Observe("gpu", kCnn, R"({"batch_size":128})", 2000);
  m.Observe("gpu", kCnn, R"({"batch_size":128})", 2100);
  m.Observe("gpu", kMlp, R"({"batch_size":512})", 99999);  // another workload
  m.Observe("gpu", kCnn, "", 50000);                       // "whatever" is no setting
  EXPECT_EQ(m.BestSetting("gpu", kCnn), R"({"batch_size":256})");
  EXPECT_EQ(m.BestSetting("gpu", kCnn, 2), R"({"batch_size":128})")
      << "256 has a single observation";
  EXPECT_FALSE(m.BestSetting("gpu", kCnn, 3));
  EXPECT_FALSE(m.BestSetting("cpu", kCnn));
  EXPECT_EQ(m.DeviceClasses(), std::vector<std::string>({"gpu"}));
}

// Three classes, 1x, 3x and 10x, two devices each.
struct World {
  SpeedModel speeds;
  Fleet fleet;
  World() {
    for (const auto& [cls, sps] :
         std::vector<std::pair<std::string, double>>{{"slow", 100}, {"mid", 300}, {"fast", 1000}}) {
      speeds.Observe(cls, kCnn, "", sps);
      fleet.Add(cls, 2);
    }
  }
};

PlacementCandidate Candidate(int64_t id, double priority, int level, double waiting_s = 0) {
  PlacementCandidate c;
  c.trial_id = id;
  c.space_priority = priority;
  c.level = level;
  c.workload = kCnn;
  c.steps_remaining = 10;
  c.samples_per_step = 1000;
  c.waiting_s = waiting_s;
  return c;
}

TEST(Placement, FastDevicesTakeImportantWorkSlowOnesExploration) {
  World w;
  const std::vector<PlacementCandidate> pending = {
      Candidate(1, 0.2, 0),  // low-priority space, fresh: least important
      Candidate(2, 0.8, 0),  // high-priority space
      Candidate(3, 0.2, 2),  // promoted twice: 0.6
      Candidate(4, 0.8, 3),  // high priority and promoted: most important
      Candidate(5, 0.5, 0),
  };
  const auto fast = PlaceTrial({"f1", "fast"}, w.fleet, pending, w.speeds);
  ASSERT_TRUE(fast);
  EXPECT_EQ(fast->trial_id, 4);
  EXPECT_DOUBLE_EQ(fast->estimated_seconds, 10 * 1000 / 1000.0);
  const auto slow = PlaceTrial({"s1", "slow"}, w.fleet, pending, w.speeds);
  ASSERT_TRUE(slow);
  EXPECT_EQ(slow->trial_id, 1);
  EXPECT_DOUBLE_EQ(slow->estimated_seconds, 10 * 1000 / 100.0);
  // The middle of the fleet takes the middle of the queue (importance
  // 0.2, 0.8, 0.6, 3.2, 0.5: the median is trial 3).
  EXPECT_EQ(PlaceTrial({"m1", "mid"}, w.fleet, pending, w.speeds)->trial_id, 3);
}

TEST(Placement, PriorsPlaceBeforeAnyObservation) {
  SpeedModel speeds;
  Fleet fleet;
  speeds.AddBenchmark("cpu", 50);
  speeds.AddBenchmark("gpu", 5000);
  fleet.Add("cpu", 10);
  fleet.Add("gpu", 1);
  const std::vector<PlacementCandidate> pending = {Candidate(1, 0.5, 0), Candidate(2, 0.5, 1)};
  EXPECT_EQ(PlaceTrial({"g", "gpu"}, fleet, pending, speeds)->trial_id, 2);
  EXPECT_EQ(PlaceTrial({"c", "cpu"}, fleet, pending, speeds)->trial_id, 1);
  // A class nobody knows anything about sits in the middle: equal ties go
  // to the lowest id.
  EXPECT_EQ(PlaceTrial({"x", "unknown"}, fleet, pending, speeds)->trial_id, 1);
}

TEST(Placement, StarvingCandidateIsTakenBySlowDevice) {
  World w;
  PlacementOptions options;
  options.max_wait_s = 300;
  std::vector<PlacementCandidate> pending = {Candidate(1, 0.2, 0), Candidate(2, 0.9, 3, 299)};
  EXPECT_EQ(PlaceTrial({"s1", "slow"}, w.fleet, pending, w.speeds, options)->trial_id, 1)
      << "not starving yet: the slow device leaves the promotion alone";
  pending[1].waiting_s = 301;
  pending.push_back(Candidate(3, 0.9, 3, 400));
  EXPECT_EQ(PlaceTrial({"s1", "slow"}, w.fleet, pending, w.speeds, options)->trial_id, 3)
      << "the longest-waiting starving candidate goes first";
}

TEST(Placement, EmptyQueueGivesNothing) {
  World w;
  EXPECT_FALSE(PlaceTrial({"f1", "fast"}, w.fleet, {}, w.speeds));
}

TEST(Placement, CostAwareSkipsDearDeviceWhenCheapOneMeetsDeadline) {
  SpeedModel speeds;
  Fleet fleet;
  speeds.Observe("cheap", kCnn, "", 100);
  speeds.Observe("dear", kCnn, "", 1000);
  fleet.Add("cheap");
  fleet.Add("dear");
  PlacementOptions options;
  // Per sample: cheap 1/100, dear 30/1000 = 3x the cheap one.
  options.price_per_hour = {{"cheap", 1.0}, {"dear", 30.0}};
  options.deadline_s = 200;  // cheap needs 10 * 1000 / 100 = 100 s: in time
  const std::vector<PlacementCandidate> pending = {Candidate(1, 0.5, 0)};
  EXPECT_FALSE(PlaceTrial({"d", "dear"}, fleet, pending, speeds, options));
  const auto cheap = PlaceTrial({"c", "cheap"}, fleet, pending, speeds, options);
  ASSERT_TRUE(cheap);
  EXPECT_EQ(cheap->trial_id, 1);
  EXPECT_DOUBLE_EQ(cheap->estimated_seconds, 100);

  // A deadline only the dear device meets makes it the cheapest that counts.
  options.deadline_s = 50;
  EXPECT_EQ(PlaceTrial({"d", "dear"}, fleet, pending, speeds, options)->trial_id, 1);
  EXPECT_FALSE(PlaceTrial({"c", "cheap"}, fleet, pending, speeds, options));

  // Within 10% of the cheapest is close enough.
  options.deadline_s = 0;
  options.price_per_hour["dear"] = 10.9;
  EXPECT_TRUE(PlaceTrial({"d", "dear"}, fleet, pending, speeds, options));

  // Starving candidates ignore cost.
  options.price_per_hour["dear"] = 30;
  auto starving = pending;
  starving[0].waiting_s = options.max_wait_s + 1;
  EXPECT_EQ(PlaceTrial({"d", "dear"}, fleet, starving, speeds, options)->trial_id, 1);
}

TEST(Placement, Deterministic) {
  search::Rng rng(3);
  SpeedModel speeds;
  Fleet fleet;
  for (int k = 0; k < 8; ++k) {
    const std::string cls = "class" + std::to_string(k);
    speeds.AddBenchmark(cls, rng.Uniform(10, 1000));
    if (k % 2) speeds.Observe(cls, kCnn, "", rng.Uniform(100, 10000));
    fleet.Add(cls, 1 + static_cast<int>(rng.Below(5)));
  }
  std::vector<PlacementCandidate> pending;
  for (int i = 0; i < 50; ++i) {
    auto c = Candidate(100 - i, rng.Uniform(), static_cast<int>(rng.Below(4)), rng.Uniform(0, 500));
    c.workload = i % 3 ? kCnn : kMlp;
    pending.push_back(c);
  }
  for (int k = 0; k < 8; ++k) {
    const AskingDevice d{"d", "class" + std::to_string(k)};
    const auto a = PlaceTrial(d, fleet, pending, speeds);
    const auto b = PlaceTrial(d, fleet, pending, speeds);
    ASSERT_TRUE(a && b);
    EXPECT_EQ(a->trial_id, b->trial_id);
    EXPECT_EQ(a->estimated_seconds, b->estimated_seconds);
  }
}

}  // namespace
}  // namespace hpo::scheduler
