#!/usr/bin/python3
"""Ours and Optuna side by side on several objectives (bench/suite/mo_suite.py),
scored by hypervolume.

    # run what is missing (one file of evaluations per sampler and problem)
    /usr/bin/python3 bench/mo_compare.py run [--ours auto,tpe,gp,random]
        [--peers optuna-motpe,optuna-nsga2,optuna-random] [--problems zdt1,bnh]
        [--seeds 20] [--trials 100] [--out build/mo-compare] [--force]
    # the lines: median hypervolume and its interquartile range per problem,
    # sampler and checkpoint (50, 100 trials), and the goal's count
    /usr/bin/python3 bench/mo_compare.py table [--out build/mo-compare] [--checkpoints 50,100]
    # early stopping on several objectives against full budgets
    /usr/bin/python3 bench/mo_compare.py run --fidelity [--ours random] [--problems ...]
        [--curve-offset 0.25]
    /usr/bin/python3 bench/mo_compare.py fidelity [--out build/mo-compare]

Ours run through the library (build/bench/search_bench --multi-objective),
the peers through bench/peers/mo_peers.py; both evaluate through
mo_suite.py, and every hypervolume is computed by Optuna's WFG on the
feasible points, against the problem's fixed reference point. Lines:

    bench=mo_suite task=T sampler=S trials=N hv_median=X hv_iqr=L,H seeds=K
    bench=mo_goal sampler=S trials=N at_least_best_peer=K/M

(at_least_best_peer: the problems where S's median hypervolume is at least
the best peer's). With early stopping (`run --fidelity`, `fidelity`): each
problem's objectives follow a synthetic learning curve of 27 steps
(mo_suite.py's at_step), one worker spends 100 full trials' worth of steps,
once running every trial to its end (MO random search with full budgets,
with the random sampler) and once under ASHA with the several-objective
rule; per seed, paired:

    bench=mo_fidelity task=T sampler=S hv_full=X hv_full_at_third=Z hv_asha_at_third=Y random_full=R budget_to_match=F asha_completed_at_third=C seeds=K

Per sampler S, medians over the seeds of the hypervolume of the completed
trials: hv_full, S without early stopping at the end of the budget;
hv_full_at_third, the same run after a third of it (what S reaches
without the rule); hv_asha_at_third, S under ASHA after a third;
random_full, the goal's target, MO random search with full budgets at the
end (the random sampler's run without early stopping, same seed);
budget_to_match, the fraction of the budget S under ASHA spent before its
hypervolume first reached random_full's (same seed; inf where it never
did); asha_completed_at_third, how many trials S under ASHA ran to their
end in that third (the full-budget arms complete one per 27 steps). With
S = random both arms differ by the rule alone.

Then, per sampler S, what no stopping rule could beat on S's own trials
(its run without early stopping, values known exactly from the first
step, so a stopped trial costs one step and a completed one 27):

    bench=mo_fidelity_bound task=T sampler=S online=F clairvoyant=G non_dominated_on_arrival=N seeds=K

online: the budget fraction at which random_full is first reached when
exactly the trials that no earlier trial dominates are completed (the
front-keeping rule with exact early values, the best a rule that cannot
see later trials does); clairvoyant: the least, over the run's first trials
whose front reaches random_full, of one step per trial and 26 more per
member of that front (inf where none does): what a rule that knew every
trial's final place would spend;
non_dominated_on_arrival: the median count of S's trials that no earlier
one dominated. For random search, whose trials do not depend on what it
saw, these bound every rule: above a third, the goal's third is out of
reach for random search whatever the rule. A sampler that learns suggests
other trials under early stopping (it sees fewer completed ones), so for
it they say what a rule could make of the trials it suggests without
stopping, not what it reaches with stopping.

Every sub-run holds /tmp/hpo-bench.lock and runs at nice 19.
"""
import argparse
import fcntl
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "suite"))
import mo_suite  # noqa: E402

PYTHON = "/usr/bin/python3"
OURS = ["auto", "tpe", "gp", "random"]
PEERS = ["optuna-motpe", "optuna-nsga2", "optuna-random"]


def result_path(out, sampler, problem):
    return os.path.join(out, sampler, problem + ".jsonl")


def load(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.startswith("{")]


def run_one(cmd, path, lock):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(lock, "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        p = subprocess.run(["nice", "-n", "19"] + cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    if p.returncode != 0:
        print(f"bench: FAILED ({p.returncode}): {' '.join(cmd)}", file=sys.stderr, flush=True)
        return
    with open(path + ".tmp", "w") as f:
        f.write(p.stdout)
    os.replace(path + ".tmp", path)


def run(args):
    problems = mo_suite.select(args.problems)
    jobs = []
    if args.fidelity:
        for sampler in [s for s in args.ours.split(",") if s]:
            for p in problems:
                path = result_path(os.path.join(args.out, "fidelity"), sampler, p.name)
                if not args.force and len(load(path)) >= 2 * args.seeds:
                    continue
                print(f"bench: fidelity {sampler} on {p.name}", file=sys.stderr, flush=True)
                run_one([os.path.join(args.build, "bench", "search_bench"), "--multi-objective", "--fidelity",
                         "--quality-only", "--samplers", sampler, "--problems", p.name,
                         "--seeds", str(args.seeds), "--trials", str(args.trials),
                         "--curve-offset", str(args.curve_offset)], path, args.lock)
        return
    for sampler in [s for s in args.ours.split(",") if s]:
        for p in problems:
            jobs.append((sampler, p, [os.path.join(args.build, "bench", "search_bench"), "--multi-objective",
                                      "--quality-only", "--samplers", sampler, "--problems", p.name,
                                      "--seeds", str(args.seeds), "--trials", str(args.trials)]))
    for sampler in [s for s in args.peers.split(",") if s]:
        for p in problems:
            jobs.append((sampler, p, [PYTHON, os.path.join(HERE, "peers", "mo_peers.py"), "--samplers", sampler,
                                      "--problems", p.name, "--seeds", str(args.seeds),
                                      "--trials", str(args.trials)]))
    for i, (sampler, p, cmd) in enumerate(jobs, 1):
        path = result_path(args.out, sampler, p.name)
        have = load(path)
        if not args.force and len(have) >= args.seeds and all(len(r["trace"]) >= args.trials for r in have):
            continue
        print(f"bench: [{i}/{len(jobs)}] {sampler} on {p.name}", file=sys.stderr, flush=True)
        run_one(cmd, path, args.lock)


def table(args):
    goal = {}  # (sampler, trials) -> [problems at least the best peer, problems]
    for p in mo_suite.PROBLEMS.values():
        medians = {}
        for sampler in OURS + PEERS:
            runs = load(result_path(args.out, sampler, p.name))
            if not runs:
                continue
            for n in args.checkpoints:
                hv = [mo_suite.trace_hv(p, r["trace"], n) for r in runs if len(r["trace"]) >= n]
                if not hv:
                    continue
                q25, med, q75 = np.percentile(hv, [25, 50, 75])
                medians[(sampler, n)] = med
                print(f"bench=mo_suite task={p.name} sampler={sampler} trials={n} hv_median={med:.6g} "
                      f"hv_iqr={q25:.6g},{q75:.6g} seeds={len(hv)}", flush=True)
        for n in args.checkpoints:
            peers = [medians[(s, n)] for s in PEERS if (s, n) in medians]
            if not peers:
                continue
            for s in OURS:
                if (s, n) in medians:
                    g = goal.setdefault((s, n), [0, 0])
                    g[0] += medians[(s, n)] >= max(peers)
                    g[1] += 1
    for (s, n), (k, m) in sorted(goal.items()):
        print(f"bench=mo_goal sampler={s} trials={n} at_least_best_peer={k}/{m}")


def fidelity(args):
    for p in mo_suite.PROBLEMS.values():
        baseline = {r["seed"]: r for r in load(result_path(os.path.join(args.out, "fidelity"), "random", p.name))
                    if r["rule"] == "none"}
        for sampler in OURS:
            runs = load(result_path(os.path.join(args.out, "fidelity"), sampler, p.name))
            full = {r["seed"]: r for r in runs if r["rule"] == "none"}
            asha = {r["seed"]: r for r in runs if r["rule"] == "asha"}
            seeds = sorted(set(full) & set(asha) & set(baseline))
            if not seeds:
                continue
            hv_full, full_third, hv_third, target, fraction, done = [], [], [], [], [], []
            for seed in seeds:
                budget = full[seed]["budget"]
                def hv_at(run, spent):
                    pts = [c["values"] for c in run["completions"] if c["spent"] <= spent and c["violation"] <= 0]
                    return mo_suite.hypervolume(pts, p.reference)
                # The goal's target: MO random search with full budgets, same seed.
                goal = hv_at(baseline[seed], baseline[seed]["budget"])
                target.append(goal)
                hv_full.append(hv_at(full[seed], budget))
                full_third.append(hv_at(full[seed], budget / 3))
                hv_third.append(hv_at(asha[seed], budget / 3))
                done.append(sum(c["spent"] <= budget / 3 for c in asha[seed]["completions"]))
                reached = [c["spent"] for c in asha[seed]["completions"] if hv_at(asha[seed], c["spent"]) >= goal]
                fraction.append(min(reached) / budget if reached and goal > 0 else float("inf"))
            print(f"bench=mo_fidelity task={p.name} sampler={sampler} hv_full={np.median(hv_full):.6g} "
                  f"hv_full_at_third={np.median(full_third):.6g} hv_asha_at_third={np.median(hv_third):.6g} "
                  f"random_full={np.median(target):.6g} budget_to_match={np.median(fraction):.3g} "
                  f"asha_completed_at_third={np.median(done):g} "
                  f"seeds={len(seeds)}", flush=True)
            print(bound_line(p, sampler, [full[s] for s in seeds], target), flush=True)


def bound_line(problem, sampler, runs, targets):
    """The bench=mo_fidelity_bound line: see the module's docstring."""
    online, clairvoyant, arrivals = [], [], []
    for run, goal in zip(runs, targets):
        step_count = run["completions"][0]["spent"]  # a full trial's steps: the first completion's
        goal *= 1 - 1e-12  # the same front summed in another order
        points = [c["values"] for c in run["completions"] if c["violation"] <= 0]
        feasible = [c["violation"] <= 0 for c in run["completions"]]
        spent, kept, seen, reached, new = 0, [], [], float("inf"), 0
        for c, ok in zip(run["completions"], feasible):
            v = c["values"]
            # Complete it unless an earlier trial is as good everywhere.
            keep = ok and not any(all(a <= b for a, b in zip(q, v)) for q in seen)
            new += keep
            spent += step_count if keep else 1
            if ok:
                seen.append(v)
            if keep:
                kept.append(v)
                if reached == float("inf") and mo_suite.hypervolume(kept, problem.reference) >= goal:
                    reached = spent / run["budget"]
        online.append(reached)
        arrivals.append(new)
        # Any first i trials whose front reaches the goal: each costs a
        # step, and that front's members the rest of their steps (a later
        # trial can dominate several, so a longer prefix may cost less).
        least = float("inf")
        for i in range(1, len(run["completions"]) + 1):
            if not feasible[i - 1]:
                continue
            front = mo_suite.front(points[:sum(feasible[:i])])
            if mo_suite.hypervolume(front, problem.reference) >= goal:
                least = min(least, (i + (step_count - 1) * len(front)) / run["budget"])
        clairvoyant.append(least)
    return (f"bench=mo_fidelity_bound task={problem.name} sampler={sampler} online={np.median(online):.3g} "
            f"clairvoyant={np.median(clairvoyant):.3g} non_dominated_on_arrival={np.median(arrivals):g} "
            f"seeds={len(runs)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--ours", default=",".join(OURS))
    r.add_argument("--peers", default=",".join(PEERS))
    r.add_argument("--problems", default="")
    r.add_argument("--seeds", type=int, default=20)
    r.add_argument("--trials", type=int, default=100)
    r.add_argument("--force", action="store_true")
    r.add_argument("--fidelity", action="store_true", help="early stopping against full budgets")
    r.add_argument("--curve-offset", type=float, default=0.25,
                   help="--fidelity: how far above its final value a curve starts, as a fraction of the "
                        "reference point (0: early steps rank trials exactly; use another --out)")
    r.add_argument("--build", default=os.path.join(ROOT, "build"))
    r.add_argument("--lock", default="/tmp/hpo-bench.lock")
    t = sub.add_parser("table")
    t.add_argument("--checkpoints", type=lambda v: [int(x) for x in v.split(",")],
                   default=list(mo_suite.CHECKPOINTS),
                   help="trial counts to score (50,100; runs of --trials 500 can add 500)")
    f = sub.add_parser("fidelity")
    for p in (r, t, f):
        p.add_argument("--out", default=os.path.join(ROOT, "build", "mo-compare"))
    args = ap.parse_args()
    {"run": run, "table": table, "fidelity": fidelity}[args.cmd](args)


if __name__ == "__main__":
    main()
