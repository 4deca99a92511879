// The one registry of sampler names and early-stopping rules
// (search/registry.h) and the `auto`
// sampler's rule (search/auto_sampler.h): names the spec accepts are the
// samplers the engine builds, unknown names are errors naming the field, and
// auto picks GP or TPE as its header says, switching as the history grows.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "search/auto_sampler.h"
#include "search/gp_sampler.h"
#include "search/registry.h"
#include "search/tpe.h"

namespace hpo::search {
namespace {

Observation Completed(int64_t number, Assignment params, double value) {
  Observation o;
  o.number = number;
  o.status = TrialStatus::kCompleted;
  o.params = std::move(params);
  o.value = value;
  return o;
}

SearchSpace Numeric(int dims) {
  SearchSpace s;
  s.name = "numeric";
  for (int i = 0; i < dims; ++i) s.params.push_back(Param::Float("x" + std::to_string(i), 0, 1));
  return s;
}

// `n` completed trials at random points, valued by a bowl.
History RandomHistory(const SearchSpace& space, int n, uint64_t seed) {
  Rng rng(seed);
  History h;
  for (int i = 0; i < n; ++i) {
    Assignment a = SampleUniform(space, rng);
    double v = 0;
    for (double x : a) v += IsInactive(x) ? 0 : (x - 0.3) * (x - 0.3);
    h.trials.push_back(Completed(i, a, v));
  }
  return h;
}

bool Same(const std::vector<Assignment>& a, const std::vector<Assignment>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    for (size_t j = 0; j < a[i].size(); ++j) {
      if (IsInactive(a[i][j]) != IsInactive(b[i][j])) return false;
      if (!IsInactive(a[i][j]) && a[i][j] != b[i][j]) return false;
    }
  }
  return true;
}

TEST(SamplerRegistry, EveryNameMakesTheSamplerOfThatName) {
  ASSERT_EQ(SamplerNames(), (std::vector<std::string>{"auto", "tpe", "gp", "random"}));
  for (const std::string& name : SamplerNames()) {
    EXPECT_TRUE(CheckSamplerName(name, "algorithm.sampler").ok()) << name;
    auto made = MakeSampler(name);
    ASSERT_TRUE(made.ok()) << made.status();
    EXPECT_EQ((*made)->name(), name);
  }
  EXPECT_EQ(kDefaultSampler, "auto");
}

TEST(SamplerRegistry, RefusesUnknownNamesNamingTheField) {
  for (const std::string bad : {"cmaes", "", "TPE", "gp "}) {
    const Status check = CheckSamplerName(bad, "algorithm.sampler");
    ASSERT_TRUE(check.IsInvalidArgument()) << "'" << bad << "'";
    EXPECT_EQ(check.message(),
              "algorithm.sampler: must be one of auto, tpe, gp, random, not '" + bad + "'");
    auto made = MakeSampler(bad, {}, "spec.algorithm.sampler");
    ASSERT_FALSE(made.ok()) << "'" << bad << "' must not fall back to a default sampler";
    EXPECT_TRUE(made.status().IsInvalidArgument());
    EXPECT_EQ(made.status().message().rfind("spec.algorithm.sampler: ", 0), 0u) << made.status();
  }
}

TEST(AutoSampler, PicksGpForSmallHistoriesOfNumericSpaces) {
  const SearchSpace space = Numeric(4);
  EXPECT_EQ(ChooseAutoSampler(space, {}), AutoChoice::kGp);
  EXPECT_EQ(ChooseAutoSampler(space, RandomHistory(space, 50, 1)), AutoChoice::kGp);
  // One categorical among four numbers is still mostly numeric.
  SearchSpace mixed = Numeric(3);
  mixed.params.push_back(Param::Categorical("act", {"relu", "tanh"}));
  EXPECT_EQ(ChooseAutoSampler(mixed, {}), AutoChoice::kGp);
}

// The suite's conditional and categorical-heavy tasks went better on the
// GP (auto_sampler.h says by how much): they stay on it; only a space
// with no number at all goes to TPE from the start.
TEST(StoppingRegistry, EveryRuleMakesItsPrunerAndTheRulesWithRungsTheirPromotionRule) {
  std::vector<std::string> names;
  for (const StoppingRule& r : StoppingRules()) names.push_back(r.name);
  ASSERT_EQ(names, (std::vector<std::string>{"none", "median", "asha", "hyperband"}));
  for (const StoppingRule& r : StoppingRules()) {
    auto pruner = MakeStoppingPruner(r.name, {}, 27);
    ASSERT_TRUE(pruner.ok()) << r.name << ": " << pruner.status();
    EXPECT_EQ(MakePromotionRule(r.name, {}, 27, PromotionCriterion::kTopFraction).ok(), r.rungs)
        << r.name;
  }
  // The options reach the rule: ASHA's first rung is min_resource, and the
  // rule's own check names a bad one.
  auto asha = MakePromotionRule("asha", {{"min_resource", 3}, {"reduction_factor", 3}}, 27,
                                PromotionCriterion::kTopFraction);
  ASSERT_TRUE(asha.ok()) << asha.status();
  EXPECT_EQ(asha->Rungs(0), (std::vector<int64_t>{3, 9, 27}));
  auto bad = MakeStoppingPruner("asha", {{"reduction_factor", 1}}, 27);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("reduction_factor"), std::string::npos) << bad.status();
}

TEST(StoppingRegistry, AnUnknownRuleOrAnOptionOfAnotherRuleIsAnErrorNamingIt) {
  auto unknown = FindStoppingRule("sha", "early_stopping.rule");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().message(),
            "early_stopping.rule: must be none, median, asha or hyperband, not 'sha'");
  auto other = MakeStoppingPruner("median", {{"min_resource", 2}}, 27);
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().message(),
            "early_stopping.min_resource: not an option of rule 'median'");
  auto no_rungs = MakePromotionRule("median", {}, 27, PromotionCriterion::kTopFraction);
  ASSERT_FALSE(no_rungs.ok());
  EXPECT_NE(no_rungs.status().message().find("needs rule asha or hyperband"), std::string::npos);
}

TEST(AutoSampler, PicksGpForConditionalAndCategoricalHeavySpacesTpeForAllCategorical) {
  SearchSpace conditional = Numeric(2);
  conditional.params.push_back(Param::Categorical("opt", {"sgd", "adam"}));
  Param momentum = Param::Float("momentum", 0, 1);
  momentum.parent = 2;
  momentum.parent_choice = 0;
  conditional.params.push_back(momentum);
  EXPECT_EQ(ChooseAutoSampler(conditional, {}), AutoChoice::kGp);

  SearchSpace categorical = Numeric(1);
  for (const char* name : {"a", "b", "c"}) {
    categorical.params.push_back(Param::Categorical(name, {"x", "y", "z"}));
  }
  EXPECT_EQ(ChooseAutoSampler(categorical, {}), AutoChoice::kGp) << "three in four categorical";
  categorical.params.erase(categorical.params.begin());
  EXPECT_EQ(ChooseAutoSampler(categorical, {}), AutoChoice::kTpe) << "no number at all";
}

TEST(AutoSampler, SwitchesToTpeAsTheHistoryGrows) {
  const SearchSpace space = Numeric(3);
  AutoOptions o;
  History h = RandomHistory(space, o.max_gp_results - 1, 2);
  EXPECT_EQ(ChooseAutoSampler(space, h, o), AutoChoice::kGp);
  // Running and failed trials are not results: no switch.
  Observation running;
  running.number = 10'000;
  running.params = h.trials[0].params;
  h.trials.push_back(running);
  Observation failed = running;
  failed.status = TrialStatus::kFailed;
  h.trials.push_back(failed);
  EXPECT_EQ(ChooseAutoSampler(space, h, o), AutoChoice::kGp);
  // A pruned trial with a curve is one.
  Observation pruned = running;
  pruned.status = TrialStatus::kPruned;
  pruned.curve = {{1, 0.5}};
  h.trials.push_back(pruned);
  EXPECT_EQ(ChooseAutoSampler(space, h, o), AutoChoice::kTpe);
}

// What auto suggests is exactly what the chosen sampler suggests, on both
// sides of the switch.
TEST(AutoSampler, SuggestsWhatTheChosenSamplerSuggests) {
  const SearchSpace space = Numeric(3);
  AutoOptions o;
  o.max_gp_results = 30;
  auto autos = MakeAutoSampler(o);
  auto gp = MakeGpSampler(o.gp);
  auto tpe = MakeTpeSampler(o.tpe);
  for (int n : {20, 30}) {
    const History h = RandomHistory(space, n, 3);
    Rng a(7), b(7), c(7);
    const auto from_auto = autos->Suggest(space, h, 2, a);
    const auto from_gp = gp->Suggest(space, h, 2, b);
    const auto from_tpe = tpe->Suggest(space, h, 2, c);
    ASSERT_FALSE(Same(from_gp, from_tpe)) << "the two must differ for this test to mean anything";
    EXPECT_TRUE(Same(from_auto, n < o.max_gp_results ? from_gp : from_tpe)) << n << " results";
  }
}

}  // namespace
}  // namespace hpo::search
