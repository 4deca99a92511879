// The one registry of sampler names and early-stopping rules: what
// `algorithm.sampler` and `early_stopping.rule` in a spec may say, and the
// factories that make each. The spec parser (server/spec/spec.cc)
// checks names against it and the engine (server/engine/engine.cc) builds samplers
// from it, so a name the spec accepts is always a sampler the engine has,
// and an unknown name is an error naming the field, never a silent default.
//
// Samplers: "auto" (the default; search/auto_sampler.h states its rule),
// "tpe" (search/tpe.h), "gp" (search/gp_sampler.h), "random".
// Early-stopping rules (search/pruner.h, search/promotion.h): "none",
// "median", "asha", "hyperband"; the spec parser checks a rule's options
// against StoppingRule::options, and the engine and the fleet simulator
// (scheduler/simulator.h) make its pruner or promotion rule here.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "search/gp_sampler.h"
#include "search/promotion.h"
#include "search/pruner.h"
#include "search/sampler.h"
#include "search/tpe.h"

namespace hpo::search {

// What a factory may use besides the name; the defaults are the product's.
// Benchmarks change the options to compare variants.
struct SamplerContext {
  GpOptions gp;
  TpeOptions tpe;
};

inline constexpr std::string_view kDefaultSampler = "auto";

// Every registered name, in the order error messages list them.
const std::vector<std::string>& SamplerNames();

// OK if `name` is registered; otherwise InvalidArgument
// "<field>: must be one of auto, tpe, gp, random, not '<name>'".
Status CheckSamplerName(std::string_view name, std::string_view field);

// The sampler registered as `name`; the same InvalidArgument as
// CheckSamplerName for an unknown one.
Result<std::unique_ptr<Sampler>> MakeSampler(std::string_view name,
                                             const SamplerContext& context = {},
                                             std::string_view field = "algorithm.sampler");

// An early-stopping rule's numeric options by name (min_resource, ...); an
// option left out takes the rule's default (max_resource: the trial's
// steps).
using StoppingOptions = std::map<std::string, double>;

struct StoppingRule {
  std::string name;
  std::vector<std::string> options;  // the numeric options it reads, in the order errors list them
  bool rungs = false;                // asha, hyperband: promotion-type and migration apply
};

// Every registered rule, in the order error messages list them.
const std::vector<StoppingRule>& StoppingRules();

// The rule registered as `name`; InvalidArgument
// "<field>: must be none, median, asha or hyperband, not '<name>'" for an
// unknown one.
Result<const StoppingRule*> FindStoppingRule(std::string_view name,
                                             std::string_view field = "early_stopping.rule");

// The stopping-type pruner of rule `name` (none: one that stops nothing);
// the rule's own errors, or InvalidArgument for an option it does not read.
Result<std::unique_ptr<Pruner>> MakeStoppingPruner(std::string_view name,
                                                   const StoppingOptions& options,
                                                   int64_t steps_per_trial);

// The promotion rule of a rule with rungs (asha, hyperband); InvalidArgument
// for the others.
Result<PromotionRule> MakePromotionRule(std::string_view name, const StoppingOptions& options,
                                        int64_t steps_per_trial, PromotionCriterion criterion);

}  // namespace hpo::search
