"""Does PyTorch keep its speed in a process that has used ggmlpy?

    python scripts/bench_torch_beside.py [--rounds 4] [--steps 12] [--conditions quiet busy]

Users train with torch and ggmlpy in one process. Whatever ggmlpy loads (OpenBLAS and its
threading runtime, ggml's thread pool and how it waits, signal handlers) must leave torch's own
speed alone. Each measurement is a fresh child process that times a small transformer's training
step in torch (best of --steps steps after a warm-up), in one of three arms:
  alone         torch only, ggmlpy never imported;
  ggmlpy-first  ggmlpy imported and used (an ONNX ResNet-style block, a compiled ag_* step and a
                BLAS-sized product), then torch imported and timed;
  torch-first   torch imported, then ggmlpy imported and used, then torch timed.
The arms run in turns, --rounds times, so each sees the same load; under `busy` a child spinning
on one core runs for the whole measurement. Per condition and arm: the best and median of the
rounds. The last line, `summary:`, gives the worst ratio of an arm's best to `alone`'s best.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchlib import Busy, loadavg, machine  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARMS = ("alone", "ggmlpy-first", "torch-first")

CHILD = r"""
import os, sys, time
arm, steps = {arm!r}, {steps}

def use_ggmlpy():
    import numpy as np
    import ggmlpy as g
    rng = np.random.default_rng(0)
    m = g.onnx_load(os.path.join({root!r}, "tests", "onnx_fixtures", "resnet_block.onnx"), device="cpu")
    for _ in range(20):
        g.onnx_run(m, {{"image": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)}})
    model = g.ag_sequential(g.ag_linear(256, 256, "relu"), g.ag_linear(256, 16))
    opt = g.optimizer_adam(model.parameters(), lr=1e-3)
    x = rng.standard_normal((256, 512)).astype(np.float32)
    y = rng.integers(0, 16, 512)
    g.ag_fit(model, g.ag_softmax_cross_entropy_loss, opt, g.ag_dataloader(x, y, batch_size=128), epochs=3,
             progress=False)
    a = g.ag_tensor(rng.standard_normal((512, 512)).astype(np.float32))
    for _ in range(5):
        g.ag_matmul(a, a)

if arm == "torch-first":
    import torch
if arm != "alone":
    use_ggmlpy()
import torch
torch.manual_seed(0)
layer = torch.nn.TransformerEncoderLayer(128, 4, 512, batch_first=True, dropout=0.0)
net = torch.nn.Sequential(torch.nn.TransformerEncoder(layer, 2), torch.nn.Linear(128, 64))
opt = torch.optim.Adam(net.parameters(), 1e-3)
x = torch.randn(16, 64, 128)
best = float("inf")
for i in range(steps + 3):
    t = time.perf_counter()
    opt.zero_grad()
    net(x).square().mean().backward()
    opt.step()
    if i >= 3:
        best = min(best, time.perf_counter() - t)
print(f"{{1e3 * best:.3f}}")
"""


def child_ms(arm: str, steps: int) -> float:
    code = CHILD.format(root=ROOT, arm=arm, steps=steps)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"{arm}: {r.stderr.strip()[-800:]}")
    return float(r.stdout.split()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--conditions", nargs="+", choices=("quiet", "busy"), default=["quiet", "busy"])
    args = p.parse_args()
    try:
        import torch  # noqa: F401
    except ImportError:
        print("summary: torch is not installed; nothing to measure")
        return 0
    print(f"machine: {machine()}; load before: {loadavg()}")
    worst = 0.0
    for cond in args.conditions:
        with Busy() if cond == "busy" else contextlib.nullcontext():
            times = {arm: [] for arm in ARMS}
            for _ in range(args.rounds):
                for arm in ARMS:
                    times[arm].append(child_ms(arm, args.steps))
        base = min(times["alone"])
        for arm in ARMS:
            ratio = min(times[arm]) / base
            if arm != "alone":
                worst = max(worst, ratio)
            print(f"{cond:5s} {arm:13s} best {min(times[arm]):7.1f} ms  median {statistics.median(times[arm]):7.1f} ms"
                  f"  {ratio:.2f}x alone")
    print(f"load after: {loadavg()}")
    print(f"summary: torch's step beside ggmlpy at worst {worst:.2f}x its time alone (best of {args.rounds} rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
