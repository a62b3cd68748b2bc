"""`python -m ggmlpy demo --gpt`: a character-level GPT trained on Python's own standard library.

The text is the source of a few standard-library modules (it ships with every
Python); the model is `ag_gpt` (2 pre-LayerNorm blocks, d_model 128, 4 heads,
context 64), trained as one compiled ggml graph per step (AdamW, gradient
clipping 1.0, batches of 32 windows) on the CPU, or on a Vulkan or CUDA GPU.
It shows a progress bar with tokens per second, saves the loss curve as a PNG
and the model as GGUF, and prints a sample it generates.
"""
from __future__ import annotations

import importlib
import inspect
import os
import time

import numpy as np
from tqdm import tqdm

import ggmlpy as g  # the demo is written against the public, flat API
from ..io.atomic import atomic_write

CHARS = "\n" + "".join(chr(c) for c in range(32, 126))  # 95 symbols: newline and printable ASCII
MODULES = ("argparse", "collections", "dataclasses", "json", "textwrap", "string", "functools", "fractions")


def corpus() -> np.ndarray:
    """The source of MODULES as indices into CHARS (anything else becomes a space)."""
    text = "\n".join(inspect.getsource(importlib.import_module(m)) for m in MODULES)
    lut = np.full(256, CHARS.index(" "), np.int64)
    for i, ch in enumerate(CHARS):
        lut[ord(ch)] = i
    return lut[np.frombuffer(text.encode("ascii", "replace"), np.uint8)]


def decode(idx) -> str:
    return "".join(CHARS[int(i)] for i in idx)


def _windows(data, rng, batch, context):
    start = rng.integers(0, data.size - context - 1, batch)
    x = np.stack([data[s:s + context] for s in start], 1)
    y = np.stack([data[s + 1:s + context + 1] for s in start], 1)
    return x, y


def train(minutes: float = 3.0, steps: int | None = None, device: str | None = None, batch: int = 32,
          context: int = 64, layers: int = 2, out_dir: str = ".", seed: int = 0, progress: bool = True) -> dict:
    """Train the char-GPT for `minutes` (or `steps`); returns the losses, speed, paths and a sample."""
    if device is not None:
        g.ag_device(device)
    g.manual_seed(seed)
    data = corpus()
    split = int(0.9 * data.size)
    train_data, val_data = data[:split], data[split:]
    model = g.ag_gpt(len(CHARS), d_model=128, n_heads=4, n_layers=layers, context=context)
    opt = g.optimizer_adamw(model.parameters(), lr=1e-3, weight_decay=0.01)
    rng = np.random.default_rng(seed)
    x0, y0 = (g.ag_tensor(a, dtype="i32") for a in _windows(train_data, rng, batch, context))
    step = g.ag_compile(lambda x, y: model.loss(x, y), [x0, y0], optimizer=opt, clip_grad=1.0)
    budget = None if steps is not None else minutes * 60.0
    bar = tqdm(total=steps, disable=not progress, unit="step", dynamic_ncols=True)
    losses, val_losses, t0, n = [], [], time.perf_counter(), 0
    while (steps is None or n < steps) and (budget is None or time.perf_counter() - t0 < budget):
        xb, yb = (g.ag_tensor(a, dtype="i32") for a in _windows(train_data, rng, batch, context))
        losses.append(step(xb, yb))
        n += 1
        if n % 50 == 0:
            with g.no_grad():
                vx, vy = _windows(val_data, rng, batch, context)
                val_losses.append((n, model.loss(g.ag_tensor(vx, dtype="i32"), g.ag_tensor(vy, dtype="i32")).item()))
        elapsed = time.perf_counter() - t0
        bar.update(1)
        bar.set_postfix(loss=f"{losses[-1]:.3f}", tok_s=f"{n * batch * context / elapsed:,.0f}")
    bar.close()
    elapsed = time.perf_counter() - t0
    os.makedirs(out_dir, exist_ok=True)
    model_path = os.path.join(out_dir, "char_gpt.gguf")
    g.ag_save_model(model, model_path, metadata={"vocabulary": CHARS, "modules": ",".join(MODULES)})
    png = _plot(losses, val_losses, os.path.join(out_dir, "char_gpt_loss.png"))
    prompt = "def "
    sample = decode(model.generate(np.array([CHARS.index(c) for c in prompt]), 240, greedy=False, temperature=0.8))
    return {"steps": n, "losses": losses, "val_losses": val_losses, "seconds": elapsed,
            "tokens_per_second": n * batch * context / elapsed, "model_path": model_path, "png": png,
            "sample": sample, "device": model.tok.weight.device_name, "model": model}


def _plot(losses, val_losses, path):
    try:
        import matplotlib  # optional dependency (the demo extra), loaded when plotting
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(np.arange(1, len(losses) + 1), losses, lw=0.8, label="training batches")
    if val_losses:
        ax.plot(*zip(*val_losses), "o-", ms=3, label="held-out text")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats per character)")
    ax.set_title("char-GPT on Python's standard library")
    ax.legend()
    fig.tight_layout()
    with atomic_write(path) as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)
    return path


def run(minutes: float = 3.0, steps: int | None = None, device: str | None = None, out_dir: str = ".") -> int:
    r = train(minutes=minutes, steps=steps, device=device, out_dir=out_dir)
    first, last = np.mean(r["losses"][:10]), np.mean(r["losses"][-10:])
    print(f"char-GPT on {r['device']}: {r['steps']} steps in {r['seconds']:.0f} s, "
          f"{r['tokens_per_second']:,.0f} tokens/s; loss {first:.2f} -> {last:.2f}"
          + (f", held-out {r['val_losses'][-1][1]:.2f}" if r["val_losses"] else ""))
    print(f"model: {r['model_path']}" + (f"; loss curve: {r['png']}" if r["png"] else
                                           " (pip install matplotlib for the loss curve PNG)"))
    print("sample:\n" + r["sample"])
    return 0 if last < first else 1
