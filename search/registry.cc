#include "search/registry.h"

#include <cmath>
#include <functional>
#include <utility>

#include "search/auto_sampler.h"

namespace hpo::search {
namespace {

struct Entry {
  std::string name;
  std::function<std::unique_ptr<Sampler>(const SamplerContext&)> make;
};

const std::vector<Entry>& Entries() {
  static const std::vector<Entry> kEntries = {
      {"auto",
       [](const SamplerContext& c) {
         AutoOptions o;
         o.gp = c.gp;
         o.tpe = c.tpe;
         return MakeAutoSampler(o);
       }},
      {"tpe", [](const SamplerContext& c) { return MakeTpeSampler(c.tpe); }},
      {"gp", [](const SamplerContext& c) { return MakeGpSampler(c.gp); }},
      {"random", [](const SamplerContext&) { return MakeRandomSampler(); }},
  };
  return kEntries;
}

const Entry* Find(std::string_view name) {
  for (const Entry& e : Entries()) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

Status Unknown(std::string_view name, std::string_view field) {
  std::string names;
  for (const Entry& e : Entries()) names += (names.empty() ? "" : ", ") + e.name;
  return Status::InvalidArgument(std::string(field) + ": must be one of " + names + ", not '" +
                                 std::string(name) + "'");
}

}  // namespace

const std::vector<std::string>& SamplerNames() {
  static const std::vector<std::string> kNames = [] {
    std::vector<std::string> out;
    for (const Entry& e : Entries()) out.push_back(e.name);
    return out;
  }();
  return kNames;
}

Status CheckSamplerName(std::string_view name, std::string_view field) {
  return Find(name) ? Status::OK() : Unknown(name, field);
}

Result<std::unique_ptr<Sampler>> MakeSampler(std::string_view name, const SamplerContext& context,
                                             std::string_view field) {
  const Entry* e = Find(name);
  if (!e) return Unknown(name, field);
  return e->make(context);
}

const std::vector<StoppingRule>& StoppingRules() {
  static const std::vector<StoppingRule> kRules = {
      {"none", {}, false},
      {"median", {"startup_trials", "warmup_steps", "interval_steps", "min_trials_at_step"}, false},
      {"asha",
       {"min_resource", "reduction_factor", "max_resource", "min_early_stopping_rate",
        "bootstrap_count"},
       true},
      {"hyperband", {"min_resource", "max_resource", "reduction_factor"}, true},
  };
  return kRules;
}

Result<const StoppingRule*> FindStoppingRule(std::string_view name, std::string_view field) {
  const auto& rules = StoppingRules();
  for (const StoppingRule& r : rules) {
    if (r.name == name) return &r;
  }
  std::string names;
  for (size_t i = 0; i < rules.size(); ++i) {
    names += (i == 0 ? "" : i + 1 == rules.size() ? " or " : ", ") + rules[i].name;
  }
  return Status::InvalidArgument(std::string(field) + ": must be " + names + ", not '" +
                                 std::string(name) + "'");
}

namespace {

// The options of rule `r`, each read once: Take(name, fallback).
class Options {
 public:
  Options(const StoppingRule& rule, const StoppingOptions& given, int64_t steps_per_trial)
      : rule_(rule), given_(given), steps_(steps_per_trial) {}

  Status Check() const {
    for (const auto& [name, value] : given_) {
      bool known = false;
      for (const auto& o : rule_.options) known = known || o == name;
      if (!known) {
        return Status::InvalidArgument("early_stopping." + name + ": not an option of rule '" +
                                       rule_.name + "'");
      }
    }
    return Status::OK();
  }
  double Take(const std::string& name, double fallback) const {
    const auto it = given_.find(name);
    return it == given_.end() ? fallback : it->second;
  }
  int64_t Int(const std::string& name, int64_t fallback) const {
    return static_cast<int64_t>(Take(name, static_cast<double>(fallback)));
  }
  AshaOptions Asha() const {
    AshaOptions a;
    a.min_resource = Int("min_resource", a.min_resource);
    a.reduction_factor = Take("reduction_factor", a.reduction_factor);
    a.max_resource = Int("max_resource", steps_);
    a.min_early_stopping_rate =
        static_cast<int>(Int("min_early_stopping_rate", a.min_early_stopping_rate));
    a.bootstrap_count = static_cast<int>(Int("bootstrap_count", a.bootstrap_count));
    return a;
  }
  HyperbandOptions Hyperband() const {
    HyperbandOptions h;
    h.min_resource = Int("min_resource", h.min_resource);
    h.max_resource = Int("max_resource", steps_);
    h.reduction_factor = Take("reduction_factor", h.reduction_factor);
    return h;
  }
  MedianOptions Median() const {
    MedianOptions m;
    m.startup_trials = static_cast<int>(Int("startup_trials", m.startup_trials));
    m.warmup_steps = Int("warmup_steps", m.warmup_steps);
    m.interval_steps = Int("interval_steps", m.interval_steps);
    m.min_trials_at_step = static_cast<int>(Int("min_trials_at_step", m.min_trials_at_step));
    return m;
  }

 private:
  const StoppingRule& rule_;
  const StoppingOptions& given_;
  int64_t steps_;
};

}  // namespace

Result<std::unique_ptr<Pruner>> MakeStoppingPruner(std::string_view name,
                                                   const StoppingOptions& options,
                                                   int64_t steps_per_trial) {
  HPO_ASSIGN_OR_RETURN(const StoppingRule* rule, FindStoppingRule(name));
  const Options o(*rule, options, steps_per_trial);
  HPO_RETURN_IF_ERROR(o.Check());
  if (rule->name == "median") return MakeMedianPruner(o.Median());
  if (rule->name == "asha") return MakeAshaPruner(o.Asha());
  if (rule->name == "hyperband") return MakeHyperbandPruner(o.Hyperband());
  return MakeNopPruner();
}

Result<PromotionRule> MakePromotionRule(std::string_view name, const StoppingOptions& options,
                                        int64_t steps_per_trial, PromotionCriterion criterion) {
  HPO_ASSIGN_OR_RETURN(const StoppingRule* rule, FindStoppingRule(name));
  if (!rule->rungs) {
    return Status::InvalidArgument(
        "early_stopping.type: promotion needs rule asha or hyperband, not '" + rule->name + "'");
  }
  const Options o(*rule, options, steps_per_trial);
  HPO_RETURN_IF_ERROR(o.Check());
  if (rule->name == "hyperband")
    return PromotionRule::Hyperband(o.Hyperband(), steps_per_trial, criterion);
  return PromotionRule::Asha(o.Asha(), steps_per_trial, criterion);
}

}  // namespace hpo::search
