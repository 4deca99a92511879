// The experiment spec: what a user submits (YAML or JSON), validated into a
// typed ExperimentSpec. Every error names the field's path, e.g.
// "budget.max_parallel: must be at least 1" or
// "spaces[1].params.lr.low: must be < high".
//
// A complete example (examples/fashion-mnist.yaml is a real one):
//
//   name: fashion-mnist
//   objective: {metric: accuracy, direction: maximize}
//   # or several, and bounds on final metrics (docs/spec.md, objectives):
//   # objectives: [{metric: accuracy, direction: maximize},
//   #              {metric: device_seconds, direction: minimize}]
//   # constraints: [{metric: params, max: 200000}]
//   spaces:                          # one or more named search spaces
//     - name: mlp
//       params:
//         lr: {type: float, low: 1.0e-4, high: 0.1, log: true}
//         optimizer: {type: categorical, choices: [sgd, adam],
//                     conditional: {sgd: {momentum: {type: float, low: 0, high: 0.99}}}}
//   system:                          # tuned inside each trial, not by the sampler
//     batch_size: {type: int, low: 32, high: 512, log: true, affects_accuracy: false}
//     threads: {type: int, low: 1, high: 4}    # co-tuned epoch by epoch (PipeTune)
//     inter_op_threads: {type: int, low: 1, high: 2}  # mutable: false by default (LibTorch sets
//                                      # it once per process): chosen where a trial starts, never
//                                      # probed inside one; `mutable: true|false` says either way
//                                      # (and the worker's declaration too:
//                                      docs/system-parameters.md)
//   workload: resnet-cifar           # optional: share speed history with experiments naming it
//   algorithm: {sampler: auto, seed: 42}         # auto (default) | tpe | gp | random
//   early_stopping: {rule: asha, min_resource: 1, reduction_factor: 3, type: stop}
//                                                # none | median | asha | hyperband;
//                                                # absent: asha, type stop, min_resource 1,
//                                                # reduction_factor 3 for worker experiments
//                                                # (built-in and command), none for ask/tell.
//                                                # type: stop (the default: a trial goes on at
//                                                # once or stops at each rung) | promotion
//                                                # (pause at each rung with a checkpoint, promote
//                                                # the best on a free device; the executor must
//                                                # checkpoint).
//                                                # promotion: top_fraction (default: the best
//                                                # 1/eta of a rung's results) | quantile (the
//                                                # better of two goes on at once; then those at
//                                                # or below the R_j/R_j+1 quantile), type
//                                                # promotion only (search/promotion.h)
//                                                # Options by rule, with their defaults (what each
//                                                # means: search/pruner.h):
//                                                #  median: startup_trials 5, warmup_steps 0,
//                                                #    interval_steps 1, min_trials_at_step 1
//                                                #  asha: min_resource 1, reduction_factor 3,
//                                                #    max_resource budget.steps_per_trial,
//                                                #    min_early_stopping_rate 0, bootstrap_count 0
//                                                #  hyperband: min_resource 1, reduction_factor 3,
//                                                #    max_resource budget.steps_per_trial
//   placement: {policy: speed, max_wait_s: 600}  # speed | fifo | shadho (with class_order: [...])
//                                                # migrate: true|false (speed policy, stop-type
//                                                # asha/hyperband, built-in trainers; default true
//                                                # there): a trial that survives a rung moves to a
//                                                # faster device, preempting less advanced work
//   cost: {prices: {"pool=gpu": 2.50, "cpu:EPYC:x4.0": 0.20}, deadline_s: 3600, budget: 40}
//                                                # per hour, by device class or worker label;
//                                                # deadline_s from submission, or deadline:
//                                                # "2026-12-01T18:00:00Z"; budget: the most
//                                                # the experiment may spend, in the prices'
//                                                # money, on its trials' device time
//   budget: {max_trials: 40, max_parallel: 2, max_wall_time_s: 900, steps_per_trial: 10}
//                                                # a report or checkpoint of a step past
//                                                # steps_per_trial is refused (ExperimentSpec::
//                                                # LastStep); every *_s is at most ten years
//                                                # (kMaxSpecSeconds)
//   executor:                        # exactly one of builtin, command, client
//     builtin: {trainer: fashion-mnist-mlp, args: {validation_fraction: 0.1}}
//     # command: {argv: [python3, train.py, "--lr={lr}"], env: {K: V}, timeout_s: 600,
//     #           checkpoints: true}  # it keeps the HPO_CHECKPOINT_DIR contract
//     (worker/command_executor.h) # client: {}                   # ask/tell over REST
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/json_limits.h"
#include "common/status.h"
#include "search/history.h"
#include "search/promotion.h"
#include "search/space.h"

namespace hpo::server {

struct SystemParam {
  search::Param domain;  // int or float or categorical, as in a space
  // "mutable": may the co-tuner change it between epochs. The worker has a
  // say too: it is probed only where the worker's program can change it
  // mid-trial as well (scheduler::RestrictToDeclared).
  bool may_change_mid_trial = true;
  // "affects_accuracy": searched as a hyperparameter of every space instead
  // of co-tuned. Defaults to true for names containing "batch" (a batch size
  // changes what the model learns unless the spec says otherwise).
  bool affects_accuracy = false;
};

// One objective: a metric the trials report (or one the server derives,
// IsDerivedMetric) and whether smaller or larger is better.
struct Objective {
  std::string metric;
  search::Direction direction = search::Direction::kMinimize;
};

// A bound on a trial's final metric: feasible only at or below `max` and at
// or above `min` (at least one is given).
struct Constraint {
  std::string metric;
  std::optional<double> max;
  std::optional<double> min;
};

// The metrics the server derives from a trial's measurements, when the
// spec's objectives or constraints name one: `device_seconds` (the device
// time its steps were charged), `cost` (that time at cost.prices) and
// `samples_per_sec` (the mean of its steps' speeds). Added to each report
// as it is stored (the trial's total so far) and to the final metrics.
bool IsDerivedMetric(const std::string& metric);
// The metrics the built-in trainers report at each step (their final
// metrics add test_accuracy and test_loss): a constraint or objective on
// another name could never be met.
const std::vector<std::string>& BuiltinTrainerMetrics();

struct ExperimentSpec {
  std::string name;
  // The first objective (the only one of `objective:`): what every
  // single-objective part of the server (the median rule, promotion-type
  // rungs, the space ranking, BestTrial) reads.
  std::string metric;
  search::Direction direction = search::Direction::kMinimize;
  // Every objective, in spec order (`objectives:`, or the one of
  // `objective:`); objectives[0] is metric and direction.
  std::vector<Objective> objectives;
  std::vector<Constraint> constraints;
  bool SeveralObjectives() const { return objectives.size() > 1; }
  // Whether an objective or constraint names a derived metric.
  bool UsesDerivedMetrics() const;
  std::vector<search::SearchSpace> spaces;
  std::vector<SystemParam> system;
  // `workload:` names what is trained (e.g. resnet-cifar) so that experiments
  // naming the same one share what the speed model learned. Without it, the
  // key is made from what is run (WorkloadKey): two runs of one spec share it.
  std::string workload;
  // Per space, in spec order: the workload key its speed observations,
  // metrics and fleet views are kept under (WorkloadKey), made once.
  std::vector<std::string> workload_keys;

  // A name of search/registry.h: auto (the default), tpe, gp or random.
  std::string sampler = "auto";
  uint64_t seed = 0;

  // none | median | asha | hyperband. Without an early_stopping section:
  // asha (stop-type, its default options) for worker experiments, none for
  // ask/tell clients (ResolveStoppingType; bench/README.md, hetero, says
  // why).
  std::string early_stopping = "none";
  bool early_stopping_given = false;  // the spec has an early_stopping section
  nlohmann::json early_stopping_options = nlohmann::json::object();
  // kPromotion: trials pause at each rung with a checkpoint and the best are
  // promoted on free devices (search/promotion.h); kStop: trials run on
  // and are stopped at a rung (search/pruner.h).
  enum class StoppingType { kStop, kPromotion };
  StoppingType early_stopping_type = StoppingType::kStop;
  // kPromotion: which paused trials may go on (search/promotion.h).
  search::PromotionCriterion promotion_criterion = search::PromotionCriterion::kTopFraction;

  // Where trials run (scheduler/policy.h).
  std::string placement_policy = "speed";          // speed | fifo | shadho
  std::vector<std::string> placement_class_order;  // shadho: device classes, strongest first
  double placement_max_wait_s = 600;
  // Stop-type asha or hyperband on the built-in trainers under the speed
  // policy: a trial that survives a rung may pause there, with a
  // checkpoint, and go on on a faster device, preempting less advanced work
  // there (scheduler/policy.h, DecideMove). placement.migrate; the default
  // is true wherever it applies.
  bool placement_migrate = false;
  // Cost-aware placement: the price per hour of a device, by its class or
  // by a label of its worker ("pool=gpu"), and a deadline for the work.
  std::map<std::string, double> prices;
  std::optional<int64_t> deadline_s;   // seconds from the experiment's creation
  std::optional<int64_t> deadline_ms;  // or a moment (Unix ms)
  // The most the trials' device time may cost, in the prices' money: no
  // segment starts that its device could not pay for out of what is left,
  // and the experiment completes once it is spent (Engine::Tick).
  std::optional<double> budget;

  int64_t max_trials = 100;
  int64_t max_parallel = 4;
  std::optional<int64_t> max_wall_time_s;
  int64_t steps_per_trial = 10;
  bool steps_per_trial_given = false;  // the spec says it (else the default)
  // The last step a report or a checkpoint may carry (CheckStep):
  // steps_per_trial, whether a program counts from 0 or from 1. An ask/tell
  // client's spec that does not give budget.steps_per_trial sets no limit of
  // its own (the client counts its steps; the default 10 only sizes early
  // stopping's rungs): kMaxSpecSteps.
  int64_t LastStep() const;

  enum class ExecutorKind { kBuiltin, kCommand, kClient };
  ExecutorKind executor = ExecutorKind::kClient;
  std::string trainer;  // builtin
  nlohmann::json trainer_args = nlohmann::json::object();
  std::vector<std::string> argv;  // command, with {param} placeholders
  std::map<std::string, std::string> env;
  std::optional<int64_t> timeout_s;
  bool command_checkpoints = false;  // command: it keeps the checkpoint contract

  nlohmann::json source;  // the spec as given, in JSON form
};

// The most objectives a spec may have (`objectives:`): the hypervolume
// and non-dominated sorting behind the samplers and the rungs grow
// quickly with them, and past four a front is most of any sample.
inline constexpr size_t kMaxObjectives = 4;
inline constexpr size_t kMaxConstraints = 16;

// Limits on what a spec may hold; a spec beyond one is InvalidArgument,
// naming the limit.
// The first three are those of every JSON the server reads (json_limits.h).
inline constexpr size_t kMaxSpecBytes = kMaxJsonBytes;   // the text
inline constexpr size_t kMaxSpecNodes = kMaxJsonValues;  // values, after YAML aliases
// Bytes of keys and scalars after YAML aliases: a spec's own text is at most
// kMaxSpecBytes, and expanding aliases may repeat some of it, not more.
inline constexpr size_t kMaxSpecExpandedBytes = 4 * kMaxSpecBytes;
inline constexpr int kMaxSpecDepth = kMaxJsonDepth;  // mappings and lists open at once
inline constexpr size_t kMaxSpecNameLength = 256;    // every key (names of params, metrics, ...)
inline constexpr size_t kMaxSpecStringLength =
    16'384;  // every string value (argv entries, env values)
// budget.steps_per_trial, and every step-valued option of early_stopping
// (min_resource, max_resource, warmup_steps, interval_steps). A billion
// steps is far beyond any trial (a report per step, so a billion reports);
// it keeps every step, rung and bracket exact in a double (< 2^53) and the
// pruners' work per report small (log_1.5(1e9) = 51 rungs at most).
inline constexpr int64_t kMaxSpecSteps = 1'000'000'000;
// Every duration of a spec in seconds: budget.max_wall_time_s,
// executor.command.timeout_s and cost.deadline_s, at most ten years
// (3,650 days). Each becomes milliseconds (x 1000) and, in a std::chrono
// clock, nanoseconds (x 10^6 more): ten years is 3.2e17 ns, well within
// int64 (9.2e18) with room to add it to any clock's now, where 1e16 s
// overflowed into a budget that had already passed. Ten years, not one,
// because cost.deadline_s has allowed that much from the start, and no
// budget or timeout beyond it means more than having none.
inline constexpr int64_t kMaxSpecSeconds = int64_t{3650} * 86'400;
// placement.max_wait_s, how long a trial waits for a faster device: at most
// a year, as it has always been.
inline constexpr int64_t kMaxSpecWaitSeconds = int64_t{365} * 86'400;
// Every count-valued option of early_stopping (startup_trials,
// min_trials_at_step, bootstrap_count, min_early_stopping_rate): the
// pruners hold them as int; beyond a billion a rule would never act anyway.
inline constexpr int64_t kMaxSpecCount = 1'000'000'000;

// OK when a report or checkpoint of `step` is within the experiment's
// steps: 0 <= step <= spec.LastStep(). InvalidArgument naming the step and
// the limit otherwise ("step: 11 is past the trial's last step, 10
// (budget.steps_per_trial)").
Status CheckStep(const ExperimentSpec& spec, int64_t step);

// A device's price per hour under the spec's cost.prices: the price of its
// class, else of the first of its worker's labels ("key=value", in key
// order) that has one; nullopt when neither has. The one rule placement,
// the charge for device time and GET /api/v1/workers go by.
std::optional<double> PricePerHour(const ExperimentSpec& spec, const std::string& device_class,
                                   const std::map<std::string, std::string>& labels);

// Parses YAML or JSON text (JSON is YAML; both go through the same checks).
// Text that begins with { or [ is read by the JSON parser first, within the
// limits above (so a JSON spec's \u surrogate pairs are one character, as
// JSON says; yaml-cpp refuses them); what that parser does not take as JSON
// goes to the YAML parser.
Result<ExperimentSpec> ParseExperimentSpec(const std::string& text);
Result<ExperimentSpec> ParseExperimentSpec(const nlohmann::json& j);
// A spec as the store keeps it (ExperimentSpec::source as JSON). Since the
// early-stopping defaults are pinned in it at creation, one without an
// explicit early_stopping rule and type was stored by an older server and
// gets that server's defaults: no early stopping, and promotion-type asha
// and hyperband where trials could checkpoint.
Result<ExperimentSpec> ParseStoredExperimentSpec(const std::string& text);

// What a space's trials train, as the key the speed model, the fleet views
// and the hpo_device_samples_per_second metric group speeds by:
// "<workload>/<space>" when the spec names a `workload:`; otherwise
// "<program>/<space>@<hash>", the program being the built-in trainer, the
// command's base name or "client", and the hash (16 hex digits, FNV-1a) of
// the executor (trainer and its args, or argv and env) and the space's
// parameters. So two runs of one spec share it, its labels do not grow with
// the number of experiments, and a different program or space (two scripts
// under one interpreter) gets its own. Not the experiment's id.
std::string WorkloadKey(const ExperimentSpec& spec, size_t space);

// The spec as the server reads it, for a dry run (POST
// /api/v1/experiments:validate, `hpctl submit --dry-run`): defaults filled
// in, each space's parameters typed and in sampling order (system
// parameters that affect accuracy appended to every space, conditional ones
// naming the choice they hang on), the early-stopping type resolved. A
// description for people and tools; it is not a spec to submit again.
nlohmann::json DescribeSpec(const ExperimentSpec& spec);

// YAML text to JSON: plain scalars become numbers, booleans or null where
// they read as such; quoted scalars stay strings. Errors give line and column.
// JSON text (beginning with { or [) goes to the JSON parser, as above.
Result<nlohmann::json> YamlToJson(const std::string& text);

}  // namespace hpo::server
