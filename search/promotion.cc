#include "search/promotion.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

namespace hpo::search {
namespace {

// floor(n / eta) of an n that is a multiple of eta in exact arithmetic
// must not come out one short.
constexpr double kRelTolerance = 1e-12;

// x_lo + frac (x_hi - x_lo): exact at frac 0, and never NaN where a value
// is infinite (a peer that must end infeasible counts as +inf).
double Interpolate(double x_lo, double x_hi, double frac) {
  if (frac == 0 || x_hi == x_lo) return x_lo;
  return x_lo + frac * (x_hi - x_lo);
}

// Q_p of `values` (see promotion.h), sorting them. REQUIRES: values not empty.
double Quantile(std::vector<std::pair<double, int64_t>>& values, double p) {
  std::sort(values.begin(), values.end());
  const double h = static_cast<double>(values.size() - 1) * p;
  const auto lo = static_cast<size_t>(std::floor(h));
  if (lo + 1 >= values.size()) return values.back().first;
  return Interpolate(values[lo].first, values[lo + 1].first, h - static_cast<double>(lo));
}

// What a trial gives a rung of one objective: its value there, or +inf when
// it must end infeasible (behind every other).
double RankedAt(const Observation& o, double value) {
  return o.MustEndInfeasible() ? std::numeric_limits<double>::infinity() : value;
}

bool AllFinite(const std::vector<double>& point) {
  return std::all_of(point.begin(), point.end(), [](double v) { return std::isfinite(v); });
}

// How many of the n results of a rung of several objectives go on (see
// promotion.h); p is the quantile criterion's R_j / R_j+1.
size_t ParetoPromotedCount(PromotionCriterion criterion, double eta, double p, size_t n) {
  if (criterion == PromotionCriterion::kQuantile) {
    return n < 2 ? 0 : static_cast<size_t>(std::floor(static_cast<double>(n - 1) * p)) + 1;
  }
  return static_cast<size_t>(std::floor(static_cast<double>(n) / eta * (1 + kRelTolerance)));
}

// Adds what trial `o` gives the rungs of several objectives below the last
// of `rungs` (bracket `bracket`) to `add(key, number, point)`, the point
// null when it must end infeasible.
template <typename Add>
void ForEachRungPoint(const Observation& o, int bracket, const std::vector<int64_t>& rungs,
                      const Add& add) {
  for (size_t j = 0; j + 1 < rungs.size() && rungs[j] <= o.curve_values.back().first; ++j) {
    const std::vector<double>* at = o.ValuesAt(rungs[j]);
    if (!at || !AllFinite(*at)) continue;
    add(std::make_pair(bracket, static_cast<int>(j)), o.number,
        o.MustEndInfeasible() ? nullptr : at);
  }
}

// Whether paused trial `o` has a point at rung step `step` that can go on.
bool ParetoCandidate(const Observation& o, int64_t step) {
  if (o.MustEndInfeasible()) return false;
  const std::vector<double>* at = o.ValuesAt(step);
  return at && AllFinite(*at);
}

}  // namespace

std::map<int64_t, size_t> ParetoRungResults::Best(size_t count) const {
  std::map<int64_t, size_t> out;
  if (count == 0) return out;
  std::vector<ObjectivePoint> ranked;
  std::vector<int64_t> numbers;
  ranked.reserve(points.size());
  numbers.reserve(points.size());
  for (const auto& [number, point] : points) {
    numbers.push_back(number);
    ranked.push_back(point);
  }
  const std::vector<size_t> order = ParetoOrder(ranked);
  // The front: ParetoOrder puts it first, so it is the points before the
  // first one that another point dominates.
  const auto dominated = [&](size_t i) {
    return std::any_of(ranked.begin(), ranked.end(),
                       [&](const ObjectivePoint& p) { return Dominates(p, ranked[i]); });
  };
  for (size_t k = 0; k < order.size() && (k < count || !dominated(order[k])); ++k) {
    out.emplace(numbers[order[k]], k);
  }
  return out;
}

std::optional<PromotionCriterion> ParsePromotionCriterion(std::string_view name) {
  if (name == "top_fraction") return PromotionCriterion::kTopFraction;
  if (name == "quantile") return PromotionCriterion::kQuantile;
  return std::nullopt;
}

const char* PromotionCriterionName(PromotionCriterion criterion) {
  return criterion == PromotionCriterion::kQuantile ? "quantile" : "top_fraction";
}

Result<PromotionRule> PromotionRule::Asha(const AshaOptions& options, int64_t steps_per_trial,
                                          PromotionCriterion criterion) {
  AshaOptions o = options;
  if (o.max_resource == 0) o.max_resource = steps_per_trial;
  HPO_RETURN_IF_ERROR(MakeAshaPruner(o).status());  // one set of checks, one set of messages
  PromotionRule r;
  r.criterion_ = criterion;
  r.eta_ = o.reduction_factor;
  r.min_resource_ = o.min_resource;
  r.steps_ = std::min(o.max_resource, steps_per_trial);
  r.min_early_stopping_rate_ = o.min_early_stopping_rate;
  return r;
}

Result<PromotionRule> PromotionRule::Hyperband(const HyperbandOptions& options,
                                               int64_t steps_per_trial,
                                               PromotionCriterion criterion) {
  HyperbandOptions o = options;
  if (o.max_resource == 0) o.max_resource = steps_per_trial;
  HPO_RETURN_IF_ERROR(MakeHyperbandPruner(o).status());
  PromotionRule r;
  r.criterion_ = criterion;
  r.eta_ = o.reduction_factor;
  r.min_resource_ = o.min_resource;
  r.steps_ = std::min(o.max_resource, steps_per_trial);
  r.hyperband_ = true;
  r.hyperband_options_ = o;
  return r;
}

int PromotionRule::Bracket(int64_t trial_number) const {
  return hyperband_ ? HyperbandBracket(hyperband_options_, trial_number) : min_early_stopping_rate_;
}

std::vector<int64_t> PromotionRule::Rungs(int64_t trial_number) const {
  const int s = Bracket(trial_number);
  std::vector<int64_t> out;
  for (int64_t j = 0; j < kMaxRungs; ++j) {
    const auto step = RungStep(min_resource_, eta_, s + j);
    if (!step || *step >= steps_) break;
    // Distinct rungs only: a small eta with a small minimum can round two
    // exponents to one step.
    if (out.empty() || *step > out.back()) out.push_back(*step);
  }
  out.push_back(steps_);
  return out;
}

std::vector<Promotion> PromotionRule::Promotable(const History& history,
                                                 const std::vector<PausedTrial>& paused) const {
  // Placement asks this on every lease, over every trial of the experiment
  // (11% of the server's CPU at a few thousand trials under
  // bench/load), so it allocates per rung, not per trial, and finds each
  // rung's top 1/eta by selection rather than a sort.
  std::map<int, std::vector<int64_t>>
      rungs_of_bracket;  // a handful of brackets, each computed once
  auto rungs_of = [&](int bracket, int64_t number) -> const std::vector<int64_t>& {
    auto it = rungs_of_bracket.find(bracket);
    if (it == rungs_of_bracket.end()) it = rungs_of_bracket.emplace(bracket, Rungs(number)).first;
    return it->second;
  };
  const size_t n = history.trials.size();
  std::vector<int> bracket_of(n, 0);
  for (size_t i = 0; i < n; ++i) bracket_of[i] = Bracket(history.trials[i].number);
  std::vector<int> paused_level(n, -1);  // -1: not paused; the last entry for an index counts
  bool any_paused = false;
  for (const auto& p : paused) {
    if (p.index < n) {
      paused_level[p.index] = p.level;
      any_paused = true;
    }
  }
  if (!any_paused) return {};

  // (bracket, level) -> the (value, number) at that rung of the trials that
  // reached it; with several objectives, their points.
  using Key = std::pair<int, int>;
  std::map<Key, std::vector<std::pair<double, int64_t>>> reached;
  std::map<Key, ParetoRungResults> reached_points;
  for (size_t i = 0; i < n; ++i) {
    const Observation& o = history.trials[i];
    if (o.status == TrialStatus::kFailed || o.curve.empty()) continue;
    const auto& r = rungs_of(bracket_of[i], o.number);
    if (!o.curve_values.empty()) {
      ForEachRungPoint(o, bracket_of[i], r,
                       [&](const Key& key, int64_t number, const std::vector<double>* point) {
                         ParetoRungResults& rung = reached_points[key];
                         if (point) {
                           rung.points.emplace(number, *point);
                         } else {
                           ++rung.behind;
                         }
                       });
      continue;
    }
    // The value at each rung below the last: the curve's last point at or
    // before it, found in one pass (both are in step order).
    size_t c = 0;
    std::optional<double> at;
    for (size_t j = 0; j + 1 < r.size() && r[j] <= o.curve.back().first; ++j) {
      for (; c < o.curve.size() && o.curve[c].first <= r[j]; ++c) at = o.curve[c].second;
      if (!at || std::isnan(*at)) continue;
      reached[{bracket_of[i], static_cast<int>(j)}].emplace_back(RankedAt(o, *at), o.number);
    }
  }
  // Several objectives: the numbers a rung promotes, and their places,
  // found once per rung that has a paused trial.
  std::map<Key, std::map<int64_t, size_t>> pareto_best;
  auto place_of = [&](const Key& key, double p, int64_t number) -> std::optional<size_t> {
    auto b = pareto_best.find(key);
    if (b == pareto_best.end()) {
      std::map<int64_t, size_t> best;
      if (auto it = reached_points.find(key); it != reached_points.end()) {
        best = it->second.Best(ParetoPromotedCount(criterion_, eta_, p, it->second.size()));
      }
      b = pareto_best.emplace(key, std::move(best)).first;
    }
    const auto at = b->second.find(number);
    return at == b->second.end() ? std::nullopt : std::optional<size_t>(at->second);
  };
  // The (value, number) a paused trial's own must not exceed to go on,
  // found once per rung that has a paused trial. Top fraction: the best-th
  // smallest, best = floor(n / eta), found by selection. Quantile: Q_p with
  // any number, so that only the value decides.
  std::map<Key, std::optional<std::pair<double, int64_t>>> threshold;
  auto threshold_of = [&](const Key& key,
                          double p) -> const std::optional<std::pair<double, int64_t>>& {
    auto t = threshold.find(key);
    if (t != threshold.end()) return t->second;
    std::optional<std::pair<double, int64_t>> limit;
    if (auto it = reached.find(key); it != reached.end()) {
      auto& values = it->second;
      if (criterion_ == PromotionCriterion::kQuantile) {
        if (values.size() >= 2)
          limit = std::make_pair(Quantile(values, p), std::numeric_limits<int64_t>::max());
      } else {
        const size_t best = static_cast<size_t>(
            std::floor(static_cast<double>(values.size()) / eta_ * (1 + kRelTolerance)));
        if (best > 0) {
          std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(best - 1),
                           values.end());
          limit = values[best - 1];
        }
      }
    }
    return threshold.emplace(key, limit).first->second;
  };

  std::vector<Promotion> out;
  for (size_t index = 0; index < n; ++index) {
    const int level = paused_level[index];
    if (level < 0) continue;
    const Observation& o = history.trials[index];
    const auto& r = rungs_of(bracket_of[index], o.number);
    if (static_cast<size_t>(level) + 1 >= r.size()) continue;  // nothing above it
    const double ratio = static_cast<double>(r[level]) / static_cast<double>(r[level + 1]);
    double value = 0;
    if (!o.curve_values.empty()) {
      if (!ParetoCandidate(o, r[level])) continue;
      const auto place = place_of({bracket_of[index], level}, ratio, o.number);
      if (!place) continue;
      value = static_cast<double>(*place);
    } else {
      const auto v = o.ValueAt(r[level]);
      if (!v || std::isnan(*v) || o.MustEndInfeasible()) continue;
      const auto& limit = threshold_of({bracket_of[index], level}, ratio);
      if (!limit || std::make_pair(*v, o.number) > *limit) continue;
      value = *v;
    }
    Promotion p;
    p.index = index;
    p.from_level = level;
    p.from_step = r[level];
    p.to_step = r[level + 1];
    p.to_end = static_cast<size_t>(level) + 2 == r.size();
    p.value = value;
    out.push_back(p);
  }
  std::sort(out.begin(), out.end(), [](const Promotion& a, const Promotion& b) {
    if (a.from_level != b.from_level) return a.from_level > b.from_level;
    if (a.value != b.value) return a.value < b.value;
    return a.index < b.index;
  });
  return out;
}

RungResults::RungResults(const PromotionRule& rule) : rule_(rule), eta_(rule.eta()) {}

void RungResults::Clear() {
  spaces_.clear();
  steps_of_bracket_.clear();
}

const std::vector<int64_t>& RungResults::StepsOf(int bracket, int64_t number) {
  auto it = steps_of_bracket_.find(bracket);
  if (it == steps_of_bracket_.end())
    it = steps_of_bracket_.emplace(bracket, rule_.Rungs(number)).first;
  return it->second;
}

RungResults::Rung& RungResults::RungAt(Space& space, const RungKey& key) {
  auto it = space.rungs.find(key);
  if (it == space.rungs.end()) {
    Rung r;
    r.steps = steps_of_bracket_.at(key.first);
    r.level = key.second;
    r.p = static_cast<double>(r.steps[key.second]) / static_cast<double>(r.steps[key.second + 1]);
    it = space.rungs.emplace(key, std::move(r)).first;
  }
  return it->second;
}

// How many of a rung's n results the threshold's side holds: top fraction,
// the best floor(n / eta) (its limit the worst of them); quantile, the
// order statistics up to x_floor(h) (its limit between the worst of them
// and the best of the rest).
size_t RungResults::BestCount(const Rung& rung, size_t n) const {
  if (n == 0) return 0;
  if (rule_.criterion() == PromotionCriterion::kQuantile) {
    const double h = static_cast<double>(n - 1) * rung.p;
    return static_cast<size_t>(std::floor(h)) + 1;
  }
  return static_cast<size_t>(std::floor(static_cast<double>(n) / eta_ * (1 + kRelTolerance)));
}

void RungResults::Rebalance(Rung& rung) const {
  const size_t k = BestCount(rung, rung.best.size() + rung.rest.size());
  while (rung.best.size() > k) {
    rung.rest.insert(rung.best.extract(std::prev(rung.best.end())));
  }
  while (rung.best.size() < k && !rung.rest.empty()) {
    rung.best.insert(rung.rest.extract(rung.rest.begin()));
  }
}

void RungResults::Insert(Rung& rung, const Result& r) const {
  if (!rung.best.empty() && r < *rung.best.rbegin()) {
    rung.best.insert(r);
  } else {
    rung.rest.insert(r);
  }
  Rebalance(rung);
}

void RungResults::Erase(Rung& rung, const Result& r) const {
  if (rung.best.erase(r) == 0) rung.rest.erase(r);
  Rebalance(rung);
}

size_t RungResults::ParetoCount(const Rung& rung) const {
  return ParetoPromotedCount(rule_.criterion(), eta_, rung.p, rung.pareto.size());
}

std::optional<RungResults::Result> RungResults::Limit(const Rung& rung) const {
  if (rung.best.empty()) return std::nullopt;
  if (rule_.criterion() == PromotionCriterion::kTopFraction) return *rung.best.rbegin();
  // Quantile's Q_p, computed as Quantile() computes it.
  const size_t n = rung.best.size() + rung.rest.size();
  if (n < 2) return std::nullopt;
  const double h = static_cast<double>(n - 1) * rung.p;
  const auto lo = static_cast<size_t>(std::floor(h));
  const double x_lo = rung.best.rbegin()->first;
  const double q = rung.rest.empty()
                       ? x_lo
                       : Interpolate(x_lo, rung.rest.begin()->first, h - static_cast<double>(lo));
  return Result{q, std::numeric_limits<int64_t>::max()};
}

void RungResults::Set(size_t space, size_t index, const Observation& o,
                      std::optional<int> paused_level) {
  if (spaces_.size() <= space) spaces_.resize(space + 1);
  Space& sp = spaces_[space];
  if (sp.trials.size() <= index) sp.trials.resize(index + 1);
  // What it gives now, as Promotable reads it.
  Kept now;
  const int bracket = rule_.Bracket(o.number);
  const std::vector<int64_t>& r = StepsOf(bracket, o.number);
  const bool several = !o.curve_values.empty();
  if (o.status != TrialStatus::kFailed && !o.curve.empty()) {
    if (several) {
      ForEachRungPoint(
          o, bracket, r, [&](const RungKey& key, int64_t number, const std::vector<double>* point) {
            now.reached_points.push_back(
                {key, {number, point ? std::optional<ObjectivePoint>(*point) : std::nullopt}});
          });
    } else {
      size_t c = 0;
      std::optional<double> at;
      for (size_t j = 0; j + 1 < r.size() && r[j] <= o.curve.back().first; ++j) {
        for (; c < o.curve.size() && o.curve[c].first <= r[j]; ++c) at = o.curve[c].second;
        if (!at || std::isnan(*at)) continue;
        now.reached.push_back({{bracket, static_cast<int>(j)}, {RankedAt(o, *at), o.number}});
      }
    }
  }
  if (paused_level && *paused_level >= 0 && static_cast<size_t>(*paused_level) + 1 < r.size()) {
    const RungKey key{bracket, *paused_level};
    if (several) {
      if (ParetoCandidate(o, r[*paused_level])) now.paused = {key, {0.0, o.number, index}};
    } else if (const auto v = o.ValueAt(r[*paused_level]);
               v && !std::isnan(*v) && !o.MustEndInfeasible()) {
      now.paused = {key, {*v, o.number, index}};
    }
  }
  std::optional<Kept>& kept = sp.trials[index];
  if (kept && *kept == now) return;
  if (kept) {
    for (const auto& [key, result] : kept->reached) Erase(RungAt(sp, key), result);
    for (const auto& [key, at] : kept->reached_points) {
      Rung& rung = RungAt(sp, key);
      if (at.second) {
        rung.pareto.points.erase(at.first);
      } else {
        --rung.pareto.behind;
      }
      rung.pareto_best.reset();
    }
    if (kept->paused) {
      RungAt(sp, kept->paused->first).paused.erase(kept->paused->second);
    }
  }
  for (const auto& [key, result] : now.reached) Insert(RungAt(sp, key), result);
  for (const auto& [key, at] : now.reached_points) {
    Rung& rung = RungAt(sp, key);
    if (at.second) {
      rung.pareto.points.emplace(at.first, *at.second);
    } else {
      ++rung.pareto.behind;
    }
    rung.pareto_best.reset();
  }
  if (now.paused) {
    RungAt(sp, now.paused->first).paused.insert(now.paused->second);
  }
  kept = std::move(now);
}

std::vector<Promotion> RungResults::Promotable(size_t space, size_t per_rung) {
  std::vector<Promotion> out;
  if (space >= spaces_.size()) return out;
  for (auto& entry : spaces_[space].rungs) {
    Rung& rung = entry.second;  // named, not a structured binding: the lambda below takes it
    if (rung.paused.empty()) continue;
    size_t listed = 0;
    // Lists the rung's promotable paused trials, best first.
    const auto list = [&](double value, size_t index) {
      if (listed == per_rung) {
        ++out.back().more;
        return;
      }
      ++listed;
      Promotion p;
      p.index = index;
      p.from_level = rung.level;
      p.from_step = rung.steps[rung.level];
      p.to_step = rung.steps[rung.level + 1];
      p.to_end = static_cast<size_t>(rung.level) + 2 == rung.steps.size();
      p.value = value;
      out.push_back(p);
    };
    if (rung.pareto.size() > 0) {
      if (!rung.pareto_best) rung.pareto_best = rung.pareto.Best(ParetoCount(rung));
      std::vector<std::tuple<size_t, int64_t, size_t>> going;  // (place, number, index)
      for (const auto& [value, number, index] : rung.paused) {
        if (const auto it = rung.pareto_best->find(number); it != rung.pareto_best->end())
          going.emplace_back(it->second, number, index);
      }
      std::sort(going.begin(), going.end());
      for (const auto& [place, number, index] : going) list(static_cast<double>(place), index);
      continue;
    }
    const auto limit = Limit(rung);
    if (!limit) continue;
    for (const auto& [value, number, index] : rung.paused) {
      if (Result{value, number} > *limit) break;
      list(value, index);
    }
  }
  std::sort(out.begin(), out.end(), [](const Promotion& a, const Promotion& b) {
    if (a.from_level != b.from_level) return a.from_level > b.from_level;
    if (a.value != b.value) return a.value < b.value;
    return a.index < b.index;
  });
  return out;
}

int64_t TrialsToReachLastRung(const PromotionRule& rule, double eta, int64_t limit) {
  // Per rung list (bracket): how many trials it needs at its first rung, and
  // how many of the numbers so far it has.
  std::map<std::vector<int64_t>, std::pair<int64_t, int64_t>> brackets;
  for (int64_t n = 0; n < limit; ++n) {
    std::vector<int64_t> rungs = rule.Rungs(n);
    auto it = brackets.find(rungs);
    if (it == brackets.end()) {
      int64_t need = 1;
      // The small tolerance keeps eta * m that is an integer in exact
      // arithmetic (eta = 3, m = 3) from rounding up to the next one.
      for (size_t j = 1; j < rungs.size() && need <= limit; ++j) {
        need = static_cast<int64_t>(std::ceil(eta * static_cast<double>(need) - 1e-9));
      }
      it = brackets.emplace(std::move(rungs), std::make_pair(need, int64_t{0})).first;
    }
    if (++it->second.second >= it->second.first) return n + 1;
  }
  return limit + 1;
}

}  // namespace hpo::search
