"""Shared by the benchmark scripts: the machine a figure was measured on and its load, timing
(interleaved, so that contenders see the same drift), a competing busy process, and table rows.
It imports no ggmlpy and leaves sys.path alone, so a script whose children choose what they import
first, or which ggmlpy, may use it; benchmodels.py holds what runs ggmlpy and PyTorch."""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the checkout these scripts are in


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


def interleaved_with_pauses(fns: list, reps: int, clock, block: int = 3, pause: float = 0.1) -> list:
    """ms per call of each function over `reps` rounds that call them in turn, `block` calls at a
    time with the first of each block not counted, after an untimed `pause` (seconds): a runtime's
    worker threads spin for a while after a call (onnxruntime's pool for tens of ms), and ggml's
    threads, waiting at a barrier after every node for a thread the spinning ones keep off a core,
    would be slowed by the other's calls. Returns (best, median) for each function."""
    for fn in fns:
        fn()
    ts = [[] for _ in fns]
    for _ in range(reps):
        for fn, t in zip(fns, ts):
            time.sleep(pause)
            for j in range(block):
                t0 = clock()
                fn()
                if j or block == 1:
                    t.append(clock() - t0)
    return [(min(t) * 1e3, statistics.median(t) * 1e3) for t in ts]


class Busy:
    """A competing process that spins on one core while the `with` block runs (started half a second
    before the block, so that it is running when the measurement starts)."""

    def __enter__(self) -> "Busy":
        self.process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        time.sleep(0.5)
        return self

    def __exit__(self, *exc) -> None:
        self.process.kill()
        self.process.wait()


def row(label, seconds, ref=None, unit="ms"):
    scale = {"ms": 1e3, "us": 1e6}[unit]
    ratio = f"   {seconds / ref:6.2f}x" if ref else ""
    print(f"  {label:<44} {seconds * scale:10.3f} {unit}{ratio}")
