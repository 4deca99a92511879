// The fleet summary (scheduler/fleet_summary.h) that placement reads instead
// of the device list: after any sequence of changes it must say what a
// recount of every device says, and Decide on it must decide what Decide on
// the device list decides.
#include "scheduler/fleet_summary.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "scheduler/policy.h"
#include "search/random.h"

namespace hpo::scheduler {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Device {
  std::string device_class;
  double free_at_s = 0;
};
using Devices = std::map<std::string, Device>;

// The brute-force recount, device by device, as the policy used to do it on
// every call: a class's count with the asking device in it (where listed,
// else in its own class), and the soonest any other device is free.
std::vector<FleetSummary::ClassView> Recount(const Devices& devices, const std::string& asking_id,
                                             const std::string& asking_class, double now_s) {
  std::map<std::string, int> count;
  std::map<std::string, double> soonest;
  for (const auto& [id, d] : devices) {
    ++count[d.device_class];
    soonest.emplace(d.device_class, kInf);
    if (id == asking_id) continue;
    const double busy =
        std::max(0.0, d.free_at_s - now_s);  // NaN: 0, as a NaN busy time always was
    soonest[d.device_class] = std::min(soonest[d.device_class], busy);
  }
  if (!devices.count(asking_id)) {
    ++count[asking_class];
    soonest.emplace(asking_class, kInf);
  }
  std::vector<FleetSummary::ClassView> out;
  for (const auto& [cls, n] : count) out.push_back({cls, n, soonest[cls]});
  return out;
}

std::vector<LiveDevice> List(const Devices& devices, double now_s) {
  std::vector<LiveDevice> out;
  for (const auto& [id, d] : devices)
    out.push_back({id, d.device_class, std::max(0.0, d.free_at_s - now_s)});
  return out;
}

void ExpectSame(const std::vector<FleetSummary::ClassView>& got,
                const std::vector<FleetSummary::ClassView>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].device_class, want[i].device_class) << i;
    EXPECT_EQ(got[i].devices, want[i].devices) << got[i].device_class;
    EXPECT_EQ(got[i].soonest_free_s, want[i].soonest_free_s) << got[i].device_class;
  }
}

// A random change: a device joins, moves class, starts or ends work (times
// drawn from a few values, so that ties are common), or leaves.
void Change(search::Rng& r, double now_s, FleetSummary& summary, Devices& devices) {
  const std::string id = "d" + std::to_string(r.Below(40));
  const std::string cls = "c" + std::to_string(r.Below(5));
  const double u = r.Uniform();
  const double free_at = u < 0.2   ? now_s  // just idle
                         : u < 0.3 ? -kInf  // never busy
                         : u < 0.35
                             ? std::numeric_limits<double>::quiet_NaN()  // an unknown estimate
                         : u < 0.4 ? kInf
                         : u < 0.6 ? now_s + 5  // ties
                                   : now_s + 100 * r.Uniform();
  const double what = r.Uniform();
  if (what < 0.35) {
    summary.Set(id, cls, free_at);
    devices[id] = {cls, free_at};
  } else if (what < 0.8) {
    const bool listed = devices.count(id) > 0;
    EXPECT_EQ(summary.SetFreeAt(id, free_at), listed) << id;
    if (listed) devices[id].free_at_s = free_at;
  } else {
    summary.Remove(id);
    devices.erase(id);
  }
}

TEST(FleetSummary, MatchesARecountOfEveryDeviceAfterEachChange) {
  search::Rng r(7);
  FleetSummary summary;
  Devices devices;
  double now = 1000;
  for (int step = 0; step < 5000; ++step) {
    now += 3 * r.Uniform();
    Change(r, now, summary, devices);
    if (step % 1000 == 999) {
      summary.Clear();
      devices.clear();
    }
    ASSERT_EQ(summary.size(), devices.size());
    // A listed device, an unlisted one in a listed class or in a class of its
    // own, and a listed one that says another class than it is listed under.
    const std::vector<std::pair<std::string, std::string>> askers = {
        {"d" + std::to_string(r.Below(40)), "c" + std::to_string(r.Below(5))},
        {"new", "c" + std::to_string(r.Below(5))},
        {"new", "c9"},
        {"new", "a"}};
    for (const auto& [id, cls] : askers) {
      SCOPED_TRACE("step " + std::to_string(step) + ", asking " + id + " of " + cls);
      EXPECT_EQ(summary.Contains(id), devices.count(id) > 0);
      ExpectSame(summary.ClassesFor(id, cls, now), Recount(devices, id, cls, now));
      if (HasFailure()) return;
    }
  }
}

TEST(FleetSummary, TheAskingDeviceIsLeftOutOfItsClassesSoonestFreeTime) {
  FleetSummary s;
  s.Set("a", "gpu", 105);  // the asker, the soonest free of its class
  s.Set("b", "gpu", 130);
  s.Set("c", "cpu", 90);
  auto v = s.ClassesFor("a", "gpu", 100);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].device_class, "cpu");
  EXPECT_EQ(v[0].soonest_free_s, 0) << "free since 90";
  EXPECT_EQ(v[1].devices, 2);
  EXPECT_EQ(v[1].soonest_free_s, 30) << "b's, not the asker's own 5";
  // Another device free at the same time as the asker: that time stays.
  s.Set("b", "gpu", 105);
  EXPECT_EQ(s.ClassesFor("a", "gpu", 100)[1].soonest_free_s, 5);
  // Alone in its class: no other device there.
  s.Remove("b");
  EXPECT_EQ(s.ClassesFor("a", "gpu", 100)[1].soonest_free_s, kInf);
  EXPECT_EQ(s.ClassesFor("a", "gpu", 100)[1].devices, 1);
  // A class whose last device left is gone, and an unlisted asker is
  // counted in its own class.
  s.Remove("c");
  v = s.ClassesFor("z", "tpu", 100);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].device_class, "gpu");
  EXPECT_EQ(v[0].soonest_free_s, 5) << "a's, since a is not asking";
  EXPECT_EQ(v[1].device_class, "tpu");
  EXPECT_EQ(v[1].devices, 1);
}

// Speeds for five classes, some measured (with ties), some known only by a
// benchmark, one not at all.
SpeedModel Speeds() {
  SpeedModel m;
  for (int c = 0; c < 4; ++c) m.AddBenchmark("c" + std::to_string(c), 10.0 * (c + 1));
  for (const auto& [cls, sps] :
       std::vector<std::pair<std::string, double>>{{"c0", 100}, {"c1", 300}, {"c2", 300}}) {
    for (int k = 0; k < 3; ++k) m.Observe(cls, "w0", "", sps * (1 + 0.01 * k));
    m.Observe(cls, "w1", "", 2 * sps);
  }
  return m;
}

std::vector<WorkItem> Items(search::Rng& r) {
  std::vector<WorkItem> items;
  const int n = 1 + static_cast<int>(r.Below(7));
  for (int i = 0; i < n; ++i) {
    WorkItem it;
    it.kind = static_cast<WorkItem::Kind>(r.Below(3));
    it.trial_id = i + 1;
    it.space_index = static_cast<int>(r.Below(2));
    it.space_priority = 0.1 * (1 + static_cast<double>(r.Below(5)));
    it.level = it.kind == WorkItem::Kind::kNew ? 0 : static_cast<int>(r.Below(3));
    it.workload = r.Uniform() < 0.5 ? "w0" : "w1";
    it.steps = 1 + static_cast<int64_t>(r.Below(20));
    it.waiting_s = it.kind == WorkItem::Kind::kNew ? 0 : 700 * r.Uniform();
    it.preferred = r.Uniform() < 0.3;
    items.push_back(it);
  }
  return items;
}

TEST(FleetSummary, DecideOnAKeptSummaryDecidesWhatDecideOnTheDeviceListDoes) {
  search::Rng r(11);
  const SpeedModel speeds = Speeds();
  FleetSummary summary;
  Devices devices;
  double now = 50;
  int held_back = 0, ran = 0;
  for (int step = 0; step < 3000; ++step) {
    now += r.Uniform();
    Change(r, now, summary, devices);
    if (devices.empty()) continue;
    const std::vector<WorkItem> items = Items(r);
    const auto listed = std::next(devices.begin(), static_cast<long>(r.Below(devices.size())));
    const AskingDevice asking = r.Uniform() < 0.8
                                    ? AskingDevice{listed->first, listed->second.device_class}
                                    : AskingDevice{"new", "c" + std::to_string(r.Below(6))};
    for (const PolicyKind kind : {PolicyKind::kSpeed, PolicyKind::kFifo, PolicyKind::kShadho}) {
      PolicyOptions o;
      o.kind = kind;
      o.samples_per_step = 1000;
      o.explore_relative_stddev =
          r.Uniform() < 0.5 ? 0.25 : 10;  // often matching and hold-back, not exploration
      o.class_order = {"c3", "c1", "c2", "c0"};
      if (r.Uniform() < 0.3) {
        o.price_per_hour = {{"c0", 1.0}, {"c2", 3.0}};
        if (r.Uniform() < 0.5) o.deadline_s = 30;
      }
      SCOPED_TRACE("step " + std::to_string(step) + ", " + PolicyName(kind) + ", asking " +
                   asking.id);
      const PolicyDecision kept = Decide(asking, summary, now, items, speeds, o);
      const PolicyDecision listed_d = Decide(asking, List(devices, now), items, speeds, o);
      EXPECT_EQ(kept.run, listed_d.run);
      EXPECT_EQ(kept.item, listed_d.item);
      EXPECT_EQ(kept.estimated_seconds, listed_d.estimated_seconds);
      EXPECT_EQ(kept.retry_after_s, listed_d.retry_after_s);
      EXPECT_EQ(kept.reason, listed_d.reason);
      if (HasFailure()) return;
      held_back += kept.reason.rfind("held back", 0) == 0;
      ran += kept.run;
    }
  }
  // The comparison reached the rules that read the fleet's free times.
  EXPECT_GT(held_back, 0);
  EXPECT_GT(ran, 0);
}

}  // namespace
}  // namespace hpo::scheduler
