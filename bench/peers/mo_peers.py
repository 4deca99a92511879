#!/usr/bin/python3
"""Optuna 3.1 on bench/suite/mo_suite.py's problems, printing one JSON line
of evaluations per (problem, sampler, seed) as bench/search_bench
--multi-objective prints ours, for bench/mo_compare.py.

    /usr/bin/python3 bench/peers/mo_peers.py [--samplers optuna-motpe,optuna-nsga2,optuna-random]
        [--problems zdt1,bnh] [--seeds 20] [--first-seed 0] [--trials 100]

Samplers, each as Optuna's documentation sets it up, with its defaults:
  optuna-motpe   MOTPESampler (Optuna's multi-objective TPE, with EHVI-style
                 candidate scoring); on a constrained problem, whose
                 constraints MOTPESampler cannot take, TPESampler with
                 constraints_func, which in 3.1 is the same multi-objective
                 TPE with Optuna's constraint handling
  optuna-nsga2   NSGAIISampler (population 50, its default), constraints_func
                 on a constrained problem
  optuna-random  RandomSampler
Constraints reach Optuna as its users pass them: values stored in the
trial's user attributes, read back by constraints_func (<= 0 feasible).

Needs Debian's python3-optuna (and python3-sklearn for dt_digits): run it
with /usr/bin/python3.
"""
import argparse
import json
import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "suite"))
sys.path.insert(0, HERE)
import mo_suite  # noqa: E402
from suite_peers import suggest  # noqa: E402

SAMPLERS = ["optuna-motpe", "optuna-nsga2", "optuna-random"]


def constraints_of(trial):
    return trial.user_attrs["constraints"]


def make_sampler(name, seed, constrained):
    import optuna
    func = constraints_of if constrained else None
    if name == "optuna-motpe":
        if constrained:
            return optuna.samplers.TPESampler(seed=seed, constraints_func=func)
        return optuna.samplers.MOTPESampler(seed=seed)
    if name == "optuna-nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, constraints_func=func)
    if name == "optuna-random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise SystemExit(f"mo_peers: unknown sampler '{name}' (one of {', '.join(SAMPLERS)})")


def run(problem, sampler, seed, trials):
    import optuna
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    constrained = problem.constraints is not None
    study = optuna.create_study(directions=["minimize"] * len(problem.reference),
                                sampler=make_sampler(sampler, seed, constrained))
    trace = []
    for _ in range(trials):
        trial = study.ask()
        params = {name: suggest(trial, name, spec) for name, spec in problem.space["params"].items()}
        r = problem.evaluate(params)
        if constrained:
            trial.set_user_attr("constraints", r["constraints"])
        study.tell(trial, r["values"])
        trace.append({"values": r["values"], "violation": r["violation"]})
    return trace


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samplers", default=",".join(SAMPLERS))
    ap.add_argument("--problems", default="")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--trials", type=int, default=100)
    args = ap.parse_args()
    warnings.simplefilter("ignore")  # Optuna's ExperimentalWarning and FutureWarning
    for problem in mo_suite.select(args.problems):
        for sampler in [s for s in args.samplers.split(",") if s]:
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                trace = run(problem, sampler, seed, args.trials)
                print(json.dumps({"problem": problem.name, "sampler": sampler, "seed": seed,
                                  "trace": trace}), flush=True)
            print(f"bench: {problem.name}/{sampler} {args.seeds} seeds", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
