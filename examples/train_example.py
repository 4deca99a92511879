#!/usr/bin/env python3
"""A tiny training script for HeteroTune's command executor (standard library only).

It shows what a program run by `executor: {command: ...}` does (see
examples/command.yaml):
  * reads its hyperparameters from the command line (filled in from {param}
    placeholders) or from HPO_PARAMS (all of them, as JSON);
  * trains for HPO_MAX_STEPS epochs, printing one metric line per epoch:
        hpo: step=3 loss=0.41 accuracy=0.87 samples_per_sec=51234 batch_size=64
    The worker reports each line to the server, which may prune the trial:
    the worker then stops this process (SIGTERM), so there is nothing to clean up;
  * re-reads HPO_SYSTEM_FILE before each epoch, because the server may change
    the system setting (batch size, threads) mid-trial to find the fastest one,
    and echoes the setting it used on its metric line, so speed is credited to
    the setting that was really in use.

The "model" is logistic regression on a synthetic two-class problem, trained
with mini-batch SGD: small enough to take a few milliseconds per epoch.
"""

import argparse
import json
import math
import os
import random
import sys
import time


def read_system(default):
    """The current system setting: HPO_SYSTEM_FILE if present, else `default`."""
    path = os.environ.get("HPO_SYSTEM_FILE")
    if not path:
        return dict(default)
    try:
        with open(path) as f:
            setting = json.load(f)
    except (OSError, ValueError):
        # The worker replaces the file atomically, so this means it is gone:
        # keep the last setting.
        return dict(default)
    return setting if isinstance(setting, dict) else dict(default)


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


def main():
    params = json.loads(os.environ.get("HPO_PARAMS", "{}") or "{}")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lr", type=float, default=float(params.get("lr", 0.1)))
    parser.add_argument("--width", type=int, default=int(params.get("width", 8)),
                        help="input features used (a stand-in for model size)")
    parser.add_argument("--epochs", type=int, default=int(os.environ.get("HPO_MAX_STEPS", "10")))
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

    start_system = json.loads(os.environ.get("HPO_SYSTEM", "{}") or "{}")
    system = dict(start_system)
    for epoch in range(1, args.epochs + 1):
        system = read_system(system)
        batch_size = max(1, int(system.get("batch_size", os.environ.get("HPO_BATCH_SIZE", 32))))
        rng.shuffle(train)
        began = time.perf_counter()
        for i in range(0, len(train), batch_size):
            batch = train[i:i + batch_size]
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
        # flush: the worker reads a pipe, and a buffered line would arrive too
        # late for the server to prune this trial on time.
        print(f"hpo: step={epoch} loss={loss:.6f} accuracy={accuracy:.4f} "
              f"samples_per_sec={len(train) / seconds:.1f} batch_size={batch_size}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
