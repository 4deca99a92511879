#!/usr/bin/env python3
"""A tiny training script for HeteroTune's command executor (standard library only).

It shows what a program run by `executor: {command: ...}` does (see
examples/command.yaml), through the helpers of the `heterotune` package
(clients/python; `heterotune.report`, `.system`, `.params`, `.checkpoint`):
  * reads its hyperparameters from the command line (filled in from {param}
    placeholders) or from HPO_PARAMS (all of them, as JSON);
  * trains for HPO_MAX_STEPS epochs, printing one metric line per epoch:
        hpo: step=3 loss=0.41 accuracy=0.87 samples_per_sec=51234 batch_size=64
    The worker reports each line to the server, which may prune the trial:
    the worker then stops this process (SIGTERM), so there is nothing to clean up;
  * re-reads HPO_SYSTEM_FILE before each epoch, because the server may change
    the system setting (batch size, threads) mid-trial to find the fastest one,
    and echoes the setting it used on its metric line, so speed is credited to
    the setting that was really in use;
  * keeps the checkpoint contract (worker/command_executor.h), so that with
    promotion-type early stopping a trial can pause at a rung and be resumed
    later, on any worker, exactly where it stopped: with HPO_STOP_STEP set it
    writes its whole state (weights, the data order, the random generator) to
    HPO_CHECKPOINT_DIR after that epoch and exits 0; with HPO_RESUME_STEP set
    it restores that state and goes on at the next epoch, or exits 65 when the
    state is not the one it expects (the worker then starts the trial over).

The "model" is logistic regression on a synthetic two-class problem, trained
with mini-batch SGD: small enough to take a few milliseconds per epoch.

Where `heterotune` comes from: run from a checkout, this file uses the copy
in clients/python beside it, so it needs no install and always matches this
checkout (the worker tests run it so). Copied elsewhere, it uses the
installed package (`pip install ./clients/python`).
"""

import argparse
import json
import math
import os
import random
import sys
import time

_CHECKOUT_CLIENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "clients", "python")
if os.path.isfile(os.path.join(_CHECKOUT_CLIENT, "heterotune", "__init__.py")):
    sys.path.insert(0, os.path.normpath(_CHECKOUT_CLIENT))
try:
    import heterotune
except ImportError:
    sys.exit("train_example.py: the heterotune package is missing: pip install ./clients/python "
             "(from a HeteroTune checkout), or run this file from inside the checkout")

STATE_FILE = "state.json"


def make_data(rng, n, dim):
    """Two Gaussian blobs, labels 0 and 1, overlapping: more features separate them better."""
    data = []
    for _ in range(n):
        label = rng.random() < 0.5
        centre = 0.2 if label else -0.2
        data.append(([rng.gauss(centre, 1.0) for _ in range(dim)], 1.0 if label else 0.0))
    return data


def sigmoid(z):
    if z < -30:
        return 0.0
    if z > 30:
        return 1.0
    return 1.0 / (1.0 + math.exp(-z))


def evaluate(weights, bias, data):
    loss = 0.0
    correct = 0
    for x, y in data:
        p = sigmoid(sum(w * xi for w, xi in zip(weights, x)) + bias)
        p = min(max(p, 1e-7), 1 - 1e-7)
        loss -= y * math.log(p) + (1 - y) * math.log(1 - p)
        correct += (p >= 0.5) == (y == 1.0)
    return loss / len(data), correct / len(data)


def save_state(directory, epoch, weights, bias, order, rng):
    """Everything the next epoch depends on; written whole or not at all."""
    version, internal, gauss_next = rng.getstate()
    state = {"epoch": epoch, "weights": weights, "bias": bias, "order": order,
             "rng": [version, list(internal), gauss_next]}
    tmp = os.path.join(directory, STATE_FILE + ".tmp")
    with open(tmp, "w") as f:
        json.dump(state, f)
    os.replace(tmp, os.path.join(directory, STATE_FILE))


def load_state(directory, epoch, width, n_train):
    """The state saved after `epoch`, or None when it is missing or not that."""
    try:
        with open(os.path.join(directory, STATE_FILE)) as f:
            state = json.load(f)
        version, internal, gauss_next = state["rng"]
        ok = (state["epoch"] == epoch and len(state["weights"]) == width
              and sorted(state["order"]) == list(range(n_train)))
        return (state, (version, tuple(internal), gauss_next)) if ok else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def main():
    params = heterotune.params()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lr", type=float, default=float(params.get("lr", 0.1)))
    parser.add_argument("--width", type=int, default=int(params.get("width", 8)),
                        help="input features used (a stand-in for model size)")
    parser.add_argument("--epochs", type=int, default=heterotune.max_steps(10))
    parser.add_argument("--seed", type=int, default=int(os.environ.get("HPO_SEED", "0")))
    args = parser.parse_args()
    if args.lr <= 0 or args.width < 1 or args.epochs < 1:
        print(f"bad arguments: lr={args.lr} width={args.width} epochs={args.epochs}",
              file=sys.stderr)
        return 2

    rng = random.Random(args.seed)
    train = make_data(rng, 512, args.width)
    valid = make_data(rng, 256, args.width)
    weights = [0.0] * args.width
    bias = 0.0
    order = list(range(len(train)))  # the training order, shuffled each epoch

    ckpt = heterotune.checkpoint()
    first_epoch = 1
    if ckpt.resuming:
        loaded = load_state(ckpt.dir or "", ckpt.resume_step, args.width, len(train))
        if loaded is None:
            print(f"cannot resume: {ckpt.dir}/{STATE_FILE} is not the state after epoch {ckpt.resume_step}",
                  file=sys.stderr)
            # The worker then restarts the trial from step 1.
            return heterotune.RESTORE_REFUSED_EXIT_STATUS
        state, rng_state = loaded
        weights, bias, order = state["weights"], state["bias"], state["order"]
        rng.setstate(rng_state)
        first_epoch = ckpt.resume_step + 1

    system = heterotune.system()  # the starting setting
    for epoch in range(first_epoch, args.epochs + 1):
        # The file may be gone as the trial ends: then keep the last setting.
        system = heterotune.system(default=system)
        batch_size = max(1, int(system.get("batch_size", os.environ.get("HPO_BATCH_SIZE", 32))))
        rng.shuffle(order)
        began = time.perf_counter()
        for i in range(0, len(order), batch_size):
            batch = [train[k] for k in order[i:i + batch_size]]
            grad_w = [0.0] * args.width
            grad_b = 0.0
            for x, y in batch:
                err = sigmoid(sum(w * xi for w, xi in zip(weights, x)) + bias) - y
                for j, xi in enumerate(x):
                    grad_w[j] += err * xi
                grad_b += err
            scale = args.lr / len(batch)
            weights = [w - scale * g for w, g in zip(weights, grad_w)]
            bias -= scale * grad_b
        seconds = max(time.perf_counter() - began, 1e-9)
        loss, accuracy = evaluate(weights, bias, valid)
        if epoch == ckpt.stop_step and ckpt.dir:
            # Saved before the metric line: once the worker has the line it
            # may pause the trial and take the directory.
            save_state(ckpt.dir, epoch, weights, bias, order, rng)
        # Printed and flushed at once (a buffered line would reach the server
        # too late to prune this trial on time), with the batch size really used.
        heterotune.report(epoch, loss=round(loss, 6), accuracy=round(accuracy, 4),
                          samples_per_sec=round(len(train) / seconds, 1), batch_size=batch_size)
        if epoch == ckpt.stop_step:
            return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
