#include "search/tpe.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "search/numeric.h"
#include "search/pareto.h"

namespace hpo::search {
namespace {

constexpr double kSqrt2 = 1.4142135623730951;
constexpr double kLogSqrt2Pi = 0.91893853320467274;

double NormalCdf(double z) { return 0.5 * std::erfc(-z / kSqrt2); }

// log(e^a + e^b), either of them -infinity.
double LogAddExp(double a, double b) {
  const double hi = std::max(a, b);
  if (hi == -std::numeric_limits<double>::infinity()) return hi;
  return hi + std::log(std::exp(a - hi) + std::exp(b - hi));
}

// A Parzen mixture: one kernel per observation plus a uniform prior
// component. Kernels are stored parameter-major (all kernels' values of one
// parameter side by side), since a suggestion scores every candidate against
// every kernel and the loop over kernels then vectorizes: a kernel that lacks
// a parameter is stored so that it adds the prior's log density there (0 for
// a number in the unit cube, -log k for a categorical) without a branch.
class Mixture {
 public:
  // `prior_weight` of the uniform component (0: none); `fixed_sigma` > 0
  // gives every number's kernel that width instead of the neighbour rule.
  Mixture(const SearchSpace& space, const std::vector<const Assignment*>& points,
          const std::vector<double>& weights, const TpeOptions& o, double prior_weight,
          double fixed_sigma = 0)
      : space_(space), d_(space.params.size()), n_(points.size()), fixed_sigma_(fixed_sigma) {
    double total = prior_weight;
    for (double w : weights) total += w;
    total_weight_ = total;
    prior_log_weight_ = prior_weight > 0 ? std::log(prior_weight / total)
                                         : -std::numeric_limits<double>::infinity();
    log_weight_.resize(n_);
    cumulative_.resize(n_);
    double acc = prior_weight / total;
    for (size_t k = 0; k < n_; ++k) {
      log_weight_[k] = std::log(weights[k] / total);
      acc += weights[k] / total;
      cumulative_[k] = acc;
    }
    double active = 0;
    for (const Assignment* a : points) {
      for (double v : *a) active += !IsInactive(v);
    }
    mean_active_params_ = n_ ? active / n_ : 0;
    // Zeros are what a kernel lacking a number adds: nothing.
    table_.assign(3 * n_ * d_, 0.0);
    center_ = table_.data();
    log_norm_ = center_ + n_ * d_;
    inv2s2_ = log_norm_ + n_ * d_;
    categorical_.resize(d_);
    log_uniform_.resize(d_);
    std::vector<std::pair<double, size_t>> numbers;  // (unit value, kernel)
    for (size_t i = 0; i < d_; ++i) {
      const Param& p = space.params[i];
      categorical_[i] = p.kind == ParamKind::kCategorical;
      if (categorical_[i]) {
        // log_norm_ holds log P(observed choice), inv2s2_ log P(any other),
        // both the uniform where the kernel lacks the parameter (center -1).
        const int n = p.num_choices();
        log_uniform_[i] = -std::log(n);
        for (size_t k = 0; k < n_; ++k) {
          const double v = (*points[k])[i];
          const bool has = !IsInactive(v);
          center_[i * n_ + k] = has ? v : -1;
          log_norm_[i * n_ + k] = has ? std::log(CategoricalProb(n, true)) : log_uniform_[i];
          inv2s2_[i * n_ + k] = has ? std::log(CategoricalProb(n, false)) : log_uniform_[i];
        }
      } else {
        numbers.clear();
        for (size_t k = 0; k < n_; ++k) {
          const double v = (*points[k])[i];
          if (!IsInactive(v)) numbers.emplace_back(p.ToUnit(v), k);
        }
        SetKernels(i, &numbers, o);
      }
    }
  }
  Mixture(const Mixture&) = delete;
  double total_weight() const { return total_weight_; }
  Mixture& operator=(const Mixture&) = delete;

  // Draws one assignment: pick a component, then each active param from it
  // (or from the prior where the component lacks that param).
  Assignment Sample(Rng& rng) const {
    const std::optional<size_t> k = PickComponent(rng);
    Assignment a(d_, kInactive);
    for (int i = 0; i < space_.size(); ++i) {
      if (!space_.IsActive(i, a)) continue;
      const Param& p = space_.params[i];
      const size_t at = k ? i * n_ + *k : 0;
      if (!k || !Has(i, *k)) {
        a[i] = p.FromUnit(rng.Uniform());
      } else if (categorical_[i]) {
        a[i] = SampleCategorical(p, static_cast<int>(IndexIn(center_[at], p.num_choices())), rng);
      } else {
        const double sigma = std::sqrt(0.5 / inv2s2_[at]);
        double u = -1;
        for (int tries = 0; tries < 64 && (u < 0 || u > 1); ++tries) {
          u = center_[at] + sigma * rng.Normal();
        }
        a[i] = p.FromUnit(std::clamp(u, 0.0, 1.0));
      }
    }
    return a;
  }

  // log of kernel k's weighted density at `a` (its term of LogDensity).
  double LogKernelDensity(size_t k, const Assignment& a) const {
    double lp = log_weight_[k];
    for (size_t i = 0; i < d_; ++i) {
      if (IsInactive(a[i])) continue;
      const size_t at = i * n_ + k;
      if (categorical_[i]) {
        lp += center_[at] == a[i] ? log_norm_[at] : inv2s2_[at];
      } else {
        const double dx = space_.params[i].ToUnit(a[i]) - center_[at];
        lp += log_norm_[at] - dx * dx * inv2s2_[at];
      }
    }
    return lp;
  }

  // log density of `a` under the mixture.
  double LogDensity(const Assignment& a) const {
    // Prior: uniform over the unit cube, 1/k per categorical.
    double prior = prior_log_weight_;
    lp_.assign(log_weight_.begin(), log_weight_.end());
    double* lp = lp_.data();
    for (size_t i = 0; i < d_; ++i) {
      if (IsInactive(a[i])) continue;
      const double* center = &center_[i * n_];
      const double* log_norm = &log_norm_[i * n_];
      const double* inv2s2 = &inv2s2_[i * n_];
      if (categorical_[i]) {
        prior += log_uniform_[i];
        const double x = a[i];
        for (size_t k = 0; k < n_; ++k) lp[k] += center[k] == x ? log_norm[k] : inv2s2[k];
      } else {
        const double x = space_.params[i].ToUnit(a[i]);
        for (size_t k = 0; k < n_; ++k) {
          const double dx = x - center[k];
          lp[k] += log_norm[k] - dx * dx * inv2s2[k];
        }
      }
    }
    double best = prior;
    for (size_t k = 0; k < n_; ++k) best = std::max(best, lp[k]);
    // Terms below e^-40 of the largest (which is 1) change the sum by less
    // than 1e-14 for any realistic number of kernels; skipping them skips
    // most calls to exp.
    double sum = prior - best > -40 ? std::exp(prior - best) : 0;
    for (size_t k = 0; k < n_; ++k) {
      if (lp[k] - best > -40) sum += std::exp(lp[k] - best);
    }
    return best + std::log(sum);
  }

 private:
  // A kernel keeps half its mass on the observed choice and spreads the
  // rest evenly, so unseen choices stay reachable.
  static double CategoricalProb(int n, bool same) { return same ? 0.5 + 0.5 / n : 0.5 / n; }

  static double SampleCategorical(const Param& p, int observed, Rng& rng) {
    const int n = p.num_choices();
    double u = rng.Uniform();
    for (int c = 0; c < n; ++c) {
      u -= CategoricalProb(n, c == observed);
      if (u < 0) return c;
    }
    return n - 1;
  }

  // The chosen kernel, or nothing for the prior.
  std::optional<size_t> PickComponent(Rng& rng) const {
    const double u = rng.Uniform();
    if (n_ == 0 || u < std::exp(prior_log_weight_)) return std::nullopt;
    return std::min<size_t>(
        n_ - 1, std::upper_bound(cumulative_.begin(), cumulative_.end(), u) - cumulative_.begin());
  }

  // Whether kernel k has param i (an active number always has inv2s2 > 0).
  bool Has(size_t i, size_t k) const {
    return categorical_[i] ? center_[i * n_ + k] >= 0 : inv2s2_[i * n_ + k] > 0;
  }

  // The kernels of number i, at `numbers` (unit value, kernel), sorted here.
  // Bandwidths: kNeighbor (Optuna's univariate rule, used per dimension of
  // the joint kernel): the larger gap to the neighbouring observations,
  // clipped to [1 / min(100, n + 1), 1] ("magic clip"), so kernels narrow
  // where good points cluster. kScott: one width for all, f * n^(-1/(d+4)),
  // d = the params an observation has on average.
  void SetKernels(size_t i, std::vector<std::pair<double, size_t>>* numbers, const TpeOptions& o) {
    auto& pos = *numbers;
    if (pos.empty()) return;
    SortUnitValues(&pos);
    const size_t n = pos.size();
    std::vector<double> sig(n);
    if (fixed_sigma_ > 0) {
      std::fill(sig.begin(), sig.end(), fixed_sigma_);
    } else if (o.bandwidth == TpeOptions::Bandwidth::kScott) {
      const double d = std::max(1.0, mean_active_params_);
      std::fill(sig.begin(), sig.end(),
                std::max(o.min_bandwidth,
                         o.bandwidth_factor * std::pow(static_cast<double>(n), -1.0 / (d + 4))));
    } else {
      const double lo = 1.0 / std::min(100.0, n + 1.0);
      for (size_t j = 0; j < n; ++j) {
        const double left = j > 0 ? pos[j].first - pos[j - 1].first : 0;
        const double right = j + 1 < n ? pos[j + 1].first - pos[j].first : 0;
        sig[j] =
            std::clamp(n == 1 ? 1.0 : std::max(left, right), std::max(lo, o.min_bandwidth), 1.0);
      }
    }
    double last_sigma = -1, log_sigma = 0;
    for (size_t j = 0; j < n; ++j) {
      const size_t at = i * n_ + pos[j].second;
      const double mu = pos[j].first, sigma = sig[j];
      if (sigma != last_sigma) {  // many kernels share the clipped width
        last_sigma = sigma;
        log_sigma = std::log(sigma);
      }
      // Mass inside [0, 1]; 1 to double precision when the kernel sits
      // more than 8 sigma from both ends, the common case.
      double log_z = 0;
      if (mu < 8 * sigma || 1 - mu < 8 * sigma) {
        log_z = std::log(std::max(NormalCdf((1 - mu) / sigma) - NormalCdf(-mu / sigma), 1e-300));
      }
      center_[at] = mu;
      inv2s2_[at] = 1 / (2 * sigma * sigma);
      log_norm_[at] = -log_sigma - kLogSqrt2Pi - log_z;
    }
  }

  // Sorts (unit value, kernel) pairs: values lie in [0, 1], so a bucket
  // per value and an insertion sort within buckets take linear time (this
  // runs for every number of every mixture, on every suggestion).
  static void SortUnitValues(std::vector<std::pair<double, size_t>>* v) {
    const size_t n = v->size();
    if (n < 64) {
      std::sort(v->begin(), v->end());
      return;
    }
    std::vector<uint32_t> start(n + 1, 0);
    auto bucket = [n](double u) {
      return std::min(n - 1, static_cast<size_t>(std::max(u, 0.0) * n));
    };
    for (const auto& p : *v) ++start[bucket(p.first) + 1];
    for (size_t b = 0; b < n; ++b) start[b + 1] += start[b];
    std::vector<std::pair<double, size_t>> out(n);
    std::vector<uint32_t> fill(start.begin(), start.end() - 1);
    for (const auto& p : *v) out[fill[bucket(p.first)]++] = p;
    for (size_t b = 0; b < n; ++b) {
      if (start[b + 1] - start[b] > 1)
        std::sort(out.begin() + start[b], out.begin() + start[b + 1]);
    }
    *v = std::move(out);
  }

  const SearchSpace& space_;
  size_t d_, n_;
  double fixed_sigma_ = 0;
  double total_weight_ = 0;
  double prior_log_weight_ = 0;
  double mean_active_params_ = 0;  // per observation
  // Three d_ x n_ tables, parameter-major, in one allocation: what
  // LogDensity adds per kernel and param (see the constructor for
  // categoricals). A number's kernel is N(center, sigma^2) truncated to
  // [0, 1], with inv2s2 = 1 / (2 sigma^2) and log_norm its log normalizer.
  std::vector<double> table_;
  double* center_;
  double* log_norm_;
  double* inv2s2_;
  std::vector<double> log_weight_, cumulative_;  // per kernel
  std::vector<char> categorical_;                // per param
  std::vector<double> log_uniform_;
  mutable std::vector<double> lp_;
};

// Optuna's default weights: the 25 newest observations weigh 1, older ones
// ramp down linearly, so a long history does not freeze the model.
std::vector<double> RecencyWeights(size_t n) {
  std::vector<double> w(n, 1.0);
  if (n <= 25) return w;
  const size_t ramp = n - 25;
  for (size_t i = 0; i < ramp; ++i) {
    w[i] = 1.0 / n + (1.0 - 1.0 / n) * (ramp == 1 ? 0.0 : static_cast<double>(i) / (ramp - 1));
  }
  return w;
}

struct Ranked {
  int tier;
  double neg_steps, value;
  int64_t number;
  const Assignment* params;
  const std::vector<double>* values;  // tier 0: every objective (several), else empty
};

bool Better(const Ranked& x, const Ranked& y) {
  return std::tie(x.tier, x.neg_steps, x.value, x.number) <
         std::tie(y.tier, y.neg_steps, y.value, y.number);
}

bool IsMultiObjective(const std::vector<Ranked>& ranked) {
  return std::any_of(ranked.begin(), ranked.end(),
                     [](const Ranked& r) { return r.values && r.values->size() >= 2; });
}

// The good set with several objectives (MOTPE, as Optuna 3.1's TPE has it):
// the feasible completed trials' non-domination ranks fill it front by
// front; the front that does not fit gives the places left to its members
// that add the most hypervolume (greedily); places still left go to the
// rest in tier order. Each good trial's kernel weighs its share of the good
// set's hypervolume (its exclusive contribution over the largest, with the
// reference past the good set's worst values), so that a trial the others
// nearly cover counts little; a good trial from a later tier, and any with
// no contribution, weighs 1% of the largest.
void ChooseGoodByPareto(const std::vector<Ranked>& ranked, size_t n_good,
                        std::vector<char>& is_good, std::vector<double>& weight) {
  constexpr double kFloor = 0.01;
  std::vector<size_t> feasible;
  std::vector<ObjectivePoint> points;
  size_t dims = 0;
  for (const Ranked& r : ranked) {
    if (r.values) dims = std::max(dims, r.values->size());
  }
  for (size_t i = 0; i < ranked.size(); ++i) {
    if (ranked[i].tier == 0 && ranked[i].values && ranked[i].values->size() == dims &&
        std::all_of(ranked[i].values->begin(), ranked[i].values->end(),
                    [](double v) { return std::isfinite(v); })) {
      feasible.push_back(i);
      points.push_back(*ranked[i].values);
    }
  }
  const std::vector<int> rank = FirstFronts(points, n_good);
  std::vector<size_t> chosen;  // indices into `points`
  for (int r = 0; chosen.size() < n_good; ++r) {
    std::vector<size_t> front;
    for (size_t k = 0; k < points.size(); ++k) {
      if (rank[k] == r) front.push_back(k);
    }
    if (front.empty()) break;  // every point ranked
    if (chosen.size() + front.size() <= n_good) {
      chosen.insert(chosen.end(), front.begin(), front.end());
      continue;
    }
    std::vector<ObjectivePoint> front_points;
    front_points.reserve(front.size());
    for (size_t k : front) front_points.push_back(points[k]);
    for (size_t pick : GreedyHypervolumeSubset(front_points, NadirReference(front_points),
                                               n_good - chosen.size())) {
      chosen.push_back(front[pick]);
    }
  }
  std::vector<ObjectivePoint> good_points;
  good_points.reserve(chosen.size());
  for (size_t k : chosen) good_points.push_back(points[k]);
  std::vector<double> share =
      good_points.size() > 1 ? HypervolumeContributions(good_points, NadirReference(good_points))
                             : std::vector<double>(good_points.size(), 1.0);
  const double top = share.empty() ? 0 : *std::max_element(share.begin(), share.end());
  for (size_t c = 0; c < chosen.size(); ++c) {
    const size_t i = feasible[chosen[c]];
    is_good[i] = 1;
    weight[i] = top > 0 ? std::max(share[c] / top, kFloor) : 1.0;
  }
  if (chosen.size() < n_good) {
    std::vector<uint32_t> rest;
    for (size_t i = 0; i < ranked.size(); ++i) {
      if (!is_good[i]) rest.push_back(static_cast<uint32_t>(i));
    }
    const size_t more = std::min(n_good - chosen.size(), rest.size());
    std::partial_sort(rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(more), rest.end(),
                      [&](uint32_t a, uint32_t b) { return Better(ranked[a], ranked[b]); });
    for (size_t k = 0; k < more; ++k) {
      is_good[rest[k]] = 1;
      weight[rest[k]] = kFloor;
    }
  }
}

class TpeSampler final : public Sampler {
 public:
  explicit TpeSampler(TpeOptions o) : o_(o) {}
  std::string_view name() const override { return "tpe"; }

  std::vector<Assignment> Suggest(const SearchSpace& space, const History& history, int count,
                                  Rng& rng) override {
    // Ranked results: (tier, -steps, value, number) ascending = better first.
    // Tier 0: completed and feasible; 1: completed but outside a
    // constraint, by how far (Optuna's order for constraints); 2: pruned, by
    // how far it got and its value there.
    std::vector<Ranked> ranked;
    std::vector<const Observation*> running;
    ranked.reserve(history.trials.size());
    for (const Observation& t : history.trials) {
      if (t.params.size() != space.params.size()) continue;
      if (t.status == TrialStatus::kCompleted && t.value && std::isfinite(*t.value)) {
        if (t.Feasible()) {
          ranked.push_back({0, 0, *t.value, t.number, &t.params, &t.values});
        } else {
          ranked.push_back({1, 0, *t.violation, t.number, &t.params, nullptr});
        }
      } else if (t.status == TrialStatus::kPruned && !t.curve.empty() &&
                 std::isfinite(t.curve.back().second)) {
        ranked.push_back({2, -static_cast<double>(t.curve.back().first), t.curve.back().second,
                          t.number, &t.params, nullptr});
      } else if (t.status == TrialStatus::kRunning) {
        running.push_back(&t);
      }
    }
    // Trial order, so that recency weights apply to the right observations
    // (a history usually comes in this order already).
    auto by_number = [](const Ranked& a, const Ranked& b) { return a.number < b.number; };
    if (!std::is_sorted(ranked.begin(), ranked.end(), by_number)) {
      std::sort(ranked.begin(), ranked.end(), by_number);
    }
    // Which are good: the n_good best, found by selection rather than a sort
    // (this runs on every suggestion, over the whole history).
    const size_t n = ranked.size();
    const size_t n_good = static_cast<size_t>(std::clamp<int64_t>(
        RoundToInt64(std::ceil(o_.gamma_fraction * static_cast<double>(n))), 1, o_.gamma_cap));
    std::vector<char> is_good(n, 0);
    std::vector<double> good_weight(n, 0.0);  // several objectives: the good set's weights
    const bool several = IsMultiObjective(ranked);
    if (n >= static_cast<size_t>(o_.startup_trials)) {
      if (several) {
        ChooseGoodByPareto(ranked, n_good, is_good, good_weight);
      } else {
        std::vector<uint32_t> order(n);
        std::iota(order.begin(), order.end(), 0u);
        std::nth_element(order.begin(), order.begin() + (n_good - 1), order.end(),
                         [&](uint32_t a, uint32_t b) { return Better(ranked[a], ranked[b]); });
        for (size_t i = 0; i < n_good; ++i) is_good[order[i]] = 1;
      }
    }
    std::vector<const Assignment*> good_pts, bad_pts;
    std::vector<double> good_weights;
    for (size_t i = 0; i < n; ++i) {
      (is_good[i] ? good_pts : bad_pts).push_back(ranked[i].params);
      if (is_good[i]) good_weights.push_back(good_weight[i]);
    }
    // g(x) from the newest max_bad_observations results only: older ones
    // weigh little under the recency weights, and scoring against thousands
    // of kernels would make a suggestion cost tens of milliseconds.
    if (bad_pts.size() > static_cast<size_t>(o_.max_bad_observations)) {
      bad_pts.erase(bad_pts.begin(), bad_pts.end() - o_.max_bad_observations);
    }
    // The lies (running trials, then this call's own suggestions) have a cap
    // of their own: under one shared cap a large fleet's running trials
    // pushed every real bad result out, and g(x) was made of lies only.
    std::vector<const Assignment*> lies;
    if (o_.constant_liar) {
      std::stable_sort(
          running.begin(), running.end(),
          [](const Observation* a, const Observation* b) { return a->number < b->number; });
      for (auto* t : running) lies.push_back(&t->params);
    }

    std::vector<Assignment> out;
    if (n < static_cast<size_t>(o_.startup_trials)) {
      for (int s = 0; s < count; ++s) out.push_back(SampleUniform(space, rng));
      return out;
    }
    const Mixture l(space, good_pts, several ? good_weights : RecencyWeights(good_pts.size()), o_,
                    o_.prior_weight);
    // The constant liar: running trials and this call's earlier suggestions
    // count as bad, so that a batch spreads out; with thousands of running
    // trials (a large fleet) the newest are kept, max_lies lies in all.
    // g(x) is built once per call from the results and the running trials;
    // the batch's own suggestions form a second mixture beside it, kernels
    // as wide as the first one's narrowest clip, weight 1 each (the weight
    // of the newest observations), so that a batch costs one model.
    const int batch_lies = o_.constant_liar ? count - 1 : 0;
    const size_t max_running_lies = static_cast<size_t>(std::max(o_.max_lies - batch_lies, 0));
    if (lies.size() > max_running_lies) lies.erase(lies.begin(), lies.end() - max_running_lies);
    std::vector<const Assignment*> bad = bad_pts;
    bad.insert(bad.end(), lies.begin(), lies.end());
    const Mixture g(space, bad, RecencyWeights(bad.size()), o_, o_.prior_weight);
    const double batch_sigma =
        std::max(1.0 / std::min(100.0, static_cast<double>(bad.size() + count)), o_.min_bandwidth);
    out.reserve(count);
    // A batch shares one pool of candidates, `candidates` per suggestion for
    // up to three suggestions: g(x) is scored once per candidate, and each
    // suggestion takes the best unused one under its own lies. (So a batch
    // of 16 costs about 3.5 suggestions, and each of its suggestions still
    // chooses from three times as many candidates as a single one.)
    const int pool_size = o_.candidates * std::clamp(count, 1, 3);
    std::vector<Assignment> pool;
    std::vector<double> log_l, log_g;  // log l(x); log of g's weighted density
    pool.reserve(pool_size);
    for (int c = 0; c < pool_size; ++c) {
      pool.push_back(l.Sample(rng));
      log_l.push_back(l.LogDensity(pool.back()));
      log_g.push_back(std::log(g.total_weight()) + g.LogDensity(pool.back()));
    }
    std::vector<char> used(pool_size, 0);
    // The batch's own suggestions add one kernel each to g at every
    // candidate (same fixed width, weight 1: see above), kept in log_g
    // itself; a kernel below e^-40 of what is there changes nothing and is
    // skipped, which with widths near 1/100 is almost every candidate, so a
    // batch of 16 costs little more than scoring its pool once. (The
    // normalizer, g's total weight plus the kernels, is the same for every
    // candidate of a round and is left out of the comparison.)
    for (int s = 0; s < count; ++s) {
      int best = -1;
      double best_score = -std::numeric_limits<double>::infinity();
      for (int c = 0; c < pool_size; ++c) {
        if (used[c]) continue;
        const double score = log_l[c] - log_g[c];
        if (score > best_score || best < 0) {
          best_score = score;
          best = c;
        }
      }
      if (best < 0) {  // more suggestions than candidates: draw afresh
        out.push_back(l.Sample(rng));
      } else {
        used[best] = 1;
        out.push_back(pool[best]);
      }
      if (!o_.constant_liar || s + 1 == count) continue;
      const Mixture kernel(space, {&out.back()}, {1.0}, o_, 0.0, batch_sigma);
      for (int c = 0; c < pool_size; ++c) {
        if (used[c]) continue;
        const double k = kernel.LogKernelDensity(0, pool[c]);
        if (k > log_g[c] - 40) log_g[c] = LogAddExp(log_g[c], k);
      }
    }
    return out;
  }

 private:
  TpeOptions o_;
};

}  // namespace

std::unique_ptr<Sampler> MakeTpeSampler(TpeOptions options) {
  return std::make_unique<TpeSampler>(options);
}

}  // namespace hpo::search
