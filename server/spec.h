// The experiment spec: what a user submits (YAML or JSON), validated into a
// typed ExperimentSpec. Every error names the field's path, e.g.
// "budget.max_parallel: must be at least 1" or
// "spaces[1].params.lr.low: must be < high".
//
// A complete example (examples/fashion-mnist.yaml is a real one):
//
//   name: fashion-mnist
//   objective: {metric: accuracy, direction: maximize}
//   spaces:                          # one or more named search spaces
//     - name: mlp
//       params:
//         lr: {type: float, low: 1.0e-4, high: 0.1, log: true}
//         optimizer: {type: categorical, choices: [sgd, adam],
//                     conditional: {sgd: {momentum: {type: float, low: 0, high: 0.99}}}}
//   system:                          # tuned inside each trial, not by the sampler
//     batch_size: {type: int, low: 32, high: 512, log: true, affects_accuracy: false}
//     threads: {type: int, low: 1, high: 4}    # co-tuned epoch by epoch (PipeTune)
//   algorithm: {sampler: auto, seed: 42}         # auto (default) | tpe | gp | random
//   early_stopping: {rule: asha, min_resource: 1, reduction_factor: 3}
//                                                # none | median | asha | hyperband
//   budget: {max_trials: 40, max_parallel: 2, max_wall_time_s: 900, steps_per_trial: 10}
//   executor:                        # exactly one of builtin, command, client
//     builtin: {trainer: fashion-mnist-mlp, args: {validation_fraction: 0.1}}
//     # command: {argv: [python3, train.py, "--lr={lr}"], env: {K: V}, timeout_s: 600}
//     # client: {}                   # ask/tell over REST
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "search/history.h"
#include "search/space.h"

namespace hpo::server {

struct SystemParam {
  search::Param domain;          // int or float or categorical, as in a space
  bool may_change_mid_trial = true;  // "mutable": may the co-tuner change it between epochs
  // "affects_accuracy": searched as a hyperparameter of every space instead
  // of co-tuned. Defaults to true for names containing "batch" (a batch size
  // changes what the model learns unless the spec says otherwise).
  bool affects_accuracy = false;
};

struct ExperimentSpec {
  std::string name;
  std::string metric;
  search::Direction direction = search::Direction::kMinimize;
  std::vector<search::SearchSpace> spaces;
  std::vector<SystemParam> system;

  // A name of search/registry.h: auto (the default), tpe, gp or random.
  std::string sampler = "auto";
  uint64_t seed = 0;

  std::string early_stopping = "none";  // none | median | asha | hyperband
  nlohmann::json early_stopping_options = nlohmann::json::object();

  int64_t max_trials = 100;
  int64_t max_parallel = 4;
  std::optional<int64_t> max_wall_time_s;
  int64_t steps_per_trial = 10;

  enum class ExecutorKind { kBuiltin, kCommand, kClient };
  ExecutorKind executor = ExecutorKind::kClient;
  std::string trainer;                 // builtin
  nlohmann::json trainer_args = nlohmann::json::object();
  std::vector<std::string> argv;       // command, with {param} placeholders
  std::map<std::string, std::string> env;
  std::optional<int64_t> timeout_s;

  nlohmann::json source;  // the spec as given, in JSON form
};

// Limits on what a spec may hold; a spec beyond one is InvalidArgument,
// naming the limit.
inline constexpr size_t kMaxSpecBytes = 1 << 20;         // the text
inline constexpr size_t kMaxSpecNodes = 100'000;         // values, after YAML aliases
inline constexpr int kMaxSpecDepth = 32;                 // nesting of mappings and lists
inline constexpr size_t kMaxSpecNameLength = 256;        // every key (names of params, metrics, ...)
inline constexpr size_t kMaxSpecStringLength = 16'384;   // every string value (argv entries, env values)

// Parses YAML or JSON text (JSON is YAML; both go through the same checks).
Result<ExperimentSpec> ParseExperimentSpec(const std::string& text);
Result<ExperimentSpec> ParseExperimentSpec(const nlohmann::json& j);

// YAML text to JSON: plain scalars become numbers, booleans or null where
// they read as such; quoted scalars stay strings. Errors give line and column.
Result<nlohmann::json> YamlToJson(const std::string& text);

}  // namespace hpo::server
