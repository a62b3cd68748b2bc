"""One training step (forward, backward, Adam) of a 12-layer 256x256 relu MLP, ggmlpy vs PyTorch CPU.

Batch 256, mse loss, the same initial weights and data in both, PyTorch on as
many threads as ggmlpy's CPU backend. Each side is warmed up, then timed over
several repeats of a block of steps; the median ms/step is reported.

    python scripts/bench_train.py [--layers 12] [--width 256] [--batch 256] [--repeats 7]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

import ggmlpy as g
from benchlib import interleaved, timed


def make_weights(layers: int, width: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    limit = np.sqrt(6.0 / (2 * width))
    return [(rng.uniform(-limit, limit, (width, width)), rng.uniform(-0.1, 0.1, (width, 1)))
            for _ in range(layers)]


def ggmlpy_model(weights):
    layers = []
    for i, (w, b) in enumerate(weights):
        lyr = g.ag_linear(w.shape[1], w.shape[0], "relu" if i < len(weights) - 1 else None)
        lyr.W.data, lyr.b.data = w, b
        layers.append(lyr)
    return g.ag_sequential(*layers)


def compiled_step_fn(weights, x, y):
    """The same step as one ggml graph (ag_compile): forward, backward and Adam."""
    model = ggmlpy_model(weights)
    opt = g.optimizer_adam(model.parameters(), lr=1e-3)
    xt, yt = g.ag_tensor(x), g.ag_tensor(y)
    step = g.ag_compile(lambda xx, yy: g.ag_mse_loss(model(xx), yy), [xt, yt], optimizer=opt)
    return lambda: step(xt, yt)


FIT_BATCHES, FIT_EPOCHS = 4, 10


def fit_step_fn(weights, x, y):
    """One ag_fit call (compile="auto": this model has no dropout, so its step is one ggml graph)
    over a loader of FIT_BATCHES copies of the batch, for FIT_EPOCHS epochs. Per step, that
    includes the loader's upload of each batch and a 40th of the call's one trace and compile."""
    model = ggmlpy_model(weights)
    opt = g.optimizer_adam(model.parameters(), lr=1e-3)
    loader = g.ag_dataloader(np.hstack([x] * FIT_BATCHES), np.hstack([y] * FIT_BATCHES), x.shape[1], shuffle=False)
    return lambda: g.ag_fit(model, g.ag_mse_loss, opt, loader, epochs=FIT_EPOCHS, progress=False)


def ggmlpy_step_fn(weights, x, y, fused_optimizer=True, phases=None):
    model = ggmlpy_model(weights)
    opt = g.optimizer_adam(model.parameters(), lr=1e-3)
    opt._fused_ok = fused_optimizer  # False: the op-by-op update, for comparison
    xt, yt = g.ag_tensor(x), g.ag_tensor(y)

    def step():
        t0 = time.perf_counter()
        with g.with_grad_tape():
            loss = g.ag_mse_loss(model(xt), yt)
        t1 = time.perf_counter()
        grads = g.backward(loss)
        t2 = time.perf_counter()
        opt.step(grads)
        opt.zero_grad()
        if phases is not None:
            phases.append((t1 - t0, t2 - t1, time.perf_counter() - t2))
        return loss

    return step


def torch_step_fn(weights, x, y):
    import torch
    mods = []
    for i, (w, b) in enumerate(weights):
        lin = torch.nn.Linear(w.shape[1], w.shape[0])
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(w.astype(np.float32)))
            lin.bias.copy_(torch.from_numpy(b[:, 0].astype(np.float32)))
        mods.append(lin)
        if i < len(weights) - 1:
            mods.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*mods)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    xt = torch.from_numpy(x.T.astype(np.float32).copy())  # torch wants samples as rows
    yt = torch.from_numpy(y.T.astype(np.float32).copy())
    loss_fn = torch.nn.MSELoss()

    def step():
        loss = loss_fn(model(xt), yt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    return step


def median_ms(step, warmup: int, steps: int, repeats: int) -> float:
    return timed(step, repeats=repeats, number=steps, warmup=warmup) * 1e3


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=10, help="steps per timed block")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--breakdown", action="store_true",
                    help="also time forward / backward / optimizer, and the op-by-op Adam update")
    args = ap.parse_args(argv)

    rng = np.random.default_rng(1)
    x = rng.normal(size=(args.width, args.batch))
    y = rng.normal(size=(args.width, args.batch))
    weights = make_weights(args.layers, args.width)
    threads = g.runtime.state.STATE.context().backend.n_threads or os.cpu_count()
    print(f"{args.layers}-layer {args.width}x{args.width} relu MLP, batch {args.batch}, mse, Adam; "
          f"{threads} threads; median of {args.repeats} x {args.steps} steps")

    ours = ggmlpy_step_fn(weights, x, y)
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        torch.set_num_threads(threads)
        theirs = torch_step_fn(weights, x, y)
        # Same start, same first losses: the comparison is of the same computation.
        l_ours = [ours().item() for _ in range(3)]
        l_theirs = [theirs().item() for _ in range(3)]
        print("first 3 losses  ggmlpy " + " ".join(f"{v:.6f}" for v in l_ours)
              + "   torch " + " ".join(f"{v:.6f}" for v in l_theirs))

    compiled = compiled_step_fn(weights, x, y)
    print("first 3 losses  ag_compile " + " ".join(f"{compiled():.6f}" for _ in range(3)))
    fns = {"eager": (ours, args.steps), "compiled": (compiled, args.steps), "fit": (fit_step_fn(weights, x, y), 1)}
    if torch is not None:
        fns["torch"] = (theirs, args.steps)
    ms = {k: v * 1e3 for k, v in interleaved(fns, repeats=args.repeats, warmup=1).items()}
    ms["fit"] /= FIT_BATCHES * FIT_EPOCHS
    print(f"ggmlpy  {ms['eager']:8.2f} ms/step   (eager: ag_* ops, backward, optimizer.step)")
    print(f"ggmlpy  {ms['compiled']:8.2f} ms/step   (ag_compile: the step as one ggml graph)")
    print(f"ggmlpy  {ms['fit']:8.2f} ms/step   (ag_fit over a loader: compiled steps, each batch uploaded)")
    if args.breakdown:
        for fused_opt in (True, False):
            phases = []
            median_ms(ggmlpy_step_fn(weights, x, y, fused_opt, phases), args.warmup, args.steps, args.repeats)
            f, b, o = (statistics.median(p[i] for p in phases[args.warmup:]) * 1e3 for i in range(3))
            print(f"        forward {f:.2f} + backward {b:.2f} + Adam {o:.2f} ms "
                  f"({'fused ggml_opt_step_adamw' if fused_opt else 'op by op'})")
    if torch is None:
        print("torch not installed (pip install -e '.[bench]'): no comparison")
        return 0
    print(f"torch   {ms['torch']:8.2f} ms/step  (torch {torch.__version__})")
    print(f"ratio ggmlpy/torch = {ms['eager'] / ms['torch']:.2f} eager, {ms['compiled'] / ms['torch']:.2f} compiled, "
          f"{ms['fit'] / ms['torch']:.2f} ag_fit  (timed in interleaved rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
