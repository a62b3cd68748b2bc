"""What keeping held tensors alive across tapes costs: the eager 12-layer MLP step (bench_train's)
and bench_autograd's forward + backward, with nothing held and with the loss and the predictions
of every step held until the next step, as a training loop that logs them does.

    python scripts/bench_held.py                       # this checkout
    python scripts/bench_held.py --before /path/tree   # and an older checkout, in alternating
                                                       # child processes (the same run, the same drift)

The older checkout invalidates held tensors at the next tape instead of keeping them, so only
"nothing held" is timed there.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from benchlib import interleaved, loadavg

HERE = os.path.dirname(os.path.abspath(__file__))


def child(hold_supported: bool, repeats: int) -> dict:
    import ggmlpy as g  # first, from PYTHONPATH: the tree under test (bench_train adds this one)
    sys.path.insert(0, HERE)
    from bench_train import ggmlpy_model, make_weights
    import numpy as np
    assert g.__file__.startswith(os.environ.get("PYTHONPATH", "")), g.__file__
    rng = np.random.default_rng(1)
    x, y = g.ag_tensor(rng.normal(size=(256, 256))), g.ag_tensor(rng.normal(size=(256, 256)))
    model = ggmlpy_model(make_weights(12, 256))
    opt = g.optimizer_adam(model.parameters(), lr=1e-3)
    small = [g.ag_param(rng.normal(size=(64, 64))) for _ in range(4)]
    xs = g.ag_tensor(rng.normal(size=(64, 32)))
    held: list = []

    def train_step(hold):
        def step():
            with g.with_grad_tape():
                pred = model(x)
                loss = g.ag_mse_loss(pred, y)
            g.backward(loss)
            opt.step()
            opt.zero_grad()
            if hold:
                held[:] = [loss, pred]
        return step

    def autograd_step(hold):
        def step():
            with g.with_grad_tape():
                h = xs
                for w in small:
                    h = g.ag_tanh(g.ag_matmul(w, h))
                loss = g.ag_sum(h)
            g.backward(loss)
            for w in small:
                w.grad = None
            if hold:
                held[:] = [loss, h]
        return step
    fns = {"train, nothing held": (train_step(False), 10), "autograd, nothing held": (autograd_step(False), 100)}
    if hold_supported:
        fns.update({"train, loss+pred held": (train_step(True), 10),
                    "autograd, loss+out held": (autograd_step(True), 100)})
    return {k: v * 1e3 for k, v in interleaved(fns, repeats=repeats, warmup=1).items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", help="an older checkout to time in alternation")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--child", choices=["hold", "nohold"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child == "hold", args.repeats)))
        return 0
    trees = {"after": os.path.dirname(HERE)}
    if args.before:
        trees["before"] = os.path.abspath(args.before)
    results: dict = {}
    for _ in range(args.rounds):
        for label, tree in trees.items():
            env = dict(os.environ, PYTHONPATH=tree)
            out = subprocess.run([sys.executable, __file__, "--child", "hold" if label == "after" else "nohold",
                                  "--repeats", str(args.repeats)], capture_output=True, text=True, env=env,
                                 cwd=tree, check=True)
            for k, v in json.loads(out.stdout.strip().splitlines()[-1]).items():
                results.setdefault((label, k), []).append(v)
    print(f"ms per step, median of {args.rounds} alternating child runs; load {loadavg()}")
    for (label, k), vs in sorted(results.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        print(f"  {k:26s} {label:6s} {statistics.median(vs):8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
