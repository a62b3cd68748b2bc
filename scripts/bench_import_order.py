"""Does ggmlpy's CPU speed depend on what was imported first, or on the machine's load?

    python scripts/bench_import_order.py [--calls 15] [--repeat 3] [--build LABEL=CACHE_DIR[;VAR=VALUE...] ...]
                                         [--conditions quiet busy] [--no-ort]

Each measurement is a fresh child process (median ms of --calls timed calls after a warm-up, or
more, called for at least MIN_SPAN seconds), so that nothing one runtime loaded or started can
reach another; each figure is the best of --repeat such processes, taken in turns with the cell's
other imports and builds. The best, not the median: this 2-core virtual machine runs every
runtime up to 1.5x slower for seconds at a time (onnxruntime's own one-thread figure for the same
model moved between 0.47 and 0.69 ms from one process to the next, minutes apart), a one-sided
noise that a median of a few processes still samples; the median is printed beside it.
The table crosses
  conditions  quiet, and busy: a child that spins on one core for the whole measurement;
  workloads   the ResNet-style ONNX fixture (tests/onnx_fixtures/resnet_block.onnx at batch 8,
              64x64) called back to back, the same after a 0.1 s pause before each call, and a
              compiled (ag_compile) step of a 12-layer 256x256 MLP (batch 256, Adam);
  imports     no torch, torch imported before ggmlpy, torch imported after it.
PyTorch's wheel ships its own libgomp.so.1: with an OpenMP libggml, whichever libgomp is loaded
first serves ggml's threads, with its own spin policy. --build runs the table for several libggml
builds (GGMLPY_CACHE_DIR of each), interleaved cell by cell, so every build sees the same load.
onnxruntime (2 threads) on the same model gives the reference pause ratio (a call after a pause
against back-to-back calls). /proc/loadavg is printed before and after.

The pause ratio (a call after a pause against back-to-back calls, quiet) is measured apart, both
within each process in turns (pause_ratio), for every import and for onnxruntime: the table's
pause and back-to-back figures come from different processes, which the machine's state moves.
The last line, `summary:`, gives per build the worst import-order spread (slowest / fastest of
the three imports in any cell) and the pause ratio (median of the processes, worst import).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import Busy, loadavg  # ggmlpy-free: a child imports in the order it measures

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FIXTURE = os.path.join(ROOT, "tests", "onnx_fixtures", "resnet_block.onnx")
SHAPE = (8, 3, 64, 64)
ORDERS = ("no torch", "torch first", "torch after")
WORKLOADS = ("onnx", "onnx pause", "mlp")
PAUSE = 0.1


def resized_model(path: str) -> None:
    """The fixture (exported at 1x3x32x32) with its input at SHAPE: its convolutions, global pool
    and Gemm take any batch and size; shapes recorded inside the graph are dropped."""
    import onnx
    m = onnx.load(FIXTURE)
    for d, n in zip(m.graph.input[0].type.tensor_type.shape.dim, SHAPE):
        d.dim_value = n
    del m.graph.value_info[:]
    for out in m.graph.output:
        out.type.tensor_type.shape.dim[0].dim_value = SHAPE[0]
    onnx.save(m, path)


# -- the child: one figure ------------------------------------------------------------------------
def child(order: str, workload: str, calls: int, model_path: str) -> float:
    sys.path.insert(0, HERE)  # bench_train beside this script
    if order == "torch first":
        import torch  # noqa: F401
    import numpy as np
    import ggmlpy as g
    if order == "torch after":
        import torch  # noqa: F401,F811
    rng = np.random.default_rng(0)
    if workload == "mlp":
        from bench_train import compiled_step_fn, make_weights
        fn = compiled_step_fn(make_weights(12, 256), rng.normal(size=(256, 256)), rng.normal(size=(256, 256)))
    else:
        model = g.onnx_load(model_path, device="cpu")
        feeds = {"image": rng.normal(size=SHAPE).astype(np.float32)}
        fn = lambda: g.onnx_run(model, feeds)  # noqa: E731
    if workload == "ratio":
        return pause_ratio(fn, calls)
    return timed_calls(fn, calls, PAUSE if workload.endswith("pause") else 0.0)


def ort_child(workload: str, calls: int, model_path: str) -> float:
    import numpy as np
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = 2, 1
    sess = ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])
    feeds = {"image": np.random.default_rng(0).normal(size=SHAPE).astype(np.float32)}
    if workload == "ratio":
        return pause_ratio(lambda: sess.run(None, feeds), calls)
    return timed_calls(lambda: sess.run(None, feeds), calls, PAUSE if workload.endswith("pause") else 0.0)


MIN_SPAN = 1.5  # seconds a child keeps calling: back-to-back calls span as long as paused ones


def seconds(fn) -> float:
    """How long one call of fn takes."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def timed_calls(fn, calls: int, pause: float) -> float:
    """Median ms of at least `calls` calls, each after an untimed `pause`, after 3 warm-up calls,
    called until MIN_SPAN seconds have passed: a child's figure then never rests on a few
    milliseconds (a 0.4 ms call's 15 calls would), in which a moment's slowdown of the machine
    decides it."""
    for _ in range(3):
        fn()
    ts = []
    start = time.perf_counter()
    while len(ts) < calls or time.perf_counter() - start < MIN_SPAN:
        if pause:
            time.sleep(pause)
        ts.append(seconds(fn))
    return statistics.median(ts) * 1e3


def pause_ratio(fn, rounds: int) -> float:
    """A call after a PAUSE against back-to-back calls, both timed in this one process in turns (10
    back-to-back calls, a pause, one call; `rounds` times): the machine's state of the moment, which
    moves a whole process's figures by up to 1.5x here, is in both. Median over median."""
    for _ in range(3):
        fn()
    close, paused = [], []
    for _ in range(rounds):
        close += [seconds(fn) for _ in range(10)]
        time.sleep(PAUSE)
        paused.append(seconds(fn))
    return statistics.median(paused) / statistics.median(close)


# -- the parent: the table ----------------------------------------------------------------------
def figure(args, env_extra: dict, *child_args) -> float:
    env = dict(os.environ, **env_extra)
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", *child_args,
                          str(args.calls), args.model], env=env, capture_output=True, text=True, timeout=600)
    if out.returncode:
        raise SystemExit(f"child {child_args} failed:\n{out.stderr[-3000:]}")
    return float(out.stdout.strip().splitlines()[-1])


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        if sys.argv[2] == "onnxruntime":
            print(ort_child(sys.argv[3], int(sys.argv[4]), sys.argv[5]))
        else:
            print(child(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=15, help="timed calls per figure")
    ap.add_argument("--repeat", type=int, default=3, help="processes per figure (the best of them)")
    ap.add_argument("--build", action="append", default=[], metavar="LABEL=CACHE_DIR[;VAR=VALUE...]",
                    help="a libggml build to measure (its GGMLPY_CACHE_DIR, and environment variables for "
                         "it, e.g. GGMLPY_THREAD_POLL=1); repeatable; default: this shell's")
    ap.add_argument("--conditions", nargs="+", default=["quiet", "busy"], choices=["quiet", "busy"])
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    ap.add_argument("--no-ort", action="store_true", help="skip onnxruntime's reference")
    args = ap.parse_args()
    builds = {}
    for spec in args.build:
        label, sep, rest = spec.partition("=")
        path, *settings = rest.split(";")
        if not sep or not all("=" in v for v in settings):
            ap.error(f"--build {spec!r}: expected LABEL=CACHE_DIR[;VAR=VALUE...]")
        builds[label] = {"GGMLPY_CACHE_DIR": os.path.expanduser(path), **dict(v.split("=", 1) for v in settings)}
    builds = builds or {"this build": {}}
    tmp = tempfile.mkdtemp()
    args.model = os.path.join(tmp, "resnet_block_b8_64.onnx")
    resized_model(args.model)
    print(f"ResNet-style ONNX model {'x'.join(map(str, SHAPE))}; compiled 12-layer 256^2 MLP step; "
          f"median ms of >= {args.calls} calls over >= {MIN_SPAN} s a process, each figure the best of "
          f"{args.repeat} fresh processes (their median in brackets); "
          f"loadavg {loadavg()}", flush=True)
    ms: dict = {}  # (build, condition, workload, order) -> ms, the best process
    med: dict = {}  # the same key -> the median process's ms
    ort_ms: dict = {}
    for cond in args.conditions:
        with Busy() if cond == "busy" else contextlib.nullcontext():
            for wl in args.workloads:
                runs: dict = {}
                for _ in range(args.repeat):  # in turns: every import and build sees the same load
                    for order in ORDERS:
                        for label, env in builds.items():
                            v = figure(args, env, order, wl)
                            runs.setdefault((label, order), []).append(v)
                            print(f"  {label:<12} {cond:<6} {wl:<11} {order:<12} {v:8.2f} ms"
                                  f"   (loadavg {loadavg()})", flush=True)
                    if cond == "quiet" and wl.startswith("onnx") and not args.no_ort:
                        v = figure(args, {}, "onnxruntime", wl)
                        runs.setdefault(("onnxruntime", ""), []).append(v)
                        print(f"  onnxruntime  {cond:<6} {wl:<11} {'':<12} {v:8.2f} ms", flush=True)
                for (label, order), vs in runs.items():
                    if label == "onnxruntime":
                        ort_ms[wl] = min(vs)
                    else:
                        ms[label, cond, wl, order] = min(vs)
                        med[label, cond, wl, order] = statistics.median(vs)
    print(f"{'build':<12} {'condition':<9} {'workload':<11}" + "".join(f"{o:>14}" for o in ORDERS) + "   spread")
    for label in builds:
        for cond in args.conditions:
            for wl in args.workloads:
                row = [ms[label, cond, wl, o] for o in ORDERS]
                meds = [med[label, cond, wl, o] for o in ORDERS]
                print(f"{label:<12} {cond:<9} {wl:<11}" + "".join(f"{v:>6.2f} ({m:5.2f})" for v, m in zip(row, meds))
                      + f"   {max(row) / min(row):5.2f}x")
    if ort_ms:
        print(f"onnxruntime (2 threads), quiet: back to back {ort_ms.get('onnx', float('nan')):.2f} ms, "
              f"after a pause {ort_ms.get('onnx pause', float('nan')):.2f} ms")
    if len(builds) > 1:  # each row's slowest figure against the best of the first build's row
        first = next(iter(builds))
        for label in list(builds)[1:]:
            worst = max((max(ms[label, c, w, o] for o in ORDERS) / min(ms[first, c, w, o] for o in ORDERS), c, w)
                        for c in args.conditions for w in args.workloads)
            print(f"{label}: slowest figure against the best of {first}'s row: {worst[0]:.2f}x ({worst[1]}, {worst[2]})")
    ratios: dict = {}  # (build or "onnxruntime", order) -> in-process pause ratios, one a process
    if "quiet" in args.conditions and {"onnx", "onnx pause"} & set(args.workloads):
        print("pause ratio within each process (a call after a pause / back-to-back calls, in turns):")
        for _ in range(args.repeat):
            for order in ORDERS:
                for label, env in builds.items():
                    ratios.setdefault((label, order), []).append(figure(args, env, order, "ratio"))
            if not args.no_ort:
                ratios.setdefault(("onnxruntime", ""), []).append(figure(args, {}, "onnxruntime", "ratio"))
        for (label, order), vs in ratios.items():
            print(f"  {label:<12} {order:<12} " + " ".join(f"{v:.2f}" for v in vs)
                  + f"   median {statistics.median(vs):.2f}x")
    print(f"loadavg after {loadavg()}")
    parts = []
    for label in builds:
        spread = max(max(ms[label, c, w, o] for o in ORDERS) / min(ms[label, c, w, o] for o in ORDERS)
                     for c in args.conditions for w in args.workloads)
        part = f"{label}: import-order spread {spread:.2f}x"
        if ratios:
            pause = max(statistics.median(ratios[label, o]) for o in ORDERS)
            part += f", pause ratio {pause:.2f}x"
        parts.append(part)
    if ("onnxruntime", "") in ratios:
        parts.append(f"onnxruntime pause ratio {statistics.median(ratios['onnxruntime', '']):.2f}x")
    print("summary: " + "; ".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
