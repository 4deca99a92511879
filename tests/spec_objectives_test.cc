// objectives: and constraints: in the spec: what is read, and every bad
// input refused with the field it is about.
#include <gtest/gtest.h>

#include <string>

#include "server/spec/spec.h"

namespace hpo::server {
namespace {

using nlohmann::json;

// A built-in trainer spec with `extra` top-level fields (JSON, no braces).
std::string Builtin(const std::string& extra, const std::string& early = "{\"rule\": \"asha\"}") {
  return R"({"name": "front", "spaces": [{"name": "mlp", "params": {"lr": {"type": "float",
      "low": 0.001, "high": 0.1, "log": true}}}], "early_stopping": )" +
         early + R"(, "executor": {"builtin": {"trainer": "fashion-mnist-mlp"}}, )" + extra + "}";
}
std::string Client(const std::string& extra) {
  return R"({"name": "front", "spaces": [{"name": "s", "params": {"x": {"type": "float",
      "low": 0, "high": 1}}}], "executor": {"client": {}}, )" +
         extra + "}";
}
const std::string kTwo =
    R"("objectives": [{"metric": "accuracy", "direction": "maximize"},
                      {"metric": "device_seconds", "direction": "minimize"}])";

// The refusal's message, which must name `field`.
std::string Refusal(const std::string& text, const std::string& field) {
  auto r = ParseExperimentSpec(text);
  EXPECT_FALSE(r.ok()) << text;
  if (r.ok()) return "";
  EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status();
  EXPECT_EQ(r.status().message().rfind(field, 0), 0u)
      << "names " << field << ": " << r.status().message();
  return r.status().message();
}

TEST(SpecObjectives, SeveralObjectivesAndConstraintsAreReadInOrder) {
  auto r = ParseExperimentSpec(Builtin(kTwo + R"(, "constraints": [{"metric": "params",
      "max": 200000}, {"metric": "test_accuracy", "min": 0.5}])"));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->objectives.size(), 2u);
  EXPECT_TRUE(r->SeveralObjectives());
  EXPECT_EQ(r->metric, "accuracy") << "the first objective is the one-objective parts' metric";
  EXPECT_EQ(r->direction, search::Direction::kMaximize);
  EXPECT_EQ(r->objectives[1].metric, "device_seconds");
  EXPECT_EQ(r->objectives[1].direction, search::Direction::kMinimize);
  EXPECT_TRUE(r->UsesDerivedMetrics());
  ASSERT_EQ(r->constraints.size(), 2u);
  EXPECT_EQ(r->constraints[0].max, 200000);
  EXPECT_FALSE(r->constraints[0].min);
  EXPECT_EQ(r->constraints[1].min, 0.5);

  const json d = DescribeSpec(*r);
  ASSERT_EQ(d["objectives"].size(), 2u);
  EXPECT_EQ(d["objectives"][1]["metric"], "device_seconds");
  EXPECT_EQ(d["objectives"][1]["derived"], true);
  EXPECT_EQ(d["objectives"][0]["direction"], "maximize");
  EXPECT_EQ(d["constraints"][0]["max"], 200000);
  EXPECT_TRUE(d["constraints"][0]["min"].is_null());
  EXPECT_EQ(d["objective"]["metric"], "accuracy") << "kept for one-objective readers";
}

TEST(SpecObjectives, OneObjectiveReadsAsBeforeAndAsAListOfOne) {
  auto one = ParseExperimentSpec(Client(R"("objective": {"metric": "loss"})"));
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->objectives.size(), 1u);
  EXPECT_FALSE(one->SeveralObjectives());
  EXPECT_EQ(one->objectives[0].metric, "loss");
  EXPECT_FALSE(one->UsesDerivedMetrics());
  EXPECT_TRUE(one->constraints.empty());
  auto listed = ParseExperimentSpec(Client(R"("objectives": [{"metric": "loss"}])"));
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->metric, "loss");
  EXPECT_FALSE(listed->SeveralObjectives());
  // Constraints with one objective.
  auto constrained = ParseExperimentSpec(
      Client(R"("objective": {"metric": "loss"}, "constraints": [{"metric": "size", "max": 3}])"));
  ASSERT_TRUE(constrained.ok()) << constrained.status();
  EXPECT_EQ(constrained->constraints.size(), 1u);
}

TEST(SpecObjectives, BadObjectivesNameTheirField) {
  Refusal(
      Client(R"("objectives": [{"metric": "loss"}, {"metric": "loss", "direction": "maximize"}])"),
      "objectives[1].metric");
  EXPECT_NE(
      Refusal(Client(R"("objectives": [{"metric": "a"}, {"metric": "b", "direction": "up"}])"),
              "objectives[1].direction")
          .find("'up'"),
      std::string::npos);
  Refusal(Client(R"("objectives": [])"), "objectives");
  Refusal(Client(R"("objectives": {"metric": "a"})"), "objectives");
  Refusal(Client(R"("objectives": [{"metric": "a", "weight": 2}])"), "objectives[0].weight");
  Refusal(Client(R"("objective": {"metric": "a"}, "objectives": [{"metric": "b"}])"), "objectives");
  EXPECT_NE(Refusal(Client(R"("objectives": [{"metric": "a"}, {"metric": "b"}, {"metric": "c"},
                     {"metric": "d"}, {"metric": "e"}])"),
                    "objectives")
                .find("more than 4"),
            std::string::npos);
  EXPECT_NE(Refusal(Client(R"("name2": 1)"), "objective").find("missing"), std::string::npos);
}

TEST(SpecObjectives, BadConstraintsNameTheirField) {
  const std::string one = R"("objective": {"metric": "loss"}, )";
  Refusal(Client(one + R"("constraints": [{"metric": "size"}])"), "constraints[0]");
  Refusal(Client(one + R"("constraints": [{"metric": "size", "max": "big"}])"),
          "constraints[0].max");
  Refusal(Client(one + R"("constraints": [{"metric": "size", "min": 5, "max": 3}])"),
          "constraints[0].min");
  Refusal(Client(one + R"("constraints": [{"metric": "a", "max": 1}, {"metric": "a", "min": 0}])"),
          "constraints[1].metric");
  Refusal(Client(one + R"("constraints": {"metric": "a", "max": 1})"), "constraints");
  Refusal(Client(one + R"("constraints": [{"metric": "a", "max": 1, "soft": true}])"),
          "constraints[0].soft");
}

TEST(SpecObjectives, AMetricNoTrialCouldReportIsRefused) {
  // The built-in trainers report accuracy, loss, train_loss and params at
  // each step (test_accuracy and test_loss at the end).
  EXPECT_NE(Refusal(Builtin(R"("objectives": [{"metric": "accuracy", "direction": "maximize"},
                           {"metric": "latency"}])"),
                    "objectives[1].metric")
                .find("report no metric 'latency'"),
            std::string::npos);
  Refusal(Builtin(kTwo + R"(, "constraints": [{"metric": "flops", "max": 1}])"),
          "constraints[0].metric");
  // test_accuracy is only final: a constraint, not an objective early
  // stopping would rank reports by.
  Refusal(Builtin(R"("objectives": [{"metric": "test_accuracy", "direction": "maximize"},
                   {"metric": "params"}])"),
          "objectives[0].metric");
  // Derived metrics need device time (workers) and, for cost, prices.
  EXPECT_NE(Refusal(Builtin(R"("objectives": [{"metric": "accuracy", "direction": "maximize"},
                           {"metric": "cost"}])"),
                    "objectives[1].metric")
                .find("cost.prices"),
            std::string::npos);
  Refusal(Client(R"("objectives": [{"metric": "loss"}, {"metric": "device_seconds"}])"),
          "objectives[1].metric");
  Refusal(
      Client(R"("objective": {"metric": "loss"}, "constraints": [{"metric": "cost", "max": 1}])"),
      "constraints[0].metric");
  // With prices, cost is a metric like the others.
  auto priced = ParseExperimentSpec(Builtin(
      R"("objectives": [{"metric": "accuracy", "direction": "maximize"}, {"metric": "cost"}],
                 "cost": {"prices": {"cpu:x:x1.0": 0.1}})"));
  EXPECT_TRUE(priced.ok()) << priced.status();
}

TEST(SpecObjectives, EarlyStoppingMustRankEveryObjective) {
  EXPECT_NE(Refusal(Builtin(kTwo, R"({"rule": "median"})"), "early_stopping.rule").find("median"),
            std::string::npos);
  for (const std::string early :
       {R"({"rule": "asha"})", R"({"rule": "hyperband"})", R"({"rule": "none"})",
        R"({"rule": "asha", "type": "promotion"})",
        R"({"rule": "hyperband", "type": "promotion", "promotion": "quantile"})"}) {
    auto r = ParseExperimentSpec(Builtin(kTwo, early));
    EXPECT_TRUE(r.ok()) << early << ": " << r.status();
  }
  // One objective with constraints keeps every rule.
  auto median = ParseExperimentSpec(Builtin(
      R"("objective": {"metric": "accuracy", "direction": "maximize"},
         "constraints": [{"metric": "params", "max": 100000}])",
      R"({"rule": "median"})"));
  EXPECT_TRUE(median.ok()) << median.status();
}

}  // namespace
}  // namespace hpo::server
