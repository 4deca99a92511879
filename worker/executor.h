// How hpo-worker runs one trial, whatever runs it (a built-in LibTorch
// trainer or the user's program): the executor gets a TrialRun and reports
// every epoch (or step) through a Reporter, which relays to the server and
// says whether to go on.
//
// No LibTorch here: this header is included widely.
#pragma once

#include <atomic>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"

namespace hpo::worker {

// What to run, as leased from the server.
struct TrialRun {
  int64_t trial_id = 0;
  int64_t experiment_id = 0;
  int64_t number = 0;  // within its experiment: what users call the trial
  int attempt = 1;
  uint64_t seed = 0;
  std::string space;
  nlohmann::json params = nlohmann::json::object();  // hyperparameters
  nlohmann::json system = nlohmann::json::object();  // starting system setting
  int64_t max_steps = 10;
  std::string objective_metric;
  // Builtin trainers:
  std::string trainer;
  nlohmann::json trainer_args = nlohmann::json::object();
  // Command executor:
  std::vector<std::string> argv;  // placeholders already filled
  std::map<std::string, std::string> env;
  int64_t timeout_ms = 0;  // 0: none
  // The device to use: "cpu" or "cuda:N".
  std::string device = "cpu";
  int threads = 0;  // 0: all usable cores
  // Checkpoints (promotion-type early stopping). stop_step > 0: the lease
  // ends after that step; its report is answered Verdict::kPause, and the
  // executor then saves the trial's state into checkpoint_dir and returns
  // RunResult::paused. resume_step > 0: checkpoint_dir holds the state
  // saved after that step; the executor restores it and goes on from
  // resume_step + 1 (or returns RunResult::restore_error). The worker
  // uploads and downloads the directory; an executor only reads and writes
  // it. Empty checkpoint_dir: nothing can be saved or restored.
  int64_t stop_step = 0;
  int64_t resume_step = 0;
  std::string checkpoint_dir;
};

// When a trial's program can apply a new value of a system parameter
// (worker.proto SystemChange): between epochs, only where it starts, or
// never. An executor declares this for the parameters it knows; the worker
// sends it with every report, and the server's co-tuner probes inside a
// running trial only what is kMidTrial here and `mutable` in the spec.
enum class SystemChange { kMidTrial, kAtRestart, kFixed };
using SystemChanges = std::map<std::string, SystemChange>;

enum class Verdict {
  kContinue,
  kStop,          // pruned or cancelled: stop within a second, report nothing more
  kChangeSystem,  // continue with Reporter::new_system() from the next epoch
  kPause,         // the lease's stop_step: save the state to TrialRun::checkpoint_dir and end
};

class Reporter {
 public:
  virtual ~Reporter() = default;
  // One step's metrics (must include the objective), the measured speed and
  // the system setting it ran with. Blocks until the server answers.
  virtual Verdict Report(int64_t step, const std::map<std::string, double>& metrics,
                         double samples_per_sec, const nlohmann::json& system) = 0;
  // As Report, with `applied`: the values of `system` the program itself
  // says it applied to this step (worker.proto ReportRequest.applied). The
  // default forgets them.
  virtual Verdict ReportApplied(int64_t step, const std::map<std::string, double>& metrics,
                                double samples_per_sec, const nlohmann::json& system,
                                const nlohmann::json& applied) {
    (void)applied;
    return Report(step, metrics, samples_per_sec, system);
  }
  // The setting to switch to after kChangeSystem.
  virtual nlohmann::json new_system() const { return nlohmann::json::object(); }
  // Set asynchronously (a heartbeat learned the trial was pruned or
  // cancelled, or the worker is shutting down): executors poll it between
  // batches and stop promptly.
  virtual bool stop_requested() const = 0;
};

// The outcome of a trial run.
struct RunResult {
  bool stopped = false;  // ended early by a kStop verdict or stop_requested()
  std::map<std::string, double> final_metrics;
  std::string log_tail;  // last lines of output, kept with the trial
  // Ended by Verdict::kPause. checkpoint_saved: TrialRun::checkpoint_dir
  // holds the state to resume from; otherwise checkpoint_error says why
  // not (the trial is paused without a checkpoint, never failed for it).
  bool paused = false;
  bool checkpoint_saved = false;
  std::string checkpoint_error;
  // Non-empty: the state in TrialRun::checkpoint_dir could not be restored
  // (missing, damaged, or refused by the program), so no step ran; the
  // worker restarts the trial from scratch.
  std::string restore_error;
  // Where the run's time went besides its steps, in milliseconds, for the
  // worker's per-segment log line; 0 where the executor does not measure
  // it (a command program's are inside the program).
  struct Overheads {
    double setup_ms = 0;    // from Run's call to its first step's start (restore_ms included)
    double restore_ms = 0;  // restoring the state in TrialRun::checkpoint_dir
    double save_ms = 0;     // saving the state into TrialRun::checkpoint_dir
    double eval_ms = 0;     // the evaluations after the steps (and at the end), together
  };
  Overheads overheads;
};

class Executor {
 public:
  virtual ~Executor() = default;
  // Runs the trial to its end. An error Status means the trial failed
  // (the message is its reason).
  virtual Result<RunResult> Run(const TrialRun& run, Reporter& reporter) = 0;
  // What this executor's program for `run` can do with each system parameter
  // it knows. Empty: it declares nothing (the server then goes by the spec's
  // `mutable` alone), which is the default and what a command program gets:
  // the worker cannot know what a user's program does with HPO_SYSTEM_FILE.
  virtual SystemChanges DeclaredSystemChanges(const TrialRun& run) const {
    (void)run;
    return {};
  }
};

}  // namespace hpo::worker
