#!/usr/bin/env python3
"""Per-op overhead and mul_mat throughput of ggmlpy against numpy (and PyTorch, if importable).

  (a) one small op, numpy in and numpy out: add of two 64x64 f32 arrays
        - ggmlpy, graph built once: set_f32, set_f32, graph_compute(n_threads=1), get_f32 per call
        - ggmlpy, naive: new context, tensors, graph and compute per call
        - numpy x + y; torch from_numpy(x) + from_numpy(y) -> .numpy(), and on ready tensors
  (b) mul_mat of 1024x1024 f32 with 2 threads
        - ggml_graph_compute(n_threads=2), and ggml_backend_cpu_init + ggml_backend_graph_compute
        - numpy a @ b (its BLAS, default threads); torch.mm with 2 threads

Each measurement is one function returning a zero-argument callable; `measure` times it
timeit-style (repeats of `number` calls, min and median per call).

    python scripts/bench_ops.py [--quick]
"""
from __future__ import annotations

import argparse
import statistics
import timeit

import numpy as np

import ggmlpy as g

F32 = g.GGML_TYPE_F32


def torch_or_none():
    try:
        import torch
    except ImportError:
        return None
    return torch


def measure(fn, number: int, repeat: int) -> tuple[float, float]:
    """(min, median) seconds per call over `repeat` runs of `number` calls, after one warm-up call."""
    fn()
    runs = [t / number for t in timeit.repeat(fn, number=number, repeat=repeat)]
    return min(runs), statistics.median(runs)


# -- (a) a small add, numpy in and numpy out ------------------------------------------------------------
def add_numpy(x, y):
    return lambda: x + y


def add_ggml_prebuilt(x, y):
    """The fastest low-level path: context and graph built once, data copied in and out per call."""
    ctx = g.ggml_init(1 << 20)
    a = g.ggml_new_tensor_2d(ctx, F32, x.shape[1], x.shape[0])
    b = g.ggml_new_tensor_2d(ctx, F32, y.shape[1], y.shape[0])
    c = g.ggml_add(ctx, a, b)
    gf = g.ggml_build_forward_expand(ctx, c)

    def step():
        g.ggml_set_f32(a, x)
        g.ggml_set_f32(b, y)
        g.ggml_graph_compute(ctx, gf, n_threads=1)
        return g.ggml_get_f32(c)
    return step


def add_ggml_naive(x, y):
    """Everything per call, as a first-time user would write it."""
    def step():
        with g.ggml_init(1 << 20) as ctx:
            c = g.ggml_add(ctx, g.ggml_new_from_numpy(ctx, x), g.ggml_new_from_numpy(ctx, y))
            g.ggml_graph_compute(ctx, g.ggml_build_forward_expand(ctx, c), n_threads=1)
            return g.ggml_get_f32(c)
    return step


# The eager ag path goes here: def add_ag(x, y) -> callable, and one line in SMALL_ADD below.


def add_torch_numpy(torch, x, y):
    return lambda: (torch.from_numpy(x) + torch.from_numpy(y)).numpy()


def add_ggml_eager_numpy(x, y):
    """ggmlpy's zero-copy numpy path: a cached graph pointed at the arrays themselves."""
    from ggmlpy.autograd import eager_numpy
    return lambda: eager_numpy.add(x, y)


def add_ag(x, y):
    """The autograd API on ready tensors: ag_add of two 64x64 ag tensors (eager, no tape)."""
    tx, ty = g.ag_tensor(x), g.ag_tensor(y)
    return lambda: g.ag_add(tx, ty).numpy().T  # .numpy() is R-shaped: transpose back to compare


def add_torch_tensors(torch, x, y):
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    return lambda: tx + ty


def bench_small_add(torch, quick: bool) -> dict:
    rng = np.random.default_rng(0)
    x, y = rng.random((64, 64), dtype=np.float32), rng.random((64, 64), dtype=np.float32)
    contenders = {
        "numpy x + y": add_numpy(x, y),
        "ggmlpy eager_numpy.add (zero-copy)": add_ggml_eager_numpy(x, y),
        "ggmlpy, graph built once": add_ggml_prebuilt(x, y),
        "ggmlpy, naive (context + graph per call)": add_ggml_naive(x, y),
    }
    if torch is not None:
        torch.set_num_threads(1)
        contenders["torch from_numpy + .numpy()"] = add_torch_numpy(torch, x, y)
        contenders["torch on tensors"] = add_torch_tensors(torch, x, y)
    for name, fn in contenders.items():  # all must agree before their times mean anything
        np.testing.assert_allclose(np.asarray(fn()), x + y, rtol=1e-6)
    number, repeat = (200, 3) if quick else (2000, 7)
    return {name: measure(fn, number, repeat) for name, fn in contenders.items()}


# -- (b) mul_mat 1024 x 1024 ----------------------------------------------------------------------------
def matmul_ggml_graph(a, b, n_threads):
    """mul_mat(A, B) = A^T B with A of ne [K, M]: the same 2 n^3 flops as a @ b."""
    ctx = g.ggml_init(64 << 20)
    ta, tb = g.ggml_new_from_numpy(ctx, a), g.ggml_new_from_numpy(ctx, b)
    c = g.ggml_mul_mat(ctx, ta, tb)
    gf = g.ggml_build_forward_expand(ctx, c)
    return lambda: g.ggml_graph_compute(ctx, gf, n_threads=n_threads), c


def matmul_ggml_backend(a, b, n_threads):
    backend = g.ggml_backend_cpu_init()
    g.ggml_backend_cpu_set_n_threads(backend, n_threads)
    wctx = g.ggml_init(1 << 20, no_alloc=True)
    ta = g.ggml_new_tensor_2d(wctx, F32, a.shape[1], a.shape[0])
    tb = g.ggml_new_tensor_2d(wctx, F32, b.shape[1], b.shape[0])
    buf = g.ggml_backend_alloc_ctx_tensors(wctx, backend)
    g.ggml_backend_tensor_set(ta, a)
    g.ggml_backend_tensor_set(tb, b)
    gctx = g.ggml_init(1 << 20, no_alloc=True)
    c = g.ggml_mul_mat(gctx, ta, tb)
    gf = g.ggml_build_forward_expand(gctx, c)
    galloc = g.GraphAllocator(backend)
    galloc.alloc(gf)
    keep = (buf, galloc)  # the buffers must outlive every call

    def step():
        keep  # noqa: B018
        g.ggml_backend_graph_compute(backend, gf)
    return step, c


def bench_matmul(torch, quick: bool, n: int = 1024, n_threads: int = 2) -> dict:
    rng = np.random.default_rng(0)
    a, b = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
    ref = b @ a.T  # ggml's c = a^T b in ne terms, b @ a.T in numpy order
    number, repeat = (1, 3) if quick else (3, 5)
    out = {}
    for name, make in [("ggmlpy ggml_graph_compute", matmul_ggml_graph),
                       ("ggmlpy backend_graph_compute", matmul_ggml_backend)]:
        fn, c = make(a, b, n_threads)
        fn()
        np.testing.assert_allclose(g.ggml_get_f32(c), ref, rtol=1e-3)
        out[name] = measure(fn, number, repeat)
    out["numpy a @ b"] = measure(lambda: a @ b, number, repeat)
    if torch is not None:
        torch.set_num_threads(n_threads)
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        out["torch a @ b"] = measure(lambda: ta @ tb, number, repeat)
    return {k: (2 * n**3 / t_min / 1e9, 2 * n**3 / t_med / 1e9) for k, (t_min, t_med) in out.items()}


# -- report -----------------------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats (a smoke test, noisier numbers)")
    quick = ap.parse_args().quick
    torch = torch_or_none()
    print(f"ggml {g.ggml_version()}, numpy {np.__version__}, torch {torch.__version__ if torch else 'not installed'}")

    small = bench_small_add(torch, quick)
    print("\n(a) add of two 64x64 f32 arrays, numpy in and out        min µs   median µs")
    for name, (t_min, t_med) in small.items():
        print(f"  {name:<52} {t_min * 1e6:8.2f}   {t_med * 1e6:8.2f}")

    mm = bench_matmul(torch, quick)
    print("\n(b) mul_mat 1024x1024 f32, 2 threads                     GFLOP/s (best, median)")
    for name, (best, med) in mm.items():
        print(f"  {name:<52} {best:8.1f}   {med:8.1f}")

    base = small["numpy x + y"][0]
    print("\nsummary (ratios of best times; > 1 means slower than the reference)")
    for name in ("ggmlpy eager_numpy.add (zero-copy)", "ggmlpy, graph built once",
                 "ggmlpy, naive (context + graph per call)"):
        line = f"  add 64x64, {name}: {small[name][0] / base:7.1f}x numpy"
        for ref in ("torch from_numpy + .numpy()", "torch on tensors"):
            if ref in small:
                line += f", {small[name][0] / small[ref][0]:6.1f}x {ref}"
        print(line)
    for name in ("ggmlpy ggml_graph_compute", "ggmlpy backend_graph_compute"):
        line = f"  mul_mat 1024, {name}: {mm[name][0] / mm['numpy a @ b'][0]:5.2f}x numpy's GFLOP/s"
        if "torch a @ b" in mm:
            line += f", {mm[name][0] / mm['torch a @ b'][0]:5.2f}x torch's"
        print(line)


if __name__ == "__main__":
    main()
