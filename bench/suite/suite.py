#!/usr/bin/python3
"""The search-quality suite: every task defined once, here, for our samplers
and the peers alike.

A task is a search space in the experiment spec's grammar (server/spec/spec.h,
search/space.h: {"name": ..., "params": {...}}, conditional subtrees
included), a function of the *active* parameters in their JSON form (what a
trainer sees), and its optimum. bench/search_bench (ours, through the
library), bench/suite/rest_driver.py (ours, through the REST ask/tell API)
and bench/peers/suite_peers.py (Optuna and a scikit-learn GP-EI loop) all
evaluate through `Task.evaluate`, in this process or through
`suite.py serve` (one JSON request per line on stdin, one answer per line on
stdout), so a benchmark cannot disagree with itself about a function.

Families:
  bbob         BBOB/COCO noiseless functions 1, 8, 10, 12, 15 (sphere,
               Rosenbrock, rotated ellipsoid, bent cigar, rotated Rastrigin)
               at 2, 5 and 10 dimensions on [-5, 5]^d, one fixed instance
               each (optimum shifted and rotated, f_opt = 0)
  classic      Branin, Hartmann 3 and 6, Ackley 5, Levy 5, Rosenbrock 4,
               Styblinski-Tang 4
  noisy        Branin, Hartmann 6 and Levy 5 with Gaussian noise on what the
               sampler sees; regret counts the noiseless value
  mixed        integer and categorical mixes (Ackley with integers and a
               categorical shift; six interacting categoricals and two floats;
               Rosenbrock over integers)
  conditional  conditional trees (two and three branches, one nested)
  real         Bayesmark-style tuning of scikit-learn models on scikit-learn's
               built-in datasets, scored by 5-fold cross-validation (the loss:
               1 - accuracy, log loss or mean squared error); no known optimum

Regret: f(best point so far) - optimum, where "best" is by the value the
sampler saw and f is the noiseless value (the same for noiseless tasks). Real
tasks have optimum None: their "regret" is the loss itself, and
bench/search_compare.py subtracts the best loss any run found.

Noise is a function of (task, seed, trial number) only, so every sampler
sees the same noise sequence for a seed.
"""
import hashlib
import json
import math
import random
import sys
import warnings

import numpy as np


# ---------------------------------------------------------------- spaces ----

def floats(n, low, high, prefix="x"):
    return {f"{prefix}{i}": {"type": "float", "low": low, "high": high} for i in range(n)}


def xs(params, n, prefix="x"):
    return np.array([float(params[f"{prefix}{i}"]) for i in range(n)])


def active_params(space_params, chosen):
    """Walks a space's params in the spec grammar, calling chosen(name, spec)
    for every active parameter (parents before children); returns the dict of
    active values. Used by the peers to build assignments and by tests."""
    out = {}

    def walk(params):
        for name in sorted(params):  # nlohmann::json objects iterate sorted
            spec = params[name]
            v = chosen(name, spec)
            out[name] = v
            if isinstance(spec, dict) and spec.get("type") == "categorical":
                cond = spec.get("conditional", {})
                if str(v) in cond:
                    walk(cond[str(v)])

    walk(space_params)
    return out


def all_params(space_params):
    """Every parameter of a space, flattened: [(name, spec)], parents first."""
    out = []

    def walk(params):
        for name in sorted(params):
            spec = params[name]
            out.append((name, spec))
            if isinstance(spec, dict) and spec.get("type") == "categorical":
                for choice in sorted(spec.get("conditional", {})):
                    walk(spec["conditional"][choice])

    walk(space_params)
    return out


# ----------------------------------------------------------------- tasks ----

class Task:
    def __init__(self, name, family, params, f, optimum, noise=0.0):
        self.name = name
        self.family = family
        self.space = {"name": name, "params": params}
        self.f = f  # params dict (active params, JSON form) -> noiseless value
        self.optimum = optimum
        self.noise = noise

    def evaluate(self, params, seed, trial):
        """(value the sampler sees, noiseless value) for one trial."""
        f = float(self.f(params))
        y = f
        if self.noise > 0:
            h = hashlib.sha256(f"{self.name}/{seed}/{trial}".encode()).digest()
            y = f + self.noise * random.Random(h).gauss(0, 1)
        return y, f

    def describe(self):
        return {"name": self.name, "family": self.family, "space": self.space,
                "optimum": self.optimum}


# --- BBOB (Hansen et al., "Real-Parameter Black-Box Optimization
# Benchmarking 2009: Noiseless Functions Definitions"), one instance each.

def _instance_rng(fid, dim):
    return np.random.RandomState(1000 * fid + dim)


def _rotation(rng, d):
    q, r = np.linalg.qr(rng.normal(size=(d, d)))
    return q * np.sign(np.diag(r))


def _t_osz(x):
    x = np.asarray(x, dtype=float)
    xh = np.where(x != 0, np.log(np.abs(x) + (x == 0)), 0.0)
    c1 = np.where(x > 0, 10.0, 5.5)
    c2 = np.where(x > 0, 7.9, 3.1)
    return np.sign(x) * np.exp(xh + 0.049 * (np.sin(c1 * xh) + np.sin(c2 * xh)))


def _t_asy(x, beta):
    d = len(x)
    i = np.arange(d) / max(d - 1, 1)
    pos = np.maximum(x, 0)
    return np.where(x > 0, pos ** (1 + beta * i * np.sqrt(pos)), x)


def _lambda(alpha, d):
    return alpha ** (0.5 * np.arange(d) / max(d - 1, 1))


def bbob(fid, d):
    rng = _instance_rng(fid, d)
    xopt = rng.uniform(-4, 4, size=d)
    R = _rotation(rng, d)
    Q = _rotation(rng, d)
    cond = 10 ** (6 * np.arange(d) / max(d - 1, 1))
    if fid == 1:
        def f(x):
            return float(np.sum((x - xopt) ** 2))
        name = "sphere"
    elif fid == 8:
        xopt = 0.75 * xopt  # in [-3, 3]^d, as the definition asks
        scale = max(1.0, math.sqrt(d) / 8)

        def f(x):
            z = scale * (x - xopt) + 1
            return float(np.sum(100 * (z[:-1] ** 2 - z[1:]) ** 2 + (z[:-1] - 1) ** 2))
        name = "rosenbrock"
    elif fid == 10:
        def f(x):
            z = _t_osz(R @ (x - xopt))
            return float(np.sum(cond * z ** 2))
        name = "ellipsoid"
    elif fid == 12:
        def f(x):
            z = R @ _t_asy(R @ (x - xopt), 0.5)
            return float(z[0] ** 2 + 1e6 * np.sum(z[1:] ** 2))
        name = "bentcigar"
    elif fid == 15:
        lam = _lambda(10, d)

        def f(x):
            z = R @ (lam * (Q @ _t_asy(_t_osz(R @ (x - xopt)), 0.2)))
            return float(10 * (d - np.sum(np.cos(2 * math.pi * z))) + np.sum(z ** 2))
        name = "rastrigin"
    else:
        raise ValueError(fid)
    return Task(f"bbob_{name}{d}", "bbob", floats(d, -5, 5), lambda p: f(xs(p, d)), 0.0)


# --- Classic functions.

def branin_f(x1, x2):
    b, c, t = 5.1 / (4 * math.pi ** 2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1 * x1 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


BRANIN_OPT = 0.397887357729739

H3_A = np.array([[3.0, 10, 30], [0.1, 10, 35], [3.0, 10, 30], [0.1, 10, 35]])
H3_P = np.array([[0.3689, 0.1170, 0.2673], [0.4699, 0.4387, 0.7470],
                 [0.1091, 0.8732, 0.5547], [0.0381, 0.5743, 0.8828]])
H6_A = np.array([[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14],
                 [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]])
H6_P = np.array([[0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886],
                 [0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991],
                 [0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650],
                 [0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381]])
H_ALPHA = np.array([1.0, 1.2, 3.0, 3.2])
H3_OPT = -3.86278214782076
H6_OPT = -3.32236801141551


def hartmann(x, A, P):
    return float(-np.sum(H_ALPHA * np.exp(-np.sum(A * (x - P) ** 2, axis=1))))


def ackley(x):
    d = len(x)
    return float(-20 * math.exp(-0.2 * math.sqrt(np.sum(x ** 2) / d))
                 - math.exp(np.sum(np.cos(2 * math.pi * x)) / d) + 20 + math.e)


def levy(x):
    w = 1 + (x - 1) / 4
    f = math.sin(math.pi * w[0]) ** 2
    f += np.sum((w[:-1] - 1) ** 2 * (1 + 10 * np.sin(math.pi * w[:-1] + 1) ** 2))
    return float(f + (w[-1] - 1) ** 2 * (1 + math.sin(2 * math.pi * w[-1]) ** 2))


def rosenbrock(x):
    return float(np.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2))


def styblinski_tang(x):
    return float(0.5 * np.sum(x ** 4 - 16 * x ** 2 + 5 * x))


ST_OPT_PER_DIM = -39.16616570377142


def classic_tasks(noisy=False):
    tasks = [
        ("branin", {"x0": {"type": "float", "low": -5, "high": 10},
                    "x1": {"type": "float", "low": 0, "high": 15}},
         lambda p: branin_f(p["x0"], p["x1"]), BRANIN_OPT, 1.0),
        ("hartmann3", floats(3, 0, 1), lambda p: hartmann(xs(p, 3), H3_A, H3_P), H3_OPT, None),
        ("hartmann6", floats(6, 0, 1), lambda p: hartmann(xs(p, 6), H6_A, H6_P), H6_OPT, 0.1),
        ("ackley5", floats(5, -32.768, 32.768), lambda p: ackley(xs(p, 5)), 0.0, None),
        ("levy5", floats(5, -10, 10), lambda p: levy(xs(p, 5)), 0.0, 0.5),
        ("rosenbrock4", floats(4, -2.048, 2.048), lambda p: rosenbrock(xs(p, 4)), 0.0, None),
        ("styblinski4", floats(4, -5, 5), lambda p: styblinski_tang(xs(p, 4)), 4 * ST_OPT_PER_DIM,
         None),
    ]
    out = []
    for name, params, f, opt, noise in tasks:
        if not noisy:
            out.append(Task(name, "classic", params, f, opt))
        elif noise is not None:
            out.append(Task(name + "_noisy", "noisy", params, f, opt, noise=noise))
    return out


# --- Integer and categorical mixes.

MIXED_SHIFTS = {"a": (2.0, 1.0), "b": (0.0, 0.0), "c": (-1.0, 3.0), "d": (4.0, -2.0)}
MIXED_OFFSETS = {"a": 0.5, "b": 0.0, "c": 1.0, "d": 2.0}


def mixed_ackley(p):
    s = MIXED_SHIFTS[p["shift"]]
    x = np.array([p["x0"] - s[0], p["x1"] - s[1], p["x2"], float(p["n0"]), float(p["n1"])])
    return ackley(x) + MIXED_OFFSETS[p["shift"]]


def _cat_heavy_tables():
    rng = np.random.RandomState(18)
    return rng.uniform(0, 1, size=(6, 5)), rng.uniform(0, 1, size=(6, 5, 5))


CAT_T, CAT_P = _cat_heavy_tables()


def _cat_heavy_discrete(c):
    return float(sum(CAT_T[i, c[i]] + CAT_P[i, c[i], c[(i + 1) % 6]] for i in range(6)))


def _cat_heavy_optimum():
    grids = np.array(np.meshgrid(*[np.arange(5)] * 6, indexing="ij")).reshape(6, -1)
    total = np.zeros(grids.shape[1])
    for i in range(6):
        total += CAT_T[i, grids[i]] + CAT_P[i, grids[i], grids[(i + 1) % 6]]
    return float(total.min())


def cat_heavy(p):
    c = [int(p[f"c{i}"][1:]) for i in range(6)]
    return _cat_heavy_discrete(c) + 3 * ((p["x0"] - 0.2) ** 2 + (p["x1"] - 0.7) ** 2)


def mixed_tasks():
    choices5 = [f"v{k}" for k in range(5)]
    mixed = {"x0": {"type": "float", "low": -5, "high": 10},
             "x1": {"type": "float", "low": -5, "high": 10},
             "x2": {"type": "float", "low": -5, "high": 10},
             "n0": {"type": "int", "low": -5, "high": 10},
             "n1": {"type": "int", "low": -5, "high": 10},
             "shift": {"type": "categorical", "choices": ["a", "b", "c", "d"]}}
    cats = {f"c{i}": {"type": "categorical", "choices": choices5} for i in range(6)}
    cats.update(floats(2, 0, 1))
    ints = {f"n{i}": {"type": "int", "low": -5, "high": 10} for i in range(6)}
    return [
        Task("mixed_ackley", "mixed", mixed, mixed_ackley, 0.0),
        Task("cat_heavy", "mixed", cats, cat_heavy, _cat_heavy_optimum()),
        Task("int_rosenbrock6", "mixed", ints,
             lambda p: rosenbrock(np.array([float(p[f"n{i}"]) for i in range(6)])), 0.0),
    ]


# --- Conditional spaces.

def conditional2(p):
    lr_pen = (math.log10(p["lr"]) + 2) ** 2
    if p["model"] == "branin":
        return branin_f(p["x0"], p["x1"]) + lr_pen
    return (1.0 + 10 * ((p["y0"] - 0.3) ** 2 + (p["y1"] - 0.7) ** 2) + 0.1 * (p["y2"] - 4) ** 2
            + lr_pen)


def conditional3(p):
    shared = 0.5 * (p["w"] - 0.6) ** 2
    if p["model"] == "hart3":
        return hartmann(np.array([p["h0"], p["h1"], p["h2"]]), H3_A, H3_P) - H3_OPT + shared
    if p["model"] == "rosen":
        return 0.3 + rosenbrock(np.array([p["r0"], p["r1"]])) / 100 + shared
    return 0.2 + 0.01 * (p["k"] - 13) ** 2 + {"p": 0.0, "q": 0.1, "r": 0.2}[p["kind"]] + shared


def optimizer_tree(p):
    batch = math.log2(p["batch"]) - 6  # 0 at 64
    base = 0.2 * batch ** 2 / 9
    lr = math.log10(p["lr"]) - 0.5 * batch * math.log10(2)  # larger batches take larger steps
    opt = p["optimizer"]
    if opt == "sgd":
        return (base + (lr + 1) ** 2 + 3 * (p["momentum"] - 0.9) ** 2
                + (0.0 if p["nesterov"] == "yes" else 0.05) + 0.1)
    if opt == "adam":
        return (base + (lr + 3) ** 2 + 10 * (p["beta1"] - 0.85) ** 2 + 100 * (p["beta2"] - 0.99) ** 2
                + (0.02 if p["amsgrad"] == "yes" else 0.0))
    return base + (lr + 2.5) ** 2 + 2 * (p["rho"] - 0.9) ** 2 + 0.3


def conditional_tasks():
    cond2 = {
        "lr": {"type": "float", "low": 1e-5, "high": 1, "log": True},
        "model": {"type": "categorical", "choices": ["branin", "bowl"], "conditional": {
            "branin": {"x0": {"type": "float", "low": -5, "high": 10},
                       "x1": {"type": "float", "low": 0, "high": 15}},
            "bowl": {"y0": {"type": "float", "low": 0, "high": 1},
                     "y1": {"type": "float", "low": 0, "high": 1},
                     "y2": {"type": "int", "low": 0, "high": 10}}}}}
    cond3 = {
        "w": {"type": "float", "low": 0, "high": 1},
        "model": {"type": "categorical", "choices": ["hart3", "rosen", "quad"], "conditional": {
            "hart3": floats(3, 0, 1, "h"),
            "rosen": floats(2, -2, 2, "r"),
            "quad": {"k": {"type": "int", "low": 0, "high": 20},
                     "kind": {"type": "categorical", "choices": ["p", "q", "r"]}}}}}
    tree = {
        "lr": {"type": "float", "low": 1e-5, "high": 1, "log": True},
        "batch": {"type": "int", "low": 16, "high": 512, "log": True},
        "optimizer": {"type": "categorical", "choices": ["sgd", "adam", "rmsprop"], "conditional": {
            "sgd": {"momentum": {"type": "float", "low": 0, "high": 0.99},
                    "nesterov": {"type": "categorical", "choices": ["yes", "no"]}},
            "adam": {"beta1": {"type": "float", "low": 0.5, "high": 0.999},
                     "beta2": {"type": "float", "low": 0.9, "high": 0.9999},
                     "amsgrad": {"type": "categorical", "choices": ["yes", "no"]}},
            "rmsprop": {"rho": {"type": "float", "low": 0.5, "high": 0.99}}}}}
    return [
        Task("conditional", "conditional", cond2, conditional2, BRANIN_OPT),
        Task("conditional3", "conditional", cond3, conditional3, 0.0),
        Task("optimizer_tree", "conditional", tree, optimizer_tree, 0.0),
    ]


# --- Bayesmark-style real tasks: scikit-learn models on scikit-learn's
# built-in datasets, 5-fold cross-validation, fixed folds and model seeds.
# The spaces follow Bayesmark's (bayesmark/sklearn_funcs.py); the MLP runs at
# most 40 epochs to keep a trial under a second.

_DATA = {}


def _dataset(name):
    if name not in _DATA:
        from sklearn import datasets
        from sklearn.preprocessing import StandardScaler
        loader = {"wine": datasets.load_wine, "breast": datasets.load_breast_cancer,
                  "digits": datasets.load_digits, "iris": datasets.load_iris,
                  "diabetes": datasets.load_diabetes}[name]
        X, y = loader(return_X_y=True)
        _DATA[name] = (StandardScaler().fit_transform(X), y)
    return _DATA[name]


def _cv_loss(model, data, metric):
    from sklearn.model_selection import KFold, StratifiedKFold, cross_val_score
    X, y = _dataset(data)
    cv = (KFold if metric == "mse" else StratifiedKFold)(n_splits=5, shuffle=True, random_state=0)
    scoring = {"acc": "accuracy", "nll": "neg_log_loss", "mse": "neg_mean_squared_error"}[metric]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        score = cross_val_score(model, X, y, cv=cv, scoring=scoring, error_score=np.nan).mean()
    if not np.isfinite(score):
        return {"acc": 1.0, "nll": 10.0, "mse": 1e5}[metric]
    return 1 - score if metric == "acc" else -score


def _svm(p, data):
    from sklearn.svm import SVC
    return _cv_loss(SVC(C=p["C"], gamma=p["gamma"], tol=p["tol"], random_state=0), data, "acc")


def _knn(p, data):
    from sklearn.neighbors import KNeighborsClassifier
    return _cv_loss(KNeighborsClassifier(n_neighbors=p["n_neighbors"], p=p["p"]), data, "acc")


TREE_PARAMS = {
    "max_depth": {"type": "int", "low": 1, "high": 15},
    "min_samples_split": {"type": "float", "low": 0.01, "high": 0.99},
    "min_samples_leaf": {"type": "float", "low": 0.01, "high": 0.49},
    "min_weight_fraction_leaf": {"type": "float", "low": 0.01, "high": 0.49},
    "max_features": {"type": "float", "low": 0.01, "high": 0.99},
    "min_impurity_decrease": {"type": "float", "low": 0.0, "high": 0.5},
}


def _tree_kwargs(p):
    return {k: p[k] for k in TREE_PARAMS}


def _dt(p, data):
    from sklearn.tree import DecisionTreeClassifier
    return _cv_loss(DecisionTreeClassifier(random_state=0, **_tree_kwargs(p)), data, "nll")


def _rf(p, data):
    from sklearn.ensemble import RandomForestClassifier
    return _cv_loss(RandomForestClassifier(n_estimators=10, random_state=0, **_tree_kwargs(p)),
                    data, "nll")


def _lasso(p, data):
    from sklearn.linear_model import Lasso
    return _cv_loss(Lasso(alpha=p["alpha"], fit_intercept=p["fit_intercept"] == "yes",
                          max_iter=p["max_iter"], tol=p["tol"], random_state=0), data, "mse")


def _mlp(p, data):
    from sklearn.neural_network import MLPClassifier
    return _cv_loss(MLPClassifier(hidden_layer_sizes=(p["hidden_layer_sizes"],), alpha=p["alpha"],
                                  batch_size=p["batch_size"], learning_rate_init=p["learning_rate_init"],
                                  tol=p["tol"], beta_1=p["beta_1"], beta_2=p["beta_2"],
                                  epsilon=p["epsilon"], max_iter=40, random_state=0), data, "nll")


def real_tasks():
    svm = {"C": {"type": "float", "low": 1, "high": 1e3, "log": True},
           "gamma": {"type": "float", "low": 1e-4, "high": 1e-3, "log": True},
           "tol": {"type": "float", "low": 1e-5, "high": 1e-1, "log": True}}
    knn = {"n_neighbors": {"type": "int", "low": 1, "high": 25},
           "p": {"type": "int", "low": 1, "high": 4}}
    lasso = {"alpha": {"type": "float", "low": 1e-2, "high": 1e2, "log": True},
             "fit_intercept": {"type": "categorical", "choices": ["yes", "no"]},
             "max_iter": {"type": "int", "low": 10, "high": 5000, "log": True},
             "tol": {"type": "float", "low": 1e-5, "high": 1e-1, "log": True}}
    mlp = {"hidden_layer_sizes": {"type": "int", "low": 50, "high": 200},
           "alpha": {"type": "float", "low": 1e-5, "high": 10, "log": True},
           "batch_size": {"type": "int", "low": 10, "high": 250},
           "learning_rate_init": {"type": "float", "low": 1e-5, "high": 1e-1, "log": True},
           "tol": {"type": "float", "low": 1e-5, "high": 1e-1, "log": True},
           "beta_1": {"type": "float", "low": 0.5, "high": 0.99},
           "beta_2": {"type": "float", "low": 0.9, "high": 0.999999},
           "epsilon": {"type": "float", "low": 1e-9, "high": 1e-6, "log": True}}
    return [
        Task("svm_wine", "real", svm, lambda p: _svm(p, "wine"), None),
        Task("svm_breast", "real", svm, lambda p: _svm(p, "breast"), None),
        Task("knn_wine", "real", knn, lambda p: _knn(p, "wine"), None),
        Task("dt_breast", "real", dict(TREE_PARAMS), lambda p: _dt(p, "breast"), None),
        Task("rf_wine", "real", dict(TREE_PARAMS), lambda p: _rf(p, "wine"), None),
        Task("lasso_diabetes", "real", lasso, lambda p: _lasso(p, "diabetes"), None),
        Task("mlp_iris", "real", mlp, lambda p: _mlp(p, "iris"), None),
    ]


def all_tasks():
    tasks = [bbob(fid, d) for fid in (1, 8, 10, 12, 15) for d in (2, 5, 10)]
    tasks += classic_tasks() + classic_tasks(noisy=True) + mixed_tasks() + conditional_tasks()
    tasks += real_tasks()
    return {t.name: t for t in tasks}


TASKS = all_tasks()


def select(names=None, families=None):
    """Tasks by comma-separated names and/or families (all when both empty)."""
    names = [n for n in (names or "").split(",") if n]
    families = [f for f in (families or "").split(",") if f]
    for n in names:
        if n not in TASKS:
            raise SystemExit(f"suite: unknown task '{n}' (see `suite.py list`)")
    return [t for t in TASKS.values()
            if (not names or t.name in names) and (not families or t.family in families)]


CHECKPOINTS = (25, 50, 100)


def regret_at(trace, optimum, checkpoints=CHECKPOINTS):
    """trace: [(seen value, noiseless value)] in trial order. Best-so-far
    regret at each checkpoint the trace reaches: the noiseless value of the
    point the sampler saw as best, minus the optimum (0 when unknown)."""
    out = {}
    best_seen, best_f = math.inf, math.inf
    for n, (y, f) in enumerate(trace, 1):
        if y < best_seen:
            best_seen, best_f = y, f
        if n in checkpoints:
            out[n] = best_f - (optimum or 0.0)
    return out


def result_line(task, sampler, trials, regrets):
    """The line every driver prints, ours and the peers' alike."""
    r = np.array(regrets, dtype=float)
    q25, med, q75 = np.percentile(r, [25, 50, 75])
    return (f"bench=search func={task.name} family={task.family} sampler={sampler} trials={trials} "
            f"seeds={len(r)} median_regret={med:.6g} q25={q25:.6g} q75={q75:.6g} "
            f"regrets={','.join(f'{v:.6g}' for v in r)}")


def serve_lines(answer):
    """The serve loop (this suite's and mo_suite.py's): one JSON request per
    line on stdin, answer(request)'s JSON on a line of stdout."""
    for line in sys.stdin:
        sys.stdout.write(json.dumps(answer(json.loads(line))) + "\n")
        sys.stdout.flush()


def serve():
    """One JSON request per line: {"cmd": "list"} or
    {"cmd": "eval", "task": T, "params": {...}, "seed": S, "trial": N}."""
    def answer(req):
        if req["cmd"] == "list":
            return [t.describe() for t in TASKS.values()]
        y, f = TASKS[req["task"]].evaluate(req["params"], req["seed"], req["trial"])
        return {"y": y, "f": f}
    serve_lines(answer)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        serve()
    elif len(sys.argv) > 1 and sys.argv[1] == "list":
        for t in TASKS.values():
            print(f"{t.name:18s} {t.family:12s} params={len(all_params(t.space['params']))} "
                  f"optimum={t.optimum}")
    else:
        print(__doc__)
