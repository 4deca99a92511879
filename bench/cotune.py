#!/usr/bin/python3
"""bench/cotune: in-trial co-tuning of threads against the exhaustive best and
the naive default, per device class and searched batch size.

Each device class is a CPU cgroup capped at 1.0, 0.5 and 0.25 cores, with its
own real hpo-server (SQLite in a private directory, loopback ports, a bearer
token) and real hpo-worker processes in that cgroup, one at a time. The three
classes run side by side (the caps add up to less than the machine). The work
is the built-in Fashion-MNIST trainer (Debian's dataset-fashion-mnist) on a
reduced training set (--examples-per-core times the class's cores, so that an
epoch lasts about as long on every class), with fixed hyperparameters, so that
only the system setting changes speed. For each class and each batch size (the spec's
`system.batch_size`, searched: one value per experiment here):

  best      one experiment per thread count 1..min(N, the lane's usable
            cores) (N: the machine's usable cores; the server caps a
            spec's threads at a CPU device's usable cores, so more never
            runs), `threads` fixed by the spec (a one-value domain): the
            fastest of them;
  cotuned   one experiment of --cotune-trials trials with `threads: {type:
            int, low: 1, high: N}`, which the server co-tunes epoch by epoch
            (scheduler/cotuner.h) and starts later trials at the best
            remembered value (scheduler/speed_model.h). All of a class's
            co-tuned experiments name one `workload:`, so what one batch size
            learned reaches the next, as the product shares it;
  default   the naive default: threads = N and OpenMP spinning (a worker
            of its own started with --threads N and OMP_WAIT_POLICY=ACTIVE,
            hpo-worker otherwise choosing PASSIVE and its quota's cores; the
            spec sets no threads, as a user who sets none).

    sudo flock /tmp/hpo-bench.lock bench/cotune.py [--quotas 1.0,0.5,0.25] [--batches 64,256,1024]
        [--model mlp|cnn] [--examples-per-core 40000] [--fixed-epochs 3] [--default-epochs 3]
        [--cotune-trials 3] [--cotune-epochs 4] [--max-threads N] [--build build] [--dir DIR]

Needs root (cgroups) and the built binaries (build/server/hpo-server,
build/worker/hpo-worker: -DHPO_BUILD_WORKER=ON). Progress goes to stderr,
the figures to stdout:

  bench=cotune device_class=C batch=B best_samples_per_s=X cotuned_samples_per_s=Y default_samples_per_s=Z probe_epochs=P ...
  bench=cotune_summary ... met=yes|no

Every figure is a worker's own report (the measurement's samples_per_sec,
read through GET /api/v1/trials/ID) and every setting the one the
measurement says it ran with (its `system`); nothing here decides a setting.
  X  the best over thread counts of the median samples/s of epochs 2..E
     (the first epoch of every trial is left out everywhere: it warms up);
  Y  the median samples/s of the co-tuned trials' settled epochs: those, from
     epoch 2 on, that ran at the setting the trial ended with;
  Z  the median samples/s of epochs 2..E of the default;
  P  epochs per co-tuned trial spent at a setting other than the one it
     ended with (the epochs probing cost), the mean over the trials;
  cotuned_all_epochs_samples_per_s  the median of every co-tuned epoch from
     epoch 2 on, probes included: what co-tuning delivered.
"""
import argparse
import json
import os
import secrets
import shutil
import signal
import statistics
import sys
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ left in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hetero import CpuCgroup, Rest, read_ports, signal_group, spawn, start_run, wait_or_kill  # noqa: E402  (the same cgroups and REST calls as bench/hetero)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"
CGROUP_PREFIX = "hpo-cotune-"
_log_lock = threading.Lock()


def log(msg):
    with _log_lock:
        print(f"[cotune {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def median(xs):
    return statistics.median(xs) if xs else float("nan")


class Stopped(Exception):
    """The run is being stopped (Ctrl-C, SIGTERM, or another lane failed)."""


# ------------------------------------------------------------- processes --

class Processes:
    """The processes of one lane. Unlike bench/hetero's, one can be stopped
    alone (a lane swaps workers) and stop_all may be called from any thread;
    signals are the main thread's business (main)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.procs = {}  # Popen -> (name, log file)

    def start(self, name, argv, log_path, env=None, cgroup=None):
        logf = open(log_path, "w")
        with self._lock:
            p = spawn(argv, logf, env, cgroup)
            self.procs[p] = (name, logf)
        return p

    def check(self):
        with self._lock:
            for p, (name, _) in self.procs.items():
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited with {p.returncode}")

    def stop(self, p):
        if p.poll() is None:
            signal_group(p, signal.SIGTERM)
            wait_or_kill(p, 5)
        with self._lock:
            entry = self.procs.pop(p, None)
        if entry:
            entry[1].close()

    def stop_all(self):
        with self._lock:
            ps = list(self.procs)
        for p in reversed(ps):
            self.stop(p)


# ------------------------------------------------------------- one lane ---

class Lane:
    """One device class: a cgroup of `cpus` cores, its own server, and its
    workers in turn (one passive, one spinning per batch size)."""

    def __init__(self, args, cpus, base_dir, stop_event):
        self.args = args
        self.cpus = cpus
        self.dir = os.path.join(base_dir, f"quota-{cpus}")
        self.stop_event = stop_event
        self.procs = Processes()
        self.cgroup = None
        self.rest = None
        self.grpc = None
        self.token_file = None
        self.device_class = None
        self.incarnation = 0
        self.results = []  # one dict per batch size
        self.error = None
        self.started = time.time()
        self.train_examples = max(1000, int(args.examples_per_core * cpus))

    def say(self, msg):
        log(f"[{self.cpus} cores] {msg}")

    # -- processes

    def start_server(self):
        os.makedirs(self.dir)
        token = secrets.token_hex(16)
        self.token_file = os.path.join(self.dir, "token")
        with open(self.token_file, "w") as f:
            f.write(token + "\n")
        os.chmod(self.token_file, 0o600)
        port_file = os.path.join(self.dir, "ports.json")
        self.procs.start("hpo-server", [self.args.server, "--store", f"sqlite://{self.dir}/hpo.db",
                                        "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
                                        "--port-file", port_file, "--token-file", self.token_file],
                         os.path.join(self.dir, "server.log"))
        p = self.wait_for("the server's ports", lambda: read_ports(port_file), 30)
        self.rest = Rest(p["http"], token)
        self.grpc = f"127.0.0.1:{p['grpc']}"
        self.cgroup = CpuCgroup(f"{CGROUP_PREFIX}{os.getpid()}-{self.cpus}", self.cpus)

    def start_worker(self, spinning, threads=None):
        """A worker in the lane's cgroup (with --threads when given); returns
        its Popen once registered."""
        self.incarnation += 1
        n = self.incarnation
        env = dict(os.environ)
        env.pop("HPO_TOKEN", None)
        # As a user starts it: no thread counts in the environment, so the
        # trainer's `threads` (torch::set_num_threads) is the only knob.
        for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY"):
            env.pop(k, None)
        if spinning:
            env["OMP_WAIT_POLICY"] = "ACTIVE"  # the worker keeps a policy the user chose
        scratch = os.path.join(self.dir, f"scratch-{n}")
        os.makedirs(scratch)
        role = "default" if spinning else "passive"
        p = self.procs.start(f"hpo-worker({self.cpus}, {role})",
                             [self.args.worker, "--server", self.grpc, "--token-file", self.token_file,
                              "--device", "cpu", "--labels", f"bench=cotune,quota={self.cpus},n={n},role={role}",
                              "--data-dir", self.args.data_dir, "--scratch-dir", scratch]
                             + (["--threads", str(threads)] if threads else []),
                             os.path.join(self.dir, f"worker-{n}-{role}.log"), env=env, cgroup=self.cgroup)

        def registered():
            for w in self.rest.call("GET", "/api/v1/workers")["workers"]:
                if w.get("labels", {}).get("n") == str(n):
                    return w
            return None
        w = self.wait_for(f"worker {n} to register", registered, 120)
        dev = w["devices"][0]
        if abs(dev["cores"] - self.cpus) > 1e-6:
            raise RuntimeError(f"worker {w['id']} in a {self.cpus}-core cgroup reports {dev['cores']} cores: "
                               "its inventory does not see the quota")
        if self.device_class is None:
            self.device_class = dev["device_class"]
        elif self.device_class != dev["device_class"]:
            raise RuntimeError(f"worker {w['id']} registered as {dev['device_class']}, "
                               f"the lane's earlier workers as {self.device_class}")
        return p

    def wait_for(self, what, pred, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.stop_event.is_set():
                raise Stopped()
            self.procs.check()
            v = pred()
            if v:
                return v
            time.sleep(0.2)
        raise RuntimeError(f"timed out after {timeout} s waiting for {what}")

    # -- experiments

    def spec(self, name, batch, threads, trials, epochs, workload=None):
        a = self.args
        params = {"lr": {"type": "categorical", "choices": [1.0e-3]}}
        if a.model == "cnn":
            params.update({"channels": {"type": "categorical", "choices": [16]},
                           "conv_layers": {"type": "categorical", "choices": [2]}})
        spec = {
            "name": name,
            "objective": {"metric": "accuracy", "direction": "maximize"},
            "spaces": [{"name": a.model, "params": params}],
            "system": {
                # Searched (a batch size changes what is learned), one value here.
                "batch_size": {"type": "categorical", "choices": [batch]},
            },
            "algorithm": {"sampler": "random", "seed": 1},
            "budget": {"max_trials": trials, "max_parallel": 1, "steps_per_trial": epochs,
                       "max_wall_time_s": 3600},
            "executor": {"builtin": {"trainer": f"fashion-mnist-{a.model}",
                                     "args": {"max_train_samples": self.train_examples,
                                              "validation_fraction": a.validation_fraction}}},
        }
        if threads is not None:  # None: the worker's own --threads
            spec["system"]["threads"] = threads
        if workload:
            spec["workload"] = workload
        return spec

    def run_experiment(self, spec):
        """Submits, waits for it to end; returns its trials, each with its
        measurements (oldest first)."""
        with open(os.path.join(self.dir, spec["name"] + ".json"), "w") as f:
            json.dump(spec, f, indent=1)
        eid = self.rest.call("POST", "/api/v1/experiments", spec)["id"]
        t0 = time.time()

        def ended():
            e = self.rest.call("GET", f"/api/v1/experiments/{eid}")
            return e if e["state"] != "running" else None
        e = self.wait_for(f"experiment {spec['name']} to end", ended, self.args.experiment_timeout_s)
        if e["state"] != "completed":
            raise RuntimeError(f"experiment {spec['name']} ended {e['state']}: {e.get('reason')}")
        out = []
        for t in sorted(self.rest.trials(eid), key=lambda t: t["id"]):
            full = self.rest.call("GET", f"/api/v1/trials/{t['id']}")
            if full["state"] != "completed":
                raise RuntimeError(f"trial {t['id']} of {spec['name']} ended {full['state']}: {full.get('reason')}")
            full["measurements"].sort(key=lambda m: m["step"])
            out.append(full)
        self.say(f"{spec['name']}: {len(out)} trial(s) in {time.time() - t0:.0f} s: "
                 + "; ".join("[" + ", ".join(f"{m['system'].get('threads')}:{m['samples_per_sec']:.0f}"
                                             for m in t["measurements"]) + "]" for t in out)
                 + " (threads:samples/s per epoch)")
        return out

    def fixed(self, batch, threads, spinning):
        """The median samples/s of a trial at `threads`: asked for in the spec,
        or for the naive default (spinning) the worker's own --threads, as
        a user who sets no system parameter gets (the server caps only what
        a spec asks for)."""
        tag = "default" if spinning else "fixed"
        trials = self.run_experiment(self.spec(f"{tag}-b{batch}-t{threads}", batch,
                                               None if spinning else {"type": "categorical", "choices": [threads]},
                                               1, self.args.default_epochs if spinning else self.args.fixed_epochs))
        ms = trials[0]["measurements"]
        for m in ms:
            if m["system"].get("threads") != threads or m["system"].get("batch_size") != batch:
                raise RuntimeError(f"{tag} b={batch} t={threads}: step {m['step']} ran {m['system']}")
        return median([m["samples_per_sec"] for m in ms[1:]])

    def cotuned(self, batch):
        trials = self.run_experiment(self.spec(
            f"cotuned-b{batch}", batch, {"type": "int", "low": 1, "high": self.args.max_threads},
            self.args.cotune_trials, self.args.cotune_epochs, workload=f"bench-cotune-{self.args.model}"))
        settled, every, probes, per_trial = [], [], [], []
        for t in trials:
            ms = t["measurements"]
            # The setting the co-tuner gave last: where the trial settled,
            # unless a drift (cotuner.h) reopened probing near the end.
            final = ms[-1]["system"]
            probes.append(sum(1 for m in ms if m["system"] != final))
            settled += [m["samples_per_sec"] for m in ms[1:] if m["system"] == final]
            every += [m["samples_per_sec"] for m in ms[1:]]
            per_trial.append({"trial": t["id"], "epochs": [[m["system"].get("threads"), m["samples_per_sec"]] for m in ms],
                              "final_threads": final.get("threads")})
        finals = sorted({p["final_threads"] for p in per_trial})
        return {"samples_per_s": median(settled), "all_epochs_samples_per_s": median(every),
                "probe_epochs": statistics.mean(probes), "probe_epochs_each": probes, "final_threads": finals,
                "trials": per_trial}

    # -- the lane

    def run(self):
        try:
            self.start_server()
            for batch in self.args.batches:
                worker = self.start_worker(spinning=False)
                # The server runs a spec's threads only up to the device's
                # usable cores (more is capped, trial.system_capped), so the
                # exhaustive search covers what it can run.
                usable = min(self.args.max_threads, max(1, int(self.cpus)))
                best = {t: self.fixed(batch, t, spinning=False) for t in range(1, usable + 1)}
                co = self.cotuned(batch)
                self.procs.stop(worker)
                worker = self.start_worker(spinning=True, threads=self.args.max_threads)
                default = self.fixed(batch, self.args.max_threads, spinning=True)
                self.procs.stop(worker)
                best_t = max(best, key=best.get)
                r = {"device_class": self.device_class, "cpus": self.cpus, "batch": batch,
                     "by_threads": best, "best_threads": best_t, "best": best[best_t],
                     "cotuned": co["samples_per_s"], "cotuned_all_epochs": co["all_epochs_samples_per_s"],
                     "probe_epochs": co["probe_epochs"],
                     "probe_epochs_each": co["probe_epochs_each"], "cotuned_threads": co["final_threads"],
                     "cotuned_trials": co["trials"], "default": default}
                self.results.append(r)
                self.say(f"batch {batch} done: by threads {dict((k, round(v)) for k, v in best.items())}, "
                         f"co-tuned {co['samples_per_s']:.0f} (ended at threads {co['final_threads']}, "
                         f"probe epochs per trial {co['probe_epochs_each']}), default {default:.0f}; "
                         f"lane elapsed {time.time() - self.started:.0f} s")
        except Stopped:
            pass
        except Exception as e:  # reported by main, which stops the other lanes
            self.error = e
        finally:
            self.procs.stop_all()


def emit_line(r):
    print(f"bench=cotune device_class={r['device_class'].replace(' ', '_')} batch={r['batch']} "
          f"best_samples_per_s={r['best']:.0f} cotuned_samples_per_s={r['cotuned']:.0f} "
          f"default_samples_per_s={r['default']:.0f} probe_epochs={r['probe_epochs']:.2f} "
          f"quota={r['cpus']} best_threads={r['best_threads']} "
          f"cotuned_threads={','.join(str(t) for t in r['cotuned_threads'])} "
          f"cotuned_vs_best={r['cotuned'] / r['best']:.3f} cotuned_vs_default={r['cotuned'] / r['default']:.2f} "
          f"cotuned_all_epochs_samples_per_s={r['cotuned_all_epochs']:.0f}",
          flush=True)


# ------------------------------------------------------------- main -------

def summary(results, args):
    """The issue's goals, over every point."""
    ratios = [r["cotuned"] / r["best"] for r in results]
    probes = [p for r in results for p in r["probe_epochs_each"]]
    mean_probe = statistics.mean(probes) if probes else float("nan")
    met1 = all(x >= 0.95 for x in ratios) and mean_probe <= 1.0
    # "Where the cap makes that default slow": points where the default
    # reaches at most half of the exhaustive best.
    slow = [r for r in results if r["default"] <= 0.5 * r["best"]]
    vs_default = [r["cotuned"] / r["default"] for r in slow]
    met2 = bool(slow) and all(x >= 3.0 for x in vs_default)
    print(f"bench=cotune_summary points={len(results)} cotuned_vs_best_min={min(ratios):.3f} "
          f"points_below_0.95={sum(1 for x in ratios if x < 0.95)} probe_epochs_per_trial={mean_probe:.2f} "
          f"goal_best=0.95@<=1_probe_epoch met={'yes' if met1 else 'no'} "
          f"default_slow_points={len(slow)} cotuned_vs_default_min={min(vs_default) if slow else float('nan'):.2f} "
          f"goal_default=3x met={'yes' if met2 else 'no'}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(REPO, "build"), help="the CMake build directory")
    ap.add_argument("--quotas", default="1.0,0.5,0.25", help="CPU cores of each device class's cgroup")
    ap.add_argument("--batches", default="64,256,1024", help="searched batch sizes (one experiment each)")
    ap.add_argument("--model", default="mlp", choices=("mlp", "cnn"), help="the built-in trainer's model")
    ap.add_argument("--max-threads", type=int, default=len(os.sched_getaffinity(0)),
                    help="threads 1..N are tried (default: the machine's usable cores)")
    ap.add_argument("--examples-per-core", type=int, default=40000,
                    help="executor.builtin.args.max_train_samples is this times the class's cores, so that an "
                         "epoch lasts about as long on every class (many cgroup periods of 100 ms)")
    ap.add_argument("--validation-fraction", type=float, default=0.02,
                    help="of the 60,000 training images; only speed is measured here, so a small one")
    ap.add_argument("--fixed-epochs", type=int, default=3, help="epochs of each fixed-threads trial")
    ap.add_argument("--default-epochs", type=int, default=3, help="epochs of the naive default's trial")
    ap.add_argument("--cotune-trials", type=int, default=3, help="co-tuned trials per (class, batch size)")
    ap.add_argument("--cotune-epochs", type=int, default=4, help="epochs of each co-tuned trial")
    ap.add_argument("--experiment-timeout-s", type=float, default=900)
    ap.add_argument("--data-dir", default=DEFAULT_DATA)
    ap.add_argument("--dir", help="keep every lane's logs, specs and results.json here (default: a temp dir, removed)")
    args = ap.parse_args()
    try:
        args.quotas = [float(q) for q in args.quotas.split(",")]
        args.batches = [int(b) for b in args.batches.split(",")]
    except ValueError:
        sys.exit("--quotas takes numbers of cores and --batches integers, comma-separated")
    args.server = os.path.join(args.build, "server", "hpo-server")
    args.worker = os.path.join(args.build, "worker", "hpo-worker")
    for b in (args.server, args.worker):
        if not os.access(b, os.X_OK):
            sys.exit(f"{b} is missing: build it (cmake -DHPO_BUILD_WORKER=ON; --target hpo-server hpo-worker)")
    if not os.path.isfile(os.path.join(args.data_dir, "train-images-idx3-ubyte.gz")):
        sys.exit(f"--data-dir {args.data_dir}: no Fashion-MNIST there (apt-get install dataset-fashion-mnist)")
    if os.geteuid() != 0:
        sys.exit("bench/cotune makes CPU cgroups: run it as root")
    if args.max_threads < 1 or min(args.batches) < 1 or min(args.quotas) <= 0 or len(set(args.quotas)) != len(args.quotas):
        sys.exit("--max-threads >= 1, batch sizes >= 1 and distinct quotas > 0 are required")
    if min(args.fixed_epochs, args.default_epochs, args.cotune_epochs) < 2 or args.cotune_trials < 1:
        sys.exit("every trial needs at least 2 epochs (the first is left out) and --cotune-trials >= 1")
    if sum(args.quotas) > len(os.sched_getaffinity(0)):
        log(f"warning: the quotas add up to {sum(args.quotas)} cores, more than the machine's "
            f"{len(os.sched_getaffinity(0))}: the lanes will slow each other down")

    base, keep = start_run(CGROUP_PREFIX, args.dir)
    log(f"lanes in {base}: quotas {args.quotas}, batch sizes {args.batches}, threads 1..{args.max_threads}, "
        f"model {args.model}, {args.examples_per_core} training examples per core")
    started = time.time()
    stop = threading.Event()
    lanes = [Lane(args, q, base, stop) for q in args.quotas]
    threads = [threading.Thread(target=lane.run, name=f"lane-{lane.cpus}") for lane in lanes]
    failed = None
    try:
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            for t in threads:
                t.join(timeout=0.5)
            failed = next((lane for lane in lanes if lane.error), None)
            if failed:
                stop.set()
                break
    except KeyboardInterrupt as e:
        log(f"interrupted ({e}): stopping every lane")
        failed = "interrupted"
    finally:
        # A second Ctrl-C or a kill must not cut the clean-up short.
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        stop.set()
        for lane in lanes:
            lane.procs.stop_all()
        for t in threads:
            t.join()
        for lane in lanes:
            if lane.cgroup:
                lane.cgroup.remove()
        if keep:
            with open(os.path.join(base, "results.json"), "w") as f:
                json.dump([r for lane in lanes for r in lane.results], f, indent=1)
        else:
            shutil.rmtree(base, ignore_errors=True)
    if failed == "interrupted":
        sys.exit(130)
    results = sorted((r for lane in lanes for r in lane.results), key=lambda r: (-r["cpus"], r["batch"]))
    for r in results:  # what finished, even when a lane failed
        emit_line(r)
    if failed:
        sys.exit(f"bench/cotune: the {failed.cpus}-core lane failed: {failed.error}")
    summary(results, args)
    log(f"done in {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
