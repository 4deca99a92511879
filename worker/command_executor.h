// The command executor: runs the user's own program for a trial (the
// `executor: {command: {argv: [...]}}` of an experiment spec) and relays the
// metric lines it prints (see worker/metric_line.h) to the Reporter.
//
// The program
//   - is started from TrialRun::argv; argv[0] without a '/' is looked up on
//     the PATH of the program's environment (so TrialRun::env may set PATH);
//     with a '/', a relative argv[0] is relative to the working directory.
//   - runs in its own process group, in Options::working_dir, with standard
//     input from /dev/null, default signal dispositions and an empty signal
//     mask, and no file descriptors of the worker other than 0, 1 and 2.
//   - gets the worker's environment without the worker's credentials
//     (HPO_TOKEN, HPO_TOKEN_FILE: a program reports through its output, and
//     what it prints of its environment lands in the stored log tail), over
//     it TrialRun::env, over that:
//       HPO_TRIAL_ID, HPO_EXPERIMENT_ID, HPO_ATTEMPT, HPO_SEED, HPO_MAX_STEPS,
//       HPO_OBJECTIVE     the trial's fields
//       HPO_PARAMS        the hyperparameters, a JSON object
//       HPO_SYSTEM        the starting system setting, a JSON object
//       HPO_SYSTEM_FILE   a file holding the current system setting (below)
//       HPO_DEVICE        TrialRun::device ("cpu" or "cuda:N")
//       CUDA_VISIBLE_DEVICES  "N" for cuda:N, "" for cpu (hides every GPU)
//       HPO_THREADS, OMP_NUM_THREADS  system.threads when the system setting
//                         has it (the tuned value, which reports are credited
//                         to), else TrialRun::threads when > 0, else unset
//       HPO_BATCH_SIZE    system.batch_size, when the system setting has it
//       HPO_CHECKPOINT_DIR, HPO_STOP_STEP, HPO_RESUME_STEP  checkpoints (below)
//     and PYTHONUNBUFFERED=1 unless either environment sets it, because a
//     Python program writing to a pipe otherwise holds its metric lines back
//     until it exits, and no step could be pruned.
//
// Standard output and standard error are read as they come; each metric line
// on standard output is reported (Reporter::Report) with
//   step: the line's step, or one more than the previous step (the first
//         line without one is step 1);
//   samples_per_sec: the line's, or 0;
//   system: the line's system keys over the starting system setting (the
//         trial's own system parameter names count as system keys too);
//   applied (Reporter::ReportApplied): the line's system keys alone, what
//         the program says it ran.
// The executor declares no SystemChanges (Executor::DeclaredSystemChanges):
// it cannot know what the program does with a new setting, so the spec's
// `mutable` is the program's declaration (docs/system-parameters.md).
// Lines without the objective metric (TrialRun::objective_metric, when set)
// are not reported, as the server would refuse them, nor are lines of a step
// past TrialRun::max_steps (HPO_MAX_STEPS, when > 0): the program runs on
// to its end (a refused report would stop it), and the log tail ends with
// how many such lines went unreported. A malformed metric line is noted in
// the log tail and does not fail the trial.
//
// Changing the system setting mid-trial (Verdict::kChangeSystem): standard
// input is /dev/null, so the new setting is written instead, as one JSON
// object, to the file named by HPO_SYSTEM_FILE (replaced atomically; it
// starts as the starting setting). A program that supports this re-reads the
// file each epoch and echoes the setting it used on its metric lines (e.g.
// `hpo: step=4 loss=0.3 batch_size=256`): reported settings are what the
// lines say, not what was asked for, so speed is never credited to a setting
// the program ignored. examples/train_example.py does this.
//
// Checkpoints (promotion-type early stopping: a trial runs to a rung, pauses,
// and may later be promoted and resumed on another worker):
//   HPO_CHECKPOINT_DIR  always set: an absolute path to a directory that is
//                       the program's to write its state to. The worker
//                       archives whatever is in it after a pause (regular
//                       files and directories only) and uploads it to the
//                       server; before a resume it restores it there.
//   HPO_STOP_STEP       set when this run pauses: the step after which the
//                       program must write its state (model, optimizer,
//                       schedule position, random number generators: all it
//                       needs to go on as if never stopped) to
//                       HPO_CHECKPOINT_DIR, print that step's metric line,
//                       and exit 0. The worker reports nothing it prints
//                       after that line, and stops it if it has not exited
//                       within Options::pause_grace.
//   HPO_RESUME_STEP     set when this run resumes: HPO_CHECKPOINT_DIR holds
//                       the state the program saved after that step; it
//                       restores it and continues at the next step (its
//                       first metric line is step HPO_RESUME_STEP + 1). A
//                       program that cannot use the state exits with status
//                       65 (kRestoreRefusedExitStatus, EX_DATAERR) before
//                       printing a metric line: the worker then restarts the
//                       trial from step 1, without HPO_RESUME_STEP, and the
//                       server records why. It must never go on from a
//                       state it does not trust.
// A pause whose program ended otherwise (another exit status, a signal, the
// grace passed) or left HPO_CHECKPOINT_DIR empty is a pause without a
// checkpoint: the trial is not failed for it, but it restarts from scratch
// if promoted. examples/train_example.py keeps this contract.
//
// Ending: the run ends when the program exits. It is stopped early when the
// reporter answers kStop, when Reporter::stop_requested() becomes true
// (checked at least every 100 ms) or when TrialRun::timeout_ms passes: the
// process group gets SIGTERM, then SIGKILL after Options::kill_grace. Once the
// program itself has exited, whatever it left running in its process group is
// killed (SIGKILL): a trial's processes never outlive the trial.
//
// Results:
//   exit status 0, at least one step reported
//       -> RunResult{final_metrics = the last reported metrics, log_tail}
//   stopped (kStop or stop_requested)   -> RunResult{stopped = true, ...}
//   paused (kPause, see Checkpoints)    -> RunResult{paused = true, checkpoint_saved or
//   checkpoint_error} exit status 65 on a resume before any metric line -> RunResult{restore_error}
//   exit status 0 without a reported step -> FailedPrecondition
//   exit status N != 0                  -> FailedPrecondition "exit status N"
//   killed by a signal (a crash)        -> Internal "killed by signal N (...)"
//   timeout                             -> DeadlineExceeded "timed out after N s"
//   the program cannot be started       -> InvalidArgument naming argv[0]
//   bad TrialRun (empty argv, unknown device, bad env name, timeout_ms over
//     ten years, the server's bound) -> InvalidArgument
//   working directory missing           -> FailedPrecondition
// Messages of a run that started end with "; last output:\n" and the log tail
// (or "; no output").
// The log tail holds the last Options::tail_lines lines of standard output and
// standard error, interleaved as read, at most Options::tail_bytes bytes (a
// long line is cut to an eighth of that and marked " [...]"), made valid
// UTF-8 (invalid bytes become U+FFFD) so it can travel in JSON and protobuf.
// Notes of the worker's own in it start with "[hpo-worker] ".
//
// Reporter::Report is called on Run's thread and blocks it: a slow answer
// delays the checks above but loses no output (the program blocks on a full
// pipe meanwhile).
//
// Thread safety: Run may be called from several threads at once, one trial
// each. The worker must not reap children it did not start (no
// waitpid(-1, ...) and no SIGCHLD set to SIG_IGN), or Run loses the exit
// status and fails with Internal.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <utility>

#include "worker/executor.h"

namespace hpo::worker {

class CommandExecutor : public Executor {
 public:
  // The exit status of a program that cannot restore its checkpoint.
  static constexpr int kRestoreRefusedExitStatus = 65;

  struct Options {
    // The program's working directory; empty: the worker's own.
    std::string working_dir;
    // Where the per-trial directory holding HPO_SYSTEM_FILE is made; empty:
    // $TMPDIR, else /tmp. It is removed when the run ends.
    std::string scratch_dir;
    // Between SIGTERM and SIGKILL when stopping the program.
    std::chrono::milliseconds kill_grace{2000};
    // How long a program may take after its stop step to save its state
    // and exit.
    std::chrono::milliseconds pause_grace{300'000};
    // The log tail: at most this many lines and this many bytes.
    size_t tail_lines = 50;
    size_t tail_bytes = 16 * 1024;
  };

  CommandExecutor() : CommandExecutor(Options()) {}
  explicit CommandExecutor(Options options) : options_(std::move(options)) {}

  Result<RunResult> Run(const TrialRun& run, Reporter& reporter) override;

  const Options& options() const { return options_; }

 private:
  Options options_;
};

}  // namespace hpo::worker
