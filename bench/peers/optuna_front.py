#!/usr/bin/python3
"""bench/peers/optuna_front.py: Optuna 3.1 on the worked example of several
objectives (examples/fashion-mnist-front.yaml), the peer bench/front_compare.py
measures HeteroTune's front against.

One process is one Optuna worker; bench/front_compare.py starts as many as
`hpctl run` starts workers, each with one thread, all sharing one study in a
JournalFileStorage. Each loads the data and warms up, then waits for the
start time it was given, and runs study.optimize until the end time (the
bench kills it there; only trials complete by then count).

The job is the built-in trainer reproduced in PyTorch (optuna_hetero.py's
train and build_model, with the trainer's defaults: every training example
but the 10% held out, a full pass per step); the spaces, objectives and
constraint are read from the spec file itself, so the two sides tune the
same thing:
  objectives  the last step's validation accuracy (up); the trial's device
              time, from its start to its last step's evaluation, as the
              server charges a lease from its start to each report (down);
              the model's size, `params` (down)
  constraint  the spec's ceiling on params, as Optuna's constraints_func
              (a value <= 0 is feasible)
  samplers    --sampler nsga2: NSGAIISampler(constraints_func, seed), its
              default population of 50; --sampler motpe: TPESampler(
              constraints_func, seed), which with several objectives is
              Optuna 3.1's MOTPE. Optuna cannot stop a trial of a study of
              several objectives early (trial.report raises), so each trial
              runs every step.

  optuna_front.py --spec FILE --storage FILE --study NAME --sampler nsga2|motpe
      --seed S --index I --start-at UNIX_S --log FILE [--data-dir DIR]

Lines in --log, one JSON object each: {"event": "ready"|"start"|"trial", ...};
a trial's line has its number, space, hyperparameters, batch size and its
accuracy, device_seconds and params.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import optuna_hetero as oh  # noqa: E402  (train, build_model, Data, journal_storage, trial_seed)


def suggest_from_spec(trial, spec):
    """The spec's spaces as one Optuna search space: the space a categorical,
    each space's parameters conditional on it ("<space>_<name>"), and each
    system parameter that affects accuracy (batch size) shared."""
    spaces = spec["spaces"]
    space = trial.suggest_categorical("space", [s["name"] for s in spaces])
    chosen = next(s for s in spaces if s["name"] == space)
    params = {}
    for name, d in chosen["params"].items():
        params[name] = suggest_one(trial, f"{space}_{name}", d)
    batch = spec.get("system", {}).get("batch_size")
    batch_size = suggest_one(trial, "batch_size", batch) if batch else 128
    return space, params, batch_size


def suggest_one(trial, name, d):
    if isinstance(d, list):
        return trial.suggest_categorical(name, d)
    if d["type"] == "categorical":
        return trial.suggest_categorical(name, d["choices"])
    if d["type"] == "int":
        return trial.suggest_int(name, int(d["low"]), int(d["high"]), log=bool(d.get("log", False)))
    return trial.suggest_float(name, float(d["low"]), float(d["high"]), log=bool(d.get("log", False)))


def param_count(space, params):
    net = oh.build_model(cnn=space == "cnn", depth=int(params.get("depth", 2)),
                         width=int(params.get("width", 256)), conv_layers=int(params.get("conv_layers", 2)),
                         channels=int(params.get("channels", 32)), dropout=float(params.get("dropout", 0.1)),
                         batch_norm=bool(params.get("batch_norm", False)))
    return sum(p.numel() for p in net.parameters())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spec", required=True)
    ap.add_argument("--storage", required=True)
    ap.add_argument("--study", required=True)
    ap.add_argument("--sampler", choices=("nsga2", "motpe"), required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--index", type=int, required=True)
    ap.add_argument("--start-at", type=float, required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--data-dir", default=oh.DEFAULT_DATA)
    args = ap.parse_args()

    import yaml
    with open(args.spec) as f:
        spec = yaml.safe_load(f)
    oh.set_threads(1)
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    import warnings
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    log = oh.Log(args.log)
    data = oh.Data(args.data_dir)
    oh.warm_up()
    ceiling = next(c["max"] for c in spec["constraints"] if c["metric"] == "params")
    steps = spec["budget"]["steps_per_trial"]
    val_fraction = spec["executor"]["builtin"].get("args", {}).get("validation_fraction", 0.1)

    def constraints(trial):
        return [trial.user_attrs["params"] - ceiling]

    seed = args.seed * 1000 + args.index
    sampler = (optuna.samplers.NSGAIISampler(seed=seed, constraints_func=constraints) if args.sampler == "nsga2"
               else optuna.samplers.TPESampler(seed=seed, constraints_func=constraints))
    directions = ["maximize" if o["direction"] == "maximize" else "minimize" for o in spec["objectives"]]
    study = optuna.create_study(study_name=args.study, storage=oh.journal_storage(args.storage),
                                directions=directions, sampler=sampler, load_if_exists=True)
    log.write("ready", pid=os.getpid())
    time.sleep(max(0.0, args.start_at - time.time()))
    log.write("start")

    def objective(trial):
        space, params, batch_size = suggest_from_spec(trial, spec)
        started = time.monotonic()
        size = param_count(space, params)
        trial.set_user_attr("params", size)
        last = {}

        def on_step(step, m):
            last.update(m, at=time.monotonic())
            return True
        oh.train(data, space, params, batch_size, oh.trial_seed(args.seed, trial.number), steps, 0, 0,
                 val_fraction, on_step)
        # To its last step's report, as the server charges (the test set's
        # evaluation after it is not device time of a step).
        values = {"accuracy": last["accuracy"], "device_seconds": last["at"] - started, "params": size}
        log.write("trial", trial=trial.number, space=space, hyperparameters=params, batch_size=batch_size,
                  **values)
        return tuple(values[o["metric"]] for o in spec["objectives"])

    study.optimize(objective, gc_after_trial=False)


if __name__ == "__main__":
    main()
