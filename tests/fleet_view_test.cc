// The engine's fleet view (server/engine/fleet_view.h) keeps the placement
// policy's fleet summary itself: read with the fleet, then changed device by
// device as placement marks devices busy or idle and as a device asks. A
// real SQLite store; the store's clock is a fake one, placement's busy times
// run on the steady clock, so only bounds of them are checked.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "scheduler/fleet_summary.h"
#include "server/engine/fleet_view.h"
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
  std::pair<store::Id, store::Id> AddWorker(const std::string& host, const std::string& device_class) {
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
    return (*f)->live.ClassesFor(std::to_string(device), device_class, FleetView::Seconds(Clock::now()));
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
  Result<std::vector<store::SpeedObservationRecord>> ListSpeedObservations(std::string_view workload,
                                                                           int64_t limit) override {
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
    view.Observe(b, "fast", "w", 1, {123.0, nlohmann::json::object(), 0, 1});
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
  EXPECT_EQ(estimate->observations, 1) << "the observation made during the reread is not in the new view";
  EXPECT_DOUBLE_EQ(estimate->samples_per_sec, 123.0);
  const auto fast = (*f)->live.ClassesFor(std::to_string(a), "fast", FleetView::Seconds(Clock::now()));
  ASSERT_EQ(fast.size(), 1u);
  EXPECT_GT(fast[0].soonest_free_s, 0) << "b's busy time, set during the reread, is not in the new view";
}

}  // namespace
}  // namespace hpo::server
