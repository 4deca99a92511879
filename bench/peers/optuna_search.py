#!/usr/bin/python3
"""The peer for bench/search_bench: Optuna 3.1 (Debian python3-optuna) on
the same functions, printing the same lines with sampler=optuna-tpe (and
sampler=optuna-random), so the two runs compare side by side.

    /usr/bin/python3 bench/peers/optuna_search.py [--seeds 20] [--trials 100] [--latency]

The functions mirror bench/objectives.h; keep the two in step.
"""
import argparse
import math
import statistics
import sys
import time

import optuna

optuna.logging.set_verbosity(optuna.logging.WARNING)


def branin(x1, x2):
    b, c, t = 5.1 / (4 * math.pi ** 2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1 * x1 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


def box(trial, dims, low, high):
    return [trial.suggest_float(f"x{i}", low, high) for i in range(dims)]


A = [[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14], [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]]
P = [[0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886], [0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991],
     [0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650], [0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381]]


def hartmann6(t):
    x = box(t, 6, 0, 1)
    return -sum(a * math.exp(-sum(A[i][k] * (x[k] - P[i][k]) ** 2 for k in range(6)))
                for i, a in enumerate([1.0, 1.2, 3.0, 3.2]))


def rosenbrock4(t):
    x = box(t, 4, -2.048, 2.048)
    return sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(3))


def ackley5(t):
    x = box(t, 5, -32.768, 32.768)
    s1 = sum(v * v for v in x)
    s2 = sum(math.cos(2 * math.pi * v) for v in x)
    return -20 * math.exp(-0.2 * math.sqrt(s1 / 5)) - math.exp(s2 / 5) + 20 + math.e


def levy5(t):
    x = box(t, 5, -10, 10)
    w = [1 + (v - 1) / 4 for v in x]
    f = math.sin(math.pi * w[0]) ** 2
    f += sum((w[i] - 1) ** 2 * (1 + 10 * math.sin(math.pi * w[i] + 1) ** 2) for i in range(4))
    return f + (w[4] - 1) ** 2 * (1 + math.sin(2 * math.pi * w[4]) ** 2)


def conditional(t):
    lr_pen = (math.log10(t.suggest_float("lr", 1e-5, 1, log=True)) + 2) ** 2
    if t.suggest_categorical("model", ["branin", "bowl"]) == "branin":
        return branin(t.suggest_float("x0", -5, 10), t.suggest_float("x1", 0, 15)) + lr_pen
    y0, y1 = t.suggest_float("y0", 0, 1), t.suggest_float("y1", 0, 1)
    y2 = t.suggest_int("y2", 0, 10)
    return 1.0 + 10 * ((y0 - 0.3) ** 2 + (y1 - 0.7) ** 2) + 0.1 * (y2 - 4) ** 2 + lr_pen


FUNCS = {
    "branin": (lambda t: branin(t.suggest_float("x0", -5, 10), t.suggest_float("x1", 0, 15)), 0.397887357729739),
    "hartmann6": (hartmann6, -3.32236801141551),
    "rosenbrock4": (rosenbrock4, 0.0),
    "ackley5": (ackley5, 0.0),
    "levy5": (levy5, 0.0),
    "conditional": (conditional, 0.397887357729739),
}

SAMPLERS = {
    "optuna-tpe": lambda seed: optuna.samplers.TPESampler(seed=seed),
    "optuna-random": lambda seed: optuna.samplers.RandomSampler(seed=seed),
}


def quality(seeds, trials, samplers, funcs):
    for fname in funcs:
        f, opt = FUNCS[fname]
        for sname in samplers:
            regret = {25: [], 50: [], 100: []}
            start = time.time()
            for seed in range(seeds):
                study = optuna.create_study(sampler=SAMPLERS[sname](seed))
                best = math.inf
                for n in range(1, trials + 1):
                    trial = study.ask()
                    y = f(trial)
                    study.tell(trial, y)
                    best = min(best, y)
                    if n in regret:
                        regret[n].append(best - opt)
            for n, r in regret.items():
                if r:
                    print(f"bench=search func={fname} sampler={sname} trials={n} seeds={seeds} "
                          f"median_regret={statistics.median(r):.6g}", flush=True)
            print(f"optuna_search: {fname}/{sname} done in {time.time() - start:.1f}s", file=sys.stderr)


def latency():
    for n in (100, 1000):
        study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=1))
        dists = {f"x{i}": optuna.distributions.FloatDistribution(0, 1) for i in range(8)}
        import random
        rnd = random.Random(n)
        for _ in range(n):
            params = {k: rnd.random() for k in dists}
            study.add_trial(optuna.trial.create_trial(params=params, distributions=dists,
                                                      value=sum((v - 0.3) ** 2 for v in params.values())))
        times = []
        for _ in range(5):
            start = time.perf_counter()
            trial = study.ask(dists)
            times.append((time.perf_counter() - start) * 1000)
            study.tell(trial, 1.0)
        print(f"bench=suggest sampler=optuna-tpe observations={n} params=8 ms={statistics.median(times):.3f}",
              flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--samplers", default="optuna-tpe")
    ap.add_argument("--funcs", default=",".join(FUNCS))
    ap.add_argument("--latency", action="store_true", help="only the suggest latency")
    a = ap.parse_args()
    if not a.latency:
        quality(a.seeds, a.trials, a.samplers.split(","), a.funcs.split(","))
    latency()


if __name__ == "__main__":
    main()
