// Promotion-type successive halving on hand-made histories: each
// expectation follows from the rules in search/promotion.h.
#include <gtest/gtest.h>

#include "search/promotion.h"

namespace hpo::search {
namespace {

using Curve = std::vector<std::pair<int64_t, double>>;

// A trial whose curve is `value` at every step 1..last.
Observation Trial(int64_t number, double value, int64_t last, TrialStatus status = TrialStatus::kRunning) {
  Observation o;
  o.number = number;
  o.status = status;
  for (int64_t s = 1; s <= last; ++s) o.curve.emplace_back(s, value);
  if (status == TrialStatus::kCompleted) o.value = value;
  return o;
}

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
  EXPECT_EQ(PromotionRule::Asha(Asha(1, 1.5), 10)->Rungs(0), (std::vector<int64_t>{1, 2, 3, 4, 6, 8, 10}));
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

TEST(PromotionRuleTest, HigherRungsFirstAndFailedTrialsCountNowhere) {
  const auto rule = *PromotionRule::Asha(Asha(1, 3), 9);  // rungs 1, 3, 9
  History h;
  // Three reached step 3 (paused at level 1); three more only step 1.
  h.trials = {Trial(0, 0.4, 3), Trial(1, 0.1, 3), Trial(2, 0.6, 3),
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

}  // namespace
}  // namespace hpo::search
