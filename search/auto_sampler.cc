#include "search/auto_sampler.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace hpo::search {

AutoChoice ChooseAutoSampler(const SearchSpace& space, const History& history,
                             const AutoOptions& options) {
  auto categorical = [](const Param& p) { return p.kind == ParamKind::kCategorical; };
  const bool all_categorical =
      !space.params.empty() && std::all_of(space.params.begin(), space.params.end(), categorical);
  if (all_categorical) return AutoChoice::kTpe;
  int results = 0;
  for (const Observation& t : history.trials) {
    const bool completed =
        t.status == TrialStatus::kCompleted && t.value && std::isfinite(*t.value);
    const bool pruned = t.status == TrialStatus::kPruned && !t.curve.empty();
    results += completed || pruned;
  }
  return results >= options.max_gp_results ? AutoChoice::kTpe : AutoChoice::kGp;
}

namespace {

class AutoSampler final : public Sampler {
 public:
  explicit AutoSampler(AutoOptions o)
      : options_(o), gp_(MakeGpSampler(options_.gp)), tpe_(MakeTpeSampler(options_.tpe)) {}

  std::string_view name() const override { return "auto"; }

  std::vector<Assignment> Suggest(const SearchSpace& space, const History& history, int count,
                                  Rng& rng) override {
    Sampler& chosen = ChooseAutoSampler(space, history, options_) == AutoChoice::kGp ? *gp_ : *tpe_;
    return chosen.Suggest(space, history, count, rng);
  }

 private:
  AutoOptions options_;
  std::unique_ptr<Sampler> gp_, tpe_;
};

}  // namespace

std::unique_ptr<Sampler> MakeAutoSampler(AutoOptions options) {
  return std::make_unique<AutoSampler>(options);
}

}  // namespace hpo::search
