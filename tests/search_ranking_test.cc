#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "search/random.h"
#include "search/ranking.h"
#include "testing/objectives.h"

namespace hpo::search {
namespace {

History Results(std::vector<double> values) {
  History h;
  for (size_t i = 0; i < values.size(); ++i) {
    h.trials.push_back({static_cast<int64_t>(i), TrialStatus::kCompleted, {0.5}, values[i], {}});
  }
  return h;
}

SearchSpace Box(int dims) { return testing::Box("s" + std::to_string(dims), dims, 0, 1); }

double ShareSum(const std::vector<SpaceRank>& r) {
  return std::accumulate(r.begin(), r.end(), 0.0,
                         [](double a, const SpaceRank& x) { return a + x.share; });
}

TEST(SpaceRanking, FavoursTheSpaceLikelierToHoldTheBest) {
  auto r = RankSpaces({Box(2), Box(2)}, {Results({0.10, 0.12, 0.15, 0.30, 0.5}),
                                         Results({0.90, 0.95, 1.0, 1.1, 1.2})});
  EXPECT_GT(r[0].share, r[1].share);
  EXPECT_GT(r[0].share, 0.6);
  EXPECT_NEAR(ShareSum(r), 1.0, 1e-12);
  EXPECT_GE(r[1].share, 0.2 / 2) << "the floor keeps every space alive";
  EXPECT_DOUBLE_EQ(r[0].best, 0.10);
}

TEST(SpaceRanking, UnsettledSpacesRankAboveSettledOnesWithTheSameBest) {
  // Same best value; space 1's results spread widely, so its best is less
  // settled and it may still improve.
  auto r = RankSpaces({Box(2), Box(2)}, {Results({0.5, 0.5, 0.5, 0.51, 0.5, 0.5}),
                                         Results({0.5, 2.0, 0.9, 3.0, 1.5, 0.7})});
  EXPECT_GT(r[1].uncertainty, r[0].uncertainty);
  EXPECT_GT(r[1].priority, r[0].priority);
}

// The uncertainty is the standard deviation of the best value over every
// bootstrap resample, computed exactly (search/ranking.h): here against all
// 4^4 resamples of four results, enumerated.
TEST(SpaceRanking, UncertaintyIsTheExactBootstrapSpreadOfTheBest) {
  const std::vector<double> y = {0.9, 0.2, 0.5, 0.3};
  std::vector<double> mins;
  for (int code = 0; code < 256; ++code) {
    double m = 1e9;
    for (int d = 0, c = code; d < 4; ++d, c /= 4) m = std::min(m, y[c % 4]);
    mins.push_back(m);
  }
  double mean = 0, var = 0;
  for (double m : mins) mean += m / mins.size();
  for (double m : mins) var += (m - mean) * (m - mean) / mins.size();
  auto r = RankSpaces({Box(2)}, {Results(y)});
  EXPECT_NEAR(r[0].uncertainty, std::sqrt(var), 1e-12);
  EXPECT_DOUBLE_EQ(r[0].share, 1.0);
}

// With thousands of results only the smallest few hundred can matter to
// the spread of the best (the rest have bootstrap weight below a double's
// range), so the ranking orders only those. It must give what the formula
// over every order statistic gives, whatever order the results came in.
TEST(SpaceRanking, UncertaintyOfManyResultsIsTheSpreadOverEveryOrderStatistic) {
  std::vector<double> y;
  // Spread out at the low end, so that the spread of the best is well above
  // the ranking's floor (1% of the range); two ties at the best.
  for (int i = 0; i < 5000; ++i) y.push_back(0.1 + std::pow(((i * 7919) % 4001) / 4000.0, 0.25));
  std::vector<double> sorted = y;
  std::sort(sorted.begin(), sorted.end());
  const long double n = sorted.size();
  auto at_least = [&](size_t j) { return std::pow(1.0L - j / n, n); };  // P(min >= sorted[j])
  long double mean = 0, second = 0;
  for (size_t j = 0; j < sorted.size(); ++j) {
    const long double p = at_least(j) - at_least(j + 1);
    mean += p * sorted[j];
    second += p * sorted[j] * sorted[j];
  }
  const double expected = std::sqrt(static_cast<double>(second - mean * mean));
  ASSERT_GT(expected, 0.02) << "above the floor, 0.01";

  std::vector<double> reversed(sorted.rbegin(), sorted.rend());
  for (const auto& values : {y, reversed}) {
    auto r = RankSpaces({Box(2), Box(2)}, {Results(values), Results({0.5, 0.6, 0.7})});
    EXPECT_NEAR(r[0].uncertainty, expected, 1e-9 * expected);
    EXPECT_DOUBLE_EQ(r[0].best, sorted.front());
    EXPECT_EQ(r[0].results, 5000);
  }
}

TEST(SpaceRanking, LargerSpacesRankAboveSmallerOnesWithTheSameData) {
  const History same = Results({0.3, 0.5, 0.4, 0.9, 0.35});
  auto r = RankSpaces({Box(1), Box(8)}, {same, same});
  EXPECT_LT(r[0].complexity, r[1].complexity);
  EXPECT_DOUBLE_EQ(r[1].complexity, 1.0);
  EXPECT_GT(r[1].priority, r[0].priority);
}

TEST(SpaceRanking, UnexploredSpacesComeFirst) {
  auto r = RankSpaces({Box(2), Box(2), Box(2)},
                      {Results({0.1, 0.2, 0.3, 0.4}), Results({}), Results({0.5})});
  EXPECT_GE(r[1].priority, r[0].priority);
  EXPECT_GE(r[2].priority, r[0].priority) << "one result is not enough to judge a space";
  auto none = RankSpaces({Box(2), Box(3)}, {Results({}), Results({})});
  EXPECT_DOUBLE_EQ(none[0].share, 0.5);
}

// Issue #18: under early stopping a space's pruned trials count with their
// last reported value. Here space 0 has one completion and twenty pruned
// trials, all far worse than space 1's results: counting completions only,
// it was "unexplored" and took space 1's priority.
TEST(SpaceRanking, PrunedTrialsPartialResultsCount) {
  History a = Results({5.0});
  for (int i = 0; i < 20; ++i) {
    a.trials.push_back(
        {1 + i, TrialStatus::kPruned, {0.5}, std::nullopt, {{1, 9.0}, {3, 5.0 + 0.1 * i}}});
  }
  a.trials.push_back(
      {30, TrialStatus::kPruned, {0.5}, std::nullopt, {}});  // no report: nothing to count
  const History b = Results({1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9});
  auto r = RankSpaces({Box(2), Box(2)}, {a, b});
  EXPECT_EQ(r[0].results, 21);
  EXPECT_DOUBLE_EQ(r[0].best, 5.0);
  EXPECT_LT(r[0].priority, r[1].priority);
  EXPECT_LT(r[0].share, 0.5 * r[1].share) << "space 0's pruned trials say it is the worse one";
}

TEST(SpaceRanking, ChangesAsResultsArrive) {
  History a = Results({1.0, 1.1, 1.2});
  History b = Results({2.0, 2.1, 2.2});
  auto before = RankSpaces({Box(2), Box(2)}, {a, b});
  b = Results({2.0, 2.1, 2.2, 0.2, 0.3});  // space b finds much better points
  auto after = RankSpaces({Box(2), Box(2)}, {a, b});
  EXPECT_LT(before[1].share, before[0].share);
  EXPECT_GT(after[1].share, after[0].share);
}

TEST(SpaceRanking, KeptResultsRankAsTheHistoriesTheyWereSetFrom) {
  // Trials come, finish, and a paused one is resumed (its value goes back to
  // nothing): the kept results, changed one trial at a time, rank as the
  // histories do after every change, past the 64 smallest kept per space.
  Rng rng(7);
  std::vector<History> h(2);
  RankedResults kept;
  for (int change = 0; change < 600; ++change) {
    const size_t s = rng.Below(2);
    size_t i = h[s].trials.size();
    if (i > 0 && rng.Uniform() < 0.4) {
      i = rng.Below(i);
    } else {
      h[s].trials.push_back(
          {static_cast<int64_t>(i), TrialStatus::kRunning, {0.5}, std::nullopt, {}});
    }
    Observation& t = h[s].trials[i];
    const double u = rng.Uniform();
    if (u < 0.5) {
      t.status = TrialStatus::kCompleted;
      t.value = rng.Uniform(s, s + 2.0);
    } else if (u < 0.8) {
      t.status = TrialStatus::kPruned;
      t.curve = {{1, rng.Uniform(s, s + 3.0)}};
    } else {
      t.status = TrialStatus::kRunning;
    }
    kept.Set(s, i, RankedValue(t));
    EXPECT_FALSE(kept.Set(s, i, RankedValue(t))) << "the same value again changes nothing";
    const auto want = RankSpaces({Box(2), Box(3)}, h);
    const auto got = RankSpaces({Box(2), Box(3)}, kept.Results(2));
    for (size_t k = 0; k < 2; ++k) {
      ASSERT_EQ(got[k].results, want[k].results) << "after change " << change;
      ASSERT_DOUBLE_EQ(got[k].share, want[k].share) << "after change " << change;
      ASSERT_DOUBLE_EQ(got[k].uncertainty, want[k].uncertainty) << "after change " << change;
    }
  }
  EXPECT_GT(kept.Results(2)[1].count, 64) << "the test must pass the kept order statistics";
}

TEST(SpaceRanking, IsDeterministic) {
  const std::vector<History> h = {Results({0.3, 0.6, 0.2, 0.9}), Results({0.25, 0.7, 0.8, 0.4})};
  auto x = RankSpaces({Box(2), Box(3)}, h);
  auto y = RankSpaces({Box(2), Box(3)}, h);
  for (size_t s = 0; s < x.size(); ++s) EXPECT_DOUBLE_EQ(x[s].share, y[s].share);
}

TEST(SpaceRanking, PickSpaceFollowsTheShares) {
  std::vector<SpaceRank> ranks(3);
  ranks[0].share = 0.6;
  ranks[1].share = 0.3;
  ranks[2].share = 0.1;
  std::vector<int> counts(3, 0);
  for (int i = 0; i < 100; ++i) counts[PickSpace(ranks, counts)]++;
  EXPECT_NEAR(counts[0], 60, 1);
  EXPECT_NEAR(counts[1], 30, 1);
  EXPECT_NEAR(counts[2], 10, 1);
}

}  // namespace
}  // namespace hpo::search
