#include <gtest/gtest.h>

#include "server/spec.h"

namespace hpo::server {
namespace {

const char* kSpec = R"(
name: fashion-mnist
objective: {metric: accuracy, direction: maximize}
spaces:
  - name: mlp
    params:
      lr: {type: float, low: 1.0e-4, high: 0.1, log: true}
      width: {type: int, low: 32, high: 512, log: true}
      optimizer:
        type: categorical
        choices: [sgd, adam]
        conditional:
          sgd: {momentum: {type: float, low: 0, high: 0.99}}
  - name: cnn
    params:
      lr: {type: float, low: 1e-4, high: 0.1, log: true}
      channels: [16, 32, 64]
system:
  batch_size: {type: int, low: 32, high: 512, log: true, mutable: false}
  threads: {type: int, low: 1, high: 4}
algorithm: {sampler: gp, seed: 7}
early_stopping: {rule: asha, min_resource: 1, reduction_factor: 3}
budget: {max_trials: 40, max_parallel: 2, max_wall_time_s: 900, steps_per_trial: 10}
executor:
  builtin: {trainer: fashion-mnist-mlp, args: {validation_fraction: 0.1}}
)";

TEST(ExperimentSpec, ParsesTheDocumentedExample) {
  auto r = ParseExperimentSpec(std::string(kSpec));
  ASSERT_TRUE(r.ok()) << r.status();
  const ExperimentSpec& s = *r;
  EXPECT_EQ(s.name, "fashion-mnist");
  EXPECT_EQ(s.metric, "accuracy");
  EXPECT_EQ(s.direction, search::Direction::kMaximize);
  ASSERT_EQ(s.spaces.size(), 2u);
  EXPECT_EQ(s.spaces[0].size(), 5) << "4 params and batch_size, which changes accuracy by default";
  EXPECT_GE(s.spaces[1].Find("batch_size"), 0);
  EXPECT_DOUBLE_EQ(s.spaces[1].params[s.spaces[1].Find("lr")].low, 1e-4) << "YAML 1e-4 is a number";
  ASSERT_EQ(s.system.size(), 2u);
  EXPECT_FALSE(s.system[0].may_change_mid_trial);
  EXPECT_TRUE(s.system[0].affects_accuracy);
  EXPECT_TRUE(s.system[1].may_change_mid_trial);
  EXPECT_FALSE(s.system[1].affects_accuracy) << "threads only change speed";
  EXPECT_EQ(s.sampler, "gp");
  EXPECT_EQ(s.seed, 7u);
  EXPECT_EQ(s.early_stopping, "asha");
  EXPECT_EQ(s.early_stopping_options["reduction_factor"], 3);
  EXPECT_EQ(s.max_trials, 40);
  EXPECT_EQ(s.max_parallel, 2);
  EXPECT_EQ(*s.max_wall_time_s, 900);
  EXPECT_EQ(s.executor, ExperimentSpec::ExecutorKind::kBuiltin);
  EXPECT_EQ(s.trainer, "fashion-mnist-mlp");
  EXPECT_EQ(s.trainer_args["validation_fraction"], 0.1);
}

TEST(ExperimentSpec, JsonWorksToo) {
  auto r = ParseExperimentSpec(std::string(R"({"name":"x","objective":{"metric":"loss"},
    "spaces":[{"name":"s","params":{"a":{"type":"float","low":0,"high":1}}}],
    "executor":{"command":{"argv":["python3","train.py","--a={a}","--trial={trial_id}"],"timeout_s":60}}})"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->direction, search::Direction::kMinimize);
  EXPECT_EQ(r->argv.size(), 4u);
  EXPECT_EQ(*r->timeout_s, 60);
}

TEST(ExperimentSpec, ErrorsNameTheFieldPath) {
  auto replace = [](std::string text, const std::string& from, const std::string& to) {
    const auto pos = text.find(from);
    EXPECT_NE(pos, std::string::npos) << from;
    return text.replace(pos, from.size(), to);
  };
  const std::string base = kSpec;
  struct Case {
    std::string text, error;
  } cases[] = {
      {replace(base, "low: 1e-4, high: 0.1", "low: 0.5, high: 0.1"), "spaces[1].params.lr.low: must be < high"},
      {replace(base, "max_parallel: 2", "max_parallel: 0"), "budget.max_parallel: must be at least 1"},
      {replace(base, "direction: maximize", "direction: up"), "objective.direction"},
      {replace(base, "sampler: gp", "sampler: cmaes"), "algorithm.sampler"},
      {replace(base, "rule: asha", "rule: asha, eta: 3"), "early_stopping.eta: not an option of rule 'asha'"},
      {replace(base, "budget:", "budgett:"), "budgett: unknown field"},
      {replace(base, "threads: {type: int", "lr: {type: int"), "system.lr: 'lr' is already a hyperparameter"},
      {replace(base, "builtin: {trainer: fashion-mnist-mlp, args: {validation_fraction: 0.1}}", "magic: {}"),
       "executor.magic: unknown executor"},
      {replace(base, "objective: {metric: accuracy, direction: maximize}", ""), "objective: missing"},
      {replace(base, "max_trials: 40", "max_trials: 4.5"), "budget.max_trials: must be an integer"},
      {"name: [unclosed", "line 1"},
  };
  for (const auto& c : cases) {
    auto r = ParseExperimentSpec(c.text);
    ASSERT_FALSE(r.ok()) << c.error;
    EXPECT_TRUE(r.status().IsInvalidArgument());
    EXPECT_NE(r.status().message().find(c.error), std::string::npos) << r.status() << "\nexpected: " << c.error;
  }
  auto cmd = ParseExperimentSpec(std::string(R"({"name":"x","objective":{"metric":"loss"},
    "spaces":[{"name":"s","params":{"a":[1,2]}}],"executor":{"command":{"argv":["run","--b={b}"]}}})"));
  ASSERT_FALSE(cmd.ok());
  EXPECT_NE(cmd.status().message().find("executor.command.argv[1]: {b}"), std::string::npos) << cmd.status();
}

TEST(YamlToJson, KeepsQuotedScalarsAsStrings) {
  auto j = YamlToJson("a: '1'\nb: 1\nc: 1.5e-3\nd: true\ne: \"true\"\nf: ~\ng: [x, 2]\n");
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ((*j)["a"], "1");
  EXPECT_EQ((*j)["b"], 1);
  EXPECT_DOUBLE_EQ((*j)["c"].get<double>(), 1.5e-3);
  EXPECT_EQ((*j)["d"], true);
  EXPECT_EQ((*j)["e"], "true");
  EXPECT_TRUE((*j)["f"].is_null());
  EXPECT_EQ((*j)["g"][0], "x");
}

}  // namespace
}  // namespace hpo::server
