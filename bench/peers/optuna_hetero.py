#!/usr/bin/python3
"""bench/peers/optuna_hetero.py: Optuna 3.1 on bench/hetero's job, the peer
HeteroTune's time to a good model is measured against.

One process is one Optuna worker: bench/hetero starts N of them, each in the
CPU cgroup one hpo-worker gets, all sharing one study in a JournalFileStorage
in the run's directory. Each process loads the data, imports torch and
Optuna, runs a tiny forward and backward pass of both models, writes
{"event": "ready"} to its --log and then blocks on its stdin: the clock
starts when bench/hetero writes a byte there (to every worker at once).
From then on it runs study.optimize until it is killed at the cap.

The job is HeteroTune's built-in trainer (worker/builtin_trainer.cc) with
bench/hetero's spec, reproduced in PyTorch (Debian's python3-torch, the
same LibTorch 1.13 as the worker) piece by piece, each citing what it
mirrors. A trial numbered n gets the seed HeteroTune gives its trial n
(server/engine/trial_run.cc's TrialSeed), so with the same parameters it
draws the same validation split, the same initial weights and the same
batches as HeteroTune's trial n.

Optuna as its users would set it up for this job:
  sampler  TPESampler(seed=..., constant_liar=True): the default sampler;
           constant_liar is what TPESampler's documentation recommends for
           distributed optimization (running trials count as bad results,
           so parallel workers do not sample the same region). Each worker
           process has its own sampler, seeded from the run's seed and its
           index (the same seed in every process would draw the same
           startup trials).
  pruner   SuccessiveHalvingPruner(min_resource=1, reduction_factor=3)
           (--pruner sha, the default; bench/README.md, "hetero", says why
           over HyperbandPruner and MedianPruner, which --pruner also runs).
  storage  JournalStorage(JournalFileStorage(path)): Optuna 3.1's storage for
           several processes on one machine without a database server; its
           RDB storage documentation says "We would never recommend SQLite3
           for parallel optimization". With Optuna 3.6's fix of a reader's
           race (journal_storage below).
  spaces   one study; the model is a categorical parameter ("space": mlp or
           cnn) and each model's parameters are conditional on it, named
           "<space>_<param>" (the two spaces give lr, width and dropout
           different ranges; one name would mix their observations in TPE).
           batch_size is sampled as bench/hetero's spec's system parameter.

Lines in --log, one JSON object each, "t" in Unix seconds:
  {"event": "ready", "t", "pid", "load_s"}          warm, waiting for the start
  {"event": "start", "t"}                           the start byte came
  {"event": "trial", "t", "trial", "space", "params", "seed"}   training begins
  {"event": "measure", "t", "trial", "step", "accuracy", "loss", "train_loss",
   "samples_per_s", "train_s"}    after trial.report(): the value is stored
  {"event": "end", "t", "trial", "state": "pruned|complete", "test_accuracy"?}

  optuna_hetero.py worker --storage FILE --study NAME --seed S --index I --log FILE
      [--threads 1] [--steps 8] [--train-examples 8000] [--samples-per-step 0]
      [--validation-fraction 0.1] [--pruner sha|hyperband|median|none]
      [--data-dir /usr/share/datasets/fashion-mnist]
  optuna_hetero.py replay --space cnn --params JSON --batch-size B --seed N [--steps ...]
      trains one configuration with one seed and prints a line per step (the
      check that it matches HeteroTune's trial with that seed and those
      parameters, and the speed comparison in bench/README.md)

Run it with /usr/bin/python3 (Debian's python3-optuna and python3-torch;
scripts/setup installs both).
"""

import argparse
import gzip
import json
import math
import os
import time

import torch  # noqa: E402  (imported before anything parallel runs: the thread counts below)

DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"
MASK64 = (1 << 64) - 1

# The validation and test sets are scored in mini-batches of this many
# examples (--eval-batch), as a PyTorch user evaluates through a DataLoader
# (Optuna's own PyTorch example uses its training batch size, 128).
# worker/builtin_trainer.cc's Evaluate takes chunks of 2,000, which give the
# same accuracy but cost 2.7x the time here: each chunk's activations (100 MB
# for a CNN of 16 channels) are above glibc's mmap threshold, so every
# evaluation faults in fresh memory. `replay
# --eval-batch 2000` reproduces the trainer's chunks exactly.
EVAL_BATCH = 256


# ------------------------------------------------------------- seeds ------

def _splitmix_state(seed):
    # search/random.h's Rng(seed): xoshiro256** seeded by SplitMix64.
    s = []
    for _ in range(4):
        seed = (seed + 0x9E3779B97F4A7C15) & MASK64
        z = seed
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        s.append(z ^ (z >> 31))
    return s


def _rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & MASK64


def trial_seed(spec_seed, trial_number):
    """server/engine/trial_run.cc's TrialSeed: Rng(spec.seed).Fork(number).Next() >> 1."""
    s = _splitmix_state(spec_seed & MASK64)
    fork = _splitmix_state(s[0] ^ ((trial_number * 0x9E3779B97F4A7C15) & MASK64) ^ s[3])  # Rng::Fork
    result = (_rotl((fork[1] * 5) & MASK64, 7) * 9) & MASK64  # Rng::Next's output
    return result >> 1


# ------------------------------------------------------------- data -------

def _read_idx(path):
    """worker/idx.cc's ReadGzipFile + ParseIdx: unsigned-byte IDX data."""
    import numpy as np
    with gzip.open(path, "rb") as f:
        raw = f.read()
    magic = int.from_bytes(raw[0:4], "big")
    if magic >> 8 != 0x08:
        raise ValueError(f"{path}: not unsigned-byte IDX data")
    ndims = magic & 0xFF
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndims)]
    header = 4 + 4 * ndims
    if len(raw) != header + math.prod(dims):
        raise ValueError(f"{path}: expected {header + math.prod(dims)} bytes, found {len(raw)}")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)


def load_split(data_dir, prefix):
    """worker/builtin_trainer.cc's LoadSplit: images [N, 1, 28, 28] float32,
    scaled to [0, 1] and normalized by Fashion-MNIST's training-set mean and
    standard deviation; labels int64."""
    img = _read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"))
    lab = _read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"))
    n = img.shape[0]
    images = torch.from_numpy(img.copy()).reshape(n, 1, img.shape[1], img.shape[2]).to(torch.float32)
    images.div_(255.0).sub_(0.2860).div_(0.3530)
    labels = torch.from_numpy(lab.copy()).to(torch.int64)
    return images, labels


# ------------------------------------------------------------- the model --

def build_model(cnn, depth=2, width=256, conv_layers=2, channels=32, dropout=0.1, batch_norm=False):
    """worker/builtin_trainer.cc's BuildModel, layer for layer and in the same
    order (so a seed draws the same initial weights): for a CNN, per conv
    layer Conv2d(3x3, padding 1) with channels doubling per layer, then
    BatchNorm2d (batch_norm), ReLU, MaxPool2d(2); then Flatten and `depth`
    dense layers of `width`, each Linear, BatchNorm1d (batch_norm), ReLU,
    Dropout (when dropout > 0); then Linear to the 10 classes. The
    activation is ReLU: the spaces do not search it, and it is the
    trainer's default."""
    nn = torch.nn
    layers = []
    features = 28 * 28
    if cnn:
        c_in, side = 1, 28
        for i in range(conv_layers):
            c_out = channels << i
            layers.append(nn.Conv2d(c_in, c_out, 3, padding=1))
            if batch_norm:
                layers.append(nn.BatchNorm2d(c_out))
            layers.append(nn.ReLU())
            layers.append(nn.MaxPool2d(2))
            c_in = c_out
            side //= 2
        features = c_in * side * side
    layers.append(nn.Flatten())
    for _ in range(depth):
        layers.append(nn.Linear(features, width))
        if batch_norm:
            layers.append(nn.BatchNorm1d(width))
        layers.append(nn.ReLU())
        if dropout > 0:
            layers.append(nn.Dropout(dropout))
        features = width
    layers.append(nn.Linear(features, 10))
    return nn.Sequential(*layers)


def evaluate(net, x, y, batch):
    """worker/builtin_trainer.cc's Evaluate: mean cross-entropy and accuracy
    in eval mode (batch norm's running statistics, no dropout), in chunks of
    `batch` examples."""
    net.eval()
    loss, correct, n = 0.0, 0, x.shape[0]
    with torch.no_grad():
        for start in range(0, n, batch):
            xb, yb = x[start:start + batch], y[start:start + batch]
            logits = net(xb)
            loss += torch.nn.functional.cross_entropy(logits, yb, reduction="sum").item()
            correct += int(logits.argmax(1).eq(yb).sum().item())
    net.train()
    return loss / n, correct / n


class Data:
    def __init__(self, data_dir):
        self.train_x, self.train_y = load_split(data_dir, "train")
        self.test_x, self.test_y = load_split(data_dir, "t10k")


def train(data, space, params, batch_size, seed, steps, train_examples, samples_per_step,
          validation_fraction, on_step, eval_batch=EVAL_BATCH):
    """worker/builtin_trainer.cc's BuiltinExecutor::Train for one trial.

    on_step(step, metrics) is called after each step (from 1) with
    {"accuracy", "loss", "train_loss", "samples_per_s", "train_s"}; it
    returns False to stop the trial there. Returns the final metrics (the
    test set's accuracy and loss added) when every step ran, else None."""
    p = params
    # Params' defaults (builtin_trainer.h): what a space does not search.
    lr = float(p.get("lr", 1e-3))
    optimizer = p.get("optimizer", "adam")
    weight_decay = float(p.get("weight_decay", 0.0))
    schedule = p.get("lr_schedule", "constant")
    net_args = dict(cnn=space == "cnn", depth=int(p.get("depth", 2)), width=int(p.get("width", 256)),
                    conv_layers=int(p.get("conv_layers", 2)), channels=int(p.get("channels", 32)),
                    dropout=float(p.get("dropout", 0.1)), batch_norm=bool(p.get("batch_norm", False)))

    # The split: the trial's seed draws a permutation of the 60,000 training
    # images; the first validation_fraction of it is held out and scored
    # every step, the rest (its first max_train_samples) is trained on.
    torch.manual_seed(seed)
    n_all = data.train_x.shape[0]
    n_val = min(max(int(n_all * validation_fraction), 1), n_all - 1)
    perm = torch.randperm(n_all, dtype=torch.int64)
    val_idx, train_idx = perm[:n_val], perm[n_val:]
    if 0 < train_examples < train_idx.shape[0]:
        train_idx = train_idx[:train_examples]
    train_x = data.train_x.index_select(0, train_idx)
    train_y = data.train_y.index_select(0, train_idx)
    val_x = data.train_x.index_select(0, val_idx)
    val_y = data.train_y.index_select(0, val_idx)
    n_train = train_x.shape[0]
    # A step is a full pass, or samples_per_step examples drawn afresh.
    per_step = min(samples_per_step, n_train) if samples_per_step > 0 else n_train

    net = build_model(**net_args)
    if optimizer == "adamw":
        opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=weight_decay)
    elif optimizer == "adam":
        opt = torch.optim.Adam(net.parameters(), lr=lr, weight_decay=weight_decay)
    else:
        raise ValueError(f"optimizer {optimizer}: the spaces search adam and adamw only")

    for epoch in range(steps):
        # The schedule spans the trial's whole budget (run.max_steps).
        epoch_lr = lr
        if schedule == "cosine":
            epoch_lr = lr * 0.5 * (1 + math.cos(math.pi * epoch / steps))
        elif schedule == "step":
            epoch_lr = lr * 0.1 ** (epoch // max(1, steps // 3))
        for g in opt.param_groups:
            g["lr"] = epoch_lr
        net.train()
        order = torch.randperm(n_train, dtype=torch.int64)[:per_step]
        train_loss = torch.zeros((), dtype=torch.float64)
        batches = 0
        started = time.monotonic()
        b = 0
        while b < per_step:
            # As the built-in trainer: a lone last example joins the batch
            # before it (batch norm cannot train on a batch of one).
            end = min(per_step, b + batch_size)
            if per_step - end == 1:
                end = per_step
            idx = order[b:end]
            b = end
            x, y = train_x.index_select(0, idx), train_y.index_select(0, idx)
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(net(x), y)
            loss.backward()
            opt.step()
            train_loss += loss.detach().to(torch.float64)
            batches += 1
        epoch_loss = train_loss.item() / max(1, batches)
        seconds = time.monotonic() - started  # training only, as the trainer's samples/s
        val_loss, val_acc = evaluate(net, val_x, val_y, eval_batch)
        metrics = {"accuracy": val_acc, "loss": val_loss, "train_loss": epoch_loss,
                   "samples_per_s": per_step / max(seconds, 1e-9), "train_s": seconds}
        if not on_step(epoch + 1, metrics):
            return None
    test_loss, test_acc = evaluate(net, data.test_x, data.test_y, eval_batch)
    return {"test_accuracy": test_acc, "test_loss": test_loss}


def warm_up():
    """One tiny forward and backward pass of each model (LibTorch's lazy
    set-up: thread pools, kernels), outside the clock."""
    for cnn in (False, True):
        net = build_model(cnn=cnn, depth=1, width=16, conv_layers=2, channels=8, batch_norm=True)
        loss = torch.nn.functional.cross_entropy(net(torch.zeros(2, 1, 28, 28)), torch.zeros(2, dtype=torch.int64))
        loss.backward()


def set_threads(threads):
    # worker/builtin_trainer.cc's ApplyThreads: intra-op threads as the
    # worker's (its quota, at least one), one inter-op thread.
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)


# ------------------------------------------------------------- Optuna -----

def suggest(trial):
    """bench/hetero.py's make_spec spaces, as Optuna users write two models:
    a categorical choice and each model's parameters under it."""
    space = trial.suggest_categorical("space", ["mlp", "cnn"])
    if space == "mlp":
        p = {
            "lr": trial.suggest_float("mlp_lr", 3.0e-4, 3.0e-3, log=True),
            "optimizer": trial.suggest_categorical("mlp_optimizer", ["adam", "adamw"]),
            "width": trial.suggest_int("mlp_width", 128, 512, log=True),
            "depth": trial.suggest_int("mlp_depth", 1, 3),
            "dropout": trial.suggest_float("mlp_dropout", 0.0, 0.4),
            "weight_decay": trial.suggest_float("mlp_weight_decay", 1.0e-6, 1.0e-3, log=True),
            "lr_schedule": trial.suggest_categorical("mlp_lr_schedule", ["constant", "cosine"]),
        }
    else:
        p = {
            "lr": trial.suggest_float("cnn_lr", 5.0e-4, 3.0e-3, log=True),
            "channels": trial.suggest_categorical("cnn_channels", [8, 16]),
            "conv_layers": trial.suggest_int("cnn_conv_layers", 1, 2),
            "width": trial.suggest_int("cnn_width", 64, 256, log=True),
            "dropout": trial.suggest_float("cnn_dropout", 0.0, 0.4),
            "batch_norm": trial.suggest_categorical("cnn_batch_norm", [True, False]),
        }
    batch_size = trial.suggest_int("batch_size", 64, 256, log=True)
    return space, p, batch_size


def make_pruner(name, steps):
    import optuna
    if name == "sha":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3)
    if name == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=1, max_resource=steps, reduction_factor=3)
    if name == "median":
        return optuna.pruners.MedianPruner()
    if name == "none":
        return optuna.pruners.NopPruner()
    raise ValueError(f"--pruner {name}: sha, hyperband, median or none")


def journal_storage(path):
    """Optuna 3.1's JournalFileStorage, whose reads see only whole lines.

    Its read_logs reads without the writers' lock, so it can meet a line
    that another process is still appending; when the rest of that line
    arrives within the same read it raises JSONDecodeError and the worker
    dies (optuna/optuna#5138, fixed in Optuna 3.6 by #5195). A worker
    throttled to 0.125 cores is often descheduled mid-write, and seven of
    them met it in the first run. Here a read takes the lines complete when
    it began and leaves the rest for the next read, as the fix does."""
    from optuna.storages import JournalFileStorage, JournalStorage

    class WholeLines(JournalFileStorage):
        def read_logs(self, log_number_from):
            with open(self._file_path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                number, offset = 0, 0
                if log_number_from in self._log_number_offset:
                    number, offset = log_number_from, self._log_number_offset[log_number_from]
                f.seek(offset)
                data = f.read(max(0, size - offset))
            logs = []
            for line in data[:data.rfind(b"\n") + 1].splitlines(keepends=True):
                offset += len(line)
                self._log_number_offset.setdefault(number + 1, offset)
                if number >= log_number_from:
                    logs.append(json.loads(line))
                number += 1
            return logs

    return JournalStorage(WholeLines(path))


class Log:
    def __init__(self, path):
        self.f = open(path, "a", buffering=1)

    def write(self, event, **fields):
        self.f.write(json.dumps(dict(event=event, t=time.time(), **fields)) + "\n")


def worker(args):
    set_threads(args.threads)
    t0 = time.monotonic()
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    import warnings
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    log = Log(args.log)
    data = Data(args.data_dir)
    warm_up()
    storage = journal_storage(args.storage)
    study = optuna.create_study(study_name=args.study, storage=storage, direction="maximize",
                                load_if_exists=True,
                                sampler=optuna.samplers.TPESampler(seed=args.seed * 1000 + args.index,
                                                                   constant_liar=True),
                                pruner=make_pruner(args.pruner, args.steps))
    log.write("ready", pid=os.getpid(), load_s=round(time.monotonic() - t0, 3))
    if not os.read(0, 1):  # the start byte; end of input: the bench went away
        return
    log.write("start")

    def objective(trial):
        space, params, batch_size = suggest(trial)
        seed = trial_seed(args.seed, trial.number)
        log.write("trial", trial=trial.number, space=space, params=params, batch_size=batch_size, seed=seed)
        last = {}

        def on_step(step, m):
            trial.report(m["accuracy"], step)
            log.write("measure", trial=trial.number, step=step, **m)
            last["accuracy"] = m["accuracy"]
            return not trial.should_prune()
        final = train(data, space, params, batch_size, seed, args.steps, args.train_examples,
                      args.samples_per_step, args.validation_fraction, on_step, args.eval_batch)
        if final is None:
            log.write("end", trial=trial.number, state="pruned")
            raise optuna.TrialPruned()
        log.write("end", trial=trial.number, state="complete", **final)
        # The trial's value is its last step's validation accuracy, as
        # HeteroTune's (the trainer's final metrics).
        return last["accuracy"]

    study.optimize(objective, n_trials=args.max_trials, gc_after_trial=False)


def replay(args):
    set_threads(args.threads)
    data = Data(args.data_dir)
    warm_up()
    params = json.loads(args.params)

    def on_step(step, m):
        print(json.dumps(dict(step=step, **{k: round(v, 5) for k, v in m.items()})), flush=True)
        return True
    final = train(data, args.space, params, args.batch_size, args.seed, args.steps, args.train_examples,
                  args.samples_per_step, args.validation_fraction, on_step, args.eval_batch)
    print(json.dumps({"final": final}), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    for name in ("worker", "replay"):
        p = sub.add_parser(name)
        p.add_argument("--threads", type=int, default=1)
        p.add_argument("--steps", type=int, default=8, help="budget.steps_per_trial")
        p.add_argument("--train-examples", type=int, default=8000, help="max_train_samples (0: all)")
        p.add_argument("--samples-per-step", type=int, default=0, help="0: a full pass per step")
        p.add_argument("--validation-fraction", type=float, default=0.1)
        p.add_argument("--data-dir", default=DEFAULT_DATA)
        p.add_argument("--eval-batch", type=int, default=EVAL_BATCH, help="examples per evaluation mini-batch")
        if name == "worker":
            p.add_argument("--storage", required=True, help="the JournalFileStorage's file")
            p.add_argument("--study", required=True)
            p.add_argument("--seed", type=int, required=True, help="the run's seed (HeteroTune's algorithm.seed)")
            p.add_argument("--index", type=int, required=True, help="this worker's index in the fleet")
            p.add_argument("--log", required=True)
            p.add_argument("--pruner", default="sha")
            p.add_argument("--max-trials", type=int, default=None)
        else:
            p.add_argument("--space", choices=("mlp", "cnn"), required=True)
            p.add_argument("--params", required=True, help="JSON: the trial's params as HeteroTune names them")
            p.add_argument("--batch-size", type=int, default=128)
            p.add_argument("--seed", type=int, required=True, help="the trial's seed (GET /api/v1/trials/ID)")
    args = ap.parse_args()
    (worker if args.command == "worker" else replay)(args)


if __name__ == "__main__":
    main()
