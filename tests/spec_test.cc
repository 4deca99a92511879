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
  EXPECT_EQ(r->sampler, "auto") << "no algorithm section: the registry's default sampler";
}

// Sampler names come from search/registry.h: each is accepted, and an
// unknown one is refused with the field and the names it could be.
TEST(ExperimentSpec, SamplerNamesAreTheRegistrys) {
  for (const std::string name : {"auto", "tpe", "gp", "random"}) {
    auto r = ParseExperimentSpec(std::string(R"({"name":"x","objective":{"metric":"loss"},
      "spaces":[{"name":"s","params":{"a":{"type":"float","low":0,"high":1}}}],
      "algorithm":{"sampler":")") + name + R"("},"executor":{"client":{}}})");
    ASSERT_TRUE(r.ok()) << name << ": " << r.status();
    EXPECT_EQ(r->sampler, name);
  }
  auto bad = ParseExperimentSpec(std::string(R"({"name":"x","objective":{"metric":"loss"},
    "spaces":[{"name":"s","params":{"a":{"type":"float","low":0,"high":1}}}],
    "algorithm":{"sampler":"cmaes"},"executor":{"client":{}}})"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "algorithm.sampler: must be one of auto, tpe, gp, random, not 'cmaes'");
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

// Inputs the fuzzer (fuzz/fuzz_spec.cc) found or that guard the same
// limits: each is a clear InvalidArgument, never an exception or a crash.
TEST(ExperimentSpec, HostileInputIsAnErrorNotACrash) {
  const std::string spaces = R"("spaces": [{"name": "s", "params": {"x": {"type": "float", "low": 0, "high": 1}}}])";
  struct Case {
    std::string text, error;
  };
  const std::vector<Case> cases = {
      // Bytes that are not UTF-8 used to throw when the spec was stored as JSON.
      {"name: \xbc\xff\nobjective: {metric: loss}\n", "name: not valid UTF-8"},
      {"name: x\nobjective: {metric: loss}\n\xc3: 1\n", "spec: a key is not valid UTF-8"},
      // An integer field holding a float beyond int64 used to convert with undefined behaviour.
      {R"({"name": "x", "objective": {"metric": "loss"}, )" + spaces + R"(, "budget": {"max_trials": 1e300}})",
       "budget.max_trials: must be an integer"},
      {R"({"name": "x", "objective": {"metric": "loss"}, )" + spaces +
           R"(, "budget": {"max_trials": 18446744073709551615}})",
       "budget.max_trials: must be at most"},
      {std::string(5000, '[') + std::string(5000, ']'), "nested more than 32 levels deep"},
      {"name: " + std::string(300, 'n') + "\n", "name: longer than 256 bytes"},
      {std::string(kMaxSpecBytes + 1, ' '), "larger than 1048576 bytes"},
  };
  for (const auto& c : cases) {
    auto r = ParseExperimentSpec(c.text);
    ASSERT_FALSE(r.ok()) << c.error;
    EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status();
    EXPECT_NE(r.status().message().find(c.error), std::string::npos) << r.status() << "\nexpected: " << c.error;
  }
  // A few lines of nested YAML aliases would expand to 10^8 values.
  std::string bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  for (char c = 'b'; c <= 'h'; ++c) {
    bomb += std::string(1, c) + ": &" + c + " [";
    for (int i = 0; i < 10; ++i) bomb += std::string(i ? ", *" : "*") + static_cast<char>(c - 1);
    bomb += "]\n";
  }
  auto r = ParseExperimentSpec(bomb);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("more than 100000 values"), std::string::npos) << r.status();
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
