#!/usr/bin/python3
"""bench/hetero: placement on a real heterogeneous fleet (issue #15 item 6).

The real hpo-server (SQLite store in a private directory, loopback ports, a
bearer token) and three real hpo-worker processes, each in its own CPU
cgroup capped at 1.0, 0.5 and 0.25 cores, tune the built-in Fashion-MNIST
trainer (Debian's dataset-fashion-mnist) on a reduced training set with
promotion-type ASHA. Every (seed, policy) run gets a fresh server, fresh
workers and a spec made here; only `placement:` differs between policies:

  speed   ours (scheduler/policy.h);
  fifo    the same sampler, ASHA type and ranking; the oldest waiting work
          to whoever asks;
  shadho  SHADHO's rule, with the correct class order (fastest first, the
          classes as GET /api/v1/workers reports them).

    sudo nice -n 19 flock /tmp/hpo-bench.lock bench/hetero.py [--seeds 5] [--target 0.88] [--cap-s 135]

Needs root (it makes cgroups under /sys/fs/cgroup) and the built binaries
(build/server/hpo-server, build/worker/hpo-worker: configure with
-DHPO_BUILD_WORKER=ON). Progress goes to stderr, the figures to stdout:

  bench=hetero seed=N policy=P time_to_target_s=X utilization=U wasted_device_s=W trials=T promotions=K reached=0|1
  bench=hetero_median policy=P seeds=N time_to_target_s=X utilization=U wasted_device_s=W reached=R
  bench=hetero_ratio policy=fifo vs=speed time_to_target_ratio=X goal=1.5 met=yes|no

Definitions (all from the server's REST API; see bench/README.md):
  time_to_target_s  from the experiment's creation until a reported
                    validation accuracy first reaches --target (the
                    measurement's own timestamp); a run that has not by
                    --cap-s counts as --cap-s, with reached=0.
  utilization       device-seconds the three workers held a trial (leased
                    or running), over 3 x that time.
  wasted_device_s   device-seconds, within that time, spent on trials that
                    ASHA had stopped by then: pruned or failed, or paused at
                    a rung and not promoted (promotion ASHA's way to stop).
  trials            trials created by then; promotions: paused trials resumed.
"""
import argparse
import json
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POLICIES = ("speed", "fifo", "shadho")
DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"
CGROUP_PREFIX = "hpo-hetero-"

def log(msg):
    print(f"[hetero {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------- cgroups ----

class CpuCgroup:
    """A CPU cgroup with a quota of `cpus` cores; remove() takes it away."""

    def __init__(self, name, cpus):
        self.cpus = cpus
        if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):  # v2
            self.path = f"/sys/fs/cgroup/{name}"
            os.mkdir(self.path)
            self._write("cpu.max", f"{int(cpus * 100000)} 100000")
        elif os.path.exists("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"):  # v1
            self.path = f"/sys/fs/cgroup/cpu/{name}"
            os.mkdir(self.path)
            self._write("cpu.cfs_period_us", "100000")
            self._write("cpu.cfs_quota_us", str(int(cpus * 100000)))
        else:
            raise RuntimeError("no CPU cgroup controller: needs cgroup v1 cpu or v2 cpu.max")

    def _write(self, name, value):
        with open(os.path.join(self.path, name), "w") as f:
            f.write(value)

    def procs(self):
        try:
            with open(os.path.join(self.path, "cgroup.procs")) as f:
                return [int(x) for x in f.read().split()]
        except OSError:
            return []

    def remove(self):
        # rmdir fails while a process is still inside: our processes were
        # killed and reaped before this, so a few retries cover the kernel's
        # own bookkeeping.
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)
        log(f"warning: could not remove {self.path} (processes: {self.procs()})")


def remove_stale_cgroups(prefix):
    """Empty cgroups named `prefix`... that a killed earlier run left behind."""
    for base in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup"):
        if not os.path.isdir(base):
            continue
        for name in os.listdir(base):
            if name.startswith(prefix):
                try:
                    os.rmdir(os.path.join(base, name))
                    log(f"removed a stale cgroup {base}/{name}")
                except OSError:
                    pass


def start_run(prefix, keep_dir):
    """What a cgroup bench does first (bench/cotune too): signals end the run
    through the caller's finally blocks, which stop every process and remove
    every cgroup; stale cgroups of `prefix` go; returns (run dir, kept?)."""
    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")
    # SIGINT too: a shell starts a background job with it ignored, and
    # Python then keeps it so.
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)
    remove_stale_cgroups(prefix)
    base = keep_dir or tempfile.mkdtemp(prefix=prefix)
    os.makedirs(base, exist_ok=True)
    return base, keep_dir is not None


# ------------------------------------------------------------- REST -------

class Rest:
    def __init__(self, port, token):
        self.base = f"http://127.0.0.1:{port}"
        self.token = token

    def call(self, method, path, body=None, timeout=30):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        if method != "GET":
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"{method} {path}: HTTP {e.code}: {e.read().decode(errors='replace')}") from None

    def trials(self, experiment_id):
        out, offset = [], 0
        while True:
            page = self.call("GET", f"/api/v1/experiments/{experiment_id}/trials?offset={offset}&limit=1000")
            out += page["trials"]
            if len(page["trials"]) < 1000:
                return out
            offset += 1000


def cpu_seconds(pid):
    """User + system CPU seconds of a process so far (/proc/PID/stat)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def record_events(rest, path):
    """Writes the server's event stream to `path`, one JSON line per event,
    with the time it came: trial.resumed says on which device a promotion
    ran and why (the policy's reason). Ends when the server goes."""
    req = urllib.request.Request(rest.base + "/api/v1/events")
    req.add_header("Authorization", f"Bearer {rest.token}")
    try:
        with urllib.request.urlopen(req, timeout=3600) as r, open(path, "w") as out:
            kind = None
            for raw in r:
                line = raw.decode(errors="replace").rstrip("\n")
                if line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: ") and kind:
                    out.write(json.dumps({"t_ms": int(time.time() * 1000), "type": kind,
                                          "data": json.loads(line[6:])}) + "\n")
                    out.flush()
                    kind = None
    except Exception:  # the server stopped: the record ends there
        pass


# ------------------------------------------------------------- processes --


def spawn(argv, logf, env=None, cgroup=None):
    """Starts argv in a session (process group) of its own, its output to logf;
    with cgroup, inside that cgroup from its first instruction."""
    if cgroup:
        # A shell that moves itself into the cgroup and then becomes the
        # worker: the whole process, its first instruction and every
        # thread it makes, runs under the quota.
        argv = ["/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', cgroup.path] + argv
    return subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env=env, start_new_session=True)


def signal_group(p, sig):
    try:
        os.killpg(p.pid, sig)
    except ProcessLookupError:
        pass


def wait_or_kill(p, timeout):
    """Waits up to timeout seconds for p, then kills its process group."""
    try:
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        signal_group(p, signal.SIGKILL)
        p.wait()

class Processes:
    """Everything one run starts, stopped (and its cgroups removed) by stop()."""

    def __init__(self):
        self.procs = []  # (name, Popen)
        self.cgroups = []
        self.logs = []

    def start(self, name, argv, log_path, env=None, cgroup=None):
        logf = open(log_path, "w")
        self.logs.append(logf)
        p = spawn(argv, logf, env, cgroup)
        self.procs.append((name, p))
        return p

    def stop(self):
        # A second Ctrl-C or a kill must not cut the clean-up short.
        previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            self._stop()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)

    def _stop(self):
        for _, p in reversed(self.procs):
            if p.poll() is None:
                signal_group(p, signal.SIGTERM)
        deadline = time.time() + 5
        for _, p in self.procs:
            wait_or_kill(p, max(0.1, deadline - time.time()))
        self.procs = []
        for c in self.cgroups:
            c.remove()
        self.cgroups = []
        for f in self.logs:
            f.close()
        self.logs = []


# ------------------------------------------------------------- the spec ---

def make_spec(args, seed, policy, class_order):
    """One run's experiment: the same for every policy but `placement`."""
    spec = {
        "name": f"hetero-seed{seed}-{policy}",
        "objective": {"metric": "accuracy", "direction": "maximize"},  # validation accuracy
        # The spaces of the main job (examples/fashion-mnist.yaml), as they are.
        "spaces": [{
            "name": "mlp",
            "params": {
                "lr": {"type": "float", "low": 3.0e-4, "high": 3.0e-3, "log": True},
                "optimizer": ["adam", "adamw"],
                "width": {"type": "int", "low": 128, "high": 512, "log": True},
                "depth": {"type": "int", "low": 1, "high": 3},
                "dropout": {"type": "float", "low": 0.0, "high": 0.4},
                "weight_decay": {"type": "float", "low": 1.0e-6, "high": 1.0e-3, "log": True},
                "lr_schedule": ["constant", "cosine"],
            },
        }, {
            "name": "cnn",
            "params": {
                "lr": {"type": "float", "low": 5.0e-4, "high": 3.0e-3, "log": True},
                "channels": [8, 16],
                "conv_layers": {"type": "int", "low": 1, "high": 2},
                "width": {"type": "int", "low": 64, "high": 256, "log": True},
                "dropout": {"type": "float", "low": 0.0, "high": 0.4},
                "batch_norm": [True, False],
            },
        }],
        # Batch size changes what a model learns: searched. Threads are not
        # co-tuned: each worker trains with as many as its quota allows.
        "system": {"batch_size": {"type": "int", "low": 64, "high": 256, "log": True}},
        "algorithm": {"sampler": args.sampler, "seed": seed},
        "early_stopping": {"rule": "asha", "min_resource": 1, "reduction_factor": 3, "type": "promotion"},
        "placement": {"policy": policy},
        "budget": {"max_trials": args.max_trials, "max_parallel": len(args.quotas),
                   "max_wall_time_s": int(args.cap_s) + 120, "steps_per_trial": args.epochs},
        "executor": {"builtin": {"trainer": "fashion-mnist",
                                 "args": {"max_train_samples": args.train_examples,
                                          "samples_per_step": args.samples_per_step,
                                          "validation_fraction": args.validation_fraction}}},
    }
    if policy == "shadho":
        spec["placement"]["class_order"] = class_order
    return spec


# ------------------------------------------------------------- one run ----

def wait_for(what, pred, timeout, procs):
    deadline = time.time() + timeout
    while time.time() < deadline:
        for name, p in procs.procs:
            if p.poll() is not None:
                raise RuntimeError(f"{name} exited with {p.returncode} while waiting for {what}")
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise RuntimeError(f"timed out after {timeout} s waiting for {what}")


def run_one(args, seed, policy, run_dir):
    os.makedirs(run_dir)
    token = secrets.token_hex(16)
    token_file = os.path.join(run_dir, "token")
    with open(token_file, "w") as f:
        f.write(token + "\n")
    os.chmod(token_file, 0o600)
    procs = Processes()
    try:
        port_file = os.path.join(run_dir, "ports.json")
        procs.start("hpo-server", [args.server, "--store", f"sqlite://{run_dir}/hpo.db", "--http", "127.0.0.1:0",
                                   "--grpc", "127.0.0.1:0", "--port-file", port_file, "--token-file", token_file],
                    os.path.join(run_dir, "server.log"))

        def ports():
            try:
                with open(port_file) as f:
                    return json.load(f)
            except (OSError, ValueError):
                return None
        p = wait_for("the server's ports", ports, 30, procs)
        rest = Rest(p["http"], token)
        grpc = f"127.0.0.1:{p['grpc']}"
        events_path = os.path.join(run_dir, "events.jsonl")
        threading.Thread(target=record_events, args=(rest, events_path), daemon=True).start()

        worker_pids = {}
        for i, cpus in enumerate(args.quotas):
            cg = CpuCgroup(f"{CGROUP_PREFIX}{os.getpid()}-{i}", cpus)
            procs.cgroups.append(cg)
            env = dict(os.environ)
            # The worker reads its quota from the cgroup (worker/inventory.cc)
            # and trains with that many threads, at least one; OpenMP and
            # OpenBLAS pools are sized the same, so no pool spins past it.
            threads = str(max(1, int(cpus)))
            env.update({"OMP_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads, "MKL_NUM_THREADS": threads})
            env.pop("HPO_TOKEN", None)
            scratch = os.path.join(run_dir, f"scratch-{i}")
            os.makedirs(scratch)
            worker_pids[cpus] = procs.start(f"hpo-worker({cpus})",
                        [args.worker, "--server", grpc, "--token-file", token_file, "--device", "cpu",
                         "--labels", f"bench=hetero,quota={cpus}", "--data-dir", args.data_dir,
                         "--scratch-dir", scratch],
                        os.path.join(run_dir, f"worker-{i}.log"), env=env, cgroup=cg)

        def registered():
            ws = rest.call("GET", "/api/v1/workers")["workers"]
            return ws if len(ws) == len(args.quotas) else None
        workers = wait_for("the workers to register", registered, 120, procs)
        by_quota = {}
        for w in workers:
            q = float(w["labels"]["quota"])
            dev = w["devices"][0]
            if abs(dev["cores"] - q) > 1e-6:
                raise RuntimeError(f"worker {w['id']} in a {q}-core cgroup reports {dev['cores']} cores: "
                                   "its inventory does not see the quota")
            by_quota[q] = {"id": w["id"], "owner": f"worker/{w['id']}", "device": dev["id"],
                           "class": dev["device_class"],
                           "gflops": dev["benchmark_gflops"]}
        classes = [by_quota[q]["class"] for q in sorted(by_quota, reverse=True)]
        if len(set(classes)) != len(classes):
            raise RuntimeError(f"the workers' device classes are not distinct: {classes}")
        owner_quota = {v["owner"]: q for q, v in by_quota.items()}

        spec = make_spec(args, seed, policy, classes)
        with open(os.path.join(run_dir, "spec.json"), "w") as f:
            json.dump(spec, f, indent=1)
        e = rest.call("POST", "/api/v1/experiments", spec)
        eid = e["id"]
        created_ms = rest.call("GET", f"/api/v1/experiments/{eid}")["created_ms"]
        log(f"seed={seed} policy={policy}: experiment {eid}; classes (fastest first) {classes}; "
            f"GFLOP/s {[round(by_quota[q]['gflops'], 1) for q in sorted(by_quota, reverse=True)]}")
        cpu_before = {q: cpu_seconds(p.pid) for q, p in worker_pids.items()}
        result = follow(args, rest, eid, created_ms, owner_quota, procs)
        result["same_trial_speed_ratios"] = same_trial_ratios(rest, result["segments"], owner_quota)
        # The cores each worker really had (its quota is a ceiling: on a busy
        # machine a worker may get less), over the whole run.
        run_s = time.time() - created_ms / 1000
        result["effective_cores"] = {str(q): (cpu_seconds(p.pid) - cpu_before[q]) / run_s
                                     for q, p in worker_pids.items()}
        try:
            rest.call("POST", f"/api/v1/experiments/{eid}:cancel", {"reason": "bench/hetero: run over"})
        except RuntimeError:
            pass  # it may have finished on its own
        # The policy's reasons for the promotions, by the quota of the device
        # that took them.
        device_quota = {v["device"]: q for q, v in by_quota.items()}
        reasons = {}
        time.sleep(0.5)  # the last events reach the file
        try:
            with open(events_path) as f:
                for line in f:
                    ev = json.loads(line)
                    if ev["type"] == "trial.resumed" and ev["t_ms"] <= created_ms + result["wall_s"] * 1000 + 1000:
                        key = f"{device_quota.get(ev['data'].get('device_id'), '?')}: {ev['data'].get('reason')}"
                        reasons[key] = reasons.get(key, 0) + 1
        except OSError:
            pass
        result["resume_reasons"] = reasons
        result.update({"seed": seed, "policy": policy, "classes": classes,
                       "gflops": {str(q): v["gflops"] for q, v in by_quota.items()}})
        with open(os.path.join(run_dir, "result.json"), "w") as f:
            json.dump(result, f, indent=1)
        return result
    finally:
        procs.stop()


def same_trial_ratios(rest, segments, owner_quota):
    """How much faster one worker trained than another on the same trial
    (a promoted trial that moved): the heterogeneity the fleet really had,
    free of what the hyperparameters do to speed. {"1.0/0.5": [ratios]}."""
    by_trial = {}
    for s in segments:
        by_trial.setdefault(s["trial"], []).append(s)
    out = {}
    for tid, segs in by_trial.items():
        if len({s["owner"] for s in segs}) < 2:
            continue
        speeds = {}
        for m in rest.call("GET", f"/api/v1/trials/{tid}")["measurements"]:
            for s in segs:
                # A report belongs to the segment it came in (pauses upload a
                # checkpoint after the last report: a little slack).
                if s["start_ms"] <= m["created_ms"] <= s["end_ms"] + 500 and m["samples_per_sec"] > 0:
                    speeds.setdefault(owner_quota.get(s["owner"]), []).append(m["samples_per_sec"])
                    break
        qs = sorted(q for q in speeds if q is not None)
        for i, a in enumerate(qs):
            for b in qs[i + 1:]:
                out.setdefault(f"{b}/{a}", []).append(
                    round(statistics.median(speeds[b]) / statistics.median(speeds[a]), 2))
    return out


def follow(args, rest, eid, created_ms, owner_quota, procs):
    """Polls the trials until the target or the cap; returns the figures."""
    segments = []  # closed: {trial, owner, level, start_ms, end_ms}
    open_seg = {}  # trial id -> segment on a device now
    last_level = {}
    promotions = 0
    reached_ms = None
    target_trial = None
    poll_s = 0.25
    next_curves = 0.0
    last_progress = 0.0
    cap_ms = created_ms + int(args.cap_s * 1000)
    best = float("nan")
    trials = []
    while True:
        now_ms = int(time.time() * 1000)
        trials = rest.trials(eid)
        for t in trials:
            tid, state, owner = t["id"], t["state"], t["lease_owner"]
            on = state in ("leased", "running")
            # A promotion raises the level (the store's ResumeTrial): a trial
            # that paused and was resumed between two polls shows as a new
            # level, on the same device or another.
            promotions += max(0, t["level"] - last_level.get(tid, 0))
            last_level[tid] = t["level"]
            seg = open_seg.get(tid)
            if seg and (not on or seg["owner"] != owner or seg["level"] != t["level"]):
                seg["end_ms"] = now_ms
                segments.append(open_seg.pop(tid))
            if on and tid not in open_seg:
                open_seg[tid] = {"trial": tid, "owner": owner, "level": t["level"], "start_ms": now_ms}
        for name, p in procs.procs:
            if p.poll() is not None:
                raise RuntimeError(f"{name} exited with {p.returncode} during the run")
        if time.time() >= next_curves:
            next_curves = time.time() + 0.5
            curves = rest.call("GET", f"/api/v1/experiments/{eid}/measurements?metric=accuracy")["trials"]
            hits = [c["trial_id"] for c in curves if c["values"] and max(c["values"]) >= args.target]
            vals = [v for c in curves for v in c["values"]]
            best = max(vals) if vals else float("nan")
            if hits:
                # The exact moment: the first measurement at or above the
                # target, by the server's own timestamps.
                for tid in hits:
                    for m in rest.call("GET", f"/api/v1/trials/{tid}")["measurements"]:
                        if m["metrics"].get("accuracy", -1) >= args.target and (
                                reached_ms is None or m["created_ms"] < reached_ms):
                            reached_ms, target_trial = m["created_ms"], tid
        if time.time() - last_progress >= 10:
            last_progress = time.time()
            n_on = len(open_seg)
            n_paused = sum(1 for t in trials if t["state"] == "paused")
            log(f"  t={(now_ms - created_ms) / 1000:6.1f}s trials={len(trials)} on_devices={n_on} "
                f"paused={n_paused} promotions={promotions} best={best:.4f}")
        exp = rest.call("GET", f"/api/v1/experiments/{eid}")
        if reached_ms is not None or now_ms >= cap_ms or exp["state"] != "running":
            break
        time.sleep(poll_s)

    end_ms = reached_ms if reached_ms is not None else min(now_ms, cap_ms)
    if reached_ms is None and exp["state"] != "running" and now_ms < cap_ms:
        log(f"  the experiment ended ({exp['state']}: {exp.get('reason')}) before the target")
    wall_s = (end_ms - created_ms) / 1000
    state_at_end = {t["id"]: t["state"] for t in trials}
    all_segments = segments + [dict(s, end_ms=now_ms) for s in open_seg.values()]
    busy = wasted = 0.0
    per_worker = {}
    for s in all_segments:
        a, b = max(s["start_ms"], created_ms), min(s["end_ms"], end_ms)
        if b <= a:
            continue
        d = (b - a) / 1000
        busy += d
        q = owner_quota.get(s["owner"], "?")
        w = per_worker.setdefault(str(q), {"busy_s": 0.0, "by_level": {}})
        w["busy_s"] += d
        w["by_level"][str(s["level"])] = w["by_level"].get(str(s["level"]), 0.0) + d
        if state_at_end.get(s["trial"]) in ("pruned", "failed", "paused"):
            wasted += d
    # Where the winning trial ran, segment by segment.
    winner = [{"quota": owner_quota.get(s["owner"], "?"), "level": s["level"],
               "s": round((s["end_ms"] - s["start_ms"]) / 1000, 1)}
              for s in sorted(all_segments, key=lambda s: s["start_ms"]) if s["trial"] == target_trial]
    return {
        "reached": reached_ms is not None,
        "time_to_target_s": wall_s if reached_ms is not None else args.cap_s,
        "wall_s": wall_s,
        "utilization": busy / (len(owner_quota) * wall_s) if wall_s > 0 else float("nan"),
        "wasted_device_s": wasted,
        "busy_device_s": busy,
        "trials": sum(1 for t in trials if t["created_ms"] <= end_ms),
        "promotions": promotions,
        "best": best,
        "target_trial": target_trial,
        "winner_segments": winner,
        "per_worker": per_worker,
        "segments": all_segments,
    }


# ------------------------------------------------------------- main -------

def median(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(REPO, "build"), help="the CMake build directory")
    ap.add_argument("--seeds", type=int, default=5, help="seeds 1..N, each run under every policy")
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--target", type=float, default=0.88, help="validation accuracy to reach")
    ap.add_argument("--cap-s", type=float, default=135, help="a run that has not reached the target by then stops")
    ap.add_argument("--quotas", default="1.0,0.5,0.25", help="CPU cores of each worker's cgroup")
    ap.add_argument("--train-examples", type=int, default=8000, help="executor.builtin.args.max_train_samples")
    ap.add_argument("--epochs", type=int, default=8, help="budget.steps_per_trial (ASHA rungs at 1, 3, 8)")
    ap.add_argument("--samples-per-step", type=int, default=0,
                    help="executor.builtin.args.samples_per_step: examples per step (0: a pass over the training set)")
    ap.add_argument("--validation-fraction", type=float, default=0.1,
                    help="executor.builtin.args.validation_fraction: of the training set, held out and scored every step")
    ap.add_argument("--max-trials", type=int, default=200)
    ap.add_argument("--sampler", default="tpe")
    ap.add_argument("--data-dir", default=DEFAULT_DATA)
    ap.add_argument("--dir", help="keep every run's logs, spec and result.json here (default: a temp dir, removed)")
    args = ap.parse_args()
    args.quotas = [float(q) for q in args.quotas.split(",")]
    args.server = os.path.join(args.build, "server", "hpo-server")
    args.worker = os.path.join(args.build, "worker", "hpo-worker")
    policies = args.policies.split(",")
    for p in policies:
        if p not in POLICIES:
            sys.exit(f"--policies: '{p}' is not one of {', '.join(POLICIES)}")
    for b in (args.server, args.worker):
        if not os.access(b, os.X_OK):
            sys.exit(f"{b} is missing: build it (cmake -DHPO_BUILD_WORKER=ON; --target hpo-server hpo-worker)")
    if not os.path.isfile(os.path.join(args.data_dir, "train-images-idx3-ubyte.gz")) and not os.path.isfile(
            os.path.join(args.data_dir, "train-images-idx3-ubyte")):
        sys.exit(f"--data-dir {args.data_dir}: no Fashion-MNIST there (apt-get install dataset-fashion-mnist)")
    if os.geteuid() != 0:
        sys.exit("bench/hetero makes CPU cgroups: run it as root")
    if args.seeds < 1 or args.cap_s <= 0 or not 0 < args.target < 1:
        sys.exit("--seeds >= 1, --cap-s > 0 and 0 < --target < 1 are required")

    base, keep = start_run(CGROUP_PREFIX, args.dir)
    log(f"runs in {base}; target accuracy {args.target}, cap {args.cap_s:.0f} s, quotas {args.quotas}, "
        f"{args.train_examples} training examples, {args.epochs} epochs")
    results = {p: [] for p in policies}
    started = time.time()
    try:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            for policy in policies:  # interleaved: machine noise hits every policy alike
                r = run_one(args, seed, policy, os.path.join(base, f"seed{seed}-{policy}"))
                results[policy].append(r)
                print(f"bench=hetero seed={seed} policy={policy} time_to_target_s={r['time_to_target_s']:.1f} "
                      f"utilization={r['utilization']:.3f} wasted_device_s={r['wasted_device_s']:.1f} "
                      f"trials={r['trials']} promotions={r['promotions']} reached={int(r['reached'])}", flush=True)
                log(f"  best={r['best']:.4f} busy by quota (s, by level): "
                    + "; ".join(f"{q}: {w['busy_s']:.0f} {dict((k, round(v)) for k, v in w['by_level'].items())}"
                                for q, w in sorted(r["per_worker"].items(), reverse=True))
                    + f"; the winner's segments: {r['winner_segments']}; promotions by quota and reason: "
                    + f"{r['resume_reasons']}; cores used by quota: "
                    + ", ".join(f"{q}: {c:.2f}" for q, c in sorted(r["effective_cores"].items(), reverse=True))
                    + f"; same-trial speed ratios: {r['same_trial_speed_ratios']}; elapsed {time.time() - started:.0f} s")
    except KeyboardInterrupt as e:
        log(f"interrupted ({e}): processes stopped, cgroups removed")
        sys.exit(130)
    finally:
        if not keep:
            shutil.rmtree(base, ignore_errors=True)

    med = {}
    for p in policies:
        rs = results[p]
        med[p] = median([r["time_to_target_s"] for r in rs])
        print(f"bench=hetero_median policy={p} seeds={len(rs)} time_to_target_s={med[p]:.1f} "
              f"utilization={median([r['utilization'] for r in rs]):.3f} "
              f"wasted_device_s={median([r['wasted_device_s'] for r in rs]):.1f} "
              f"reached={sum(r['reached'] for r in rs)}/{len(rs)}", flush=True)
    # What the fleet really was: the cores each worker used, and how much
    # faster it trained the same trials (medians over every run).
    every = [r for p in policies for r in results[p]]
    cores = [median([r["effective_cores"][str(q)] for r in every]) for q in args.quotas]
    ratios = {}
    for r in every:
        for k, v in r["same_trial_speed_ratios"].items():
            ratios.setdefault(k, []).extend(v)
    print("bench=hetero_fleet quotas=" + ",".join(str(q) for q in args.quotas)
          + " cores_used=" + ",".join(f"{c:.2f}" for c in cores)
          + "".join(f" same_trial_speed_{k}={median(v):.2f}(n={len(v)})" for k, v in sorted(ratios.items())),
          flush=True)
    goals = {"fifo": 1.5, "shadho": 1.2}
    if "speed" in med:
        for p, goal in goals.items():
            if p in med:
                ratio = med[p] / med["speed"]
                print(f"bench=hetero_ratio policy={p} vs=speed time_to_target_ratio={ratio:.2f} goal={goal} "
                      f"met={'yes' if ratio >= goal else 'no'}", flush=True)
    log(f"done in {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
