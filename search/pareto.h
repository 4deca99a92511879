// Pareto order over several objectives, all minimized (see Minimized in
// history.h): dominance, non-dominated sorting, crowding distance and
// hypervolume. What the multi-objective samplers, early stopping and the
// front a user reads are built on.
//
// Pure and deterministic. Sizes: non-dominated sorting is O(M N^2) (Deb's
// fast sort); the hypervolume is exact, by a sweep for two objectives
// (O(N log N)) and by the WFG algorithm (While, Bradstreet and Barone, 2012)
// for more, whose cost grows quickly with the number of objectives: meant
// for the few hundred points of one rung or one front, and M <= 4.
#pragma once

#include <cstddef>
#include <vector>

namespace hpo::search {

// One trial's objective values, minimized, in the spec's objective order.
using ObjectivePoint = std::vector<double>;

// `a` dominates `b`: no worse in every objective, better in at least one.
// Points of different sizes never dominate each other.
bool Dominates(const ObjectivePoint& a, const ObjectivePoint& b);

// Each point's non-domination rank: 0 for the points no other dominates
// (the front), 1 for the front of the rest, and so on. Equal points share a
// rank.
std::vector<int> NonDominatedRanks(const std::vector<ObjectivePoint>& points);

// NonDominatedRanks for the first fronts only: ranks 0, 1, ... for the
// points of the fronts that together hold at least `needed` points, -1 for
// the rest. What choosing the best few of many needs: O(N F) per front
// (points in lexicographic order can only be dominated by earlier ones),
// where the full sort is O(N^2).
std::vector<int> FirstFronts(const std::vector<ObjectivePoint>& points, size_t needed);

// The crowding distance of each point of one set (NSGA-II's): over every
// objective, the gap between its sorted neighbours divided by the
// objective's range; the extremes of any objective are infinite. A larger
// distance is a lonelier point, the one that keeps a front spread.
std::vector<double> CrowdingDistances(const std::vector<ObjectivePoint>& points);

// The volume dominated by `points` and bounded by `reference`, which should
// be worse than every point in every objective: a point not strictly better
// than the reference in every objective adds nothing.
double Hypervolume(const std::vector<ObjectivePoint>& points, const ObjectivePoint& reference);

// Each point's exclusive share of the hypervolume: what the volume loses
// without it (0 for a dominated point or a duplicate).
std::vector<double> HypervolumeContributions(const std::vector<ObjectivePoint>& points,
                                             const ObjectivePoint& reference);

// A reference point for sets with no fixed one (Optuna's choice): per
// objective, the worst value moved 10% of its magnitude further (1e-12
// where the worst is 0), so that every point counts.
ObjectivePoint NadirReference(const std::vector<ObjectivePoint>& points);

// Indices of `points`, best first: by non-domination rank, then by crowding
// distance within the rank (lonelier first), then by index. The order
// "keep the top k" means for several objectives.
std::vector<size_t> ParetoOrder(const std::vector<ObjectivePoint>& points);

// `k` indices of `points` chosen greedily to maximize the hypervolume they
// dominate with `reference` (the hypervolume subset selection Optuna's
// MOTPE uses for the rank that does not fit): each step takes the point
// adding the most, ties to the lower index. All of them when k >= size.
std::vector<size_t> GreedyHypervolumeSubset(const std::vector<ObjectivePoint>& points,
                                            const ObjectivePoint& reference, size_t k);

}  // namespace hpo::search
