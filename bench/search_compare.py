#!/usr/bin/python3
"""Ours and the peers side by side on bench/suite/suite.py.

    # run what is missing (results are kept, one file per sampler and task)
    /usr/bin/python3 bench/search_compare.py run [--ours auto,tpe,gp,random]
        [--peers optuna-tpe,optuna-tpe-mv,optuna-cmaes,optuna-random,gp-ei]
        [--tasks a,b] [--families bbob,real] [--seeds 20] [--trials 100]
        [--gp-options k=v,... --label NAME] [--out build/search-compare] [--force]
    # store the lines of one long run (search_bench over many tasks, say)
    /usr/bin/python3 bench/search_compare.py import FILE [--label NAME]
    # the table: median [q25, q75] regret per task and sampler, per family
    /usr/bin/python3 bench/search_compare.py table [--trials 50] [--markdown] [--samplers ...]

Who runs what: our samplers on synthetic tasks through build/bench/search_bench
(the library), on real tasks through bench/suite/rest_driver.py (the REST
ask/tell API of build/server/hpo-server); the peers through
bench/peers/suite_peers.py. All of them evaluate through suite.py and print
the same `bench=search ...` lines, which are stored under --out as they are.

Every sub-run holds /tmp/hpo-bench.lock (one benchmark at a time on the
machine) and runs at nice 19; progress goes to stderr as `bench: ...` lines.
"""
import argparse
import fcntl
import math
import os
import re
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "suite"))
import suite  # noqa: E402

PYTHON = "/usr/bin/python3"
OURS = ["auto", "tpe", "gp", "random"]
PEERS = ["optuna-tpe", "optuna-tpe-mv", "optuna-cmaes", "optuna-random", "gp-ei"]
LINE = re.compile(r"^bench=search (.*)$")


def parse_line(line):
    m = LINE.match(line.strip())
    if not m:
        return None
    fields = dict(kv.split("=", 1) for kv in m.group(1).split())
    fields["trials"] = int(fields["trials"])
    fields["regrets"] = [float(v) for v in fields["regrets"].split(",")]
    return fields


def result_path(out, sampler, task):
    return os.path.join(out, sampler, task + ".txt")


def have(path, seeds, trials):
    if not os.path.exists(path):
        return False
    lines = [parse_line(l) for l in open(path)]
    lines = [l for l in lines if l]
    return bool(lines) and max(l["trials"] for l in lines) >= min(trials, 100) and all(
        len(l["regrets"]) >= seeds for l in lines)


def run_one(cmd, path, label, lock):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(lock, "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        start = time.time()
        p = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    if p.returncode != 0:
        print(f"bench: FAILED ({p.returncode}): {' '.join(cmd)}", file=sys.stderr, flush=True)
        return
    lines = [l for l in p.stdout.splitlines() if l.startswith("bench=search ")]
    if label:
        lines = [re.sub(r" sampler=\S+ ", f" sampler={label} ", l) for l in lines]
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(path + ".tmp", path)
    print(f"bench: stored {path} ({time.time() - start:.0f}s)", file=sys.stderr, flush=True)


def cmd_run(a):
    os.nice(19)
    tasks = suite.select(a.tasks, a.families)
    ours = [s for s in a.ours.split(",") if s]
    peers = [s for s in a.peers.split(",") if s]
    common = ["--seeds", str(a.seeds), "--first-seed", str(a.first_seed), "--trials", str(a.trials)]
    for task in tasks:
        for s in ours:
            label = a.label or s
            path = result_path(a.out, label, task.name)
            if not a.force and have(path, a.seeds, a.trials):
                continue
            if task.family == "real":
                cmd = [PYTHON, "bench/suite/rest_driver.py", "--tasks", task.name, "--samplers", s,
                       "--families", "", "--server", a.server] + common
            else:
                cmd = [a.search_bench, "--quality-only", "--tasks", task.name, "--samplers", s] + common
                if a.gp_options:
                    cmd += ["--gp-options", a.gp_options]
            run_one(cmd, path, a.label, a.lock)
        for s in peers:
            path = result_path(a.out, s, task.name)
            if not a.force and have(path, a.seeds, a.trials):
                continue
            cmd = [PYTHON, "bench/peers/suite_peers.py", "--tasks", task.name, "--samplers", s] + common
            run_one(cmd, path, None, a.lock)


def cmd_import(a):
    """Stores the bench=search lines of a file (one run of search_bench or a
    peer over many tasks), one file per sampler and task, as `run` does."""
    by_file = {}
    for line in open(a.file):
        l = parse_line(line)
        if not l:
            continue
        sampler = a.label or l["sampler"]
        line = re.sub(r" sampler=\S+ ", f" sampler={sampler} ", line.strip())
        by_file.setdefault(result_path(a.out, sampler, l["func"]), []).append(line)
    for path, lines in by_file.items():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
    print(f"bench: imported {len(by_file)} files from {a.file}", file=sys.stderr)


# ---------------------------------------------------------------- table ----

def load(out):
    """{(task, sampler): {trials: regrets}}"""
    data = {}
    for sampler in sorted(os.listdir(out)) if os.path.isdir(out) else []:
        d = os.path.join(out, sampler)
        for name in sorted(os.listdir(d)):
            if not name.endswith(".txt"):
                continue
            for line in open(os.path.join(d, name)):
                l = parse_line(line)
                if l:
                    data.setdefault((l["func"], l["sampler"]), {})[l["trials"]] = l["regrets"]
    return data


def fmt(v):
    if v == 0:
        return "0"
    if abs(v) >= 1000 or abs(v) < 0.001:
        return f"{v:.1e}"
    return f"{v:.3g}"


def cmd_table(a):
    data = load(a.out)
    samplers = [s for s in a.samplers.split(",") if s] if a.samplers else sorted({s for _, s in data})
    order = [s for s in OURS + PEERS if s in samplers] + [s for s in samplers if s not in OURS + PEERS]
    samplers = order
    peers = [s for s in samplers if s in PEERS]
    rows = {}  # task -> sampler -> regrets
    for task in suite.TASKS.values():
        got = {s: data[(task.name, s)][a.trials] for s in samplers
               if (task.name, s) in data and a.trials in data[(task.name, s)]}
        if not got:
            continue
        if task.optimum is None:
            # Real tasks: regret against the best loss any run found.
            ref = min(min(v) for runs in (data[(task.name, s)] for s in samplers if (task.name, s) in data)
                      for v in runs.values())
            got = {s: [v - ref for v in r] for s, r in got.items()}
        rows[task.name] = got

    def stats(r):
        q25, med, q75 = np.percentile(r, [25, 50, 75])
        return med, q25, q75

    md = a.markdown
    sep = " | "
    print(f"Median regret [q25, q75] at {a.trials} trials; * = best median in the row "
          f"(seeds per cell in the last column).\n")
    families = []
    for t in suite.TASKS.values():
        if t.family not in families:
            families.append(t.family)
    rank_sums = {}
    for fam in families:
        names = [t.name for t in suite.TASKS.values() if t.family == fam and t.name in rows]
        if not names:
            continue
        if md:
            print(f"\n**{fam}**\n")
            print("| task | " + " | ".join(samplers) + " | seeds |")
            print("|---" * (len(samplers) + 2) + "|")
        else:
            print(f"\n== {fam}")
            print(f"{'task':18s} " + " ".join(f"{s:>22s}" for s in samplers))
        for name in names:
            got = rows[name]
            meds = {s: stats(r)[0] for s, r in got.items()}
            best = min(meds.values())
            ranked = sorted(meds.values())
            for s, m in meds.items():
                rank_sums.setdefault((fam, s), []).append(1 + ranked.index(m))
            cells = []
            for s in samplers:
                if s not in got:
                    cells.append("-")
                    continue
                med, q25, q75 = stats(got[s])
                star = "*" if med <= best * (1 + 1e-9) + 1e-12 else ""
                cells.append(f"{fmt(med)}{star} [{fmt(q25)}, {fmt(q75)}]")
            seeds = sorted({len(r) for r in got.values()})
            if md:
                print(f"| {name} | " + " | ".join(cells) + f" | {'/'.join(map(str, seeds))} |")
            else:
                print(f"{name:18s} " + " ".join(f"{c:>22s}" for c in cells) + f"  seeds={seeds}")
    print("\nMean rank of the median per family (1 = best):\n")
    if md:
        print("| family | " + " | ".join(samplers) + " |")
        print("|---" * (len(samplers) + 1) + "|")
    for fam in families:
        cells = []
        for s in samplers:
            r = rank_sums.get((fam, s))
            cells.append(f"{np.mean(r):.1f}" if r else "-")
        if any(c != "-" for c in cells):
            print((f"| {fam} | " + " | ".join(cells) + " |") if md else f"{fam:12s} " + " ".join(f"{c:>8s}" for c in cells))

    print("\nGoals at", a.trials, "trials, over the tasks every compared sampler ran:\n")
    for ours in [s for s in samplers if s in ("auto", "gp", "tpe")]:
        n = vs_best = vs_mv = n_mv = 0
        for name, got in rows.items():
            if ours not in got or not peers or not all(p in got for p in peers):
                continue
            n += 1
            m = stats(got[ours])[0]
            tol = lambda x: x * (1 + 1e-9) + 1e-12
            vs_best += m <= tol(min(stats(got[p])[0] for p in peers))
            if "optuna-tpe-mv" in got:
                n_mv += 1
                vs_mv += m <= tol(stats(got["optuna-tpe-mv"])[0])
        if n:
            print(f"- {ours}: no worse than the best peer on {vs_best}/{n} tasks ({100 * vs_best / n:.0f}%, "
                  f"goal 70%)" + (f"; no worse than optuna-tpe-mv on {vs_mv}/{n_mv} "
                                  f"({100 * vs_mv / n_mv:.0f}%, goal 90%)" if n_mv else ""))
    if all(s in samplers for s in ("auto", "tpe", "gp")):
        bad = []
        n = 0
        for name, got in rows.items():
            if not all(s in got for s in ("auto", "tpe", "gp")):
                continue
            n += 1
            better = min(("tpe", "gp"), key=lambda s: stats(got[s])[0])
            med, q25, q75 = stats(got[better])
            if stats(got["auto"])[0] > med + (q75 - q25) + 1e-12:
                bad.append(f"{name} (auto {fmt(stats(got['auto'])[0])}, {better} {fmt(med)}, IQR {fmt(q75 - q25)})")
        print(f"- auto within the IQR of the better of tpe and gp on {n - len(bad)}/{n} tasks"
              + (": not on " + "; ".join(bad) if bad else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--ours", default=",".join(OURS))
    r.add_argument("--peers", default=",".join(PEERS))
    r.add_argument("--tasks", default="")
    r.add_argument("--families", default="")
    r.add_argument("--seeds", type=int, default=20)
    r.add_argument("--first-seed", type=int, default=0)
    r.add_argument("--trials", type=int, default=100)
    r.add_argument("--gp-options", default="")
    r.add_argument("--label", default="", help="store our runs under this sampler name (ablations)")
    r.add_argument("--force", action="store_true")
    r.add_argument("--search-bench", default="build/bench/search_bench")
    r.add_argument("--server", default="build/server/hpo-server")
    r.add_argument("--lock", default="/tmp/hpo-bench.lock")
    i = sub.add_parser("import")
    i.add_argument("file")
    i.add_argument("--label", default="")
    t = sub.add_parser("table")
    t.add_argument("--trials", type=int, default=50)
    t.add_argument("--samplers", default="")
    t.add_argument("--markdown", action="store_true")
    for p in (r, t, i):
        p.add_argument("--out", default="build/search-compare")
    a = ap.parse_args()
    a.out = os.path.join(ROOT, a.out) if not os.path.isabs(a.out) else a.out
    {"run": cmd_run, "table": cmd_table, "import": cmd_import}[a.cmd](a)


if __name__ == "__main__":
    main()
