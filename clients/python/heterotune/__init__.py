"""heterotune: the Python client of HeteroTune's hpo-server (standard library only).

Two halves:
  * the REST client (heterotune.client): create, list, get and cancel
    experiments; ask for trials and tell their results (Experiment.trials,
    Trial.report / complete); Experiment.optimize, Optuna-style;
  * helpers for a program hpo-worker runs (heterotune.command): report()
    prints the `hpo:` metric line, system() reads HPO_SYSTEM_FILE,
    checkpoint() holds the checkpoint directory contract.

Errors are in heterotune.errors; a refusal by the server carries its code,
message and the path of the bad field (APIError.field).
"""

from .client import DEFAULT_SERVER, Client, Decision, Experiment, Trial
from .command import (RESTORE_REFUSED_EXIT_STATUS, Checkpoint, checkpoint, checkpoint_dir, max_steps, metric_line,
                      params, report, system)
from .errors import *  # noqa: F401,F403 - the error classes are part of the package's interface
from .errors import __all__ as _error_names

__version__ = "0.1.0"

__all__ = ["Client", "Experiment", "Trial", "Decision", "DEFAULT_SERVER", "report", "metric_line", "system",
           "params", "max_steps", "checkpoint", "checkpoint_dir", "Checkpoint", "RESTORE_REFUSED_EXIT_STATUS",
           *_error_names]
