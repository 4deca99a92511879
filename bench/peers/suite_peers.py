#!/usr/bin/python3
"""The peers on bench/suite/suite.py's tasks, printing the same
`bench=search ...` lines as bench/search_bench, so that
bench/search_compare.py puts them side by side.

    /usr/bin/python3 bench/peers/suite_peers.py [--samplers gp-ei,optuna-tpe-mv,...]
        [--tasks a,b] [--families bbob,real] [--seeds 20] [--trials 100]
    /usr/bin/python3 bench/peers/suite_peers.py --latency

Samplers:
  optuna-tpe      Optuna 3.1 TPE, its defaults (univariate, 10 startup trials)
  optuna-tpe-mv   Optuna 3.1 TPE, multivariate=True, group=True (the joint
                  model; group splits conditional spaces into the subspaces
                  trials share)
  optuna-cmaes    Optuna 3.1 CMA-ES (its default independent sampler, random,
                  for categorical and conditional parameters)
  optuna-random   Optuna's random sampler
  gp-ei           a standard GP-EI loop, built as scikit-optimize's
                  gp_minimize builds one (see GpEi)

Needs Debian's python3-optuna, python3-sklearn and python3-scipy: run it
with /usr/bin/python3 (a pyenv python on the PATH may lack them).
"""
import argparse
import math
import os
import sys
import time
import warnings

import numpy as np
from scipy.optimize import minimize
from scipy.stats import norm

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "suite"))
import suite  # noqa: E402


# ----------------------------------------------------------------- GP-EI ----

class GpEi:
    """GP-EI the way scikit-optimize's gp_minimize does it, with
    scikit-learn's GaussianProcessRegressor:
      - inputs: every parameter mapped to [0, 1] (log parameters in log
        space, integers rounded when decoded), a categorical one-hot (argmax
        when decoded); conditional parameters are all in the vector, and the
        function reads only the active ones, as a flat optimizer must;
      - kernel: ConstantKernel(1, (0.01, 1000)) * Matern(nu=2.5, ARD,
        lengthscales in (0.01, 100)) + WhiteKernel() (skopt's noise="gaussian"),
        normalize_y=True, 2 restarts of the marginal-likelihood optimizer;
      - 10 random starting points;
      - expected improvement (xi = 0.01, in units of the normalized targets)
        on the noise-free latent function (skopt drops the WhiteKernel when it
        predicts), maximized over 2,000 random candidates, then L-BFGS-B with
        the analytic gradient from the best 5 of them (skopt's
        acq_optimizer="lbfgs", n_restarts_optimizer=5).
    """

    def __init__(self, space, seed, n_initial=10, n_candidates=2000, n_local=5, xi=0.01):
        self.params = suite.all_params(space["params"])
        self.space = space
        self.rng = np.random.RandomState(seed)
        self.seed = seed
        self.n_initial = n_initial
        self.n_candidates = n_candidates
        self.n_local = n_local
        self.xi = xi
        self.columns = []  # (name, spec, first column, width)
        d = 0
        for name, spec in self.params:
            width = len(spec["choices"]) if spec["type"] == "categorical" else 1
            self.columns.append((name, spec, d, width))
            d += width
        self.dims = d
        self.X, self.y = [], []

    # Encoding.
    def decode(self, x):
        full = {}
        for name, spec, c, w in self.columns:
            if spec["type"] == "categorical":
                full[name] = spec["choices"][int(np.argmax(x[c:c + w]))]
                continue
            lo, hi, u = spec["low"], spec["high"], float(np.clip(x[c], 0, 1))
            v = math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo))) if spec.get("log") else lo + u * (hi - lo)
            step = spec.get("step", 1 if spec["type"] == "int" else 0)
            if step:
                v = lo + round((v - lo) / step) * step
                v = min(max(v, lo), hi)
            full[name] = int(round(v)) if spec["type"] == "int" else float(v)
        return full

    def encode(self, full):
        x = np.zeros(self.dims)
        for name, spec, c, w in self.columns:
            v = full[name]
            if spec["type"] == "categorical":
                x[c + spec["choices"].index(v)] = 1
            elif spec.get("log"):
                x[c] = (math.log(v) - math.log(spec["low"])) / (math.log(spec["high"]) - math.log(spec["low"]))
            else:
                x[c] = (v - spec["low"]) / (spec["high"] - spec["low"])
        return x

    def random_point(self):
        x = self.rng.uniform(size=self.dims)
        for name, spec, c, w in self.columns:
            if spec["type"] == "categorical":
                x[c:c + w] = 0
                x[c + self.rng.randint(w)] = 1
        return x

    # The loop.
    def ask(self):
        """The next assignment of all parameters (active or not)."""
        if len(self.y) < self.n_initial:
            return self.decode(self.random_point())
        return self.decode(self.maximize_ei(self.fit()))

    def tell(self, full, y):
        self.X.append(self.encode(full))  # the decoded point: integers rounded, one-hot exact
        self.y.append(y)

    def fit(self):
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel
        kernel = (ConstantKernel(1.0, (0.01, 1000.0))
                  * Matern(length_scale=np.ones(self.dims), length_scale_bounds=[(0.01, 100)] * self.dims,
                           nu=2.5)
                  + WhiteKernel())
        gp = GaussianProcessRegressor(kernel=kernel, normalize_y=True, n_restarts_optimizer=2,
                                      random_state=self.rng.randint(2 ** 31))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gp.fit(np.array(self.X), np.array(self.y))
        return gp

    def maximize_ei(self, gp):
        X = np.array(self.X)
        amp = gp.kernel_.k1.k1.constant_value
        ls = np.asarray(gp.kernel_.k1.k2.length_scale, dtype=float)
        L, alpha = gp.L_, gp.alpha_.ravel()
        ymean, ystd = np.ravel(gp._y_train_mean)[0], np.ravel(gp._y_train_std)[0]
        best = (np.min(self.y) - ymean) / ystd  # normalized units
        xi, sqrt5 = self.xi, math.sqrt(5)
        from scipy.linalg import solve_triangular

        def kvec(Z):
            d = np.sqrt(np.maximum(((Z[:, None, :] - X[None, :, :]) / ls) ** 2, 0).sum(-1))
            return amp * (1 + sqrt5 * d + 5 / 3 * d ** 2) * np.exp(-sqrt5 * d), d

        def ei_batch(Z):
            k, _ = kvec(Z)
            mu = k @ alpha
            v = solve_triangular(L, k.T, lower=True)
            sd = np.sqrt(np.maximum(amp - np.sum(v * v, axis=0), 1e-18))
            imp = best - mu - xi
            z = imp / sd
            return imp * norm.cdf(z) + sd * norm.pdf(z)

        def neg_ei_and_grad(x):
            k, d = kvec(x[None, :])
            k, d = k[0], d[0]
            mu = k @ alpha
            v = solve_triangular(L, k, lower=True)
            var = max(amp - v @ v, 1e-18)
            sd = math.sqrt(var)
            imp = best - mu - xi
            z = imp / sd
            ei = imp * norm.cdf(z) + sd * norm.pdf(z)
            # dk/dx for Matern 5/2: -amp (5/3) (1 + sqrt5 d) e^(-sqrt5 d) (x - X) / ls^2.
            dk = (-amp * 5 / 3 * (1 + sqrt5 * d) * np.exp(-sqrt5 * d))[:, None] * (x[None, :] - X) / ls ** 2
            dmu = dk.T @ alpha
            w = solve_triangular(L.T, v, lower=False)  # K^-1 k
            dsd = -(dk.T @ w) / sd
            grad = -norm.cdf(z) * dmu + norm.pdf(z) * dsd
            return -ei, -grad

        cands = np.array([self.random_point() for _ in range(self.n_candidates)])
        scores = ei_batch(cands)
        best_x, best_ei = cands[np.argmax(scores)], np.max(scores)
        for i in np.argsort(-scores)[:self.n_local]:
            r = minimize(neg_ei_and_grad, cands[i], jac=True, method="L-BFGS-B",
                         bounds=[(0, 1)] * self.dims)
            if np.isfinite(r.fun) and -r.fun > best_ei:
                best_x, best_ei = r.x, -r.fun
        return best_x


def run_gp_ei(task, seed, trials):
    opt = GpEi(task.space, seed)
    trace = []
    for n in range(trials):
        full = opt.ask()
        params = suite.active_params(task.space["params"], lambda name, spec: full[name])
        y, f = task.evaluate(params, seed, n)
        opt.tell(full, y)
        trace.append((y, f))
    return trace


# ---------------------------------------------------------------- Optuna ----

def optuna_sampler(name, seed):
    import optuna
    if name == "optuna-tpe":
        return optuna.samplers.TPESampler(seed=seed)
    if name == "optuna-tpe-mv":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True)
    if name == "optuna-cmaes":
        return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
    if name == "optuna-random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise SystemExit(f"suite_peers: unknown sampler '{name}'")


def suggest(trial, name, spec):
    t = spec["type"]
    if t == "categorical":
        return trial.suggest_categorical(name, spec["choices"])
    if t == "int":
        return trial.suggest_int(name, int(spec["low"]), int(spec["high"]), step=int(spec.get("step", 1)),
                                 log=spec.get("log", False))
    return trial.suggest_float(name, spec["low"], spec["high"], log=spec.get("log", False),
                               step=spec.get("step"))


def run_optuna(task, sampler, seed, trials):
    import optuna
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(sampler=optuna_sampler(sampler, seed))
    trace = []
    for n in range(trials):
        trial = study.ask()
        params = suite.active_params(task.space["params"], lambda name, spec: suggest(trial, name, spec))
        y, f = task.evaluate(params, seed, n)
        study.tell(trial, y)
        trace.append((y, f))
    return trace


SAMPLERS = ["optuna-tpe", "optuna-tpe-mv", "optuna-cmaes", "optuna-random", "gp-ei"]


def latency():
    """One suggestion after n completed trials of 8 parameters (the same
    bowl as search_bench's latency lines), median of 5."""
    import optuna
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    rnd = np.random.RandomState(0)
    for n in (100, 1000):
        X = rnd.uniform(size=(n, 8))
        y = ((X - 0.3) ** 2).sum(1)
        dists = {f"x{i}": optuna.distributions.FloatDistribution(0, 1) for i in range(8)}
        for name in ("optuna-tpe", "optuna-tpe-mv", "gp-ei"):
            if name == "gp-ei" and n > 100:
                continue  # scikit-learn's fit alone takes seconds there
            times = []
            if name == "gp-ei":
                space = {"name": "latency", "params": suite.floats(8, 0, 1)}
                opt = GpEi(space, 0)
                for row, v in zip(X, y):
                    opt.tell({f"x{i}": row[i] for i in range(8)}, v)
                for _ in range(5):
                    start = time.perf_counter()
                    opt.ask()
                    times.append((time.perf_counter() - start) * 1000)
            else:
                study = optuna.create_study(sampler=optuna_sampler(name, 1))
                for row, v in zip(X, y):
                    study.add_trial(optuna.trial.create_trial(
                        params={f"x{i}": row[i] for i in range(8)}, distributions=dists, value=v))
                for _ in range(5):
                    start = time.perf_counter()
                    trial = study.ask(dists)
                    times.append((time.perf_counter() - start) * 1000)
                    study.tell(trial, 1.0)
            print(f"bench=suggest sampler={name} observations={n} params=8 count=1 "
                  f"ms={np.median(times):.3f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samplers", default=",".join(SAMPLERS))
    ap.add_argument("--tasks", default="")
    ap.add_argument("--families", default="")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--latency", action="store_true", help="only the suggest latency lines")
    a = ap.parse_args()
    warnings.filterwarnings("ignore")
    if a.latency:
        latency()
        return
    checkpoints = [c for c in suite.CHECKPOINTS if c <= a.trials]
    for task in suite.select(a.tasks, a.families):
        for sampler in a.samplers.split(","):
            if sampler not in SAMPLERS:
                raise SystemExit(f"suite_peers: unknown sampler '{sampler}' (one of {', '.join(SAMPLERS)})")
            start = time.time()
            regrets = {c: [] for c in checkpoints}
            for seed in range(a.first_seed, a.first_seed + a.seeds):
                trace = (run_gp_ei(task, seed, a.trials) if sampler == "gp-ei"
                         else run_optuna(task, sampler, seed, a.trials))
                for c, r in suite.regret_at(trace, task.optimum, checkpoints).items():
                    regrets[c].append(r)
            for c in checkpoints:
                print(suite.result_line(task, sampler, c, regrets[c]), flush=True)
            print(f"bench: {task.name}/{sampler} {a.seeds} seeds in {time.time() - start:.1f}s",
                  file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
