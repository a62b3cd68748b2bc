"""Shared by the benchmark scripts: the 12-layer MLP both ways, timing, the machine's load, and
PyTorch if present."""
from __future__ import annotations

import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ggmlpy as g  # noqa: E402
from ggmlpy import kernels  # noqa: E402


def kernels_isa() -> str:
    """The x86-64 level ggmlpy's CPU kernels run with, and why (kernels.isa_summary), for the header of
    every figure: an AVX2 build and an AVX-512 one differ by up to twice the FMA peak."""
    return f"kernels: {kernels.isa_summary() if kernels.enabled() else 'off (GGMLPY_KERNELS=0)'}"


def loadavg() -> str:
    """The 1, 5 and 15 minute load averages, for quoting beside every figure ("n/a" off Linux)."""
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "n/a"


def machine() -> str:
    """The CPU a figure was measured on: its model, family and model numbers, the cores this process
    may use, and the first two cache levels. Kernels tuned on one core can rank differently on
    another (a 32 KB L1 and one 512-bit FMA a cycle against 48 KB and two), so figures are quoted
    with it."""
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                info.setdefault(key.strip(), value.strip())
                if not line.strip():
                    break
    except OSError:
        pass
    caches = []
    for index in range(4):
        base = f"/sys/devices/system/cpu/cpu0/cache/index{index}/"
        try:
            with open(base + "level") as f1, open(base + "type") as f2, open(base + "size") as f3:
                level, kind, size = f1.read().strip(), f2.read().strip(), f3.read().strip()
        except OSError:
            break
        if kind != "Instruction" and level in ("1", "2"):
            caches.append(f"L{level} {size}")
    return (f"{info.get('model name', 'unknown CPU')} (family {info.get('cpu family', '?')} model "
            f"{info.get('model', '?')}), {len(os.sched_getaffinity(0))} cores, {', '.join(caches) or 'caches n/a'}")


def timed(fn, repeats: int = 7, number: int = 1, warmup: int = 2) -> float:
    """Median seconds per call over `repeats` blocks of `number` calls, after warm-up."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t0) / number)
    return statistics.median(times)


def interleaved(fns: dict, repeats: int = 7, warmup: int = 2) -> dict:
    """Median seconds per call of each `label: (fn, number)`, timed in rounds that take one block
    of `number` calls of every fn in turn: this machine's speed drifts by 15-20% over a run,
    and interleaving lets every fn see the same drift, so their ratios hold."""
    for fn, number in fns.values():
        for _ in range(warmup):
            fn()
    times = {label: [] for label in fns}
    for _ in range(repeats):
        for label, (fn, number) in fns.items():
            t0 = time.perf_counter()
            for _ in range(number):
                fn()
            times[label].append((time.perf_counter() - t0) / number)
    return {label: statistics.median(ts) for label, ts in times.items()}


def torch_or_none():
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(g.get_backend("cpu").n_threads)
    # Deep relu stacks produce denormal gradients, which slow PyTorch down 2-3x here;
    # ggml's kernels do not pay for them, so compare against PyTorch at its best.
    torch.set_flush_denormal(True)
    return torch


def mlp_data(layers=12, width=256, batch=256, seed=0):
    rng = np.random.default_rng(seed)
    limit = np.sqrt(6.0 / (2 * width))
    weights = [rng.uniform(-limit, limit, (width, width)) for _ in range(layers)]
    return weights, rng.normal(size=(width, batch)), rng.normal(size=(width, batch))


def ggml_mlp(weights, x, y):
    """ggmlpy parameters and inputs, and the forward pass (relu after every layer, mse loss)."""
    ws = [g.ag_param(w) for w in weights]
    xt, yt = g.ag_tensor(x), g.ag_tensor(y)

    def forward(h=None, block=None):
        h = xt if h is None else h
        for w in ws:
            h = g.ag_relu(g.ag_matmul(w, h))
        return g.ag_mse_loss(h, yt)

    return ws, xt, yt, forward


def torch_mlp(torch, weights, x, y):
    """The same model in PyTorch, with samples as columns too (W @ x)."""
    ws = [torch.tensor(w, dtype=torch.float32, requires_grad=True) for w in weights]
    xt = torch.tensor(x, dtype=torch.float32)
    yt = torch.tensor(y, dtype=torch.float32)

    def forward():
        h = xt
        for w in ws:
            h = torch.relu(w @ h)
        return torch.mean((h - yt) ** 2)

    return ws, forward


def row(label, seconds, ref=None, unit="ms"):
    scale = {"ms": 1e3, "us": 1e6}[unit]
    ratio = f"   {seconds / ref:6.2f}x" if ref else ""
    print(f"  {label:<44} {seconds * scale:10.3f} {unit}{ratio}")
