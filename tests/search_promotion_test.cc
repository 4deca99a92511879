// Promotion-type successive halving on hand-made histories: each
// expectation follows from the rules in search/promotion.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <tuple>

#include "search/promotion.h"

namespace hpo::search {
namespace {

using Curve = std::vector<std::pair<int64_t, double>>;

// A trial whose curve is `value` at every step 1..last.
Observation Trial(int64_t number, double value, int64_t last,
                  TrialStatus status = TrialStatus::kRunning) {
  Observation o;
  o.number = number;
  o.status = status;
  for (int64_t s = 1; s <= last; ++s) o.curve.emplace_back(s, value);
  if (status == TrialStatus::kCompleted) o.value = value;
  return o;
}

void ExpectSamePromotions(const std::vector<Promotion>& got, const std::vector<Promotion>& want,
                          const std::string& where);

AshaOptions Asha(int64_t min_resource, double eta) {
  AshaOptions o;
  o.min_resource = min_resource;
  o.reduction_factor = eta;
  return o;
}

TEST(PromotionRuleTest, RungsEndAtTheBudget) {
  auto r = PromotionRule::Asha(Asha(1, 3), 27);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->Rungs(0), (std::vector<int64_t>{1, 3, 9, 27}));
  EXPECT_EQ(PromotionRule::Asha(Asha(3, 3), 10)->Rungs(5), (std::vector<int64_t>{3, 9, 10}));
  EXPECT_EQ(PromotionRule::Asha(Asha(2, 2), 8)->Rungs(0), (std::vector<int64_t>{2, 4, 8}));
  // eta 1.5 from 1: 1, 1.5 -> 2, 2.25 -> 3, 3.375 -> 4, 5.06 -> 6, 7.6 -> 8, then the budget.
  EXPECT_EQ(PromotionRule::Asha(Asha(1, 1.5), 10)->Rungs(0),
            (std::vector<int64_t>{1, 2, 3, 4, 6, 8, 10}));
  // A budget at the first rung: one segment to the end.
  EXPECT_EQ(PromotionRule::Asha(Asha(3, 3), 3)->Rungs(0), (std::vector<int64_t>{3}));
  EXPECT_EQ(PromotionRule::Asha(Asha(1, 3), 27)->FirstStop(0), 1);
}

TEST(PromotionRuleTest, BadOptionsNameTheField) {
  auto r = PromotionRule::Asha(Asha(0, 3), 27);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("min_resource"), std::string::npos) << r.status();
}

TEST(PromotionRuleTest, OnlyTheBestOfEveryEtaAtARungMayGoOn) {
  const auto rule = *PromotionRule::Asha(Asha(1, 3), 27);
  History h;
  h.trials = {Trial(0, 0.5, 1), Trial(1, 0.2, 1), Trial(2, 0.9, 1)};
  const std::vector<PausedTrial> paused = {{0, 0}, {1, 0}, {2, 0}};
  // Two trials at rung 1: floor(2 / 3) = 0 promotions yet.
  History two;
  two.trials = {h.trials[0], h.trials[1]};
  EXPECT_TRUE(rule.Promotable(two, {{0, 0}, {1, 0}}).empty());
  auto p = rule.Promotable(h, paused);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].index, 1u);
  EXPECT_EQ(p[0].from_step, 1);
  EXPECT_EQ(p[0].to_step, 3);
  EXPECT_FALSE(p[0].to_end);
  EXPECT_DOUBLE_EQ(p[0].value, 0.2);
  // Once promoted (now running beyond step 1), it keeps the rung's one place:
  // nobody else at rung 1 is promotable until more trials arrive.
  h.trials[1] = Trial(1, 0.2, 2);
  EXPECT_TRUE(rule.Promotable(h, {{0, 0}, {2, 0}}).empty());
  // Six at rung 1: two places; the promoted one and the next best (0.3).
  h.trials.push_back(Trial(3, 0.3, 1));
  h.trials.push_back(Trial(4, 0.8, 1));
  h.trials.push_back(Trial(5, 0.7, 1));
  p = rule.Promotable(h, {{0, 0}, {2, 0}, {3, 0}, {4, 0}, {5, 0}});
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].index, 3u);
}

// The quantile criterion: the better of two goes on at once, and with more
// results those at or below the interpolated R_j / R_{j+1} quantile do.
TEST(PromotionRuleTest, TheQuantileRulePromotesTheBetterOfTwoAtOnce) {
  const auto rule = *PromotionRule::Asha(Asha(1, 3), 27, PromotionCriterion::kQuantile);
  EXPECT_EQ(rule.criterion(), PromotionCriterion::kQuantile);
  History h;
  h.trials = {Trial(0, 0.5, 1)};
  // One result is no comparison.
  EXPECT_TRUE(rule.Promotable(h, {{0, 0}}).empty());
  h.trials.push_back(Trial(1, 0.2, 1));
  auto p = rule.Promotable(h, {{0, 0}, {1, 0}});
  // p = 1/3; h = 1/3: Q = 0.2 + (0.5 - 0.2) / 3 = 0.3, so only 0.2.
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].index, 1u);
  EXPECT_EQ(p[0].to_step, 3);
  // Four results {0.1, 0.2, 0.5, 0.9}: h = 3 / 3 = 1, Q = 0.2: two go on
  // (the top fraction would promote one: floor(4 / 3)).
  h.trials.push_back(Trial(2, 0.9, 1));
  h.trials.push_back(Trial(3, 0.1, 1));
  p = rule.Promotable(h, {{0, 0}, {1, 0}, {2, 0}, {3, 0}});
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].index, 3u);
  EXPECT_EQ(p[1].index, 1u);
  EXPECT_EQ(
      PromotionRule::Asha(Asha(1, 3), 27)->Promotable(h, {{0, 0}, {1, 0}, {2, 0}, {3, 0}}).size(),
      1u);
  // The quantile of the last rung uses its own ratio: rungs 1, 3, 9, 10 end
  // at the budget, so from 9 p = 9 / 10 and nearly every result goes on.
  const auto last = *PromotionRule::Asha(Asha(1, 3), 10, PromotionCriterion::kQuantile);
  History l;
  l.trials = {Trial(0, 0.1, 9), Trial(1, 0.2, 9), Trial(2, 0.3, 9)};
  // h = 2 * 0.9 = 1.8: Q = 0.2 + 0.8 * 0.1 = 0.28: two of three.
  p = last.Promotable(l, {{0, 2}, {1, 2}, {2, 2}});
  ASSERT_EQ(p.size(), 2u);
  EXPECT_TRUE(p[0].to_end);
  // Names both ways.
  EXPECT_EQ(ParsePromotionCriterion("quantile"), PromotionCriterion::kQuantile);
  EXPECT_EQ(ParsePromotionCriterion("top_fraction"), PromotionCriterion::kTopFraction);
  EXPECT_FALSE(ParsePromotionCriterion("median").has_value());
  EXPECT_STREQ(PromotionCriterionName(PromotionCriterion::kQuantile), "quantile");
}

// A trial of two objectives whose point is `point` at every step 1..last.
Observation TwoObjectives(int64_t number, std::vector<double> point, int64_t last) {
  Observation o = Trial(number, point.at(0), last);
  for (int64_t s = 1; s <= last; ++s) o.curve_values.emplace_back(s, point);
  return o;
}

// Several objectives: a rung keeps its front (and its spread), not the
// best of the first objective; both the rule and the kept results say so.
TEST(PromotionRuleTest, SeveralObjectivesPromoteTheFrontOfARung) {
  const auto rule = *PromotionRule::Asha(Asha(1, 3), 27);
  History h;
  h.trials = {TwoObjectives(0, {0.10, 0.90}, 1),   // front
              TwoObjectives(1, {0.15, 0.95}, 1),   // dominated by 0; second in the first objective
              TwoObjectives(2, {0.50, 0.20}, 1),   // front
              TwoObjectives(3, {0.80, 0.80}, 1),   // dominated
              TwoObjectives(4, {0.90, 0.90}, 1),   // dominated
              TwoObjectives(5, {0.95, 0.95}, 1)};  // dominated
  std::vector<PausedTrial> paused;
  for (size_t i = 0; i < h.trials.size(); ++i) paused.push_back({i, 0});
  auto p = rule.Promotable(h, paused);
  // Six at rung 1: two go on, the front's two (one objective's rule would
  // promote trials 0 and 1).
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].index, 0u);
  EXPECT_EQ(p[1].index, 2u);
  EXPECT_EQ(p[0].value, 0) << "its place at the rung";
  EXPECT_EQ(p[1].value, 1);
  EXPECT_EQ(p[0].to_step, 3);
  RungResults kept(rule);
  for (size_t i = 0; i < h.trials.size(); ++i) kept.Set(0, i, h.trials[i], 0);
  ExpectSamePromotions(kept.Promotable(0), p, "kept");
  // Trial 2 resumed past the rung keeps its place there: trial 0 alone.
  h.trials[2] = TwoObjectives(2, {0.50, 0.20}, 2);
  kept.Set(0, 2, h.trials[2], std::nullopt);
  paused.erase(paused.begin() + 2);
  p = rule.Promotable(h, paused);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].index, 0u);
  ExpectSamePromotions(kept.Promotable(0), p, "kept, one resumed");
  // The quantile criterion: the better of two goes on at once.
  const auto quantile = *PromotionRule::Asha(Asha(1, 3), 27, PromotionCriterion::kQuantile);
  History two;
  two.trials = {TwoObjectives(0, {0.5, 0.5}, 1), TwoObjectives(1, {0.4, 0.4}, 1)};
  p = quantile.Promotable(two, {{0, 0}, {1, 0}});
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].index, 1u) << "it dominates the other";
}

// A trial that must end infeasible (a constraint that only gets worse is
// already broken) is never promoted, however good its objectives, and
// counts at the rung behind every other: one objective or several.
TEST(PromotionRuleTest, ATrialThatMustEndInfeasibleIsNeverPromoted) {
  for (const auto criterion : {PromotionCriterion::kTopFraction, PromotionCriterion::kQuantile}) {
    const auto rule = *PromotionRule::Asha(Asha(1, 3), 27, criterion);
    for (const bool several : {false, true}) {
      History h;
      h.trials = {several ? TwoObjectives(0, {0.0, 0.0}, 1) : Trial(0, 0.0, 1),
                  several ? TwoObjectives(1, {0.5, 0.5}, 1) : Trial(1, 0.5, 1),
                  several ? TwoObjectives(2, {0.6, 0.6}, 1) : Trial(2, 0.6, 1)};
      h.trials[0].known_violation = 2.5;
      const std::vector<PausedTrial> paused = {{0, 0}, {1, 0}, {2, 0}};
      const std::string where = std::string(PromotionCriterionName(criterion)) +
                                (several ? ", two objectives" : ", one objective");
      auto p = rule.Promotable(h, paused);
      ASSERT_FALSE(p.empty()) << where;
      EXPECT_EQ(p[0].index, 1u) << where << ": the best that may end feasible";
      for (const Promotion& q : p) EXPECT_NE(q.index, 0u) << where;
      RungResults kept(rule);
      for (size_t i = 0; i < h.trials.size(); ++i) kept.Set(0, i, h.trials[i], 0);
      ExpectSamePromotions(kept.Promotable(0), p, where + ", kept");
      // Within its constraints again (known_violation 0): it is the best.
      h.trials[0].known_violation = 0;
      kept.Set(0, 0, h.trials[0], 0);
      p = rule.Promotable(h, paused);
      ASSERT_FALSE(p.empty()) << where;
      EXPECT_EQ(p[0].index, 0u) << where;
      ExpectSamePromotions(kept.Promotable(0), p, where + ", kept, feasible");
    }
  }
}

TEST(PromotionRuleTest, HigherRungsFirstAndFailedTrialsCountNowhere) {
  const auto rule = *PromotionRule::Asha(Asha(1, 3), 9);  // rungs 1, 3, 9
  History h;
  // Three reached step 3 (paused at level 1); three more only step 1.
  h.trials = {Trial(0, 0.4, 3),  Trial(1, 0.1, 3), Trial(2, 0.6, 3),
              Trial(3, 0.05, 1), Trial(4, 0.9, 1), Trial(5, 0.95, 1)};
  auto p = rule.Promotable(h, {{0, 1}, {1, 1}, {2, 1}, {3, 0}, {4, 0}, {5, 0}});
  // Rung 3: floor(3/3) = 1 -> trial 1, to the end. Rung 1: six reached it,
  // floor(6/3) = 2 places: 0.05 (trial 3) and 0.1 (trial 1, already beyond).
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].index, 1u);
  EXPECT_EQ(p[0].from_level, 1);
  EXPECT_TRUE(p[0].to_end);
  EXPECT_EQ(p[1].index, 3u);
  EXPECT_EQ(p[1].from_level, 0);
  // A failed trial at rung 1 takes no place and no count.
  h.trials[3].status = TrialStatus::kFailed;
  p = rule.Promotable(h, {{0, 1}, {1, 1}, {2, 1}, {4, 0}, {5, 0}});
  // Five at rung 1: one place, held by trial 1 (0.1); trial 4 and 5 wait.
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].index, 1u);
}

TEST(PromotionRuleTest, HyperbandBracketsDoNotCompete) {
  HyperbandOptions o;
  o.min_resource = 1;
  o.max_resource = 9;
  o.reduction_factor = 3;
  const auto rule = *PromotionRule::Hyperband(o, 9);
  // Find three trial numbers in one bracket and one in another.
  std::map<int, std::vector<int64_t>> by_bracket;
  for (int64_t n = 0; n < 200; ++n) by_bracket[HyperbandBracket(o, n)].push_back(n);
  ASSERT_GE(by_bracket.size(), 2u);
  const auto& a = by_bracket.begin()->second;
  const auto& b = std::next(by_bracket.begin())->second;
  ASSERT_GE(a.size(), 3u);
  // Bracket rungs differ: bracket s starts at 3^s.
  EXPECT_NE(rule.Rungs(a[0]).front(), rule.Rungs(b[0]).front());
  const int64_t first = rule.Rungs(a[0]).front();
  History h;
  h.trials = {Trial(a[0], 0.5, first), Trial(a[1], 0.3, first), Trial(a[2], 0.7, first)};
  // A far better trial of the other bracket at the same step changes nothing.
  h.trials.push_back(Trial(b[0], 0.0, std::max(first, rule.Rungs(b[0]).front())));
  auto p = rule.Promotable(h, {{0, 0}, {1, 0}, {2, 0}});
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].index, 1u);
}

// The rule as search/promotion.h states it, written the plain way (every
// rung's values sorted, a trial's place looked up), against Promotable,
// which selects instead of sorting (it runs on every lease): random
// histories with ties, NaN steps, failed trials, trials short of a rung and
// Hyperband's brackets give the same promotions in the same order.
std::vector<Promotion> ByTheDefinition(const PromotionRule& rule, double eta, const History& h,
                                       const std::vector<PausedTrial>& paused,
                                       const std::function<int(int64_t)>& bracket) {
  std::map<std::pair<int, int>, std::vector<std::pair<double, int64_t>>> at_rung;
  for (const auto& o : h.trials) {
    if (o.status == TrialStatus::kFailed || o.curve.empty()) continue;
    const auto r = rule.Rungs(o.number);
    for (size_t j = 0; j + 1 < r.size() && r[j] <= *o.LastStep(); ++j) {
      const auto v = o.ValueAt(r[j]);
      if (v && !std::isnan(*v))
        at_rung[{bracket(o.number), static_cast<int>(j)}].emplace_back(*v, o.number);
    }
  }
  for (auto& [k, values] : at_rung) std::sort(values.begin(), values.end());
  std::map<size_t, int> level_of;
  for (const auto& p : paused) level_of[p.index] = p.level;
  std::vector<Promotion> out;
  for (const auto& [index, level] : level_of) {
    if (index >= h.trials.size() || level < 0) continue;
    const Observation& o = h.trials[index];
    const auto r = rule.Rungs(o.number);
    if (static_cast<size_t>(level) + 1 >= r.size()) continue;
    const auto v = o.ValueAt(r[level]);
    const auto it = at_rung.find({bracket(o.number), level});
    if (!v || std::isnan(*v) || it == at_rung.end()) continue;
    const size_t best = static_cast<size_t>(std::floor(it->second.size() / eta * (1 + 1e-12)));
    const size_t place =
        std::lower_bound(it->second.begin(), it->second.end(), std::make_pair(*v, o.number)) -
        it->second.begin();
    if (place >= best) continue;
    out.push_back(
        {index, level, r[level], r[level + 1], static_cast<size_t>(level) + 2 == r.size(), *v});
  }
  std::sort(out.begin(), out.end(), [](const Promotion& a, const Promotion& b) {
    return std::make_tuple(-a.from_level, a.value, a.index) <
           std::make_tuple(-b.from_level, b.value, b.index);
  });
  return out;
}

// The same promotions, field by field, in the same order.
void ExpectSamePromotions(const std::vector<Promotion>& got, const std::vector<Promotion>& want,
                          const std::string& where) {
  ASSERT_EQ(got.size(), want.size()) << where;
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_EQ(got[k].index, want[k].index) << where;
    EXPECT_EQ(got[k].from_level, want[k].from_level) << where;
    EXPECT_EQ(got[k].from_step, want[k].from_step) << where;
    EXPECT_EQ(got[k].to_step, want[k].to_step) << where;
    EXPECT_EQ(got[k].to_end, want[k].to_end) << where;
    EXPECT_EQ(got[k].value, want[k].value) << where;
  }
}

TEST(PromotionRuleTest, PromotableIsTheRuleAsDefinedOnRandomHistories) {
  std::mt19937_64 rng(7);
  HyperbandOptions hb;
  hb.min_resource = 1;
  hb.max_resource = 27;
  hb.reduction_factor = 3;
  const auto hyperband = *PromotionRule::Hyperband(hb, 27);
  const auto asha = *PromotionRule::Asha(Asha(1, 3), 27);
  int promoted = 0;
  for (int round = 0; round < 200; ++round) {
    const bool is_hb = round % 2 == 1;
    const PromotionRule& rule = is_hb ? hyperband : asha;
    const std::function<int(int64_t)> bracket = [&](int64_t n) {
      return is_hb ? HyperbandBracket(hb, n) : 0;
    };
    History h;
    std::vector<PausedTrial> paused;
    const int n = 1 + static_cast<int>(rng() % 60);
    for (int i = 0; i < n; ++i) {
      Observation o;
      o.number = i;
      o.status = rng() % 10 == 0 ? TrialStatus::kFailed : TrialStatus::kPruned;
      const int64_t last = static_cast<int64_t>(rng() % 28);
      for (int64_t step = 1; step <= last; ++step) {
        if (rng() % 4 == 0) continue;                   // steps not reported
        double v = static_cast<double>(rng() % 8) / 8;  // ties
        if (rng() % 25 == 0) v = std::nan("");
        o.curve.emplace_back(step, v);
      }
      h.trials.push_back(o);
      if (rng() % 2 == 0) {
        const int level = static_cast<int>(rng() % 4);
        const bool negative = rng() % 20 == 0;  // a level below 0 counts as nothing to promote
        paused.push_back({static_cast<size_t>(i), negative ? -1 : level});
      }
    }
    if (rng() % 5 == 0 && !paused.empty()) {
      paused.push_back({paused.front().index, 0});  // listed twice: the last counts
    }
    const auto got = rule.Promotable(h, paused);
    const auto want = ByTheDefinition(rule, 3, h, paused, bracket);
    ExpectSamePromotions(got, want, "round " + std::to_string(round));
    promoted += static_cast<int>(got.size());
  }
  EXPECT_GT(promoted, 100) << "the histories hardly exercised promotion";
}

// RungResults, kept through random changes (curves growing and cut back,
// statuses, pauses and resumes, in two spaces), gives what the rule's
// Promotable gives over the same trials after every change, under both
// criteria, for ASHA and Hyperband, with one objective and with two, and
// with trials that must end infeasible.
TEST(RungResultsTest, KeptResultsPromoteAsTheRuleOverTheSameTrials) {
  std::mt19937_64 rng(11);
  HyperbandOptions hb;
  hb.min_resource = 1;
  hb.max_resource = 27;
  hb.reduction_factor = 3;
  int promoted = 0, checks = 0;
  for (const auto criterion : {PromotionCriterion::kTopFraction, PromotionCriterion::kQuantile}) {
    for (const auto& [is_hb, several] : {std::pair{false, false}, std::pair{true, false},
                                         std::pair{false, true}, std::pair{true, true}}) {
      const auto rule = is_hb ? *PromotionRule::Hyperband(hb, 27, criterion)
                              : *PromotionRule::Asha(Asha(1, 3), 27, criterion);
      RungResults kept(rule);
      std::vector<History> h(2);
      std::vector<std::map<size_t, int>> paused(2);  // index -> level
      for (int change = 0; change < 1500; ++change) {
        const size_t s = rng() % 2;
        auto& trials = h[s].trials;
        size_t i = 0;
        if (trials.empty() || rng() % 6 == 0) {  // a new trial
          Observation o;
          o.number = static_cast<int64_t>(trials.size() + h[1 - s].trials.size());
          o.status = TrialStatus::kRunning;
          trials.push_back(o);
          i = trials.size() - 1;
        } else {
          i = rng() % trials.size();
          Observation& o = trials[i];
          switch (rng() % 6) {
            case 0:
            case 1: {  // reports
              const int64_t from = o.curve.empty() ? 0 : o.curve.back().first;
              for (int64_t k = 1 + static_cast<int64_t>(rng() % 5); k > 0 && from + k <= 27; --k) {
                double v = static_cast<double>(rng() % 8) / 8;  // ties
                if (rng() % 30 == 0) v = std::nan("");
                o.curve.emplace_back(from + k, v);
                // Several objectives: a second one, with ties and
                // trade-offs against the first.
                if (several)
                  o.curve_values.push_back({from + k, {v, static_cast<double>(rng() % 8) / 8}});
              }
              std::sort(o.curve.begin(), o.curve.end());
              std::sort(o.curve_values.begin(), o.curve_values.end());
              // Now and then a constraint that only gets worse breaks (or,
              // as the test allows, mends).
              if (rng() % 8 == 0) o.known_violation = rng() % 2 == 0 ? 1.0 : 0.0;
              break;
            }
            case 2:  // pauses at a level (sometimes one with nothing above it)
              paused[s][i] = static_cast<int>(rng() % 5) - (rng() % 15 == 0 ? 5 : 0);
              break;
            case 3:  // resumed, completed or requeued: not paused
              paused[s].erase(i);
              break;
            case 4:  // an expired lease cuts its curve back
              if (!o.curve.empty()) o.curve.resize(rng() % o.curve.size());
              if (several) o.curve_values.resize(o.curve.size());
              break;
            default:
              o.status = rng() % 4 == 0 ? TrialStatus::kFailed : TrialStatus::kPruned;
          }
        }
        const auto level = paused[s].find(i);
        kept.Set(s, i, trials[i],
                 level == paused[s].end() ? std::nullopt : std::optional<int>(level->second));
        if (change % 7 != 0) continue;
        for (size_t space = 0; space < 2; ++space) {
          std::vector<PausedTrial> list;
          for (const auto& [index, lv] : paused[space]) list.push_back({index, lv});
          const auto want = rule.Promotable(h[space], list);
          const auto got = kept.Promotable(space);
          ++checks;
          ExpectSamePromotions(got, want, "change " + std::to_string(change));
          promoted += static_cast<int>(got.size());
          // At most two a rung: the best two of each, the second saying
          // how many more.
          std::vector<Promotion> want_capped;
          std::map<std::pair<int, int64_t>, std::vector<size_t>> of_rung;  // -> in want_capped
          for (const Promotion& p : got) {
            auto& at = of_rung[{p.from_level, p.from_step}];
            if (at.size() < 2) {
              want_capped.push_back(p);
              at.push_back(want_capped.size() - 1);
            } else {
              ++want_capped[at.back()].more;
            }
          }
          const auto capped = kept.Promotable(space, 2);
          ASSERT_EQ(capped.size(), want_capped.size()) << "change " << change;
          for (size_t k = 0; k < capped.size(); ++k) {
            EXPECT_EQ(capped[k].index, want_capped[k].index) << "change " << change;
            EXPECT_EQ(capped[k].more, want_capped[k].more) << "change " << change;
          }
        }
      }
    }
  }
  EXPECT_GT(checks, 1000);
  EXPECT_GT(promoted, 1000) << "the changes hardly exercised promotion";
}

// Issue #46: a rung keeps floor(n / eta), so the last of L + 1 rungs needs
// about eta^L trials; fewer, and no trial completes.
TEST(PromotionRuleTest, TrialsToReachLastRungIsEtaToTheNumberOfPromotions) {
  EXPECT_EQ(TrialsToReachLastRung(*PromotionRule::Asha(Asha(1, 3), 9), 3), 9);    // rungs 1, 3, 9
  EXPECT_EQ(TrialsToReachLastRung(*PromotionRule::Asha(Asha(1, 3), 27), 3), 27);  // 1, 3, 9, 27
  EXPECT_EQ(TrialsToReachLastRung(*PromotionRule::Asha(Asha(1, 3), 8), 3), 9);    // 1, 3, 8
  EXPECT_EQ(TrialsToReachLastRung(*PromotionRule::Asha(Asha(3, 3), 3), 3),
            1);  // one rung: no promotion
  // eta 2.5: m = 1, ceil(2.5) = 3, ceil(7.5) = 8.
  EXPECT_EQ(TrialsToReachLastRung(*PromotionRule::Asha(Asha(1, 2.5), 7), 2.5), 8);  // 1, 3 (2.5), 7
  EXPECT_EQ(TrialsToReachLastRung(*PromotionRule::Asha(Asha(1, 3), 27), 3, 10), 11)
      << "past the limit";
}

}  // namespace
}  // namespace hpo::search
