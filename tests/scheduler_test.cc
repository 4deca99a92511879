#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "scheduler/offer.h"
#include "scheduler/policy.h"
#include "scheduler/speed_model.h"
#include "search/promotion.h"
#include "search/random.h"
#include "search/ranking.h"
#include "testing/objectives.h"

namespace hpo::scheduler {
namespace {

using nlohmann::json;

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

// A tunable batch size is itself the knob: the fastest value wins.
TEST(SpeedModel, BestTunablesPicksTheFastestWhenTheBatchIsTunable) {
  SpeedModel m;
  const std::vector<std::string> tunable = {"batch_size"};
  m.Observe("gpu", kCnn, R"({"batch_size":64})", 1000);
  m.Observe("gpu", kCnn, R"({"batch_size":64})", 1200);
  m.Observe("gpu", kCnn, R"({"batch_size":256})", 3000);
  m.Observe("gpu", kCnn, R"({"batch_size":128})", 2000);
  m.Observe("gpu", kCnn, R"({"batch_size":128})", 2100);
  m.Observe("gpu", kMlp, R"({"batch_size":512})", 99999);  // another workload
  m.Observe("gpu", kCnn, "", 50000);                       // "whatever" is no setting
  EXPECT_EQ(m.BestTunables("gpu", kCnn, tunable, json::object()),
            json::parse(R"({"batch_size":256})"));
  EXPECT_EQ(m.BestTunables("gpu", kCnn, tunable, json::object(), 2),
            json::parse(R"({"batch_size":128})"))
      << "256 has a single observation";
  EXPECT_FALSE(m.BestTunables("gpu", kCnn, tunable, json::object(), 3));
  EXPECT_FALSE(m.BestTunables("cpu", kCnn, tunable, json::object()));
  EXPECT_EQ(m.DeviceClasses(), std::vector<std::string>({"gpu"}));
}

std::string Setting(int threads, int batch) {
  return json{{"batch_size", batch}, {"threads", threads}}.dump();
}

// A confound seen on a real fleet: one thread was measured only with the biggest
// batch, so its whole setting is the fastest seen, though two threads are
// faster at every batch size. Fitted in log batch size, two threads win
// for a trial of any batch.
TEST(SpeedModel, BestTunablesSeparatesThreadsFromTheSearchedBatch) {
  SpeedModel m;
  const std::vector<std::string> tunable = {"threads"};
  for (double sps : {180.0, 220.0}) m.Observe("cpu", kCnn, Setting(2, 64), sps);
  for (double sps : {400.0, 420.0}) m.Observe("cpu", kCnn, Setting(2, 256), sps);
  for (double sps : {490.0, 510.0}) m.Observe("cpu", kCnn, Setting(1, 512), sps);
  for (int batch : {32, 64, 512, 1024}) {
    EXPECT_EQ(m.BestTunables("cpu", kCnn, tunable, {{"batch_size", batch}}, 2),
              json::parse(R"({"threads":2})"))
        << "batch " << batch;
  }
  // The prediction moves with the batch the way the measured line does
  // (slope log(410/200)/log(4) for both, shrunk to the same pooled value).
  const double at64 =
      *m.PredictTunables("cpu", kCnn, tunable, {{"threads", 2}}, {{"batch_size", 64}});
  const double at256 =
      *m.PredictTunables("cpu", kCnn, tunable, {{"threads", 2}}, {{"batch_size", 256}});
  EXPECT_NEAR(at256 / at64, 410.0 / 200.0, 0.15);
  EXPECT_FALSE(m.PredictTunables("cpu", kCnn, tunable, {{"threads", 3}}, {{"batch_size", 64}}));
}

// Where the best thread count depends on the batch (small batches cannot
// keep two threads busy), the answer does too.
TEST(SpeedModel, BestTunablesDependsOnTheTrialsBatch) {
  SpeedModel m;
  const std::vector<std::string> tunable = {"threads"};
  for (int rep = 0; rep < 2; ++rep) {
    m.Observe("cpu", kCnn, Setting(1, 32), 300);
    m.Observe("cpu", kCnn, Setting(2, 32), 240);
    m.Observe("cpu", kCnn, Setting(1, 512), 500);
    m.Observe("cpu", kCnn, Setting(2, 512), 900);
  }
  EXPECT_EQ(m.BestTunables("cpu", kCnn, tunable, {{"batch_size", 32}}),
            json::parse(R"({"threads":1})"));
  EXPECT_EQ(m.BestTunables("cpu", kCnn, tunable, {{"batch_size", 512}}),
            json::parse(R"({"threads":2})"));
  // Without the trial's batch the means decide.
  EXPECT_EQ(m.BestTunables("cpu", kCnn, tunable, json::object()), json::parse(R"({"threads":2})"));
}

// Three classes, 1x, 3x and 10x, two devices each.
struct World {
  SpeedModel speeds;
  std::vector<LiveDevice> fleet;
  World() {
    for (const auto& [cls, sps] :
         std::vector<std::pair<std::string, double>>{{"slow", 100}, {"mid", 300}, {"fast", 1000}}) {
      speeds.Observe(cls, kCnn, "", sps);
      fleet.push_back({cls + "1", cls, 0});
      fleet.push_back({cls + "2", cls, 0});
    }
  }
};

WorkItem Item(WorkItem::Kind kind, int64_t id, double priority, int level, double waiting_s = 0) {
  WorkItem c;
  c.kind = kind;
  c.trial_id = id;
  c.space_priority = priority;
  c.level = level;
  c.workload = kCnn;
  c.steps = 10;
  c.waiting_s = waiting_s;
  return c;
}
WorkItem Pending(int64_t id, double priority, int level, double waiting_s = 0) {
  return Item(WorkItem::Kind::kPending, id, priority, level, waiting_s);
}
WorkItem Resume(int64_t id, double priority, int level, double waiting_s = 0) {
  return Item(WorkItem::Kind::kResume, id, priority, level, waiting_s);
}
WorkItem New(int space, double priority) {
  WorkItem c = Item(WorkItem::Kind::kNew, 0, priority, 0);
  c.space_index = space;
  return c;
}

PolicyOptions Timed() {
  PolicyOptions o;
  o.samples_per_step = 1000;
  return o;
}

// The trial id (or -1 for a new trial, or 0 for nothing) the device gets.
int64_t Pick(const PolicyDecision& d, const std::vector<WorkItem>& items) {
  if (!d.run) return 0;
  return items[d.item].kind == WorkItem::Kind::kNew ? -1 - items[d.item].space_index
                                                    : items[d.item].trial_id;
}

TEST(Policy, FastDevicesTakeImportantWorkSlowOnesExploration) {
  World w;
  const std::vector<WorkItem> items = {
      Pending(1, 0.2, 0),  // low-priority space, fresh: least important
      Pending(2, 0.8, 0),  // high-priority space
      Resume(3, 0.2, 2),   // promoted twice: 0.6
      Resume(4, 0.8, 3),   // high priority and promoted: most important
      Pending(5, 0.5, 0),
  };
  const auto fast = Decide({"fast1", "fast"}, w.fleet, items, w.speeds, Timed());
  ASSERT_TRUE(fast.run);
  EXPECT_EQ(Pick(fast, items), 4);
  EXPECT_DOUBLE_EQ(fast.estimated_seconds, 10 * 1000 / 1000.0);
  PolicyOptions no_hold_back = Timed();
  no_hold_back.hold_back_margin = 1e9;  // this test is about matching alone
  const auto slow = Decide({"slow1", "slow"}, w.fleet, items, w.speeds, no_hold_back);
  EXPECT_EQ(Pick(slow, items), 1);
  EXPECT_DOUBLE_EQ(slow.estimated_seconds, 10 * 1000 / 100.0);
  // The middle of the fleet takes the middle of the offer (importance 0.2,
  // 0.8, 0.6, 3.2, 0.5: the median is trial 3).
  EXPECT_EQ(Pick(Decide({"mid1", "mid"}, w.fleet, items, w.speeds, no_hold_back), items), 3);
}

// An item with `alike` left out after it decides as the offer with them
// listed (resume items of one rung, the same but for their trials): the
// same trial on every class, under the speed policy and shadho.
TEST(Policy, AnItemStandsForTheAlikeOnesTheOfferLeftOut) {
  World w;
  std::mt19937_64 rng(3);
  int resumed = 0;
  for (int round = 0; round < 300; ++round) {
    std::vector<WorkItem> listed, compressed;
    int64_t id = 1;
    const int groups = 1 + static_cast<int>(rng() % 5);
    for (int g = 0; g < groups; ++g) {
      const double priority = 0.1 * static_cast<double>(1 + rng() % 5);
      const int level = static_cast<int>(rng() % 3);
      const int64_t n = 1 + static_cast<int64_t>(rng() % 6);
      compressed.push_back(Resume(id, priority, level));
      compressed.back().alike = n - 1;
      for (int64_t k = 0; k < n; ++k) listed.push_back(Resume(id++, priority, level));
    }
    for (int k = static_cast<int>(rng() % 3); k > 0; --k) {
      const WorkItem fresh = New(k, 0.1 * static_cast<double>(1 + rng() % 5));
      listed.push_back(fresh);
      compressed.push_back(fresh);
    }
    for (const PolicyKind kind : {PolicyKind::kSpeed, PolicyKind::kShadho}) {
      PolicyOptions o = Timed();
      o.kind = kind;
      o.class_order = {"fast", "mid", "slow"};
      for (const char* cls : {"slow", "mid", "fast"}) {
        const AskingDevice device{std::string(cls) + "1", cls};
        const PolicyDecision a = Decide(device, w.fleet, listed, w.speeds, o);
        const PolicyDecision b = Decide(device, w.fleet, compressed, w.speeds, o);
        ASSERT_EQ(Pick(a, listed), Pick(b, compressed)) << "round " << round << " " << cls;
        EXPECT_EQ(a.reason, b.reason);
        resumed += Pick(a, listed) > 0;
      }
    }
  }
  EXPECT_GT(resumed, 300);
}

TEST(Policy, PromotionsGoToFastDevicesNewTrialsToSlowOnes) {
  World w;
  const std::vector<WorkItem> items = {New(0, 0.5), Resume(7, 0.5, 1)};
  EXPECT_EQ(Pick(Decide({"fast1", "fast"}, w.fleet, items, w.speeds, Timed()), items), 7);
  EXPECT_EQ(Pick(Decide({"slow1", "slow"}, w.fleet, items, w.speeds, Timed()), items), -1);
  // Of two spaces, the fast device starts one in the space that matters most.
  const std::vector<WorkItem> spaces = {New(0, 0.3), New(1, 0.7)};
  EXPECT_EQ(Pick(Decide({"fast1", "fast"}, w.fleet, spaces, w.speeds, Timed()), spaces), -2);
  EXPECT_EQ(Pick(Decide({"slow1", "slow"}, w.fleet, spaces, w.speeds, Timed()), spaces), -1);
}

TEST(Policy, InAFleetOfEqualsPromotionsComeFirst) {
  SpeedModel speeds;
  std::vector<LiveDevice> fleet;
  for (int i = 0; i < 4; ++i) fleet.push_back({"d" + std::to_string(i), "same", 0});
  speeds.Observe("same", kCnn, "", 500);
  // Successive halving's order: a promotion before new work, for any device.
  const std::vector<WorkItem> items = {New(0, 0.5), New(1, 0.5), Resume(9, 0.5, 1)};
  for (const auto& d : fleet) {
    EXPECT_EQ(Pick(Decide({d.id, d.device_class}, fleet, items, speeds, Timed()), items), 9)
        << d.id;
  }
}

TEST(Policy, ASlowDeviceLeavesAPromotionThatAFasterOneWouldFinishSooner) {
  World w;
  // fast2 is idle: 10 steps take it 10 s, the slow device 100 s.
  std::vector<WorkItem> items = {Resume(7, 0.5, 1)};
  auto d = Decide({"slow1", "slow"}, w.fleet, items, w.speeds, Timed());
  EXPECT_FALSE(d.run) << d.reason;
  EXPECT_GE(d.retry_after_s, 0.5);
  // With a new trial on offer it takes that instead.
  items.push_back(New(0, 0.5));
  EXPECT_EQ(Pick(Decide({"slow1", "slow"}, w.fleet, items, w.speeds, Timed()), items), -1);
  // When every faster device is busy for longer than the slow one needs, it takes the promotion.
  for (auto& dev : w.fleet) {
    if (dev.device_class != "slow") dev.busy_s = 1000;
  }
  items.pop_back();
  EXPECT_EQ(Pick(Decide({"slow1", "slow"}, w.fleet, items, w.speeds, Timed()), items), 7);
  // Without a time estimate nothing is held back.
  w.fleet = World().fleet;
  EXPECT_EQ(Pick(Decide({"slow1", "slow"}, w.fleet, items, w.speeds, PolicyOptions{}), items), 7);
}

TEST(Policy, ADeviceTheModelBarelyKnowsExploresWithANewTrial) {
  World w;
  w.speeds.AddBenchmark("gpu", 5000);  // a prior only: no trial ran there yet
  w.fleet.push_back({"gpu1", "gpu", 0});
  const std::vector<WorkItem> items = {Resume(7, 0.9, 2), New(0, 0.2), New(1, 0.8)};
  const auto d = Decide({"gpu1", "gpu"}, w.fleet, items, w.speeds, Timed());
  EXPECT_EQ(Pick(d, items), -1) << "the cheapest new trial measures it: " << d.reason;
  EXPECT_NE(d.reason.find("explore"), std::string::npos);
  // Once measured, it is matched like the rest: the fastest takes the promotion.
  w.speeds.Observe("gpu", kCnn, "", 5000);
  EXPECT_EQ(Pick(Decide({"gpu1", "gpu"}, w.fleet, items, w.speeds, Timed()), items), 7);
}

// Found by bench/hetero: a workload's configurations differ in speed several
// times over (width, batch size), so its estimate on a device stays wide
// however often it is measured, and the fastest device kept exploring with
// new trials while the best trial waited for its promotion.
TEST(Policy, ADeviceMeasuredOftenEnoughIsKnownHoweverWideItsEstimate) {
  World w;
  w.fleet.push_back({"gpu1", "gpu", 0});
  w.speeds.Observe("gpu", kCnn, "", 2000);
  w.speeds.Observe("gpu", kCnn, "", 9000);
  const std::vector<WorkItem> items = {Resume(7, 0.9, 2), New(0, 0.2), New(1, 0.8)};
  PolicyOptions options = Timed();
  ASSERT_GT(options.explore_min_observations, 2);
  const auto twice = Decide({"gpu1", "gpu"}, w.fleet, items, w.speeds, options);
  EXPECT_NE(twice.reason.find("explore"), std::string::npos)
      << "two wide observations: still exploring";
  w.speeds.Observe("gpu", kCnn, "", 16000);
  ASSERT_GT(
      w.speeds.Estimate("gpu", kCnn)->stddev / w.speeds.Estimate("gpu", kCnn)->samples_per_sec,
      options.explore_relative_stddev);
  const auto known = Decide({"gpu1", "gpu"}, w.fleet, items, w.speeds, options);
  EXPECT_EQ(Pick(known, items), 7)
      << "measured three times, the fastest takes the promotion: " << known.reason;
}

TEST(Policy, PriorsPlaceBeforeAnyObservation) {
  SpeedModel speeds;
  speeds.AddBenchmark("cpu", 50);
  speeds.AddBenchmark("gpu", 5000);
  std::vector<LiveDevice> fleet;
  for (int i = 0; i < 10; ++i) fleet.push_back({"c" + std::to_string(i), "cpu", 0});
  fleet.push_back({"g", "gpu", 0});
  const std::vector<WorkItem> items = {Pending(1, 0.5, 0), Pending(2, 0.5, 1)};
  EXPECT_EQ(Pick(Decide({"g", "gpu"}, fleet, items, speeds, PolicyOptions{}), items), 2);
  EXPECT_EQ(Pick(Decide({"c0", "cpu"}, fleet, items, speeds, PolicyOptions{}), items), 1);
  // A class nobody knows anything about sits in the middle: ties go to the first item.
  EXPECT_EQ(Pick(Decide({"x", "unknown"}, fleet, items, speeds, PolicyOptions{}), items), 1);
}

TEST(Policy, StarvingItemIsTakenBySlowDevice) {
  World w;
  PolicyOptions options;
  options.max_wait_s = 300;
  std::vector<WorkItem> items = {Pending(1, 0.2, 0), Resume(2, 0.9, 3, 299)};
  EXPECT_EQ(Pick(Decide({"slow1", "slow"}, w.fleet, items, w.speeds, options), items), 1)
      << "not starving yet: the slow device leaves the promotion alone";
  items[1].waiting_s = 301;
  items.push_back(Resume(3, 0.9, 3, 400));
  EXPECT_EQ(Pick(Decide({"slow1", "slow"}, w.fleet, items, w.speeds, options), items), 3)
      << "the longest-waiting starving item goes first";
}

TEST(Policy, NoWorkGivesNothing) {
  World w;
  const auto d = Decide({"fast1", "fast"}, w.fleet, {}, w.speeds, PolicyOptions{});
  EXPECT_FALSE(d.run);
  EXPECT_GT(d.retry_after_s, 0);
}

TEST(Policy, CostAwareSkipsDearDeviceWhenCheapOneMeetsDeadline) {
  SpeedModel speeds;
  speeds.Observe("cheap", kCnn, "", 100);
  speeds.Observe("dear", kCnn, "", 1000);
  std::vector<LiveDevice> fleet = {{"c", "cheap", 0}, {"d", "dear", 0}};
  PolicyOptions options = Timed();
  // Per sample: cheap 1/100, dear 30/1000 = 3x the cheap one.
  options.price_per_hour = {{"cheap", 1.0}, {"dear", 30.0}};
  options.deadline_s = 200;  // cheap needs 10 * 1000 / 100 = 100 s: in time
  const std::vector<WorkItem> items = {New(0, 0.5)};
  EXPECT_FALSE(Decide({"d", "dear"}, fleet, items, speeds, options).run);
  const auto cheap = Decide({"c", "cheap"}, fleet, items, speeds, options);
  ASSERT_TRUE(cheap.run);
  EXPECT_DOUBLE_EQ(cheap.estimated_seconds, 100);
  // A deadline only the dear device meets makes it the cheapest that counts.
  options.deadline_s = 50;
  EXPECT_TRUE(Decide({"d", "dear"}, fleet, items, speeds, options).run);
  EXPECT_FALSE(Decide({"c", "cheap"}, fleet, items, speeds, options).run);
  // Within 10% of the cheapest is close enough.
  options.deadline_s = 0;
  options.price_per_hour["dear"] = 10.9;
  EXPECT_TRUE(Decide({"d", "dear"}, fleet, items, speeds, options).run);
  // The deadline is weighed against the trial's remaining work, not its
  // segment: a rung-0 segment of 2 steps (20 s on cheap) of a 10-step
  // trial (100 s there) misses a 50 s deadline that only dear meets.
  options.price_per_hour["dear"] = 30;
  options.deadline_s = 50;
  std::vector<WorkItem> segment = {New(0, 0.5)};
  segment[0].steps = 2;
  segment[0].remaining_steps = 10;
  EXPECT_TRUE(Decide({"d", "dear"}, fleet, segment, speeds, options).run);
  EXPECT_FALSE(Decide({"c", "cheap"}, fleet, segment, speeds, options).run);
  segment[0].remaining_steps = 0;  // the segment is all there is: cheap meets it
  EXPECT_FALSE(Decide({"d", "dear"}, fleet, segment, speeds, options).run);
  // Starving items ignore cost.
  options.deadline_s = 0;
  std::vector<WorkItem> starving = {Pending(1, 0.5, 0, options.max_wait_s + 1)};
  EXPECT_TRUE(Decide({"d", "dear"}, fleet, starving, speeds, options).run);
}

// cost.budget: an item the asking device could not pay for out of what is
// left is not run there, under every policy kind; nothing runs once it is
// spent; an item whose cost there is unknown may run.
TEST(Policy, ABudgetLeavesOutWhatTheDeviceCannotPayFor) {
  SpeedModel speeds;
  speeds.Observe("cheap", kCnn, "", 100);
  speeds.Observe("dear", kCnn, "", 1000);
  std::vector<LiveDevice> fleet = {{"c", "cheap", 0}, {"d", "dear", 0}};
  for (const PolicyKind kind : {PolicyKind::kSpeed, PolicyKind::kFifo, PolicyKind::kShadho}) {
    SCOPED_TRACE(PolicyName(kind));
    PolicyOptions options = Timed();
    options.kind = kind;
    options.class_order = {"dear", "cheap"};
    // The same price per sample on both: 0.001 a second on cheap, 0.01 on
    // dear, ten times as fast. 10 steps of 1000 samples cost 0.10 on
    // either, a 2-step segment 0.02.
    options.price_per_hour = {{"cheap", 3.6}, {"dear", 36.0}};
    std::vector<WorkItem> items = {New(0, 0.5), New(1, 0.5)};
    items[1].steps = 2;
    options.budget_left = 0.05;
    for (const AskingDevice& device : {AskingDevice{"c", "cheap"}, AskingDevice{"d", "dear"}}) {
      const auto d = Decide(device, fleet, items, speeds, options);
      ASSERT_TRUE(d.run) << device.device_class << ": " << d.reason;
      EXPECT_EQ(d.item, 1u) << device.device_class << ": only the 2-step segment fits 0.05";
    }
    options.budget_left = 0.01;
    const auto none = Decide({"c", "cheap"}, fleet, items, speeds, options);
    EXPECT_FALSE(none.run);
    EXPECT_NE(none.reason.find("cost.budget"), std::string::npos) << none.reason;
    options.budget_left = 0;
    EXPECT_FALSE(Decide({"d", "dear"}, fleet, items, speeds, options).run) << "spent: nothing runs";
    // Unknown here: a device with no price may take it while money is left.
    options.budget_left = 0.1;
    options.price_per_hour.erase("cheap");
    EXPECT_TRUE(Decide({"c", "cheap"}, fleet, items, speeds, options).run);
  }
}

TEST(Policy, FifoGivesTheOldestWorkToWhoeverAsks) {
  World w;
  PolicyOptions options = Timed();
  options.kind = PolicyKind::kFifo;
  std::vector<WorkItem> items = {New(0, 0.5), Resume(3, 0.9, 2, 5), Pending(4, 0.1, 0, 50),
                                 New(1, 0.5)};
  items[3].preferred = true;
  for (const char* device : {"fast1", "slow1"}) {
    EXPECT_EQ(
        Pick(Decide({device, std::string(device, 4)}, w.fleet, items, w.speeds, options), items), 4)
        << device;
  }
  items.erase(items.begin() + 1, items.begin() + 3);
  EXPECT_EQ(Pick(Decide({"slow1", "slow"}, w.fleet, items, w.speeds, options), items), -2)
      << "then the space ranking's pick";
}

TEST(Policy, ShadhoTrustsTheGivenClassOrderNotMeasurements) {
  World w;  // measured: fast > mid > slow
  PolicyOptions options = Timed();
  options.kind = PolicyKind::kShadho;
  options.class_order = {"slow", "mid", "fast"};  // what the user claims
  const std::vector<WorkItem> items = {New(0, 0.2), New(1, 0.8)};
  EXPECT_EQ(Pick(Decide({"slow1", "slow"}, w.fleet, items, w.speeds, options), items), -2);
  EXPECT_EQ(Pick(Decide({"fast1", "fast"}, w.fleet, items, w.speeds, options), items), -1);
  EXPECT_EQ(ParsePolicyKind("shadho"), PolicyKind::kShadho);
  EXPECT_FALSE(ParsePolicyKind("magic"));
}

// --- What an experiment offers (scheduler/offer.h) --------------------------

search::Observation Reached(int64_t number, double value, int64_t last,
                            search::TrialStatus status) {
  search::Observation o;
  o.number = number;
  o.status = status;
  for (int64_t step = 1; step <= last; ++step) o.curve.emplace_back(step, value);
  return o;
}

TEST(Offer, PromotablePausedTrialsPendingOnesAndANewTrialPerSpace) {
  search::AshaOptions asha;
  asha.min_resource = 1;
  asha.reduction_factor = 3;
  const auto rule = *search::PromotionRule::Asha(asha, 9);  // rungs 1, 3, 9
  std::vector<search::History> histories(2);
  // Space 0: three paused at step 1 (the best, 0.1, may go on), one pending.
  histories[0].trials = {Reached(0, 0.5, 1, search::TrialStatus::kPruned),
                         Reached(1, 0.1, 1, search::TrialStatus::kPruned),
                         Reached(2, 0.9, 1, search::TrialStatus::kPruned),
                         Reached(3, 0, 0, search::TrialStatus::kRunning)};
  histories[1].trials = {Reached(4, 0.3, 2, search::TrialStatus::kRunning)};
  OfferInput in;
  in.histories = &histories;
  using Phase = OfferTrial::Phase;
  in.trials = {{10, 0, 0, Phase::kPaused, 0, 1, std::nullopt, 5, ""},
               {11, 0, 1, Phase::kPaused, 0, 1, std::nullopt, 6, ""},
               {12, 0, 2, Phase::kPaused, 0, 1, std::nullopt, 7, ""},
               {13, 0, 3, Phase::kPending, 0, 0, 1, 8, ""},
               {14, 1, 0, Phase::kOnDevice, 0, 0, 1, 0, ""}};
  in.shares = {0.7, 0.3};
  in.workloads = {"a", "b"};
  in.preferred_space = 1;
  in.max_trials = 10;
  in.max_parallel = 4;
  in.steps_per_trial = 9;
  in.promotion = &rule;
  Offer offer = OfferWork(in);
  ASSERT_EQ(offer.items.size(), 4u);  // resume 11, pending 13, new in each space
  EXPECT_EQ(offer.items[0].kind, WorkItem::Kind::kResume);
  EXPECT_EQ(offer.items[0].trial_id, 11);
  EXPECT_EQ(offer.items[0].level, 1);
  EXPECT_EQ(offer.items[0].steps, 2) << "from rung 1 to rung 3";
  EXPECT_DOUBLE_EQ(offer.items[0].waiting_s, 6);
  ASSERT_EQ(offer.promotions.size(), offer.items.size());
  EXPECT_EQ(offer.promotions[0].to_step, 3);
  EXPECT_EQ(offer.items[1].kind, WorkItem::Kind::kPending);
  EXPECT_EQ(offer.items[1].trial_id, 13);
  EXPECT_EQ(offer.items[1].steps, 1) << "its lease runs to its stop step";
  EXPECT_EQ(offer.items[2].kind, WorkItem::Kind::kNew);
  EXPECT_EQ(offer.items[2].steps, 1) << "a new trial runs to the first rung";
  // The ranking's pick first (ties go to the item listed first).
  EXPECT_TRUE(offer.items[2].preferred);
  EXPECT_EQ(offer.items[2].space_index, 1);
  EXPECT_DOUBLE_EQ(offer.items[2].space_priority, 0.3);
  EXPECT_EQ(offer.items[2].workload, "b");
  EXPECT_FALSE(offer.items[3].preferred);
  EXPECT_EQ(offer.items[3].space_index, 0);

  // At max_parallel (pending 13 and running 14 count): only the pending trial.
  in.max_parallel = 2;
  offer = OfferWork(in);
  ASSERT_EQ(offer.items.size(), 1u);
  EXPECT_EQ(offer.items[0].trial_id, 13);
  // The budget spent: promotions and pending, no new trials.
  in.max_parallel = 4;
  in.max_trials = 5;
  offer = OfferWork(in);
  ASSERT_EQ(offer.items.size(), 2u);
  // Stopping-type: a paused trial paused to move (or was preempted), so
  // every one is offered, to its end, its level the rungs it passed; new
  // trials run the whole budget.
  in.max_trials = 10;
  in.promotion = nullptr;
  in.rung_steps = {1, 3};
  offer = OfferWork(in);
  ASSERT_EQ(offer.items.size(), 6u);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(offer.items[k].kind, WorkItem::Kind::kResume);
    EXPECT_EQ(offer.items[k].trial_id, 10 + k);
    EXPECT_EQ(offer.items[k].level, 1) << "passed rung 1";
    EXPECT_EQ(offer.items[k].steps, 8) << "from step 1 to the end";
    EXPECT_TRUE(offer.promotions.at(k).to_end);
  }
  EXPECT_EQ(offer.items[3].kind, WorkItem::Kind::kPending);
  EXPECT_EQ(offer.items[4].steps, 9);
  // At max_parallel none is resumed (that would add one on a device).
  in.max_parallel = 2;
  offer = OfferWork(in);
  ASSERT_EQ(offer.items.size(), 1u);
  EXPECT_EQ(offer.items[0].trial_id, 13);
}

// fleet_sim seed 2 (stop type): a trial moved to a mid class, whose device
// then took a new trial by matching and held the mover back for the fastest
// class, busy with other promotions; it waited 117 s for an estimate of 4.
TEST(Policy, ATrialMovingToAClassGoesToItsDevicesFirst) {
  World w;
  WorkItem mover = Resume(7, 0.5, 1, 5);
  mover.moving_to = "mid";
  const std::vector<WorkItem> items = {New(0, 0.5), Resume(8, 0.5, 1, 30), mover};
  // fast2 is idle: without the mover rule, mid1 leaves both resumes to it.
  EXPECT_EQ(Pick(Decide({"mid1", "mid"}, w.fleet, items, w.speeds, Timed()), items), 7);
  // Of two movers to the class, the more advanced, then the longer waiting.
  WorkItem further = Resume(9, 0.5, 2, 1);
  further.moving_to = "mid";
  WorkItem older = mover;
  older.trial_id = 10;
  older.waiting_s = 50;
  EXPECT_EQ(Pick(Decide({"mid1", "mid"}, w.fleet, {mover, older, further}, w.speeds, Timed()),
                 std::vector<WorkItem>{mover, older, further}),
            9);
  EXPECT_EQ(Pick(Decide({"mid1", "mid"}, w.fleet, {mover, older}, w.speeds, Timed()),
                 std::vector<WorkItem>{mover, older}),
            10);
  // Another class's devices treat it as any resume: slow holds it back.
  EXPECT_NE(Pick(Decide({"slow1", "slow"}, w.fleet, items, w.speeds, Timed()), items), 7);
}

TEST(FleetSummary, FreeInCountsTheTrialsQueuedAhead) {
  FleetSummary f;
  f.Set("a", "gpu", 10);
  f.Set("b", "gpu", 30);
  f.Set("c", "gpu", 5);
  EXPECT_DOUBLE_EQ(f.FreeIn("gpu", 0, 0), 5);
  EXPECT_DOUBLE_EQ(f.FreeIn("gpu", 1, 0), 10);
  EXPECT_DOUBLE_EQ(f.FreeIn("gpu", 2, 8), 22);
  EXPECT_DOUBLE_EQ(f.FreeIn("gpu", 2, 40), 0);
  EXPECT_TRUE(std::isinf(f.FreeIn("gpu", 3, 0)));
  EXPECT_TRUE(std::isinf(f.FreeIn("cpu", 0, 0)));
}

// Migration (DecideMove), in World's fleet: slow 100, mid 300, fast 1000
// samples/s; 10 steps of 1000 samples left take 100 s here on a slow device.
std::vector<MoveTarget> Targets(double fast_free_in_s, bool fast_preemptible = false) {
  return {{"mid", 50, false, 0}, {"fast", fast_free_in_s, fast_preemptible, 1.0}};
}

TEST(Move, ATrialMovesToAnIdleFasterDevice) {
  World w;
  const WorkItem rest = Resume(7, 0.5, 1);
  const MoveDecision d = DecideMove("slow", rest, Targets(0), w.speeds, Timed());
  ASSERT_TRUE(d.move) << d.reason;
  EXPECT_EQ(d.target, 1u);
  EXPECT_FALSE(d.preempt);
  EXPECT_DOUBLE_EQ(d.seconds_here, 100);
  EXPECT_DOUBLE_EQ(d.seconds_there, 0 + 1.0 + 10) << "wait, overhead, the rest there";
}

TEST(Move, ABusyFasterDeviceIsWaitedForOnlyWhenThatIsStillSooner) {
  World w;
  const WorkItem rest = Resume(7, 0.5, 1);
  // fast frees in 75 s: 86 s there against 100 here, not by the margin
  // (1.25); mid frees in 50 s: 50 + 1 + 33 = 84 s, not either.
  EXPECT_FALSE(DecideMove("slow", rest, Targets(75), w.speeds, Timed()).move);
  // Frees in 20 s: 31 s there.
  const MoveDecision d = DecideMove("slow", rest, Targets(20), w.speeds, Timed());
  ASSERT_TRUE(d.move);
  EXPECT_EQ(d.target, 1u);
}

TEST(Move, ALessAdvancedTrialOnAFasterDeviceIsPreempted) {
  World w;
  const WorkItem rest = Resume(7, 0.5, 1);
  // fast is busy for 500 s, but what it runs would pause after its step (1 s).
  const MoveDecision d = DecideMove("slow", rest, Targets(500, true), w.speeds, Timed());
  ASSERT_TRUE(d.move) << d.reason;
  EXPECT_EQ(d.target, 1u);
  EXPECT_TRUE(d.preempt);
  EXPECT_DOUBLE_EQ(d.seconds_there, 1.0 + 1.0 + 10);
  EXPECT_NE(d.reason.find("preempting"), std::string::npos) << d.reason;
  // Not preemptible: it stays (500 s there).
  EXPECT_FALSE(DecideMove("slow", rest, Targets(500, false), w.speeds, Timed()).move);
}

TEST(Move, NothingMovesFromTheFastestOrWithoutSpeedsOrUnderTheBaselines) {
  World w;
  const WorkItem rest = Resume(7, 0.5, 1);
  EXPECT_FALSE(
      DecideMove("fast", rest, {{"slow", 0, true, 0}, {"mid", 0, true, 0}}, w.speeds, Timed())
          .move);
  // Unknown samples per step: no time estimates.
  EXPECT_FALSE(DecideMove("slow", rest, Targets(0), w.speeds, PolicyOptions{}).move);
  // A class never measured for the workload is no target.
  EXPECT_FALSE(DecideMove("slow", rest, {{"gpu", 0, false, 0}}, w.speeds, Timed()).move);
  // Nor is a device of unknown speed moved.
  EXPECT_FALSE(DecideMove("new-class", rest, Targets(0), w.speeds, Timed()).move);
  // fifo and shadho place a trial once.
  for (const PolicyKind kind : {PolicyKind::kFifo, PolicyKind::kShadho}) {
    PolicyOptions o = Timed();
    o.kind = kind;
    EXPECT_FALSE(DecideMove("slow", rest, Targets(0), w.speeds, o).move) << PolicyName(kind);
  }
  // The last steps: the move's overhead outweighs them.
  WorkItem last = rest;
  last.steps = 1;  // 10 s here; 1 + 1 s there, and 2 * 1.25 < 10: still moves
  EXPECT_TRUE(DecideMove("slow", last, Targets(0), w.speeds, Timed()).move);
  PolicyOptions dear = Timed();
  dear.move_overhead_s = 9;
  EXPECT_FALSE(DecideMove("slow", last, Targets(0), w.speeds, dear).move);
}

// Found by bench/hetero: under promotion-type ASHA an unexplored space
// ranks with the best explored space's priority, so the new trials of two
// spaces tie, and with new trials listed by space index the first space won
// every tie: shadho ran 164 MLP trials and no CNN in 135 s, every seed. Every
// policy on every device now starts the space the ranking picks.
TEST(Offer, TiedSpacesTakeTurnsThroughTheRankingsPick) {
  std::vector<search::History> histories(2);
  OfferInput in;
  in.histories = &histories;
  for (int i = 0; i < 5; ++i) {
    // Paused at rung 1 (promotion ASHA's results so far); space 1 untried.
    histories[0].trials.push_back(Reached(i, 0.2 + 0.1 * i, 1, search::TrialStatus::kPruned));
    in.trials.push_back({100 + i, 0, static_cast<size_t>(i), OfferTrial::Phase::kFinished, 0, 1,
                         std::nullopt, 0, ""});
  }
  const auto ranks =
      search::RankSpaces({testing::Box("mlp", 2, 0, 1), testing::Box("cnn", 2, 0, 1)}, histories);
  ASSERT_DOUBLE_EQ(ranks[0].share, ranks[1].share)
      << "an unexplored space ranks with the best explored one";
  in.shares = {ranks[0].share, ranks[1].share};
  in.workloads = {kMlp, kCnn};
  in.preferred_space = search::PickSpace(ranks, {5, 0});
  ASSERT_EQ(in.preferred_space, 1);
  in.max_trials = 100;
  in.max_parallel = 3;
  in.steps_per_trial = 8;
  const Offer offer = OfferWork(in);
  // Space 0 has had its share (5 of 6 with one more): only space 1 is offered.
  ASSERT_EQ(offer.items.size(), 1u);

  SpeedModel speeds;
  std::vector<LiveDevice> fleet;
  for (const auto& [cls, sps] :
       std::vector<std::pair<std::string, double>>{{"x1.0", 400}, {"x0.5", 200}, {"x0.2", 100}}) {
    speeds.Observe(cls, kMlp, "", 10 * sps);  // measured: matching, not exploration, decides
    speeds.Observe(cls, kCnn, "", sps);
    fleet.push_back({cls, cls, 0});
  }
  for (const PolicyKind kind : {PolicyKind::kSpeed, PolicyKind::kFifo, PolicyKind::kShadho}) {
    PolicyOptions options = Timed();
    options.kind = kind;
    options.class_order = {"x1.0", "x0.5", "x0.2"};
    for (const auto& d : fleet) {
      EXPECT_EQ(
          Pick(Decide({d.id, d.device_class}, fleet, offer.items, speeds, options), offer.items),
          -2)
          << PolicyName(kind) << " on " << d.id;
    }
  }
}

// Two spaces with shares 0.6 and 0.4, room for every trial on a device.
OfferInput TwoSpaces(const std::vector<search::History>& histories, int64_t max_trials) {
  OfferInput in;
  in.histories = &histories;
  in.shares = {0.6, 0.4};
  in.workloads = {kMlp, kCnn};
  in.max_trials = max_trials;
  in.max_parallel = 100;
  in.steps_per_trial = 8;
  return in;
}

// Found by bench/hetero: every space's new trial was offered, so the fastest
// worker (q = 1) took the top-share space's every time, and made most of
// the trials: 66 MLPs to 13 CNNs in one run with shares near 1:1.
TEST(Offer, NewTrialsKeepTheRankingsSplitBetweenSpaces) {
  std::vector<search::History> histories(2);
  OfferInput in = TwoSpaces(histories, 100);
  const auto add = [&](size_t space) {
    const size_t index = histories[space].trials.size();
    histories[space].trials.push_back(
        Reached(static_cast<int>(in.trials.size()), 0.5, 1, search::TrialStatus::kPruned));
    in.trials.push_back({static_cast<int64_t>(in.trials.size() + 1), space, index,
                         OfferTrial::Phase::kFinished, 0, 1, std::nullopt, 0, ""});
  };
  const auto new_spaces = [&] {
    std::vector<int> out;
    for (const auto& item : OfferWork(in).items) {
      if (item.kind == WorkItem::Kind::kNew) out.push_back(item.space_index);
    }
    return out;
  };
  in.preferred_space = 0;
  EXPECT_EQ(new_spaces(), (std::vector<int>{0, 1})) << "no trials yet: both are below their share";
  for (int i = 0; i < 3; ++i) add(0);
  add(1);
  // 3 and 1 of 4: space 0's share of 5 is 3.0, not above its 3 trials.
  in.preferred_space = 1;
  EXPECT_EQ(new_spaces(), (std::vector<int>{1}));
  add(1);
  add(1);
  // 3 and 3 of 6: space 0's share of 7 is 4.2 > 3, space 1's is 2.8 < 3.
  in.preferred_space = 0;
  EXPECT_EQ(new_spaces(), (std::vector<int>{0}));
  // The preferred space is offered whatever the counts.
  in.preferred_space = 1;
  EXPECT_EQ(new_spaces(), (std::vector<int>{1, 0}));
}

// A caller may count its finished trials instead of listing them (the
// engine has thousands, and listed them on every lease): the split between
// spaces and the budget see them the same way.
TEST(Offer, FinishedTrialsCountedOrListedMakeTheSameOffer) {
  std::vector<search::History> histories(2);
  OfferInput listed = TwoSpaces(histories, 7);
  listed.preferred_space = 0;
  OfferInput counted = listed;
  counted.finished_per_space = {0, 0};
  const auto finish = [&](size_t space) {
    const size_t index = histories[space].trials.size();
    histories[space].trials.push_back(
        Reached(static_cast<int>(index), 0.5, 1, search::TrialStatus::kPruned));
    listed.trials.push_back({static_cast<int64_t>(listed.trials.size() + 1), space, index,
                             OfferTrial::Phase::kFinished, 0, 1, std::nullopt, 0, ""});
    ++counted.finished_per_space[space];
  };
  const auto news = [](const OfferInput& in) {
    std::vector<int> out;
    for (const auto& item : OfferWork(in).items) {
      if (item.kind == WorkItem::Kind::kNew) out.push_back(item.space_index);
    }
    return out;
  };
  for (int i = 0; i < 3; ++i) finish(0);
  finish(1);
  EXPECT_EQ(news(counted), news(listed));
  EXPECT_EQ(news(counted), (std::vector<int>{0, 1})) << "3 and 1 of 4: both below their share of 5";
  finish(1);
  finish(1);
  EXPECT_EQ(news(counted), news(listed));
  EXPECT_EQ(news(counted), (std::vector<int>{0})) << "3 and 3 of 6: space 1's share of 7 is 2.8";
  finish(0);
  // 7 trials: the budget.
  EXPECT_TRUE(news(listed).empty());
  EXPECT_TRUE(news(counted).empty()) << "the counted trials do not count toward max_trials";
}

TEST(Offer, TrialsOnDevicesCountedOrListedMakeTheSameOffer) {
  // A pending trial waits in space 1; trials go onto devices in space 0
  // until max_parallel: counted or listed, the offer is the same, and at the
  // cap only the pending trial is offered.
  std::vector<search::History> histories(2);
  OfferInput listed = TwoSpaces(histories, 20);
  listed.max_parallel = 4;
  listed.preferred_space = 0;
  histories[1].trials.push_back(Reached(0, 0.5, 1, search::TrialStatus::kRunning));
  listed.trials.push_back({1, 1, 0, OfferTrial::Phase::kPending, 0, 0, std::nullopt, 0, ""});
  OfferInput counted = listed;
  counted.on_device_per_space = {0, 0};
  const auto run = [&](size_t space) {
    const size_t index = histories[space].trials.size();
    histories[space].trials.push_back(
        Reached(static_cast<int>(index + 1), 0.5, 1, search::TrialStatus::kRunning));
    listed.trials.push_back({static_cast<int64_t>(listed.trials.size() + 1), space, index,
                             OfferTrial::Phase::kOnDevice, 0, 1, std::nullopt, 0, ""});
    ++counted.on_device_per_space[space];
  };
  const auto kinds = [](const OfferInput& in) {
    std::vector<std::pair<int, int>> out;  // (kind, space)
    for (const auto& item : OfferWork(in).items)
      out.emplace_back(static_cast<int>(item.kind), item.space_index);
    return out;
  };
  run(0);
  EXPECT_EQ(kinds(counted), kinds(listed));
  EXPECT_EQ(kinds(counted).size(), 3u)
      << "the pending trial and a new trial per space below its share";
  run(0);
  EXPECT_EQ(kinds(counted), kinds(listed)) << "space 0 holds 2 of 3 trials: above its share of 4";
  run(1);
  EXPECT_EQ(kinds(counted),
            (std::vector<std::pair<int, int>>{{static_cast<int>(WorkItem::Kind::kPending), 1}}))
      << "3 on devices and 1 pending: max_parallel, so only the pending trial";
  EXPECT_EQ(kinds(counted), kinds(listed));
}

}  // namespace
}  // namespace hpo::scheduler
