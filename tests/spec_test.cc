#include "server/spec/spec.h"

#include <gtest/gtest.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

namespace hpo::server {
namespace {

using nlohmann::json;

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
      "algorithm":{"sampler":")") +
                                 name + R"("},"executor":{"client":{}}})");
    ASSERT_TRUE(r.ok()) << name << ": " << r.status();
    EXPECT_EQ(r->sampler, name);
  }
  auto bad = ParseExperimentSpec(std::string(R"({"name":"x","objective":{"metric":"loss"},
    "spaces":[{"name":"s","params":{"a":{"type":"float","low":0,"high":1}}}],
    "algorithm":{"sampler":"cmaes"},"executor":{"client":{}}})"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "algorithm.sampler: must be one of auto, tpe, gp, random, not 'cmaes'");
}

// early_stopping.promotion picks the promotion criterion: quantile where
// trials pause, top_fraction by default, and an error naming the field for
// a rule or type it cannot apply to.
TEST(ExperimentSpec, ThePromotionCriterionIsChosenAndCheckedByName) {
  const std::string base = kSpec;
  auto with = [&](const std::string& early) {
    std::string text = base;
    const std::string from = "early_stopping: {rule: asha, min_resource: 1, reduction_factor: 3}";
    return ParseExperimentSpec(text.replace(text.find(from), from.size(), early));
  };
  auto dflt = with("early_stopping: {rule: asha, type: promotion}");
  ASSERT_TRUE(dflt.ok()) << dflt.status();
  EXPECT_EQ(dflt->early_stopping_type, ExperimentSpec::StoppingType::kPromotion);
  EXPECT_EQ(dflt->promotion_criterion, search::PromotionCriterion::kTopFraction);
  auto q = with("early_stopping: {rule: hyperband, type: promotion, promotion: quantile}");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->promotion_criterion, search::PromotionCriterion::kQuantile);
  EXPECT_FALSE(q->early_stopping_options.contains("promotion"));
  EXPECT_EQ(DescribeSpec(*q)["early_stopping"]["promotion"], "quantile");
  for (const auto& [early, error] : std::vector<std::pair<std::string, std::string>>{
           {"early_stopping: {rule: asha, promotion: median}",
            "early_stopping.promotion: must be top_fraction or quantile"},
           {"early_stopping: {rule: median, promotion: quantile}",
            "early_stopping.promotion: promotion needs rule asha"},
           {"early_stopping: {rule: asha, type: stop, promotion: quantile}",
            "early_stopping.promotion: chooses which"},
           {"early_stopping: {rule: asha, promotion: quantile}",
            "early_stopping.promotion: chooses which"}}) {
    auto r = with(early);
    ASSERT_FALSE(r.ok()) << early;
    EXPECT_NE(r.status().message().find(error), std::string::npos) << early << ": " << r.status();
  }
}

// placement.migrate: on by default where a trial can move (stop-type asha
// or hyperband, the built-in trainers, the speed policy), off elsewhere, and
// asking for it where it cannot apply names the field and why.
TEST(ExperimentSpec, MigrationIsTheDefaultWhereItAppliesAndAnErrorWhereItCannot) {
  auto with = [](const std::string& early, const std::string& extra,
                 const std::string& executor = "") {
    std::string text = kSpec;
    const std::string from = "early_stopping: {rule: asha, min_resource: 1, reduction_factor: 3}";
    text.replace(text.find(from), from.size(), early + "\n" + extra);
    if (!executor.empty()) {
      const std::string builtin =
          "executor:\n  builtin: {trainer: fashion-mnist-mlp, args: {validation_fraction: 0.1}}";
      text.replace(text.find(builtin), builtin.size(), executor);
    }
    return ParseExperimentSpec(text);
  };
  auto stop = with("early_stopping: {rule: asha, type: stop}", "");
  ASSERT_TRUE(stop.ok()) << stop.status();
  EXPECT_TRUE(stop->placement_migrate);
  EXPECT_EQ(DescribeSpec(*stop)["placement"]["migrate"], true);
  auto off = with("early_stopping: {rule: hyperband, type: stop}", "placement: {migrate: false}");
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->placement_migrate);
  auto dflt = with("early_stopping: {rule: asha}", "");
  ASSERT_TRUE(dflt.ok()) << dflt.status();
  EXPECT_EQ(dflt->early_stopping_type, ExperimentSpec::StoppingType::kStop)
      << "stop-type unless promotion is asked";
  EXPECT_TRUE(dflt->placement_migrate);
  for (const auto& [early, extra] : std::vector<std::pair<std::string, std::string>>{
           {"early_stopping: {rule: asha, type: promotion}", ""},
           {"early_stopping: {rule: median}", ""},
           {"early_stopping: {rule: asha, type: stop}", "placement: {policy: fifo}"}}) {
    auto r = with(early, extra);
    ASSERT_TRUE(r.ok()) << early << " " << extra << ": " << r.status();
    EXPECT_FALSE(r->placement_migrate) << early << " " << extra;
  }
  const std::string command = "executor:\n  command: {argv: [python3, train.py]}";
  for (const auto& [early, extra, executor, error] : std::vector<std::array<std::string, 4>>{
           {"early_stopping: {rule: asha, type: stop}", "placement: {migrate: true}", command,
            "placement.migrate: a trial moves through a checkpoint taken at any step"},
           {"early_stopping: {rule: asha, type: promotion}", "placement: {migrate: true}", "",
            "placement.migrate: it applies to early_stopping rule asha or hyperband with type: "
            "stop"},
           {"early_stopping: {rule: asha, type: stop}", "placement: {policy: fifo, migrate: true}",
            "", "placement.migrate: only the speed policy moves trials"},
           {"early_stopping: {rule: asha, type: stop}", "placement: {migrate: 1}", "",
            "placement.migrate: must be true or false"}}) {
    auto r = with(early, extra, executor);
    ASSERT_FALSE(r.ok()) << extra;
    EXPECT_NE(r.status().message().find(error), std::string::npos) << extra << ": " << r.status();
  }
}

// Without an early_stopping section a worker experiment gets stop-type
// ASHA (min_resource 1, reduction_factor 3) and an ask/tell one none; the
// resolved choice is pinned in the stored source, and a stored spec from
// before the pinning keeps the defaults of its day.
TEST(ExperimentSpec, TheDefaultEarlyStoppingIsPinnedAndOldStoredSpecsKeepTheirs) {
  std::string text = kSpec;
  const std::string early = "early_stopping: {rule: asha, min_resource: 1, reduction_factor: 3}\n";
  text.replace(text.find(early), early.size(), "");
  auto worker = ParseExperimentSpec(text);
  ASSERT_TRUE(worker.ok()) << worker.status();
  EXPECT_EQ(worker->early_stopping, "asha");
  EXPECT_EQ(worker->early_stopping_type, ExperimentSpec::StoppingType::kStop);
  EXPECT_TRUE(worker->placement_migrate);
  EXPECT_EQ(worker->source["early_stopping"], json::parse(R"({"rule": "asha", "type": "stop"})"));
  auto again = ParseStoredExperimentSpec(worker->source.dump());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->early_stopping, "asha");
  EXPECT_EQ(again->early_stopping_type, ExperimentSpec::StoppingType::kStop);

  auto client = ParseExperimentSpec(std::string(R"({"name":"x","objective":{"metric":"loss"},
    "spaces":[{"name":"s","params":{"a":{"type":"float","low":0,"high":1}}}],"executor":{"client":{}}})"));
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ(client->early_stopping, "none");

  // Stored by an older server: no section meant none, asha meant promotion.
  json old = json::parse(worker->source.dump());
  old.erase("early_stopping");
  auto none = ParseStoredExperimentSpec(old.dump());
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->early_stopping, "none");
  old["early_stopping"] = {{"rule", "asha"}};
  auto promotion = ParseStoredExperimentSpec(old.dump());
  ASSERT_TRUE(promotion.ok()) << promotion.status();
  EXPECT_EQ(promotion->early_stopping_type, ExperimentSpec::StoppingType::kPromotion);
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
      {replace(base, "low: 1e-4, high: 0.1", "low: 0.5, high: 0.1"),
       "spaces[1].params.lr.low: must be < high"},
      {replace(base, "max_parallel: 2", "max_parallel: 0"),
       "budget.max_parallel: must be at least 1"},
      {replace(base, "direction: maximize", "direction: up"), "objective.direction"},
      {replace(base, "sampler: gp", "sampler: cmaes"), "algorithm.sampler"},
      {replace(base, "rule: asha", "rule: asha, eta: 3"),
       "early_stopping.eta: unknown field (expected rule, type, promotion, bootstrap_count"},
      {replace(base, "budget:", "budgett:"), "budgett: unknown field"},
      {replace(base, "threads: {type: int", "lr: {type: int"),
       "system.lr: 'lr' is already a hyperparameter"},
      {replace(base, "builtin: {trainer: fashion-mnist-mlp, args: {validation_fraction: 0.1}}",
               "magic: {}"),
       "executor.magic: unknown executor"},
      {replace(base, "objective: {metric: accuracy, direction: maximize}", ""),
       "objective: missing"},
      {replace(base, "max_trials: 40", "max_trials: 4.5"), "budget.max_trials: must be an integer"},
      {"name: [unclosed", "line 1"},
      {replace(base, "budget:", "workload: ''\nbudget:"), "workload: must be a non-empty"},
      {replace(base, "budget:", "workload: [a]\nbudget:"), "workload"},
  };
  for (const auto& c : cases) {
    auto r = ParseExperimentSpec(c.text);
    ASSERT_FALSE(r.ok()) << c.error;
    EXPECT_TRUE(r.status().IsInvalidArgument());
    EXPECT_NE(r.status().message().find(c.error), std::string::npos)
        << r.status() << "\nexpected: " << c.error;
  }
  auto cmd = ParseExperimentSpec(std::string(R"({"name":"x","objective":{"metric":"loss"},
    "spaces":[{"name":"s","params":{"a":[1,2]}}],"executor":{"command":{"argv":["run","--b={b}"]}}})"));
  ASSERT_FALSE(cmd.ok());
  EXPECT_NE(cmd.status().message().find("executor.command.argv[1]: {b}"), std::string::npos)
      << cmd.status();
}

// Inputs the fuzzer (fuzz/fuzz_spec.cc) found or that guard the same
// limits: each is a clear InvalidArgument, never an exception or a crash.
TEST(ExperimentSpec, HostileInputIsAnErrorNotACrash) {
  const std::string spaces =
      R"("spaces": [{"name": "s", "params": {"x": {"type": "float", "low": 0, "high": 1}}}])";
  struct Case {
    std::string text, error;
  };
  const std::vector<Case> cases = {
      // Bytes that are not UTF-8 used to throw when the spec was stored as JSON.
      {"name: \xbc\xff\nobjective: {metric: loss}\n", "name: not valid UTF-8"},
      {"name: x\nobjective: {metric: loss}\n\xc3: 1\n", "spec: a key is not valid UTF-8"},
      // An integer field holding a float beyond int64 used to convert with undefined behaviour.
      {R"({"name": "x", "objective": {"metric": "loss"}, )" + spaces +
           R"(, "budget": {"max_trials": 1e300}})",
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
    EXPECT_NE(r.status().message().find(c.error), std::string::npos)
        << r.status() << "\nexpected: " << c.error;
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
  // Few values, but each a long string repeated through aliases: 16 KiB
  // times 10^4 would be 160 MB.
  std::string wide = "s: &s \"" + std::string(16'000, 'x') +
                     "\"\na: &a [*s, *s, *s, *s, *s, *s, *s, *s, *s, *s]\n";
  for (char c = 'b'; c <= 'd'; ++c) {
    wide += std::string(1, c) + ": &" + c + " [";
    for (int i = 0; i < 10; ++i) wide += std::string(i ? ", *" : "*") + static_cast<char>(c - 1);
    wide += "]\n";
  }
  r = ParseExperimentSpec(wide);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("bytes of names and values"), std::string::npos)
      << r.status();
}

// Nesting is bounded however the spec nests: JSON, flow YAML,
// block YAML (which yaml-cpp stops at 500 levels with "bad file") and YAML
// aliases, each of which a line nests one level deeper than the last
// (yaml-cpp never sees that depth; only the value budget stopped it). Each
// is a clean InvalidArgument that names the limit.
TEST(ExperimentSpec, NestingIsBoundedHoweverItIsWritten) {
  std::string dashes = "name:\n";
  for (int i = 0; i < 3000; ++i) dashes += "- ";
  std::string indented;
  for (int i = 0; i < 600; ++i) indented += std::string(i, ' ') + "a:\n";
  std::string aliases = "a0: &a0 [x]\n";
  for (int i = 1; i < 40'000; ++i) {
    aliases += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [*a" +
               std::to_string(i - 1) + "]\n";
  }
  ASSERT_LT(aliases.size(), kMaxSpecBytes);
  for (const std::string& text :
       {dashes + "x\n", indented + std::string(600, ' ') + "x\n", aliases,
        R"({"name": )" + std::string(200'000, '[') + std::string(200'000, ']') + "}"}) {
    auto r = ParseExperimentSpec(text);
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status();
    EXPECT_NE(r.status().message().find("nested more than 32 levels deep"), std::string::npos)
        << r.status();
  }
}

// The JSON parser, the YAML converter and the spec's own check count levels
// alike: what one takes, the others take too, so a spec stored as JSON
// reads back (a spec 33 levels deep through YAML used to be accepted and
// then refused from its stored JSON form, had that gone to the JSON parser).
TEST(ExperimentSpec, EveryFormCountsNestingAlike) {
  auto spec_with_args = [](int levels, bool json) {
    // The spec, executor, builtin and args mappings are 4 levels; the rest
    // lists, the innermost empty (an empty list at the 33rd level was taken).
    const std::string lists = std::string(levels - 4, '[') + std::string(levels - 4, ']');
    if (json) {
      return R"({"name": "n", "objective": {"metric": "m"}, "spaces": [{"name": "s", "params": {"x": [1, 2]}}],
                 "executor": {"builtin": {"trainer": "t", "args": {"a": )" +
             lists + "}}}}";
    }
    return "name: n\nobjective: {metric: m}\nspaces: [{name: s, params: {x: [1, 2]}}]\nexecutor:\n "
           " builtin:\n"
           "    trainer: t\n    args:\n      a: " +
           lists + "\n";
  };
  for (const bool json : {true, false}) {
    auto at_limit = ParseExperimentSpec(spec_with_args(kMaxSpecDepth, json));
    ASSERT_TRUE(at_limit.ok()) << at_limit.status();
    auto again = ParseExperimentSpec(at_limit->source.dump());
    EXPECT_TRUE(again.ok()) << again.status();
    auto beyond = ParseExperimentSpec(spec_with_args(kMaxSpecDepth + 1, json));
    ASSERT_FALSE(beyond.ok()) << (json ? "JSON" : "YAML");
    EXPECT_NE(beyond.status().message().find("nested more than 32 levels deep"), std::string::npos)
        << beyond.status();
  }
  // The same count on a JSON value handed in directly.
  json deep = json::parse(spec_with_args(kMaxSpecDepth + 1, true));
  EXPECT_NE(ParseExperimentSpec(deep).status().message().find("executor.builtin.args.a"),
            std::string::npos);
}

// A JSON surrogate pair is one character.
TEST(ExperimentSpec, JsonSurrogatePairsAreOneCharacter) {
  const std::string tail =
      R"(, "objective": {"metric": "loss"}, "spaces": [{"name": "s", "params": {"x": [1, 2]}}],
      "executor": {"client": {}}})";
  auto r = ParseExperimentSpec(R"({"name": "smile \ud83d\ude00")" + tail);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->name, "smile \xF0\x9F\x98\x80");
  // Its stored form (UTF-8) reads back the same.
  auto again = ParseExperimentSpec(r->source.dump());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->name, r->name);
  // A lone surrogate is no character: refused, saying so.
  for (const char* name : {R"("\ud83d")", R"("\ude00 x")", R"("\ud83d\u0041")"}) {
    auto lone = ParseExperimentSpec(R"({"name": )" + std::string(name) + tail);
    ASSERT_FALSE(lone.ok()) << name;
    EXPECT_NE(lone.status().message().find("surrogate"), std::string::npos) << lone.status();
  }
  // YAML's own escapes have no pairs (yaml-cpp refuses the halves): the
  // error says what to write instead, and that works.
  const std::string yaml_tail =
      "\nobjective: {metric: loss}\nspaces: [{name: s, params: {x: [1, 2]}}]\n"
      "executor: {client: {}}\n";
  auto yaml_pair = ParseExperimentSpec("name: \"smile \\ud83d\\ude00\"" + yaml_tail);
  ASSERT_FALSE(yaml_pair.ok());
  EXPECT_NE(yaml_pair.status().message().find("\\uD83D is a UTF-16 surrogate"), std::string::npos)
      << yaml_pair.status();
  EXPECT_NE(yaml_pair.status().message().find("\\U0001F600"), std::string::npos)
      << yaml_pair.status();
  auto yaml_u = ParseExperimentSpec("name: \"smile \\U0001F600\"" + yaml_tail);
  ASSERT_TRUE(yaml_u.ok()) << yaml_u.status();
  EXPECT_EQ(yaml_u->name, "smile \xF0\x9F\x98\x80");
}

// Options that made one report cost seconds, and
// options the engine converts to integers (with undefined behaviour beyond
// their range), are refused naming the field.
TEST(ExperimentSpec, EarlyStoppingAndStepsAreBounded) {
  const std::string head = R"({"name": "x", "objective": {"metric": "loss"},
      "spaces": [{"name": "s", "params": {"x": {"type": "float", "low": 0, "high": 1}}}], "executor": {"client": {}})";
  struct Case {
    std::string add, error;
  } cases[] = {
      {R"("budget": {"steps_per_trial": 9e18})",
       "budget.steps_per_trial: must be at most 1000000000"},
      {R"("budget": {"steps_per_trial": 1000000001})",
       "budget.steps_per_trial: must be at most 1000000000"},
      {R"("early_stopping": {"rule": "asha", "reduction_factor": 1.000001})",
       "early_stopping.reduction_factor: must be a finite number >= 1.5"},
      {R"("early_stopping": {"rule": "hyperband", "reduction_factor": 1.2})",
       "early_stopping.reduction_factor: must be a finite number >= 1.5"},
      {R"("early_stopping": {"rule": "asha", "min_resource": 1e300})",
       "early_stopping.min_resource: must be an integer in [1, 1000000000]"},
      {R"("early_stopping": {"rule": "asha", "max_resource": 18446744073709551615})",
       "early_stopping.max_resource: must be an integer in [0, 1000000000]"},
      {R"("early_stopping": {"rule": "asha", "bootstrap_count": 2.5})",
       "early_stopping.bootstrap_count: must be an integer in [0, 1000000000], got 2.5"},
      {R"("early_stopping": {"rule": "asha", "min_early_stopping_rate": -1})",
       "early_stopping.min_early_stopping_rate: must be an integer in [0, 1000000000]"},
      {R"("early_stopping": {"rule": "median", "startup_trials": 3e9})",
       "early_stopping.startup_trials: must be an integer in [0, 1000000000]"},
      {R"("early_stopping": {"rule": "median", "interval_steps": 0})",
       "early_stopping.interval_steps: must be an integer in [1, 1000000000]"},
  };
  for (const auto& c : cases) {
    auto r = ParseExperimentSpec(head + ", " + c.add + "}");
    ASSERT_FALSE(r.ok()) << c.add;
    EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status();
    EXPECT_EQ(r.status().message().rfind(c.error, 0), 0u)
        << r.status() << "\nexpected: " << c.error;
  }
  // At the bounds, and integers written as floats, are fine.
  auto ok = ParseExperimentSpec(head + R"(, "budget": {"steps_per_trial": 1000000000},
      "early_stopping": {"rule": "asha", "reduction_factor": 1.5, "min_resource": 2.0, "max_resource": 1e9}})");
  EXPECT_TRUE(ok.ok()) << ok.status();
}

// Every duration in seconds is bounded before anything multiplies it into
// milliseconds: 1e16 s used to be taken, and overflowed into a wall-time
// budget that had already passed.
TEST(ExperimentSpec, DurationsAreBoundedBeforeAnyMultiply) {
  const std::string head = R"({"name": "x", "objective": {"metric": "loss"},
      "spaces": [{"name": "s", "params": {"x": {"type": "float", "low": 0, "high": 1}}}])";
  const std::string client = R"("executor": {"client": {}})";
  const std::string prices = R"("prices": {"cpu": 1})";
  struct Case {
    std::string add, error;
  } cases[] = {
      {R"("budget": {"max_wall_time_s": 1e16}, )" + client,
       "budget.max_wall_time_s: must be at most 315360000 s (3650 days), got 10000000000000000"},
      {R"("budget": {"max_wall_time_s": 315360001}, )" + client,
       "budget.max_wall_time_s: must be at most 315360000 s (3650 days)"},
      {R"("budget": {"max_wall_time_s": 9223372036854775807}, )" + client,
       "budget.max_wall_time_s: must be at most 315360000 s"},
      {R"("budget": {"max_wall_time_s": 0}, )" + client,
       "budget.max_wall_time_s: must be at least 1"},
      {R"("executor": {"command": {"argv": ["run"], "timeout_s": 1e18}})",
       "executor.command.timeout_s: must be at most 315360000 s (3650 days), got "
       "1000000000000000000"},
      {R"("executor": {"command": {"argv": ["run"], "timeout_s": 315360001}})",
       "executor.command.timeout_s: must be at most 315360000 s"},
      {R"("cost": {)" + prices + R"(, "deadline_s": 1e16}, )" + client,
       "cost.deadline_s: must be at most 315360000 s"},
      {R"("placement": {"max_wait_s": 1e16}, )" + client,
       "placement.max_wait_s: must be at most 31536000"},
  };
  for (const auto& c : cases) {
    auto r = ParseExperimentSpec(head + ", " + c.add + "}");
    ASSERT_FALSE(r.ok()) << c.add;
    EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status();
    EXPECT_EQ(r.status().message().rfind(c.error, 0), 0u)
        << r.status() << "\nexpected: " << c.error;
  }
  // At the bound each is taken, and its milliseconds fit (with room) in int64.
  auto ok = ParseExperimentSpec(head + R"(, "budget": {"max_wall_time_s": 315360000},
      "cost": {)" + prices + R"(, "deadline_s": 315360000},
      "executor": {"command": {"argv": ["run"], "timeout_s": 315360000}}})");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok->max_wall_time_s, kMaxSpecSeconds);
  EXPECT_EQ(*ok->timeout_s, kMaxSpecSeconds);
  EXPECT_EQ(*ok->deadline_s, kMaxSpecSeconds);
  EXPECT_LT(kMaxSpecSeconds, INT64_MAX / 1000 / 1'000'000 / 2) << "as nanoseconds, twice over";
}

// cost.budget: money in the prices' unit, for worker trials, with prices.
TEST(ExperimentSpec, ACostBudgetNeedsPricesAndWorkerTrials) {
  const std::string head = R"({"name": "x", "objective": {"metric": "loss"},
      "spaces": [{"name": "s", "params": {"x": {"type": "float", "low": 0, "high": 1}}}])";
  const std::string command = R"("executor": {"command": {"argv": ["run"]}})";
  struct Case {
    std::string add, error;
  } cases[] = {
      {R"("cost": {"prices": {"cpu": 1}, "budget": 0}, )" + command,
       "cost.budget: must be an amount of money > 0"},
      {R"("cost": {"prices": {"cpu": 1}, "budget": "5"}, )" + command,
       "cost.budget: must be an amount of money > 0"},
      {R"("cost": {"budget": 5}, )" + command,
       "cost.budget: device time is charged at the prices; give cost.prices"},
      {R"("cost": {"prices": {"cpu": 1}, "budget": 5}, "executor": {"client": {}})",
       "cost.budget: an ask/tell client's trials run on its own machines"},
  };
  for (const auto& c : cases) {
    auto r = ParseExperimentSpec(head + ", " + c.add + "}");
    ASSERT_FALSE(r.ok()) << c.add;
    EXPECT_EQ(r.status().message().rfind(c.error, 0), 0u)
        << r.status() << "\nexpected: " << c.error;
  }
  auto ok = ParseExperimentSpec(head + R"(, "cost": {"prices": {"cpu": 2}, "budget": 12.5}, )" +
                                command + "}");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->budget, 12.5);
  EXPECT_EQ(ok->source["cost"]["budget"], 12.5) << "stored with the spec";
  // The one price rule: the class's own, else the first priced label.
  ExperimentSpec priced;
  priced.prices = {{"gpu:A100", 3}, {"pool=spot", 0.5}, {"zone=b", 0.7}};
  EXPECT_EQ(PricePerHour(priced, "gpu:A100", {{"pool", "spot"}}), 3);
  EXPECT_EQ(PricePerHour(priced, "cpu", {{"pool", "spot"}, {"zone", "b"}}), 0.5);
  EXPECT_EQ(PricePerHour(priced, "cpu", {{"zone", "b"}}), 0.7);
  EXPECT_EQ(PricePerHour(priced, "cpu", {{"pool", "dedicated"}}), std::nullopt);
}

// The last step a report may carry: steps_per_trial, for a program that
// counts from 1 as for one that counts from 0; an ask/tell spec that gives
// no steps_per_trial keeps only the bound every step has.
TEST(ExperimentSpec, TheLastStepIsTheBudgetsUnlessAClientGivesNone) {
  const std::string head = R"({"name": "x", "objective": {"metric": "loss"},
      "spaces": [{"name": "s", "params": {"x": {"type": "float", "low": 0, "high": 1}}}], )";
  auto command = ParseExperimentSpec(head + R"("budget": {"steps_per_trial": 5},
      "executor": {"command": {"argv": ["run"]}}})");
  ASSERT_TRUE(command.ok()) << command.status();
  EXPECT_EQ(command->LastStep(), 5);
  EXPECT_TRUE(CheckStep(*command, 0).ok());
  EXPECT_TRUE(CheckStep(*command, 5).ok());
  const Status past = CheckStep(*command, 4611686018427387904);
  EXPECT_TRUE(past.IsInvalidArgument()) << past;
  EXPECT_EQ(past.message(),
            "step: 4611686018427387904 is past the trial's last step, 5 (budget.steps_per_trial)");
  EXPECT_TRUE(CheckStep(*command, 6).IsInvalidArgument());
  EXPECT_TRUE(CheckStep(*command, -1).IsInvalidArgument());
  EXPECT_EQ(DescribeSpec(*command)["budget"]["last_step"], 5);

  auto builtin_default =
      ParseExperimentSpec(head + R"("executor": {"builtin": {"trainer": "t"}}})");
  ASSERT_TRUE(builtin_default.ok()) << builtin_default.status();
  EXPECT_EQ(builtin_default->LastStep(), 10)
      << "the default steps_per_trial is a worker's limit too";

  auto client_given = ParseExperimentSpec(
      head + R"("budget": {"steps_per_trial": 3}, "executor": {"client": {}}})");
  ASSERT_TRUE(client_given.ok()) << client_given.status();
  EXPECT_EQ(client_given->LastStep(), 3);

  auto client_none =
      ParseExperimentSpec(head + R"("budget": {"max_trials": 2}, "executor": {"client": {}}})");
  ASSERT_TRUE(client_none.ok()) << client_none.status();
  EXPECT_EQ(client_none->steps_per_trial, 10);
  EXPECT_EQ(client_none->LastStep(), kMaxSpecSteps);
  EXPECT_TRUE(CheckStep(*client_none, 500).ok());
  EXPECT_TRUE(CheckStep(*client_none, kMaxSpecSteps + 1).IsInvalidArgument());
}

// Domains whose values a double cannot represent are
// refused with the field's path (they used to be taken, and suggested
// values beyond their bounds).
TEST(ExperimentSpec, UnrepresentableDomainsAreRefused) {
  const std::string head =
      R"({"name": "x", "objective": {"metric": "loss"}, "executor": {"client": {}},
      "spaces": [{"name": "s", "params": {"ok": [1, 2], )";
  struct Case {
    std::string param, error;
  } cases[] = {
      {R"("i": {"type": "int", "low": -9223372036854775807, "high": 9223372036854775807})",
       "spaces[0].params.i.low: an int parameter's bounds must be within -2^53..2^53"},
      {R"("f": {"type": "float", "low": 0, "high": 1e308, "step": 1e-300})",
       "spaces[0].params.f.step: (high - low) / step must be at most 2^53"},
      {R"("f": {"type": "float", "low": -1e308, "high": 1e308})",
       "spaces[0].params.f.high: high - low must be a finite number"},
  };
  for (const auto& c : cases) {
    auto r = ParseExperimentSpec(head + c.param + "}}]}");
    ASSERT_FALSE(r.ok()) << c.param;
    EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status();
    EXPECT_EQ(r.status().message().rfind(c.error, 0), 0u)
        << r.status() << "\nexpected: " << c.error;
  }
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

// The specs a user runs first (the README's main job among them) parse as
// they are shipped; a change to the parser or to an example that breaks one
// fails here rather than on a newcomer's first command.
TEST(ExperimentSpec, EveryShippedExampleParses) {
  int specs = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(HPO_SOURCE_DIR) + "/examples")) {
    if (entry.path().extension() != ".yaml") continue;
    std::ifstream in(entry.path());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto spec = ParseExperimentSpec(text);
    EXPECT_TRUE(spec.ok()) << entry.path() << ": " << spec.status();
    ++specs;
  }
  EXPECT_GE(specs, 5) << "examples/*.yaml";
}

// docs/spec.md documents every field the parser accepts. The parser says
// which names a mapping takes when it meets one it does not know ("unknown
// field (expected a, b, c)"), so each mapping of a valid spec gets an
// unknown field and every name the answer lists must be in the reference,
// as a field (`name`, `name:` or a heading). A field added to the parser
// and not to the page fails here.
TEST(ExperimentSpec, TheSpecReferenceDocumentsEveryFieldTheParserAccepts) {
  std::ifstream in(std::string(HPO_SOURCE_DIR) + "/docs/spec.md");
  ASSERT_TRUE(in) << "docs/spec.md";
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const json base = {
      {"name", "doc"},
      {"objective", {{"metric", "loss"}, {"direction", "minimize"}}},
      {"spaces",
       {{{"name", "s"}, {"params", {{"x", {{"type", "float"}, {"low", 0}, {"high", 1}}}}}}}},
      {"system", {{"threads", {{"type", "int"}, {"low", 1}, {"high", 4}}}}},
      {"algorithm", {{"sampler", "tpe"}, {"seed", 1}}},
      {"early_stopping", {{"rule", "asha"}, {"type", "stop"}}},
      {"placement", {{"policy", "speed"}}},
      {"cost", {{"prices", {{"pool=cpu", 1.0}}}, {"budget", 5}}},
      {"budget", {{"max_trials", 10}}},
      {"executor", {{"builtin", {{"trainer", "fashion-mnist-mlp"}}}}}};
  json command = base;
  command["executor"] = {{"command", {{"argv", {"true"}}}}};
  const auto with = [&](json spec, const std::string& pointer, const json& value) {
    spec[json::json_pointer(pointer)] = value;
    return spec;
  };
  // (spec, the mapping that gets the unknown field)
  const std::vector<std::pair<json, std::string>> cases = {
      {base, ""},
      {base, "/objective"},
      {base, "/spaces/0"},
      {base, "/spaces/0/params/x"},
      {base, "/system/threads"},
      {base, "/algorithm"},
      {base, "/early_stopping"},
      {with(base, "/early_stopping", {{"rule", "median"}}), "/early_stopping"},
      {with(base, "/early_stopping", {{"rule", "hyperband"}}), "/early_stopping"},
      {with(base, "/early_stopping", {{"rule", "asha"}, {"type", "promotion"}}), "/early_stopping"},
      {base, "/placement"},
      {base, "/cost"},
      {base, "/budget"},
      {base, "/executor"},
      {base, "/executor/builtin"},
      {command, "/executor/command"},
  };
  const std::string kUnknown = "zz_not_a_field";
  size_t names = 0;
  for (const auto& [spec, pointer] : cases) {
    json bad = spec;
    bad[json::json_pointer(pointer + "/" + kUnknown)] = 1;
    auto r = ParseExperimentSpec(bad);
    ASSERT_FALSE(r.ok()) << pointer;
    const std::string message = r.status().message();
    // A mapping of alternatives (executor) names them instead.
    std::string marker = kUnknown + ": unknown field (expected ";
    size_t at = message.find(marker);
    if (at == std::string::npos) {
      marker = "must hold exactly one of ";
      at = message.find(marker);
    }
    ASSERT_NE(at, std::string::npos) << pointer << ": " << message;
    std::string list = message.substr(at + marker.size());
    list = list.substr(0, list.find(')'));
    for (size_t from = 0; from <= list.size();) {
      size_t end = list.find(", ", from);
      std::string name =
          list.substr(from, end == std::string::npos ? std::string::npos : end - from);
      from = end == std::string::npos ? list.size() + 1 : end + 2;
      if (name.rfind("or ", 0) == 0) name = name.substr(3);
      if (const size_t o = name.find(" or "); o != std::string::npos) {  // "choices or conditional"
        EXPECT_TRUE(doc.find("`" + name.substr(o + 4)) != std::string::npos ||
                    doc.find(name.substr(o + 4) + ":") != std::string::npos)
            << pointer << ": " << name.substr(o + 4) << " is not in docs/spec.md";
        name = name.substr(0, o);
      }
      ++names;
      EXPECT_TRUE(doc.find("`" + name) != std::string::npos ||
                  doc.find(name + ":") != std::string::npos ||
                  doc.find("## " + name) != std::string::npos)
          << (pointer.empty() ? "the top level" : pointer) << ": the field " << name
          << " is not in docs/spec.md";
    }
  }
  EXPECT_GT(names, 40u) << "the parser's answers were read";
}

}  // namespace
}  // namespace hpo::server
