// The engine's trial view (server/engine/trial_view.h) rereads only what
// changed since its cursor. What it then holds must be what a whole read
// gives, whatever another replica did meanwhile: new trials, reports,
// completions with and without a final value, prunes, and a restart that
// deleted a curve. On both stores: their revisions and cursors differ
// (a counter on SQLite, transaction ids and snapshot xmin on PostgreSQL).
#include "server/engine/trial_view.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "search/promotion.h"
#include "server/engine/engine.h"
#include "server/spec/spec.h"
#include "testing/store_backends.h"
#include "testing/store_wrapper.h"

namespace hpo::server {
namespace {

using nlohmann::json;
using store::Id;
using testing::PostgresBackend;
using testing::SqliteBackend;

// A report's or a final reading of the one objective (minimized).
ObjectiveReading Reading(double value) {
  ObjectiveReading r;
  r.value = value;
  return r;
}

const char* kSpec = R"({"name": "view", "objective": {"metric": "loss", "direction": "minimize"},
  "spaces": [{"name": "a", "params": {"x": {"type": "float", "low": -1, "high": 1}}},
             {"name": "b", "params": {"y": {"type": "float", "low": 0, "high": 2}}}],
  "algorithm": {"sampler": "random", "seed": 5},
  "early_stopping": {"rule": "none"},
  "budget": {"max_trials": 200, "max_parallel": 200, "steps_per_trial": 4},
  "executor": {"client": {}}})";

// Counts the reads a reread makes: whole (every measurement) or since a cursor.
class CountingStore : public testing::StoreWrapper {
 public:
  using StoreWrapper::StoreWrapper;
  Result<std::vector<store::MeasurementRecord>> ListExperimentMeasurements(
      Id experiment_id) override {
    ++whole_reads;
    return StoreWrapper::ListExperimentMeasurements(experiment_id);
  }
  Result<std::vector<store::MeasurementRecord>> ListExperimentMeasurementsSince(
      Id experiment_id, int64_t since) override {
    ++reads_since;
    return StoreWrapper::ListExperimentMeasurementsSince(experiment_id, since);
  }
  Result<std::vector<store::TrialRecord>> ListTrials(Id experiment_id,
                                                     const store::TrialFilter& f) override {
    if (f.since_revision) ++trial_reads_since;
    return StoreWrapper::ListTrials(experiment_id, f);
  }
  int whole_reads = 0, reads_since = 0, trial_reads_since = 0;
};

// The view as text, trial by trial in number order (a reread appends a
// trial new to it, so the order within a space may differ from a whole
// read's).
std::string Describe(const TrialsSnapshot& view) {
  std::map<int64_t, std::string> by_number;
  for (const auto& [id, e] : view.trials) {
    const search::Observation& o = view.histories[e.space].trials[e.index];
    std::ostringstream s;
    s << "trial " << id << " #" << e.number << " space " << e.space << " state "
      << store::ToString(e.state) << " level " << e.level << " status "
      << static_cast<int>(o.status) << " value ";
    if (o.value)
      s << *o.value;
    else
      s << "-";
    s << " params";
    for (double p : o.params) s << ' ' << p;
    s << " curve";
    for (const auto& [step, v] : o.curve) s << ' ' << step << ':' << v;
    by_number[e.number] = s.str();
  }
  std::string out;
  for (const auto& [n, line] : by_number) out += line + "\n";
  return out;
}

// Histories as text, observation by observation in their order.
std::string Describe(const std::vector<search::History>& histories) {
  std::ostringstream s;
  for (size_t h = 0; h < histories.size(); ++h) {
    for (const search::Observation& o : histories[h].trials) {
      s << "space " << h << " #" << o.number << " status " << static_cast<int>(o.status)
        << " value ";
      if (o.value)
        s << *o.value;
      else
        s << "-";
      s << " params";
      for (double p : o.params) s << ' ' << p;
      s << " curve";
      for (const auto& [step, v] : o.curve) s << ' ' << step << ':' << v;
      s << "\n";
    }
  }
  return s.str();
}

// A space ranking as text.
std::string Describe(const std::vector<search::SpaceRank>& ranks) {
  std::ostringstream s;
  s.precision(12);
  for (const auto& r : ranks) {
    s << "results " << r.results << " best " << (r.results ? r.best : 0) << " uncertainty "
      << r.uncertainty << " priority " << r.priority << " share " << r.share << "\n";
  }
  return s.str();
}

// Promotions as text.
std::string Describe(const std::vector<search::Promotion>& promotions) {
  std::ostringstream out;
  for (const auto& p : promotions) {
    out << p.index << " from " << p.from_level << " at " << p.from_step << " to " << p.to_step
        << (p.to_end ? " (end)" : "") << " value " << p.value << "\n";
  }
  return out.str();
}

template <typename Backend>
class TrialViewTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HPO_REQUIRE_BACKEND(Backend);
    backend_ = std::make_unique<Backend>();
    auto s = store::OpenStore(backend_->url());
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = std::move(s).value();
    counting_ = std::make_unique<CountingStore>(*store_);
    // The replica that changes the trials; the view under test only reads.
    writer_ = std::make_unique<Engine>(*store_, EngineOptions{});
    auto e = writer_->CreateExperiment(kSpec);
    ASSERT_TRUE(e.ok()) << e.status();
    experiment_ = e->id;
    auto spec = ParseExperimentSpec(std::string(kSpec));
    ASSERT_TRUE(spec.ok()) << spec.status();
    spec_ = std::make_shared<const ExperimentSpec>(std::move(spec).value());
  }

  std::vector<Lease> Suggest(int n) {
    auto batch = writer_->Suggest(experiment_, n);
    EXPECT_TRUE(batch.ok()) << batch.status();
    return batch.ok() ? *batch : std::vector<Lease>{};
  }
  void Report(const Lease& a, int step, double loss) {
    auto r = writer_->Report({a.trial.id,
                              Engine::kClientOwner,
                              step,
                              {{"loss", loss}},
                              0,
                              json::object(),
                              std::nullopt});
    EXPECT_TRUE(r.ok()) << r.status();
  }
  void Complete(const Lease& a, const json& metrics) {
    EXPECT_TRUE(writer_->Complete(a.trial.id, Engine::kClientOwner, false, metrics, "").ok());
  }
  // The view after a reread, next to a whole read of the same store.
  void ExpectSameAsAWholeRead(TrialView& view, const std::string& after) {
    std::string reread, ranking;
    {
      auto locked = view.Fresh();
      ASSERT_TRUE(locked.ok()) << locked.status();
      reread = Describe(**locked);
      ranking = Describe(SpaceRanking(**locked, spec_->spaces));
      ExpectListsAndCountsAsTheStatesSay(**locked, after);
    }
    auto whole = view.ReadNow();
    ASSERT_TRUE(whole.ok()) << whole.status();
    EXPECT_EQ(reread, Describe(*whole)) << "after " << after;
    EXPECT_EQ(ranking, Describe(search::RankSpaces(spec_->spaces, whole->histories)))
        << "the kept ranking after " << after;
    ExpectListsAndCountsAsTheStatesSay(*whole, "a whole read " + after);
  }

  // What a lease lists and counts (TrialsSnapshot::waiting,
  // on_device_per_space and finished_per_space), kept as states change,
  // against the states.
  static void ExpectListsAndCountsAsTheStatesSay(const TrialsSnapshot& view,
                                                 const std::string& after) {
    std::set<Id> waiting, pending;
    std::vector<int64_t> on_device(view.histories.size(), 0), finished(view.histories.size(), 0),
        paused(view.histories.size(), 0);
    for (const auto& [id, t] : view.trials) {
      ASSERT_LT(t.index, view.ids.at(t.space).size());
      EXPECT_EQ(view.ids[t.space][t.index], id) << "after " << after;
      if (t.state == store::TrialState::kPending) pending.insert(id);
      if (t.state == store::TrialState::kPaused) ++paused[t.space];
      if (t.state == store::TrialState::kPending || t.state == store::TrialState::kPaused) {
        waiting.insert(id);
      } else if (t.state == store::TrialState::kLeased || t.state == store::TrialState::kRunning) {
        ++on_device[t.space];
      } else {
        ++finished[t.space];
      }
    }
    std::vector<int64_t> kept_finished = view.finished_per_space,
                         kept_on_device = view.on_device_per_space,
                         kept_paused = view.paused_per_space;
    kept_finished.resize(view.histories.size(), 0);
    kept_on_device.resize(view.histories.size(), 0);
    kept_paused.resize(view.histories.size(), 0);
    EXPECT_EQ(view.waiting, waiting) << "after " << after;
    EXPECT_EQ(view.pending, pending) << "after " << after;
    EXPECT_EQ(kept_paused, paused) << "after " << after;
    EXPECT_EQ(kept_on_device, on_device) << "after " << after;
    EXPECT_EQ(kept_finished, finished) << "after " << after;
  }

  // Brings `copy` up to date with the view and checks it holds what the
  // view does; returns how many observations it copied.
  size_t UpdateCopy(TrialView& view, HistoriesCopy& copy, const std::string& after) {
    auto locked = view.Fresh();
    EXPECT_TRUE(locked.ok()) << locked.status();
    if (!locked.ok()) return 0;
    ExpectListsAndCountsAsTheStatesSay(**locked, after);
    const size_t copied = copy.Update(**locked);
    EXPECT_EQ(Describe(copy.histories), Describe((*locked)->histories)) << "after " << after;
    // The ranking kept with the view, made again only for changed values,
    // against one made from every trial.
    EXPECT_EQ(Describe(SpaceRanking(**locked, spec_->spaces)),
              Describe(search::RankSpaces(spec_->spaces, (*locked)->histories)))
        << "the kept ranking after " << after;
    ExpectKeptPromotionsAsTheRuleSays(**locked, after);
    return copied;
  }

  // The promotions kept with the view (Promotable), against the rule over
  // every trial of the view and its paused ones. Returns how many.
  size_t ExpectKeptPromotionsAsTheRuleSays(TrialsSnapshot& view, const std::string& after) {
    const auto kept = Promotable(view, rule_);
    EXPECT_EQ(kept.size(), view.histories.size());
    size_t n = 0;
    for (size_t s = 0; s < view.histories.size() && s < kept.size(); ++s) {
      std::vector<search::PausedTrial> paused;
      for (const auto& [id, t] : view.trials) {
        if (t.space == s && t.state == store::TrialState::kPaused)
          paused.push_back({t.index, t.level});
      }
      std::sort(paused.begin(), paused.end(),
                [](const auto& a, const auto& b) { return a.index < b.index; });
      const auto want = rule_.Promotable(view.histories[s], paused);
      EXPECT_EQ(Describe(kept[s]), Describe(want)) << "space " << s << " after " << after;
      n += want.size();
    }
    return n;
  }
  // Promotion-type ASHA over the spec's 4 steps: rungs 1, 3 and 4.
  const search::PromotionRule rule_ = *search::PromotionRule::Asha(
      [] {
        search::AshaOptions o;
        o.min_resource = 1;
        o.reduction_factor = 3;
        return o;
      }(),
      4);

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<CountingStore> counting_;
  std::unique_ptr<Engine> writer_;
  Id experiment_ = 0;
  std::shared_ptr<const ExperimentSpec> spec_;
};

using Backends = ::testing::Types<SqliteBackend, PostgresBackend>;
struct BackendNames {
  template <typename T>
  static std::string GetName(int) {
    return T::kName;
  }
};
TYPED_TEST_SUITE(TrialViewTest, Backends, BackendNames);

TYPED_TEST(TrialViewTest, ARereadOfTheChangesHoldsWhatAWholeReadDoes) {
  // max_age zero: every Fresh() rereads.
  TrialView view(*this->counting_, this->experiment_, this->spec_, std::chrono::milliseconds(0));
  auto first = this->Suggest(6);
  ASSERT_EQ(first.size(), 6u);
  this->Report(first[0], 0, 0.9);
  this->Report(first[1], 0, 0.7);
  this->ExpectSameAsAWholeRead(view, "the first read");

  // Reports, a step sent again, a completion with its final value and one
  // without (it counts with its curve's last), and new trials.
  this->Report(first[0], 1, 0.5);
  this->Report(first[0], 1, 0.5);
  this->Report(first[1], 1, 0.6);
  this->Report(first[2], 0, 0.4);
  this->Complete(first[1], {{"loss", 0.55}});
  this->Complete(first[2], json::object());
  auto more = this->Suggest(3);
  ASSERT_EQ(more.size(), 3u);
  this->Report(more[0], 0, 0.3);
  this->ExpectSameAsAWholeRead(view, "reports, completions and new trials");

  // A restart deletes the trial's curve; it reports again from scratch.
  ASSERT_TRUE(this->store_->RestartTrial(first[0].trial.id, Engine::kClientOwner).ok());
  this->Report(first[0], 0, 0.8);
  // A prune and a failure.
  ASSERT_TRUE(
      this->writer_->Complete(first[3].trial.id, Engine::kClientOwner, true, json::object(), "boom")
          .ok());
  this->Report(first[4], 0, 2.0);
  store::FinishRequest pruned;
  pruned.state = store::TrialState::kPruned;
  ASSERT_TRUE(this->store_->FinishTrial(first[4].trial.id, Engine::kClientOwner, pruned).ok());
  this->ExpectSameAsAWholeRead(view, "a restart, a failure and a prune");

  // Nothing changed: a reread keeps the view as it is.
  this->ExpectSameAsAWholeRead(view, "no change");

  // One whole read (the first); every later reread asked for changes only.
  // (ReadNow() above is a whole read of its own each time.)
  const int whole_reads_by_read_now = 4;
  EXPECT_EQ(this->counting_->whole_reads, 1 + whole_reads_by_read_now);
  EXPECT_EQ(this->counting_->reads_since, 3);
  EXPECT_GE(this->counting_->trial_reads_since, 3);
}

// What suggestions are drawn from is the experiment's one copy of the
// view's histories, kept between batches: only the observations that
// changed since are copied again. After each kind of change the view makes
// the copy must hold what the view holds, having copied only that.
TYPED_TEST(TrialViewTest, AKeptCopyOfTheHistoriesCopiesOnlyWhatChanged) {
  // This engine's own changes (no rereads within the hour).
  TrialView view(*this->counting_, this->experiment_, this->spec_, std::chrono::hours(1));
  HistoriesCopy copy;
  auto first = this->Suggest(6);
  ASSERT_EQ(first.size(), 6u);
  this->Report(first[0], 0, 0.9);
  EXPECT_EQ(this->UpdateCopy(view, copy, "the first read"), 6u) << "the first copy is whole";
  EXPECT_EQ(this->UpdateCopy(view, copy, "no change"), 0u);

  ASSERT_TRUE(view.ApplyReport(first[0].trial, 1, Reading(0.5), true, nullptr).ok());
  EXPECT_EQ(this->UpdateCopy(view, copy, "a report"), 1u);
  view.SetOutcome(first[1].trial.id, store::TrialState::kCompleted, Reading(0.25));
  view.SetOutcome(first[2].trial.id, store::TrialState::kFailed, std::nullopt);
  EXPECT_EQ(this->UpdateCopy(view, copy, "two outcomes"), 2u);
  view.DropCurveAfter(first[0].trial.id, 0);
  EXPECT_EQ(this->UpdateCopy(view, copy, "a curve cut back"), 1u);
  auto more = this->Suggest(2);
  ASSERT_EQ(more.size(), 2u);
  for (const auto& a : more) view.Apply(a.trial);
  EXPECT_EQ(this->UpdateCopy(view, copy, "two new trials"), 2u);
  // Enough results (7 over two spaces) for the ranking to judge a space.
  double value = 0.9;
  for (const Lease* a : {&first[0], &first[3], &first[4], &first[5], &more[0], &more[1]}) {
    view.SetOutcome(a->trial.id, store::TrialState::kCompleted, Reading(value));
    value -= 0.1;
  }
  EXPECT_EQ(this->UpdateCopy(view, copy, "six outcomes"), 6u);
  ASSERT_TRUE(view.ApplyReport(more[1].trial, 3, Reading(0.05), true, nullptr)
                  .ok());  // running again (requeued)
  EXPECT_EQ(this->UpdateCopy(view, copy, "a finished trial reporting again"), 1u);

  // A view read whole again is copied whole again.
  view.Forget();
  EXPECT_EQ(this->UpdateCopy(view, copy, "a whole reread"), 8u);

  // Another replica's changes, read since the cursor (every Fresh() rereads).
  TrialView rereading(*this->counting_, this->experiment_, this->spec_,
                      std::chrono::milliseconds(0));
  HistoriesCopy kept;
  this->UpdateCopy(rereading, kept, "the first read");
  this->Report(first[3], 0, 0.7);
  this->Complete(first[3], {{"loss", 0.65}});
  auto last = this->Suggest(1);
  ASSERT_EQ(last.size(), 1u);
  ASSERT_TRUE(this->store_->RestartTrial(first[0].trial.id, Engine::kClientOwner).ok());
  this->Report(first[0], 0, 0.8);
  // Three observations changed: a report and a completion, a new trial, a
  // restart. Rows the reread reads again unchanged (PostgreSQL's cursor may
  // repeat many) are not copied.
  EXPECT_EQ(this->UpdateCopy(rereading, kept, "another replica's changes"), 3u)
      << "only what changed";
}

// The kept ranking lists the trials changed since it last read them, and
// past what that list holds (65,536) reads every trial. Both ways, and with
// values that come, change and go, it must give what a ranking made from
// every trial gives.
TYPED_TEST(TrialViewTest, KeptPromotionsFollowReportsPausesAndCurvesCutBack) {
  TrialView view(*this->counting_, this->experiment_, this->spec_, std::chrono::hours(1));
  HistoriesCopy copy;
  auto trials = this->Suggest(12);
  ASSERT_EQ(trials.size(), 12u);
  this->UpdateCopy(view, copy, "the first read");
  // Each reports its first step and pauses at the first rung: a third of
  // each space's may go on.
  for (size_t i = 0; i < trials.size(); ++i) {
    ASSERT_TRUE(view.ApplyReport(trials[i].trial, 1,
                                 Reading(0.05 * static_cast<double>((i * 7) % 12)), true, nullptr)
                    .ok());
    view.SetOutcome(trials[i].trial.id, store::TrialState::kPaused, std::nullopt);
  }
  this->UpdateCopy(view, copy, "twelve paused at the first rung");
  {
    auto locked = view.Fresh();
    ASSERT_TRUE(locked.ok());
    EXPECT_GT(this->ExpectKeptPromotionsAsTheRuleSays(**locked, "the count"), 0u);
  }
  // Two go on (running: not paused), one of them to the second rung and
  // pauses there; another fails; another's curve is cut back to nothing.
  ASSERT_TRUE(view.ApplyReport(trials[0].trial, 2, Reading(0.01), true, nullptr).ok());
  ASSERT_TRUE(view.ApplyReport(trials[1].trial, 2, Reading(0.02), true, nullptr).ok());
  ASSERT_TRUE(view.ApplyReport(trials[1].trial, 3, Reading(0.01), true, nullptr).ok());
  view.SetOutcome(trials[1].trial.id, store::TrialState::kPaused, std::nullopt);
  view.SetOutcome(trials[2].trial.id, store::TrialState::kFailed, std::nullopt);
  view.DropCurveAfter(trials[3].trial.id, 0);
  this->UpdateCopy(view, copy, "resumes, a failure and a curve cut back");
  // More trials than the stale list holds change.
  for (int k = 0; k < 70'000; ++k) {
    const auto& t = trials[4 + static_cast<size_t>(k) % 8].trial;
    view.SetOutcome(t.id, k % 2 ? store::TrialState::kPaused : store::TrialState::kRunning,
                    std::nullopt);
  }
  this->UpdateCopy(view, copy, "70,000 changes, more than the list holds");
  view.Forget();
  this->UpdateCopy(view, copy, "a whole reread");
}

TYPED_TEST(TrialViewTest, AKeptRankingFollowsChangesPastWhatItLists) {
  TrialView view(*this->counting_, this->experiment_, this->spec_, std::chrono::hours(1));
  HistoriesCopy copy;
  auto trials = this->Suggest(10);
  ASSERT_EQ(trials.size(), 10u);
  // Outcome i goes to trial `first + i % count`.
  auto outcomes = [&](int from, int to, size_t first, size_t count) {
    for (int i = from; i < to; ++i) {
      const auto& t = trials[first + static_cast<size_t>(i) % count].trial;
      if (i % 7 == 3) {
        view.SetOutcome(t.id, store::TrialState::kFailed, std::nullopt);  // its value goes
      } else {
        view.SetOutcome(t.id, store::TrialState::kCompleted,
                        Reading(0.1 + ((i * 37) % 101) / 100.0));
      }
    }
  };
  this->UpdateCopy(view, copy, "the first read");
  outcomes(0, 20, 0, 10);
  this->UpdateCopy(view, copy, "20 outcomes, listed");
  // The first five trials change first, then only the last five, more
  // times than the list holds.
  outcomes(20, 25, 0, 5);
  outcomes(25, 70'025, 5, 5);
  this->UpdateCopy(view, copy, "70,005 outcomes, more than the list holds");
  outcomes(70'025, 70'030, 0, 10);
  ASSERT_TRUE(view.ApplyReport(trials[0].trial, 3, Reading(0.01), true, nullptr)
                  .ok());  // running again: no value
  this->UpdateCopy(view, copy, "listed again after a whole reading");
}

}  // namespace
}  // namespace hpo::server
