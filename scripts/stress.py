"""Stress ggmlpy as a hostile user would and count what happens: threads, fuzzing, files, long runs.

Each scenario runs in a child process with a time limit, so a crash or a hang is counted, not
fatal. Per scenario: calls tried, clear exceptions (a refusal with a message), silent wrong
values (a result that differs from numpy or from the same work done in one thread), hangs,
crashes, and files lost. A scenario passes with no wrong value, hang, crash or loss.

    python scripts/stress.py            # the full version (a few minutes on 2 cores)
    python scripts/stress.py --quick    # CI's short version

Ends with `N passed, M failed`.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _counts(**kw):
    return {"tried": 0, "clear": 0, "wrong": 0, "hang": 0, "crash": 0, "lost": 0, **kw}


def _threads(n, fn):
    errors = []
    barrier = threading.Barrier(n)

    def body(i):
        try:
            barrier.wait()
            fn(i)
        except Exception as e:  # noqa: BLE001 - counted by the scenario
            errors.append(e)
    ts = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return errors


# -- scenarios (run in the child) ---------------------------------------------------------------------------
def eager_threads(scale):
    import ggmlpy as g
    c = _counts()
    ops = {"add": (g.ag_add, np.add), "mul": (g.ag_mul, np.multiply), "matmul": (g.ag_matmul, np.matmul),
           "sigmoid": (lambda a, b: g.ag_sigmoid(a), lambda a, b: 1 / (1 + np.exp(-a)))}
    for n_threads in (2, 4, 8):
        for size in (64, 256):
            reps = max(1, int(scale * (400 if size == 64 else 40) / n_threads))

            def work(i):
                rng = np.random.default_rng(i)
                for _ in range(reps):
                    A = rng.normal(size=(size, size)).astype(np.float32)
                    B = rng.normal(size=(size, size)).astype(np.float32)
                    a, b = g.ag_tensor(A), g.ag_tensor(B)
                    for op, ref in ops.values():
                        c["tried"] += 1
                        if not np.allclose(op(a, b).numpy(), ref(A, B), rtol=1e-4, atol=1e-3 * size):
                            c["wrong"] += 1
                    c["tried"] += 1
                    if not np.array_equal(g.eager_numpy.add(A, B), A + B):
                        c["wrong"] += 1
            c["clear"] += len(_threads(n_threads, work))
    return c


def tapes_threads(scale):
    import ggmlpy as g
    c = _counts()

    def grads(seed):
        rng = np.random.default_rng(seed)
        W = g.ag_param(rng.normal(size=(32, 16)))
        x, y = g.ag_tensor(rng.normal(size=(16, 8))), g.ag_tensor(rng.normal(size=(32, 8)))
        with g.with_grad_tape():
            loss = g.ag_mse_loss(g.ag_tanh(g.ag_matmul(W, x)), y)
        return g.backward(loss)[W].numpy()
    want = {i: grads(i) for i in range(4)}

    def work(i):
        for _ in range(int(30 * scale)):
            c["tried"] += 1
            if not np.allclose(grads(i), want[i], rtol=1e-5, atol=1e-6):
                c["wrong"] += 1
    c["clear"] += len(_threads(4, work))
    return c


def forward_ad_threads(scale):
    import ggmlpy as g
    from ggmlpy.autograd import forward_ad
    c = _counts()

    def work(i):
        x, v = g.ag_tensor(np.full((2, 2), i + 1.0)), g.ag_tensor(np.ones((2, 2)))
        for _ in range(int(50 * scale)):
            c["tried"] += 1
            _, t = g.jvp(lambda a: g.ag_mul(a, a), x, v)
            if not np.allclose(t.numpy(), 2.0 * (i + 1)):
                c["wrong"] += 1
    c["clear"] += len(_threads(4, work))
    c["wrong"] += sum(lv is not None for lv in forward_ad.LEVELS)  # levels left open
    return c


def serve_while_training(scale):
    import ggmlpy as g
    from concurrent.futures import ThreadPoolExecutor
    c = _counts()
    g.manual_seed(0)
    model = g.ag_sequential(g.ag_linear(8, 16, "relu"), g.ag_linear(16, 3))
    served = g.ag_sequential(g.ag_linear(8, 16, "relu"), g.ag_linear(16, 3))
    X = np.random.default_rng(0).normal(size=(8, 64))
    want = served(g.ag_tensor(X)).numpy()
    opt, stop = g.optimizer_adam(model.parameters(), lr=1e-2), threading.Event()

    def train():
        xb, yb = g.ag_tensor(X[:, :16]), g.ag_tensor(np.zeros((3, 16)))
        while not stop.is_set():
            with g.with_grad_tape():
                loss = g.ag_mse_loss(model(xb), yb)
            g.backward(loss)
            opt.step()
            opt.zero_grad()
    t = threading.Thread(target=train)
    t.start()
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda _: served(g.ag_tensor(X)).numpy(), range(int(400 * scale))))
    stop.set()
    t.join()
    c["tried"] = len(outs)
    c["wrong"] = sum(not np.allclose(o, want, rtol=1e-6, atol=1e-6) for o in outs)
    return c


def fuzz(scale):
    c = _counts()
    for seed in range(int(4 * scale) + 1):
        out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "fuzz_ag.py"), "--calls",
                              str(int(1500 * scale) + 200), "--seed", str(100 + seed)],
                             capture_output=True, text=True, timeout=900)
        if out.returncode != 0:
            c["crash"] += 1
            continue
        line = out.stdout.splitlines()[0]  # calls N, refused R, crashes 0, unchecked inputs U
        nums = [int(w.strip(",")) for w in line.split() if w.strip(",").isdigit()]
        c["tried"] += nums[0]
        c["clear"] += nums[1] - nums[3]
        c["wrong"] += nums[3]  # an unchecked input is refused by accident, not by a check
    return c


_SAVER = """
import sys, numpy as np, ggmlpy as g
model = g.ag_sequential(*[g.ag_linear(512, 512) for _ in range(12)])
print("saving", flush=True)
g.ag_save_model(model, sys.argv[1])
"""


def files(scale):
    import resource
    import ggmlpy as g
    c = _counts()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "model.gguf")
        g.ag_save_model(g.ag_sequential(g.ag_linear(3, 2)), path)
        good = open(path, "rb").read()
        rng = np.random.default_rng(0)
        for _ in range(int(6 * scale) + 1):  # killed at a random moment of the save
            c["tried"] += 1
            child = subprocess.Popen([sys.executable, "-c", _SAVER, path], stdout=subprocess.PIPE, text=True)
            child.stdout.readline()
            time.sleep(float(rng.uniform(0, 0.3)))
            child.send_signal(signal.SIGKILL)
            child.wait()
            now = open(path, "rb").read()
            if now != good:  # the save may have finished before the kill: then it must load whole
                try:
                    g.ag_load_model(g.ag_sequential(*[g.ag_linear(512, 512) for _ in range(12)]), path)
                    good = now
                except Exception:  # noqa: BLE001
                    c["lost"] += 1
            for f in os.listdir(d):  # a killed save may leave its temporary file: not the target's loss
                if f.endswith(".tmp"):
                    os.unlink(os.path.join(d, f))
        c["tried"] += 1  # a full disk: the file size limit
        out = subprocess.run([sys.executable, "-c", _SAVER, path], capture_output=True, text=True,
                             preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20)))
        if out.returncode != 0 and "could not write" in out.stderr:
            c["clear"] += 1
        if open(path, "rb").read() != good or any(f.endswith(".tmp") for f in os.listdir(d)):
            c["lost"] += 1
    return c


def long_run(scale):
    """Many one-batch ag_fit calls and random batch sizes: memory must stay bounded."""
    import ggmlpy as g
    c = _counts()

    def rss():
        return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(8, 32)), rng.integers(0, 3, 32)
    model = g.ag_sequential(g.ag_linear(8, 16, "relu"), g.ag_linear(16, 3))
    opt = g.optimizer_adam(model.parameters(), 1e-3)
    n = int(1000 * scale) + 50
    for i in range(n):
        if i == n // 4:
            start = rss()
        g.ag_fit(model, g.ag_softmax_cross_entropy_loss, opt, g.ag_dataloader(X, Y, 32, shuffle=False),
                 epochs=1, progress=False)
        xb = g.ag_tensor(rng.normal(size=(8, int(rng.integers(1, 300)))))
        with g.with_grad_tape():
            loss = g.ag_sum(model(xb))
        g.backward(loss)
        c["tried"] += 2
    grown = (rss() - start) / 2**20
    # the graph cache (32 MiB by default) fills with the random shapes; beyond it nothing may grow
    c["wrong"] += grown > 48
    c["growth_mib"] = round(grown, 1)
    return c


SCENARIOS = {"threads: eager ops x sizes": eager_threads, "threads: tapes + backward": tapes_threads,
             "threads: forward-AD levels": forward_ad_threads, "threads: serve while training": serve_while_training,
             "fuzz: ag_* API (child processes)": fuzz, "files: killed saves, full disk": files,
             "long run: ag_fit, random shapes": long_run}


def run_child(name: str, scale: float, timeout: int) -> dict:
    try:
        out = subprocess.run([sys.executable, __file__, "--child", name, "--scale", str(scale)],
                             capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return _counts(hang=1)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or [""])[-1]
        return _counts(crash=1, note=f"exit {out.returncode}: {last[:80]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="CI's short version")
    ap.add_argument("--scale", type=float, default=None)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    scale = args.scale if args.scale is not None else (0.15 if args.quick else 1.0)
    if args.child:
        print(json.dumps(SCENARIOS[args.child](scale)))
        return 0
    cols = ("tried", "clear", "wrong", "hang", "crash", "lost")
    print(f"{'scenario':36s} " + " ".join(f"{c:>7s}" for c in cols) + "   (clear: exceptions; wrong: silent)")
    passed = failed = 0
    for name in SCENARIOS:
        r = run_child(name, scale, timeout=int(600 * max(scale, 0.5)))
        ok = not (r["wrong"] or r["hang"] or r["crash"] or r["lost"])
        passed, failed = passed + ok, failed + (not ok)
        extra = "" if ok else "  FAIL"
        extra += f"  RSS +{r['growth_mib']} MiB" if "growth_mib" in r else ""
        extra += f"  {r['note']}" if "note" in r else ""
        print(f"{name:36s} " + " ".join(f"{r[c]:7d}" for c in cols) + extra, flush=True)
    print(f"load {open('/proc/loadavg').read().split()[:3]}")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
