#include "search/ranking.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

namespace hpo::search {
namespace {

double NormalPdf(double z) { return 0.3989422804014327 * std::exp(-0.5 * z * z); }
double NormalCdf(double z) { return 0.5 * std::erfc(-z / 1.4142135623730951); }

// The standard deviation of min(y*) over every bootstrap resample y* of n
// results (n draws with replacement), exactly: P(min(y*) >= y(j)) =
// ((n-j+1)/n)^n, 1-based. `smallest` holds the first order statistics, at
// most kRankingOrderStatistics of them (the weight past those is below what
// a double holds next to the rest, search/ranking.h).
// REQUIRES: `smallest` ascending and not empty, n >= smallest.size().
double BootstrapMinStdDev(const std::vector<double>& smallest, int64_t n) {
  const double dn = static_cast<double>(n);
  const size_t m = std::min(smallest.size(), kRankingOrderStatistics);
  // at_least(j) = P(min(y*) >= y(j+1)), 0-based j.
  auto at_least = [&](size_t j) {
    return j >= static_cast<size_t>(n) ? 0.0
                                       : std::exp(dn * std::log1p(-static_cast<double>(j) / dn));
  };
  double p[kRankingOrderStatistics];
  size_t used = 0;
  double at_least_j = at_least(0);
  for (size_t j = 0; j < m; ++j) {
    const double at_least_next = at_least(j + 1);
    const double pj = at_least_j - at_least_next;
    if (pj <= 0 && j > 0) break;  // the rest is below what a double holds
    p[used++] = pj;
    at_least_j = at_least_next;
  }
  double mean = 0, mass = 0;
  for (size_t j = 0; j < used; ++j) {
    mean += p[j] * smallest[j];
    mass += p[j];
  }
  mean /= mass;
  double var = 0;
  for (size_t j = 0; j < used; ++j) var += p[j] * (smallest[j] - mean) * (smallest[j] - mean);
  return std::sqrt(std::max(0.0, var / mass));
}

}  // namespace

double RankedValue(const Observation& t) {
  std::optional<double> v;
  if (t.status == TrialStatus::kCompleted) v = t.value;
  if (t.status == TrialStatus::kPruned && !t.curve.empty()) v = t.curve.back().second;
  return v && std::isfinite(*v) ? *v : std::numeric_limits<double>::quiet_NaN();
}

std::vector<SpaceRank> RankSpaces(const std::vector<SearchSpace>& spaces,
                                  const std::vector<History>& histories, const RankingOptions& o) {
  std::vector<std::vector<double>> ranked(histories.size());
  for (size_t s = 0; s < histories.size(); ++s) {
    for (const Observation& t : histories[s].trials) {
      const double v = RankedValue(t);
      if (!std::isnan(v)) ranked[s].push_back(v);
    }
  }
  return RankSpaces(spaces, ranked, o);
}

std::vector<SpaceRank> RankSpaces(const std::vector<SearchSpace>& spaces,
                                  const std::vector<std::vector<double>>& ranked_values,
                                  const RankingOptions& o) {
  std::vector<SpaceResults> results(ranked_values.size());
  for (size_t s = 0; s < ranked_values.size(); ++s) {
    std::vector<double> y;
    y.reserve(ranked_values[s].size());
    for (const double v : ranked_values[s]) {
      if (!std::isnan(v)) y.push_back(v);
    }
    SpaceResults& r = results[s];
    r.count = static_cast<int64_t>(y.size());
    if (y.empty()) continue;
    r.largest = *std::max_element(y.begin(), y.end());
    const auto kept =
        y.begin() + static_cast<std::ptrdiff_t>(std::min(y.size(), kRankingOrderStatistics));
    std::nth_element(y.begin(), kept, y.end());
    std::sort(y.begin(), kept);
    r.smallest.assign(y.begin(), kept);
  }
  return RankSpaces(spaces, results, o);
}

bool RankedResults::Set(size_t space, size_t index, double value) {
  if (values_.size() <= space) {
    values_.resize(space + 1);
    ordered_.resize(space + 1);
  }
  std::vector<double>& values = values_[space];
  if (values.size() <= index) values.resize(index + 1, std::numeric_limits<double>::quiet_NaN());
  double& was = values[index];
  if (std::isnan(value) ? std::isnan(was) : value == was) return false;
  std::multiset<double>& ordered = ordered_[space];
  if (!std::isnan(was)) ordered.erase(ordered.find(was));
  if (!std::isnan(value)) ordered.insert(value);
  was = value;
  return true;
}

std::vector<SpaceResults> RankedResults::Results(size_t spaces) const {
  std::vector<SpaceResults> out(std::max(spaces, ordered_.size()));
  for (size_t s = 0; s < ordered_.size(); ++s) {
    const std::multiset<double>& ordered = ordered_[s];
    out[s].count = static_cast<int64_t>(ordered.size());
    if (ordered.empty()) continue;
    out[s].largest = *ordered.rbegin();
    for (auto it = ordered.begin();
         it != ordered.end() && out[s].smallest.size() < kRankingOrderStatistics; ++it) {
      out[s].smallest.push_back(*it);
    }
  }
  return out;
}

void RankedResults::Clear() {
  values_.clear();
  ordered_.clear();
}

std::vector<SpaceRank> RankSpaces(const std::vector<SearchSpace>& spaces,
                                  const std::vector<SpaceResults>& results,
                                  const RankingOptions& o) {
  const size_t k = spaces.size();
  std::vector<SpaceRank> out(k);
  double max_bits = 0;
  for (size_t s = 0; s < k; ++s) {
    out[s].complexity_bits = spaces[s].ComplexityBits();
    max_bits = std::max(max_bits, out[s].complexity_bits);
  }
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (size_t s = 0; s < k; ++s) {
    out[s].complexity = max_bits > 0 ? out[s].complexity_bits / max_bits : 0;
    out[s].results = static_cast<int>(results[s].count);
    if (results[s].count == 0) continue;
    lo = std::min(lo, results[s].smallest.front());
    hi = std::max(hi, results[s].largest);
  }
  // Spreads below 1% of the overall range are noise, not certainty.
  const double floor_u = std::isfinite(hi - lo) && hi > lo ? 0.01 * (hi - lo) : 1e-9;

  double global_best = std::numeric_limits<double>::infinity();
  for (size_t s = 0; s < k; ++s) {
    if (out[s].results < o.min_results) continue;
    out[s].best = results[s].smallest.front();
    global_best = std::min(global_best, out[s].best);
    out[s].uncertainty =
        std::max(BootstrapMinStdDev(results[s].smallest, results[s].count), floor_u);
  }

  double max_priority = 0;
  for (size_t s = 0; s < k; ++s) {
    if (out[s].results < o.min_results) continue;
    const double sd = out[s].uncertainty * (1 + out[s].complexity);
    const double z = (global_best - out[s].best) / sd;
    out[s].priority = std::max(sd * (z * NormalCdf(z) + NormalPdf(z)), 1e-12);
    max_priority = std::max(max_priority, out[s].priority);
  }
  for (size_t s = 0; s < k; ++s) {
    if (out[s].results < o.min_results) out[s].priority = max_priority > 0 ? max_priority : 1;
  }

  double total = 0;
  for (const auto& r : out) total += r.priority;
  const double floor = std::clamp(o.min_share_fraction, 0.0, 1.0) / k;
  for (auto& r : out) r.share = floor + (1 - k * floor) * r.priority / total;
  return out;
}

int PickSpace(const std::vector<SpaceRank>& ranks, const std::vector<int>& trials_so_far) {
  int total = 1;
  for (int n : trials_so_far) total += n;
  int best = 0;
  double best_deficit = -std::numeric_limits<double>::infinity();
  for (size_t s = 0; s < ranks.size(); ++s) {
    const double deficit = ranks[s].share * total - trials_so_far[s];
    if (deficit > best_deficit) {
      best_deficit = deficit;
      best = static_cast<int>(s);
    }
  }
  return best;
}

}  // namespace hpo::search
