// The engine against a real (SQLite) store: ask/tell, workers, pruning,
// budgets, cancellation and restarts.
#include "server/engine/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "server/engine/trial_run.h"
#include "server/engine/trial_view.h"
#include "server/metrics/store_gauges.h"
#include "testing/stall_gate.h"
#include "testing/store_backends.h"
#include "testing/store_wrapper.h"

namespace hpo::server {
// For gtest's messages: "prune", not "4-byte object <01-00 00-00>".
void PrintTo(Decision d, std::ostream* os) { *os << ToString(d); }

namespace {

using nlohmann::json;
using store::TrialState;

std::string Spec(const std::string& executor, int max_trials, int max_parallel,
                 const std::string& early_stopping = "none") {
  return R"({"name": "quad", "objective": {"metric": "loss", "direction": "minimize"},
    "spaces": [{"name": "a", "params": {"x": {"type": "float", "low": -1, "high": 1}}},
               {"name": "b", "params": {"y": {"type": "float", "low": 0, "high": 2},
                                        "k": {"type": "int", "low": 1, "high": 3}}}],
    "system": {"threads": {"type": "int", "low": 1, "high": 4}},
    "algorithm": {"sampler": "tpe", "seed": 3},
    "early_stopping": {"rule": ")" +
         early_stopping + R"("},
    "budget": {"max_trials": )" +
         std::to_string(max_trials) + R"(, "max_parallel": )" + std::to_string(max_parallel) +
         R"(, "steps_per_trial": 4},
    "executor": )" +
         executor + "}";
}
// Spec() with an early_stopping mapping of its own, e.g. {"rule": "median", "startup_trials": 2}.
std::string SpecStopping(const std::string& executor, int max_trials, int max_parallel,
                         const std::string& early_stopping) {
  std::string spec = Spec(executor, max_trials, max_parallel);
  const std::string none = R"("early_stopping": {"rule": "none"})";
  spec.replace(spec.find(none), none.size(), R"("early_stopping": )" + early_stopping);
  return spec;
}
// The spec with space a only: a device that ran one trial then knows every
// workload (placement explores a device on a workload it has not measured).
std::string OneSpace(std::string spec) {
  const std::string space_b = R"(,
               {"name": "b", "params": {"y": {"type": "float", "low": 0, "high": 2},
                                        "k": {"type": "int", "low": 1, "high": 3}}}])";
  const auto at = spec.find(space_b);
  if (at != std::string::npos) spec.replace(at, space_b.size(), "]");
  return spec;
}
const std::string kClient = R"({"client": {}})";
const std::string kBuiltin = R"({"builtin": {"trainer": "fashion-mnist-mlp"}})";

double Loss(const json& params, int step) {
  const double base = params.contains("x") ? std::pow(params["x"].get<double>() - 0.3, 2)
                                           : 0.5 + std::pow(params["y"].get<double>() - 1, 2);
  return base + 1.0 / (step + 1);
}

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override { Open(); }
  void Open() {
    engine_.reset();
    store_.reset();
    store::StoreOptions o;
    o.clock = clock_.fn();
    auto s = store::OpenStore(backend_.url(), o);
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = std::move(s).value();
    engine_ = std::make_unique<Engine>(*store_, Options());
  }
  // The engine's options with the store's clock.
  EngineOptions Options() const {
    EngineOptions o;
    o.clock = clock_.fn();
    return o;
  }
  // A worker with one CPU, registered through the engine as Register does.
  struct TestWorker {
    WorkerCaller caller;
    store::Id device = 0;
    std::string owner;  // the lease owner its trials get
  };
  static TestWorker AddWorker(Engine& engine, const std::string& host,
                              const std::string& cpu = "cpu", double cores = 1,
                              double gflops = 10) {
    WorkerRegistration w;
    w.host = host;
    store::DeviceInfo d;
    d.kind = store::DeviceKind::kCpu;
    d.name = cpu;
    d.cores = cores;
    d.memory_bytes = 1;
    d.benchmark_gflops = gflops;
    w.devices.push_back(d);
    auto r = engine.RegisterWorker(w);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return {};
    return {
        {r->worker.id, r->session}, r->worker.devices.at(0).id, Engine::WorkerOwner(r->worker.id)};
  }
  TestWorker AddWorker(const std::string& host) { return AddWorker(*engine_, host); }
  Result<std::optional<Lease>> LeaseFor(const TestWorker& w) {
    return engine_->LeaseForWorker(w.caller, w.device);
  }

  // Runs one leased trial to its end; returns the decision that ended it.
  Decision RunTrial(const Lease& a, const std::string& owner, int steps = 4) {
    const json params = json::parse(a.trial.params_json);
    for (int step = 0; step < steps; ++step) {
      TrialReport r{a.trial.id,       owner,       step, {{"loss", Loss(params, step)}}, 500,
                    {{"threads", 2}}, std::nullopt};
      auto d = engine_->Report(r);
      EXPECT_TRUE(d.ok()) << d.status();
      if (!d.ok() || d->decision != Decision::kContinue)
        return d.ok() ? d->decision : Decision::kStop;
    }
    EXPECT_TRUE(engine_->Complete(a.trial.id, owner, false, json::object(), "").ok());
    return Decision::kContinue;
  }

  testing::FakeClock clock_;
  testing::SqliteBackend backend_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(EngineTest, AskTellRunsAClientExperimentToItsBudget) {
  auto e = engine_->CreateExperiment(Spec(kClient, 6, 2));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(store_->CountTrials(e->id)->total(), 0) << "client experiments wait for suggest calls";
  int done = 0;
  while (done < 6) {
    auto batch = engine_->Suggest(e->id, 4);
    ASSERT_TRUE(batch.ok()) << batch.status();
    ASSERT_FALSE(batch->empty());
    for (const auto& a : *batch) {
      EXPECT_EQ(a.trial.state, TrialState::kLeased);
      EXPECT_TRUE(a.space == "a" || a.space == "b") << a.space;
      EXPECT_EQ(json::parse(a.trial.system_params_json)["threads"], 3) << "middle of [1, 4]";
      RunTrial(a, Engine::kClientOwner);
      ++done;
    }
  }
  EXPECT_EQ(store_->CountTrials(e->id)->completed, 6);
  auto exp = store_->GetExperiment(e->id);
  EXPECT_EQ(exp->state, store::ExperimentState::kCompleted) << exp->reason;
  auto more = engine_->Suggest(e->id, 1);
  EXPECT_TRUE(more.status().IsFailedPrecondition());
  auto best = engine_->BestTrial(e->id);
  ASSERT_TRUE(best.ok() && best->has_value());
  EXPECT_EQ((*best)->trial.state, TrialState::kCompleted);
}

// A completion settles "not at the budget yet" from its engine's view,
// without counting the experiment's trials in the store. Two engines (two
// replicas) that each made half the budget each see only their half until
// their views are reread, so neither ends the experiment at its last
// completion; the tick, which counts in the store, does.
TEST_F(EngineTest, ABudgetReachedThroughAnotherReplicaEndsAtTheTick) {
  EngineOptions o = Options();
  o.history_cache = std::chrono::hours(1);  // the views are not reread in this test
  Engine a(*store_, o), b(*store_, o);
  auto e = a.CreateExperiment(Spec(kClient, 4, 4));
  ASSERT_TRUE(e.ok()) << e.status();
  // b makes one trial (its view holds that one), then a makes three (a's
  // view holds all four); a's trials complete first, b's last.
  std::vector<std::pair<Engine*, Lease>> made;
  for (auto [engine, count] : {std::pair<Engine*, int>{&b, 1}, {&a, 3}}) {
    auto batch = engine->Suggest(e->id, count);
    ASSERT_TRUE(batch.ok()) << batch.status();
    for (auto& l : *batch) made.emplace_back(engine, l);
  }
  std::rotate(made.begin(), made.begin() + 1, made.end());
  ASSERT_EQ(made.size(), 4u);
  for (auto& [engine, l] : made) {
    ASSERT_TRUE(
        engine->Complete(l.trial.id, Engine::kClientOwner, false, {{"loss", 0.5}}, "").ok());
  }
  EXPECT_EQ(store_->CountTrials(e->id)->completed, 4);
  ASSERT_TRUE(b.Tick().ok());  // b, whose view holds one trial of the four
  auto exp = store_->GetExperiment(e->id);
  EXPECT_EQ(exp->state, store::ExperimentState::kCompleted) << exp->reason;
}

// With many finished trials a lease lists the open ones from the view's
// index of them (TrialsSnapshot::open) rather than walking every trial: a
// trial that comes back to wait for a device is still offered, and at
// max_parallel 1 it is the only thing offered.
TEST_F(EngineTest, AfterManyFinishedTrialsAWaitingTrialIsStillOffered) {
  auto e = engine_->CreateExperiment(OneSpace(Spec(kBuiltin, 40, 1)));
  ASSERT_TRUE(e.ok()) << e.status();
  const TestWorker w = AddWorker("w");
  for (int i = 0; i < 20; ++i) {
    auto a = LeaseFor(w);
    ASSERT_TRUE(a.ok() && a->has_value()) << a.status();
    RunTrial(**a, w.owner);
  }
  auto waiting = LeaseFor(w);
  ASSERT_TRUE(waiting.ok() && waiting->has_value()) << waiting.status();
  clock_.Advance(engine_->options().worker_lease_ms + 1);
  ASSERT_TRUE(engine_->ReclaimExpiredLeases().ok());
  ASSERT_EQ(store_->GetTrial((*waiting)->trial.id)->state, TrialState::kPending);
  auto again = LeaseFor(w);
  ASSERT_TRUE(again.ok() && again->has_value()) << again.status();
  EXPECT_EQ((*again)->trial.id, (*waiting)->trial.id) << "the waiting trial was not offered";
  EXPECT_EQ(store_->CountTrials(e->id)->total(), 21);
}

TEST_F(EngineTest, WorkersGetEveryTrialOnceAndTheExperimentEnds) {
  auto e = engine_->CreateExperiment(Spec(kBuiltin, 12, 3));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(store_->CountTrials(e->id)->total(), 0) << "trials are made when devices ask, for them";
  const TestWorker workers[] = {AddWorker("a"), AddWorker("b")};
  std::set<store::Id> seen;
  for (int i = 0; i < 100; ++i) {
    auto a = LeaseFor(workers[i % 2]);
    ASSERT_TRUE(a.ok()) << a.status();
    if (!a->has_value()) break;
    EXPECT_TRUE(seen.insert((*a)->trial.id).second) << "trial handed out twice";
    auto n = *store_->CountTrials(e->id);
    EXPECT_LE(n.pending + n.leased + n.running, 3) << "more than max_parallel unfinished";
    RunTrial(**a, workers[i % 2].owner);
  }
  EXPECT_EQ(seen.size(), 12u);
  EXPECT_EQ(store_->CountTrials(e->id)->completed, 12);
  EXPECT_EQ(store_->GetExperiment(e->id)->state, store::ExperimentState::kCompleted);
}

// A lease looks through the running experiments as read at most
// history_cache ago: one this server creates or ends counts at once,
// another replica's within the bound.
TEST_F(EngineTest, LeasesSeeAnotherReplicasNewExperimentWithinTheCacheBound) {
  auto other = store::OpenStore(backend_.url());
  ASSERT_TRUE(other.ok()) << other.status();
  EngineOptions o = Options();
  o.history_cache = std::chrono::milliseconds(300);
  Engine a(*store_, o), b(**other, o);
  const TestWorker w = AddWorker(a, "a");
  auto none = a.LeaseForWorker(w.caller, w.device);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value()) << "no experiment yet";
  // Created here: offered at once.
  auto mine = a.CreateExperiment(Spec(kBuiltin, 1, 1));
  ASSERT_TRUE(mine.ok()) << mine.status();
  auto first = a.LeaseForWorker(w.caller, w.device);
  ASSERT_TRUE(first.ok() && first->has_value()) << first.status();
  EXPECT_EQ((*first)->trial.experiment_id, mine->id);
  ASSERT_TRUE(a.CancelExperiment(mine->id, "done").ok());
  none = a.LeaseForWorker(w.caller, w.device);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value()) << "ended here: not offered";
  // Created through the other replica after that read: offered once the
  // bound has passed.
  auto theirs = b.CreateExperiment(Spec(kBuiltin, 1, 1));
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  std::optional<Lease> got;
  for (const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
       !got && std::chrono::steady_clock::now() < deadline;) {
    auto l = a.LeaseForWorker(w.caller, w.device);
    ASSERT_TRUE(l.ok()) << l.status();
    if (l->has_value()) got = **l;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(got) << "another replica's experiment was never offered";
  EXPECT_EQ(got->trial.experiment_id, theirs->id);
}

// An experiment whose stored spec this server cannot read (another
// version wrote it; here a spec without a name, as a bare store client
// writes one) is skipped by leases and ticks: before, every lease failed
// with its DATA_LOSS, so one such experiment stopped the whole fleet, and
// a tick stopped at it before judging the experiments after it.
TEST_F(EngineTest, AnExperimentWithAnUnreadableSpecDoesNotStopTheOthersWork) {
  auto unreadable = store_->CreateExperiment({"unreadable", "{}", {}});
  ASSERT_TRUE(unreadable.ok()) << unreadable.status();
  ASSERT_EQ(unreadable->state, store::ExperimentState::kRunning);
  auto e = engine_->CreateExperiment(Spec(kBuiltin, 2, 1));
  ASSERT_TRUE(e.ok()) << e.status();
  const TestWorker w = AddWorker("a");
  for (int i = 0; i < 2; ++i) {
    auto a = LeaseFor(w);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(a->has_value()) << "lease " << i;
    EXPECT_EQ((*a)->trial.experiment_id, e->id);
    RunTrial(**a, w.owner);
  }
  EXPECT_EQ(store_->GetExperiment(e->id)->state, store::ExperimentState::kCompleted);
  // The unreadable one still says why, to whoever asks for it.
  EXPECT_EQ(engine_->Spec(unreadable->id).status().code(), StatusCode::kDataLoss);

  // A tick still ends an experiment whose wall-time budget ran out.
  std::string timed = Spec(kBuiltin, 10, 1);
  const std::string budget = R"("steps_per_trial": 4)";
  timed.replace(timed.find(budget), budget.size(), budget + R"(, "max_wall_time_s": 1)");
  auto t = engine_->CreateExperiment(timed);
  ASSERT_TRUE(t.ok()) << t.status();
  clock_.Advance(2'000);
  ASSERT_TRUE(engine_->Tick().ok());
  EXPECT_EQ(store_->GetExperiment(t->id)->state, store::ExperimentState::kCompleted);
}

// A server runs experiment after experiment: what it keeps in memory for
// one (the view of its trials, its samplers' copy of the histories) goes
// once the experiment has ended, and /metrics says how much is kept.
TEST_F(EngineTest, AnEndedExperimentsTrialsAreNotKeptInMemory) {
  metrics::Registry registry;
  EngineOptions o = Options();
  o.metrics = &registry;
  engine_ = std::make_unique<Engine>(*store_, o);
  auto ended = engine_->CreateExperiment(Spec(kClient, 20, 4));
  auto running = engine_->CreateExperiment(Spec(kClient, 100, 4));
  ASSERT_TRUE(ended.ok() && running.ok());
  for (int done = 0; done < 20;) {
    auto batch = engine_->Suggest(ended->id, 4);
    ASSERT_TRUE(batch.ok()) << batch.status();
    for (const auto& a : *batch) {
      RunTrial(a, Engine::kClientOwner);
      ++done;
    }
  }
  ASSERT_EQ(store_->GetExperiment(ended->id)->state, store::ExperimentState::kCompleted);
  auto batch = engine_->Suggest(running->id, 2);
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->size(), 2u);
  // The ended one's last batch was drawn from a copy of its first 16 trials.
  EXPECT_GE(engine_->KeptTrials(), 16u);

  ASSERT_TRUE(engine_->Tick().ok());
  // The running experiment's 2 trials, in its view and at most once more
  // in a copy; nothing of the ended one.
  const size_t kept = engine_->KeptTrials();
  EXPECT_GE(kept, 2u);
  EXPECT_LE(kept, 4u);
  const std::string text = registry.Render();
  const std::string series = "\nhpo_engine_kept_trials ";
  const auto at = text.find(series);
  ASSERT_NE(at, std::string::npos) << text;
  EXPECT_EQ(std::stod(text.substr(at + series.size())), static_cast<double>(kept));
  // The ended experiment still answers what it found.
  auto best = engine_->BestTrial(ended->id);
  ASSERT_TRUE(best.ok() && best->has_value());
}

TEST_F(EngineTest, AshaPrunesBadTrialsDuringReports) {
  auto e = engine_->CreateExperiment(
      Spec(kClient, 12, 1, R"(asha", "min_resource": 1, "reduction_factor": "3)"));
  ASSERT_FALSE(e.ok()) << "a string where a number belongs";
  e = engine_->CreateExperiment(Spec(kClient, 12, 1, "asha"));
  ASSERT_TRUE(e.ok()) << e.status();
  int pruned = 0;
  for (int i = 0; i < 12; ++i) {
    auto batch = engine_->Suggest(e->id, 1);
    ASSERT_TRUE(batch.ok()) << batch.status();
    pruned += RunTrial(batch->at(0), Engine::kClientOwner) == Decision::kPrune;
  }
  auto n = *store_->CountTrials(e->id);
  EXPECT_EQ(n.pruned, pruned);
  EXPECT_GT(pruned, 0) << "ASHA with eta 3 prunes some of 12 trials";
  EXPECT_EQ(n.completed + n.pruned, 12);
}

// The cached view early stopping and suggestions read
// (EngineOptions::history_cache) is kept current with the engine's own new
// trials, reports, prunes and completions: one engine decides and suggests
// exactly as one that reads everything every time.
TEST_F(EngineTest, CachedHistoryDecidesAndSuggestsAsReadingEverything) {
  for (const std::string rule : {R"({"rule": "median", "startup_trials": 2})",
                                 R"({"rule": "asha"})", R"({"rule": "none"})"}) {
    std::vector<std::vector<Decision>> runs;
    std::vector<std::vector<std::string>> suggested;
    for (const auto cache : {std::chrono::milliseconds(0), std::chrono::milliseconds(60'000)}) {
      testing::SqliteBackend backend;
      auto store = store::OpenStore(backend.url());
      ASSERT_TRUE(store.ok()) << store.status();
      EngineOptions o;
      o.history_cache = cache;
      Engine engine(**store, o);
      auto e = engine.CreateExperiment(SpecStopping(kClient, 16, 3, rule));
      ASSERT_TRUE(e.ok()) << e.status();
      std::vector<Decision> decisions;
      std::vector<std::string> asked;
      // Three trials at a time, their steps interleaved, so that decisions
      // depend on other trials' curves, completions and prunes.
      for (int round = 0; round < 5; ++round) {
        // Two asks in a row: the second must know the first's pending trials.
        auto batch = engine.Suggest(e->id, 2);
        ASSERT_TRUE(batch.ok()) << batch.status();
        auto more = engine.Suggest(e->id, 1);
        ASSERT_TRUE(more.ok()) << more.status();
        batch->insert(batch->end(), more->begin(), more->end());
        for (const auto& a : *batch) asked.push_back(a.space + " " + a.trial.params_json);
        std::vector<bool> live(batch->size(), true);
        for (int step = 0; step < 4; ++step) {
          for (size_t i = 0; i < batch->size(); ++i) {
            if (!live[i]) continue;
            const Lease& a = (*batch)[i];
            const json params = json::parse(a.trial.params_json);
            auto d = engine.Report({a.trial.id,
                                    Engine::kClientOwner,
                                    step,
                                    {{"loss", Loss(params, step)}},
                                    0,
                                    json::object(),
                                    std::nullopt});
            ASSERT_TRUE(d.ok()) << d.status();
            decisions.push_back(d->decision);
            if (d->decision != Decision::kContinue) live[i] = false;
          }
        }
        for (size_t i = 0; i < batch->size(); ++i) {
          if (live[i]) {
            ASSERT_TRUE(
                engine
                    .Complete((*batch)[i].trial.id, Engine::kClientOwner, false, json::object(), "")
                    .ok());
          }
        }
        if (store::TrialCounts n = *(*store)->CountTrials(e->id); n.total() >= 15) break;
      }
      runs.push_back(decisions);
      suggested.push_back(asked);
    }
    ASSERT_EQ(runs.size(), 2u);
    EXPECT_EQ(runs[0], runs[1]) << rule;
    EXPECT_EQ(suggested[0], suggested[1]) << rule;
    EXPECT_EQ(suggested[0].size(), 15u);
    if (rule.find("none") == std::string::npos) {
      EXPECT_NE(std::count(runs[0].begin(), runs[0].end(), Decision::kPrune), 0)
          << rule << ": nothing was judged";
    }
  }
}

// Another replica's reports reach this engine's decisions once its cached
// view is older than history_cache.
TEST_F(EngineTest, EarlyStoppingCountsAnotherReplicasReportsAfterTheCacheBound) {
  auto other = store::OpenStore(backend_.url());
  ASSERT_TRUE(other.ok()) << other.status();
  EngineOptions o;
  o.history_cache = std::chrono::milliseconds(100);
  Engine a(*store_, o), b(**other, o);
  auto e =
      a.CreateExperiment(SpecStopping(kClient, 8, 8, R"({"rule": "median", "startup_trials": 0})"));
  ASSERT_TRUE(e.ok()) << e.status();
  auto batch = a.Suggest(e->id, 8);
  ASSERT_TRUE(batch.ok()) << batch.status();
  // Two trials of one space (the rule judges a trial against its space's).
  std::map<std::string, std::vector<store::Id>> by_space;
  for (const auto& t : *batch) by_space[t.space].push_back(t.trial.id);
  const auto& same = by_space["a"].size() >= 2 ? by_space["a"] : by_space["b"];
  ASSERT_GE(same.size(), 2u);
  const store::Id good = same[0], bad = same[1];
  auto report = [&](Engine& engine, store::Id trial, int step, double loss) {
    auto d = engine.Report(
        {trial, Engine::kClientOwner, step, {{"loss", loss}}, 0, json::object(), std::nullopt});
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? d->decision : Decision::kStop;
  };
  // Replica b reads its view; nobody else is at step 0 yet.
  EXPECT_EQ(report(b, bad, 0, 5.0), Decision::kContinue);
  // Replica a hears a much better trial.
  EXPECT_EQ(report(a, good, 0, 1.0), Decision::kContinue);
  EXPECT_EQ(report(a, good, 1, 1.0), Decision::kContinue);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  // b's view is past its bound: it reads a's reports and prunes.
  EXPECT_EQ(report(b, bad, 1, 5.0), Decision::kPrune);
  EXPECT_EQ(store_->GetTrial(bad)->state, TrialState::kPruned);
}

TEST_F(EngineTest, ReportsNeedTheObjectiveAndStopAfterCancel) {
  auto e = engine_->CreateExperiment(Spec(kClient, 5, 2));
  ASSERT_TRUE(e.ok());
  auto batch = *engine_->Suggest(e->id, 2);
  auto bad = engine_->Report({batch[0].trial.id,
                              Engine::kClientOwner,
                              0,
                              {{"acc", 0.5}},
                              0,
                              json::object(),
                              std::nullopt});
  ASSERT_TRUE(bad.status().IsInvalidArgument());
  EXPECT_NE(bad.status().message().find("metrics.loss"), std::string::npos) << bad.status();
  ASSERT_TRUE(engine_->CancelExperiment(e->id, "user").ok());
  auto d = engine_->Report({batch[1].trial.id,
                            Engine::kClientOwner,
                            0,
                            {{"loss", 0.5}},
                            0,
                            json::object(),
                            std::nullopt});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->decision, Decision::kStop);
  EXPECT_EQ(store_->GetTrial(batch[1].trial.id)->state, TrialState::kCancelled);
}

TEST_F(EngineTest, AReportAfterItsExperimentCompletedIsKeptAndStopsTheTrial) {
  auto e = engine_->CreateExperiment(Spec(kClient, 5, 2));
  ASSERT_TRUE(e.ok());
  auto batch = *engine_->Suggest(e->id, 1);
  const store::Id trial = batch[0].trial.id;
  // Completed (as by its budget through another replica): trials in flight
  // are not cancelled, and learn it from their next report.
  ASSERT_TRUE(store_->FinishExperiment(e->id, store::ExperimentState::kCompleted, "budget").ok());
  auto d = engine_->Report(
      {trial, Engine::kClientOwner, 0, {{"loss", 0.5}}, 0, json::object(), std::nullopt});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->decision, Decision::kStop);
  EXPECT_EQ(store_->GetTrial(trial)->state, TrialState::kCancelled);
  EXPECT_EQ(store_->GetTrial(trial)->reason, "experiment completed: budget");
  const auto steps = store_->ListMeasurements(trial);
  ASSERT_TRUE(steps.ok()) << steps.status();
  EXPECT_EQ(steps->size(), 1u) << "the step it ran is kept";
}

// A trial cut by the wall-time budget says so, not only "experiment
// completed", and what it reached stays readable as its progress.
TEST_F(EngineTest, ATrialCutByTheWallTimeSaysWhyAndKeepsWhatItReached) {
  std::string timed = Spec(kBuiltin, 10, 1);
  const std::string budget = R"("steps_per_trial": 4)";
  timed.replace(timed.find(budget), budget.size(), budget + R"(, "max_wall_time_s": 5)");
  auto e = engine_->CreateExperiment(timed);
  ASSERT_TRUE(e.ok()) << e.status();
  const TestWorker w = AddWorker("a");
  auto a = LeaseFor(w);
  ASSERT_TRUE(a.ok() && a->has_value()) << "nothing leased";
  const store::Id trial = (*a)->trial.id;
  for (int step = 0; step < 2; ++step) {
    auto d = engine_->Report(
        {trial, w.owner, step, {{"loss", 1.0 - 0.25 * step}}, 100, json::object(), w.device});
    ASSERT_TRUE(d.ok()) << d.status();
    ASSERT_EQ(d->decision, Decision::kContinue);
    clock_.Advance(1'000);
  }
  clock_.Advance(4'000);
  ASSERT_TRUE(engine_->Tick().ok());
  ASSERT_EQ(store_->GetExperiment(e->id)->state, store::ExperimentState::kCompleted);
  auto d = engine_->Report({trial, w.owner, 2, {{"loss", 0.25}}, 100, json::object(), w.device});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->decision, Decision::kStop);
  const auto t = store_->GetTrial(trial);
  EXPECT_EQ(t->state, TrialState::kCancelled);
  EXPECT_EQ(t->reason, "experiment completed: wall-time budget of 5 s reached");
  auto progress = engine_->ListTrialProgress(e->id, t->number, t->number);
  ASSERT_TRUE(progress.ok()) << progress.status();
  ASSERT_EQ(progress->count(trial), 1u);
  EXPECT_EQ(progress->at(trial).last_step, 2);
  EXPECT_EQ(json::parse(progress->at(trial).last_metrics_json)["loss"], 0.25);
  EXPECT_GT(progress->at(trial).device_ms, 0) << "a worker's steps are charged their device time";
}

TEST_F(EngineTest, BadSpecsAreRejectedWithTheirPathAndWriteNothing) {
  auto e = engine_->CreateExperiment(R"({"name": "x", "objective": {"metric": "loss"},
    "spaces": [{"name": "s", "params": {"lr": {"type": "float", "low": 1, "high": 0}}}],
    "executor": {"client": {}}})");
  ASSERT_TRUE(e.status().IsInvalidArgument());
  EXPECT_NE(e.status().message().find("spaces[0].params.lr.low: must be < high"),
            std::string::npos);
  EXPECT_TRUE(store_->ListExperiments(0, 10)->empty());
}

TEST_F(EngineTest, ARestartedServerContinuesWithoutLosingOrRepeatingTrials) {
  auto e = engine_->CreateExperiment(Spec(kBuiltin, 10, 2));
  ASSERT_TRUE(e.ok());
  const TestWorker one = AddWorker("one"), two = AddWorker("two");
  std::set<store::Id> seen;
  for (int i = 0; i < 4; ++i) {
    auto a = *LeaseFor(one);
    ASSERT_TRUE(a.has_value());
    seen.insert(a->trial.id);
    RunTrial(*a, one.owner);
  }
  // One trial is mid-flight when the server stops.
  auto inflight = *LeaseFor(one);
  ASSERT_TRUE(inflight.has_value());
  ASSERT_TRUE(
      engine_
          ->Report(
              {inflight->trial.id, one.owner, 0, {{"loss", 1.0}}, 1, json::object(), std::nullopt})
          .ok());
  Open();  // a new store handle and engine: nothing cached survives
  // The worker finishes its trial against the new server.
  seen.insert(inflight->trial.id);
  EXPECT_EQ(RunTrial(*inflight, one.owner), Decision::kContinue);
  for (int i = 0; i < 50; ++i) {
    auto a = LeaseFor(two);  // its registration (and session) survived too
    ASSERT_TRUE(a.ok()) << a.status();
    if (!a->has_value()) break;
    EXPECT_TRUE(seen.insert((*a)->trial.id).second);
    RunTrial(**a, two.owner);
  }
  EXPECT_EQ(seen.size(), 10u);
  auto n = *store_->CountTrials(e->id);
  EXPECT_EQ(n.completed, 10);
  EXPECT_EQ(n.total(), 10);
  EXPECT_EQ(store_->GetExperiment(e->id)->state, store::ExperimentState::kCompleted);
}

TEST_F(EngineTest, ExpiredLeasesAreRequeuedByTick) {
  auto e = engine_->CreateExperiment(Spec(kBuiltin, 3, 1));
  ASSERT_TRUE(e.ok());
  const TestWorker one = AddWorker("one"), two = AddWorker("two");
  auto a = *LeaseFor(one);
  ASSERT_TRUE(a.has_value());
  clock_.Advance(engine_->options().worker_lease_ms + 1);
  ASSERT_TRUE(engine_->Tick().ok());
  EXPECT_EQ(store_->GetTrial(a->trial.id)->state, TrialState::kPending);
  auto again = *LeaseFor(two);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->trial.id, a->trial.id);
  EXPECT_EQ(again->trial.attempt, 2);
  auto stale = engine_->Report(
      one.caller, {a->trial.id, "", 0, {{"loss", 1.0}}, 1, json::object(), std::nullopt});
  EXPECT_TRUE(stale.status().IsFailedPrecondition()) << "the first worker lost its lease";
}

TEST_F(EngineTest, ReclaimingAnnouncesRequeuedAndFailedTrials) {
  std::vector<std::pair<std::string, json>> events;
  EngineOptions o;
  o.max_attempts = 2;
  o.on_event = [&](std::string type, const json& data) {
    if (type == "trial.requeued" || type == "trial.finished") events.emplace_back(type, data);
  };
  engine_ = std::make_unique<Engine>(*store_, o);
  auto e = engine_->CreateExperiment(Spec(kBuiltin, 3, 1));
  ASSERT_TRUE(e.ok()) << e.status();
  const TestWorker one = AddWorker("one"), two = AddWorker("two");
  auto first = *LeaseFor(one);
  ASSERT_TRUE(first.has_value());
  ASSERT_TRUE(engine_->ReclaimExpiredLeases().ok());
  EXPECT_TRUE(events.empty()) << "the lease has not expired yet";

  clock_.Advance(engine_->options().worker_lease_ms + 1);
  ASSERT_TRUE(engine_->ReclaimExpiredLeases().ok());
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].first, "trial.requeued");
  EXPECT_EQ(events[0].second["trial_id"], first->trial.id);
  EXPECT_EQ(events[0].second["experiment_id"], e->id);
  EXPECT_EQ(events[0].second["attempt"], 1);
  EXPECT_EQ(store_->GetTrial(first->trial.id)->state, TrialState::kPending);

  // The second (last) attempt runs out too: the trial fails, and says why.
  auto second = *LeaseFor(two);
  ASSERT_TRUE(second.has_value());
  ASSERT_EQ(second->trial.id, first->trial.id);
  clock_.Advance(engine_->options().worker_lease_ms + 1);
  ASSERT_TRUE(engine_->ReclaimExpiredLeases().ok());
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].first, "trial.finished");
  EXPECT_EQ(events[1].second["state"], "failed");
  EXPECT_NE(
      events[1].second["reason"].get<std::string>().find("lease expired after attempt 2 of 2"),
      std::string::npos)
      << events[1].second.dump();
  EXPECT_EQ(store_->GetTrial(first->trial.id)->state, TrialState::kFailed);
  // The requeue is kept in the trial's history; its end is the trial's own row.
  auto kept = engine_->ListTrialEvents(first->trial.id, 10);
  ASSERT_TRUE(kept.ok()) << kept.status();
  std::vector<store::TrialEventRecord> requeued;
  for (const auto& ev : *kept) {
    EXPECT_NE(ev.type, "trial.finished") << "the trial's row says how it ended";
    if (ev.type == "trial.requeued") requeued.push_back(ev);
  }
  ASSERT_EQ(requeued.size(), 1u);
  EXPECT_EQ(json::parse(requeued[0].data_json)["attempt"], 1);
  EXPECT_FALSE(json::parse(requeued[0].data_json).contains("trial_id"))
      << "the row says which trial";
}

}  // namespace
}  // namespace hpo::server

namespace hpo::server {
namespace {

TEST_F(EngineTest, CoTunesThreadsInsideTrialsAndRemembersTheWinnerPerDeviceClass) {
  const TestWorker worker = AddWorker(*engine_, "host", "test", 4);
  const store::Id device = worker.device;
  ASSERT_EQ(store_->GetWorker(worker.caller.worker_id)->devices.at(0).device_class,
            "cpu:test:x4.0");
  std::string spec = Spec(kBuiltin, 8, 1);
  spec.replace(spec.find(R"("steps_per_trial": 4)"), 20, R"("steps_per_trial": 8)");
  auto e = engine_->CreateExperiment(spec);
  ASSERT_TRUE(e.ok()) << e.status();
  // This machine trains fastest with 2 threads.
  auto speed = [](const json& system) {
    const int t = system["threads"];
    return t == 2 ? 3000.0 : t == 1 ? 1800.0 : t == 3 ? 2400.0 : 2000.0;
  };
  auto run = [&](const Lease& a) {
    json system = json::parse(a.trial.system_params_json);
    const json first = system;
    const std::string owner = worker.owner;
    for (int step = 1; step <= 8; ++step) {
      TrialReport r{a.trial.id, owner, step, {{"loss", 1.0 / step}}, speed(system), system, device};
      auto reply = engine_->Report(r);
      EXPECT_TRUE(reply.ok()) << reply.status();
      if (reply.ok() && reply->new_system) system = *reply->new_system;
    }
    EXPECT_TRUE(engine_->Complete(a.trial.id, owner, false, json::object(), "").ok());
    return std::make_pair(first, system);
  };
  auto a = LeaseFor(worker);
  ASSERT_TRUE(a.ok() && a->has_value());
  auto [first, settled] = run(**a);
  EXPECT_EQ(first["threads"], 3) << "the middle of [1, 4] before anything is known";
  EXPECT_EQ(settled["threads"], 2) << "co-tuning settles on the fastest setting";
  // The next trial of the same workload (space) on this device class starts
  // at the remembered winner; other spaces are other workloads.
  for (;;) {
    auto b = LeaseFor(worker);
    ASSERT_TRUE(b.ok() && b->has_value()) << "no second trial of space " << (*a)->space;
    if ((*b)->space == (*a)->space) {
      EXPECT_EQ(json::parse((*b)->trial.system_params_json)["threads"], 2);
      break;
    }
    run(**b);
  }
}

// A program that runs on with its first setting whatever it is asked (a
// command that never reads HPO_SYSTEM_FILE) is asked once, then left alone,
// with one event saying why.
TEST_F(EngineTest, CoTuningStopsForAProgramThatIgnoresChanges) {
  std::vector<std::pair<std::string, json>> events;
  EngineOptions o = Options();
  o.on_event = [&](std::string type, const json& data) { events.emplace_back(type, data); };
  engine_ = std::make_unique<Engine>(*store_, o);
  const TestWorker worker = AddWorker(*engine_, "host", "test", 4);
  std::string spec = OneSpace(Spec(kBuiltin, 1, 1));
  spec.replace(spec.find(R"("steps_per_trial": 4)"), 20, R"("steps_per_trial": 8)");
  ASSERT_TRUE(engine_->CreateExperiment(spec).ok());
  auto a = LeaseFor(worker);
  ASSERT_TRUE(a.ok() && a->has_value()) << a.status();
  const json system = json::parse((*a)->trial.system_params_json);
  int asked = 0;
  for (int step = 1; step <= 8; ++step) {
    auto reply = engine_->Report({(*a)->trial.id,
                                  worker.owner,
                                  step,
                                  {{"loss", 1.0 / step}},
                                  1000.0 + step,
                                  system,
                                  worker.device});
    ASSERT_TRUE(reply.ok()) << reply.status();
    asked += reply->new_system.has_value();
  }
  EXPECT_EQ(asked, 1) << "one probe, then no more";
  int stopped = 0;
  for (const auto& [type, data] : events) {
    if (type != "trial.cotuning_stopped") continue;
    ++stopped;
    EXPECT_EQ(data["step"], 2) << data.dump();
    EXPECT_EQ(data["trial_id"], (*a)->trial.id);
    EXPECT_EQ(data["parameter"], "threads") << data.dump();
    // It names the parameter, what ran and what was asked.
    const std::string reason = data["reason"];
    EXPECT_EQ(reason.rfind("system.threads: step 2 ran " + system["threads"].dump() + ", not ", 0),
              0u)
        << reason;
    EXPECT_NE(reason.find("as asked; co-tuning stops"), std::string::npos) << reason;
  }
  EXPECT_EQ(stopped, 1);
}

// The live events carry what a view of the trials (the dashboard) needs to
// apply them without reading: a new trial's number, space, params, state
// and level; a report's step, metrics, speed and setting; an end's state
// and metrics, and a failure's reason.
TEST_F(EngineTest, TrialEventsCarryWhatAViewNeedsToApplyThem) {
  std::vector<std::pair<std::string, json>> events;
  EngineOptions o = Options();
  o.on_event = [&](std::string type, const json& data) { events.emplace_back(type, data); };
  engine_ = std::make_unique<Engine>(*store_, o);
  const TestWorker worker = AddWorker(*engine_, "host", "test", 4);
  ASSERT_TRUE(engine_->CreateExperiment(OneSpace(Spec(kBuiltin, 2, 1))).ok());
  auto a = LeaseFor(worker);
  ASSERT_TRUE(a.ok() && a->has_value()) << a.status();
  const store::TrialRecord& t = (*a)->trial;
  const json system = json::parse(t.system_params_json);
  ASSERT_TRUE(
      engine_->Report({t.id, worker.owner, 1, {{"loss", 0.5}}, 1234.0, system, worker.device})
          .ok());
  ASSERT_TRUE(engine_->Complete(t.id, worker.owner, false, {{"loss", 0.25}}, "").ok());
  auto of = [&](const std::string& type) {
    for (const auto& [ty, data] : events) {
      if (ty == type && data["trial_id"] == t.id) return data;
    }
    return json();
  };
  const json created = of("trial.created");
  ASSERT_TRUE(created.is_object()) << "no trial.created for trial " << t.id;
  EXPECT_EQ(created["number"], t.number);
  EXPECT_EQ(created["space"], (*a)->space);
  EXPECT_EQ(created["params"], json::parse(t.params_json));
  EXPECT_EQ(created["state"], "leased") << "made for the device that asked";
  EXPECT_EQ(created["level"], 0);
  const json reported = of("trial.reported");
  EXPECT_EQ(reported["step"], 1);
  EXPECT_EQ(reported["metrics"], (json{{"loss", 0.5}}));
  EXPECT_EQ(reported["samples_per_sec"], 1234.0);
  EXPECT_EQ(reported["system"], system);
  const json finished = of("trial.finished");
  EXPECT_EQ(finished["state"], "completed");
  EXPECT_EQ(finished["metrics"]["loss"], 0.25);
  EXPECT_FALSE(finished.contains("reason")) << finished.dump();

  // A failed trial's end says why, as a pruned one's does.
  auto b = LeaseFor(worker);
  ASSERT_TRUE(b.ok() && b->has_value()) << b.status();
  ASSERT_TRUE(
      engine_->Complete((*b)->trial.id, worker.owner, true, json::object(), "CUDA out of memory")
          .ok());
  json failed;
  for (const auto& [ty, data] : events) {
    if (ty == "trial.finished" && data["trial_id"] == (*b)->trial.id) failed = data;
  }
  EXPECT_EQ(failed["state"], "failed") << failed.dump();
  EXPECT_EQ(failed["reason"], "CUDA out of memory") << failed.dump();
}

// What co-tuning learned stays with its experiment unless the spec names the
// workload: then experiments naming the same one share it.
TEST_F(EngineTest, LearnedSettingsAreSharedOnlyUnderANamedWorkload) {
  const TestWorker worker = AddWorker(*engine_, "host", "test", 4);
  auto speed = [](const json& system) { return system["threads"] == 2 ? 3000.0 : 1500.0; };
  auto spec = [](const std::string& workload) {
    std::string s = OneSpace(Spec(kBuiltin, 2, 1));
    s.replace(s.find(R"("steps_per_trial": 4)"), 20, R"("steps_per_trial": 8)");
    if (!workload.empty()) s.insert(s.find('{') + 1, R"("workload": ")" + workload + R"(",)");
    return s;
  };
  // Runs the experiment's trials, co-tuned; the first trial's start setting.
  auto run_experiment = [&](const std::string& text) {
    auto e = engine_->CreateExperiment(text);
    EXPECT_TRUE(e.ok()) << e.status();
    json first;
    for (int trial = 0; trial < 2; ++trial) {
      auto a = LeaseFor(worker);
      EXPECT_TRUE(a.ok() && a->has_value());
      if (!a.ok() || !a->has_value()) break;
      json system = json::parse((*a)->trial.system_params_json);
      if (trial == 0) first = system;
      for (int step = 1; step <= 8; ++step) {
        auto reply = engine_->Report({(*a)->trial.id,
                                      worker.owner,
                                      step,
                                      {{"loss", 1.0 / step}},
                                      speed(system),
                                      system,
                                      worker.device});
        EXPECT_TRUE(reply.ok()) << reply.status();
        if (reply.ok() && reply->new_system) system = *reply->new_system;
      }
      EXPECT_EQ(system["threads"], 2) << "co-tuning settles on the fastest";
      EXPECT_TRUE(engine_->Complete((*a)->trial.id, worker.owner, false, json::object(), "").ok());
    }
    return first;
  };
  EXPECT_EQ(run_experiment(spec("quad-shared"))["threads"], 3)
      << "nothing known yet: the middle of [1, 4]";
  EXPECT_EQ(run_experiment(spec(""))["threads"], 3)
      << "an unnamed workload is this experiment's own";
  EXPECT_EQ(run_experiment(spec("quad-shared"))["threads"], 2)
      << "the named workload's remembered winner";
}

// Reuse spares probes: once earlier trials on the device class measured
// each neighbour of the remembered best (kMinObservationsToReuseSetting
// times), a trial that starts there runs every epoch at it; before that,
// trials probe as ever.
TEST_F(EngineTest, LaterTrialsDoNotProbeWhatEarlierTrialsMeasuredSlower) {
  const TestWorker worker = AddWorker(*engine_, "host", "test", 4);
  auto speed = [](const json& system) { return system["threads"] == 2 ? 3000.0 : 1500.0; };
  std::string spec = OneSpace(Spec(kBuiltin, 3, 1));
  spec.replace(spec.find(R"("steps_per_trial": 4)"), 20, R"("steps_per_trial": 6)");
  auto e = engine_->CreateExperiment(spec);
  ASSERT_TRUE(e.ok()) << e.status();
  std::vector<std::set<int>> ran;  // the thread counts each trial's epochs ran
  std::vector<int> asked;          // how many times each trial was asked to change
  for (int trial = 0; trial < 3; ++trial) {
    auto a = LeaseFor(worker);
    ASSERT_TRUE(a.ok() && a->has_value()) << a.status();
    json system = json::parse((*a)->trial.system_params_json);
    ran.emplace_back();
    asked.push_back(0);
    for (int step = 1; step <= 6; ++step) {
      ran.back().insert(system["threads"].get<int>());
      auto reply = engine_->Report({(*a)->trial.id,
                                    worker.owner,
                                    step,
                                    {{"loss", 1.0 / step}},
                                    speed(system),
                                    system,
                                    worker.device});
      ASSERT_TRUE(reply.ok()) << reply.status();
      if (reply->new_system) {
        system = *reply->new_system;
        ++asked.back();
      }
    }
    EXPECT_EQ(system["threads"], 2) << "trial " << trial << " settles on the fastest";
    ASSERT_TRUE(engine_->Complete((*a)->trial.id, worker.owner, false, json::object(), "").ok());
  }
  EXPECT_EQ(ran[0], (std::set<int>{1, 2, 3})) << "nothing known: the middle, then its neighbours";
  EXPECT_EQ(ran[1], (std::set<int>{1, 2, 3}))
      << "starts at 2, but 1 and 3 were measured once only: probed again";
  EXPECT_EQ(ran[2], (std::set<int>{2})) << "1 and 3 known slower twice over: no probe";
  EXPECT_EQ(asked[2], 0);
}

}  // namespace
}  // namespace hpo::server

namespace hpo::server {
namespace {

// Promotion-type ASHA through the engine's lease path: trials pause at their
// first rung; a paused trial that earned it is resumed, on the fast device,
// while the slow one starts new trials.
TEST_F(EngineTest, PromotionsGoToTheFastDeviceNewTrialsToTheSlowOne) {
  std::vector<std::pair<std::string, json>> events;
  EngineOptions o = Options();
  o.on_event = [&](std::string type, const json& data) { events.emplace_back(type, data); };
  engine_ = std::make_unique<Engine>(*store_, o);
  const TestWorker fast = AddWorker(*engine_, "fast", "big", 8, 400);
  const TestWorker slow = AddWorker(*engine_, "slow", "small", 1, 20);
  std::string spec = OneSpace(SpecStopping(
      kBuiltin, 20, 4,
      R"({"rule": "asha", "type": "promotion", "min_resource": 1, "reduction_factor": 3})"));
  ASSERT_EQ(spec.find(R"("name": "b")"), std::string::npos);
  spec.replace(spec.find(R"("steps_per_trial": 4)"), 20, R"("steps_per_trial": 9)");
  auto e = engine_->CreateExperiment(spec);
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_EQ((*engine_->Spec(e->id))->early_stopping_type, ExperimentSpec::StoppingType::kPromotion)
      << "as the spec asks";
  // Three trials run to the first rung (step 1) and pause there.
  std::map<store::Id, double> loss;
  for (int i = 0; i < 3; ++i) {
    const TestWorker& w = i % 2 ? slow : fast;
    auto a = LeaseFor(w);
    ASSERT_TRUE(a.ok() && a->has_value()) << a.status();
    const store::TrialRecord& t = (*a)->trial;
    EXPECT_EQ(t.stop_step, 1) << "a new trial runs to the first rung";
    EXPECT_EQ(t.level, 0);
    loss[t.id] = 0.9 - 0.2 * i;
    TrialReport r{t.id,           w.owner, 1, {{"loss", loss[t.id]}}, i % 2 ? 100.0 : 1000.0,
                  json::object(), w.device};
    auto d = engine_->Report(r);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_NE(d->decision, Decision::kPrune) << "promotion-type rules stop nothing at a report";
    ASSERT_TRUE(store_->PauseTrial(t.id, w.owner, 1).ok());
    engine_->ForgetHistory(e->id);  // the pause went around the engine
  }
  const store::Id best = std::min_element(loss.begin(), loss.end(), [](auto& a, auto& b) {
                           return a.second < b.second;
                         })->first;
  // The slow device asks first: it leaves the promotion to the fast one.
  auto s = LeaseFor(slow);
  ASSERT_TRUE(s.ok() && s->has_value()) << s.status();
  EXPECT_NE((*s)->trial.id, best);
  EXPECT_EQ((*s)->trial.level, 0) << "a new trial";
  auto f = LeaseFor(fast);
  ASSERT_TRUE(f.ok() && f->has_value()) << f.status();
  EXPECT_EQ((*f)->trial.id, best) << "the fast device resumes the best paused trial";
  EXPECT_EQ((*f)->trial.level, 1);
  EXPECT_EQ((*f)->trial.stop_step, 3) << "to the next rung";
  EXPECT_EQ(store_->GetTrial(best)->state, TrialState::kLeased);
  bool resumed = false, restarted = false;
  for (const auto& [type, data] : events) {
    if (data.value("trial_id", store::Id{0}) != best) continue;
    resumed = resumed || type == "trial.resumed";
    // This engine has no artifact store: the promoted trial starts over, and says so.
    restarted = restarted || (type == "trial.restarted" &&
                              data["reason"].get<std::string>().find("no usable checkpoint") !=
                                  std::string::npos);
  }
  EXPECT_TRUE(resumed);
  EXPECT_TRUE(restarted);
  EXPECT_EQ((*f)->trial.resume_step, 0);
}

// Stop-type early stopping with migration (placement.migrate): a trial
// that survives a rung on a slow device pauses there to go on on the fast
// one, and the fast device's less advanced trial pauses at its next step to
// make room (preemption); the slow device does not take the mover back.
TEST_F(EngineTest, AStopTypeTrialThatPassesARungMovesToTheFastDevicePreemptingNewerWork) {
  std::vector<std::pair<std::string, json>> events;
  EngineOptions o = Options();
  o.on_event = [&](std::string type, const json& data) { events.emplace_back(type, data); };
  // Steps are timed on the fake clock too: samples per step, from which the
  // move's seconds are estimated.
  o.steady_clock = [now = clock_.now] {
    return std::chrono::steady_clock::time_point(std::chrono::milliseconds(now->load()));
  };
  engine_ = std::make_unique<Engine>(*store_, o);
  const TestWorker fast = AddWorker(*engine_, "fast", "big", 8, 400);
  const TestWorker slow = AddWorker(*engine_, "slow", "small", 1, 20);
  std::string spec = OneSpace(SpecStopping(
      kBuiltin, 20, 4,
      R"({"rule": "asha", "type": "stop", "min_resource": 2, "reduction_factor": 3})"));
  spec.replace(spec.find(R"("steps_per_trial": 4)"), 20,
               R"("steps_per_trial": 9)");  // rungs 2 and 6
  auto e = engine_->CreateExperiment(spec);
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_TRUE((*engine_->Spec(e->id))->placement_migrate)
      << "the default for stop-type asha on the built-in trainer";
  // The clock moves by `wait_ms` (by default a step of 1000 samples at this speed) first.
  const auto report = [&](const TestWorker& w, store::Id trial, int64_t step, double loss,
                          double sps, int64_t wait_ms = -1) {
    clock_.Advance(wait_ms >= 0 ? wait_ms : static_cast<int64_t>(1000 * 1000 / sps));
    auto d = engine_->Report(w.caller,
                             {trial, "", step, {{"loss", loss}}, sps, json::object(), w.device});
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? *d : ReportReply{Decision::kStop, std::nullopt, d.status().ToString()};
  };
  // The fast device measures itself (1000 samples/s) with a trial it completes early.
  auto a = LeaseFor(fast);
  ASSERT_TRUE(a.ok() && a->has_value()) << a.status();
  EXPECT_EQ((*a)->trial.stop_step, std::nullopt)
      << "stop-type: a trial runs to its end unless moved";
  for (int64_t step = 1; step <= 3; ++step) {
    EXPECT_EQ(report(fast, (*a)->trial.id, step, 0.8, 1000).decision, Decision::kContinue);
  }
  ASSERT_TRUE(engine_->Complete(fast.caller, (*a)->trial.id, false, json::object(), "", "").ok());
  // The slow device (10 samples/s) starts B; meanwhile the fast one starts C.
  auto b = LeaseFor(slow);
  ASSERT_TRUE(b.ok() && b->has_value()) << b.status();
  const store::Id moving = (*b)->trial.id;
  EXPECT_EQ(report(slow, moving, 1, 0.5, 10).decision, Decision::kContinue) << "step 1 is no rung";
  // C starts a second before B's next step, so the fast device is busy
  // with it (for 9 s by placement's estimate) when B passes its rung.
  clock_.Advance(99'000);
  auto c = LeaseFor(fast);
  ASSERT_TRUE(c.ok() && c->has_value()) << c.status();
  const store::Id newer = (*c)->trial.id;
  ASSERT_NE(newer, moving);
  // B passes rung 2 (better than A there): 7 steps left, 700 s here, about
  // 9 s there once C pauses.
  const ReportReply moved = report(slow, moving, 2, 0.4, 10, 1000);
  ASSERT_EQ(moved.decision, Decision::kPause) << moved.reason;
  EXPECT_NE(moved.reason.find("moving to a faster device"), std::string::npos) << moved.reason;
  ASSERT_TRUE(engine_->PauseTrial(slow.caller, moving, 2, false).ok());
  // The slow device does not take it back.
  auto other = LeaseFor(slow);
  ASSERT_TRUE(other.ok()) << other.status();
  if (other->has_value()) {
    EXPECT_NE((*other)->trial.id, moving);
  }
  // C, which passed no rung, pauses at its next step, and the fast device takes B to its end.
  const ReportReply preempted = report(fast, newer, 1, 0.9, 1000);
  ASSERT_EQ(preempted.decision, Decision::kPause) << preempted.reason;
  EXPECT_NE(preempted.reason.find("preempted for trial " + std::to_string(moving)),
            std::string::npos)
      << preempted.reason;
  ASSERT_TRUE(engine_->PauseTrial(fast.caller, newer, 1, false).ok());
  auto resumed = LeaseFor(fast);
  ASSERT_TRUE(resumed.ok() && resumed->has_value()) << resumed.status();
  EXPECT_EQ((*resumed)->trial.id, moving);
  EXPECT_EQ((*resumed)->trial.stop_step, std::nullopt) << "to its end";
  // The events say why, and the experiment does not end while they wait.
  bool moving_event = false, preempted_event = false;
  for (const auto& [type, data] : events) {
    if (type == "trial.moving" && data["trial_id"] == moving) {
      moving_event = true;
      EXPECT_EQ(data["to_class"], "cpu:big:x8.0") << data.dump();
      EXPECT_EQ(data["preempts_trial_id"], newer) << data.dump();
    }
    preempted_event = preempted_event || (type == "trial.preempted" && data["trial_id"] == newer);
  }
  EXPECT_TRUE(moving_event);
  EXPECT_TRUE(preempted_event);
  EXPECT_EQ(store_->GetExperiment(e->id)->state, store::ExperimentState::kRunning);
}

// Promotion-type ASHA over three trials of 3 steps, rungs at steps 1 and 3,
// in one space: its three trials meet at one rung (with two, new trials
// take turns between the spaces and no rung would hold three).
std::string ThreeTrialsAtOneRung() {
  std::string spec = OneSpace(SpecStopping(
      kBuiltin, 3, 3,
      R"({"rule": "asha", "type": "promotion", "min_resource": 1, "reduction_factor": 3})"));
  spec.replace(spec.find(R"("steps_per_trial": 4)"), 20, R"("steps_per_trial": 3)");
  return spec;
}

// The experiment ends once its budget is spent, nothing runs, and no paused
// trial may go on; the paused ones are pruned then, as never promoted.
TEST_F(EngineTest, APromotionExperimentEndsWhenNoPausedTrialMayGoOn) {
  const TestWorker w = AddWorker("w");
  const std::string spec = ThreeTrialsAtOneRung();
  auto e = engine_->CreateExperiment(spec);
  ASSERT_TRUE(e.ok()) << e.status();
  for (int i = 0; i < 3; ++i) {
    auto a = LeaseFor(w);
    ASSERT_TRUE(a.ok() && a->has_value()) << a.status();
    ASSERT_TRUE(
        engine_
            ->Report(
                {(*a)->trial.id, w.owner, 1, {{"loss", 0.5 + i}}, 0, json::object(), std::nullopt})
            .ok());
    ASSERT_TRUE(store_->PauseTrial((*a)->trial.id, w.owner, 1).ok());
    engine_->ForgetHistory(e->id);
  }
  // One of three may go on: the best, to the end (step 3).
  auto promoted = LeaseFor(w);
  ASSERT_TRUE(promoted.ok() && promoted->has_value()) << promoted.status();
  EXPECT_EQ((*promoted)->trial.stop_step, std::nullopt) << "its last segment runs to the end";
  auto none = LeaseFor(w);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value()) << "the budget is spent and nobody else may go on";
  for (int64_t step = 1; step <= 3; ++step) {
    ASSERT_TRUE(engine_
                    ->Report({(*promoted)->trial.id,
                              w.owner,
                              step,
                              {{"loss", 0.4}},
                              0,
                              json::object(),
                              std::nullopt})
                    .ok());
  }
  ASSERT_TRUE(engine_->Complete((*promoted)->trial.id, w.owner, false, json::object(), "").ok());
  auto exp = *store_->GetExperiment(e->id);
  EXPECT_EQ(exp.state, store::ExperimentState::kCompleted) << exp.reason;
  auto n = *store_->CountTrials(e->id);
  EXPECT_EQ(n.completed, 1);
  EXPECT_EQ(n.pruned, 2);
  store::TrialFilter pruned;
  pruned.state = store::TrialState::kPruned;
  pruned.limit = 10;
  for (const auto& t : *store_->ListTrials(e->id, pruned)) {
    EXPECT_NE(t.reason.find("not promoted"), std::string::npos) << t.reason;
  }
}

// Promotion-type ASHA on two objectives (loss and the model's size): of
// three trials paused at a rung, the two on its front go on (by loss alone
// one would, the best), the lonelier first (here a tie: the lower number);
// the dominated one does not.
TEST_F(EngineTest, PromotionOnSeveralObjectivesResumesATrialOfTheRungsFront) {
  const TestWorker w = AddWorker("w");
  std::string spec = ThreeTrialsAtOneRung();
  const std::string one = R"("objective": {"metric": "loss", "direction": "minimize"})";
  spec.replace(spec.find(one), one.size(),
               R"("objectives": [{"metric": "loss"}, {"metric": "params"}])");
  auto e = engine_->CreateExperiment(spec);
  ASSERT_TRUE(e.ok()) << e.status();
  // Trial 0 is dominated; 1 and 2 make the front (2 has the best loss).
  const std::vector<std::pair<double, double>> at_rung = {{0.6, 950}, {0.5, 100}, {0.3, 900}};
  std::vector<store::Id> ids;
  for (const auto& [loss, params] : at_rung) {
    auto a = LeaseFor(w);
    ASSERT_TRUE(a.ok() && a->has_value()) << a.status();
    ids.push_back((*a)->trial.id);
    auto r = engine_->Report({(*a)->trial.id,
                              w.owner,
                              1,
                              {{"loss", loss}, {"params", params}},
                              0,
                              json::object(),
                              std::nullopt});
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(store_->PauseTrial((*a)->trial.id, w.owner, 1).ok());
    engine_->ForgetHistory(e->id);
  }
  // The worker's one device runs one segment at a time: each promoted
  // trial runs to its end before the next lease. (No checkpoint was
  // stored, so it starts over at step 1, where it reports as before.)
  for (const size_t k : {size_t{1}, size_t{2}}) {
    auto promoted = LeaseFor(w);
    ASSERT_TRUE(promoted.ok() && promoted->has_value()) << promoted.status();
    EXPECT_EQ((*promoted)->trial.id, ids[k]);
    EXPECT_EQ((*promoted)->trial.stop_step, std::nullopt) << "its last segment runs to the end";
    for (int64_t step = 1; step <= 3; ++step) {
      const auto [loss, params] = step == 1 ? at_rung[k] : std::make_pair(0.2, 100.0);
      ASSERT_TRUE(engine_
                      ->Report({ids[k],
                                w.owner,
                                step,
                                {{"loss", loss}, {"params", params}},
                                0,
                                json::object(),
                                std::nullopt})
                      .ok());
    }
    ASSERT_TRUE(engine_->Complete(ids[k], w.owner, false, json::object(), "").ok());
  }
  auto none = LeaseFor(w);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value()) << "the dominated trial does not go on";
  EXPECT_EQ(store_->CountTrials(e->id)->completed, 2);
}

// Cost-aware placement: with prices per device class and a deadline both
// meet, a device three times dearer per sample gets nothing while a cheap
// one is there to do the work.
TEST_F(EngineTest, ADearDeviceWaitsWhileACheapOneMeetsTheDeadline) {
  const TestWorker cheap = AddWorker(*engine_, "cheap", "small", 1, 20);
  const TestWorker dear = AddWorker(*engine_, "dear", "big", 8, 400);
  const std::string cheap_class =
      store_->GetWorker(cheap.caller.worker_id)->devices.at(0).device_class;
  const std::string dear_class =
      store_->GetWorker(dear.caller.worker_id)->devices.at(0).device_class;
  // An earlier experiment of the same named workload (one space, so that
  // one trial on each device measures it) taught the engine their speeds:
  // 100 and 1000 samples/s.
  auto named = [](std::string spec) {
    return spec.insert(spec.find('{') + 1, R"("workload": "shared",)");
  };
  auto earlier = engine_->CreateExperiment(named(OneSpace(Spec(kBuiltin, 20, 4))));
  ASSERT_TRUE(earlier.ok()) << earlier.status();
  for (const TestWorker* w : {&cheap, &dear}) {
    auto a = LeaseFor(*w);
    ASSERT_TRUE(a.ok() && a->has_value()) << a.status();
    for (int64_t step = 1; step <= 4; ++step) {
      ASSERT_TRUE(engine_
                      ->Report({(*a)->trial.id,
                                w->owner,
                                step,
                                {{"loss", 0.5}},
                                w == &cheap ? 100.0 : 1000.0,
                                json::object(),
                                w->device})
                      .ok());
    }
    ASSERT_TRUE(engine_->Complete((*a)->trial.id, w->owner, false, json::object(), "").ok());
  }
  ASSERT_TRUE(engine_->CancelExperiment(earlier->id, "done").ok());
  std::string spec = named(OneSpace(Spec(kBuiltin, 20, 4)));
  spec.insert(spec.rfind('}'), R"(, "cost": {"prices": {")" + cheap_class + R"(": 1, ")" +
                                   dear_class + R"(": 30}, "deadline_s": 3600})");
  auto e = engine_->CreateExperiment(spec);
  ASSERT_TRUE(e.ok()) << e.status();
  auto d = LeaseFor(dear);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE(d->has_value()) << "30/h at 1000 samples/s is 3x the cost of 1/h at 100";
  auto c = LeaseFor(cheap);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->has_value());
}

// cost.budget: each step is charged its device's time since the lease or the
// previous report at the device's price; once the budget is spent no
// device gets work, and the next tick completes the experiment saying why.
TEST_F(EngineTest, ASpentBudgetStopsTheLeasesAndEndsTheExperiment) {
  const TestWorker w = AddWorker(*engine_, "w", "small", 1, 20);
  const TestWorker other = AddWorker(*engine_, "other", "small", 1, 20);
  const std::string device_class =
      store_->GetWorker(w.caller.worker_id)->devices.at(0).device_class;
  std::string spec = OneSpace(Spec(kBuiltin, 20, 2));
  // 3.60 an hour is 0.001 a second: 50 s of device time.
  spec.insert(spec.rfind('}'),
              R"(, "cost": {"prices": {")" + device_class + R"(": 3.6}, "budget": 0.05})");
  auto e = engine_->CreateExperiment(spec);
  ASSERT_TRUE(e.ok()) << e.status();
  auto a = LeaseFor(w);
  ASSERT_TRUE(a.ok() && a->has_value()) << a.status();
  for (int64_t step = 1; step <= 3; ++step) {
    clock_.Advance(20'000);
    auto d = engine_->Report(
        {(*a)->trial.id, w.owner, step, {{"loss", 0.5}}, 100.0, json::object(), w.device});
    ASSERT_TRUE(d.ok()) << d.status();
    if (step == 2) {
      ASSERT_TRUE(engine_->Tick().ok());
      EXPECT_EQ(store_->GetExperiment(e->id)->state, store::ExperimentState::kRunning)
          << "0.04 of 0.05 spent";
    }
  }
  auto ms = store_->ListMeasurements((*a)->trial.id);
  ASSERT_TRUE(ms.ok() && ms->size() == 3u);
  for (const auto& m : *ms) {
    EXPECT_EQ(m.device_ms, 20'000) << "step " << m.step;
    EXPECT_NEAR(m.cost, 0.02, 1e-12) << "step " << m.step;
  }
  auto later = LeaseFor(other);
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_FALSE(later->has_value()) << "0.06 spent of 0.05: no device gets work";
  ASSERT_TRUE(engine_->Tick().ok());
  auto ended = store_->GetExperiment(e->id);
  EXPECT_EQ(ended->state, store::ExperimentState::kCompleted);
  EXPECT_NE(ended->reason.find("cost budget of 0.05 reached"), std::string::npos) << ended->reason;
  auto used = engine_->ExperimentUsage(e->id);
  ASSERT_TRUE(used.ok()) << used.status();
  EXPECT_EQ(used->device_ms, 60'000);
  EXPECT_NEAR(used->cost, 0.06, 1e-12);
}

// A store whose CreateTrialsUpTo, while armed, waits until released: making
// a trial stays under way for as long as a test wants.
class StalledTopUps : public testing::StoreWrapper, public testing::StallGate {
 public:
  using StoreWrapper::StoreWrapper;
  Result<std::vector<store::TrialRecord>> CreateTrialsUpTo(
      store::Id experiment_id, const std::vector<store::NewTrial>& trials,
      const TrialLimits& limits) override {
    StallWhileArmed();
    return StoreWrapper::CreateTrialsUpTo(experiment_id, trials, limits);
  }
};

// With many workers, leases used to queue behind whichever call was making
// trials (a suggestion, then a NOTIFY per trial) until they ran past their
// deadlines. One new trial at a time per experiment still, but a lease that
// finds one being made takes other work (here a requeued trial) and goes.
TEST_F(EngineTest, ALeaseDoesNotWaitForAnotherLeaseMakingATrial) {
  StalledTopUps stalled(*store_);
  Engine engine(stalled, Options());
  auto e = engine.CreateExperiment(Spec(kBuiltin, 20, 4));
  ASSERT_TRUE(e.ok()) << e.status();
  const TestWorker one = AddWorker(engine, "one"), two = AddWorker(engine, "two"),
                   three = AddWorker(engine, "three");
  auto first = engine.LeaseForWorker(three.caller, three.device);
  ASSERT_TRUE(first.ok() && first->has_value()) << first.status();
  stalled.Arm();
  // Worker 1's lease makes a new trial (there is nothing else) and stalls in the store.
  std::optional<Result<std::optional<Lease>>> a1;
  std::thread worker1([&] { a1 = engine.LeaseForWorker(one.caller, one.device); });
  const bool stalled_making = stalled.WaitUntilStalled(std::chrono::seconds(30));
  // Meanwhile the first trial comes to wait for a device: its lease expired.
  clock_.Advance(engine.options().worker_lease_ms + 1);
  ASSERT_TRUE(engine.ReclaimExpiredLeases().ok());
  ASSERT_EQ(store_->GetTrial((*first)->trial.id)->state, TrialState::kPending);
  // Worker 2 asks meanwhile. (The 30 s only keep a broken engine from
  // hanging the test.)
  auto second =
      std::async(std::launch::async, [&] { return engine.LeaseForWorker(two.caller, two.device); });
  const bool returned = second.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  stalled.Release();
  worker1.join();
  ASSERT_TRUE(stalled_making) << "worker 1's lease made no trial";
  EXPECT_TRUE(returned) << "worker 2's lease waited for worker 1's new trial";
  auto got = second.get();
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status();
  EXPECT_EQ((*got)->trial.id, (*first)->trial.id) << "it took the waiting trial";
  ASSERT_TRUE(a1 && a1->ok() && (*a1)->has_value());
  EXPECT_NE((**a1)->trial.id, (*first)->trial.id);
  auto n = store_->CountTrials(e->id);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->leased, 2);
}

// While armed, stalls every lease of the first pending trial a lease takes
// once armed (`stalled_trial`); the others go through.
class StalledLeaseOfOne : public testing::StoreWrapper, public testing::StallGate {
 public:
  using StoreWrapper::StoreWrapper;
  std::atomic<bool> choosing{false};
  std::atomic<store::Id> stalled_trial{0};
  Result<store::TrialRecord> LeaseTrial(store::Id trial_id, const std::string& owner,
                                        int64_t lease_ms) override {
    store::Id none = 0;
    if (choosing) stalled_trial.compare_exchange_strong(none, trial_id);
    if (trial_id == stalled_trial.load()) StallWhileArmed();
    return StoreWrapper::LeaseTrial(trial_id, owner, lease_ms);
  }
};

// Leases that asked at once all chose the same waiting trial; all but one
// lost the race in the store and planned again (bench/load's lease tail).
// A lease now plans without the trials other leases are taking.
TEST_F(EngineTest, ALeaseDoesNotChooseTheTrialAnotherLeaseIsTaking) {
  StalledLeaseOfOne stalled(*store_);
  Engine engine(stalled, Options());
  // max_parallel 2: with both trials waiting, only they are offered.
  auto e = engine.CreateExperiment(Spec(kBuiltin, 20, 2));
  ASSERT_TRUE(e.ok()) << e.status();
  const TestWorker one = AddWorker(engine, "one"), two = AddWorker(engine, "two"),
                   three = AddWorker(engine, "three");
  // Two trials come to wait for a device: their leases expired.
  auto a = engine.LeaseForWorker(three.caller, three.device);
  auto b = engine.LeaseForWorker(three.caller, three.device);
  ASSERT_TRUE(a.ok() && a->has_value() && b.ok() && b->has_value());
  clock_.Advance(engine.options().worker_lease_ms + 1);
  ASSERT_TRUE(engine.ReclaimExpiredLeases().ok());
  ASSERT_EQ(store_->GetTrial((*a)->trial.id)->state, TrialState::kPending);
  ASSERT_EQ(store_->GetTrial((*b)->trial.id)->state, TrialState::kPending);
  // Worker 1 takes one of them, and stalls in the store doing so.
  stalled.choosing = true;
  stalled.Arm();
  std::optional<Result<std::optional<Lease>>> got1;
  std::thread worker1([&] { got1 = engine.LeaseForWorker(one.caller, one.device); });
  const bool stalled_taking = stalled.WaitUntilStalled(std::chrono::seconds(30));
  // Worker 2 asks meanwhile: it takes the other one and goes. (The 30 s
  // only keep a broken engine from hanging the test.)
  auto second =
      std::async(std::launch::async, [&] { return engine.LeaseForWorker(two.caller, two.device); });
  const bool returned = second.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  stalled.Release();
  worker1.join();
  ASSERT_TRUE(stalled_taking) << "worker 1's lease took no waiting trial";
  EXPECT_TRUE(returned) << "worker 2's lease chose the trial worker 1 was taking";
  const store::Id taken = stalled.stalled_trial;
  const store::Id other = taken == (*a)->trial.id ? (*b)->trial.id : (*a)->trial.id;
  auto got2 = second.get();
  ASSERT_TRUE(got2.ok() && got2->has_value()) << got2.status();
  EXPECT_EQ((*got2)->trial.id, other) << "the other waiting trial, not a new one";
  ASSERT_TRUE(got1 && got1->ok() && (*got1)->has_value());
  EXPECT_EQ((**got1)->trial.id, taken);
}

// GET /workers lists each device's newest measured speed per workload from
// the fleet view, not from thousands of observations read per call (with 20
// REST clients that read took 38% of the server's CPU, bench/load): this
// engine's reports count at once, what another replica wrote once the view
// is reread (here at every call: fleet_cache 0).
TEST_F(EngineTest, MeasuredSpeedsAreTheNewestPerDeviceAndWorkload) {
  EngineOptions o = Options();
  o.fleet_cache = std::chrono::milliseconds(0);
  Engine engine(*store_, o);
  auto e = engine.CreateExperiment(OneSpace(Spec(kBuiltin, 20, 2)));
  ASSERT_TRUE(e.ok()) << e.status();
  const TestWorker w = AddWorker(engine, "w");
  auto a = engine.LeaseForWorker(w.caller, w.device);
  ASSERT_TRUE(a.ok() && a->has_value()) << a.status();
  const store::Id trial = (*a)->trial.id;
  for (int step = 0; step < 2; ++step) {
    clock_.Advance(1000);
    TrialReport r{trial,   w.owner, step, {{"loss", 1.0}}, 100.0 + step, {{"threads", step + 1}},
                  w.device};
    ASSERT_TRUE(engine.Report(r).ok());
  }
  auto m = engine.Measured();
  ASSERT_TRUE(m.ok()) << m.status();
  const std::string workload = Engine::Workload(*engine.Spec(e->id).value(), "a");
  ASSERT_EQ((*m)[w.device].size(), 1u);
  const MeasuredSpeed& newest = (*m)[w.device][workload];
  EXPECT_DOUBLE_EQ(newest.samples_per_sec, 101.0) << "not the newest of the two steps";
  EXPECT_EQ(newest.system, json({{"threads", 2}}));
  EXPECT_EQ(newest.trial_id, trial);
  EXPECT_EQ(newest.observed_ms, clock_.fn()());
  // Another replica's report, written to the store alone.
  const std::string elsewhere = "experiment-99/other";
  ASSERT_TRUE(store_
                  ->AddSpeedObservation(
                      {w.device, "cpu", elsewhere, R"({"threads": 4})", 55.0, std::nullopt})
                  .ok());
  m = engine.Measured();
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ((*m)[w.device].count(elsewhere), 1u) << "another replica's observation was not read";
  EXPECT_DOUBLE_EQ((*m)[w.device][elsewhere].samples_per_sec, 55.0);
  EXPECT_DOUBLE_EQ((*m)[w.device][workload].samples_per_sec, 101.0);
}

// The workload key is what runs, not which experiment: five runs of one
// spec share one hpo_device_samples_per_second series (it was one per
// experiment, without bound), another program or space gets its own, and a
// series no longer measured leaves the metric.
TEST_F(EngineTest, RunsOfOneSpecShareOneWorkloadLabel) {
  const TestWorker w = AddWorker("a");
  for (int run = 0; run < 5; ++run) {
    auto e = engine_->CreateExperiment(OneSpace(Spec(kBuiltin, 1, 1)));
    ASSERT_TRUE(e.ok()) << e.status();
    auto a = LeaseFor(w);
    ASSERT_TRUE(a.ok() && a->has_value()) << "run " << run;
    TrialReport r{(*a)->trial.id, w.owner,          0,       {{"loss", 1.0}},
                  100.0 + run,    {{"threads", 1}}, w.device};
    ASSERT_TRUE(engine_->Report(r).ok());
    ASSERT_TRUE(engine_->Complete((*a)->trial.id, w.owner, false, json::object(), "").ok());
  }
  auto one = ParseExperimentSpec(OneSpace(Spec(kBuiltin, 1, 1)));
  ASSERT_TRUE(one.ok()) << one.status();
  const std::string key = Engine::Workload(*one, "a");
  EXPECT_EQ(key.rfind("fashion-mnist-mlp/a@", 0), 0u) << key;
  const std::string cnn = R"({"builtin": {"trainer": "fashion-mnist-cnn"}})";
  EXPECT_NE(Engine::Workload(*ParseExperimentSpec(Spec(cnn, 1, 1)), "a"), key) << "another trainer";
  EXPECT_NE(Engine::Workload(*one, "a"),
            Engine::Workload(*ParseExperimentSpec(Spec(kBuiltin, 1, 1)), "b"));
  std::string wider = OneSpace(Spec(kBuiltin, 1, 1));
  wider.replace(wider.find(R"("high": 1})"), 10, R"("high": 2})");
  EXPECT_NE(Engine::Workload(*ParseExperimentSpec(wider), "a"), key) << "another space";
  std::string more_trials = OneSpace(Spec(kBuiltin, 7, 1));
  EXPECT_EQ(Engine::Workload(*ParseExperimentSpec(more_trials), "a"), key)
      << "the budget is not what runs";

  metrics::Registry registry;
  StoreGaugeOptions o;
  o.max_age = std::chrono::milliseconds(0);
  o.now_ms = clock_.fn();
  RegisterStoreGauges(registry, *store_, o);
  const auto series = [&] {
    std::vector<std::string> out;
    std::istringstream page(registry.Render());
    for (std::string line; std::getline(page, line);) {
      if (line.rfind("hpo_device_samples_per_second{", 0) == 0) out.push_back(line);
    }
    return out;
  };
  const auto now = series();
  ASSERT_EQ(now.size(), 1u) << ::testing::PrintToString(now);
  EXPECT_NE(now[0].find("workload=\"" + key + "\""), std::string::npos) << now[0];
  clock_.Advance(o.speed_window.count() + 1);
  EXPECT_TRUE(series().empty()) << "measured over an hour ago";
}

// StalledTopUps that also records how many trials each insert made.
class CountedTopUps : public StalledTopUps {
 public:
  using StalledTopUps::StalledTopUps;
  Result<std::vector<store::TrialRecord>> CreateTrialsUpTo(
      store::Id experiment_id, const std::vector<store::NewTrial>& trials,
      const TrialLimits& limits) override {
    {
      std::lock_guard lock(mu_);
      inserts_.push_back(trials.size());
    }
    return StalledTopUps::CreateTrialsUpTo(experiment_id, trials, limits);
  }
  std::vector<size_t> inserts() {
    std::lock_guard lock(mu_);
    return inserts_;
  }

 private:
  std::mutex mu_;
  std::vector<size_t> inserts_;
};

// Devices that ask at once, with nothing to run but new trials, used to
// queue for one new trial each (a suggestion and an insert apiece), and a
// fleet of 200 waited seconds for its leases under ASHA (bench/load). Those
// that ask while one is being made now get theirs together, from one
// sampler call and one insert: a trial each, and the space ranking's split
// between the two spaces kept, as one at a time would.
TEST_F(EngineTest, DevicesThatAskAtOnceGetTheirNewTrialsFromOneBatch) {
  CountedTopUps counted(*store_);
  Engine engine(counted, Options());
  auto e = engine.CreateExperiment(Spec(kBuiltin, 20, 8));
  ASSERT_TRUE(e.ok()) << e.status();
  std::vector<TestWorker> workers;
  for (int i = 0; i < 5; ++i) workers.push_back(AddWorker(engine, "w" + std::to_string(i)));
  counted.Arm();
  // Worker 0's lease makes the first trial and stalls in the store.
  std::optional<Result<std::optional<Lease>>> a0;
  std::thread worker0([&] { a0 = engine.LeaseForWorker(workers[0].caller, workers[0].device); });
  const bool stalled_making = counted.WaitUntilStalled(std::chrono::seconds(30));
  // The other four ask meanwhile, and wait for the next batch. (The 30 s
  // only keep a broken engine from hanging the test.)
  std::vector<std::future<Result<std::optional<Lease>>>> others;
  for (int i = 1; i < 5; ++i) {
    others.push_back(std::async(std::launch::async, [&engine, w = workers[i]] {
      return engine.LeaseForWorker(w.caller, w.device);
    }));
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (engine.NewTrialsWaiting(e->id) < 4 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const size_t waiting = engine.NewTrialsWaiting(e->id);
  counted.Release();
  worker0.join();
  ASSERT_TRUE(stalled_making) << "worker 0's lease made no trial";
  EXPECT_EQ(waiting, 4u);
  std::set<store::Id> ids;
  ASSERT_TRUE(a0 && a0->ok() && (*a0)->has_value());
  ids.insert((**a0)->trial.id);
  std::map<std::string, int> per_space;
  ++per_space[(**a0)->space];
  for (auto& f : others) {
    auto got = f.get();
    ASSERT_TRUE(got.ok() && got->has_value()) << got.status();
    EXPECT_TRUE(ids.insert((*got)->trial.id).second)
        << "trial " << (*got)->trial.id << " went to two devices";
    ++per_space[(*got)->space];
  }
  EXPECT_EQ(counted.inserts(), (std::vector<size_t>{1, 4}))
      << "the four waiting devices' trials in one insert";
  EXPECT_GE(per_space["a"], 2) << "space b took the batch";
  EXPECT_GE(per_space["b"], 2) << "space a took the batch";
  auto n = store_->CountTrials(e->id);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->leased, 5);
  EXPECT_EQ(n->pending, 0);
}

// An experiment cancelled while a device's new trial is being made: the
// device hears there is no work, not an error.
TEST_F(EngineTest, ALeaseMakingATrialOfAnExperimentThatEndsMeanwhileGetsNoWork) {
  StalledTopUps stalled(*store_);
  Engine engine(stalled, Options());
  auto e = engine.CreateExperiment(Spec(kBuiltin, 20, 4));
  ASSERT_TRUE(e.ok()) << e.status();
  const TestWorker w = AddWorker(engine, "w");
  stalled.Arm();
  auto lease =
      std::async(std::launch::async, [&] { return engine.LeaseForWorker(w.caller, w.device); });
  ASSERT_TRUE(stalled.WaitUntilStalled(std::chrono::seconds(30)));
  // The cancel takes no lock of the engine's: it lands before the stalled
  // insert goes on.
  const Status cancelled = engine.CancelExperiment(e->id, "by the test");
  stalled.Release();
  ASSERT_TRUE(cancelled.ok()) << cancelled;
  auto got = lease.get();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE(got->has_value()) << "a trial of a cancelled experiment";
}

// ...but a lease that finds nothing else waits for the trial being made,
// then makes its own, rather than sending its device away for a retry-after
// of a second. A whole fleet leases at once after a server restart, and
// each device but one idled that second (bench/faults kill_server_workers).
TEST_F(EngineTest, ALeaseWithNothingElseToRunWaitsForTheTrialBeingMade) {
  StalledTopUps stalled(*store_);
  Engine engine(stalled, Options());
  auto e = engine.CreateExperiment(Spec(kBuiltin, 20, 4));
  ASSERT_TRUE(e.ok()) << e.status();
  const TestWorker one = AddWorker(engine, "one"), two = AddWorker(engine, "two");
  stalled.Arm();
  // Worker 1's lease makes the first trial and stalls in the store.
  std::optional<Result<std::optional<Lease>>> a1;
  std::thread worker1([&] { a1 = engine.LeaseForWorker(one.caller, one.device); });
  const bool stalled_making = stalled.WaitUntilStalled(std::chrono::seconds(30));
  // Worker 2 asks meanwhile, with nothing pending. The pause only lets its
  // lease reach the engine before the release; what is checked is what it
  // gets, however long the pause.
  auto second =
      std::async(std::launch::async, [&] { return engine.LeaseForWorker(two.caller, two.device); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  stalled.Release();
  worker1.join();
  ASSERT_TRUE(stalled_making) << "worker 1's lease made no trial";
  auto got = second.get();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->has_value()) << "worker 2 was sent away while worker 1's trial was being made";
  ASSERT_TRUE(a1 && a1->ok() && (*a1)->has_value());
  EXPECT_NE((*got)->trial.id, (**a1)->trial.id) << "one trial for two devices";
  auto n = store_->CountTrials(e->id);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->leased, 2);
}

// A server killed after it granted a lease loses the answer: the trial
// stays leased to a worker that never got it. When that worker asks again,
// listing what it holds, the trial runs again at once instead of holding
// the experiment's only slot until its lease times out.
TEST_F(EngineTest, ALeaseWhoseAnswerWasLostEndsWhenTheWorkerSaysItHoldsNothing) {
  auto e = engine_->CreateExperiment(Spec(kBuiltin, 20, 1));
  ASSERT_TRUE(e.ok()) << e.status();
  const TestWorker w = AddWorker("w");
  auto first = LeaseFor(w);  // its answer never arrives
  ASSERT_TRUE(first.ok() && first->has_value());
  const store::Id lost = (*first)->trial.id;
  auto unsaid = LeaseFor(w);
  ASSERT_TRUE(unsaid.ok()) << unsaid.status();
  EXPECT_FALSE(unsaid->has_value()) << "max_parallel 1 let a second trial out";
  auto holding = engine_->LeaseForWorker(w.caller, w.device, std::vector<store::Id>{lost});
  ASSERT_TRUE(holding.ok()) << holding.status();
  EXPECT_FALSE(holding->has_value());
  EXPECT_EQ(store_->GetTrial(lost)->state, TrialState::kLeased) << "a lease the worker holds ended";

  auto again = engine_->LeaseForWorker(w.caller, w.device, std::vector<store::Id>{});
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_TRUE(again->has_value()) << "the lost lease still holds the only slot";
  EXPECT_EQ((*again)->trial.id, lost);
  EXPECT_EQ((*again)->trial.attempt, 2);

  const std::vector<store::Id> too_many(kMaxTrialsPerHeartbeat + 1, lost);
  EXPECT_TRUE(engine_->LeaseForWorker(w.caller, w.device, too_many).status().IsInvalidArgument());
}

// A store whose reads of an experiment's measurements (what a reread of
// the trial view reads last, whole or since its cursor) stall while armed,
// until released.
class StalledRereads : public testing::StoreWrapper, public testing::StallGate {
 public:
  using StoreWrapper::StoreWrapper;
  Result<std::vector<store::MeasurementRecord>> ListExperimentMeasurements(
      store::Id experiment_id) override {
    StallWhileArmed();
    return StoreWrapper::ListExperimentMeasurements(experiment_id);
  }
  Result<std::vector<store::MeasurementRecord>> ListExperimentMeasurementsSince(
      store::Id experiment_id, int64_t since) override {
    StallWhileArmed();
    return StoreWrapper::ListExperimentMeasurementsSince(experiment_id, since);
  }
};

// The trial view is reread from the store once it is older than
// history_cache, which at 10,000 trials takes tens of milliseconds. Reports
// (judged by early stopping against the view) and completions used to wait
// for the whole read, since it held the view's lock; they now
// go on with the view being replaced, and what they change is kept in the
// new one.
TEST_F(EngineTest, ReportsAndCompletionsDoNotWaitForARereadOfTheTrials) {
  StalledRereads stalled(*store_);
  EngineOptions o = Options();
  o.history_cache = std::chrono::milliseconds(1);
  Engine engine(stalled, o);
  auto e = engine.CreateExperiment(
      SpecStopping(kClient, 20, 4, R"({"rule": "median", "startup_trials": 0})"));
  ASSERT_TRUE(e.ok()) << e.status();
  auto batch = engine.Suggest(e->id, 3);
  ASSERT_TRUE(batch.ok() && batch->size() == 3u) << batch.status();
  auto report = [&](const Lease& a, int step) {
    return engine.Report(
        {a.trial.id, Engine::kClientOwner, step, {{"loss", 1.0}}, 0, json::object(), std::nullopt});
  };
  ASSERT_TRUE(report((*batch)[2], 0).ok());
  // The view is now older than its bound (a millisecond): the next report
  // rereads it, and stalls in the store.
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  stalled.Arm();
  std::optional<Result<ReportReply>> first;
  std::thread reader([&] { first = report((*batch)[0], 0); });
  const bool stalled_reading = stalled.WaitUntilStalled(std::chrono::seconds(30));
  // Another report and a completion meanwhile. (The 30 s only keep a
  // broken engine from hanging the test.)
  auto second = std::async(std::launch::async, [&] { return report((*batch)[1], 0); });
  auto done = std::async(std::launch::async, [&] {
    return engine.Complete((*batch)[2].trial.id, Engine::kClientOwner, false, {{"loss", 1.0}}, "");
  });
  const bool reported = second.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  const bool completed = done.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  stalled.Release();
  reader.join();
  ASSERT_TRUE(stalled_reading) << "no report reread the view";
  EXPECT_TRUE(reported) << "a report waited for another call's reread of the trials";
  EXPECT_TRUE(completed) << "a completion waited for another call's reread of the trials";
  ASSERT_TRUE(first && first->ok()) << (first ? first->status() : Status::Internal("no reply"));
  auto r = second.get();
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(done.get().ok());
  EXPECT_EQ(store_->GetTrial((*batch)[2].trial.id)->state, TrialState::kCompleted);
}

// However many devices ask at once, an experiment has at most max_parallel
// trials out, each handed to one device.
TEST_F(EngineTest, DevicesAskingAtOnceGetDistinctTrialsWithinMaxParallel) {
  auto e = engine_->CreateExperiment(Spec(kBuiltin, 20, 3));
  ASSERT_TRUE(e.ok()) << e.status();
  std::vector<TestWorker> workers;
  for (int i = 0; i < 6; ++i) workers.push_back(AddWorker("w" + std::to_string(i)));
  std::vector<std::future<Result<std::optional<Lease>>>> asks;
  for (const auto& w : workers) {
    asks.push_back(std::async(std::launch::async,
                              [&, w] { return engine_->LeaseForWorker(w.caller, w.device); }));
  }
  std::set<store::Id> got;
  int none = 0;
  for (auto& a : asks) {
    auto r = a.get();
    ASSERT_TRUE(r.ok()) << r.status();
    if (r->has_value()) {
      EXPECT_TRUE(got.insert((*r)->trial.id).second) << "one trial for two devices";
    } else {
      ++none;
    }
  }
  auto n = *store_->CountTrials(e->id);
  EXPECT_LE(n.leased, 3);
  EXPECT_EQ(static_cast<int64_t>(got.size()), n.leased);
  EXPECT_EQ(n.total(), n.leased) << "nothing made ahead of a device";
  EXPECT_GE(none, 3);
}

}  // namespace
}  // namespace hpo::server

namespace hpo::server {
namespace {

// Completing a finished trial again changes nothing and announces nothing:
// each "trial.finished" event counts in hpo_trials_finished_total and
// carries the metrics it was sent, so a repeat must not emit one, and a
// finish that differs (other metrics, another owner) is an error.
TEST_F(EngineTest, CompletingAFinishedTrialAgainHasNoSideEffects) {
  std::vector<json> finished;
  EngineOptions o;
  o.on_event = [&](std::string type, const json& data) {
    if (type == "trial.finished") finished.push_back(data);
  };
  engine_ = std::make_unique<Engine>(*store_, o);
  auto e = engine_->CreateExperiment(Spec(kClient, 5, 5));
  ASSERT_TRUE(e.ok()) << e.status();
  auto batch = engine_->Suggest(e->id, 1);
  ASSERT_TRUE(batch.ok() && batch->size() == 1u) << batch.status();
  const store::Id trial = batch->at(0).trial.id;
  ASSERT_TRUE(
      engine_
          ->Report(
              {trial, Engine::kClientOwner, 0, {{"loss", 0.5}}, 0, json::object(), std::nullopt})
          .ok());
  ASSERT_TRUE(engine_->Complete(trial, Engine::kClientOwner, false, {{"loss", 0.5}}, "").ok());
  ASSERT_EQ(finished.size(), 1u);

  // The owner's retry: OK, and silent.
  Status again = engine_->Complete(trial, Engine::kClientOwner, false, {{"loss", 0.5}}, "");
  EXPECT_TRUE(again.ok()) << again;
  EXPECT_EQ(finished.size(), 1u) << "a repeated completion was announced again";
  // Anything else: refused, saying why, and silent too.
  Status other_metrics =
      engine_->Complete(trial, Engine::kClientOwner, false, {{"loss", 0.001}}, "");
  EXPECT_TRUE(other_metrics.IsFailedPrecondition()) << other_metrics;
  EXPECT_NE(other_metrics.message().find("other final metrics"), std::string::npos)
      << other_metrics;
  Status other_owner = engine_->Complete(trial, Engine::WorkerOwner(7), false, {{"loss", 0.5}}, "");
  EXPECT_TRUE(other_owner.IsFailedPrecondition()) << other_owner;
  EXPECT_NE(other_owner.message().find("not 'worker/7'"), std::string::npos) << other_owner;
  Status as_failed = engine_->Complete(trial, Engine::kClientOwner, true, json::object(), "boom");
  EXPECT_TRUE(as_failed.IsFailedPrecondition()) << as_failed;
  EXPECT_EQ(finished.size(), 1u) << "a refused completion was announced: "
                                 << finished.back().dump();
  EXPECT_EQ(json::parse(store_->GetTrial(trial)->final_metrics_json), json({{"loss", 0.5}}));
  auto best = engine_->BestTrial(e->id);
  ASSERT_TRUE(best.ok() && best->has_value());
  EXPECT_EQ((*best)->trial.id, trial);
}

// A cancel reason is cut to its limit, kept once on the experiment and
// carried so in the event; the trials it cancels only point there.
TEST_F(EngineTest, ACancelReasonIsCutAndKeptOnceOnTheExperiment) {
  std::vector<json> ended;
  EngineOptions o;
  o.on_event = [&](std::string type, const json& data) {
    if (type == "experiment.finished") ended.push_back(data);
  };
  engine_ = std::make_unique<Engine>(*store_, o);
  auto e = engine_->CreateExperiment(Spec(kClient, 20, 10));
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_TRUE(engine_->Suggest(e->id, 10).ok());
  ASSERT_EQ(store_->CountTrials(e->id)->leased, 10);
  const std::string reason = "stop: " + std::string(1 << 20, 'x');
  ASSERT_TRUE(engine_->CancelExperiment(e->id, reason).ok());
  const std::string stored = store_->GetExperiment(e->id)->reason;
  EXPECT_LE(stored.size(), kMaxCancelReasonLength);
  EXPECT_EQ(stored.rfind("stop: xxx", 0), 0u);
  EXPECT_NE(stored.find("(cut)"), std::string::npos);
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_EQ(ended[0]["reason"], stored);
  for (const auto& t : *store_->ListTrials(e->id, {}))
    EXPECT_EQ(t.reason, "experiment cancelled") << t.id;
}

TEST(CapTextTest, KeepsWholeUtf8CharactersAndTheRightEnd) {
  EXPECT_EQ(CapText(FreeText::kCancelReason, "short"), "short");
  // A reason of 3-byte characters: the cut never splits one.
  std::string euros;
  while (euros.size() < 2 * kMaxCancelReasonLength) euros += "\xE2\x82\xAC";
  const std::string cut = CapText(FreeText::kCancelReason, euros);
  EXPECT_LE(cut.size(), kMaxCancelReasonLength);
  EXPECT_EQ(cut.substr(cut.size() - 9), "... (cut)");
  EXPECT_EQ((cut.size() - 9) % 3, 0u) << "a character was split";
  EXPECT_TRUE(json(cut).dump().size() > 0);  // valid UTF-8: json would throw otherwise
  // A log tail keeps its end.
  const std::string log = std::string(kMaxLogTailLength, 'a') + "\xE2\x82\xAC" + "the error";
  const std::string tail = CapText(FreeText::kLogTail, log);
  EXPECT_LE(tail.size(), kMaxLogTailLength);
  EXPECT_EQ(tail.rfind("(cut) ...", 0), 0u);
  EXPECT_EQ(tail.substr(tail.size() - 12),
            "\xE2\x82\xAC"
            "the error");
  EXPECT_EQ(CapText(FreeText::kFailureReason, std::string(kMaxReasonLength, 'r')).size(),
            kMaxReasonLength)
      << "at the limit: kept whole";
}

// The seed a trial runs with: unrelated for nearby trial numbers (each
// draws its own fork of the spec's seed), never negative, and the same for
// the same spec seed and number (a retried or resumed trial repeats).
TEST(TrialRunTest, SeedsDifferForNearbyTrialsAndRepeatForTheSame) {
  ExperimentSpec spec;
  spec.seed = 7;
  std::set<int64_t> seeds;
  std::set<int64_t> top_bytes;
  for (int64_t number = 0; number < 256; ++number) {
    const int64_t seed = TrialSeed(spec, number);
    EXPECT_GE(seed, 0) << number;
    EXPECT_EQ(seed, TrialSeed(spec, number)) << number;
    seeds.insert(seed);
    top_bytes.insert(seed >> 55);
  }
  EXPECT_EQ(seeds.size(), 256u);
  // Consecutive numbers with nearby seeds would share their high bits.
  EXPECT_GT(top_bytes.size(), 100u);
  ExperimentSpec other = spec;
  other.seed = 8;
  EXPECT_NE(TrialSeed(other, 0), TrialSeed(spec, 0));
}

// A command's argv, as the engine fills it for any lease: {trial_id},
// {steps}, the trial's parameters, then its system parameters; {step} and
// unknown names stay for the worker, and a value with braces is not
// expanded again.
TEST(TrialRunTest, CommandArgvFillsWhatTheTrialKnowsOnce) {
  ExperimentSpec spec;
  spec.steps_per_trial = 5;
  spec.argv = {"run",         "--id={trial_id}", "--steps={steps}", "--x={x}", "--opt={opt}",
               "-j{threads}", "--at={step}",     "{nope}",          "--s={s}", "{unclosed"};
  const nlohmann::json params = {{"x", 0.5}, {"opt", "adam"}, {"s", "{x}"}};
  const nlohmann::json system = {{"threads", 4}, {"x", "not this one"}};
  EXPECT_EQ(CommandArgv(spec, 12, params, system),
            (std::vector<std::string>{"run", "--id=12", "--steps=5", "--x=0.5", "--opt=adam", "-j4",
                                      "--at={step}", "{nope}", "--s={x}", "{unclosed"}));
}

// Several objectives and a constraint, ask/tell: the search's view holds
// every objective of each completed trial and how far outside the
// constraint it lies (a trial that never reported the constrained metric
// counts as outside), and the ranking places each.
TEST_F(EngineTest, SeveralObjectivesAndAConstraintReachTheSearchAndTheRanking) {
  const std::string spec = R"({"name": "front",
    "objectives": [{"metric": "loss"}, {"metric": "latency", "direction": "maximize"}],
    "constraints": [{"metric": "size", "max": 4}],
    "spaces": [{"name": "a", "params": {"x": {"type": "float", "low": 0, "high": 1}}}],
    "budget": {"max_trials": 8, "max_parallel": 4}, "executor": {"client": {}}})";
  auto e = engine_->CreateExperiment(spec);
  ASSERT_TRUE(e.ok()) << e.status();
  auto leases = engine_->Suggest(e->id, 4);
  ASSERT_TRUE(leases.ok() && leases->size() == 4u) << leases.status();
  const auto& l = *leases;
  ASSERT_TRUE(engine_
                  ->Report({l[0].trial.id,
                            Engine::kClientOwner,
                            1,
                            {{"loss", 0.9}, {"latency", 1}, {"size", 2}},
                            0,
                            json::object(),
                            std::nullopt})
                  .ok());
  // Its final metrics leave latency out: its last report's stands in.
  ASSERT_TRUE(
      engine_
          ->Complete(l[0].trial.id, Engine::kClientOwner, false, {{"loss", 0.5}, {"size", 2}}, "")
          .ok());
  ASSERT_TRUE(engine_
                  ->Complete(l[1].trial.id, Engine::kClientOwner, false,
                             {{"loss", 0.4}, {"latency", 3}, {"size", 8}}, "")
                  .ok());
  ASSERT_TRUE(engine_
                  ->Complete(l[2].trial.id, Engine::kClientOwner, false,
                             {{"loss", 0.7}, {"latency", 0.5}}, "")
                  .ok());
  auto refused = engine_->Complete(l[3].trial.id, Engine::kClientOwner, false, {{"loss", 0.1}}, "");
  EXPECT_TRUE(refused.IsInvalidArgument()) << refused;
  EXPECT_NE(refused.message().find("final_metrics.latency"), std::string::npos) << refused;

  auto parsed = engine_->Spec(e->id);
  ASSERT_TRUE(parsed.ok());
  TrialView view(*store_, e->id, *parsed, std::chrono::milliseconds(0));
  auto read = view.ReadNow();
  ASSERT_TRUE(read.ok()) << read.status();
  std::map<int64_t, search::Observation> by_number;
  for (const auto& o : read->histories[0].trials) by_number[o.number] = o;
  const search::Observation& first = by_number.at(l[0].trial.number);
  EXPECT_EQ(first.values, (std::vector<double>{0.5, -1})) << "minimized: latency is maximized";
  ASSERT_EQ(first.curve_values.size(), 1u);
  EXPECT_EQ(first.curve_values[0].second, (std::vector<double>{0.9, -1}));
  EXPECT_EQ(first.violation, 0);
  EXPECT_TRUE(first.Feasible());
  EXPECT_DOUBLE_EQ(by_number.at(l[1].trial.number).violation.value_or(-1), 1.0)
      << "8 is its bound (4) above it";
  EXPECT_FALSE(by_number.at(l[2].trial.number).Feasible()) << "size never reported";
  EXPECT_EQ(by_number.at(l[3].trial.number).status, search::TrialStatus::kRunning);
  // The engine's own kept view agrees with the read (the samplers read it).
  auto more = engine_->Suggest(e->id, 2);
  ASSERT_TRUE(more.ok() && more->size() == 2u) << more.status();

  auto ranked = engine_->RankTrials(e->id);
  ASSERT_TRUE(ranked.ok()) << ranked.status();
  ASSERT_EQ(ranked->size(), 3u);
  EXPECT_EQ((*ranked)[0].rank, 0);
  EXPECT_EQ((*ranked)[0].values, (std::vector<double>{0.5, 1})) << "as reported";
  EXPECT_FALSE((*ranked)[1].feasible);
  EXPECT_EQ((*ranked)[1].reasons, (std::vector<std::string>{"size: 8 is above the max 4"}));
  EXPECT_FALSE((*ranked)[1].rank);
  EXPECT_EQ((*ranked)[2].reasons, (std::vector<std::string>{"size: not reported"}));
  // The best (by the first objective) is the best within the constraint:
  // trial 1's loss of 0.4 is lower, but its size is above the bound.
  auto best = engine_->BestTrial(e->id);
  ASSERT_TRUE(best.ok() && best->has_value()) << best.status();
  EXPECT_EQ((*best)->trial.id, l[0].trial.id);
  EXPECT_FALSE((*best)->partial);
}

// Stop-type ASHA on two objectives: a trial whose model size is already
// outside its constraint stops at its first rung, whatever its objectives;
// one inside goes on.
TEST_F(EngineTest, ATrialThatMustEndInfeasibleStopsAtItsRung) {
  const std::string spec = R"({"name": "front",
    "objectives": [{"metric": "loss"}, {"metric": "latency"}],
    "constraints": [{"metric": "params", "max": 1000}],
    "spaces": [{"name": "a", "params": {"x": {"type": "float", "low": 0, "high": 1}}}],
    "early_stopping": {"rule": "asha", "min_resource": 1, "reduction_factor": 3},
    "budget": {"max_trials": 4, "max_parallel": 2, "steps_per_trial": 9},
    "executor": {"client": {}}})";
  auto e = engine_->CreateExperiment(spec);
  ASSERT_TRUE(e.ok()) << e.status();
  auto l = engine_->Suggest(e->id, 2);
  ASSERT_TRUE(l.ok() && l->size() == 2u) << l.status();
  auto big = engine_->Report({(*l)[0].trial.id,
                              Engine::kClientOwner,
                              1,
                              {{"loss", 0.01}, {"latency", 0.01}, {"params", 5000}},
                              0,
                              json::object(),
                              std::nullopt});
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(big->decision, Decision::kPrune) << "5,000 parameters can only end above 1,000";
  auto small = engine_->Report({(*l)[1].trial.id,
                                Engine::kClientOwner,
                                1,
                                {{"loss", 0.9}, {"latency", 0.9}, {"params", 500}},
                                0,
                                json::object(),
                                std::nullopt});
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(small->decision, Decision::kContinue);
}

// The derived metrics: each stored step carries the trial's device time
// and speed so far, and its final metrics the totals.
TEST_F(EngineTest, DerivedMetricsAreTheTrialsDeviceTimeSoFar) {
  const TestWorker w = AddWorker("w");
  std::string spec = OneSpace(Spec(kBuiltin, 2, 1));
  const std::string one = R"("objective": {"metric": "loss", "direction": "minimize"})";
  spec.replace(spec.find(one), one.size(),
               R"("objectives": [{"metric": "loss"}, {"metric": "device_seconds"}],
                  "constraints": [{"metric": "samples_per_sec", "min": 1}])");
  auto e = engine_->CreateExperiment(spec);
  ASSERT_TRUE(e.ok()) << e.status();
  auto a = LeaseFor(w);
  ASSERT_TRUE(a.ok() && a->has_value()) << a.status();
  const store::Id trial = (*a)->trial.id;
  const double speeds[] = {100, 300};
  for (int64_t step = 1; step <= 2; ++step) {
    clock_.Advance(2'000 * step);  // 2 s, then 4 s
    auto d = engine_->Report(
        {trial, w.owner, step, {{"loss", 0.5}}, speeds[step - 1], json::object(), w.device});
    ASSERT_TRUE(d.ok()) << d.status();
  }
  auto ms = store_->ListMeasurements(trial);
  ASSERT_TRUE(ms.ok() && ms->size() == 2u);
  const json first = json::parse((*ms)[0].metrics_json);
  const json second = json::parse((*ms)[1].metrics_json);
  EXPECT_DOUBLE_EQ(first["device_seconds"].get<double>(), 2.0) << first;
  EXPECT_DOUBLE_EQ(second["device_seconds"].get<double>(), 6.0) << second;
  EXPECT_DOUBLE_EQ(second["samples_per_sec"].get<double>(), 200.0) << "the mean of the steps'";
  EXPECT_FALSE(second.contains("cost")) << "no prices, no cost";
  ASSERT_TRUE(
      engine_->Complete(trial, w.owner, false, {{"loss", 0.4}, {"device_seconds", 1}}, "").ok());
  const json final_metrics = json::parse(store_->GetTrial(trial)->final_metrics_json);
  EXPECT_DOUBLE_EQ(final_metrics["device_seconds"].get<double>(), 6.0)
      << "the server's figure, not the trial's";
  EXPECT_DOUBLE_EQ(final_metrics["loss"].get<double>(), 0.4);
  auto ranked = engine_->RankTrials(e->id);
  ASSERT_TRUE(ranked.ok() && ranked->size() == 1u);
  EXPECT_TRUE((*ranked)[0].feasible);
  EXPECT_EQ((*ranked)[0].values, (std::vector<double>{0.4, 6.0}));
}

}  // namespace
}  // namespace hpo::server
