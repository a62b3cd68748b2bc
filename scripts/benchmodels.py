"""What the benchmark scripts run: ggmlpy (the installed one; an editable install is this checkout),
the ISA its kernels run with for the header of a figure, PyTorch if present, and the 12-layer MLP both ways."""
from __future__ import annotations

import numpy as np

import ggmlpy as g
from ggmlpy import kernels


def kernels_isa() -> str:
    """The x86-64 level ggmlpy's CPU kernels run with, and why (kernels.isa_summary), for the header of
    every figure: an AVX2 build and an AVX-512 one differ by up to twice the FMA peak."""
    return f"kernels: {kernels.isa_summary() if kernels.enabled() else 'off (GGMLPY_KERNELS=0)'}"


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
