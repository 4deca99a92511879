// The engine's fleet view (server/engine/fleet_view.h) keeps the placement
// policy's fleet summary itself: read with the fleet, then changed device by
// device as placement marks devices busy or idle and as a device asks. A
// real SQLite store; the store's clock is a fake one, placement's busy times
// run on the steady clock, so only bounds of them are checked.
#include "server/engine/fleet_view.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "scheduler/fleet_summary.h"
#include "testing/stall_gate.h"
#include "testing/store_backends.h"
#include "testing/store_wrapper.h"

namespace hpo::server {
namespace {

using Clock = FleetView::Clock;

class FleetViewTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store::StoreOptions o;
    o.clock = clock_.fn();
    auto s = store::OpenStore(backend_.url(), o);
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = std::move(s).value();
  }
  // A worker with one device of `device_class`; its id and the device's.
  std::pair<store::Id, store::Id> AddWorker(const std::string& host,
                                            const std::string& device_class) {
    store::NewWorker w;
    w.host = host;
    store::DeviceInfo d;
    d.name = device_class;
    d.device_class = device_class;
    d.cores = 1;
    d.memory_bytes = 1;
    d.benchmark_gflops = 10;
    w.devices.push_back(d);
    auto r = store_->RegisterWorker(w);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return {0, 0};
    return {r->id, r->devices.at(0).id};
  }
  // The summary's classes as `device` of `device_class` sees them now.
  std::vector<scheduler::FleetSummary::ClassView> Classes(FleetView& view, store::Id device,
                                                          const std::string& device_class) {
    auto f = view.Fresh(device, Clock::now());
    EXPECT_TRUE(f.ok()) << f.status();
    if (!f.ok()) return {};
    return (*f)->live.ClassesFor(std::to_string(device), device_class,
                                 FleetView::Seconds(Clock::now()));
  }

  testing::FakeClock clock_;
  testing::SqliteBackend backend_;
  std::unique_ptr<store::Store> store_;
};

TEST_F(FleetViewTest, KeepsThePolicysSummaryAsDevicesBecomeBusyIdleAndLive) {
  const auto [wa, a] = AddWorker("a", "fast");
  const auto [wb, b] = AddWorker("b", "fast");
  const auto [wc, c] = AddWorker("c", "slow");
  // c's worker has not been seen for longer than the live window.
  clock_.Advance(120'000);
  ASSERT_TRUE(store_->TouchWorker(wa).ok());
  ASSERT_TRUE(store_->TouchWorker(wb).ok());
  FleetView view(*store_, std::chrono::hours(1), std::chrono::seconds(60), clock_.fn());
  {
    auto f = view.Fresh(a, Clock::now());
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ((*f)->live.size(), 2u);
    EXPECT_FALSE((*f)->live.Contains(std::to_string(c))) << "not live";
  }
  auto fast = Classes(view, a, "fast");
  ASSERT_EQ(fast.size(), 1u);
  EXPECT_EQ(fast[0].devices, 2);
  EXPECT_EQ(fast[0].soonest_free_s, 0) << "b is idle";

  view.SetBusy(b, 100);
  fast = Classes(view, a, "fast");
  ASSERT_EQ(fast.size(), 1u);
  EXPECT_GT(fast[0].soonest_free_s, 50) << "b is busy for 100 s from when it was marked";
  EXPECT_LE(fast[0].soonest_free_s, 100);
  // Seen from b itself, its own lease does not count.
  EXPECT_EQ(Classes(view, b, "fast")[0].soonest_free_s, 0) << "a is idle";

  view.SetIdle(b);
  EXPECT_EQ(Classes(view, a, "fast")[0].soonest_free_s, 0);
  view.SetBusy(b, 100);
  view.SetBusy(b, 0);  // no estimate: not busy
  EXPECT_EQ(Classes(view, a, "fast")[0].soonest_free_s, 0);

  // A device that asks is live, and counts from then on.
  view.SetBusy(c, 100);  // not live yet: remembered, not in the summary
  const auto seen_by_c = Classes(view, c, "slow");
  ASSERT_EQ(seen_by_c.size(), 2u);
  EXPECT_EQ(seen_by_c[1].device_class, "slow");
  EXPECT_EQ(seen_by_c[1].devices, 1);
  const auto seen_by_a = Classes(view, a, "fast");
  ASSERT_EQ(seen_by_a.size(), 2u);
  EXPECT_EQ(seen_by_a[1].device_class, "slow");
  EXPECT_GT(seen_by_a[1].soonest_free_s, 50) << "c's busy time, kept while it was not live";
}

// A store whose reads of speed observations (what a fleet reread reads
// last) stall while armed, until released.
class StalledFleetReads : public testing::StoreWrapper, public testing::StallGate {
 public:
  using StoreWrapper::StoreWrapper;
  Result<std::vector<store::SpeedObservationRecord>> ListSpeedObservations(
      std::string_view workload, int64_t limit) override {
    StallWhileArmed();
    return StoreWrapper::ListSpeedObservations(workload, limit);
  }
};

// The fleet is reread once it is older than fleet_cache: workers, devices
// and thousands of observations. Leases of devices the view knows, and the
// reports' speed observations, go on with the view being replaced while the
// store is read, and an observation made meanwhile is in the new view.
TEST_F(FleetViewTest, LeasesAndReportsDoNotWaitForARereadOfTheFleet) {
  const auto [wa, a] = AddWorker("a", "fast");
  const auto [wb, b] = AddWorker("b", "fast");
  StalledFleetReads stalled(*store_);
  FleetView view(stalled, std::chrono::milliseconds(1), std::chrono::seconds(60), clock_.fn());
  ASSERT_TRUE(view.Fresh(a, Clock::now()).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  stalled.Arm();
  std::optional<Status> reread;
  std::thread reader([&] { reread = view.Fresh(a, Clock::now()).status(); });
  const bool stalled_reading = stalled.WaitUntilStalled(std::chrono::seconds(30));
  // (The 30 s only keep a broken view from hanging the test.)
  auto lease = std::async(std::launch::async, [&] { return view.Fresh(b, Clock::now()).ok(); });
  auto report = std::async(std::launch::async, [&] {
    view.Observe(b, "fast", "w", 1, {1, 0}, {123.0, nlohmann::json::object(), 0, 1});
    view.SetBusy(b, 10);
  });
  const bool leased = lease.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  const bool reported = report.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  stalled.Release();
  reader.join();
  ASSERT_TRUE(stalled_reading) << "no lease reread the fleet";
  EXPECT_TRUE(leased) << "a lease waited for another lease's reread of the fleet";
  EXPECT_TRUE(reported) << "a report waited for a lease's reread of the fleet";
  ASSERT_TRUE(reread && reread->ok()) << (reread ? *reread : Status::Internal("no reply"));
  EXPECT_TRUE(lease.get());
  auto f = view.Fresh(a, Clock::now() - std::chrono::hours(1));  // the view as it is, not reread
  ASSERT_TRUE(f.ok()) << f.status();
  const auto estimate = (*f)->model.Estimate("fast", "w");
  ASSERT_TRUE(estimate.has_value());
  EXPECT_EQ(estimate->observations, 1)
      << "the observation made during the reread is not in the new view";
  EXPECT_DOUBLE_EQ(estimate->samples_per_sec, 123.0);
  const auto fast =
      (*f)->live.ClassesFor(std::to_string(a), "fast", FleetView::Seconds(Clock::now()));
  ASSERT_EQ(fast.size(), 1u);
  EXPECT_GT(fast[0].soonest_free_s, 0)
      << "b's busy time, set during the reread, is not in the new view";
}

// Samples per step come from the time between a trial's reports within one
// segment: a trial paused at a rung and resumed later, on
// another device or the same one, counts none of its pause. The steady
// clock the view measures on is a fake one here, moved by the test.
TEST_F(FleetViewTest, SamplesPerStepCountsTrainingTimeOnly) {
  const auto [wa, a] = AddWorker("a", "fast");
  const auto [wb, b] = AddWorker("b", "slow");
  auto steady = std::make_shared<Clock::time_point>(Clock::now());
  FleetView view(*store_, std::chrono::hours(1), std::chrono::seconds(60), clock_.fn(),
                 [steady] { return *steady; });
  const auto second = [&](double s) {
    *steady += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  };
  // 100 samples/s and one step a second: 100 samples per step.
  const auto report = [&](store::Id device, int64_t step, TrialSegment segment,
                          store::Id trial = 7) {
    view.Observe(device, device == a ? "fast" : "slow", "w", step, segment,
                 {100.0, nlohmann::json::object(), 0, trial});
  };
  EXPECT_EQ(view.SamplesPerStep("w"), 0) << "nothing reported yet";
  report(a, 1, {1, 0});
  EXPECT_EQ(view.SamplesPerStep("w"), 0) << "a first report measures nothing";
  second(1);
  report(a, 2, {1, 0});
  EXPECT_DOUBLE_EQ(view.SamplesPerStep("w"), 100);

  // Paused after step 2 for an hour, then resumed on b: its first report
  // there is no step of training. (The old estimate, from every pair of
  // reports, made this 360,000 samples per step; the median of two picks
  // the larger.)
  second(3600);
  report(b, 3, {1, 2});
  EXPECT_DOUBLE_EQ(view.SamplesPerStep("w"), 100) << "the pause counted as training";
  second(2);  // b is slower: two seconds a step
  report(b, 4, {1, 2});
  EXPECT_DOUBLE_EQ(view.SamplesPerStep("w"), 200) << "the upper median of 100 and 200";

  // Paused again, resumed on the same device b: still a new segment.
  second(3600);
  report(b, 5, {1, 4});
  second(2);
  report(b, 6, {1, 4});
  second(3600);
  // An expired lease of the same segment, leased again (attempt 2) on b.
  report(b, 7, {2, 4});
  // Another trial on a, one step in two reports two seconds apart: 100 each.
  report(a, 1, {1, 0}, 8);
  second(2);
  report(a, 3, {1, 0}, 8);
  EXPECT_DOUBLE_EQ(view.SamplesPerStep("w"), 200)
      << "estimates 100, 200, 200, 100: the upper median";
  report(a, 4, {1, 0}, 8);  // no time passed: nothing measured
  EXPECT_DOUBLE_EQ(view.SamplesPerStep("w"), 200);
  EXPECT_EQ(view.SamplesPerStep("other"), 0);
}

// A worker that leaves takes its devices out of placement's summary at
// once, busy ones included; one of them asking again is live again.
TEST_F(FleetViewTest, AWorkerThatLeavesIsNotLive) {
  const auto [wa, a] = AddWorker("a", "fast");
  const auto [wb, b] = AddWorker("b", "fast");
  FleetView view(*store_, std::chrono::hours(1), std::chrono::seconds(60), clock_.fn());
  ASSERT_EQ(Classes(view, a, "fast").at(0).devices, 2);
  view.SetBusy(b, 100);
  view.Left(wb);
  {
    auto f = view.Fresh(a, Clock::now());
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_FALSE((*f)->live.Contains(std::to_string(b)));
    EXPECT_FALSE((*f)->devices.at(b).live);
    EXPECT_TRUE((*f)->devices.at(a).live);
  }
  ASSERT_EQ(Classes(view, a, "fast").at(0).devices, 1);
  const auto seen_by_b = Classes(view, b, "fast");
  ASSERT_EQ(seen_by_b.size(), 1u);
  EXPECT_EQ(seen_by_b[0].devices, 2) << "b asked: live again";
  EXPECT_EQ(Classes(view, a, "fast").at(0).soonest_free_s, 0) << "its busy time went with it";
}

}  // namespace
}  // namespace hpo::server
