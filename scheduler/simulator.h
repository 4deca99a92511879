// The fleet simulator: one experiment on a simulated fleet of workers, in
// simulated time, decided by the product's own code. Pure (no I/O, no
// threads, no clock) and deterministic for a seed.
//
// What decides is what the server runs, called the way server/engine/lease.cc
// calls it, with no second copy of any rule:
//   * search::RankSpaces / PickSpace: the spaces' shares and the ranking's
//     pick, on every ask;
//   * scheduler::OfferWork (offer.h): what the experiment offers the asking
//     device, from the trials' phases and search::PromotionRule;
//   * scheduler::Decide (policy.h): what the device runs (or the hook that
//     wraps it, SimulatorOptions::decide);
//   * scheduler::DecideMove (policy.h), with migrate: whether a trial that
//     survived a rung moves to a faster class, and whom it preempts there
//     (the least advanced trial on a device of that class, the newest of
//     those tied), the targets built as the engine builds them;
//   * the sampler search::MakeSampler (search/registry.h) makes from its spec name, for a new
//     trial, from the same ranking's generator, and the stopping-type pruner
//     on every report where the experiment is configured so;
//   * scheduler::SpeedModel: the classes' benchmarks as the prior, and every
//     report's measured speed (the engine observes each report's samples/s);
//   * scheduler::StepSamples (step_samples.h): samples per step as the
//     engine's fleet view learns it, from the time between a trial's
//     reports; placement knows nothing of samples_per_step before that;
//   * scheduler::FleetSummary (fleet_summary.h): the live devices' classes
//     and free times, kept as devices die, come back, start and end leases,
//     as the engine's fleet view keeps its own.
//
// What the simulator owns is the world and the store's bookkeeping:
//   * Devices in K = min(workers, max_device_classes) classes, class k's
//     speed slowest * spread^u_k with u log-uniform in [0, 1] (u = 0 and 1
//     pinned to two classes, so the spread is exact); a device within
//     device_sigma of its class, a lease within lease_sigma of its device
//     (lognormal). A class's benchmark (the prior) is its speed times
//     lognormal(benchmark_sigma): a GEMM score is not the workload.
//   * Two search spaces with a synthetic learning curve each (see
//     simulator.cc): loss(step) = a + b exp(-c step) + noise, a and c from
//     the trial's parameters, noise fixed per (trial, step).
//   * Failures: a worker dies inside a segment with probability such that a
//     whole trial fails with `failure`; its lease expires lease_timeout_s
//     later (back to pending, or a resumed segment back to paused at its
//     rung, its steps after the checkpoint deleted; failed after
//     max_attempts leases of one segment) and a new worker takes the
//     device's place replace_after_s after the death.
//   * Phases as the store keeps them (pending, on a device, paused, finished),
//     levels, resume steps, stop steps; checkpoints as "resume where it
//     paused" (always usable).
// A device asks when it is free; with nothing to run it asks again after the
// answer's retry_after_s (an empty offer: 1 s, the engine's). An ask that
// finds no work on offer at all is skipped until the trials change, which
// gives the same decisions at the same times with less work.
//
// The run ends when a report's value first reaches `target` (bench/hetero's
// event: a validation accuracy reported at any step), when nothing
// can change any more (nothing on a device, nothing offered), or at
// max_sim_s / max_decisions.
//
// SimulatorOptions::on_event sees the run as a worker and the server would:
// the fleet, each ask and its answer, each report and what became of its
// trial (SimEvent). tests/sim_engine_trace_test.cc replays those asks and
// reports into the real Engine over a real store in virtual time and checks
// that the engine answers each one as the simulator decided it.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "scheduler/fleet_summary.h"
#include "scheduler/policy.h"
#include "scheduler/speed_model.h"
#include "search/space.h"

namespace hpo::scheduler {

// The policy call: scheduler::Decide unless a caller (a benchmark timing it)
// wraps it.
// It gets the simulator's live fleet summary and the simulated time.
using DecideFn = std::function<PolicyDecision(const AskingDevice&, const FleetSummary&,
                                              double now_s, const std::vector<WorkItem>&,
                                              const SpeedModel&, const PolicyOptions&)>;

// One step of a run, as a worker and the server see it (SimulatorOptions::
// on_event), in the order the simulator applies them. Devices by index,
// trials by number (their creation order, from 0).
struct SimEvent {
  enum class Kind {
    kDevice,   // before the first ask, once per device: its id, class and the class's benchmark
    kAsk,      // a free device asked for work, and what it was given
    kReport,   // the device's trial reported a step, and what became of the trial
    kLost,     // the device's worker died; its trial's lease is held until it expires
    kExpired,  // the trial's lease expired: it is pending, paused at its rung, or failed
    kBack,     // a new worker took the dead one's device
  };
  // What a report left the trial (kReport): it goes on; the stopping-type
  // rule pruned it; it paused to make room for a more advanced trial
  // (preempted), to move to a faster class (moved), or at its lease's
  // stop step (paused); it completed its budget.
  enum class Outcome { kContinue, kPruned, kPreempted, kMoved, kPaused, kCompleted };
  Kind kind = Kind::kAsk;
  double t = 0;  // simulated seconds
  int64_t device = -1;
  // kDevice.
  std::string device_id, device_class;
  double benchmark = 0;  // the class's GEMM score, as its workers register it
  // kAsk: whether anything was on offer (the policy was asked), and whether
  // the device got work: which kind, in which space, at which level, from
  // which step to which stop step (none: to the end), and the policy's reason.
  bool offered = false;
  bool ran = false;
  WorkItem::Kind item = WorkItem::Kind::kNew;
  int space = 0;
  int level = 0;
  int64_t from_step = 0;
  std::optional<int64_t> stop_step;
  std::string reason;
  search::Assignment params;  // kAsk that created a trial: its parameters
  // kAsk that ran, kReport, kLost and kExpired: the trial.
  int64_t trial = -1;
  // kReport: the step, its value and the worker's measured samples/s.
  int64_t step = 0;
  double value = 0;
  double samples_per_sec = 0;
  Outcome outcome = Outcome::kContinue;
  std::string to_class;   // kMoved: the class it moves toward
  int64_t preempts = -1;  // kMoved: the trial asked to pause at its next step for it, or -1
};

// A world made from traced runs of a real experiment (bench/hetero's), in
// place of the synthetic one: the experiment's spaces, the fleet's devices,
// and what each traced trial reported and cost. A simulated trial takes the
// curve and the cost per step of the nearest traced trial of its space
// (each parameter scaled to [0, 1] as search::Param::ToUnit scales it, a
// different choice or an inactive parameter counting 1); past the end of
// that curve (a trial stopped early) it changes from its last traced step
// as the traced trials of its space that went on and had the closest value
// at that step did (the median of five).
struct TracedTrial {
  size_t space = 0;
  search::Assignment params;   // in spaces[space]
  std::vector<double> values;  // what it reported at steps 1, 2, ... (minimized); not empty
  double step_s = 0;           // seconds per step on a device of speed 1, all costs included
};
struct SimTrace {
  std::vector<search::SearchSpace> spaces;
  std::vector<TracedTrial> trials;  // at least one per space
  // One device per entry, by its relative speed (a CPU quota: 1.0, 0.5, ...).
  std::vector<double> device_speeds;
  // What a lease costs besides its steps: the start of every segment (lease
  // to first step, checkpoint restore) and a checkpoint at a pause.
  double segment_start_s = 0;
  double pause_s = 0;
  // Optional, to replay one traced run: per space, the parameters its new
  // trials take in creation order (the k-th new trial of space s takes
  // replay[s][k]; past the list, the sampler's suggestion). Which space a
  // new trial is in stays the ranking's choice. With the run's own trials
  // in `trials` too, a replayed trial reports its own traced curve, so what
  // the simulation decides is only where and when each trial runs.
  std::vector<std::vector<search::Assignment>> replay;
};

struct SimulatorOptions {
  // --- The world.
  // Set: the traced world (SimTrace); workers, spread, max_device_classes,
  // slowest_samples_per_sec, device_sigma and bowl_scale are then unused.
  std::shared_ptr<const SimTrace> trace;
  int workers = 100;
  double spread = 10;  // fastest class / slowest class; >= 1
  int max_device_classes = 16;
  double slowest_samples_per_sec = 1000;
  double device_sigma = 0.05;
  double lease_sigma = 0.05;
  double benchmark_sigma = 0.4;
  double failure = 0.02;  // chance that a trial run to its end loses its worker once
  double lease_timeout_s = 60;
  double replace_after_s = 120;
  // How an idle device asks again. 0: it polls, every retry_after_s of the
  // policy's answer (1 s when nothing was on offer). Above 0: as the
  // server's long poll (server/grpc/worker_service.cc, --max-lease-wait), it
  // waits up to this long for a change that may give it work (a trial
  // created, paused, finished or requeued), asks again at once when one
  // comes, and otherwise asks again long_poll_retry_s after the wait ends.
  double lease_wait_s = 0;
  double long_poll_retry_s = 0.1;
  // How steep the objective's bowl is around its best (the penalty's
  // factor): steeper means fewer random trials come near the best, so the
  // search, not the first wave's luck, has to find it.
  double bowl_scale = 1;
  uint64_t seed = 0;

  // --- The experiment, as its spec would say.
  std::string sampler = "auto";  // a search/registry.h name; auto is the spec default (TPE on these
                                 // conditional spaces)
  std::string early_stopping = "asha";  // asha | hyperband | median | none
  bool promotion = true;                // early_stopping.type: promotion (asha, hyperband) or stop
  // placement.migrate (stop-type asha or hyperband, the speed policy): a
  // trial that survives a rung may pause there and go on on a faster class,
  // preempting a less advanced trial there (policy.h, DecideMove), as the
  // engine does (server/engine/lease.cc, MaybeMove).
  bool migrate = false;
  int64_t min_resource = 3;
  double reduction_factor = 3;
  int64_t steps_per_trial = 27;
  int64_t max_trials = 0;    // 0: clamp(20 * workers, 1000, 20000)
  int64_t max_parallel = 0;  // 0: workers
  int max_attempts = 3;
  double samples_per_step = 60000;  // the world's: a step takes this over the lease's samples/s
  // The policy's options. shadho with an empty class_order is given the
  // correct one: the classes by true speed, strongest first.
  PolicyOptions policy;
  DecideFn decide;  // empty: scheduler::Decide
  // Called around each ask of a free device: true before its offer is read
  // (built again whenever the trials changed, as the engine builds one per
  // lease), false once the policy decided (before the answer is applied).
  // For a caller timing offer plus decide; the simulator reads no clock.
  std::function<void(bool begin)> ask_probe;
  // Called with every SimEvent, in order (a log for a test; empty: none).
  std::function<void(const SimEvent&)> on_event;

  // --- When the run ends.
  double target = 0.075;  // a reported value (minimized) at or below it
  double max_sim_s = std::numeric_limits<double>::infinity();
  int64_t max_decisions = 0;  // 0: no bound
};

// The segments that ran toward one level (0: a new trial's first).
struct SimLevelStats {
  int64_t segments = 0;  // finished ones (paused, completed or pruned at their end)
  double device_s = 0;
  // Mean of the devices' true speed percentiles (1 = the fleet's fastest).
  double speed_percentile_sum = 0;
  double MeanSpeedPercentile() const { return segments ? speed_percentile_sum / segments : 0; }
  // Resumed segments: how long the trial was paused before it, in total.
  double paused_s = 0;
};

struct SimResult {
  double time_to_target_s = std::numeric_limits<double>::quiet_NaN();  // NaN: not reached
  double end_s = 0;        // simulated time at the end of the run
  double utilization = 0;  // busy device-seconds / (workers * end_s)
  double best = std::numeric_limits<double>::infinity();
  int64_t trials = 0;  // created
  std::vector<int64_t>
      trials_per_space;  // created, by space (0: the good one, 1: the larger, worse one)
  int64_t completed = 0, pruned = 0, failed = 0;
  int64_t paused = 0;                // at the end
  int64_t unfinished = 0;            // pending or on a device at the end
  int64_t decisions = 0;             // calls to the policy
  int64_t idle_answers = 0;          // of them, "nothing for now"
  int64_t promotions = 0;            // resumed segments started
  int64_t moves = 0;                 // migrate: trials that paused at a rung for a faster class
  int64_t preemptions = 0;           // migrate: trials that paused at a step to make room for one
  int64_t moves_resumed = 0;         // moved trials resumed since
  int64_t moves_resumed_faster = 0;  // of them, on a device faster than the one they left
  int max_level = 0;                 // the highest level a segment ran toward
  // The most trials on devices or waiting for one at any time (the store
  // would refuse beyond max_parallel; the simulator records it instead, so
  // a test sees whether the offer ever asked for more).
  int64_t peak_unfinished = 0;
  int64_t max_parallel = 0;                // the one in force
  std::vector<SimLevelStats> levels;       // by level
  std::map<std::string, int64_t> reasons;  // PolicyDecision::reason -> how often
  // The trial that reached the target, segment by segment: level, the
  // device's speed percentile, paused before it (s), its seconds.
  struct Segment {
    int level = 0;
    double speed_percentile = 0;
    double waited_s = 0;
    double seconds = 0;
  };
  std::vector<Segment> winner;
  uint64_t trace = 0;  // a fingerprint of every decision applied, in order
};

class Simulator {
 public:
  // InvalidArgument naming the option: workers < 1, spread < 1, an unknown
  // sampler or early-stopping rule, promotion without asha or hyperband, or
  // the rule's own errors (early_stopping.reduction_factor: ...).
  static Result<std::unique_ptr<Simulator>> Create(SimulatorOptions options);
  ~Simulator();
  Simulator(const Simulator&) = delete;
  Simulator& operator=(const Simulator&) = delete;

  // Runs the experiment once. REQUIRES: called once.
  SimResult Run();

  // The device classes by true speed, strongest first (what shadho is told).
  std::vector<std::string> ClassesStrongestFirst() const;
  // The experiment's search spaces, as SimEvent::space indexes them.
  const std::vector<search::SearchSpace>& spaces() const;
  const SimulatorOptions& options() const { return options_; }

 private:
  struct State;
  Simulator(SimulatorOptions options, std::unique_ptr<State> state);
  SimulatorOptions options_;
  std::unique_ptr<State> state_;
};

}  // namespace hpo::scheduler
