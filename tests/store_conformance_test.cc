// One suite, run unchanged against every store backend (typed tests).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "server/store/store.h"
#include "testing/store_backends.h"

namespace hpo::store {
namespace {

using hpo::testing::FakeClock;

template <typename Backend>
class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HPO_REQUIRE_BACKEND(Backend);
    backend_ = std::make_unique<Backend>();
    store_ = Open();
  }

  std::unique_ptr<Store> Open() {
    StoreOptions options;
    options.clock = clock_.fn();
    auto s = OpenStore(backend_->url(), options);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  ExperimentRecord MakeExperiment(std::vector<std::string> spaces = {}) {
    NewExperiment e{"exp", R"({"objective":"loss"})", {}};
    for (auto& s : spaces) e.spaces.push_back({s, "{}"});
    auto r = store_->CreateExperiment(e);
    EXPECT_TRUE(r.ok()) << r.status();
    return *r;
  }

  std::vector<TrialRecord> MakeTrials(Id exp, int n, std::vector<double> priorities = {}) {
    std::vector<NewTrial> ts(n);
    for (int i = 0; i < n; ++i) {
      ts[i].params_json = R"({"lr":)" + std::to_string(0.001 * (i + 1)) + "}";
      if (i < static_cast<int>(priorities.size())) ts[i].priority = priorities[i];
    }
    auto r = store_->CreateTrials(exp, ts);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : std::vector<TrialRecord>{};
  }

  TrialRecord Lease(const std::string& owner, TimeMs lease_ms = 60'000) {
    auto r = store_->LeaseNextTrial({owner, lease_ms, std::nullopt, std::nullopt});
    EXPECT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r.ok() && r->has_value()) << "nothing to lease";
    return r.ok() && r->has_value() ? **r : TrialRecord{};
  }

  Measurement Step(int64_t step, double loss) {
    Measurement m;
    m.step = step;
    m.metrics_json = R"({"loss":)" + std::to_string(loss) + "}";
    m.samples_per_sec = 1000 + step;
    m.system_setting_json = R"({"batch_size":64})";
    return m;
  }

  // Runs each of `calls` on a thread of its own, all at once, through a
  // second handle whose batches hold exactly calls.size() calls: its window
  // is long enough that the first caller waits for the last, so the calls
  // meet in one batch without any timing in the test. Returns the sizes of
  // the batches that handle committed (one of calls.size() when it works).
  std::vector<size_t> RunAsOneBatch(const std::vector<std::function<void(Store&)>>& calls) {
    std::mutex mu;
    std::vector<size_t> sizes;
    StoreOptions options;
    options.clock = clock_.fn();
    options.group_commit_max_batch = static_cast<int>(calls.size());
    options.group_commit_window = std::chrono::seconds(60);
    options.on_group_commit = [&](size_t n) {
      std::lock_guard lock(mu);
      sizes.push_back(n);
    };
    auto opened = OpenStore(backend_->url(), options);
    EXPECT_TRUE(opened.ok()) << opened.status();
    if (!opened.ok()) return {};
    std::vector<std::thread> threads;
    for (const auto& call : calls) threads.emplace_back([&call, &opened] { call(**opened); });
    for (auto& t : threads) t.join();
    std::lock_guard lock(mu);
    return sizes;
  }

  FakeClock clock_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Store> store_;
};

using Backends = ::testing::Types<hpo::testing::SqliteBackend, hpo::testing::PostgresBackend>;
struct BackendNames {
  template <typename T>
  static std::string GetName(int) {
    return T::kName;
  }
};
TYPED_TEST_SUITE(StoreTest, Backends, BackendNames);

// --- migrations --------------------------------------------------------------

TYPED_TEST(StoreTest, MigrationsApplyOnceAndReopenIsANoOp) {
  auto v1 = this->store_->SchemaVersion();
  ASSERT_TRUE(v1.ok()) << v1.status();
  EXPECT_GE(*v1, 1);
  auto e = this->MakeExperiment();
  this->store_.reset();
  auto again = this->Open();
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(*again->SchemaVersion(), *v1);
  auto got = again->GetExperiment(e.id);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->name, "exp");
}

TYPED_TEST(StoreTest, RefusesASchemaNewerThanTheBinary) {
  this->store_.reset();
  this->backend_->Raw(
      "INSERT INTO schema_version (version, name, applied_ms) VALUES (999, 'future', 0)");
  auto s = OpenStore(this->backend_->url());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("999"), std::string::npos) << s.status();
  EXPECT_NE(s.status().message().find("newer than this binary"), std::string::npos);
}

// --- experiments ----------------------------------------------------------------

TYPED_TEST(StoreTest, CreatesExperimentsWithTheirSpaces) {
  auto e = this->MakeExperiment({"mlp", "cnn"});
  EXPECT_GT(e.id, 0);
  EXPECT_EQ(e.state, ExperimentState::kRunning);
  ASSERT_EQ(e.spaces.size(), 2u);
  auto got = this->store_->GetExperiment(e.id);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->spec_json, R"({"objective":"loss"})");
  ASSERT_EQ(got->spaces.size(), 2u);
  EXPECT_EQ(got->spaces[0].name, "mlp");
  EXPECT_EQ(got->spaces[1].name, "cnn");
  EXPECT_EQ(got->created_ms, *this->clock_.now);
}

TYPED_TEST(StoreTest, RejectsBadExperimentsNamingTheField) {
  auto r = this->store_->CreateExperiment({"", "{}", {}});
  EXPECT_TRUE(r.status().IsInvalidArgument());
  r = this->store_->CreateExperiment({"x", "{}", {{"a", "{}"}, {"a", "{}"}}});
  ASSERT_TRUE(r.status().IsInvalidArgument());
  EXPECT_NE(r.status().message().find("spaces[1].name"), std::string::npos) << r.status();
  auto list = this->store_->ListExperiments(0, 10);
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->empty()) << "a rejected experiment left rows behind";
  EXPECT_TRUE(this->store_->GetExperiment(12345).status().IsNotFound());
  EXPECT_TRUE(this->store_->GetExperimentState(12345).status().IsNotFound());
}

// The state a report checks, read alone: what GetExperiment says.
TYPED_TEST(StoreTest, AnExperimentsStateReadAloneIsGetExperimentsState) {
  const auto running = this->MakeExperiment({"a"});
  const auto cancelled = this->MakeExperiment({"b"});
  const auto completed = this->MakeExperiment({"c"});
  ASSERT_TRUE(this->store_->FinishExperiment(cancelled.id, ExperimentState::kCancelled, "x").ok());
  ASSERT_TRUE(this->store_->FinishExperiment(completed.id, ExperimentState::kCompleted, "y").ok());
  for (const auto& [id, want] : {std::pair{running.id, ExperimentState::kRunning},
                                 std::pair{cancelled.id, ExperimentState::kCancelled},
                                 std::pair{completed.id, ExperimentState::kCompleted}}) {
    auto state = this->store_->GetExperimentState(id);
    ASSERT_TRUE(state.ok()) << state.status();
    EXPECT_EQ(*state, want) << id;
    EXPECT_EQ(*state, this->store_->GetExperiment(id)->state) << id;
  }
}

TYPED_TEST(StoreTest, ListsExperimentsNewestFirstWithPaging) {
  std::vector<Id> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(this->MakeExperiment({"s" + std::to_string(i)}).id);
  auto page = this->store_->ListExperiments(1, 2);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->size(), 2u);
  EXPECT_EQ((*page)[0].id, ids[3]);
  EXPECT_EQ((*page)[1].id, ids[2]);
  ASSERT_EQ((*page)[0].spaces.size(), 1u);
  EXPECT_EQ((*page)[0].spaces[0].name, "s3");
}

TYPED_TEST(StoreTest, CancellingAnExperimentCancelsItsUnfinishedTrials) {
  auto e = this->MakeExperiment();
  this->MakeTrials(e.id, 3);
  auto leased = this->Lease("w1");
  ASSERT_TRUE(this->store_->FinishExperiment(e.id, ExperimentState::kCancelled, "by user").ok());
  auto counts = this->store_->CountTrials(e.id);
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ(counts->cancelled, 3);
  EXPECT_EQ(counts->total(), 3);
  // The reason is the experiment's, kept once; its trials only point there.
  EXPECT_EQ(this->store_->GetExperiment(e.id)->reason, "by user");
  for (const auto& t : *this->store_->ListTrials(e.id, {}))
    EXPECT_EQ(t.reason, "experiment cancelled") << t.id;
  // Nothing can be leased or added any more, and it cannot end twice.
  auto none = this->store_->LeaseNextTrial({"w2", 1000, e.id, std::nullopt});
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  EXPECT_TRUE(this->store_->CreateTrials(e.id, {NewTrial{}}).status().IsFailedPrecondition());
  EXPECT_TRUE(
      this->store_->FinishExperiment(e.id, ExperimentState::kCompleted, "").IsFailedPrecondition());
  EXPECT_TRUE(this->store_->GetExperiment(e.id)->finished_ms.has_value());
}

TYPED_TEST(StoreTest, CompletingAnExperimentLetsRunningTrialsFinish) {
  auto e = this->MakeExperiment();
  this->MakeTrials(e.id, 2);
  auto running = this->Lease("w1");
  ASSERT_TRUE(this->store_->FinishExperiment(e.id, ExperimentState::kCompleted, "budget").ok());
  EXPECT_TRUE(this->store_->FinishTrial(running.id, "w1", {TrialState::kCompleted, "{}", ""}).ok());
  auto counts = *this->store_->CountTrials(e.id);
  EXPECT_EQ(counts.completed, 1);
  EXPECT_EQ(counts.cancelled, 1);
}

// --- trials and leases -------------------------------------------------------

// What the fleet runs now, for every experiment in one read: leased and
// running trials of running experiments only, newest experiment first,
// leased before running, then by number.
TYPED_TEST(StoreTest, ListsLeasedTrialsOfEveryRunningExperimentInOneRead) {
  auto older = this->MakeExperiment();
  auto newer = this->MakeExperiment();
  auto ended = this->MakeExperiment();
  auto to = this->MakeTrials(older.id, 4);
  auto tn = this->MakeTrials(newer.id, 2);
  auto te = this->MakeTrials(ended.id, 1);
  for (const auto& t : {to[0], to[1], to[3], tn[1], te[0]}) {
    ASSERT_TRUE(this->store_->LeaseTrial(t.id, "w/" + std::to_string(t.id), 60'000).ok());
  }
  // older: 0 running, 1 completed, 2 pending, 3 leased.
  ASSERT_TRUE(this->store_
                  ->ReportMeasurement(to[0].id, "w/" + std::to_string(to[0].id), this->Step(0, 0.5),
                                      std::nullopt)
                  .ok());
  ASSERT_TRUE(this->store_
                  ->FinishTrial(to[1].id, "w/" + std::to_string(to[1].id),
                                {TrialState::kCompleted, "{}", ""})
                  .ok());
  ASSERT_TRUE(this->store_->FinishExperiment(ended.id, ExperimentState::kCompleted, "budget").ok());
  auto all = this->store_->ListLeasedTrials(100);
  ASSERT_TRUE(all.ok()) << all.status();
  std::vector<std::pair<Id, TrialState>> got;
  for (const auto& t : *all) got.emplace_back(t.id, t.state);
  const std::vector<std::pair<Id, TrialState>> want = {{tn[1].id, TrialState::kLeased},
                                                       {to[3].id, TrialState::kLeased},
                                                       {to[0].id, TrialState::kRunning}};
  EXPECT_EQ(got, want);
  EXPECT_EQ((*all)[0].lease_owner, "w/" + std::to_string(tn[1].id));
  EXPECT_EQ(this->store_->ListLeasedTrials(2)->size(), 2u);
  EXPECT_TRUE(this->store_->ListLeasedTrials(-1).status().IsInvalidArgument());
}

TYPED_TEST(StoreTest, NumbersTrialsWithinTheirExperiment) {
  auto a = this->MakeExperiment();
  auto b = this->MakeExperiment();
  auto ta = this->MakeTrials(a.id, 2);
  auto tb = this->MakeTrials(b.id, 1);
  auto ta2 = this->MakeTrials(a.id, 1);
  ASSERT_EQ(ta.size(), 2u);
  EXPECT_EQ(ta[0].number, 0);
  EXPECT_EQ(ta[1].number, 1);
  EXPECT_EQ(tb[0].number, 0);
  EXPECT_EQ(ta2[0].number, 2);
  EXPECT_EQ(ta[0].state, TrialState::kPending);
  EXPECT_EQ(ta[0].attempt, 0);
}

TYPED_TEST(StoreTest, CreateTrialsUpToABudgetNeverExceedsIt) {
  auto e = this->MakeExperiment();
  std::vector<NewTrial> three(3);
  auto a = this->store_->CreateTrialsUpTo(e.id, three, {.max_total = 5});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->size(), 3u);
  auto b = this->store_->CreateTrialsUpTo(e.id, three, {.max_total = 5});
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(b->size(), 2u);
  EXPECT_EQ((*b)[1].number, 4);
  auto c = this->store_->CreateTrialsUpTo(e.id, three, {.max_total = 5});
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->empty());
  EXPECT_EQ(this->store_->CountTrials(e.id)->total(), 5);
}

TYPED_TEST(StoreTest, CreateTrialsUpToKeepsUnfinishedTrialsWithinTheirCap) {
  // What max_parallel needs when two servers top up one experiment at once.
  auto e = this->MakeExperiment();
  const std::vector<NewTrial> four(4);
  const Store::TrialLimits cap{.max_unfinished = 3};
  auto a = this->store_->CreateTrialsUpTo(e.id, four, cap);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->size(), 3u);
  auto none = this->store_->CreateTrialsUpTo(e.id, four, cap);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty()) << "3 pending already";
  // Leased and running trials count; finished ones free their place.
  auto t1 = this->Lease("w");
  auto t2 = this->Lease("w");
  ASSERT_TRUE(this->store_->FinishTrial(t1.id, "w", FinishRequest{}).ok());
  auto one = this->store_->CreateTrialsUpTo(e.id, four, cap);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->size(), 1u);
  const auto n = *this->store_->CountTrials(e.id);
  EXPECT_EQ(n.pending + n.leased + n.running, 3);
  EXPECT_EQ(n.total(), 4);
  (void)t2;
}

TYPED_TEST(StoreTest, TwoHandlesToppingUpAtOnceNeverExceedTheUnfinishedCap) {
  auto e = this->MakeExperiment();
  std::unique_ptr<Store> other = this->Open();
  const std::vector<NewTrial> eight(8);
  const Store::TrialLimits cap{.max_unfinished = 8};
  std::thread t([&] {
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(other->CreateTrialsUpTo(e.id, eight, cap).ok());
  });
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(this->store_->CreateTrialsUpTo(e.id, eight, cap).ok());
  t.join();
  EXPECT_EQ(this->store_->CountTrials(e.id)->pending, 8);
}

TYPED_TEST(StoreTest, ListsAnExperimentsMeasurementsByTrialAndStep) {
  auto e = this->MakeExperiment();
  auto other = this->MakeExperiment();
  this->MakeTrials(e.id, 2);
  this->MakeTrials(other.id, 1);
  auto t1 = this->Lease("w");
  auto t2 = this->Lease("w");
  auto t3 = this->Lease("w");
  for (const auto* t : {&t2, &t1, &t3}) {
    for (int step : {1, 0}) {
      ASSERT_TRUE(
          this->store_
              ->ReportMeasurement(t->id, "w", this->Step(step, 1.0 / (step + 1)), std::nullopt)
              .ok());
    }
  }
  auto ms = this->store_->ListExperimentMeasurements(e.id);
  ASSERT_TRUE(ms.ok()) << ms.status();
  ASSERT_EQ(ms->size(), 4u);
  EXPECT_EQ((*ms)[0].trial_id, t1.id);
  EXPECT_EQ((*ms)[0].step, 0);
  EXPECT_EQ((*ms)[1].step, 1);
  EXPECT_EQ((*ms)[3].trial_id, t2.id);
  EXPECT_TRUE(this->store_->ListExperimentMeasurements(999).status().IsNotFound());
}

// A trial's events are kept in order; a limit keeps the newest; a trial
// that does not exist has none to add or list.
TYPED_TEST(StoreTest, ATrialsEventsAreKeptInOrderAndTheNewestListed) {
  auto e = this->MakeExperiment();
  this->MakeTrials(e.id, 2);
  auto t = this->Lease("w");
  auto other = this->Lease("w");
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(
        this->store_->AddTrialEvent(t.id, "trial.paused", R"({"step":)" + std::to_string(i) + "}")
            .ok());
  }
  ASSERT_TRUE(this->store_->AddTrialEvent(other.id, "trial.moving", "{}").ok());
  auto all = this->store_->ListTrialEvents(t.id, 10);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0].type, "trial.paused");
  EXPECT_EQ((*all)[0].data_json, R"({"step":0})");
  EXPECT_EQ((*all)[2].data_json, R"({"step":2})");
  EXPECT_EQ((*all)[2].trial_id, t.id);
  EXPECT_GT((*all)[2].created_ms, 0);
  auto newest = this->store_->ListTrialEvents(t.id, 2);
  ASSERT_TRUE(newest.ok() && newest->size() == 2u);
  EXPECT_EQ((*newest)[0].data_json, R"({"step":1})") << "the newest two, oldest first";
  EXPECT_TRUE(this->store_->AddTrialEvent(999, "trial.paused", "{}").IsNotFound());
  EXPECT_TRUE(this->store_->ListTrialEvents(999, 10).status().IsNotFound());
}

// A page of trials' progress in one read: the highest step's metrics
// (reported out of order here), the device time summed, the device class
// that trained it longest, trials outside
// the numbers asked for and trials with no step left out.
TYPED_TEST(StoreTest, APageOfTrialsProgressIsItsLastStepAndItsDeviceTime) {
  auto e = this->MakeExperiment();
  auto other = this->MakeExperiment();
  this->MakeTrials(e.id, 4);
  this->MakeTrials(other.id, 1);
  std::vector<TrialRecord> t;
  for (int i = 0; i < 5; ++i) t.push_back(this->Lease("w"));
  ASSERT_EQ(t[0].experiment_id, e.id);
  ASSERT_EQ(t[4].experiment_id, other.id);
  for (const int step : {2, 0, 1}) {  // trial number 0
    Measurement m = this->Step(step, 1.0 / (step + 1));
    // 600 ms on cpu:x1, then its last step, 300 ms, on gpu:T4.
    m.device_ms = step == 0 ? 400 : 100 * (step + 1);
    m.device_class = step == 2 ? "gpu:T4" : "cpu:x1";
    m.cost = 0.5;
    ASSERT_TRUE(this->store_->ReportMeasurement(t[0].id, "w", m, std::nullopt).ok());
  }
  ASSERT_TRUE(
      this->store_->ReportMeasurement(t[2].id, "w", this->Step(0, 0.75), std::nullopt).ok());
  Measurement other_metric = this->Step(1, 0.5);
  other_metric.metrics_json =
      R"({"accuracy":0.01})";  // never the best loss, though the smallest number
  ASSERT_TRUE(this->store_->ReportMeasurement(t[2].id, "w", other_metric, std::nullopt).ok());
  ASSERT_TRUE(this->store_->ReportMeasurement(t[3].id, "w", this->Step(5, 0.1), std::nullopt).ok());
  ASSERT_TRUE(this->store_->ReportMeasurement(t[4].id, "w", this->Step(0, 0.2), std::nullopt).ok());

  const Objective loss{"loss", false};
  auto page = this->store_->ListTrialProgress(e.id, 0, 2, loss);
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->size(), 2u) << "number 1 stored no step; number 3 is past the page";
  const TrialProgress& first = page->at(t[0].id);
  EXPECT_EQ(first.steps, 3);
  EXPECT_EQ(first.last_step, 2);
  EXPECT_EQ(nlohmann::json::parse(first.last_metrics_json),
            nlohmann::json::parse(this->Step(2, 1.0 / 3).metrics_json));
  EXPECT_EQ(first.best_step, 2) << "the smallest loss";
  EXPECT_EQ(first.best_metrics_json, first.last_metrics_json);
  EXPECT_EQ(first.device_ms, 900);
  EXPECT_DOUBLE_EQ(first.cost, 1.5);
  EXPECT_EQ(first.device_class, "cpu:x1") << "the class with the most device time, not the last";
  EXPECT_EQ(page->at(t[2].id).device_class, "") << "no step named a device class";
  EXPECT_EQ(page->at(t[2].id).last_step, 1);
  EXPECT_EQ(page->at(t[2].id).best_step, 0) << "a step without the metric is never best";
  EXPECT_EQ(page->at(t[2].id).device_ms, 0);
  auto maximized = this->store_->ListTrialProgress(e.id, 0, 0, {"loss", true});
  ASSERT_TRUE(maximized.ok()) << maximized.status();
  EXPECT_EQ(maximized->at(t[0].id).best_step, 0) << "the largest loss";
  EXPECT_EQ(nlohmann::json::parse(maximized->at(t[0].id).best_metrics_json)["loss"], 1.0);
  auto one = this->store_->ListTrialProgress(e.id, 3, 3, loss);
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ(one->at(t[3].id).last_step, 5);
  EXPECT_TRUE(this->store_->ListTrialProgress(999, 0, 10, loss).status().IsNotFound());
}

// Each step's device time and cost are kept with it and summed per
// experiment (cost.budget's spend), with and without a speed observation
// in the same write, and a repeated step is not counted twice.
TYPED_TEST(StoreTest, StepsKeepTheirDeviceTimeAndCostAndSumPerExperiment) {
  auto e = this->MakeExperiment();
  auto other = this->MakeExperiment();
  this->MakeTrials(e.id, 1);
  this->MakeTrials(other.id, 1);
  auto t = this->Lease("w");
  auto o = this->Lease("w");
  auto none = this->store_->ExperimentUsage(e.id);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->device_ms, 0);
  EXPECT_EQ(none->cost, 0);
  Measurement m = this->Step(0, 0.5);
  m.device_ms = 1500;
  m.cost = 0.25;
  ASSERT_TRUE(this->store_->ReportMeasurement(t.id, "w", m, std::nullopt).ok());
  ASSERT_TRUE(this->store_->ReportMeasurement(t.id, "w", m, std::nullopt).ok())
      << "a repeat is acknowledged";
  m.step = 1;
  m.device_ms = 500;
  m.cost = 0.125;
  NewWorker w{"h", "{}", {{0, DeviceKind::kCpu, "cpu", "cpu:x1", 1, 1, 1}}, ""};
  const Id dev = this->store_->RegisterWorker(w)->devices.at(0).id;
  m.device_id = dev;
  m.device_class = "cpu:x1";
  ASSERT_TRUE(this->store_
                  ->ReportMeasurement(t.id, "w", m, std::nullopt,
                                      SpeedObservation{dev, "cpu:x1", "mlp", "{}", 100, t.id})
                  .ok());
  m.device_id.reset();
  m.device_class.clear();
  m.device_ms = 9000;
  m.cost = 7;
  ASSERT_TRUE(this->store_->ReportMeasurement(o.id, "w", m, std::nullopt).ok());
  auto used = this->store_->ExperimentUsage(e.id);
  ASSERT_TRUE(used.ok()) << used.status();
  EXPECT_EQ(used->device_ms, 2000);
  EXPECT_DOUBLE_EQ(used->cost, 0.375);
  auto ms = this->store_->ListMeasurements(t.id);
  ASSERT_TRUE(ms.ok() && ms->size() == 2u);
  EXPECT_EQ((*ms)[0].device_ms, 1500);
  EXPECT_DOUBLE_EQ((*ms)[1].cost, 0.125);
  EXPECT_FALSE((*ms)[0].device_id) << "no device given";
  EXPECT_EQ((*ms)[0].device_class, "");
  EXPECT_EQ((*ms)[1].device_id, dev) << "the device each step ran on";
  EXPECT_EQ((*ms)[1].device_class, "cpu:x1");
  auto by_experiment = this->store_->ListExperimentMeasurements(e.id);
  ASSERT_TRUE(by_experiment.ok() && by_experiment->size() == 2u);
  EXPECT_EQ((*by_experiment)[1].device_id, dev);
  auto all = this->store_->ListExperimentMeasurements(other.id);
  ASSERT_TRUE(all.ok() && all->size() == 1u);
  EXPECT_EQ((*all)[0].device_ms, 9000);
  EXPECT_TRUE(this->store_->ExperimentUsage(999).status().IsNotFound());
}

TYPED_TEST(StoreTest, CreateTrialsIsAllOrNothing) {
  auto e = this->MakeExperiment({"mlp"});
  auto other = this->MakeExperiment({"cnn"});
  std::vector<NewTrial> ts(3);
  ts[0].space_id = e.spaces[0].id;
  ts[2].space_id = other.spaces[0].id;  // belongs to another experiment
  auto r = this->store_->CreateTrials(e.id, ts);
  ASSERT_TRUE(r.status().IsInvalidArgument()) << r.status();
  EXPECT_NE(r.status().message().find("trials[2].space_id"), std::string::npos) << r.status();
  EXPECT_EQ(this->store_->CountTrials(e.id)->total(), 0);
  EXPECT_TRUE(this->store_->CreateTrials(999, {NewTrial{}}).status().IsNotFound());
}

// Every field of a new trial is stored as given, byte for byte and bit for
// bit, and the refusals name what is wrong (PostgreSQL makes trials in one
// statement of its own, hpo_create_trials; SQLite in separate ones).
TYPED_TEST(StoreTest, NewTrialsKeepEveryFieldAndTheirRefusalsSayWhy) {
  auto e = this->MakeExperiment({"mlp", "cnn"});
  std::vector<NewTrial> ts(3);
  ts[0].space_id = e.spaces[1].id;
  ts[0].params_json = R"({"name":"d\u00e9j\u00e0 \"vu\" \\ 'q' {}[],","lr":0.1})";
  ts[0].system_params_json = R"({"threads":3})";
  ts[0].priority = 0.1 + 0.2;  // not a short decimal
  ts[0].stop_step = 9;
  ts[1].params_json = "{\"emoji\":\"\xF0\x9F\x99\x82\",\"tab\":\"a\tb\"}";
  ts[1].priority = -1e-300;
  ts[1].lease_owner = "worker/7 'gpu:0'";
  ts[1].lease_ms = 1234;
  ts[2].space_id = e.spaces[0].id;
  ts[2].priority = 1.7976931348623157e308;
  auto made = this->store_->CreateTrialsUpTo(e.id, ts, {});
  ASSERT_TRUE(made.ok()) << made.status();
  ASSERT_EQ(made->size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    auto got = this->store_->GetTrial((*made)[i].id);
    ASSERT_TRUE(got.ok()) << got.status();
    for (const TrialRecord* t : {&(*made)[i], &*got}) {
      EXPECT_EQ(t->number, static_cast<int64_t>(i));
      EXPECT_EQ(t->space_id, ts[i].space_id) << i;
      EXPECT_EQ(t->params_json, ts[i].params_json) << i;
      EXPECT_EQ(t->system_params_json, ts[i].system_params_json) << i;
      EXPECT_EQ(t->priority, ts[i].priority) << i;
      EXPECT_EQ(t->stop_step, ts[i].stop_step) << i;
      EXPECT_EQ(t->lease_owner, ts[i].lease_owner) << i;
      EXPECT_EQ(t->created_ms, *this->clock_.now);
      const bool leased = !ts[i].lease_owner.empty();
      EXPECT_EQ(t->state, leased ? TrialState::kLeased : TrialState::kPending) << i;
      EXPECT_EQ(t->attempt, leased ? 1 : 0) << i;
      EXPECT_EQ(t->started_ms, leased ? std::optional<TimeMs>(*this->clock_.now) : std::nullopt)
          << i;
      EXPECT_EQ(t->lease_expires_ms,
                leased ? std::optional<TimeMs>(*this->clock_.now + 1234) : std::nullopt)
          << i;
    }
  }
  NewTrial forever;
  forever.lease_owner = "w";
  forever.lease_ms = std::numeric_limits<TimeMs>::max() - 1;
  auto too_long = this->store_->CreateTrialsUpTo(e.id, {forever}, {});
  ASSERT_TRUE(too_long.status().IsInvalidArgument()) << too_long.status();
  EXPECT_NE(too_long.status().message().find("lease_ms"), std::string::npos) << too_long.status();

  // Only the trials the limits let in are checked: a bad space past them
  // is never looked at.
  std::vector<NewTrial> tail(2);
  tail[1].space_id = 999999;
  auto one = this->store_->CreateTrialsUpTo(e.id, tail, {.max_total = 4});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->size(), 1u);
  auto bad = this->store_->CreateTrialsUpTo(e.id, tail, {});
  ASSERT_TRUE(bad.status().IsInvalidArgument()) << bad.status();
  EXPECT_NE(bad.status().message().find(
                "trials[1].space_id: search space 999999 is not part of experiment " +
                std::to_string(e.id)),
            std::string::npos)
      << bad.status();

  auto missing = this->store_->CreateTrialsUpTo(e.id + 1000, {NewTrial{}}, {});
  ASSERT_TRUE(missing.status().IsNotFound()) << missing.status();
  EXPECT_NE(missing.status().message().find("experiment " + std::to_string(e.id + 1000) +
                                            " does not exist"),
            std::string::npos)
      << missing.status();
  ASSERT_TRUE(this->store_->FinishExperiment(e.id, ExperimentState::kCancelled, "").ok());
  auto ended = this->store_->CreateTrialsUpTo(e.id, {NewTrial{}}, {});
  ASSERT_EQ(ended.status().code(), StatusCode::kFailedPrecondition) << ended.status();
  EXPECT_NE(ended.status().message().find("has ended (cancelled)"), std::string::npos)
      << ended.status();
  EXPECT_EQ(this->store_->CountTrials(e.id)->total(), 4);
}

TYPED_TEST(StoreTest, LeasesByPriorityThenAge) {
  auto e = this->MakeExperiment();
  auto ts = this->MakeTrials(e.id, 3, {0, 5, 0});
  EXPECT_EQ(this->Lease("w").id, ts[1].id);
  auto first = this->Lease("w");
  EXPECT_EQ(first.id, ts[0].id);
  EXPECT_EQ(first.state, TrialState::kLeased);
  EXPECT_EQ(first.attempt, 1);
  EXPECT_EQ(first.lease_owner, "w");
  EXPECT_EQ(*first.lease_expires_ms, *this->clock_.now + 60'000);
  EXPECT_EQ(this->Lease("w").id, ts[2].id);
  auto none = this->store_->LeaseNextTrial({"w", 1000, std::nullopt, std::nullopt});
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
}

TYPED_TEST(StoreTest, LeaseFiltersByExperimentAndSpace) {
  auto a = this->MakeExperiment({"mlp", "cnn"});
  auto b = this->MakeExperiment();
  this->MakeTrials(b.id, 1);
  std::vector<NewTrial> ts(2);
  ts[0].space_id = a.spaces[0].id;
  ts[1].space_id = a.spaces[1].id;
  auto created = *this->store_->CreateTrials(a.id, ts);
  auto r = this->store_->LeaseNextTrial({"w", 1000, a.id, a.spaces[1].id});
  ASSERT_TRUE(r.ok() && r->has_value());
  EXPECT_EQ((*r)->id, created[1].id);
  r = this->store_->LeaseNextTrial({"w", 1000, a.id, std::nullopt});
  ASSERT_TRUE(r.ok() && r->has_value());
  EXPECT_EQ((*r)->id, created[0].id);
  r = this->store_->LeaseNextTrial({"w", 1000, a.id, std::nullopt});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_value()) << "leased a trial of another experiment";
}

TYPED_TEST(StoreTest, LeasingAGivenTrialIsACompareAndSet) {
  auto e = this->MakeExperiment();
  auto ts = this->MakeTrials(e.id, 1);
  auto r = this->store_->LeaseTrial(ts[0].id, "w1", 1000);
  ASSERT_TRUE(r.ok()) << r.status();
  auto again = this->store_->LeaseTrial(ts[0].id, "w2", 1000);
  ASSERT_TRUE(again.status().IsFailedPrecondition());
  EXPECT_NE(again.status().message().find("leased"), std::string::npos) << again.status();
  EXPECT_TRUE(this->store_->LeaseTrial(4242, "w1", 1000).status().IsNotFound());
  EXPECT_TRUE(this->store_->LeaseNextTrial({"", 1000, std::nullopt, std::nullopt})
                  .status()
                  .IsInvalidArgument());
}

TYPED_TEST(StoreTest, ReportsAreIdempotentPerStep) {
  auto e = this->MakeExperiment();
  this->MakeTrials(e.id, 1);
  auto t = this->Lease("w1");
  auto r = this->store_->ReportMeasurement(t.id, "w1", this->Step(0, 0.9), std::nullopt);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->inserted);
  EXPECT_EQ(this->store_->GetTrial(t.id)->state, TrialState::kRunning);
  r = this->store_->ReportMeasurement(t.id, "w1", this->Step(0, 0.1), std::nullopt);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->inserted);
  ASSERT_TRUE(this->store_->ReportMeasurement(t.id, "w1", this->Step(1, 0.5), std::nullopt).ok());
  auto ms = this->store_->ListMeasurements(t.id);
  ASSERT_TRUE(ms.ok());
  ASSERT_EQ(ms->size(), 2u);
  EXPECT_EQ((*ms)[0].metrics_json, R"({"loss":0.900000})") << "a repeated step overwrote the first";
  EXPECT_EQ((*ms)[1].step, 1);
  EXPECT_DOUBLE_EQ((*ms)[1].samples_per_sec, 1001);
  EXPECT_EQ((*ms)[1].system_setting_json, R"({"batch_size":64})");
}

TYPED_TEST(StoreTest, OnlyTheLeaseHolderReports) {
  auto e = this->MakeExperiment();
  auto ts = this->MakeTrials(e.id, 2);
  auto t = this->Lease("w1");
  auto r = this->store_->ReportMeasurement(t.id, "w2", this->Step(0, 1), std::nullopt);
  ASSERT_TRUE(r.status().IsFailedPrecondition());
  EXPECT_NE(r.status().message().find("'w1'"), std::string::npos) << r.status();
  r = this->store_->ReportMeasurement(ts[1].id, "w1", this->Step(0, 1), std::nullopt);
  EXPECT_TRUE(r.status().IsFailedPrecondition()) << "reported on a pending trial";
  EXPECT_TRUE(this->store_->ReportMeasurement(999, "w1", this->Step(0, 1), std::nullopt)
                  .status()
                  .IsNotFound());
  Measurement bad = this->Step(-1, 1);
  EXPECT_TRUE(
      this->store_->ReportMeasurement(t.id, "w1", bad, std::nullopt).status().IsInvalidArgument());
  EXPECT_TRUE(this->store_->ListMeasurements(t.id)->empty());
}

TYPED_TEST(StoreTest, ReportsAndRenewalsExtendTheLease) {
  auto e = this->MakeExperiment();
  this->MakeTrials(e.id, 1);
  auto t = this->Lease("w1", 1000);
  this->clock_.Advance(800);
  ASSERT_TRUE(this->store_->ReportMeasurement(t.id, "w1", this->Step(0, 1), 1000).ok());
  this->clock_.Advance(800);
  ASSERT_TRUE(this->store_->RenewLease(t.id, "w1", 1000).ok());
  this->clock_.Advance(800);
  auto reclaimed = this->store_->ReclaimExpiredLeases(3);
  ASSERT_TRUE(reclaimed.ok());
  EXPECT_TRUE(reclaimed->empty()) << "a renewed lease was reclaimed";
  EXPECT_TRUE(this->store_->RenewLease(t.id, "w2", 1000).IsFailedPrecondition());
}

TYPED_TEST(StoreTest, RenewsManyLeasesInOneCallAndNamesTheOnesItCannot) {
  auto e = this->MakeExperiment();
  auto ts = this->MakeTrials(e.id, 4);
  auto mine = this->Lease("w1", 1000);
  auto done = this->Lease("w1", 1000);
  auto theirs = this->Lease("w2", 1000);
  ASSERT_TRUE(this->store_->FinishTrial(done.id, "w1", {TrialState::kCompleted, "{}", ""}).ok());
  const Id pending = ts[3].id;
  this->clock_.Advance(800);
  auto lost = this->store_->RenewLeases({mine.id, done.id, theirs.id, pending, 999}, "w1", 1000);
  ASSERT_TRUE(lost.ok()) << lost.status();
  EXPECT_EQ(*lost, (std::vector<Id>{done.id, theirs.id, pending, 999}));
  EXPECT_EQ(*this->store_->GetTrial(mine.id)->lease_expires_ms, *this->clock_.now + 1000);
  EXPECT_EQ(*this->store_->GetTrial(theirs.id)->lease_expires_ms, *this->clock_.now - 800 + 1000)
      << "another owner's lease was renewed";
  EXPECT_TRUE(this->store_->RenewLeases({}, "w1", 1000)->empty());
  EXPECT_TRUE(this->store_->RenewLeases({mine.id}, "", 1000).status().IsInvalidArgument());
}

// A worker that says what it holds ends its other leases (answers it never
// got); nobody else's lease and none it holds changes.
TYPED_TEST(StoreTest, LeasesTheOwnerDoesNotHoldExpireAndAreReclaimed) {
  auto e = this->MakeExperiment();
  auto ts = this->MakeTrials(e.id, 5);
  auto held = this->Lease("w1", 1000);
  auto lost = this->Lease("w1", 1000);
  auto done = this->Lease("w1", 1000);
  auto theirs = this->Lease("w2", 1000);
  ASSERT_TRUE(this->store_->FinishTrial(done.id, "w1", {TrialState::kCompleted, "{}", ""}).ok());
  auto expired = this->store_->ExpireLeasesNotHeld("w1", {held.id, 999});
  ASSERT_TRUE(expired.ok()) << expired.status();
  EXPECT_EQ(*expired, std::vector<Id>{lost.id});
  EXPECT_TRUE(this->store_->ExpireLeasesNotHeld("w1", {held.id})->empty()) << "expired twice";
  ASSERT_EQ(*this->store_->ReclaimExpiredLeases(3), std::vector<Id>{lost.id});
  EXPECT_EQ(this->store_->GetTrial(lost.id)->state, TrialState::kPending);
  EXPECT_EQ(this->store_->GetTrial(held.id)->state, TrialState::kLeased);
  EXPECT_EQ(this->store_->GetTrial(theirs.id)->state, TrialState::kLeased)
      << "another owner's lease ended";
  EXPECT_EQ(this->store_->GetTrial(done.id)->state, TrialState::kCompleted);
  EXPECT_EQ(this->store_->GetTrial(ts[4].id)->state, TrialState::kPending);
  EXPECT_TRUE(this->store_->ExpireLeasesNotHeld("", {}).status().IsInvalidArgument());
}

TYPED_TEST(StoreTest, ExpiredLeasesAreReclaimedThenFailedAfterMaxAttempts) {
  auto e = this->MakeExperiment();
  auto ts = this->MakeTrials(e.id, 1);
  auto t = this->Lease("w1", 1000);
  ASSERT_TRUE(this->store_->ReportMeasurement(t.id, "w1", this->Step(0, 1), std::nullopt).ok());
  this->clock_.Advance(999);
  EXPECT_TRUE(this->store_->ReclaimExpiredLeases(2)->empty());
  this->clock_.Advance(2);
  auto reclaimed = this->store_->ReclaimExpiredLeases(2);
  ASSERT_TRUE(reclaimed.ok()) << reclaimed.status();
  EXPECT_EQ(*reclaimed, std::vector<Id>{t.id});
  auto back = *this->store_->GetTrial(t.id);
  EXPECT_EQ(back.state, TrialState::kPending);
  EXPECT_EQ(back.lease_owner, "");
  EXPECT_TRUE(this->store_->ListMeasurements(t.id)->empty()) << "the dead attempt's steps remain";
  // The old holder has lost it.
  EXPECT_TRUE(this->store_->ReportMeasurement(t.id, "w1", this->Step(1, 1), std::nullopt)
                  .status()
                  .IsFailedPrecondition());
  auto second = this->Lease("w2", 1000);
  EXPECT_EQ(second.id, t.id);
  EXPECT_EQ(second.attempt, 2);
  this->clock_.Advance(5000);
  ASSERT_EQ(*this->store_->ReclaimExpiredLeases(2), std::vector<Id>{t.id});
  auto failed = *this->store_->GetTrial(t.id);
  EXPECT_EQ(failed.state, TrialState::kFailed);
  EXPECT_NE(failed.reason.find("lease expired after attempt 2 of 2"), std::string::npos)
      << failed.reason;
  EXPECT_NE(failed.reason.find("w2"), std::string::npos) << failed.reason;
}

TYPED_TEST(StoreTest, FinishedTrialsAreImmutable) {
  auto e = this->MakeExperiment();
  this->MakeTrials(e.id, 1);
  auto t = this->Lease("w1");
  ASSERT_TRUE(this->store_->ReportMeasurement(t.id, "w1", this->Step(0, 0.5), std::nullopt).ok());
  auto first =
      this->store_->FinishTrial(t.id, "w1", {TrialState::kCompleted, R"({"loss":0.5})", ""});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(*first, FinishResult::kFinished);
  // The owner's same finish again (a retried Complete) is acknowledged as a
  // repeat; any other finish is refused, saying what differs.
  auto again =
      this->store_->FinishTrial(t.id, "w1", {TrialState::kCompleted, R"({"loss":0.5})", ""});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, FinishResult::kRepeated);
  const std::vector<std::pair<std::string, FinishRequest>> refused = {
      {"w1", {TrialState::kCompleted, R"({"loss":0.1})", ""}},  // other metrics
      {"w2", {TrialState::kCompleted, R"({"loss":0.5})", ""}},  // another owner, the same metrics
      {"w1", {TrialState::kFailed, "{}", "x"}},                 // another state
      {"", {TrialState::kCancelled, "{}", "x"}},
  };
  for (const auto& [owner, f] : refused) {
    auto r = this->store_->FinishTrial(t.id, owner, f);
    ASSERT_TRUE(r.status().IsFailedPrecondition())
        << owner << " " << f.final_metrics_json << ": " << r.status();
    EXPECT_NE(r.status().message().find("immutable"), std::string::npos) << r.status();
  }
  EXPECT_NE(this->store_->FinishTrial(t.id, "w1", {TrialState::kCompleted, R"({"loss":0.1})", ""})
                .status()
                .message()
                .find("other final metrics"),
            std::string::npos);
  EXPECT_NE(this->store_->FinishTrial(t.id, "w2", {TrialState::kCompleted, R"({"loss":0.5})", ""})
                .status()
                .message()
                .find("held by 'w1', not 'w2'"),
            std::string::npos);
  auto r = this->store_->ReportMeasurement(t.id, "w1", this->Step(1, 0.4), std::nullopt);
  ASSERT_TRUE(r.status().IsFailedPrecondition());
  EXPECT_NE(r.status().message().find("immutable"), std::string::npos) << r.status();
  EXPECT_TRUE(this->store_->RenewLease(t.id, "w1", 1000).IsFailedPrecondition());
  this->clock_.Advance(10'000'000);
  EXPECT_TRUE(this->store_->ReclaimExpiredLeases(1)->empty());
  auto got = *this->store_->GetTrial(t.id);
  EXPECT_EQ(got.state, TrialState::kCompleted);
  EXPECT_EQ(got.final_metrics_json, R"({"loss":0.5})");
  EXPECT_EQ(this->store_->ListMeasurements(t.id)->size(), 1u);
  EXPECT_TRUE(got.finished_ms.has_value());
}

TYPED_TEST(StoreTest, PendingTrialsCanBeCancelledButNotCompleted) {
  auto e = this->MakeExperiment();
  auto ts = this->MakeTrials(e.id, 2);
  EXPECT_TRUE(this->store_->FinishTrial(ts[0].id, "", {TrialState::kCancelled, "{}", "user"}).ok());
  EXPECT_TRUE(this->store_->FinishTrial(ts[1].id, "w", {TrialState::kCompleted, "{}", ""})
                  .status()
                  .IsFailedPrecondition());
  EXPECT_TRUE(this->store_->FinishTrial(ts[1].id, "w", {TrialState::kFailed, "{}", ""})
                  .status()
                  .IsFailedPrecondition());
  EXPECT_TRUE(this->store_->FinishTrial(ts[1].id, "w", {TrialState::kRunning, "{}", ""})
                  .status()
                  .IsInvalidArgument());
  EXPECT_TRUE(this->store_->FinishTrial(777, "w", {TrialState::kCancelled, "{}", ""})
                  .status()
                  .IsNotFound());
  EXPECT_EQ(this->Lease("w").id, ts[1].id);
}

TYPED_TEST(StoreTest, ListsAndCountsTrialsWithFilters) {
  auto e = this->MakeExperiment({"mlp", "cnn"});
  std::vector<NewTrial> ts(6);
  for (int i = 0; i < 6; ++i) ts[i].space_id = e.spaces[i % 2].id;
  auto created = *this->store_->CreateTrials(e.id, ts);
  auto a = this->Lease("w");
  ASSERT_TRUE(
      this->store_->FinishTrial(a.id, "w", {TrialState::kPruned, "{}", "median rule"}).ok());
  this->Lease("w");
  TrialFilter f;
  f.state = TrialState::kPending;
  EXPECT_EQ(this->store_->ListTrials(e.id, f)->size(), 4u);
  f.space_id = e.spaces[1].id;
  auto cnn_pending = *this->store_->ListTrials(e.id, f);
  ASSERT_EQ(cnn_pending.size(), 2u);
  EXPECT_EQ(cnn_pending[0].number, 3);
  TrialFilter page;
  page.offset = 2;
  page.limit = 3;
  auto p = *this->store_->ListTrials(e.id, page);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].number, 2);
  auto n = *this->store_->CountTrials(e.id);
  EXPECT_EQ(n.pending, 4);
  EXPECT_EQ(n.leased, 1);
  EXPECT_EQ(n.pruned, 1);
  EXPECT_EQ(n.total(), 6);
  EXPECT_EQ(this->store_->GetTrial(a.id)->reason, "median rule");
  EXPECT_TRUE(this->store_->ListTrials(999, {}).status().IsNotFound());
}

// --- workers, devices, speed ----------------------------------------------------

TYPED_TEST(StoreTest, RegistersWorkersWithDevices) {
  NewWorker w;
  w.host = "node-a";
  w.labels_json = R"({"pool":"gpu"})";
  w.devices.push_back(
      {0, DeviceKind::kCpu, "AMD EPYC", "cpu:AMD EPYC:x2.0", 2.0, int64_t{8} << 30, 55.5});
  w.devices.push_back(
      {1, DeviceKind::kCuda, "NVIDIA H200", "cuda:NVIDIA H200", 0, int64_t{141} << 30, 60000});
  w.session_hash = std::string(64, 'a');
  auto r = this->store_->RegisterWorker(w);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->devices.size(), 2u);
  EXPECT_EQ(r->session_hash, w.session_hash);
  auto one = this->store_->GetWorker(r->id);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->host, "node-a");
  EXPECT_EQ(one->session_hash, w.session_hash);
  ASSERT_EQ(one->devices.size(), 2u);
  EXPECT_EQ(one->devices[1].id, r->devices[1].id);
  EXPECT_EQ(one->devices[1].device_class, "cuda:NVIDIA H200");
  EXPECT_TRUE(this->store_->GetWorker(r->id + 100).status().IsNotFound());
  this->clock_.Advance(5000);
  ASSERT_TRUE(this->store_->TouchWorker(r->id).ok());
  auto list = *this->store_->ListWorkers();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].session_hash, w.session_hash);
  EXPECT_EQ(list[0].last_seen_ms, list[0].registered_ms + 5000);
  ASSERT_EQ(list[0].devices.size(), 2u);
  EXPECT_EQ(list[0].devices[1].kind, DeviceKind::kCuda);
  EXPECT_EQ(list[0].devices[1].memory_bytes, int64_t{141} << 30);
  EXPECT_DOUBLE_EQ(list[0].devices[0].benchmark_gflops, 55.5);
  EXPECT_TRUE(this->store_->TouchWorker(999).IsNotFound());

  NewWorker bad = w;
  bad.devices[1].ordinal = 0;
  auto b = this->store_->RegisterWorker(bad);
  ASSERT_TRUE(b.status().IsInvalidArgument());
  EXPECT_NE(b.status().message().find("devices[1].ordinal"), std::string::npos) << b.status();
  EXPECT_EQ(this->store_->ListWorkers()->size(), 1u);
}

// A read sees one snapshot: listing while workers register never shows a
// worker without its devices, nor devices without their worker (PostgreSQL
// under READ COMMITTED did, between the two statements of ListWorkers).
TYPED_TEST(StoreTest, ListingWorkersWhileOthersRegisterSeesWholeWorkers) {
  std::atomic<bool> done{false};
  std::thread registrar([&] {
    for (int i = 0; i < 150; ++i) {
      NewWorker w;
      w.host = "node-" + std::to_string(i);
      w.devices.push_back({0, DeviceKind::kCpu, "cpu", "cpu:cpu:x1.0", 1.0, 1 << 30, 10});
      w.devices.push_back({1, DeviceKind::kCuda, "gpu", "cuda:gpu", 0, 1 << 30, 1000});
      EXPECT_TRUE(this->store_->RegisterWorker(w).ok());
    }
    done = true;
  });
  std::string torn;  // what the first bad list showed
  for (int lists = 0; !done && torn.empty(); ++lists) {
    auto list = this->store_->ListWorkers();
    if (!list.ok()) torn = list.status().ToString() + " after " + std::to_string(lists) + " lists";
    for (const auto& w : list.ok() ? *list : std::vector<WorkerRecord>{}) {
      if (w.devices.size() != 2)
        torn = w.host + " listed with " + std::to_string(w.devices.size()) + " devices";
    }
  }
  registrar.join();
  EXPECT_EQ(torn, "");
  EXPECT_EQ(this->store_->ListWorkers()->size(), 150u);
}

// A worker that names an instance is one worker across its restarts: the
// same row, the same device ids by ordinal (so its speed history stays its
// own), a new session; a device it no longer has is deleted, and what was
// measured on it stays. Without an instance, or on another host, it is new.
TYPED_TEST(StoreTest, RegisteringAnIdentityAgainKeepsTheWorkerAndItsDevices) {
  NewWorker w;
  w.host = "node-a";
  w.instance = "pod-a";
  w.session_hash = std::string(64, 'a');
  w.identity_hash = std::string(64, 'c');
  w.presented_identity_hash = std::string(64, 'c');
  w.in_use_ms = 60'000;
  w.devices.push_back({0, DeviceKind::kCpu, "EPYC", "cpu:EPYC:x2.0", 2.0, 1 << 30, 50});
  w.devices.push_back({1, DeviceKind::kCuda, "H200", "cuda:H200", 0, 1 << 30, 900});
  auto first = this->store_->RegisterWorker(w);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->identity_hash, w.identity_hash);
  EXPECT_FALSE(first->took_identity_of.has_value());
  const Id cpu = first->devices[0].id, gpu = first->devices[1].id;
  ASSERT_TRUE(
      this->store_->AddSpeedObservation({cpu, "cpu:EPYC:x2.0", "mlp", "{}", 100, std::nullopt})
          .ok());
  ASSERT_TRUE(
      this->store_->AddSpeedObservation({gpu, "cuda:H200", "mlp", "{}", 5000, std::nullopt}).ok());
  this->clock_.Advance(600'000);
  ASSERT_EQ(this->store_->MarkWorkersGone(1)->size(), 1u);

  // Back with a new session, a smaller CPU quota, no GPU and a new CPU.
  NewWorker again = w;
  again.session_hash = std::string(64, 'b');
  again.identity_hash = std::string(64, 'd');  // what a new identity would get: unused
  again.labels_json = R"({"pool":"cpu"})";
  again.devices = {{0, DeviceKind::kCpu, "EPYC", "cpu:EPYC:x1.0", 1.0, 1 << 30, 25},
                   {2, DeviceKind::kCpu, "Xeon", "cpu:Xeon:x1.0", 1.0, 1 << 30, 20}};
  auto second = this->store_->RegisterWorker(again);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->id, first->id);
  EXPECT_EQ(second->registered_ms, first->registered_ms);
  EXPECT_EQ(second->last_seen_ms, first->registered_ms + 600'000);
  EXPECT_EQ(second->session_hash, again.session_hash);
  EXPECT_EQ(second->identity_hash, w.identity_hash) << "the identity keeps its secret";
  EXPECT_FALSE(second->took_identity_of.has_value());
  EXPECT_FALSE(second->gone_ms.has_value());
  ASSERT_EQ(second->devices.size(), 2u);
  EXPECT_EQ(second->devices[0].id, cpu) << "the same ordinal keeps its device id";
  EXPECT_EQ(second->devices[0].device_class, "cpu:EPYC:x1.0");
  EXPECT_NE(second->devices[1].id, gpu);

  auto list = *this->store_->ListWorkers();
  ASSERT_EQ(list.size(), 1u) << "registered again, not added";
  EXPECT_EQ(list[0].instance, "pod-a");
  EXPECT_EQ(list[0].labels_json, again.labels_json);
  EXPECT_EQ(list[0].session_hash, again.session_hash);
  EXPECT_EQ(list[0].identity_hash, w.identity_hash);
  EXPECT_FALSE(list[0].gone_ms.has_value());
  ASSERT_EQ(list[0].devices.size(), 2u);
  EXPECT_EQ(list[0].devices[0].id, cpu);
  EXPECT_DOUBLE_EQ(list[0].devices[0].cores, 1.0);
  EXPECT_EQ(list[0].devices[1].ordinal, 2);
  // Both observations stay: the CPU's still its own, the GPU's without a device.
  auto obs = *this->store_->ListSpeedObservations("mlp", 10);
  ASSERT_EQ(obs.size(), 2u);
  EXPECT_EQ(obs[0].device_id, cpu);
  EXPECT_EQ(obs[1].device_id, 0);
  EXPECT_EQ(obs[1].device_class, "cuda:H200");

  NewWorker other_host = w, no_instance = w;
  other_host.host = "node-b";
  no_instance.instance = "";
  ASSERT_TRUE(this->store_->RegisterWorker(other_host).ok());
  ASSERT_TRUE(this->store_->RegisterWorker(no_instance).ok());
  ASSERT_TRUE(this->store_->RegisterWorker(no_instance).ok());
  EXPECT_EQ(this->store_->ListWorkers()->size(), 4u);
}

// Two servers registering one identity at once leave one worker: with its
// secret, every registration is that worker; without one, one registration
// makes the worker and the others, meeting it in use, are refused.
TYPED_TEST(StoreTest, RegisteringOneIdentityFromTwoHandlesAtOnceLeavesOneWorker) {
  std::unique_ptr<Store> second = this->Open();
  ASSERT_NE(second, nullptr);
  for (const bool with_secret : {true, false}) {
    SCOPED_TRACE(with_secret ? "with its secret" : "without a secret");
    const std::string pod = with_secret ? "pod-a" : "pod-b";
    const std::string secret(64, 'e');
    auto make = [&](int i) {
      NewWorker w;
      w.host = "node-a";
      w.devices = {{0, DeviceKind::kCpu, "cpu", "cpu:cpu:x1.0", 1, 1, 1}};
      w.session_hash = std::string(64, static_cast<char>('a' + i));
      w.instance = pod;
      w.identity_hash = with_secret ? secret : std::string(64, static_cast<char>('a' + i));
      w.presented_identity_hash = with_secret ? secret : "";
      w.in_use_ms = 60'000;
      return w;
    };
    if (with_secret) {
      ASSERT_TRUE(this->store_->RegisterWorker(make(0)).ok());
    }
    std::vector<std::thread> threads;
    std::atomic<int> failed{0}, refused{0};
    std::mutex mu;
    std::set<Id> ids;
    for (int i = 0; i < 4; ++i) {
      Store* handle = i % 2 ? second.get() : this->store_.get();
      threads.emplace_back([&, handle, i] {
        for (int k = 0; k < 10; ++k) {
          auto r = handle->RegisterWorker(make(i));
          if (r.status().code() == StatusCode::kAlreadyExists && !with_secret) {
            ++refused;
            continue;
          }
          if (!r.ok()) {
            ++failed;
            ADD_FAILURE() << r.status();
            continue;
          }
          std::lock_guard lock(mu);
          ids.insert(r->id);
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(failed, 0);
    EXPECT_EQ(ids.size(), 1u);
    if (!with_secret) {
      EXPECT_EQ(refused, 39);
    }
  }
  auto list = *this->store_->ListWorkers();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].devices.size(), 1u);
  EXPECT_EQ(list[1].devices.size(), 1u);
}

// Without the secret, an identity in use is refused and one out of use
// moves to a new worker; the old worker keeps its id, session and devices,
// only without the name. A stored worker without a secret (registered
// before secrets) is proven by nothing.
TYPED_TEST(StoreTest, AnIdentityIsRegisteredAgainOnlyWithItsSecretOrOnceOutOfUse) {
  NewWorker w;
  w.host = "node-a";
  w.devices = {{0, DeviceKind::kCpu, "cpu", "cpu:cpu:x1.0", 1, 1, 1}};
  w.session_hash = std::string(64, 'a');
  w.instance = "pod-a";
  w.identity_hash = std::string(64, 'c');
  w.in_use_ms = 10'000;
  auto first = this->store_->RegisterWorker(w);
  ASSERT_TRUE(first.ok()) << first.status();

  for (const std::string& presented : {std::string(), std::string(64, 'd'), std::string(63, 'c')}) {
    NewWorker taker = w;
    taker.session_hash = std::string(64, 'b');
    taker.identity_hash = std::string(64, 'f');
    taker.presented_identity_hash = presented;
    auto r = this->store_->RegisterWorker(taker);
    EXPECT_EQ(r.status().code(), StatusCode::kAlreadyExists) << r.status();
    EXPECT_NE(r.status().message().find("instance 'pod-a' is worker " + std::to_string(first->id)),
              std::string::npos)
        << r.status();
  }
  auto kept = *this->store_->GetWorker(first->id);
  EXPECT_EQ(kept.session_hash, w.session_hash) << "a refused registration changes nothing";
  EXPECT_EQ(kept.instance, "pod-a");

  // Seen 10 s ago, with in_use_ms 10 s: still in use; a moment later, not.
  this->clock_.Advance(10'000);
  NewWorker taker = w;
  taker.session_hash = std::string(64, 'b');
  taker.identity_hash = std::string(64, 'f');
  EXPECT_EQ(this->store_->RegisterWorker(taker).status().code(), StatusCode::kAlreadyExists);
  this->clock_.Advance(1);
  auto moved = this->store_->RegisterWorker(taker);
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_NE(moved->id, first->id);
  EXPECT_EQ(moved->took_identity_of, first->id);
  EXPECT_EQ(moved->identity_hash, taker.identity_hash);
  EXPECT_EQ(moved->instance, "pod-a");
  EXPECT_NE(moved->devices.at(0).id, first->devices.at(0).id);
  auto old = *this->store_->GetWorker(first->id);
  EXPECT_EQ(old.instance, "");
  EXPECT_EQ(old.session_hash, w.session_hash);
  ASSERT_EQ(old.devices.size(), 1u);
  EXPECT_EQ(old.devices[0].id, first->devices[0].id);
  EXPECT_FALSE(this->store_->GetWorker(moved->id)->took_identity_of.has_value())
      << "set by RegisterWorker alone";
  // The old secret proves nothing now; the new one does.
  NewWorker back = w;
  back.presented_identity_hash = w.identity_hash;
  EXPECT_EQ(this->store_->RegisterWorker(back).status().code(), StatusCode::kAlreadyExists);
  back.presented_identity_hash = taker.identity_hash;
  auto again = this->store_->RegisterWorker(back);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->id, moved->id);

  // Registered before secrets: an empty stored hash, matched by nothing.
  NewWorker old_style = w;
  old_style.instance = "pod-old";
  old_style.identity_hash = "";
  auto legacy = this->store_->RegisterWorker(old_style);
  ASSERT_TRUE(legacy.ok()) << legacy.status();
  EXPECT_EQ(legacy->identity_hash, "");
  NewWorker empty_proof = old_style;
  empty_proof.identity_hash = std::string(64, '1');
  EXPECT_EQ(this->store_->RegisterWorker(empty_proof).status().code(), StatusCode::kAlreadyExists);
  this->clock_.Advance(10'001);
  auto adopted = this->store_->RegisterWorker(empty_proof);
  ASSERT_TRUE(adopted.ok()) << adopted.status();
  EXPECT_NE(adopted->id, legacy->id);
  EXPECT_EQ(adopted->identity_hash, empty_proof.identity_hash);
  EXPECT_EQ(this->store_->ListWorkers()->size(), 4u);
}

// Gone is a compare-and-set (each worker returned once, to one of two
// handles), cleared by the next touch; pruning deletes only gone workers
// unseen long enough, and leaves the trials and speed they left behind.
TYPED_TEST(StoreTest, UnseenWorkersAreMarkedGoneOnceAndPrunedKeepingTheirHistory) {
  NewWorker a{"node-a", "{}",    {{0, DeviceKind::kCpu, "cpu", "cpu:cpu:x1.0", 1, 1, 1}},
              "",       "pod-a", "",
              "",       0};
  NewWorker b = a;
  b.instance = "pod-b";
  auto wa = *this->store_->RegisterWorker(a);
  auto wb = *this->store_->RegisterWorker(b);
  auto e = this->MakeExperiment();
  this->MakeTrials(e.id, 1);
  const std::string owner =
      "worker/" + std::to_string(wa.id) + "/device/" + std::to_string(wa.devices[0].id);
  auto t = this->Lease(owner);
  ASSERT_TRUE(this->store_->ReportMeasurement(t.id, owner, this->Step(1, 0.5), std::nullopt).ok());
  FinishRequest done;
  done.final_metrics_json = R"({"loss":0.5})";
  ASSERT_TRUE(this->store_->FinishTrial(t.id, owner, done).ok());
  ASSERT_TRUE(
      this->store_->AddSpeedObservation({wa.devices[0].id, "cpu:cpu:x1.0", "mlp", "{}", 100, t.id})
          .ok());

  this->clock_.Advance(10'000);
  ASSERT_TRUE(this->store_->TouchWorker(wb.id).ok());
  const TimeMs now = this->clock_.fn()();
  std::unique_ptr<Store> second = this->Open();
  ASSERT_NE(second, nullptr);
  auto gone = this->store_->MarkWorkersGone(5'000);
  ASSERT_TRUE(gone.ok()) << gone.status();
  ASSERT_EQ(gone->size(), 1u);
  EXPECT_EQ((*gone)[0].id, wa.id);
  EXPECT_EQ((*gone)[0].instance, "pod-a");
  EXPECT_EQ((*gone)[0].gone_ms, now);
  EXPECT_TRUE(second->MarkWorkersGone(5'000)->empty()) << "announced once";
  EXPECT_EQ(this->store_->GetWorker(wa.id)->gone_ms, now);
  EXPECT_FALSE(this->store_->GetWorker(wb.id)->gone_ms.has_value());

  // Seen again: not gone; unseen again: gone again.
  ASSERT_TRUE(this->store_->TouchWorker(wa.id).ok());
  EXPECT_FALSE(this->store_->GetWorker(wa.id)->gone_ms.has_value());
  this->clock_.Advance(10'000);
  ASSERT_TRUE(this->store_->TouchWorker(wb.id).ok());
  ASSERT_EQ(this->store_->MarkWorkersGone(5'000)->size(), 1u);

  // b was last seen as long ago as a, but is not gone: never pruned.
  auto pruned = second->PruneGoneWorkers(5'000);
  ASSERT_TRUE(pruned.ok()) << pruned.status();
  EXPECT_EQ(*pruned, std::vector<Id>{wa.id});
  EXPECT_TRUE(second->PruneGoneWorkers(5'000)->empty());
  EXPECT_TRUE(this->store_->GetWorker(wa.id).status().IsNotFound());
  EXPECT_TRUE(this->store_->TouchWorker(wa.id).IsNotFound());
  auto list = *this->store_->ListWorkers();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].id, wb.id);
  // What it did is still there.
  auto kept = this->store_->GetTrial(t.id);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->state, TrialState::kCompleted);
  EXPECT_EQ(kept->lease_owner, owner);
  EXPECT_EQ(this->store_->ListMeasurements(t.id)->size(), 1u);
  auto obs = *this->store_->ListSpeedObservations("mlp", 10);
  ASSERT_EQ(obs.size(), 1u);
  EXPECT_EQ(obs[0].device_id, 0);
  EXPECT_EQ(obs[0].trial_id, t.id);
  // The identity is free again: registering it makes a new worker.
  auto back = this->store_->RegisterWorker(a);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_NE(back->id, wa.id);
}

// A worker that says it leaves is gone now, whenever it was last seen:
// returned by one call only (of two handles), nullopt after; its next touch
// clears it as it clears MarkWorkersGone's.
TYPED_TEST(StoreTest, AWorkerThatLeavesIsMarkedGoneAtOnceAndOnce) {
  NewWorker a{"node-a", "{}",    {{0, DeviceKind::kCpu, "cpu", "cpu:cpu:x1.0", 1, 1, 1}},
              "",       "pod-a", "",
              "",       0};
  auto wa = *this->store_->RegisterWorker(a);
  this->clock_.Advance(1'000);
  const TimeMs now = this->clock_.fn()();
  std::unique_ptr<Store> second = this->Open();
  ASSERT_NE(second, nullptr);
  auto gone = this->store_->MarkWorkerGone(wa.id);
  ASSERT_TRUE(gone.ok()) << gone.status();
  ASSERT_TRUE(gone->has_value());
  EXPECT_EQ((*gone)->id, wa.id);
  EXPECT_EQ((*gone)->instance, "pod-a");
  EXPECT_EQ((*gone)->gone_ms, now);
  auto again = second->MarkWorkerGone(wa.id);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->has_value()) << "announced once";
  EXPECT_EQ(this->store_->GetWorker(wa.id)->gone_ms, now);
  EXPECT_TRUE(this->store_->MarkWorkersGone(0)->empty()) << "gone already";
  EXPECT_TRUE(this->store_->MarkWorkerGone(wa.id + 100).status().IsNotFound());
  ASSERT_TRUE(this->store_->TouchWorker(wa.id).ok());
  EXPECT_FALSE(this->store_->GetWorker(wa.id)->gone_ms.has_value());
}

TYPED_TEST(StoreTest, RecordsSpeedObservations) {
  NewWorker w{"h", "{}", {{0, DeviceKind::kCpu, "cpu", "cpu:x1", 1, 1, 1}}, ""};
  auto worker = *this->store_->RegisterWorker(w);
  const Id dev = worker.devices[0].id;
  for (int i = 0; i < 5; ++i) {
    SpeedObservation o{dev,       "cpu:x1",    i % 2 ? "cnn" : "mlp", R"({"threads":1})",
                       100.0 * i, std::nullopt};
    ASSERT_TRUE(this->store_->AddSpeedObservation(o).ok());
  }
  auto mlp = *this->store_->ListSpeedObservations("mlp", 100);
  ASSERT_EQ(mlp.size(), 3u);
  EXPECT_DOUBLE_EQ(mlp[2].samples_per_sec, 400);
  auto last2 = *this->store_->ListSpeedObservations("", 2);
  ASSERT_EQ(last2.size(), 2u);
  EXPECT_LT(last2[0].id, last2[1].id);
  EXPECT_DOUBLE_EQ(last2[1].samples_per_sec, 400);
  SpeedObservation bad{999, "x", "mlp", "{}", 1, std::nullopt};
  EXPECT_TRUE(this->store_->AddSpeedObservation(bad).status().IsNotFound());
  bad.device_id = dev;
  bad.samples_per_sec = -1;
  EXPECT_TRUE(this->store_->AddSpeedObservation(bad).status().IsInvalidArgument());
}

// A report carries its step's speed: stored in the same transaction, with
// a new step only, and dropped (the report kept) once the device is gone.
TYPED_TEST(StoreTest, AReportCarriesItsExperimentsState) {
  auto e = this->MakeExperiment();
  this->MakeTrials(e.id, 2);
  auto a = this->Lease("w1");
  auto b = this->Lease("w2");
  auto r = this->store_->ReportMeasurement(a.id, "w1", this->Step(0, 0.9), std::nullopt);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->experiment_state, ExperimentState::kRunning);
  // Completed: its trials in flight still report, and are told.
  ASSERT_TRUE(this->store_->FinishExperiment(e.id, ExperimentState::kCompleted, "budget").ok());
  r = this->store_->ReportMeasurement(a.id, "w1", this->Step(1, 0.8), std::nullopt);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->inserted);
  EXPECT_EQ(r->experiment_state, ExperimentState::kCompleted);
  r = this->store_->ReportMeasurement(b.id, "w2", this->Step(0, 0.7), std::nullopt);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->experiment_state, ExperimentState::kCompleted);
  EXPECT_EQ(this->store_->ListMeasurements(a.id)->size(), 2u);
}

TYPED_TEST(StoreTest, AReportsSpeedIsStoredWithItsNewStepOnly) {
  NewWorker w{"h", "{}", {{0, DeviceKind::kCpu, "cpu", "cpu:x1", 1, 1, 1}}, "pod-a"};
  auto worker = *this->store_->RegisterWorker(w);
  const Id dev = worker.devices[0].id;
  auto e = this->MakeExperiment();
  this->MakeTrials(e.id, 1);
  const std::string owner = "worker/" + std::to_string(worker.id);
  auto t = this->Lease(owner);
  auto speed = [&](double sps) {
    return SpeedObservation{dev, "cpu:x1", "mlp", R"({"threads":1})", sps, t.id};
  };
  auto r =
      this->store_->ReportMeasurement(t.id, owner, this->Step(0, 0.9), std::nullopt, speed(100));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->inserted);
  // The same step again: neither the step nor its speed is added.
  r = this->store_->ReportMeasurement(t.id, owner, this->Step(0, 0.9), std::nullopt, speed(200));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->inserted);
  ASSERT_TRUE(
      this->store_->ReportMeasurement(t.id, owner, this->Step(1, 0.8), std::nullopt, speed(300))
          .ok());
  auto obs = *this->store_->ListSpeedObservations("mlp", 10);
  ASSERT_EQ(obs.size(), 2u);
  EXPECT_DOUBLE_EQ(obs[0].samples_per_sec, 100);
  EXPECT_DOUBLE_EQ(obs[1].samples_per_sec, 300);
  EXPECT_EQ(obs[1].device_id, dev);
  EXPECT_EQ(obs[1].device_class, "cpu:x1");
  EXPECT_EQ(obs[1].trial_id, t.id);
  EXPECT_NE(obs[1].system_setting_json.find("threads"), std::string::npos);
  // Not the holder: refused, and nothing is recorded.
  EXPECT_TRUE(
      this->store_
          ->ReportMeasurement(t.id, "someone-else", this->Step(2, 0.7), std::nullopt, speed(400))
          .status()
          .IsFailedPrecondition());
  // A bad observation fails the report before anything is written.
  SpeedObservation bad = speed(-1);
  EXPECT_TRUE(this->store_->ReportMeasurement(t.id, owner, this->Step(2, 0.7), std::nullopt, bad)
                  .status()
                  .IsInvalidArgument());
  EXPECT_EQ(this->store_->ListMeasurements(t.id)->size(), 2u);
  // The device's worker pruned: the step is stored, its speed is not.
  this->clock_.Advance(10'000);
  ASSERT_EQ(this->store_->MarkWorkersGone(5'000)->size(), 1u);
  this->clock_.Advance(10'000);
  ASSERT_EQ(this->store_->PruneGoneWorkers(5'000)->size(), 1u);
  r = this->store_->ReportMeasurement(t.id, owner, this->Step(2, 0.7), std::nullopt, speed(500));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->inserted);
  EXPECT_EQ(this->store_->ListSpeedObservations("mlp", 10)->size(), 2u);
  EXPECT_EQ(this->store_->ListMeasurements(t.id)->size(), 3u);
}

// --- concurrency and durability ----------------------------------------------------

TYPED_TEST(StoreTest, FourThreadsOnTwoHandlesLeaseEveryTrialExactlyOnce) {
  constexpr int kTrials = 1000;
  auto e = this->MakeExperiment();
  std::vector<NewTrial> ts(kTrials);
  ASSERT_TRUE(this->store_->CreateTrials(e.id, ts).ok());
  std::unique_ptr<Store> second = this->Open();
  ASSERT_NE(second, nullptr);
  std::mutex mu;
  std::map<Id, std::string> leased_by;
  std::vector<std::string> errors;
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    Store* handle = i % 2 ? second.get() : this->store_.get();
    threads.emplace_back([&, handle, i] {
      const std::string owner = "thread-" + std::to_string(i);
      for (;;) {
        auto r = handle->LeaseNextTrial({owner, 60'000, e.id, std::nullopt});
        std::lock_guard lock(mu);
        if (!r.ok()) {
          errors.push_back(r.status().ToString());
          if (errors.size() > 10) return;
          continue;
        }
        if (!r->has_value()) return;
        auto [it, fresh] = leased_by.emplace((*r)->id, owner);
        if (!fresh)
          errors.push_back("trial " + std::to_string((*r)->id) + " leased by " + it->second +
                           " and " + owner);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(errors.empty()) << errors.front();
  EXPECT_EQ(leased_by.size(), static_cast<size_t>(kTrials));
  std::map<std::string, int> per_owner;
  for (auto& [id, owner] : leased_by) per_owner[owner]++;
  // Fairness between threads is not promised (SQLite serializes writers),
  // only that every trial went to exactly one of them.
  for (auto& [owner, n] : per_owner) std::printf("  %s leased %d trials\n", owner.c_str(), n);
  auto n = *this->store_->CountTrials(e.id);
  EXPECT_EQ(n.leased, kTrials);
  for (const auto& t : *this->store_->ListTrials(e.id, {std::nullopt, std::nullopt, 0, kTrials})) {
    ASSERT_EQ(t.attempt, 1) << "trial " << t.id;
    ASSERT_EQ(t.lease_owner, leased_by[t.id]);
  }
}

TYPED_TEST(StoreTest, AnAcknowledgedWriteSurvivesAKilledProcess) {
  auto e = this->MakeExperiment();
  auto ts = this->MakeTrials(e.id, 1);
  const std::string url = this->backend_->url();
  this->store_.reset();
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child acknowledges a lease, a report and a completion, tells the
    // parent, and dies without any clean-up.
    close(fds[0]);
    auto s = OpenStore(url);
    bool ok = s.ok();
    if (ok) ok = (*s)->LeaseTrial(ts[0].id, "child", 60'000).ok();
    Measurement m;
    m.step = 7;
    m.metrics_json = R"({"accuracy":0.9})";
    if (ok) ok = (*s)->ReportMeasurement(ts[0].id, "child", m, std::nullopt).ok();
    if (ok)
      ok = (*s)->FinishTrial(ts[0].id, "child", {TrialState::kCompleted, R"({"accuracy":0.9})", ""})
               .ok();
    const char c = ok ? 'y' : 'n';
    if (write(fds[1], &c, 1) != 1) _exit(3);
    raise(SIGKILL);
    _exit(4);
  }
  close(fds[1]);
  char c = 0;
  ASSERT_EQ(read(fds[0], &c, 1), 1);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  ASSERT_EQ(c, 'y') << "the child's writes failed";
  auto reopened = this->Open();
  ASSERT_NE(reopened, nullptr);
  auto t = *reopened->GetTrial(ts[0].id);
  EXPECT_EQ(t.state, TrialState::kCompleted);
  EXPECT_EQ(t.final_metrics_json, R"({"accuracy":0.9})");
  auto ms = *reopened->ListMeasurements(ts[0].id);
  ASSERT_EQ(ms.size(), 1u);
  EXPECT_EQ(ms[0].step, 7);
}

// Promotion-type early stopping: pause at a rung, resume (level + 1) on
// another owner, the lease of a resumed segment expiring back to paused.
TYPED_TEST(StoreTest, APausedTrialResumesOneLevelUpAndAnExpiredResumeGoesBackToPaused) {
  auto e = this->MakeExperiment();
  auto t = this->MakeTrials(e.id, 1)[0];
  auto leased = this->Lease("w1", 1000);
  ASSERT_EQ(leased.id, t.id);
  for (int64_t step = 1; step <= 3; ++step) {
    ASSERT_TRUE(
        this->store_->ReportMeasurement(t.id, "w1", this->Step(step, 1.0 / step), 1000).ok());
  }
  EXPECT_TRUE(this->store_->PauseTrial(t.id, "w2", 3).IsFailedPrecondition())
      << "another owner's trial";
  ASSERT_TRUE(this->store_->PauseTrial(t.id, "w1", 3).ok());
  ASSERT_TRUE(this->store_->PauseTrial(t.id, "w1", 3).ok()) << "a retried pause is acknowledged";
  EXPECT_TRUE(this->store_->PauseTrial(t.id, "w1", 2).IsFailedPrecondition());
  auto paused = *this->store_->GetTrial(t.id);
  EXPECT_EQ(paused.state, TrialState::kPaused);
  EXPECT_EQ(paused.resume_step, 3);
  EXPECT_EQ(paused.level, 0);
  EXPECT_FALSE(paused.lease_expires_ms);
  // Not leasable as pending, no reports, no renewals while paused.
  EXPECT_FALSE(this->store_->LeaseNextTrial({"w3", 1000, std::nullopt, std::nullopt})->has_value());
  EXPECT_TRUE(this->store_->ReportMeasurement(t.id, "w1", this->Step(4, 0.2), 1000)
                  .status()
                  .IsFailedPrecondition());
  EXPECT_TRUE(this->store_->RenewLease(t.id, "w1", 1000).IsFailedPrecondition());
  auto n = *this->store_->CountTrials(e.id);
  EXPECT_EQ(n.paused, 1);
  EXPECT_EQ(n.total(), 1);

  // Promoted on w2, to step 9.
  auto resumed = this->store_->ResumeTrial(t.id, "w2", 1000, 9);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->state, TrialState::kLeased);
  EXPECT_EQ(resumed->level, 1);
  EXPECT_EQ(resumed->stop_step, 9);
  EXPECT_EQ(resumed->resume_step, 3);
  EXPECT_EQ(resumed->lease_owner, "w2");
  EXPECT_EQ(resumed->attempt, 1);
  auto again = this->store_->ResumeTrial(t.id, "w3", 1000, 9);
  EXPECT_TRUE(again.status().IsFailedPrecondition()) << "resumed twice";
  EXPECT_NE(again.status().message().find("not paused"), std::string::npos) << again.status();
  ASSERT_TRUE(this->store_->ReportMeasurement(t.id, "w2", this->Step(4, 0.2), 1000).ok());
  // w2 dies: back to paused at level 0 with the steps up to its checkpoint.
  this->clock_.Advance(1001);
  auto reclaimed = *this->store_->ReclaimExpiredLeases(3);
  ASSERT_EQ(reclaimed, std::vector<Id>{t.id});
  auto back = *this->store_->GetTrial(t.id);
  EXPECT_EQ(back.state, TrialState::kPaused);
  EXPECT_EQ(back.level, 0);
  EXPECT_EQ(back.resume_step, 3);
  EXPECT_FALSE(back.stop_step);
  auto ms = *this->store_->ListMeasurements(t.id);
  ASSERT_EQ(ms.size(), 3u) << "step 4 belonged to the dead segment";
  EXPECT_EQ(ms.back().step, 3);
  // Resumed, then its checkpoint is found unusable: from scratch under the same lease.
  auto promoted = this->store_->ResumeTrial(t.id, "w4", 1000, 9);
  ASSERT_TRUE(promoted.ok()) << promoted.status();
  EXPECT_TRUE(this->store_->RestartTrial(t.id, "w5").IsFailedPrecondition()) << "not the owner";
  ASSERT_TRUE(this->store_->RestartTrial(t.id, "w4").ok());
  EXPECT_EQ(this->store_->GetTrial(t.id)->resume_step, 0);
  EXPECT_TRUE(this->store_->ListMeasurements(t.id)->empty());
  ASSERT_TRUE(this->store_->ReportMeasurement(t.id, "w4", this->Step(1, 0.9), 1000).ok());
  ASSERT_TRUE(this->store_->ReportMeasurement(t.id, "w4", this->Step(2, 0.8), 1000).ok());
  ASSERT_TRUE(this->store_->PauseTrial(t.id, "w4", 2).ok());
  // Resumed with a lost checkpoint: from scratch.
  auto restarted = this->store_->ResumeTrial(t.id, "w3", 1000, 9, /*restart=*/true);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  EXPECT_EQ(restarted->resume_step, 0);
  EXPECT_EQ(restarted->attempt, 1)
      << "attempts count per segment; the pause at step 2 began a new one";
  EXPECT_TRUE(this->store_->ListMeasurements(t.id)->empty());
}

// A trial's attempt counts the leases of its segment: a paused trial keeps
// the one it paused on (it once read 0, as if it never ran), a resume after
// a pause starts the next segment at 1, and a resumed segment whose lease
// expired is that segment's next attempt.
TYPED_TEST(StoreTest, APausedTrialKeepsTheAttemptItPausedOn) {
  auto e = this->MakeExperiment();
  auto t = this->MakeTrials(e.id, 1)[0];
  ASSERT_EQ(this->Lease("w1", 1000).attempt, 1);
  this->clock_.Advance(1001);
  ASSERT_EQ(*this->store_->ReclaimExpiredLeases(3), std::vector<Id>{t.id});
  EXPECT_EQ(this->store_->GetTrial(t.id)->attempt, 1) << "pending after its first lease expired";
  ASSERT_EQ(this->Lease("w2", 1000).attempt, 2);
  ASSERT_TRUE(this->store_->ReportMeasurement(t.id, "w2", this->Step(1, 0.5), 1000).ok());
  ASSERT_TRUE(this->store_->PauseTrial(t.id, "w2", 1).ok());
  EXPECT_EQ(this->store_->GetTrial(t.id)->attempt, 2) << "paused on its second attempt";

  auto resumed = this->store_->ResumeTrial(t.id, "w3", 1000, 2);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->attempt, 1) << "a new segment";
  this->clock_.Advance(1001);
  ASSERT_EQ(*this->store_->ReclaimExpiredLeases(3), std::vector<Id>{t.id});
  auto back = *this->store_->GetTrial(t.id);
  EXPECT_EQ(back.state, TrialState::kPaused);
  EXPECT_EQ(back.attempt, 1);
  auto again = this->store_->ResumeTrial(t.id, "w4", 1000, 2);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->attempt, 2) << "the same segment, tried again";
  ASSERT_TRUE(this->store_->ReportMeasurement(t.id, "w4", this->Step(2, 0.4), 1000).ok());
  ASSERT_TRUE(this->store_->PauseTrial(t.id, "w4", 2).ok());
  EXPECT_EQ(this->store_->GetTrial(t.id)->attempt, 2);
  auto next = this->store_->ResumeTrial(t.id, "w1", 1000, std::nullopt);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->attempt, 1);
}

TYPED_TEST(StoreTest, PausedTrialsEndWithTheirExperiment) {
  for (auto state : {ExperimentState::kCompleted, ExperimentState::kCancelled}) {
    auto e = this->MakeExperiment();
    auto t = this->MakeTrials(e.id, 1)[0];
    auto leased = *this->store_->LeaseTrial(t.id, "w1", 1000);
    ASSERT_TRUE(this->store_->ReportMeasurement(t.id, "w1", this->Step(1, 0.5), 1000).ok());
    ASSERT_TRUE(this->store_->PauseTrial(leased.id, "w1", 1).ok());
    ASSERT_TRUE(this->store_->FinishExperiment(e.id, state, "done").ok());
    auto ended = *this->store_->GetTrial(t.id);
    EXPECT_EQ(ended.state,
              state == ExperimentState::kCompleted ? TrialState::kPruned : TrialState::kCancelled);
    EXPECT_TRUE(ended.finished_ms);
    EXPECT_TRUE(
        this->store_->ResumeTrial(t.id, "w2", 1000, std::nullopt).status().IsFailedPrecondition());
  }
  // And a paused trial of a running experiment can be cancelled by anyone.
  auto e = this->MakeExperiment();
  auto t = this->MakeTrials(e.id, 1)[0];
  ASSERT_TRUE(this->store_->LeaseTrial(t.id, "w1", 1000).ok());
  ASSERT_TRUE(this->store_->PauseTrial(t.id, "w1", 0).ok());
  EXPECT_TRUE(this->store_->FinishTrial(t.id, "", {TrialState::kCancelled, "{}", "by hand"}).ok());
}

TYPED_TEST(StoreTest, TrialsCreatedForADeviceAreLeasedAndPausedOnesLeaveRoomUnderTheCap) {
  auto e = this->MakeExperiment();
  NewTrial nt;
  nt.lease_owner = "worker/1";
  nt.lease_ms = 5000;
  nt.stop_step = 3;
  const Store::TrialLimits cap{std::nullopt, 1};
  auto made = this->store_->CreateTrialsUpTo(e.id, {nt, nt}, cap);
  ASSERT_TRUE(made.ok()) << made.status();
  ASSERT_EQ(made->size(), 1u) << "max_unfinished 1";
  const TrialRecord& t = (*made)[0];
  EXPECT_EQ(t.state, TrialState::kLeased);
  EXPECT_EQ(t.lease_owner, "worker/1");
  EXPECT_EQ(t.lease_expires_ms, *this->clock_.now + 5000);
  EXPECT_EQ(t.started_ms, *this->clock_.now);
  EXPECT_EQ(t.attempt, 1);
  EXPECT_EQ(t.stop_step, 3);
  EXPECT_TRUE(this->store_->ReportMeasurement(t.id, "worker/1", this->Step(1, 0.5), 5000).ok());
  EXPECT_TRUE(this->store_->CreateTrialsUpTo(e.id, {nt}, cap)->empty())
      << "one on a device: the cap is full";
  ASSERT_TRUE(this->store_->PauseTrial(t.id, "worker/1", 3).ok());
  EXPECT_EQ(this->store_->CreateTrialsUpTo(e.id, {nt}, cap)->size(), 1u)
      << "a paused trial holds no device";
  NewTrial bad = nt;
  bad.lease_ms = 0;
  EXPECT_TRUE(this->store_->CreateTrialsUpTo(e.id, {bad}, {}).status().IsInvalidArgument());
}

// A report renews the lease only when less than nearly its length is left
// (Store::ReportRenewsBefore: 10% of it, at most a second), and otherwise
// leaves the trial's row as it is: its revision too, while the step is kept.
TYPED_TEST(StoreTest, AReportRenewsItsLeaseOnlyWhenItIsNeeded) {
  auto e = this->MakeExperiment();
  NewTrial nt;
  nt.lease_owner = "worker/1";
  nt.lease_ms = 20'000;
  auto made = this->store_->CreateTrialsUpTo(e.id, {nt}, {});
  ASSERT_TRUE(made.ok() && made->size() == 1u) << made.status();
  const Id id = (*made)[0].id;
  const TimeMs start = *this->clock_.now;
  // The first report writes the row (leased -> running) and renews.
  auto first = this->store_->ReportMeasurement(id, "worker/1", this->Step(0, 0.9), 10'000);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->trial.state, TrialState::kRunning);
  EXPECT_EQ(first->trial.lease_expires_ms, start + 10'000);
  // 0.9 s later 9.1 s are left, more than 10 s less a second: not renewed.
  this->clock_.Advance(900);
  auto second = this->store_->ReportMeasurement(id, "worker/1", this->Step(1, 0.8), 10'000);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(second->inserted);
  EXPECT_EQ(second->trial.lease_expires_ms, start + 10'000);
  EXPECT_EQ(second->trial.revision, first->trial.revision) << "the row was written again";
  auto stored = this->store_->GetTrial(id);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->lease_expires_ms, start + 10'000);
  EXPECT_EQ(stored->revision, first->trial.revision);
  EXPECT_EQ(this->store_->ListMeasurements(id)->size(), 2u) << "the step is kept all the same";
  // 0.2 s later 8.9 s are left: renewed to 10 s from now.
  this->clock_.Advance(200);
  auto third = this->store_->ReportMeasurement(id, "worker/1", this->Step(2, 0.7), 10'000);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(third->trial.lease_expires_ms, *this->clock_.now + 10'000);
  EXPECT_GT(third->trial.revision, first->trial.revision);
  // Without renew_lease_ms nothing is renewed.
  this->clock_.Advance(450);
  auto no_renew = this->store_->ReportMeasurement(id, "worker/1", this->Step(3, 0.6), std::nullopt);
  ASSERT_TRUE(no_renew.ok()) << no_renew.status();
  EXPECT_EQ(no_renew->trial.lease_expires_ms, third->trial.lease_expires_ms);
  // A short lease keeps 90% of its length: 500 ms, renewed below 450 left.
  nt.lease_ms = 500;
  auto made_short = this->store_->CreateTrialsUpTo(e.id, {nt}, {});
  ASSERT_TRUE(made_short.ok() && made_short->size() == 1u) << made_short.status();
  const Id short_id = (*made_short)[0].id;
  ASSERT_TRUE(this->store_->ReportMeasurement(short_id, "worker/1", this->Step(0, 0.9), 500).ok());
  const TimeMs short_start = *this->clock_.now;
  this->clock_.Advance(40);
  EXPECT_EQ(this->store_->ReportMeasurement(short_id, "worker/1", this->Step(1, 0.8), 500)
                ->trial.lease_expires_ms,
            short_start + 500);
  this->clock_.Advance(20);
  EXPECT_EQ(this->store_->ReportMeasurement(short_id, "worker/1", this->Step(2, 0.7), 500)
                ->trial.lease_expires_ms,
            *this->clock_.now + 500);
  // A finished trial still refuses a report.
  FinishRequest done;
  done.state = TrialState::kCompleted;
  ASSERT_TRUE(this->store_->FinishTrial(id, "worker/1", done).ok());
  EXPECT_TRUE(this->store_->ReportMeasurement(id, "worker/1", this->Step(4, 0.4), 10'000)
                  .status()
                  .IsFailedPrecondition());
}

TYPED_TEST(StoreTest, AReportReturnsItsTrialAndStopsAtItsLeasesStopStep) {
  auto e = this->MakeExperiment();
  NewTrial nt;
  nt.params_json = R"({"lr":0.5})";
  nt.lease_owner = "worker/1";
  nt.lease_ms = 5000;
  nt.stop_step = 3;
  auto made = this->store_->CreateTrialsUpTo(e.id, {nt}, {});
  ASSERT_TRUE(made.ok() && made->size() == 1u) << made.status();
  const TrialRecord& t = (*made)[0];
  this->clock_.Advance(100);
  auto r = this->store_->ReportMeasurement(t.id, "worker/1", this->Step(1, 0.5), 8000);
  ASSERT_TRUE(r.ok()) << r.status();
  // The trial as the report left it: running, its lease renewed.
  EXPECT_EQ(r->trial.id, t.id);
  EXPECT_EQ(r->trial.experiment_id, e.id);
  EXPECT_EQ(r->trial.number, t.number);
  EXPECT_EQ(r->trial.params_json, R"({"lr":0.5})");
  EXPECT_EQ(r->trial.state, TrialState::kRunning);
  EXPECT_EQ(r->trial.lease_owner, "worker/1");
  EXPECT_EQ(r->trial.lease_expires_ms, *this->clock_.now + 8000);
  EXPECT_EQ(r->trial.stop_step, 3);
  // Up to the stop_step, and again (idempotent); not past it.
  ASSERT_TRUE(
      this->store_->ReportMeasurement(t.id, "worker/1", this->Step(3, 0.4), std::nullopt).ok());
  ASSERT_TRUE(
      this->store_->ReportMeasurement(t.id, "worker/1", this->Step(3, 0.4), std::nullopt).ok());
  auto past = this->store_->ReportMeasurement(t.id, "worker/1", this->Step(4, 0.3), std::nullopt);
  EXPECT_TRUE(past.status().IsFailedPrecondition()) << past.status();
  EXPECT_NE(past.status().message().find("stop_step 3"), std::string::npos) << past.status();
  EXPECT_EQ(this->store_->ListMeasurements(t.id)->size(), 2u) << "nothing written past it";
  // Another owner is told it does not hold the lease, whatever the step.
  auto other = this->store_->ReportMeasurement(t.id, "worker/2", this->Step(4, 0.3), std::nullopt);
  EXPECT_TRUE(other.status().IsFailedPrecondition());
  EXPECT_NE(other.status().message().find("held by"), std::string::npos) << other.status();
  // A lease to the end (no stop_step) takes any step.
  ASSERT_TRUE(this->store_->PauseTrial(t.id, "worker/1", 3).ok());
  ASSERT_TRUE(this->store_->ResumeTrial(t.id, "worker/1", 5000, std::nullopt).ok());
  r = this->store_->ReportMeasurement(t.id, "worker/1", this->Step(9, 0.2), std::nullopt);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->trial.level, 1);
  EXPECT_FALSE(r->trial.stop_step);
}

// --- group commit ----------------------------------------------------------------

TYPED_TEST(StoreTest, ConcurrentReportsFromManyThreadsAllLandExactlyOnce) {
  constexpr int kThreads = 16, kSteps = 10;
  auto e = this->MakeExperiment();
  this->MakeTrials(e.id, kThreads);
  std::vector<TrialRecord> trials;
  for (int i = 0; i < kThreads; ++i) trials.push_back(this->Lease("worker/" + std::to_string(i)));
  std::atomic<size_t> batched_calls{0};
  StoreOptions options;
  options.clock = this->clock_.fn();
  options.on_group_commit = [&](size_t n) {
    if (n > 1) batched_calls += n;
  };
  auto batching = OpenStore(this->backend_->url(), options);
  ASSERT_TRUE(batching.ok()) << batching.status();
  std::mutex mu;
  std::vector<std::string> errors;
  std::map<Id, int> inserted;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      const TrialRecord& t = trials[i];
      // Every step twice, the second a retry: it must be acknowledged and
      // change nothing, in whichever batch it lands.
      for (int step = 0; step < 2 * kSteps; ++step) {
        auto r =
            (*batching)->ReportMeasurement(t.id, t.lease_owner, this->Step(step / 2, 0.5), 60'000);
        std::lock_guard lock(mu);
        if (!r.ok())
          errors.push_back(r.status().ToString());
        else if (r->inserted)
          inserted[t.id]++;
      }
      auto done = (*batching)->FinishTrial(t.id, t.lease_owner,
                                           {TrialState::kCompleted, R"({"loss":0.1})", ""});
      std::lock_guard lock(mu);
      if (!done.ok()) errors.push_back(done.status().ToString());
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(errors.empty()) << errors.front();
  for (const TrialRecord& t : trials) {
    EXPECT_EQ(inserted[t.id], kSteps)
        << "trial " << t.id << ": each step inserted once, its retry not";
    auto ms = this->store_->ListMeasurements(t.id);
    ASSERT_TRUE(ms.ok()) << ms.status();
    ASSERT_EQ(ms->size(), static_cast<size_t>(kSteps)) << "trial " << t.id;
    for (int step = 0; step < kSteps; ++step) EXPECT_EQ((*ms)[step].step, step);
    EXPECT_EQ(this->store_->GetTrial(t.id)->state, TrialState::kCompleted);
  }
  // How many calls shared a transaction depends on the scheduler; that
  // every acknowledged one is there does not.
  std::printf("  %zu of %d calls committed in batches\n", batched_calls.load(),
              kThreads * (2 * kSteps + 1));
}

TYPED_TEST(StoreTest, ADuplicateStepInsideOneBatchIsRecordedOnce) {
  auto e = this->MakeExperiment();
  this->MakeTrials(e.id, 2);
  const TrialRecord a = this->Lease("worker/a"), b = this->Lease("worker/b");
  std::mutex mu;
  std::vector<ReportResult> same_step;
  Status other;
  auto report_a = [&](double loss) {
    return [&, loss](Store& s) {
      auto r = s.ReportMeasurement(a.id, "worker/a", this->Step(1, loss), std::nullopt);
      ASSERT_TRUE(r.ok()) << r.status();
      std::lock_guard lock(mu);
      same_step.push_back(*r);
    };
  };
  auto sizes = this->RunAsOneBatch(
      {report_a(0.25), report_a(0.75), [&](Store& s) {
         other = s.ReportMeasurement(b.id, "worker/b", this->Step(1, 0.5), std::nullopt).status();
       }});
  EXPECT_EQ(sizes, std::vector<size_t>{3}) << "the three calls were not one batch";
  ASSERT_EQ(same_step.size(), 2u);
  EXPECT_NE(same_step[0].inserted, same_step[1].inserted)
      << "one report of step 1 inserts, the other is a repeat";
  EXPECT_TRUE(other.ok()) << other;
  auto ms = this->store_->ListMeasurements(a.id);
  ASSERT_TRUE(ms.ok()) << ms.status();
  ASSERT_EQ(ms->size(), 1u);
  EXPECT_TRUE((*ms)[0].metrics_json == this->Step(1, 0.25).metrics_json ||
              (*ms)[0].metrics_json == this->Step(1, 0.75).metrics_json)
      << (*ms)[0].metrics_json;
  EXPECT_EQ(this->store_->ListMeasurements(b.id)->size(), 1u);
}

TYPED_TEST(StoreTest, ACallWithAnotherOwnersLeaseFailsAloneInsideABatch) {
  auto e = this->MakeExperiment();
  this->MakeTrials(e.id, 4);
  const TrialRecord a = this->Lease("worker/a"), b = this->Lease("worker/b"),
                    c = this->Lease("worker/c"), d = this->Lease("worker/d");
  Status stale, report, finish, renew;
  auto sizes = this->RunAsOneBatch({
      // A stale worker reports on a trial another holds: the lease's
      // compare-and-set refuses it inside the batch as it does alone.
      [&](Store& s) {
        stale = s.ReportMeasurement(a.id, "worker/stale", this->Step(1, 0.9), 60'000).status();
      },
      [&](Store& s) {
        report = s.ReportMeasurement(b.id, "worker/b", this->Step(1, 0.5), 60'000).status();
      },
      [&](Store& s) {
        finish = s.FinishTrial(c.id, "worker/c", {TrialState::kCompleted, R"({"loss":0.2})", ""})
                     .status();
      },
      [&](Store& s) { renew = s.RenewLease(d.id, "worker/d", 90'000); },
  });
  EXPECT_EQ(sizes, std::vector<size_t>{4}) << "the four calls were not one batch";
  EXPECT_TRUE(stale.IsFailedPrecondition()) << stale;
  EXPECT_NE(stale.message().find("'worker/a'"), std::string::npos) << stale;
  EXPECT_TRUE(report.ok()) << report;
  EXPECT_TRUE(finish.ok()) << finish;
  EXPECT_TRUE(renew.ok()) << renew;
  EXPECT_TRUE(this->store_->ListMeasurements(a.id)->empty()) << "the refused report left a row";
  EXPECT_EQ(this->store_->GetTrial(a.id)->state, TrialState::kLeased);
  EXPECT_EQ(this->store_->ListMeasurements(b.id)->size(), 1u);
  EXPECT_EQ(this->store_->GetTrial(b.id)->state, TrialState::kRunning);
  EXPECT_EQ(this->store_->GetTrial(c.id)->state, TrialState::kCompleted);
  EXPECT_EQ(this->store_->GetTrial(d.id)->lease_expires_ms, *this->clock_.now + 90'000);
}

TYPED_TEST(StoreTest, AStatementThatFailsInsideABatchIsUndoneAlone) {
  // A foreign key the database itself refuses: on PostgreSQL that error
  // aborts the whole transaction unless the call's savepoint takes it back.
  auto e = this->MakeExperiment();
  this->MakeTrials(e.id, 2);
  const TrialRecord a = this->Lease("worker/a"), b = this->Lease("worker/b");
  NewWorker w;
  w.host = "h";
  w.devices.push_back({0, DeviceKind::kCpu, "cpu", "cpu:x", 2, 1 << 30, 10});
  auto worker = this->store_->RegisterWorker(w);
  ASSERT_TRUE(worker.ok()) << worker.status();
  const Id device = worker->devices.at(0).id;
  Status bad, first, second, good_observation;
  auto sizes = this->RunAsOneBatch({
      [&](Store& s) {
        first = s.ReportMeasurement(a.id, "worker/a", this->Step(1, 0.5), 60'000).status();
      },
      [&](Store& s) {
        bad = s.AddSpeedObservation({device, "cpu:x", "wl", "{}", 100, Id{987654321}}).status();
      },
      [&](Store& s) {
        second = s.ReportMeasurement(b.id, "worker/b", this->Step(1, 0.5), 60'000).status();
      },
      [&](Store& s) {
        good_observation = s.AddSpeedObservation({device, "cpu:x", "wl", "{}", 200, a.id}).status();
      },
  });
  EXPECT_EQ(sizes, std::vector<size_t>{4}) << "the four calls were not one batch";
  EXPECT_TRUE(bad.IsInvalidArgument()) << bad;
  EXPECT_TRUE(first.ok()) << first;
  EXPECT_TRUE(second.ok()) << second;
  EXPECT_TRUE(good_observation.ok()) << good_observation;
  EXPECT_EQ(this->store_->ListMeasurements(a.id)->size(), 1u);
  EXPECT_EQ(this->store_->ListMeasurements(b.id)->size(), 1u);
  auto obs = this->store_->ListSpeedObservations("wl", 10);
  ASSERT_TRUE(obs.ok()) << obs.status();
  ASSERT_EQ(obs->size(), 1u) << "the refused observation left a row, or the good one is missing";
  EXPECT_EQ((*obs)[0].samples_per_sec, 200);
}

TYPED_TEST(StoreTest, TrialsMadeInsideABatchKeepTheLimitsAndARefusalFailsAlone) {
  // With one connection (SQLite) trials made for leases join the group
  // commit; the limits are still counted in the transaction that inserts,
  // and an ended experiment refuses only the call that asked it for a
  // trial. PostgreSQL makes them in transactions of their own.
  if (std::string(TypeParam::kName) != "sqlite")
    GTEST_SKIP() << "trials are made in batches on SQLite only";
  auto e = this->MakeExperiment();
  auto ended = this->MakeExperiment();
  ASSERT_TRUE(this->store_->FinishExperiment(ended.id, ExperimentState::kCancelled, "test").ok());
  this->MakeTrials(e.id, 2);
  const TrialRecord a = this->Lease("worker/a");
  const Store::TrialLimits one_more{std::nullopt, 3};  // 2 unfinished already
  auto leased_to = [](const std::string& owner) {
    NewTrial t;
    t.lease_owner = owner;
    t.lease_ms = 60'000;
    return std::vector<NewTrial>{t};
  };
  Result<std::vector<TrialRecord>> made_c = Status::Internal("not run"), made_d = made_c,
                                   refused = made_c;
  Status report;
  auto sizes = this->RunAsOneBatch({
      [&](Store& s) { made_c = s.CreateTrialsUpTo(e.id, leased_to("worker/c"), one_more); },
      [&](Store& s) {
        report = s.ReportMeasurement(a.id, "worker/a", this->Step(1, 0.5), 60'000).status();
      },
      [&](Store& s) { refused = s.CreateTrialsUpTo(ended.id, leased_to("worker/x"), {}); },
      [&](Store& s) { made_d = s.CreateTrialsUpTo(e.id, leased_to("worker/d"), one_more); },
  });
  EXPECT_EQ(sizes, std::vector<size_t>{4}) << "the four calls were not one batch";
  EXPECT_TRUE(report.ok()) << report;
  EXPECT_TRUE(refused.status().IsFailedPrecondition()) << refused.status();
  ASSERT_TRUE(made_c.ok()) << made_c.status();
  ASSERT_TRUE(made_d.ok()) << made_d.status();
  // One slot under max_unfinished: one of the two callers got it.
  ASSERT_EQ(made_c->size() + made_d->size(), 1u);
  const TrialRecord& made = made_c->empty() ? made_d->front() : made_c->front();
  EXPECT_EQ(made.number, 2) << "numbers go on from the experiment's";
  EXPECT_EQ(made.state, TrialState::kLeased);
  auto stored = this->store_->GetTrial(made.id);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->lease_owner, made_c->empty() ? "worker/d" : "worker/c");
  EXPECT_EQ(this->store_->ListMeasurements(a.id)->size(), 1u);
  auto in_ended = this->store_->ListTrials(ended.id, {});
  ASSERT_TRUE(in_ended.ok()) << in_ended.status();
  EXPECT_TRUE(in_ended->empty()) << "the refused creation left a trial";
  auto counts = this->store_->CountTrials(e.id);
  ASSERT_TRUE(counts.ok()) << counts.status();
  EXPECT_EQ(counts->pending, 1);
  EXPECT_EQ(counts->leased, 1);
  EXPECT_EQ(counts->running, 1);
  EXPECT_EQ(counts->total(), 3);
}

}  // namespace
}  // namespace hpo::store
