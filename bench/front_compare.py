#!/usr/bin/python3
"""bench/front_compare.py: the worked example of several objectives
(examples/fashion-mnist-front.yaml) run by HeteroTune and by Optuna 3.1
(NSGA-II and MOTPE) for the same wall time on the same machine, and the
hypervolume of each front against one fixed reference point.

  sudo nice -n 19 flock /tmp/hpo-bench.lock bench/front_compare.py run --dir DIR
      [--minutes 14] [--sides heterotune,nsga2,motpe] [--seed 42] [--workers 2]
  bench/front_compare.py table --dir DIR

`run` runs each side in turn, alone on the machine:
  heterotune  `hpctl run` of the spec (its workers, each one thread), with
              max_wall_time_s and the seed set from the options; then its
              completed trials read back through GET .../pareto?all=true
              from an hpo-server on the run's SQLite store.
  nsga2/motpe bench/peers/optuna_front.py: as many processes as hpctl runs
              workers, each one thread, one study in a JournalFileStorage,
              warmed before a common start; killed at the same wall time,
              and only trials complete by then count.
`table` prints, per side:
  bench=front side=S minutes=M trials=N feasible=F front=K hv=X
where hv is the hypervolume of the feasible trials' (accuracy, device
seconds, params) against REFERENCE: 0.80 accuracy (a front below it is no
use), 120 s of device time, and the spec's ceiling on params. Computed by
Optuna's WFG (bench/suite/mo_suite.hypervolume), for both sides alike.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "suite"))
import mo_suite  # noqa: E402

SPEC = os.path.join(REPO, "examples", "fashion-mnist-front.yaml")
# accuracy (maximized: negated), device seconds, params; the params bound
# is read from the spec.
REFERENCE_ACCURACY = 0.80
REFERENCE_DEVICE_S = 120.0


def load_spec():
    import yaml
    with open(SPEC) as f:
        return yaml.safe_load(f)


def reference(spec):
    ceiling = next(c["max"] for c in spec["constraints"] if c["metric"] == "params")
    return [-REFERENCE_ACCURACY, REFERENCE_DEVICE_S, float(ceiling)]


def minimized(values):
    accuracy, device_s, params = values
    return [-accuracy, device_s, params]


def write_spec(path, minutes, seed):
    spec = load_spec()
    spec["budget"]["max_wall_time_s"] = int(minutes * 60)
    spec["algorithm"]["seed"] = seed
    with open(path, "w") as f:
        json.dump(spec, f)
    return spec


def run_heterotune(args, out):
    os.makedirs(out, exist_ok=True)
    spec_path = os.path.join(out, "spec.json")
    write_spec(spec_path, args.minutes, args.seed)
    data = os.path.join(out, "data")
    with open(os.path.join(out, "hpctl.log"), "w") as log:
        subprocess.run([os.path.join(REPO, "build", "cli", "hpctl"), "run", "--workers", str(args.workers),
                        "--data-dir", data, spec_path], stdout=log, stderr=subprocess.STDOUT, check=True)
    # Read back through the API, from a server on the run's store.
    token = "front-compare"
    ports = os.path.join(out, "ports.json")
    server = subprocess.Popen([os.path.join(REPO, "build", "server", "hpo-server"), "--store",
                               f"sqlite://{data}/hpo.db", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
                               "--port-file", ports], env={**os.environ, "HPO_TOKEN": token},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            if os.path.exists(ports) and os.path.getsize(ports) > 0:
                break
            time.sleep(0.1)
        port = json.load(open(ports))["http"]
        req = urllib.request.Request(f"http://127.0.0.1:{port}/api/v1/experiments/1/pareto?all=true",
                                     headers={"Authorization": f"Bearer {token}"})
        answer = json.load(urllib.request.urlopen(req, timeout=60))
    finally:
        server.terminate()
        server.wait()
    trials = [{"values": t["values"], "feasible": t["feasible"], "number": t["number"]} for t in answer["trials"]]
    json.dump({"side": "heterotune", "minutes": args.minutes, "trials": trials},
              open(os.path.join(out, "result.json"), "w"))


def run_optuna(args, side, out):
    os.makedirs(out, exist_ok=True)
    storage = os.path.join(out, "journal.log")
    start_at = time.time() + 60  # every process loaded and warm by then
    procs = []
    for i in range(args.workers):
        procs.append(subprocess.Popen(
            ["/usr/bin/python3", os.path.join(HERE, "peers", "optuna_front.py"), "--spec", SPEC, "--storage", storage,
             "--study", side, "--sampler", side, "--seed", str(args.seed), "--index", str(i),
             "--start-at", str(start_at), "--log", os.path.join(out, f"worker-{i}.log")],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(out, f"worker-{i}.err"), "w"),
            start_new_session=True))
    end_at = start_at + args.minutes * 60
    while time.time() < end_at and all(p.poll() is None for p in procs):
        time.sleep(1)
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    trials = []
    for i in range(args.workers):
        for line in open(os.path.join(out, f"worker-{i}.log")):
            e = json.loads(line)
            if e["event"] == "trial" and e["t"] <= end_at:
                values = [e["accuracy"], e["device_seconds"], e["params"]]
                trials.append({"values": values, "feasible": e["params"] <= reference(load_spec())[2],
                               "number": e["trial"]})
    json.dump({"side": side, "minutes": args.minutes, "trials": trials},
              open(os.path.join(out, "result.json"), "w"))


def run(args):
    for side in args.sides.split(","):
        print(f"front_compare: {side} for {args.minutes} min ...", file=sys.stderr, flush=True)
        out = os.path.join(args.dir, side)
        if side == "heterotune":
            run_heterotune(args, out)
        else:
            run_optuna(args, side, out)
    table(args)


def table(args):
    ref = reference(load_spec())
    for side in ("heterotune", "nsga2", "motpe"):
        path = os.path.join(args.dir, side, "result.json")
        if not os.path.exists(path):
            continue
        r = json.load(open(path))
        feasible = [minimized(t["values"]) for t in r["trials"] if t["feasible"]]
        hv = mo_suite.hypervolume(feasible, ref) if feasible else 0.0
        front = [p for p in feasible if not any(q != p and all(a <= b for a, b in zip(q, p)) for q in feasible)]
        print(f"bench=front side={side} minutes={r['minutes']:g} trials={len(r['trials'])} feasible={len(feasible)} "
              f"front={len(front)} hv={hv:.6g}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--dir", required=True)
    r.add_argument("--minutes", type=float, default=14)
    r.add_argument("--sides", default="heterotune,nsga2,motpe")
    r.add_argument("--seed", type=int, default=42)
    r.add_argument("--workers", type=int, default=2)
    t = sub.add_parser("table")
    t.add_argument("--dir", required=True)
    args = ap.parse_args()
    (run if args.command == "run" else table)(args)


if __name__ == "__main__":
    main()
