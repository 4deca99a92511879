"""Helpers for a program that hpo-worker runs for a trial (`executor: {command: ...}`).

The contract is worker/command_executor.h; these helpers keep it so that a
training script need not:

    import heterotune
    params = heterotune.params()                       # HPO_PARAMS
    ckpt = heterotune.checkpoint()                     # HPO_CHECKPOINT_DIR, HPO_STOP_STEP, HPO_RESUME_STEP
    for step in range(ckpt.resume_step + 1, heterotune.max_steps(10) + 1):
        setting = heterotune.system()                  # HPO_SYSTEM_FILE: the server may change it mid-trial
        ...train one epoch with setting["batch_size"]...
        if step == ckpt.stop_step:
            save_state(ckpt.dir)                       # before the metric line, see checkpoint()
        heterotune.report(step, loss=loss, samples_per_sec=speed, batch_size=setting["batch_size"])
        if step == ckpt.stop_step:
            break                                      # exit 0: the trial pauses

Nothing here talks to the server: the worker reads the metric lines from
standard output and reports them.
"""

import json
import math
import numbers
import os
import re
import sys

__all__ = ["report", "metric_line", "system", "params", "max_steps", "checkpoint", "checkpoint_dir",
           "Checkpoint", "RESTORE_REFUSED_EXIT_STATUS"]

# The exit status of a program that cannot use the checkpoint it was given
# to resume from (CommandExecutor::kRestoreRefusedExitStatus, EX_DATAERR):
# the worker restarts the trial from step 1.
RESTORE_REFUSED_EXIT_STATUS = 65

# worker/metric_line.h: keys, how many metrics a line may hold, which keys
# are system parameters (positive integers, or the device's name).
_KEY = re.compile(r"^[A-Za-z0-9_.:/-]{1,128}$")
_MAX_METRICS_PER_LINE = 64
_COUNT_SYSTEM_KEYS = ("batch_size", "threads", "inter_op_threads")


def _json_env(name):
    text = os.environ.get(name, "")
    if not text:
        return {}
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError(f"{name}: expected a JSON object, got {text[:40]!r}")
    return value


def params():
    """The trial's hyperparameters (HPO_PARAMS), a dict; {} outside a trial."""
    return _json_env("HPO_PARAMS")


def max_steps(default=None):
    """The trial's step budget (HPO_MAX_STEPS), else `default`."""
    text = os.environ.get("HPO_MAX_STEPS", "")
    return int(text) if text else default


def system(default=None):
    """The current system setting, a dict such as {"batch_size": 128, "threads": 4}.

    The server may change it while the trial runs (in-trial system tuning);
    the worker then replaces the file HPO_SYSTEM_FILE names, atomically. Call
    this before each step and echo the setting you used on the metric line
    (report(step, ..., batch_size=...)), so speed is credited to the setting
    really in use. When the file cannot be read (outside a trial, or it is
    gone as the trial ends): `default` if given, else the starting setting
    (HPO_SYSTEM), else {}.
    """
    path = os.environ.get("HPO_SYSTEM_FILE")
    if path:
        try:
            with open(path) as f:
                setting = json.load(f)
            if isinstance(setting, dict):
                return setting
        except (OSError, ValueError):
            pass
    if default is not None:
        return dict(default)
    return _json_env("HPO_SYSTEM")


class Checkpoint:
    """The checkpoint contract of a run (worker/command_executor.h, "Checkpoints").

    dir: HPO_CHECKPOINT_DIR, a directory that is the program's to write its
      state to (None outside a worker). The worker archives it after a pause
      and restores it before a resume, possibly on another machine.
    stop_step: HPO_STOP_STEP, or 0. When set, after that step the program
      writes its whole state (model, optimizer, data order, random
      generators) to `dir`, then prints that step's metric line, then exits 0.
      The state goes first: once the worker has the line it may take the
      directory.
    resume_step: HPO_RESUME_STEP, or 0. When set, `dir` holds the state saved
      after that step: restore it and go on at resume_step + 1, or, if it is
      not a state you can trust, exit RESTORE_REFUSED_EXIT_STATUS (65) before
      printing a metric line; the worker then starts the trial over.
    """

    __slots__ = ("dir", "stop_step", "resume_step")

    def __init__(self, directory, stop_step, resume_step):
        self.dir = directory
        self.stop_step = stop_step
        self.resume_step = resume_step

    @property
    def resuming(self):
        return self.resume_step > 0

    def __repr__(self):
        return f"heterotune.Checkpoint(dir={self.dir!r}, stop_step={self.stop_step}, resume_step={self.resume_step})"


def _step_env(name):
    text = os.environ.get(name, "")
    try:
        return int(text) if text else 0
    except ValueError:
        raise ValueError(f"{name}: expected a step number, got {text[:40]!r}") from None


def checkpoint():
    """This run's Checkpoint (directory, stop step, resume step) from the environment."""
    return Checkpoint(checkpoint_dir(), _step_env("HPO_STOP_STEP"), _step_env("HPO_RESUME_STEP"))


def checkpoint_dir():
    """HPO_CHECKPOINT_DIR (always set by the worker), or None outside a worker."""
    return os.environ.get("HPO_CHECKPOINT_DIR") or None


def _number(key, value):
    # bool is an int to Python but never a measurement; a numpy or torch
    # scalar is not a numbers.Real but converts.
    if isinstance(value, bool) or not (isinstance(value, numbers.Real) or hasattr(value, "__float__")):
        raise ValueError(f"{key}: {value!r} is not a number")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{key}: {v} is not finite (the worker would drop the line)")
    if isinstance(value, numbers.Integral):
        return str(int(value))
    return repr(v)  # the shortest text that reads back as the same double


def metric_line(step=None, **metrics):
    """The `hpo:` line report() prints, checked as the worker checks it.

    Raises ValueError naming the key for what the worker would refuse: a key
    outside [A-Za-z0-9_.:/-] or longer than 128, a value that is not a finite
    number (a word is allowed for `device` and the trial's own system
    parameters, those in HPO_SYSTEM), a count (batch_size, threads,
    inter_op_threads) that is not a positive integer, no metric at all, or
    more than 64.
    """
    own_system = set(_json_env("HPO_SYSTEM"))
    parts = []
    if step is not None:
        if isinstance(step, bool) or not isinstance(step, numbers.Integral) or step < 0:
            raise ValueError(f"step: {step!r} is not a non-negative integer")
        parts.append(f"step={int(step)}")
    n_metrics = 0
    for key, value in metrics.items():
        if not _KEY.match(key):
            raise ValueError(f"{key!r}: a key is 1 to 128 of the characters A-Z a-z 0-9 _ . : / -")
        if key == "step":
            raise ValueError("step: pass it as the first argument")
        if key in _COUNT_SYSTEM_KEYS:
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise ValueError(f"{key}: {value!r} is not a positive integer")
            text = str(int(value))
        elif key == "device" or (key in own_system and isinstance(value, str)):
            text = str(value)
            if not text or any(c.isspace() for c in text):
                raise ValueError(f"{key}: {value!r} must be a word (no spaces) to fit on a metric line")
        elif key == "samples_per_sec":
            text = _number(key, value)
            if float(text) < 0:
                raise ValueError(f"{key}: {value!r} must be >= 0")
        else:
            text = _number(key, value)
            if key not in own_system:
                n_metrics += 1
        parts.append(f"{key}={text}")
    if n_metrics == 0:
        raise ValueError("no metrics: a metric line needs at least one (the objective)")
    if n_metrics > _MAX_METRICS_PER_LINE:
        raise ValueError(f"{n_metrics} metrics: a metric line holds at most {_MAX_METRICS_PER_LINE}")
    return "hpo: " + " ".join(parts)


def report(step=None, **metrics):
    """Prints one step's metric line for hpo-worker, e.g.

        heterotune.report(3, loss=0.41, accuracy=0.87, samples_per_sec=51234, batch_size=64)
        -> hpo: step=3 loss=0.41 accuracy=0.87 samples_per_sec=51234 batch_size=64

    and flushes it at once: the worker reads a pipe, and a line held in a
    buffer would reach the server too late to prune the trial on time.
    Without `step` the worker counts on from the previous line. Keys the
    worker treats as the system setting (batch_size, threads,
    inter_op_threads, device, and the trial's own system parameters) say
    which setting this step ran with. Raises ValueError (see metric_line)
    for a line the worker would refuse, rather than have it dropped.
    Returns the line.
    """
    line = metric_line(step, **metrics)
    print(line, file=sys.stdout, flush=True)
    return line
