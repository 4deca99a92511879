#!/usr/bin/python3
"""Our samplers on bench/suite/suite.py's tasks through the real REST
ask/tell API: starts build/server/hpo-server on a fresh SQLite file (ports
chosen by the server), creates one client experiment per (task, sampler,
seed) with algorithm {sampler, seed} and budget max_trials = --trials,
max_parallel 1, then asks for one trial at a time
(POST /api/v1/experiments/{id}/trials:suggest), evaluates it and tells the
result (POST /api/v1/trials/{id}:complete). Prints the same
`bench=search ...` lines as bench/search_bench and the peers.

    /usr/bin/python3 bench/suite/rest_driver.py [--samplers auto,tpe,gp,random]
        [--tasks a,b] [--families real] [--seeds 20] [--trials 100] [--server build/server/hpo-server]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import suite  # noqa: E402


class Server:
    def __init__(self, binary):
        self.dir = tempfile.mkdtemp(prefix="hpo-rest-driver-")
        port_file = os.path.join(self.dir, "ports.json")
        self.log = open(os.path.join(self.dir, "server.log"), "w")
        self.proc = subprocess.Popen(
            [binary, "--store", f"sqlite://{self.dir}/hpo.db", "--http", "127.0.0.1:0",
             "--grpc", "127.0.0.1:0", "--port-file", port_file, "--log-level", "warn"],
            stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(300):
            if os.path.exists(port_file) and os.path.getsize(port_file) > 0:
                try:
                    self.url = f"http://127.0.0.1:{json.load(open(port_file))['http']}"
                    return
                except ValueError:
                    pass
            if self.proc.poll() is not None:
                raise SystemExit(f"rest_driver: hpo-server exited; see {self.log.name}")
            time.sleep(0.1)
        raise SystemExit("rest_driver: hpo-server did not write its ports in 30 s")

    def post(self, path, body):
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            raise SystemExit(f"rest_driver: POST {path}: {e.code} {e.read().decode()}")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def run(server, task, sampler, seed, trials):
    spec = {"name": f"{task.name}-{sampler}-{seed}",
            "objective": {"metric": "loss", "direction": "minimize"},
            "spaces": [task.space],
            "algorithm": {"sampler": sampler, "seed": seed},
            "budget": {"max_trials": trials, "max_parallel": 1, "steps_per_trial": 1},
            "executor": {"client": {}}}
    exp = server.post("/api/v1/experiments", spec)["id"]
    trace = []
    for n in range(trials):
        trial = server.post(f"/api/v1/experiments/{exp}/trials:suggest", {"count": 1})["trials"][0]
        y, f = task.evaluate(trial["params"], seed, n)
        server.post(f"/api/v1/trials/{trial['id']}:complete", {"metrics": {"loss": y}})
        trace.append((y, f))
    return trace


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samplers", default="auto,tpe,gp,random")
    ap.add_argument("--tasks", default="")
    ap.add_argument("--families", default="real")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--server", default="build/server/hpo-server")
    a = ap.parse_args()
    warnings.filterwarnings("ignore")
    checkpoints = [c for c in suite.CHECKPOINTS if c <= a.trials]
    server = Server(a.server)
    try:
        for task in suite.select(a.tasks, a.families):
            for sampler in a.samplers.split(","):
                start = time.time()
                regrets = {c: [] for c in checkpoints}
                for seed in range(a.first_seed, a.first_seed + a.seeds):
                    for c, r in suite.regret_at(run(server, task, sampler, seed, a.trials), task.optimum,
                                                checkpoints).items():
                        regrets[c].append(r)
                for c in checkpoints:
                    print(suite.result_line(task, sampler, c, regrets[c]), flush=True)
                print(f"bench: {task.name}/{sampler} (REST) {a.seeds} seeds in {time.time() - start:.1f}s",
                      file=sys.stderr, flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
