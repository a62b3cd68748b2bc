#!/usr/bin/env python3
"""The cost of one dp_train step with a replica on a loopback RPC server: this checkout against
another (e.g. main with the unpatched libggml), interleaved, each with its own rpc-server from
its own build. Prints ms per step for both and their ratio, with /proc/loadavg.

    python scripts/bench_rpc_dp.py --base-root /work/wt/main-copy [--base-cache-dir DIR] [--rounds 5]

Each side runs in a child process (its ggmlpy first on the path, its build through
GGMLPY_CACHE_DIR); a round runs both, in alternating order.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time

from benchlib import ROOT, loadavg

CHILD = r"""
import json, sys, time
import numpy as np
import ggmlpy as g
from ggmlpy.core import device
port, n_iter = int(sys.argv[1]), int(sys.argv[2])
rng = np.random.default_rng(0)
data = [rng.normal(size=(16, 8)) for _ in range(8)]
args = dict(loss_fn=lambda o, t: g.ag_mse_loss(o, t), lr=1e-2, verbose=False, devices=["cpu", "rpc://127.0.0.1:%d" % port])
g.dp_train(lambda: g.ag_linear(16, 16), data, n_iter=5, **args)  # warm: connection, graphs
t0 = time.perf_counter()
g.dp_train(lambda: g.ag_linear(16, 16), data, n_iter=n_iter, **args)
print(json.dumps({"ms": (time.perf_counter() - t0) * 1e3 / n_iter}))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def side(root: str, cache: str | None, n_iter: int) -> float:
    env = {k: v for k, v in os.environ.items() if k not in ("GGMLPY_CACHE_DIR", "GGMLPY_LIB_DIR")}
    if cache:
        env["GGMLPY_CACHE_DIR"] = cache
    env["PYTHONPATH"] = root
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "ggmlpy", "rpc-server", "--host", "127.0.0.1", "--port",
                               str(port), "--device", "CPU", "--threads", "1"], cwd=root, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        time.sleep(0.3)
        out = subprocess.run([sys.executable, "-c", CHILD, str(port), str(n_iter)], cwd=root, env=env,
                             capture_output=True, text=True, timeout=600)
        if out.returncode != 0:
            raise SystemExit(f"{root}: client failed\n{out.stderr[-2000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])["ms"]
    finally:
        server.kill()
        server.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-root", required=True, help="the other checkout (its ggmlpy)")
    ap.add_argument("--base-cache-dir", default=None, help="its build's GGMLPY_CACHE_DIR (default: the default cache)")
    ap.add_argument("--cache-dir", default=os.environ.get("GGMLPY_CACHE_DIR"), help="this checkout's")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=100)
    args = ap.parse_args()
    here, base = [], []
    for r in range(args.rounds):
        order = [(here, ROOT, args.cache_dir), (base, args.base_root, args.base_cache_dir)]
        for dest, root, cache in (order if r % 2 == 0 else order[::-1]):
            dest.append(side(root, cache, args.iters))
    med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
    print(f"dp_train step, cpu + loopback rpc replica: this {med(here):.2f} ms, base {med(base):.2f} ms "
          f"(medians of {args.rounds}), ratio {med(here) / med(base):.3f}")
    print(f"  this: {', '.join(f'{v:.2f}' for v in here)}\n  base: {', '.join(f'{v:.2f}' for v in base)}")
    print(f"load {loadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
