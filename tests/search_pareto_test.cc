#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "search/pareto.h"

namespace hpo::search {
namespace {

using Points = std::vector<ObjectivePoint>;

TEST(Pareto, DominanceNeedsNoWorseEverywhereAndBetterSomewhere) {
  EXPECT_TRUE(Dominates({1, 2}, {1, 3}));
  EXPECT_TRUE(Dominates({0, 0, 0}, {1, 1, 1}));
  EXPECT_FALSE(Dominates({1, 2}, {1, 2})) << "equal points";
  EXPECT_FALSE(Dominates({1, 3}, {2, 2})) << "a trade-off";
  EXPECT_FALSE(Dominates({1, 3}, {1, 2}));
  EXPECT_FALSE(Dominates({1}, {1, 2})) << "different sizes";
}

TEST(Pareto, RanksAreFrontsPeeledInTurn) {
  //   (1,5) (2,3) (4,1)  the front
  //   (3,4) (5,2)        dominated by the front only
  //   (6,6)              dominated by rank 1's (3,4) and (5,2)
  //   (2,3) again        equal to a front point: same rank
  const Points p = {{3, 4}, {1, 5}, {6, 6}, {2, 3}, {5, 2}, {4, 1}, {2, 3}};
  EXPECT_EQ(NonDominatedRanks(p), (std::vector<int>{1, 0, 2, 0, 1, 0, 0}));
  EXPECT_TRUE(NonDominatedRanks({}).empty());
}

TEST(Pareto, FirstFrontsAgreeWithTheFullSortAsFarAsNeeded) {
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<int> coord(0, 9);  // small integers: many ties and equal points
  for (int rep = 0; rep < 50; ++rep) {
    Points p(40, ObjectivePoint(2 + rep % 2));
    for (auto& x : p) {
      for (double& v : x) v = coord(rng);
    }
    const auto full = NonDominatedRanks(p);
    for (size_t needed : {size_t{1}, size_t{10}, size_t{40}}) {
      const auto first = FirstFronts(p, needed);
      size_t covered = 0;
      int deepest = -1;
      for (size_t i = 0; i < p.size(); ++i) {
        if (first[i] < 0) continue;
        EXPECT_EQ(first[i], full[i]) << "repetition " << rep << ", point " << i;
        ++covered;
        deepest = std::max(deepest, first[i]);
      }
      EXPECT_GE(covered, std::min(needed, p.size()));
      for (size_t i = 0; i < p.size(); ++i) {
        if (first[i] < 0) {
          EXPECT_GT(full[i], deepest) << "a point of a front it ranked was left out";
        }
      }
    }
  }
}

TEST(Pareto, CrowdingDistanceIsTheNeighboursGapOverTheRange) {
  // Sorted by the first objective: 0, 1, 3, 4 (range 4); by the second the reverse (range 4).
  const Points p = {{0, 4}, {1, 3}, {3, 1}, {4, 0}};
  const auto d = CrowdingDistances(p);
  EXPECT_TRUE(std::isinf(d[0]));
  EXPECT_TRUE(std::isinf(d[3]));
  EXPECT_DOUBLE_EQ(d[1], (3.0 - 0.0) / 4 + (4.0 - 1.0) / 4);
  EXPECT_DOUBLE_EQ(d[2], (4.0 - 1.0) / 4 + (3.0 - 0.0) / 4);
}

TEST(Pareto, TwoObjectiveHypervolumeIsTheStaircaseArea) {
  // Reference (4,4): the staircase (1,3), (2,2), (3,1) covers 3 + 2 + 1.
  EXPECT_DOUBLE_EQ(Hypervolume({{1, 3}, {2, 2}, {3, 1}}, {4, 4}), 6.0);
  EXPECT_DOUBLE_EQ(Hypervolume({{1, 3}, {2, 2}, {3, 1}, {3, 3}}, {4, 4}), 6.0)
      << "a dominated point";
  EXPECT_DOUBLE_EQ(Hypervolume({{1, 3}, {5, 0}}, {4, 4}), 3.0) << "a point beyond the reference";
  EXPECT_DOUBLE_EQ(Hypervolume({{4, 0}}, {4, 4}), 0.0) << "on the reference: nothing";
  EXPECT_DOUBLE_EQ(Hypervolume({}, {4, 4}), 0.0);
  EXPECT_DOUBLE_EQ(Hypervolume({{1}, {3}}, {4}), 3.0);
}

// The hypervolume counted cell by cell: with integer coordinates in
// [0, side), the unit cell with lower corner c is dominated when some point
// is at or below c in every objective. An independent computation of what
// Hypervolume must give.
double CountCells(const Points& points, int dims, int side) {
  std::vector<int> c(dims, 0);
  double cells = 0;
  while (true) {
    for (const auto& p : points) {
      bool covers = true;
      for (int i = 0; i < dims && covers; ++i) covers = p[i] <= c[i];
      if (covers) {
        ++cells;
        break;
      }
    }
    int i = 0;
    while (i < dims && ++c[i] == side) c[i++] = 0;
    if (i == dims) break;
  }
  return cells;
}

TEST(Pareto, HypervolumeMatchesACellCountInTwoToFourObjectives) {
  std::mt19937_64 rng(7);
  for (int dims = 2; dims <= 4; ++dims) {
    const int side = dims == 4 ? 7 : 10;
    std::uniform_int_distribution<int> coord(0, side - 1);
    for (int rep = 0; rep < 30; ++rep) {
      Points p(1 + rep % 12, ObjectivePoint(dims));
      for (auto& x : p) {
        for (double& v : x) v = coord(rng);
      }
      const ObjectivePoint reference(dims, side);
      EXPECT_DOUBLE_EQ(Hypervolume(p, reference), CountCells(p, dims, side))
          << dims << " objectives, repetition " << rep;
    }
  }
}

TEST(Pareto, ContributionsAreWhatEachPointAloneCovers) {
  const Points p = {{1, 3}, {2, 2}, {3, 1}, {3, 3}, {2, 2}};
  const auto c = HypervolumeContributions(p, {4, 4});
  EXPECT_DOUBLE_EQ(c[0], 1.0) << "(1,3): the cell [1,2)x[3,4)";
  EXPECT_DOUBLE_EQ(c[2], 1.0);
  EXPECT_DOUBLE_EQ(c[3], 0.0) << "dominated";
  EXPECT_DOUBLE_EQ(c[1], 0.0) << "a duplicate: either copy alone covers it";
  EXPECT_DOUBLE_EQ(c[4], 0.0);
  EXPECT_DOUBLE_EQ(HypervolumeContributions({{2, 2}}, {4, 4})[0], 4.0);
}

TEST(Pareto, NadirReferenceLiesBeyondEveryPoint) {
  const auto r = NadirReference({{1, -2, 0}, {3, -5, 0}});
  EXPECT_DOUBLE_EQ(r[0], 3.3);
  EXPECT_DOUBLE_EQ(r[1], -1.8);
  EXPECT_GT(r[2], 0.0);
  EXPECT_GT(Hypervolume({{1, -2, 0}}, r), 0.0);
}

TEST(Pareto, OrderIsRankThenTheLoneliestFirst) {
  // Front: (0,10), (1,9), (2,8), (10,0); (1,9) and (2,8) are interior, and
  // (2,8) has the wider gap around it. Then rank 1: (5,9).
  const Points p = {{5, 9}, {1, 9}, {0, 10}, {2, 8}, {10, 0}};
  EXPECT_EQ(ParetoOrder(p), (std::vector<size_t>{2, 4, 3, 1, 0}));
}

TEST(Pareto, GreedySubsetTakesWhatAddsTheMostVolume) {
  // Reference (10,10). (5,5) alone covers 25, more than (4,6) (24) or
  // either extreme (9 each). Beside it, (1,9), (4,6) and (9,1) each add 4
  // (the tie goes to the lower index); beside both, (9,1) adds 4, (4,6) 3.
  const Points p = {{1, 9}, {4, 6}, {5, 5}, {9, 1}};
  EXPECT_EQ(GreedyHypervolumeSubset(p, {10, 10}, 1), (std::vector<size_t>{2}));
  EXPECT_EQ(GreedyHypervolumeSubset(p, {10, 10}, 3), (std::vector<size_t>{2, 0, 3}));
  EXPECT_EQ(GreedyHypervolumeSubset(p, {10, 10}, 9).size(), 4u);
}

}  // namespace
}  // namespace hpo::search
