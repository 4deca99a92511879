#!/usr/bin/python3
"""bench/peers/optuna_rdb.py: Optuna 3.1's RDB storage on PostgreSQL, running
the lifecycle bench/server_bench runs through hpo-server: ask (8 parameters,
the same space), 3 x trial.report, tell, in --processes processes sharing
one study, for --seconds (each process's rate is its trials over the time to
its last tell; the rates add up). Prints

  bench=server store=postgresql workers=4 sampler=tpe peer=optuna-3.1 trials_per_s=N trials=T seconds=S

so that hpo-server's figure and Optuna's come from one run on one
PostgreSQL (bench/server_bench --with-peers runs this for random and tpe).

  optuna_rdb.py --pg postgresql://postgres@127.0.0.1:55600/postgres [--processes 4]
                [--sampler tpe|random] [--seconds 20]

--pg names a database that exists on the server (for CREATE DATABASE): the
study lives in a database of its own, created here and dropped at the end.
Needs Debian's python3-optuna (3.1), python3-sqlalchemy and python3-psycopg2
(scripts/setup installs them); run it with /usr/bin/python3.
"""

import argparse
import math
import multiprocessing as mp
import os
import sys
import time
import urllib.parse

import optuna
import psycopg2

STEPS = 3  # reports per trial, as in bench/server_bench


def loss(p, step):
    """bench/server_bench.cc's BenchLoss: the same function of the same space."""
    v = 1.0 / (step + 1)
    v += sum((p[f"x{i}"] - 1) ** 2 for i in range(4))
    v += (math.log10(p["lr"]) + 3) ** 2 + abs(p["layers"] - 4)
    v += 0 if p["optimizer"] == "adam" else 1
    v += 0 if p["activation"] == "relu" else 0.5
    return v


def suggest(trial):
    p = {
        "lr": trial.suggest_float("lr", 1e-5, 1.0, log=True),
        "layers": trial.suggest_int("layers", 1, 8),
        "optimizer": trial.suggest_categorical("optimizer", ["sgd", "adam", "rmsprop"]),
        "activation": trial.suggest_categorical("activation", ["relu", "tanh", "gelu"]),
    }
    for i in range(4):
        p[f"x{i}"] = trial.suggest_float(f"x{i}", -5.0, 5.0)
    return p


def make_sampler(name, seed):
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    return optuna.samplers.RandomSampler(seed=seed)


def run(index, url, sampler, ready, seconds, min_trials, out):
    """One process: its own engine (SQLAlchemy connections do not survive a
    fork), asking and telling until the shared deadline and until it has
    told `min_trials`; puts (trials, seconds from the start to its last tell)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name="server-bench", storage=optuna.storages.RDBStorage(url),
                              sampler=make_sampler(sampler, index))
    ready.wait()  # every process starts at one moment, after its imports and its connection
    start = time.time()
    done, last = 0, start
    while last < start + seconds or done < min_trials:
        trial = study.ask()
        p = suggest(trial)
        for step in range(STEPS):
            trial.report(loss(p, step), step)
        study.tell(trial, loss(p, STEPS - 1))
        done, last = done + 1, time.time()
    out.put((done, last - start))


def with_database(url, db):
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, "/" + db, parts.query, ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pg", required=True, help="postgresql://USER@HOST:PORT/DB of an existing database")
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--sampler", choices=["random", "tpe"], default="tpe")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--min-trials", type=int, default=1,
                    help="each process runs past --seconds until it has told this many (a loaded machine's smoke run)")
    args = ap.parse_args()
    if args.processes < 1:
        ap.error(f"--processes: must be at least 1, got {args.processes}")

    db = f"hpo_optuna_{os.getpid()}"
    admin = psycopg2.connect(args.pg)
    admin.autocommit = True
    with admin.cursor() as c:
        c.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        c.execute(f'CREATE DATABASE "{db}"')
    url = with_database(args.pg, db).replace("postgresql://", "postgresql+psycopg2://", 1)
    try:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        optuna.create_study(study_name="server-bench", storage=url, direction="minimize")
        ctx = mp.get_context("spawn")
        out = ctx.Queue()
        ready = ctx.Barrier(args.processes, timeout=300)  # a process that dies before it breaks the wait
        procs = [ctx.Process(target=run, args=(i, url, args.sampler, ready, args.seconds, args.min_trials, out))
                 for i in range(args.processes)]
        for p in procs:
            p.start()
        print(f"optuna_rdb: {args.processes} processes, {args.sampler}, {args.seconds:g} s", file=sys.stderr)
        for p in procs:
            p.join()  # each puts one small count: the pipe holds it until read
        if any(p.exitcode != 0 for p in procs):
            sys.exit("optuna_rdb: a process failed: " + ", ".join(f"exit {p.exitcode}" for p in procs))
        results = [out.get(timeout=10) for _ in procs]
        # The processes ran side by side: their rates add up.
        trials = sum(n for n, _ in results)
        rate = sum(n / secs for n, secs in results if secs > 0)
        print(f"bench=server store=postgresql workers={args.processes} sampler={args.sampler} peer=optuna-{optuna.__version__[:3]} "
              f"trials_per_s={rate:.1f} trials={trials} seconds={max(s for _, s in results):.1f}", flush=True)
    finally:
        with admin.cursor() as c:
            c.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        admin.close()


if __name__ == "__main__":
    main()
