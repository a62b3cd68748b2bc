"""The main job: one ggml graph through the low-level API, then the digits classifier
(cli/digits.py) trained with ag_fit. Without scikit-learn, a small XOR model instead."""
from __future__ import annotations

import importlib.util
import time

import numpy as np

import ggmlpy as g


def low_level_graph() -> None:
    ctx = g.ggml_init(1 << 20)
    a = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, 4, 3)
    g.ggml_set_f32(a, np.arange(12.0))
    y = g.ggml_soft_max(ctx, g.ggml_scale(ctx, a, 0.5))
    g.ggml_graph_compute(ctx, g.ggml_build_forward_expand(ctx, y))
    print("softmax(0.5 * a), per column:\n", np.round(g.ggml_get_f32(y), 4))


def xor_mlp() -> None:
    """The fallback: a 2-16-2 MLP learning the XOR of signs (needs a hidden layer)."""
    g.manual_seed(0)
    x = np.random.default_rng(0).normal(size=(2, 256))
    labels = (x[0] * x[1] > 0).astype(int)
    model = g.ag_sequential(g.ag_linear(2, 16, "tanh"), g.ag_linear(16, 2))
    opt = g.optimizer_adam(model.parameters(), lr=0.05)
    t0 = time.perf_counter()
    hist = g.ag_fit(model, g.ag_softmax_cross_entropy_loss, opt, g.ag_dataloader(x, labels, 64), 50,
                    progress=False)
    pred = model(g.ag_tensor(x)).numpy().argmax(axis=0)
    print(f"xor-of-signs MLP: loss {hist['loss'][-1]:.4f}, train accuracy {np.mean(pred == labels):.1%}, "
          f"{time.perf_counter() - t0:.2f} s on {g.ag_device_name()}")


def run() -> int:
    low_level_graph()
    if importlib.util.find_spec("sklearn") is None:
        print("the digits demo needs scikit-learn (its bundled digits data set): pip install scikit-learn "
              "(or the demo extra: pip install \"ggmlpy[demo]\"). Running a small XOR model instead.")
        xor_mlp()
        return 0
    from .digits import train
    result = train()
    return 0 if result["test_accuracy"] >= 0.95 else 1
