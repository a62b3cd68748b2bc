#!/usr/bin/env python3
"""Forward-mode AD cost, measured in one run.

Eagerly, on the 12-layer 256x256 relu MLP (batch 256):
  jvp(fn, x, v) as a ratio to one plain forward pass (target <= 3x);
  hvp(fn, x, v) (forward-over-reverse) as a ratio to one forward + backward.
Compiled (ag_compile tracing hvp: one ggml graph), on a 4-layer 256x256 tanh MLP (batch 256)
and on the char-GPT of bench_transformer.py (2 blocks, its loss as a function of the embedded
input): the compiled v'Hv step as a ratio to the compiled forward + backward training step
(target <= 2.5x). Every ratio is timed interleaved.
"""
import os
import sys

import numpy as np

from benchlib import interleaved, loadavg
from benchmodels import g, ggml_mlp, mlp_data


def compiled_hvp_ratio() -> float:
    rng = np.random.default_rng(2)
    W = [g.ag_param(rng.normal(size=(256, 256)) / 16) for _ in range(4)]
    x, v = g.ag_tensor(rng.normal(size=(256, 256))), g.ag_tensor(rng.normal(size=(256, 256)))

    def f(h):
        for w in W:
            h = g.ag_tanh(g.ag_matmul(w, h))
        return g.ag_mean(g.ag_mul(h, h))
    train = g.ag_compile(lambda a, t: f(a), [x, v], optimizer=g.optimizer_sgd(W, lr=1e-20))  # forward + backward (+ a no-op step)
    hvp = g.ag_compile(lambda a, t: g.ag_sum(g.ag_mul(g.hvp(f, a, t)[1], t)), [x, v])
    t = interleaved({"fb": (lambda: train(x, v), 3), "hvp": (lambda: hvp(x, v), 3)}, repeats=9)
    print("4-layer 256x256 tanh MLP, batch 256, compiled")
    print(f"  forward+backward   {t['fb'] * 1e3:8.1f} ms")
    print(f"  hvp (v'Hv)         {t['hvp'] * 1e3:8.1f} ms   {t['hvp'] / t['fb']:5.2f}x forward+backward (target <= 2.5)")
    return t["hvp"] / t["fb"]


def gpt_hvp_ratio(layers: int = 2) -> float:
    """The char-GPT's loss as a function of its embedded input h [D, T, B]: blocks, final norm,
    tied head, cross-entropy against the next tokens. v'Hv of it against one training step."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_transformer as bt
    model = bt.ggml_model(layers)
    idx, nxt = bt.batches(bt.corpus(), 1)[0]
    targets = g.ag_tensor(nxt, dtype="i32")
    with g.no_grad():
        h0 = model.tok(g.ag_tensor(idx, dtype="i32"), batched=True).numpy()
    h, v = g.ag_tensor(h0), g.ag_tensor(np.random.default_rng(3).normal(size=h0.shape) * 0.02)

    def f(x):
        for block in model.blocks:
            x = block(x)
        return g.ag_softmax_cross_entropy_loss(g.ag_matmul(model.tok.weight, model.ln_f(x), transpose_a=True),
                                               targets)
    train = g.ag_compile(lambda a, t: f(a), [h, v], optimizer=g.optimizer_sgd(model.parameters(), lr=1e-20))
    hvp = g.ag_compile(lambda a, t: g.ag_sum(g.ag_mul(g.hvp(f, a, t)[1], t)), [h, v])
    t = interleaved({"fb": (lambda: train(h, v), 2), "hvp": (lambda: hvp(h, v), 2)}, repeats=9)
    print(f"char-GPT, {layers} blocks, batch {bt.BATCH} x {bt.CONTEXT} tokens, compiled")
    print(f"  forward+backward   {t['fb'] * 1e3:8.1f} ms")
    print(f"  hvp (v'Hv)         {t['hvp'] * 1e3:8.1f} ms   {t['hvp'] / t['fb']:5.2f}x forward+backward (target <= 2.5)")
    return t["hvp"] / t["fb"]


def main():
    weights, x, y = mlp_data()
    ws, xt, yt, _ = ggml_mlp(weights, x, y)

    def fn(h):
        for w in ws:
            h = g.ag_relu(g.ag_matmul(w, h))
        return g.ag_mse_loss(h, yt)

    v = g.ag_tensor(np.random.default_rng(1).normal(size=xt.shape))
    xp = g.ag_param(x)

    def forward():
        with g.with_grad_tape():
            fn(xt)

    def forward_backward():
        with g.with_grad_tape():
            loss = fn(xp)
        g.backward(loss)

    def jvp():
        with g.with_grad_tape():
            g.jvp(fn, xt, v)

    t = interleaved({"fwd": (forward, 1), "fb": (forward_backward, 1), "jvp": (jvp, 1),
                     "hvp": (lambda: g.hvp(fn, xt, v), 1)}, repeats=9)
    t_fwd, t_fb, t_jvp, t_hvp = t["fwd"], t["fb"], t["jvp"], t["hvp"]
    print("12-layer 256x256 relu MLP, batch 256")
    print(f"  forward            {t_fwd * 1e3:8.1f} ms")
    print(f"  jvp                {t_jvp * 1e3:8.1f} ms   {t_jvp / t_fwd:5.2f}x forward (target <= 3)")
    print(f"  forward+backward   {t_fb * 1e3:8.1f} ms")
    print(f"  hvp                {t_hvp * 1e3:8.1f} ms   {t_hvp / t_fb:5.2f}x forward+backward")
    r, r_gpt = compiled_hvp_ratio(), gpt_hvp_ratio()
    print(f"load {loadavg()}")
    print(f"summary: jvp {t_jvp / t_fwd:.2f}x forward; hvp {t_hvp / t_fb:.2f}x forward+backward; "
          f"compiled hvp {r:.2f}x compiled forward+backward (mlp), {r_gpt:.2f}x (char-GPT)")


if __name__ == "__main__":
    main()
