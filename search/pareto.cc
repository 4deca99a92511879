#include "search/pareto.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace hpo::search {
namespace {

using Points = std::vector<ObjectivePoint>;

bool StrictlyBelow(const ObjectivePoint& p, const ObjectivePoint& reference) {
  for (size_t i = 0; i < p.size(); ++i) {
    if (!(p[i] < reference[i])) return false;  // NaN counts as not below
  }
  return true;
}

// Two objectives: the union of horizontal slabs, swept by the first.
double Hypervolume2(Points points, const ObjectivePoint& reference) {
  std::sort(points.begin(), points.end());
  double volume = 0, level = reference[1];
  for (const auto& p : points) {
    if (p[1] >= level) continue;  // dominated by an earlier point
    volume += (reference[0] - p[0]) * (level - p[1]);
    level = p[1];
  }
  return volume;
}

// The points no other dominates, duplicates kept once.
Points NonDominated(Points points) {
  std::sort(points.begin(), points.end());
  points.erase(std::unique(points.begin(), points.end()), points.end());
  Points out;
  out.reserve(points.size());
  for (size_t i = 0; i < points.size(); ++i) {
    bool dominated = false;
    for (size_t j = 0; j < points.size() && !dominated; ++j) {
      dominated = j != i && Dominates(points[j], points[i]);
    }
    if (!dominated) out.push_back(points[i]);
  }
  return out;
}

double BoxVolume(const ObjectivePoint& p, const ObjectivePoint& reference) {
  double v = 1;
  for (size_t i = 0; i < p.size(); ++i) v *= reference[i] - p[i];
  return v;
}

// WFG: the sum of each point's volume exclusive of the points after it,
// that is its box less the volume of the later points clipped to its box
// (the "limit set"), recursively. Every point strictly below the reference.
double Wfg(Points points, const ObjectivePoint& reference) {
  if (points.empty()) return 0;
  if (reference.size() == 2) return Hypervolume2(std::move(points), reference);
  // Sorting by the first objective keeps the limit sets small.
  std::sort(points.begin(), points.end());
  double volume = 0;
  for (size_t k = 0; k < points.size(); ++k) {
    Points limit;
    limit.reserve(points.size() - k - 1);
    for (size_t j = k + 1; j < points.size(); ++j) {
      ObjectivePoint worse(points[k].size());
      for (size_t i = 0; i < worse.size(); ++i) worse[i] = std::max(points[k][i], points[j][i]);
      limit.push_back(std::move(worse));
    }
    volume += BoxVolume(points[k], reference) - Wfg(NonDominated(std::move(limit)), reference);
  }
  return volume;
}

}  // namespace

bool Dominates(const ObjectivePoint& a, const ObjectivePoint& b) {
  if (a.size() != b.size() || a.empty()) return false;
  bool better = false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] > b[i]) return false;
    better = better || a[i] < b[i];
  }
  return better;
}

std::vector<int> NonDominatedRanks(const std::vector<ObjectivePoint>& points) {
  const size_t n = points.size();
  std::vector<int> rank(n, 0), dominated_by(n, 0);
  std::vector<std::vector<size_t>> dominates(n);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = i + 1; j < n; ++j) {
      if (Dominates(points[i], points[j])) {
        dominates[i].push_back(j);
        ++dominated_by[j];
      } else if (Dominates(points[j], points[i])) {
        dominates[j].push_back(i);
        ++dominated_by[i];
      }
    }
  }
  std::vector<size_t> front;
  for (size_t i = 0; i < n; ++i) {
    if (dominated_by[i] == 0) front.push_back(i);
  }
  for (int r = 0; !front.empty(); ++r) {
    std::vector<size_t> next;
    for (size_t i : front) {
      rank[i] = r;
      for (size_t j : dominates[i]) {
        if (--dominated_by[j] == 0) next.push_back(j);
      }
    }
    front = std::move(next);
  }
  return rank;
}

std::vector<int> FirstFronts(const std::vector<ObjectivePoint>& points, size_t needed) {
  std::vector<int> rank(points.size(), -1);
  std::vector<size_t> remaining(points.size());
  std::iota(remaining.begin(), remaining.end(), size_t{0});
  std::stable_sort(remaining.begin(), remaining.end(),
                   [&](size_t a, size_t b) { return points[a] < points[b]; });
  size_t ranked = 0;
  for (int r = 0; ranked < needed && !remaining.empty(); ++r) {
    // In lexicographic order a point is on this front unless a point
    // already on it dominates it (whatever dominates it comes earlier, and
    // is on the front or dominated by a point that is).
    std::vector<size_t> front, rest;
    for (size_t i : remaining) {
      const bool dominated = std::any_of(front.begin(), front.end(),
                                         [&](size_t f) { return Dominates(points[f], points[i]); });
      (dominated ? rest : front).push_back(i);
    }
    for (size_t i : front) rank[i] = r;
    ranked += front.size();
    remaining = std::move(rest);
  }
  return rank;
}

std::vector<double> CrowdingDistances(const std::vector<ObjectivePoint>& points) {
  const size_t n = points.size();
  std::vector<double> distance(n, 0.0);
  if (n == 0) return distance;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<size_t> order(n);
  for (size_t m = 0; m < points[0].size(); ++m) {
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return points[a][m] < points[b][m]; });
    distance[order.front()] = distance[order.back()] = kInf;
    const double range = points[order.back()][m] - points[order.front()][m];
    if (!(range > 0)) continue;
    for (size_t k = 1; k + 1 < n; ++k) {
      distance[order[k]] += (points[order[k + 1]][m] - points[order[k - 1]][m]) / range;
    }
  }
  return distance;
}

double Hypervolume(const std::vector<ObjectivePoint>& points, const ObjectivePoint& reference) {
  Points inside;
  for (const auto& p : points) {
    if (p.size() == reference.size() && StrictlyBelow(p, reference)) inside.push_back(p);
  }
  if (inside.empty()) return 0;
  if (reference.size() == 1) {
    double best = reference[0];
    for (const auto& p : inside) best = std::min(best, p[0]);
    return reference[0] - best;
  }
  return Wfg(NonDominated(std::move(inside)), reference);
}

std::vector<double> HypervolumeContributions(const std::vector<ObjectivePoint>& points,
                                             const ObjectivePoint& reference) {
  const double total = Hypervolume(points, reference);
  std::vector<double> out(points.size(), 0.0);
  Points others;
  for (size_t i = 0; i < points.size(); ++i) {
    others.assign(points.begin(), points.end());
    others.erase(others.begin() + static_cast<std::ptrdiff_t>(i));
    out[i] = std::max(0.0, total - Hypervolume(others, reference));
  }
  return out;
}

ObjectivePoint NadirReference(const std::vector<ObjectivePoint>& points) {
  if (points.empty()) return {};
  ObjectivePoint worst = points[0];
  for (const auto& p : points) {
    for (size_t i = 0; i < worst.size() && i < p.size(); ++i) worst[i] = std::max(worst[i], p[i]);
  }
  for (double& w : worst) w = w == 0 ? 1e-12 : w + 0.1 * std::abs(w);
  return worst;
}

std::vector<size_t> ParetoOrder(const std::vector<ObjectivePoint>& points) {
  const std::vector<int> rank = NonDominatedRanks(points);
  std::vector<double> crowding(points.size(), 0.0);
  const int ranks = rank.empty() ? 0 : *std::max_element(rank.begin(), rank.end()) + 1;
  for (int r = 0; r < ranks; ++r) {
    std::vector<size_t> members;
    Points front;
    for (size_t i = 0; i < points.size(); ++i) {
      if (rank[i] == r) {
        members.push_back(i);
        front.push_back(points[i]);
      }
    }
    const std::vector<double> d = CrowdingDistances(front);
    for (size_t k = 0; k < members.size(); ++k) crowding[members[k]] = d[k];
  }
  std::vector<size_t> order(points.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (rank[a] != rank[b]) return rank[a] < rank[b];
    if (crowding[a] != crowding[b]) return crowding[a] > crowding[b];
    return a < b;
  });
  return order;
}

std::vector<size_t> GreedyHypervolumeSubset(const std::vector<ObjectivePoint>& points,
                                            const ObjectivePoint& reference, size_t k) {
  std::vector<size_t> chosen;
  if (k >= points.size()) {
    chosen.resize(points.size());
    std::iota(chosen.begin(), chosen.end(), size_t{0});
    return chosen;
  }
  std::vector<char> taken(points.size(), 0);
  Points selected;
  double volume = 0;
  while (chosen.size() < k) {
    size_t best = points.size();
    double best_gain = -1;
    for (size_t i = 0; i < points.size(); ++i) {
      if (taken[i]) continue;
      selected.push_back(points[i]);
      const double gain = Hypervolume(selected, reference) - volume;
      selected.pop_back();
      if (gain > best_gain) {
        best_gain = gain;
        best = i;
      }
    }
    taken[best] = 1;
    chosen.push_back(best);
    selected.push_back(points[best]);
    volume += std::max(best_gain, 0.0);
  }
  return chosen;
}

}  // namespace hpo::search
