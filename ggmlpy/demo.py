"""The main job, for now: one ggml graph through the low-level API, then a small model trained
with the ag_* API (the digits classifier arrives with the training issue)."""
from __future__ import annotations

import time

import numpy as np

import ggmlpy as g


def run() -> int:
    ctx = g.ggml_init(1 << 20)
    a = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, 4, 3)
    g.ggml_set_f32(a, np.arange(12.0))
    y = g.ggml_soft_max(ctx, g.ggml_scale(ctx, a, 0.5))
    g.ggml_graph_compute(ctx, g.ggml_build_forward_expand(ctx, y))
    print("softmax(0.5 * a), per column:\n", np.round(g.ggml_get_f32(y), 4))

    g.manual_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 256))
    labels = (x[0] * x[1] > 0).astype(int)  # XOR of signs: needs a hidden layer
    xt = g.ag_tensor(x)
    model = g.ag_sequential(g.ag_linear(2, 16, "tanh"), g.ag_linear(16, 2))
    opt = g.optimizer_adam(model.parameters(), lr=0.05)
    t0 = time.perf_counter()
    for step in range(200):
        with g.with_grad_tape():
            loss = g.ag_softmax_cross_entropy_loss(model(xt), labels)
        opt.step(g.backward(loss))
        opt.zero_grad()
    pred = model(xt).numpy().argmax(axis=0)
    print(f"xor-of-signs MLP: loss {loss.item():.4f}, train accuracy {np.mean(pred == labels):.1%}, "
          f"{time.perf_counter() - t0:.2f} s for 200 Adam steps on {g.ag_default_device()}")
    return 0
