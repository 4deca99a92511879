#include "search/promotion.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace hpo::search {
namespace {

// floor(n / eta) of an n that is a multiple of eta in exact arithmetic
// must not come out one short.
constexpr double kRelTolerance = 1e-12;

}  // namespace

Result<PromotionRule> PromotionRule::Asha(const AshaOptions& options, int64_t steps_per_trial) {
  AshaOptions o = options;
  if (o.max_resource == 0) o.max_resource = steps_per_trial;
  HPO_RETURN_IF_ERROR(MakeAshaPruner(o).status());  // one set of checks, one set of messages
  PromotionRule r;
  r.eta_ = o.reduction_factor;
  r.min_resource_ = o.min_resource;
  r.steps_ = std::min(o.max_resource, steps_per_trial);
  r.min_early_stopping_rate_ = o.min_early_stopping_rate;
  return r;
}

Result<PromotionRule> PromotionRule::Hyperband(const HyperbandOptions& options, int64_t steps_per_trial) {
  HyperbandOptions o = options;
  if (o.max_resource == 0) o.max_resource = steps_per_trial;
  HPO_RETURN_IF_ERROR(MakeHyperbandPruner(o).status());
  PromotionRule r;
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
  // Rungs by bracket, computed once each.
  std::map<int, std::vector<int64_t>> rungs_of_bracket;
  auto rungs_of = [&](const Observation& o) -> const std::vector<int64_t>& {
    const int b = Bracket(o.number);
    auto it = rungs_of_bracket.find(b);
    if (it == rungs_of_bracket.end()) it = rungs_of_bracket.emplace(b, Rungs(o.number)).first;
    return it->second;
  };
  std::map<size_t, int> paused_level;
  for (const auto& p : paused) paused_level[p.index] = p.level;

  std::vector<Promotion> out;
  // (bracket, level) -> the values at that rung of the trials that reached it.
  std::map<std::pair<int, int>, std::vector<std::pair<double, int64_t>>> reached;
  for (size_t i = 0; i < history.trials.size(); ++i) {
    const Observation& o = history.trials[i];
    if (o.status == TrialStatus::kFailed || o.curve.empty()) continue;
    const auto& r = rungs_of(o);
    const auto last = *o.LastStep();
    for (size_t j = 0; j + 1 < r.size() && r[j] <= last; ++j) {
      const auto v = o.ValueAt(r[j]);
      if (!v || std::isnan(*v)) continue;
      reached[{Bracket(o.number), static_cast<int>(j)}].emplace_back(*v, o.number);
    }
  }
  for (auto& [key, values] : reached) std::sort(values.begin(), values.end());
  for (const auto& [index, level] : paused_level) {
    if (index >= history.trials.size()) continue;
    const Observation& o = history.trials[index];
    const auto& r = rungs_of(o);
    if (level < 0 || static_cast<size_t>(level) + 1 >= r.size()) continue;  // nothing above it
    const auto it = reached.find({Bracket(o.number), level});
    if (it == reached.end()) continue;
    const auto v = o.ValueAt(r[level]);
    if (!v || std::isnan(*v)) continue;
    const auto& values = it->second;
    const size_t best = static_cast<size_t>(std::floor(static_cast<double>(values.size()) / eta_ * (1 + kRelTolerance)));
    // Its place among the values at the rung: sorted by (value, number).
    const auto place = std::lower_bound(values.begin(), values.end(), std::make_pair(*v, o.number)) - values.begin();
    if (static_cast<size_t>(place) >= best) continue;
    Promotion p;
    p.index = index;
    p.from_level = level;
    p.from_step = r[level];
    p.to_step = r[level + 1];
    p.to_end = static_cast<size_t>(level) + 2 == r.size();
    p.value = *v;
    out.push_back(p);
  }
  std::sort(out.begin(), out.end(), [](const Promotion& a, const Promotion& b) {
    if (a.from_level != b.from_level) return a.from_level > b.from_level;
    if (a.value != b.value) return a.value < b.value;
    return a.index < b.index;
  });
  return out;
}

}  // namespace hpo::search
