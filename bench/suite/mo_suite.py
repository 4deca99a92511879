#!/usr/bin/python3
"""The multi-objective suite: every problem defined once, here, for our
samplers (bench/mo_bench, through `mo_suite.py serve`) and the peers
(bench/peers/mo_peers.py) alike.

A problem is a search space in the spec's grammar, a function of its
parameters returning every objective (all minimized) and, for a constrained
problem, each constraint's value (feasible when every one is <= 0), and the
fixed reference point its hypervolume is measured against.

  zdt1, zdt2, zdt3   Zitzler, Deb and Thiele (2000), 10 variables in [0, 1]:
                     a convex, a concave and a disconnected front
  dtlz2              Deb et al. (2002), 3 objectives, 6 variables in [0, 1]:
                     a spherical front
  bnh                Binh and Korn (1997), 2 variables, 2 constraints: a
                     constrained front (part of the box is infeasible)
  dt_digits          a real task: a scikit-learn decision tree on the digits
                     data, 3-fold cross-validated error against the tree's
                     number of leaves (log10): accuracy against model size

Hypervolume: of the feasible points a sampler evaluated, against the
problem's reference point, computed by Optuna's own WFG implementation
(optuna._hypervolume.WFG): a judge that is neither of the compared
samplers' code.
"""
import hashlib
import json
import math
import sys

import numpy as np


class Problem:
    def __init__(self, name, params, f, reference, constraints=None):
        self.name = name
        self.space = {"name": name, "params": params}
        self.f = f  # params dict -> list of objective values (minimized)
        self.reference = reference
        self.constraints = constraints  # params dict -> list of values, <= 0 feasible
        self._final = {}  # at_step's final evaluations by parameters

    def evaluate(self, params):
        values = [float(v) for v in self.f(params)]
        c = [float(v) for v in self.constraints(params)] if self.constraints else []
        return {"values": values, "constraints": c,
                "violation": sum(max(0.0, v) for v in c)}

    def at_step(self, params, step, max_step, offset=0.25):
        """The objectives after `step` of `max_step` steps of a synthetic
        learning curve: each starts above its final value by up to `offset`
        (a quarter) of the reference's magnitude, by an amount and a rate of
        its own (a hash of the parameters), and reaches it at max_step; so
        early steps rank trials roughly, not exactly (with offset 0, every
        step is the final value). Constraints as at the end."""
        key = json.dumps(params, sort_keys=True)
        if key not in self._final:  # one model fit per trial, not per step
            self._final[key] = self.evaluate(params)
        r = dict(self._final[key])
        h = hashlib.sha256(key.encode()).digest()
        late = (max_step - step) / (max_step - 1) if max_step > 1 else 0.0
        r["values"] = [v + offset * abs(ref) * (h[2 * i] / 255) * late ** (1 + 2 * h[2 * i + 1] / 255)
                       for i, (v, ref) in enumerate(zip(r["values"], self.reference))]
        return r

    def describe(self):
        return {"name": self.name, "space": self.space, "objectives": len(self.reference),
                "reference": self.reference, "constrained": self.constraints is not None}


def unit(n, prefix="x"):
    return {f"{prefix}{i}": {"type": "float", "low": 0.0, "high": 1.0} for i in range(n)}


def vec(p, n, prefix="x"):
    return np.array([p[f"{prefix}{i}"] for i in range(n)], dtype=float)


ZDT_N = 10


def zdt(kind):
    def f(p):
        x = vec(p, ZDT_N)
        g = 1 + 9 * x[1:].sum() / (ZDT_N - 1)
        f1 = x[0]
        if kind == 1:
            h = 1 - math.sqrt(f1 / g)
        elif kind == 2:
            h = 1 - (f1 / g) ** 2
        else:
            h = 1 - math.sqrt(f1 / g) - (f1 / g) * math.sin(10 * math.pi * f1)
        return [f1, g * h]
    return Problem(f"zdt{kind}", unit(ZDT_N), f, [1.1, 11.0])


def dtlz2():
    n, m = 6, 3
    def f(p):
        x = vec(p, n)
        g = ((x[m - 1:] - 0.5) ** 2).sum()
        a = x[:m - 1] * math.pi / 2
        return [(1 + g) * math.cos(a[0]) * math.cos(a[1]),
                (1 + g) * math.cos(a[0]) * math.sin(a[1]),
                (1 + g) * math.sin(a[0])]
    return Problem("dtlz2", unit(n), f, [2.5, 2.5, 2.5])


def bnh():
    params = {"x0": {"type": "float", "low": 0.0, "high": 5.0},
              "x1": {"type": "float", "low": 0.0, "high": 3.0}}
    def f(p):
        x0, x1 = p["x0"], p["x1"]
        return [4 * x0 ** 2 + 4 * x1 ** 2, (x0 - 5) ** 2 + (x1 - 5) ** 2]
    def c(p):
        x0, x1 = p["x0"], p["x1"]
        return [(x0 - 5) ** 2 + x1 ** 2 - 25, 7.7 - (x0 - 8) ** 2 - (x1 + 3) ** 2]
    return Problem("bnh", params, f, [140.0, 50.0], c)


_DIGITS = None


def dt_digits():
    params = {
        "max_depth": {"type": "int", "low": 1, "high": 24},
        "min_samples_leaf": {"type": "int", "low": 1, "high": 64, "log": True},
        "min_samples_split": {"type": "int", "low": 2, "high": 64, "log": True},
        "max_features": {"type": "float", "low": 0.05, "high": 1.0},
        "criterion": {"type": "categorical", "choices": ["gini", "entropy"]},
    }
    def f(p):
        global _DIGITS
        import warnings
        from sklearn.datasets import load_digits
        from sklearn.model_selection import KFold
        from sklearn.tree import DecisionTreeClassifier
        if _DIGITS is None:
            _DIGITS = load_digits(return_X_y=True)
        X, y = _DIGITS
        errors, leaves = [], []
        for train, test in KFold(3, shuffle=True, random_state=0).split(X):
            model = DecisionTreeClassifier(max_depth=int(p["max_depth"]),
                                           min_samples_leaf=int(p["min_samples_leaf"]),
                                           min_samples_split=int(p["min_samples_split"]),
                                           max_features=float(p["max_features"]),
                                           criterion=p["criterion"], random_state=0)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model.fit(X[train], y[train])
            errors.append(1 - model.score(X[test], y[test]))
            leaves.append(model.get_n_leaves())
        return [float(np.mean(errors)), math.log10(float(np.mean(leaves)))]
    return Problem("dt_digits", params, f, [1.0, 3.5])


PROBLEMS = {p.name: p for p in [zdt(1), zdt(2), zdt(3), dtlz2(), bnh(), dt_digits()]}
CHECKPOINTS = (50, 100)


def select(names=None):
    names = [n for n in (names or "").split(",") if n]
    for n in names:
        if n not in PROBLEMS:
            raise SystemExit(f"mo_suite: unknown problem '{n}' (one of {', '.join(PROBLEMS)})")
    return [p for p in PROBLEMS.values() if not names or p.name in names]


def hypervolume(points, reference):
    """Optuna's WFG over the points strictly inside the reference box."""
    from optuna._hypervolume import WFG
    ref = np.asarray(reference, dtype=float)
    inside = [p for p in points if all(a < b for a, b in zip(p, ref))]
    if not inside:
        return 0.0
    # Dominated points add nothing: WFG gets the front alone (at 1,000
    # trials it is a tenth of them, and WFG's cost grows much faster).
    return float(WFG().compute(front(inside), ref))


def front(points):
    """The points no other dominates (<= in every objective, < in one), as
    an array in their order; equal points all stay."""
    pts = np.asarray(points, dtype=float).reshape(len(points), -1)
    le = np.all(pts[:, None, :] <= pts[None, :, :], axis=2)
    lt = np.any(pts[:, None, :] < pts[None, :, :], axis=2)
    return pts[~np.any(le & lt, axis=0)]  # [j]: some i is <= everywhere and < somewhere


def trace_hv(problem, trace, trials):
    """Hypervolume of the feasible points among a trace's first `trials`
    evaluations (trace: [{"values": [...], "violation": v}, ...])."""
    pts = [t["values"] for t in trace[:trials] if t["violation"] <= 0]
    return hypervolume(pts, problem.reference)


def serve():
    """One JSON request per line: {"cmd": "list"},
    {"cmd": "eval", "problem": P, "params": {...}} or
    {"cmd": "eval_step", "problem": P, "params": {...}, "step": S, "max_step": M[, "offset": 0.25]}."""
    def answer(req):
        if req["cmd"] == "list":
            return [p.describe() for p in PROBLEMS.values()]
        if req["cmd"] == "eval_step":
            return PROBLEMS[req["problem"]].at_step(req["params"], req["step"], req["max_step"],
                                                    req.get("offset", 0.25))
        return PROBLEMS[req["problem"]].evaluate(req["params"])
    from suite import serve_lines
    serve_lines(answer)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        serve()
    elif len(sys.argv) > 1 and sys.argv[1] == "list":
        for p in PROBLEMS.values():
            print(f"{p.name:10s} objectives={len(p.reference)} params={len(p.space['params'])} "
                  f"reference={p.reference} constrained={p.constraints is not None}")
    else:
        print(__doc__)
