#!/usr/bin/python3
"""bench/hetero: time to a good model on a real heterogeneous fleet, HeteroTune
against Optuna.

The real hpo-server (SQLite store in a private directory, loopback ports, a
bearer token) and one real hpo-worker per fleet member, each in its own CPU
cgroup, tune the built-in Fashion-MNIST trainer (Debian's
dataset-fashion-mnist); or, under policy `optuna`, as many Optuna worker
processes (bench/peers/optuna_hetero.py) in the same cgroups, sharing one
study. Every (fleet, seed, policy) run gets fresh processes; the policies
run in turn for each seed, so that noise on the machine falls on all alike.

Fleets (--fleet; the default runs both):
  3   1.0, 0.5 and 0.25 cores
  7   1.0 core and six of 0.125

Workloads (--workload; default, or long):
  default  8,000 training examples, a pass per step, 8 steps, target 0.88
  long     54,000 examples, 4,000 drawn per step, 27 steps, 5% held out,
           target 0.905

Policies (--policies; all five by default):
  default  HeteroTune as shipped: the spec says only what a user must
           (the spaces, the trainer, the budget), no early_stopping and no
           placement;
  speed, fifo, shadho
           the same spec with `placement: {policy: P}` (shadho with its class
           order, fastest first): the default's early stopping, only the
           placement differs;
  optuna   Optuna 3.1, TPE and SuccessiveHalvingPruner(1, 3), the same spaces,
           models, data split and validation set (bench/peers/optuna_hetero.py).

    sudo nice -n 19 flock /tmp/hpo-bench.lock bench/hetero.py [--fleet 3,7] [--workload default|long]
        [--seeds 10] [--policies default,speed,fifo,shadho,optuna] [--cap-s S] [--dir DIR] [--predict]
    bench/hetero.py --predict-from DIR [--reps 5] [--target A]

Needs root (it makes cgroups), the built binaries (build/server/hpo-server,
build/worker/hpo-worker: configure with -DHPO_BUILD_WORKER=ON), and for
`optuna` Debian's python3-optuna and python3-torch. Progress and each run's
diagnostics go to stderr, the figures to stdout:

  bench=hetero fleet=F workload=W seed=N policy=P time_to_target_s=X utilization=U best_at_cap=A
      wasted_device_s=D trials=T promotions=K moves=M preemptions=P reached=0|1
  bench=hetero_median fleet=F workload=W policy=P seeds=N time_to_target_s=X best_at_cap=A reached=R/N utilization=U
  bench=hetero_ratio fleet=F workload=W policy=P vs=default ratio=X lo=L hi=H
  bench=hetero_fleet fleet=F quotas=... cores_used=... same_trial_speed_A/B=X(n=K) ...
  bench=hetero_overheads fleet=F workload=W seed=N policy=P segments=S lease_to_first_step_ms=A
      checkpoint_restore_ms=B checkpoint_save_ms=C report_ms_per_call=D eval_s=E
      (HeteroTune's runs: the workers' own segment lines, worker/client.h; A-C medians over the
      segments that had them, -1 where none did)

With --predict (or later, --predict-from DIR on an earlier --dir DIR),
bench/fleet_sim predicts each HeteroTune policy's median from these runs'
own traces and prints it beside the measured one, in two worlds
(bench/fleet_sim.cc says how): `others`, a seed simulated from the other
seeds' trials only; `replay`, the seed's own configurations created in its
own order, so that only placement and timing are simulated:

  bench=fleet_predict fleet=F workload=W policy=P world=others|replay seeds=N reps=R
      predicted_s=X measured_s=Y measured_lo=L measured_hi=H ratio=X/Y reached=K/M

--predict-from with --target predicts and measures the time to another
validation accuracy (each kept run's own from its events), for a fleet on
which the runs' own target falls at the cap's cliff.

(measured_lo-measured_hi: the measured median's 90% bootstrap interval
over its seeds, where another run of as many seeds could have put it.)

Definitions (HeteroTune's from its REST API, Optuna's from its workers'
logs; see bench/README.md):
  time_to_target_s  from the experiment's creation (Optuna: the start
                    signal) until a stored validation accuracy first reaches
                    the target; a run that has not by --cap-s counts as
                    --cap-s, with reached=0.
  best_at_cap       the best validation accuracy stored by --cap-s (every
                    run goes on to the cap unless --stop-at-target).
  utilization       device-seconds the workers held a trial (HeteroTune:
                    leased or running; Optuna: from a trial's sampled
                    parameters to its end), over (workers x time_to_target_s).
  wasted_device_s   device-seconds, within that time, spent on trials that
                    were stopped by then: pruned or failed, or paused at a
                    rung and not promoted.
  ratio             the median over seeds of P's time_to_target_s over
                    default's in the same seed (above 1: default sooner),
                    lo..hi its 90% bootstrap interval (10,000 resamples of
                    the seeds, a fixed seed).
"""
import argparse
import json
import os
import random
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
POLICIES = ("default", "speed", "fifo", "shadho", "optuna")
FLEETS = {3: [1.0, 0.5, 0.25], 7: [1.0] + [0.125] * 6}
# The runs' settings; --train-examples etc. override one (the lines then
# name the workload "custom"). cap_s bounds a run: every run goes on to it,
# so the default run's length is about seeds x policies x fleets x
# (cap_s + the start-up of a run).
WORKLOADS = {
    "default": {"train_examples": 8000, "samples_per_step": 0, "steps": 8, "validation_fraction": 0.1,
                "target": 0.88, "cap_s": 40},
    "long": {"train_examples": 54000, "samples_per_step": 4000, "steps": 27, "validation_fraction": 0.05,
             "target": 0.905, "cap_s": 150},
}
DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"
CGROUP_PREFIX = "hpo-hetero-"
PEER = os.path.join(REPO, "bench", "peers", "optuna_hetero.py")
BOOTSTRAP_SEED = 46
BOOTSTRAP_RESAMPLES = 10000


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


def spawn(argv, logf, env=None, cgroup=None, stdin=subprocess.DEVNULL):
    """Starts argv in a session (process group) of its own, its output to logf;
    with cgroup, inside that cgroup from its first instruction."""
    if cgroup:
        # A shell that moves itself into the cgroup and then becomes the
        # worker: the whole process, its first instruction and every
        # thread it makes, runs under the quota.
        argv = ["/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', cgroup.path] + argv
    return subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, stdin=stdin,
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

    def start(self, name, argv, log_path, env=None, cgroup=None, stdin=subprocess.DEVNULL):
        logf = open(log_path, "w")
        self.logs.append(logf)
        p = spawn(argv, logf, env, cgroup, stdin)
        self.procs.append((name, p))
        return p

    def stop(self, grace_s=5):
        """SIGTERM to every process, SIGKILL to those still there after
        grace_s; then the cgroups go."""
        # A second Ctrl-C or a kill must not cut the clean-up short.
        previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            self._stop(grace_s)
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)

    def _stop(self, grace_s):
        for _, p in reversed(self.procs):
            if p.poll() is None:
                signal_group(p, signal.SIGTERM)
        deadline = time.time() + grace_s
        for _, p in self.procs:
            wait_or_kill(p, max(0.1, deadline - time.time()))
            if p.stdin:
                try:
                    p.stdin.close()
                except OSError:
                    pass  # the reader is gone
        self.procs = []
        for c in self.cgroups:
            c.remove()
        self.cgroups = []
        for f in self.logs:
            f.close()
        self.logs = []


# ------------------------------------------------------------- the spec ---

def make_spec(args, seed, policy, class_order, n_workers):
    """One run's experiment. `default` says only what a user must: the
    spaces, the trainer and the budget (steps per trial, max_parallel for
    the fleet's size); no early_stopping and no placement, so that
    server/spec/spec.h's defaults decide them. The other policies add
    `placement` and nothing else."""
    spec = {
        "name": f"hetero-seed{seed}-{policy}",
        "objective": {"metric": "accuracy", "direction": "maximize"},  # validation accuracy
        # The main job's spaces (examples/fashion-mnist.yaml), except that its
        # CNN's learning rate is annealed there (lr_schedule: [cosine]) and
        # constant here: bench/README's figures were measured on these.
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
        # The seed pairs the runs of one seed; the sampler is the shipped
        # default unless --sampler names one.
        "algorithm": {"seed": seed},
        "budget": {"max_trials": args.max_trials, "max_parallel": n_workers,
                   "max_wall_time_s": int(args.cap_s) + 120, "steps_per_trial": args.steps},
        "executor": {"builtin": {"trainer": "fashion-mnist",
                                 "args": {"max_train_samples": args.train_examples,
                                          "samples_per_step": args.samples_per_step,
                                          "validation_fraction": args.validation_fraction}}},
    }
    if args.sampler:
        spec["algorithm"]["sampler"] = args.sampler
    if args.early_stopping:
        spec["early_stopping"] = json.loads(args.early_stopping)
    if policy != "default":
        spec["placement"] = {"policy": policy}
    if policy == "shadho":
        spec["placement"]["class_order"] = class_order
    return spec


# ------------------------------------------------------------- one run ----

def read_ports(port_file):
    """The ports hpo-server wrote to its --port-file ({"http": N, "grpc": M}),
    or None while it has not (yet) written all of it: poll with wait_for."""
    try:
        with open(port_file) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


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


def thread_env(cpus):
    """The environment of a worker in a `cpus`-core cgroup, HeteroTune's or
    Optuna's alike. hpo-worker reads its quota from the cgroup
    (worker/inventory.cc) and trains with that many threads, at least one;
    OpenMP and OpenBLAS pools are sized the same, so no pool spins past it."""
    env = dict(os.environ)
    threads = max(1, int(cpus))
    env.update({"OMP_NUM_THREADS": str(threads), "OPENBLAS_NUM_THREADS": str(threads),
                "MKL_NUM_THREADS": str(threads)})
    env.pop("HPO_TOKEN", None)
    return env, threads


def make_cgroups(procs, quotas):
    out = []
    for i, cpus in enumerate(quotas):
        cg = CpuCgroup(f"{CGROUP_PREFIX}{os.getpid()}-{i}", cpus)
        procs.cgroups.append(cg)
        out.append(cg)
    return out


def run_heterotune(args, fleet, seed, policy, run_dir):
    quotas = FLEETS[fleet]
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
        p = wait_for("the server's ports", lambda: read_ports(port_file), 30, procs)
        rest = Rest(p["http"], token)
        grpc = f"127.0.0.1:{p['grpc']}"
        events_path = os.path.join(run_dir, "events.jsonl")
        threading.Thread(target=record_events, args=(rest, events_path), daemon=True).start()

        worker_procs = {}
        for i, cg in enumerate(make_cgroups(procs, quotas)):
            env, _ = thread_env(cg.cpus)
            scratch = os.path.join(run_dir, f"scratch-{i}")
            os.makedirs(scratch)
            worker_procs[i] = procs.start(f"hpo-worker({i}: {cg.cpus})",
                        [args.worker, "--server", grpc, "--token-file", token_file, "--device", "cpu",
                         "--labels", f"bench=hetero,quota={cg.cpus},index={i}", "--data-dir", args.data_dir,
                         "--scratch-dir", scratch],
                        os.path.join(run_dir, f"worker-{i}.log"), env=env, cgroup=cg)

        def registered():
            ws = rest.call("GET", "/api/v1/workers")["workers"]
            return ws if len(ws) == len(quotas) else None
        workers = wait_for("the workers to register", registered, 180, procs)
        by_index = {}
        for w in workers:
            i, q = int(w["labels"]["index"]), float(w["labels"]["quota"])
            dev = w["devices"][0]
            if abs(dev["cores"] - q) > 1e-6:
                raise RuntimeError(f"worker {w['id']} in a {q}-core cgroup reports {dev['cores']} cores: "
                                   "its inventory does not see the quota")
            by_index[i] = {"quota": q, "owner": f"worker/{w['id']}", "device": dev["id"],
                           "class": dev["device_class"], "gflops": dev["benchmark_gflops"]}
        # One class per quota, fastest first (SHADHO's order).
        class_of = {}
        for v in by_index.values():
            class_of.setdefault(v["quota"], set()).add(v["class"])
        if any(len(c) != 1 for c in class_of.values()) or len({next(iter(c)) for c in class_of.values()}) != len(
                class_of):
            raise RuntimeError(f"each quota should be one device class of its own: {class_of}")
        classes = [next(iter(class_of[q])) for q in sorted(class_of, reverse=True)]
        owner_quota = {v["owner"]: v["quota"] for v in by_index.values()}
        owner_index = {v["owner"]: i for i, v in by_index.items()}

        spec = make_spec(args, seed, policy, classes, len(quotas))
        with open(os.path.join(run_dir, "spec.json"), "w") as f:
            json.dump(spec, f, indent=1)
        cpu_before = {i: cpu_seconds(p.pid) for i, p in worker_procs.items()}
        e = rest.call("POST", "/api/v1/experiments", spec)
        eid = e["id"]
        created_ms = rest.call("GET", f"/api/v1/experiments/{eid}")["created_ms"]
        log(f"  experiment {eid}; classes (fastest first) {classes}; GFLOP/s by worker "
            f"{[round(by_index[i]['gflops'], 1) for i in sorted(by_index)]}")
        result = follow(args, rest, eid, created_ms, owner_quota, owner_index, procs)
        result["same_trial_speed_ratios"] = same_trial_ratios(rest, result["segments"], owner_quota)
        # The cores each worker really had (its quota is a ceiling: on a busy
        # machine a worker may get less), over the whole run.
        run_s = time.time() - created_ms / 1000
        result["effective_cores"] = {str(i): (cpu_seconds(p.pid) - cpu_before[i]) / run_s
                                     for i, p in worker_procs.items()}
        try:
            rest.call("POST", f"/api/v1/experiments/{eid}:cancel", {"reason": "bench/hetero: run over"})
        except RuntimeError:
            pass  # it may have finished on its own
        # The policy's reasons for the promotions, by the quota of the device
        # that took them.
        device_quota = {v["device"]: v["quota"] for v in by_index.values()}
        reasons = {}
        moves = preemptions = 0
        time.sleep(0.5)  # the last events reach the file
        try:
            with open(events_path) as f:
                for line in f:
                    ev = json.loads(line)
                    in_clock = ev["t_ms"] <= created_ms + result["wall_s"] * 1000 + 1000
                    moves += ev["type"] == "trial.moving" and in_clock
                    preemptions += ev["type"] == "trial.preempted" and in_clock
                    if ev["type"] == "trial.resumed" and in_clock:
                        key = f"{device_quota.get(ev['data'].get('device_id'), '?')}: {ev['data'].get('reason')}"
                        reasons[key] = reasons.get(key, 0) + 1
        except OSError:
            pass
        result["resume_reasons"] = reasons
        result["moves"], result["preemptions"] = moves, preemptions
        result.update({"classes": classes, "quotas": {str(i): v["quota"] for i, v in by_index.items()},
                       "gflops": {str(i): v["gflops"] for i, v in by_index.items()}})
        return result
    finally:
        # The run is over: a worker need not finish its step (SIGTERM makes
        # hpo-worker drain, and its reports then wait on a stopped server).
        procs.stop(grace_s=1.5)


def same_trial_ratios(rest, segments, owner_quota):
    """How much faster one worker trained than another on the same trial
    (a promoted trial that moved): the heterogeneity the fleet really had,
    free of what the hyperparameters do to speed. {"1.0/0.5": [ratios]}."""
    by_trial = {}
    for s in segments:
        by_trial.setdefault(s["trial"], []).append(s)
    out = {}
    for tid, segs in by_trial.items():
        if len({owner_quota.get(s["owner"]) for s in segs}) < 2:
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


def winner_path(segments, first_ms, reached_ms):
    """Where the winning trial ran until it reached the target, segment by
    segment: the worker (index and quota), the ASHA level, when it started
    (s after the clock's start), how long it ran, and how long the trial
    waited before it (since its creation, or since its last segment)."""
    out, prev_end = [], first_ms
    for s in sorted(segments, key=lambda s: s["start_ms"]):
        if s["start_ms"] > reached_ms:
            break
        end = min(s["end_ms"], reached_ms)
        out.append({"worker": s["worker"], "quota": s["quota"], "level": s.get("level", 0),
                    "at_s": round((s["start_ms"] - s["clock_ms"]) / 1000, 1),
                    "ran_s": round((end - s["start_ms"]) / 1000, 1),
                    "waited_s": round(max(0, s["start_ms"] - prev_end) / 1000, 1)})
        prev_end = end
    return out


def follow(args, rest, eid, created_ms, owner_quota, owner_index, procs):
    """Polls the trials until the cap (or the target, with --stop-at-target);
    returns the figures."""
    segments = []  # closed: {trial, owner, level, start_ms, end_ms}
    open_seg = {}  # trial id -> segment on a device now
    last_level = {}
    promotions_at = []  # the poll time of each promotion seen
    reached_ms = None
    target_trial = None
    poll_s = 0.25
    next_curves = 0.0
    last_progress = 0.0
    cap_ms = created_ms + int(args.cap_s * 1000)
    best = float("nan")
    checked = set()  # trials whose measurements were searched for the target
    state_at_target = None
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
            promotions_at += [now_ms] * max(0, t["level"] - last_level.get(tid, 0))
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
            # After the target the curves only feed the progress line.
            next_curves = time.time() + (0.5 if reached_ms is None else 5)
            curves = rest.call("GET", f"/api/v1/experiments/{eid}/measurements?metric=accuracy")["trials"]
            hits = [c["trial_id"] for c in curves if c["values"] and max(c["values"]) >= args.target
                    and reached_ms is None]
            vals = [v for c in curves for v in c["values"]]
            best = max(vals) if vals else float("nan")
            # The exact moment: the first measurement at or above the target,
            # by the server's own timestamps.
            for tid in hits:
                if tid in checked:
                    continue
                checked.add(tid)
                for m in rest.call("GET", f"/api/v1/trials/{tid}")["measurements"]:
                    if m["metrics"].get("accuracy", -1) >= args.target and (
                            reached_ms is None or m["created_ms"] < reached_ms):
                        reached_ms, target_trial = m["created_ms"], tid
            if reached_ms is not None and state_at_target is None:
                state_at_target = {t["id"]: t["state"] for t in trials}
        if time.time() - last_progress >= 10:
            last_progress = time.time()
            n_paused = sum(1 for t in trials if t["state"] == "paused")
            log(f"  t={(now_ms - created_ms) / 1000:6.1f}s trials={len(trials)} on_devices={len(open_seg)} "
                f"paused={n_paused} promotions={len(promotions_at)} best={best:.4f}"
                + (f" reached at {(reached_ms - created_ms) / 1000:.1f}s" if reached_ms else ""))
        exp = rest.call("GET", f"/api/v1/experiments/{eid}")
        if now_ms >= cap_ms or exp["state"] != "running" or (args.stop_at_target and reached_ms is not None):
            break
        time.sleep(poll_s if reached_ms is None else 1.0)  # after the target only the cap is waited for

    end_ms = reached_ms if reached_ms is not None else min(now_ms, cap_ms)
    if reached_ms is None and exp["state"] != "running" and now_ms < cap_ms:
        log(f"  the experiment ended ({exp['state']}: {exp.get('reason')}) before the target")
    wall_s = (end_ms - created_ms) / 1000
    # The best validation accuracy stored by the cap, from every trial's
    # measurements (the curves carry no times).
    best_at_cap = float("nan")
    if not args.stop_at_target:
        best_at_cap = -1.0
        for t in trials:
            for m in rest.call("GET", f"/api/v1/trials/{t['id']}")["measurements"]:
                a = m["metrics"].get("accuracy")
                if a is not None and m["created_ms"] <= cap_ms:
                    best_at_cap = max(best_at_cap, a)
        if best_at_cap < 0:
            best_at_cap = float("nan")
    # Whether a trial had been stopped by the end of the clock: the states
    # at the first poll that saw the target (or at the cap).
    state_at_end = state_at_target or {t["id"]: t["state"] for t in trials}
    created = {t["id"]: t["created_ms"] for t in trials}
    all_segments = segments + [dict(s, end_ms=now_ms) for s in open_seg.values()]
    for s in all_segments:
        s["quota"] = owner_quota.get(s["owner"], "?")
        s["worker"] = owner_index.get(s["owner"], "?")
        s["clock_ms"] = created_ms
    busy = wasted = 0.0
    per_worker = {}
    for s in all_segments:
        a, b = max(s["start_ms"], created_ms), min(s["end_ms"], end_ms)
        if b <= a:
            continue
        d = (b - a) / 1000
        busy += d
        w = per_worker.setdefault(str(s["quota"]), {"busy_s": 0.0, "by_level": {}})
        w["busy_s"] += d
        w["by_level"][str(s["level"])] = w["by_level"].get(str(s["level"]), 0.0) + d
        if state_at_end.get(s["trial"]) in ("pruned", "failed", "paused"):
            wasted += d
    winner = []
    if target_trial is not None:
        winner = winner_path([s for s in all_segments if s["trial"] == target_trial], created[target_trial],
                             reached_ms)
    return {
        "reached": reached_ms is not None,
        "time_to_target_s": wall_s if reached_ms is not None else args.cap_s,
        "wall_s": wall_s,
        "utilization": busy / (len(set(owner_quota)) * wall_s) if wall_s > 0 else float("nan"),
        "wasted_device_s": wasted,
        "busy_device_s": busy,
        "best_at_cap": best_at_cap,
        "trials": sum(1 for t in trials if t["created_ms"] <= end_ms),
        "promotions": sum(1 for t in promotions_at if t <= end_ms),
        "best": best,
        "target_trial": target_trial,
        "winner_segments": winner,
        "per_worker": per_worker,
        "segments": all_segments,
    }


# ------------------------------------------------------------- Optuna -----

def read_events(path, offset):
    """New complete JSON lines of a peer's log from `offset`: (events, offset)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return [], offset
    end = data.rfind(b"\n") + 1
    return [json.loads(line) for line in data[:end].splitlines() if line.strip()], offset + end


def move_into(cgroup, pid):
    """Moves process `pid`, every thread of it, into `cgroup`, and checks."""
    with open(os.path.join(cgroup.path, "cgroup.procs"), "w") as f:
        f.write(str(pid))
    if pid not in cgroup.procs():
        raise RuntimeError(f"process {pid} is not in {cgroup.path} after moving it there")


def run_optuna(args, fleet, seed, run_dir):
    """Optuna's run: one peer process per fleet member, with the same thread
    counts as hpo-worker, warm before the clock, then moved into the cgroup
    an hpo-worker gets; the clock starts when every one of them gets the
    start byte. They warm up outside their cgroups (importing torch and
    Optuna and loading the data take 2-3 CPU-seconds, 20 s at 0.125 cores),
    which only shortens the bench: nothing of it is inside the clock."""
    quotas = FLEETS[fleet]
    os.makedirs(run_dir)
    procs = Processes()
    logs = [os.path.join(run_dir, f"optuna-events-{i}.jsonl") for i in range(len(quotas))]
    try:
        peers = []
        cgroups = make_cgroups(procs, quotas)
        for i, cg in enumerate(cgroups):
            env, threads = thread_env(cg.cpus)
            # hpo-worker sets this itself (worker/main.cc, PreferPassiveOpenMp).
            env["OMP_WAIT_POLICY"] = "PASSIVE"
            argv = ["/usr/bin/python3", PEER, "worker", "--storage", os.path.join(run_dir, "optuna-journal.log"),
                    "--study", f"hetero-seed{seed}", "--seed", str(seed), "--index", str(i), "--log", logs[i],
                    "--threads", str(threads), "--steps", str(args.steps),
                    "--train-examples", str(args.train_examples),
                    "--samples-per-step", str(args.samples_per_step),
                    "--validation-fraction", str(args.validation_fraction),
                    "--pruner", args.optuna_pruner, "--eval-batch", str(args.optuna_eval_batch),
                    "--data-dir", args.data_dir]
            peers.append(procs.start(f"optuna worker({i}: {cg.cpus})", argv,
                                     os.path.join(run_dir, f"optuna-worker-{i}.log"), env=env,
                                     stdin=subprocess.PIPE))
        offsets = [0] * len(quotas)
        events = [[] for _ in quotas]

        def all_ready():
            for i in range(len(quotas)):
                evs, offsets[i] = read_events(logs[i], offsets[i])
                events[i] += evs
            return all(any(e["event"] == "ready" for e in evs) for evs in events)
        wait_for("the Optuna workers to be warm", all_ready, 600, procs)
        load_s = [next(e["load_s"] for e in evs if e["event"] == "ready") for evs in events]
        for cg, p in zip(cgroups, peers):
            move_into(cg, p.pid)
        time.sleep(0.2)  # settled in their cgroups before the clock
        cpu_before = [cpu_seconds(p.pid) for p in peers]
        t0 = time.time()
        for p in peers:
            p.stdin.write(b"g")
            p.stdin.flush()
        log(f"  {len(peers)} Optuna workers warm (load, import and warm-up took {min(load_s):.1f}-"
            f"{max(load_s):.1f} s), moved into their cgroups; clock started")
        cap_t = t0 + args.cap_s
        reached_t, best, last_progress = None, float("nan"), 0.0
        while True:
            for i in range(len(quotas)):
                evs, offsets[i] = read_events(logs[i], offsets[i])
                events[i] += evs
                for e in evs:
                    if e["event"] == "measure" and e["t"] <= cap_t:
                        best = e["accuracy"] if best != best else max(best, e["accuracy"])
                        if e["accuracy"] >= args.target and (reached_t is None or e["t"] < reached_t):
                            reached_t = e["t"]
            for name, p in procs.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited with {p.returncode} during the run")
            now = time.time()
            if now - last_progress >= 10:
                last_progress = now
                n = sum(1 for evs in events for e in evs if e["event"] == "trial")
                log(f"  t={now - t0:6.1f}s trials={n} best={best:.4f}"
                    + (f" reached at {reached_t - t0:.1f}s" if reached_t else ""))
            if now >= cap_t or (args.stop_at_target and reached_t is not None):
                break
            time.sleep(0.25)
        run_s = time.time() - t0
        effective = {str(i): (cpu_seconds(p.pid) - cpu_before[i]) / run_s for i, p in enumerate(peers)}
    finally:
        procs.stop()
    result = optuna_figures(args, events, quotas, t0, reached_t)
    result["effective_cores"] = effective
    result["load_s"] = load_s
    result["quotas"] = {str(i): q for i, q in enumerate(quotas)}
    return result


def optuna_figures(args, events, quotas, t0, reached_t):
    """bench/hetero's figures from the peers' logs: each trial is one
    segment on one worker, from its sampled parameters to its end."""
    end_t = reached_t if reached_t is not None else t0 + args.cap_s
    segments, measures = [], []
    for i, evs in enumerate(events):
        prev_end = None
        seg = None
        for e in evs:
            if e["event"] == "start":
                prev_end = e["t"]
            elif e["event"] == "trial":
                seg = {"trial": e["trial"], "worker": i, "quota": quotas[i], "level": 0, "start_t": e["t"],
                       "end_t": None, "state": "running", "space": e["space"], "sampled_after_s": e["t"] - prev_end,
                       "samples_per_s": []}
                segments.append(seg)
            elif e["event"] == "measure":
                measures.append(dict(e, worker=i))
                if seg is not None and seg["trial"] == e["trial"]:
                    seg["samples_per_s"].append(e["samples_per_s"])
            elif e["event"] == "end" and seg is not None and seg["trial"] == e["trial"]:
                seg["end_t"], seg["state"] = e["t"], e["state"]
                prev_end = e["t"]
    busy = wasted = 0.0
    per_worker = {}
    for s in segments:
        a, b = max(s["start_t"], t0), min(s["end_t"] or float("inf"), end_t)
        if b <= a:
            continue
        d = b - a
        busy += d
        w = per_worker.setdefault(str(s["quota"]), {"busy_s": 0.0, "by_level": {}})
        w["busy_s"] += d
        w["by_level"]["0"] = w["by_level"].get("0", 0.0) + d
        if s["state"] == "pruned" and s["end_t"] <= end_t:
            wasted += d
    best_at_cap = float("nan")
    if not args.stop_at_target:
        at_cap = [m["accuracy"] for m in measures if m["t"] <= t0 + args.cap_s]
        best_at_cap = max(at_cap) if at_cap else float("nan")
    winner = []
    target_trial = None
    if reached_t is not None:
        first = min((m for m in measures if m["accuracy"] >= args.target and m["t"] <= reached_t),
                    key=lambda m: m["t"])
        target_trial = first["trial"]
        s = next(s for s in segments if s["trial"] == target_trial)
        winner = [{"worker": s["worker"], "quota": s["quota"], "level": 0, "at_s": round(s["start_t"] - t0, 1),
                   "ran_s": round(reached_t - s["start_t"], 1), "waited_s": round(s["sampled_after_s"], 1)}]
    wall_s = end_t - t0
    return {
        "reached": reached_t is not None,
        "time_to_target_s": wall_s if reached_t is not None else args.cap_s,
        "wall_s": wall_s,
        "utilization": busy / (len(quotas) * wall_s) if wall_s > 0 else float("nan"),
        "wasted_device_s": wasted,
        "busy_device_s": busy,
        "best_at_cap": best_at_cap,
        "trials": sum(1 for s in segments if s["start_t"] <= end_t),
        "promotions": 0,  # stop-type: a trial goes on or stops, never pauses
        "best": max((m["accuracy"] for m in measures), default=float("nan")),
        "target_trial": target_trial,
        "winner_segments": winner,
        "per_worker": per_worker,
        "segments": [dict(s, start_s=round(s["start_t"] - t0, 3),
                          end_s=None if s["end_t"] is None else round(s["end_t"] - t0, 3)) for s in segments],
        "same_trial_speed_ratios": {},
        "resume_reasons": {},
    }


# ------------------------------------------------------------- figures ----

def median(xs):
    return statistics.median(xs) if xs else float("nan")


def bootstrap_median_interval(xs, level=0.90):
    """The `level` interval of the median of xs by the percentile bootstrap,
    with a fixed seed so that one run's figures print the same twice."""
    rng = random.Random(BOOTSTRAP_SEED)
    n = len(xs)
    meds = sorted(statistics.median(rng.choices(xs, k=n)) for _ in range(BOOTSTRAP_RESAMPLES))
    lo = meds[int((1 - level) / 2 * BOOTSTRAP_RESAMPLES)]
    hi = meds[min(BOOTSTRAP_RESAMPLES - 1, int((1 + level) / 2 * BOOTSTRAP_RESAMPLES))]
    return lo, hi


SEGMENT_KEYS = ("lease_to_first_step_ms", "checkpoint_restore_ms", "checkpoint_save_ms", "report_ms", "reports",
                "eval_ms", "segment_ms")


def segment_overheads(run_dir):
    """The workers' own account of each segment (worker/client.h: one
    `segment trial=N ...` line per lease), over the run: how many segments,
    the median lease-to-first-step, the median checkpoint restore (of the
    resumed segments) and save (of the paused ones), the mean Report call
    and the evaluations' total."""
    segs = []
    for name in sorted(os.listdir(run_dir)):
        if not (name.startswith("worker-") and name.endswith(".log")):
            continue
        with open(os.path.join(run_dir, name), errors="replace") as f:
            for line in f:
                at = line.find("segment trial=")
                if at < 0:
                    continue
                fields = dict(kv.split("=", 1) for kv in line[at + len("segment "):].split() if "=" in kv)
                try:
                    seg = {k: float(fields[k]) for k in SEGMENT_KEYS + ("resume_step",) if k in fields}
                except ValueError:
                    continue
                seg["end"] = fields.get("end", "")
                segs.append(seg)

    def med(key, of):
        vals = [s[key] for s in segs if key in s and s[key] >= 0 and of(s)]
        return statistics.median(vals) if vals else -1
    reports = sum(s.get("reports", 0) for s in segs)
    return {"segments": len(segs),
            "lease_to_first_step_ms": med("lease_to_first_step_ms", lambda s: True),
            "checkpoint_restore_ms": med("checkpoint_restore_ms", lambda s: s.get("resume_step", 0) > 0),
            "checkpoint_save_ms": med("checkpoint_save_ms", lambda s: s["end"] == "paused"),
            "report_ms_per_call": sum(s.get("report_ms", 0) for s in segs) / reports if reports else -1,
            "eval_s": sum(max(0, s.get("eval_ms", 0)) for s in segs) / 1000}


def describe_run(r):
    """The run's diagnostics on stderr: busy time by quota and level, the
    winner's path, promotions' reasons, cores used."""
    parts = ["best={:.4f}".format(r["best"])]
    parts.append("busy by quota (s, by level): " + "; ".join(
        f"{q}: {w['busy_s']:.0f} {dict((k, round(v)) for k, v in w['by_level'].items())}"
        for q, w in sorted(r["per_worker"].items(), reverse=True)))
    if r["winner_segments"]:
        ran = sum(s["ran_s"] for s in r["winner_segments"])
        waited = sum(s["waited_s"] for s in r["winner_segments"])
        parts.append(f"the winner (trial {r['target_trial']}) ran {ran:.1f} s and waited {waited:.1f} s: " + ", ".join(
            f"[worker {s['worker']} ({s['quota']}) level {s['level']} at {s['at_s']}s: ran {s['ran_s']}s "
            f"after waiting {s['waited_s']}s]" for s in r["winner_segments"]))
    if r.get("resume_reasons"):
        parts.append(f"promotions by quota and reason: {r['resume_reasons']}")
    parts.append("cores used by worker: " + ", ".join(
        f"{i} ({r['quotas'][i]}): {c:.2f}" for i, c in sorted(r["effective_cores"].items(), key=lambda x: int(x[0]))))
    if r.get("same_trial_speed_ratios"):
        parts.append(f"same-trial speed ratios: {r['same_trial_speed_ratios']}")
    return "; ".join(parts)


def print_fleet_summary(fleet, workload, policies, results, cap_s):
    for p in policies:
        rs = results[p]
        print(f"bench=hetero_median fleet={fleet} workload={workload} policy={p} seeds={len(rs)} "
              f"time_to_target_s={median([r['time_to_target_s'] for r in rs]):.1f} "
              f"best_at_cap={median([r['best_at_cap'] for r in rs]):.4f} "
              f"reached={sum(r['reached'] for r in rs)}/{len(rs)} "
              f"utilization={median([r['utilization'] for r in rs]):.3f}", flush=True)
    if "default" in policies:
        for p in policies:
            if p == "default":
                continue
            ratios = [r["time_to_target_s"] / d["time_to_target_s"] for r, d in zip(results[p], results["default"])]
            if not ratios:
                continue
            lo, hi = bootstrap_median_interval(ratios)
            print(f"bench=hetero_ratio fleet={fleet} workload={workload} policy={p} vs=default "
                  f"ratio={median(ratios):.2f} lo={lo:.2f} hi={hi:.2f}", flush=True)
    else:
        log("no ratios: --policies does not include default")
    # What the fleet really was: the cores each worker used, and how much
    # faster it trained the same trials (medians over every run).
    every = [r for p in policies for r in results[p]]
    by_quota = {}
    for r in every:
        for i, c in r["effective_cores"].items():
            by_quota.setdefault(r["quotas"][i], []).append(c)
    ratios = {}
    for r in every:
        for k, v in r.get("same_trial_speed_ratios", {}).items():
            ratios.setdefault(k, []).extend(v)
    print(f"bench=hetero_fleet fleet={fleet} workload={workload} quotas=" + ",".join(str(q) for q in FLEETS[fleet])
          + " cores_used=" + ",".join(f"{q}:{median(v):.2f}" for q, v in sorted(by_quota.items(), reverse=True))
          + "".join(f" same_trial_speed_{k}={median(v):.2f}(n={len(v)})" for k, v in sorted(ratios.items())),
          flush=True)


# ------------------------------------------------------ prediction -------

# The spec's defaults for what make_spec leaves out (server/spec/spec.h).
DEFAULT_EARLY_STOPPING = {"rule": "asha", "type": "stop", "min_resource": 1, "reduction_factor": 3}
SERVER_LEASE_WAIT_S = 5.0  # hpo-server's --max-lease-wait default: the smaller of 5 s and half the lease timeout


def traced_trials(run_dir, result):
    """Each HeteroTune trial of one run that reported: its space and
    parameters, its validation accuracy step by step (from step 1, as far as
    it is contiguous) and the device-seconds a step took at speed 1 (a
    segment's time from its lease to its last report, times its worker's
    quota, over its reports: evaluation, reports and the segment's start
    included)."""
    created, reports = {}, {}
    with open(os.path.join(run_dir, "events.jsonl")) as f:
        for line in f:
            ev = json.loads(line)
            d = ev["data"]
            if ev["type"] == "trial.created":
                created[d["trial_id"]] = d
            elif ev["type"] == "trial.reported" and "accuracy" in d.get("metrics", {}):
                reports.setdefault(d["trial_id"], []).append((ev["t_ms"], d["step"], d["metrics"]["accuracy"]))
    cost = {}  # trial -> [device-seconds at speed 1, steps]
    for seg in result["segments"]:
        mine = [t for t, _, _ in reports.get(seg["trial"], []) if seg["start_ms"] < t <= seg["end_ms"]]
        if mine:
            c = cost.setdefault(seg["trial"], [0.0, 0])
            c[0] += (max(mine) - seg["start_ms"]) / 1000 * seg["quota"]
            c[1] += len(mine)
    trials = []
    for tid, rs in sorted(reports.items()):
        if tid not in created or tid not in cost:
            continue
        by_step = {step: acc for _, step, acc in sorted(rs)}  # a step run again: its last report
        values = []
        while len(values) + 1 in by_step:
            values.append(by_step[len(values) + 1])
        if values:
            trials.append({"space": created[tid]["space"], "params": created[tid]["params"], "values": values,
                           "step_s": cost[tid][0] / cost[tid][1]})
    return trials


def time_to(run_dir, result, target, cap_s):
    """A run's time to another target, measured from its events as follow()
    measures it: the first validation accuracy reported at or above it,
    from the experiment's creation, within the cap (None if none)."""
    if not result.get("segments"):
        return None
    created_ms = result["segments"][0]["clock_ms"]
    first = None
    with open(os.path.join(run_dir, "events.jsonl")) as f:
        for line in f:
            ev = json.loads(line)
            if ev["type"] != "trial.reported" or ev["data"].get("metrics", {}).get("accuracy", -1) < target:
                continue
            t = (ev["t_ms"] - created_ms) / 1000
            if t <= cap_s and (first is None or t < first):
                first = t
    return first


def write_trace(run_dirs, path, cap_s, target=None):
    """bench/fleet_sim's --trace file from bench/hetero's HeteroTune runs of
    one fleet and workload (their spec.json, result.json and events.jsonl).
    With `target`, each run's measured time is to that target instead of
    its own (from the run's events)."""
    runs, first, save_ms = [], None, []
    for run_dir in run_dirs:
        with open(os.path.join(run_dir, "result.json")) as f:
            r = json.load(f)
        if r.get("overheads", {}).get("checkpoint_save_ms", -1) >= 0:
            save_ms.append(r["overheads"]["checkpoint_save_ms"])
        with open(os.path.join(run_dir, "spec.json")) as f:
            spec = json.load(f)
        first = first or (r, spec)
        trials = traced_trials(run_dir, r)
        for t in trials:  # system parameters (batch size) are not the spaces'
            t["params"] = {k: v for k, v in t["params"].items() if k not in spec.get("system", {})}
        measured = r["time_to_target_s"] if r["reached"] else None
        if target is not None:
            measured = time_to(run_dir, r, target, cap_s)
        runs.append({"seed": r["seed"], "policy": r["policy"], "time_to_target_s": measured, "trials": trials})
    r, spec = first
    es = dict(DEFAULT_EARLY_STOPPING, **spec.get("early_stopping", {}))
    args = spec["executor"]["builtin"]["args"]
    trace = {
        "fleet": str(r["fleet"]), "workload": r["workload"],
        "spaces": spec["spaces"],
        "device_speeds": [r["quotas"][str(i)] for i in range(len(r["quotas"]))],
        # A traced step's time holds its segment's start already; a pause's
        # checkpoint comes after the last report.
        "segment_start_s": 0.0,
        "pause_s": median(save_ms) / 1000 if save_ms else 0.0,
        "direction": spec["objective"]["direction"],
        "target": target if target is not None else r.get("target", WORKLOADS.get(r["workload"], {}).get("target")),
        "samples_per_step": args["samples_per_step"] or args["max_train_samples"] * (1 - args["validation_fraction"]),
        "steps_per_trial": spec["budget"]["steps_per_trial"],
        "sampler": spec.get("algorithm", {}).get("sampler", "auto"),
        "early_stopping": es,
        "max_trials": spec["budget"]["max_trials"], "max_parallel": spec["budget"]["max_parallel"],
        "lease_wait_s": SERVER_LEASE_WAIT_S,
        # The workers' GEMM scores in their cgroups follow their quotas closely (100, 50, 25).
        "benchmark_sigma": 0.05,
        "cap_s": cap_s,
        "runs": runs,
    }
    with open(path, "w") as f:
        json.dump(trace, f)
    return sum(len(x["trials"]) for x in runs)


def predict(base, fleet_sim, reps, cap_s, target=None):
    """Writes a trace per (fleet, workload) of the HeteroTune runs under
    `base` and has bench/fleet_sim predict their medians from it (to
    `target` if given, else to each run's own)."""
    groups = {}
    for name in sorted(os.listdir(base)):
        res = os.path.join(base, name, "result.json")
        if not os.path.isfile(res):
            continue
        with open(res) as f:
            r = json.load(f)
        if r.get("policy") == "optuna" or "segments" not in r:
            continue
        groups.setdefault((r["fleet"], r["workload"]), []).append(os.path.join(base, name))
    if not groups:
        log(f"predict: no HeteroTune run in {base}")
        return
    for (fleet, workload), dirs in sorted(groups.items()):
        path = os.path.join(base, f"trace-fleet{fleet}-{workload}.json")
        cap = cap_s if cap_s is not None else WORKLOADS.get(workload, {}).get("cap_s", 40)
        n = write_trace(dirs, path, cap, target)
        log(f"predict: fleet {fleet}, workload {workload}: {len(dirs)} runs, {n} traced trials in {path}")
        out = subprocess.run([fleet_sim, "--trace", path, "--reps", str(reps)], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
        sys.stdout.write(out.stdout)
        sys.stdout.flush()
        if out.returncode != 0:
            log(f"predict: {fleet_sim} --trace {path} failed ({out.returncode})")


# ------------------------------------------------------------- main -------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(REPO, "build"), help="the CMake build directory")
    ap.add_argument("--fleet", default="3,7", help="fleets to run, of 3 and 7 (see above)")
    ap.add_argument("--workload", default="default", choices=sorted(WORKLOADS))
    ap.add_argument("--seeds", type=int, default=10, help="seeds 1..N, each run under every policy")
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--cap-s", type=float, help="every run stops then (default: the workload's)")
    ap.add_argument("--stop-at-target", action="store_true",
                    help="end each run at the target instead of the cap (shorter; no best_at_cap)")
    ap.add_argument("--target", type=float, help="validation accuracy to reach (default: the workload's)")
    ap.add_argument("--train-examples", type=int, help="executor.builtin.args.max_train_samples")
    ap.add_argument("--steps", type=int, help="budget.steps_per_trial")
    ap.add_argument("--samples-per-step", type=int,
                    help="executor.builtin.args.samples_per_step: examples per step (0: a pass over the training set)")
    ap.add_argument("--validation-fraction", type=float,
                    help="executor.builtin.args.validation_fraction: of the training set, held out and scored every step")
    ap.add_argument("--max-trials", type=int, default=200)
    ap.add_argument("--sampler", help="algorithm.sampler for HeteroTune's runs (default: the shipped default)")
    ap.add_argument("--early-stopping", help="early_stopping for every HeteroTune run, as JSON, e.g. "
                    "'{\"rule\": \"asha\", \"type\": \"promotion\"}' (default: none given, the shipped default)")
    ap.add_argument("--optuna-pruner", default="sha", choices=("sha", "hyperband", "median", "none"),
                    help="the peer's pruner (bench/peers/optuna_hetero.py)")
    ap.add_argument("--optuna-eval-batch", type=int, default=256,
                    help="the peer's evaluation mini-batch (2000: the built-in trainer's chunks)")
    ap.add_argument("--data-dir", default=DEFAULT_DATA)
    ap.add_argument("--dir", help="keep every run's logs, spec and result.json here (default: a temp dir, removed)")
    ap.add_argument("--predict", action="store_true",
                    help="after the runs, bench/fleet_sim predicts each policy's median from their traces")
    ap.add_argument("--predict-from", metavar="DIR",
                    help="run nothing: predict from the runs an earlier --dir DIR kept")
    ap.add_argument("--reps", type=int, default=5, help="simulated runs per seed for --predict")
    args = ap.parse_args()
    fleet_sim = os.path.join(args.build, "bench", "fleet_sim")
    if (args.predict or args.predict_from) and not os.access(fleet_sim, os.X_OK):
        sys.exit(f"{fleet_sim} is missing: build it (--target fleet_sim)")
    if args.predict_from:
        if args.target is not None and not 0 < args.target < 1:
            sys.exit("--target: a validation accuracy between 0 and 1")
        predict(args.predict_from, fleet_sim, args.reps, args.cap_s, args.target)
        return

    workload = WORKLOADS[args.workload]
    custom = False
    for key in ("train_examples", "samples_per_step", "steps", "validation_fraction", "target"):
        if getattr(args, key) is None:
            setattr(args, key, workload[key])
        elif getattr(args, key) != workload[key]:
            custom = True
    if args.cap_s is None:
        args.cap_s = workload["cap_s"]
    workload_name = "custom" if custom else args.workload
    try:
        fleets = [int(f) for f in args.fleet.split(",")]
    except ValueError:
        fleets = [0]
    if any(f not in FLEETS for f in fleets):
        sys.exit(f"--fleet: one or more of {', '.join(str(f) for f in FLEETS)}, not '{args.fleet}'")
    args.server = os.path.join(args.build, "server", "hpo-server")
    args.worker = os.path.join(args.build, "worker", "hpo-worker")
    policies = args.policies.split(",")
    for p in policies:
        if p not in POLICIES:
            sys.exit(f"--policies: '{p}' is not one of {', '.join(POLICIES)}")
    if any(p != "optuna" for p in policies):
        for b in (args.server, args.worker):
            if not os.access(b, os.X_OK):
                sys.exit(f"{b} is missing: build it (cmake -DHPO_BUILD_WORKER=ON; --target hpo-server hpo-worker)")
    if "optuna" in policies:
        check = subprocess.run(["/usr/bin/python3", "-c", "import optuna, torch"], capture_output=True)
        if check.returncode != 0:
            sys.exit("policy optuna needs Debian's python3-optuna and python3-torch (scripts/setup installs them): "
                     + check.stderr.decode(errors="replace").strip().splitlines()[-1])
    if not os.path.isfile(os.path.join(args.data_dir, "train-images-idx3-ubyte.gz")):
        sys.exit(f"--data-dir {args.data_dir}: no Fashion-MNIST there (apt-get install dataset-fashion-mnist)")
    if os.geteuid() != 0:
        sys.exit("bench/hetero makes CPU cgroups: run it as root")
    if args.seeds < 1 or args.cap_s <= 0 or not 0 < args.target < 1:
        sys.exit("--seeds >= 1, --cap-s > 0 and 0 < --target < 1 are required")

    base, keep = start_run(CGROUP_PREFIX, args.dir)
    n_runs = len(fleets) * args.seeds * len(policies)
    # A run lasts the cap plus its start-up (server, workers, their data and
    # warm-up in their cgroups): a first guess, then what the runs took.
    startup_guess = {3: 8.0, 7: 13.0}
    took = {f: [] for f in fleets}

    def eta_s(done_by_fleet):
        left = 0.0
        for f in fleets:
            per = median(took[f]) if took[f] else (args.cap_s if not args.stop_at_target else args.cap_s / 2) \
                + startup_guess[f]
            left += per * (args.seeds * len(policies) - done_by_fleet[f])
        return left
    done = {f: 0 for f in fleets}
    log(f"runs in {base}; fleets {fleets}, workload {workload_name} ({args.train_examples} training examples, "
        f"{args.samples_per_step or 'a pass'} per step, {args.steps} steps, target {args.target}), cap "
        f"{args.cap_s:.0f} s, seeds {args.first_seed}..{args.first_seed + args.seeds - 1}, policies {policies}: "
        f"{n_runs} runs, about {eta_s(done) / 60:.0f} minutes")
    started = time.time()
    k = 0
    try:
        for fleet in fleets:
            results = {p: [] for p in policies}
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                for policy in policies:  # interleaved: machine noise hits every policy alike
                    k += 1
                    log(f"run {k}/{n_runs}: fleet={fleet} seed={seed} policy={policy}")
                    run_dir = os.path.join(base, f"fleet{fleet}-seed{seed}-{policy}")
                    t = time.time()
                    if policy == "optuna":
                        r = run_optuna(args, fleet, seed, run_dir)
                    else:
                        r = run_heterotune(args, fleet, seed, policy, run_dir)
                    r.update({"fleet": fleet, "workload": workload_name, "seed": seed, "policy": policy,
                              "target": args.target})
                    if policy != "optuna":
                        r["overheads"] = segment_overheads(run_dir)
                    with open(os.path.join(run_dir, "result.json"), "w") as f:
                        json.dump(r, f, indent=1)
                    took[fleet].append(time.time() - t)
                    done[fleet] += 1
                    results[policy].append(r)
                    print(f"bench=hetero fleet={fleet} workload={workload_name} seed={seed} policy={policy} "
                          f"time_to_target_s={r['time_to_target_s']:.1f} utilization={r['utilization']:.3f} "
                          f"best_at_cap={r['best_at_cap']:.4f} wasted_device_s={r['wasted_device_s']:.1f} "
                          f"trials={r['trials']} promotions={r['promotions']} moves={r.get('moves', 0)} "
                          f"preemptions={r.get('preemptions', 0)} reached={int(r['reached'])}",
                          flush=True)
                    if r.get("overheads"):
                        o = r["overheads"]
                        print(f"bench=hetero_overheads fleet={fleet} workload={workload_name} seed={seed} "
                              f"policy={policy} segments={o['segments']} "
                              f"lease_to_first_step_ms={o['lease_to_first_step_ms']:.0f} "
                              f"checkpoint_restore_ms={o['checkpoint_restore_ms']:.0f} "
                              f"checkpoint_save_ms={o['checkpoint_save_ms']:.0f} "
                              f"report_ms_per_call={o['report_ms_per_call']:.1f} eval_s={o['eval_s']:.1f}", flush=True)
                    log("  " + describe_run(r))
                    left = eta_s(done)
                    log(f"  run took {time.time() - t:.0f} s; elapsed {(time.time() - started) / 60:.1f} min, "
                        f"about {left / 60:.0f} min left (done at {time.strftime('%H:%M', time.localtime(time.time() + left))})")
            print_fleet_summary(fleet, workload_name, policies, results, args.cap_s)
        if args.predict:
            predict(base, fleet_sim, args.reps, args.cap_s)
    except KeyboardInterrupt as e:
        log(f"interrupted ({e}): processes stopped, cgroups removed")
        sys.exit(130)
    finally:
        if not keep:
            shutil.rmtree(base, ignore_errors=True)
    log(f"done in {(time.time() - started) / 60:.1f} min")


if __name__ == "__main__":
    main()
