"""Two revisions of ggmlpy, or two installs of it, the same workloads, timed turn about: the
before/after figure a change that could move a speed must quote.

    python scripts/bench_revisions.py BEFORE AFTER [--rounds 9] [--busy] [--workloads ...]

Each side is a git revision or a Python interpreter. A revision is checked out (a detached
worktree in a temporary folder) and its source imported; an interpreter imports the ggmlpy its
environment has installed (a wheel against a development build, say), with this checkout's
scripts. Each side runs in a process of its own that builds every workload once and then waits.
The parent asks the two processes in turn (the order swapped every round) to time one block of
calls, so both see the same load however the machine's drifts, and only one computes at a time. Printed per workload: the median
and best wall time of each side, the ratio after/before of the medians and of the CPU times;
the last line is `summary:` with the median ratios. `--busy` runs one competing busy process
for the whole run (the load a shared machine adds).

The workers compute on a fixed thread count (GGMLPY_DYNAMIC_THREADS=0 unless it is set): with
dynamic threads one side's count dropped in some runs and not others (a wheel measured 1.0-1.2x,
then 1.5-1.9x a development build's wall time at equal CPU time; 0.98-1.03x with the count fixed)."""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
ONNX_MODELS = ("resnet18", "encoder")
WORKLOADS = ("mlp-compiled", "mlp-eager", "gpt-compiled", "gpt-eager", "cnn-epoch", *(f"onnx-{m}" for m in ONNX_MODELS))
NUMBER = {"cnn-epoch": 1}  # calls per timed block (default 5)


# -- the worker: one revision's process ------------------------------------------------------------------
def build(name: str, tree: str, onnx_dir: str):
    """A callable running one unit of `name` with the revision at `tree` (its own scripts build it)."""
    sys.path.insert(0, os.path.join(tree, "scripts"))
    import ggmlpy as g
    if name.startswith("mlp-"):
        import bench_train
        rng = np.random.default_rng(0)
        x, y = (rng.standard_normal((256, 256)).astype(np.float32) for _ in range(2))
        weights = bench_train.make_weights(12, 256)
        make = bench_train.compiled_step_fn if name == "mlp-compiled" else bench_train.ggmlpy_step_fn
        return make(weights, x, y)
    if name.startswith("gpt-"):
        import bench_transformer as bt
        data = bt.batches(bt.corpus(), 4)
        make = bt.ggml_compiled if name == "gpt-compiled" else bt.ggml_eager
        return make(bt.ggml_model(2), data)
    if name == "cnn-epoch":
        sys.argv = sys.argv[:1]  # bench_keras reads its options when imported
        import bench_keras
        x, y, batch = bench_keras.digits_data()
        model = bench_keras.ggml_cnn()
        return lambda: model.fit(x, y, epochs=1, batch_size=batch)
    model_name = name.removeprefix("onnx-")
    feeds = dict(np.load(os.path.join(onnx_dir, f"{model_name}.npz")))
    model = g.onnx_load(os.path.join(onnx_dir, f"{model_name}.onnx"))
    return lambda: g.onnx_run(model, feeds)


def worker(tree: str, onnx_dir: str, names: list) -> None:
    fns = {name: build(name, tree, onnx_dir) for name in names}
    for fn in fns.values():
        for _ in range(2):
            fn()
    import ggmlpy
    print("ready", ggmlpy.__file__, flush=True)
    print(ggmlpy.found.lib_dir, flush=True)
    for line in sys.stdin:
        name, number = line.split()
        fn = fns[name]
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(int(number)):
            fn()
        print((time.perf_counter() - t0) / int(number), (time.process_time() - c0) / int(number), flush=True)


# -- the parent ---------------------------------------------------------------------------------------------
def export_onnx(out: str) -> None:
    """The ONNX models both sides run, exported once by this checkout's torch (bench_onnx's models)."""
    import torch

    sys.path.insert(0, HERE)
    import bench_onnx
    torch.manual_seed(0)
    net = bench_onnx.resnet18().eval()
    for bn in net.modules():
        if isinstance(bn, torch.nn.BatchNorm2d):
            bn.running_var.uniform_(0.5, 2.0)
    ids = torch.randint(0, 1000, (1, 128))
    cases = {"resnet18": (net, {"image": torch.randn(1, 3, 224, 224)}),
             "encoder": (bench_onnx.encoder(128).eval(), {"ids": ids, "mask": torch.ones(1, 128, dtype=torch.int64)})}
    for key, (model, feeds) in cases.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
            torch.onnx.export(model, tuple(feeds.values()), os.path.join(out, f"{key}.onnx"), dynamo=False,
                              input_names=list(feeds), output_names=["y"], opset_version=17)
        np.savez(os.path.join(out, f"{key}.npz"), **{k: v.numpy() for k, v in feeds.items()})


def package_parent(tree: str) -> str:
    """The folder holding a revision's ggmlpy package: src/ since the project took the src layout."""
    src = os.path.join(tree, "src")
    return src if os.path.isdir(os.path.join(src, "ggmlpy")) else tree


def checkout(rev: str, where: str) -> str:
    subprocess.run(["git", "-C", REPO, "worktree", "add", "--detach", "-q", where, rev], check=True)
    return where


def is_interpreter(side: str) -> bool:
    return os.path.isfile(side) and os.access(side, os.X_OK)


def start_worker(side: str, tmp: str, name: str, workloads: list) -> tuple[subprocess.Popen, str, str | None]:
    """(the worker, the folder its ggmlpy must come from ("" for an interpreter's: whatever its environment
    installed, a wheel or an editable checkout), the worktree to remove afterwards or None)."""
    fixed = {"GGMLPY_DYNAMIC_THREADS": os.environ.get("GGMLPY_DYNAMIC_THREADS", "0")}
    if is_interpreter(side):
        env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, **fixed}
        proc = subprocess.Popen([side, __file__, "--worker", REPO, tmp, *workloads], cwd=tmp, env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        return proc, "", None
    tree = checkout(side, os.path.join(tmp, name))
    proc = subprocess.Popen([sys.executable, __file__, "--worker", tree, tmp, *workloads], cwd=tree,
                            env=dict(os.environ, PYTHONPATH=package_parent(tree), **fixed), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    return proc, tree, tree


def main() -> None:
    # here, not at the top: a worker runs this file too, and must import its own revision's benchlib
    from benchlib import Busy, loadavg
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--busy", action="store_true", help="one competing busy process during the run")
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench-revisions-")
    trees = []
    try:
        if any(w.startswith("onnx-") for w in args.workloads):
            export_onnx(tmp)
        workers = []
        for side, name in ((args.before, "before"), (args.after, "after")):
            proc, home, tree = start_worker(side, tmp, name, args.workloads)
            workers.append(proc)
            trees += [tree] if tree else []
            ready, _, module = proc.stdout.readline().strip().partition(" ")
            if ready != "ready" or not module.startswith(home):
                sys.exit(f"the worker of {side} failed to build its workloads or runs another ggmlpy ({module!r})")
            print(f"{name}: {side}: ggmlpy from {os.path.dirname(module)}, its libggml from {proc.stdout.readline().strip()}")
        with Busy() if args.busy else contextlib.nullcontext():
            print(f"{args.before} against {args.after}; {args.rounds} rounds; "
                  f"{'one busy process beside' if args.busy else 'no added load'}; loadavg {loadavg()}")
            times = {(w, side): [] for w in args.workloads for side in (0, 1)}
            for r in range(args.rounds):
                for name in args.workloads:
                    for side in ((0, 1) if r % 2 == 0 else (1, 0)):
                        workers[side].stdin.write(f"{name} {NUMBER.get(name, 5)}\n")
                        workers[side].stdin.flush()
                        wall, cpu = map(float, workers[side].stdout.readline().split())
                        times[name, side].append((wall, cpu))
            print(f"{'workload':<14} {'before ms med/best':>20} {'after ms med/best':>20} {'wall':>7} {'cpu':>7}")
            ratios = {}
            for name in args.workloads:
                (bw, bc), (aw, ac) = ([statistics.median(t[i] for t in times[name, s]) for i in (0, 1)] for s in (0, 1))
                bb, ab = (min(t[0] for t in times[name, s]) for s in (0, 1))
                ratios[name] = aw / bw
                print(f"{name:<14} {bw * 1e3:>10.2f} /{bb * 1e3:>8.2f} {aw * 1e3:>10.2f} /{ab * 1e3:>8.2f} "
                      f"{aw / bw:>6.2f}x {ac / bc:>6.2f}x")
            print(f"loadavg after {loadavg()}")
            print("summary: after/before " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items())
                  + (" (one busy process)" if args.busy else " (no added load)"))
        for w in workers:
            w.stdin.close()
            w.wait()
    finally:
        for tree in trees:
            subprocess.run(["git", "-C", REPO, "worktree", "remove", "--force", tree], check=False)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        main()
