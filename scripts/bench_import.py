"""How long a fresh `import ggmlpy` takes, against a fresh `import torch`, in one run.

    python scripts/bench_import.py [--runs 15] [--peer torch] [--module ggmlpy] [--as-is]

Each sample is a new interpreter that times its own import statement with perf_counter (the
interpreter's start-up, the same for both, is not counted). The two imports alternate, one
of each per round after a warm-up round, so both see the same machine load; prints the median
and best of each, their ratio, and /proc/loadavg before and after. The last line is the
summary the targets are quoted from.

Byte code: an installed package has its .pyc files (pip compiles them), a checkout gets them at
its first import, unless PYTHONDONTWRITEBYTECODE is set, as it may be in CI and containers:
then every import of the checkout compiles every module again while the installed peer reads
its .pyc files. So by default the children write and read byte code under a private
PYTHONPYCACHEPREFIX (made in the warm-up round, for both modules alike, removed at the end);
--as-is runs them in this environment unchanged.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from benchlib import ROOT, loadavg  # imports no ggmlpy: the parent stays out of what it times

# The child imports the installed ggmlpy (this checkout, where it is installed editable).
CHILD = "import time; t0 = time.perf_counter(); import {module}; print(time.perf_counter() - t0)"


def import_seconds(module: str, env: dict) -> float:
    out = subprocess.run([sys.executable, "-c", CHILD.format(module=module)],
                         capture_output=True, text=True, check=True, cwd=ROOT, env=env)
    return float(out.stdout.strip().splitlines()[-1])


def child_env(as_is: bool, prefix: str) -> dict:
    env = dict(os.environ)
    if not as_is:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = prefix
    return env


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15, help="interleaved rounds (one import of each per round)")
    ap.add_argument("--module", default="ggmlpy")
    ap.add_argument("--peer", default="torch")
    ap.add_argument("--as-is", action="store_true",
                    help="leave byte code to this environment (PYTHONDONTWRITEBYTECODE and all)")
    args = ap.parse_args(argv)

    prefix = tempfile.mkdtemp(prefix="bench-import-pycache-")
    try:
        env = child_env(args.as_is, prefix)
        mode = "as this environment has it" if args.as_is else "cached (a private PYTHONPYCACHEPREFIX)"
        print(f"loadavg before: {loadavg()}   ({os.cpu_count()} cores); byte code {mode}")
        modules = (args.module, args.peer)
        for m in modules:  # warm-up: byte code, page cache, ggmlpy's cached declarations
            import_seconds(m, env)
        times = {m: [] for m in modules}
        for _ in range(args.runs):
            for m in modules:
                times[m].append(import_seconds(m, env))
    finally:
        shutil.rmtree(prefix, ignore_errors=True)
    med = {m: statistics.median(ts) for m, ts in times.items()}
    for m in modules:
        print(f"  import {m:<10} median {med[m] * 1e3:8.1f} ms   best {min(times[m]) * 1e3:8.1f} ms   "
              f"({args.runs} fresh processes)")
    ratio = med[args.module] / med[args.peer]
    print(f"loadavg after:  {loadavg()}")
    print(f"summary: import {args.module} {ratio:.2f} x import {args.peer} "
          f"({args.module} {med[args.module] * 1e3:.0f} ms, {args.peer} {med[args.peer] * 1e3:.0f} ms)")


if __name__ == "__main__":
    main()
