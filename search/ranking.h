// Space ranking (SHADHO's idea, with the uncertainty taken from the data):
// which of an experiment's search spaces deserve the next trials.
//
// For each space s, from its results y (minimized): the final values of its
// completed trials and the last reported values of its pruned ones. Under
// early stopping most trials are pruned; without their partial results a
// space with few completions counted as unexplored and took the top
// priority whatever its pruned trials showed. (A pruned trial's last value
// is from an earlier step than a completed one's, so it is, if anything,
// pessimistic: that trial was stopped for looking worse.)
//   complexity   c_s = bits_s / max_t bits_t, bits = SearchSpace::ComplexityBits
//                (log2 of the number of configurations; a continuous param
//                counts as 10 bits)
//   best         m_s = min y
//   uncertainty  u_s = the standard deviation of min(y*) over the bootstrap
//                resamples y* of y (how unsettled the space's best still
//                is), floored at 1% of the spread of all values. It is
//                computed exactly, not by drawing resamples: with y sorted,
//                y(1) <= ... <= y(n), min(y*) >= y(j) exactly when all n
//                draws fall on y(j..n), so P(min(y*) = y(j)) =
//                ((n-j+1)/n)^n - ((n-j)/n)^n. Only the 64 smallest carry
//                weight a double can hold (kRankingOrderStatistics), so
//                that is O(n) from the results and O(1) from the smallest
//                kept in order, where 200 drawn resamples cost 200 n draws
//                (about 20 ms at 10,000 trials, on every lease),
//                and it has no sampling noise.
//   reach        sd_s = u_s * (1 + c_s): a larger space has more room left
//                to improve than its resamples show
//   priority     p_s = EI(m_s, sd_s; m*) = sd_s * (z Phi(z) + phi(z)),
//                z = (m* - m_s) / sd_s, m* = the best value of all spaces:
//                the expected improvement on the overall best if the
//                space's best were N(m_s, sd_s^2)
//   share        f_s = floor + (1 - k floor) p_s / sum_t p_t, with
//                floor = min_share_fraction / k for k spaces, so no space
//                starves
// A space with fewer than `min_results` results is unexplored: it gets the
// largest priority among the explored ones (or 1 when none is explored),
// so every space is tried before any is judged.
//
// Pure and deterministic: a function of the histories alone.
#pragma once

#include <cstdint>
#include <set>
#include <vector>

#include "search/history.h"
#include "search/space.h"

namespace hpo::search {

struct RankingOptions {
  int min_results = 3;
  double min_share_fraction = 0.2;  // of the budget, split evenly, that every space keeps
};

struct SpaceRank {
  double complexity = 0;  // c_s in [0, 1]
  double complexity_bits = 0;
  int results = 0;         // completed trials with a value, and pruned ones with a curve
  double best = 0;         // m_s (meaningless when results == 0)
  double uncertainty = 0;  // u_s
  double priority = 0;     // p_s
  double share = 0;        // f_s; the shares add up to 1
};

// REQUIRES: spaces.size() == histories.size() and not empty.
std::vector<SpaceRank> RankSpaces(const std::vector<SearchSpace>& spaces,
                                  const std::vector<History>& histories,
                                  const RankingOptions& options = {});

// What a trial gives the ranking: a completed trial's value, a pruned one's
// last reported value; NaN when it gives nothing (running, failed, no
// value, or not finite).
double RankedValue(const Observation& trial);
// The same ranking from each space's RankedValue per trial (NaN entries
// count for nothing), for a caller that keeps those values and updates
// only the trials that changed: the ranking reads every trial, and at
// thousands of trials a lease that ranked from the histories spent a tenth
// of the server's CPU there.
// REQUIRES: spaces.size() == ranked_values.size() and not empty.
std::vector<SpaceRank> RankSpaces(const std::vector<SearchSpace>& spaces,
                                  const std::vector<std::vector<double>>& ranked_values,
                                  const RankingOptions& options = {});

// All the ranking reads of a space's results. Past the
// kRankingOrderStatistics smallest, what is left of the bootstrap's weight,
// P(min(y*) >= y(65)) = (1 - 64/n)^n, is below e^-64 (1.6e-28) of it: no
// double holds that next to the rest. So a caller that keeps its results
// in order (server/engine/trial_view.h) hands over only those, and a
// ranking costs the same at 100 results as at 100,000 (at
// 16 workers, ranking from every result was 8% of the server's CPU).
inline constexpr size_t kRankingOrderStatistics = 64;
struct SpaceResults {
  int64_t count = 0;             // results (NaN ones excluded)
  std::vector<double> smallest;  // ascending: the min(count, kRankingOrderStatistics) smallest
  double largest = 0;            // meaningless when count == 0
};
// REQUIRES: spaces.size() == results.size() and not empty; each `smallest`
// as said above.
std::vector<SpaceRank> RankSpaces(const std::vector<SearchSpace>& spaces,
                                  const std::vector<SpaceResults>& results,
                                  const RankingOptions& options = {});

// The ranking's inputs kept as trials change, for a caller that ranks on
// every lease (the engine's trial view, the fleet simulator): each trial's
// RankedValue and each space's values in order, so that a change costs
// O(log n) and Results() reads only the kRankingOrderStatistics smallest.
// RankSpaces(spaces, Results()) is RankSpaces(spaces, histories) once every
// trial of the histories was Set with its RankedValue.
class RankedResults {
 public:
  // Sets what trial `index` of space `space` gives the ranking (NaN:
  // nothing); returns whether that changed.
  bool Set(size_t space, size_t index, double ranked_value);
  // Per space, up to the largest space Set so far (at least `spaces`).
  std::vector<SpaceResults> Results(size_t spaces) const;
  void Clear();

 private:
  std::vector<std::vector<double>> values_;     // per space and trial; NaN: nothing
  std::vector<std::multiset<double>> ordered_;  // per space: its values but NaN
};

// The space the next trial should come from: the one furthest below its
// share, given how many trials each space has had (lowest index on ties).
int PickSpace(const std::vector<SpaceRank>& ranks, const std::vector<int>& trials_so_far);

// Whether a space with this share, `in_space` of the experiment's `total`
// trials, is still below its share after one more trial of its own: the
// bound that keeps the split between spaces the ranking's when something
// other than PickSpace (placement, scheduler/offer.h) chooses the space.
inline bool BelowShareAfterOneMore(double share, int64_t total, int64_t in_space) {
  return share * static_cast<double>(total + 1) - static_cast<double>(in_space) > 0;
}

}  // namespace hpo::search
