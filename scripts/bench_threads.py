"""Throughput of independent eager work in 1, 2 and 4 Python threads, against one thread doing
the same total work, in interleaved rounds.

Each worker runs `--ops` small eager ops (ag_add, ag_mul, ag_tanh, ag_matmul on its own 64x64
tensors) or, with --numpy, ggmlpy's zero-copy `eager_numpy.add`. The ratio printed is the wall
time of N threads over the wall time of one thread doing all N workers' ops in turn: 1.0 or
less means threads cost nothing in total (the target), below 1.0 means they run in parallel.

    python scripts/bench_threads.py [--ops 2000] [--repeats 5] [--numpy]
"""
from __future__ import annotations

import argparse
import sys
import threading

import numpy as np

import ggmlpy as g
from benchlib import interleaved, loadavg


def ag_worker(seed: int, n_ops: int):
    rng = np.random.default_rng(seed)
    a, b = g.ag_tensor(rng.normal(size=(64, 64))), g.ag_tensor(rng.normal(size=(64, 64)))

    def run():
        for _ in range(n_ops // 4):
            g.ag_matmul(g.ag_tanh(g.ag_mul(g.ag_add(a, b), b)), a)
    return run


def numpy_worker(seed: int, n_ops: int):
    rng = np.random.default_rng(seed)
    x, y = rng.normal(size=(64, 64)).astype(np.float32), rng.normal(size=(64, 64)).astype(np.float32)

    def run():
        for _ in range(n_ops):
            g.eager_numpy.add(x, y)
    return run


def in_threads(runs):
    def go():
        threads = [threading.Thread(target=r) for r in runs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return go


def in_series(runs):
    def go():
        for r in runs:
            r()
    return go


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--numpy", action="store_true")
    args = ap.parse_args(argv)
    make = numpy_worker if args.numpy else ag_worker
    what = "eager_numpy.add" if args.numpy else "ag ops (add, mul, tanh, matmul)"
    contenders = {}
    for n in (1, 2, 4):
        runs = [make(i, args.ops) for i in range(n)]
        contenders[f"{n} threads"] = (in_threads(runs), 1)
        contenders[f"{n} in series"] = (in_series(runs), 1)
    t = interleaved(contenders, repeats=args.repeats, warmup=1)
    print(f"{what}, 64x64, {args.ops} ops per worker; load {loadavg()}")
    for n in (1, 2, 4):
        thr, ser = t[f"{n} threads"], t[f"{n} in series"]
        print(f"  {n} threads: {thr * 1e3:8.1f} ms   one thread, same work: {ser * 1e3:8.1f} ms   "
              f"ratio {thr / ser:.2f}   ({n * args.ops / thr / 1e3:.0f} k ops/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
