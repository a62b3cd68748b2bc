#!/usr/bin/env python3
"""Autograd speed against PyTorch CPU, measured in one run (issue: autograd core).

  (a) forward + backward of a 12-layer 256x256 relu MLP, batch 256, mse loss;
  (b) the eager per-op overhead of ag_add on 64x64 inputs.
Ratios are ggmlpy / PyTorch: below 1 means ggmlpy is faster. Both sides are timed in
interleaved rounds: this machine's speed drifts by 15-20%.
"""
import numpy as np

from benchlib import interleaved, row
from benchmodels import g, ggml_mlp, mlp_data, torch_mlp, torch_or_none


def main():
    torch = torch_or_none()
    threads = g.get_backend("cpu").n_threads
    print(f"ggmlpy on {g.ag_device_name()}, {threads} threads; PyTorch {torch.__version__ if torch else 'absent'}")

    weights, x, y = mlp_data()
    ws, _, _, forward = ggml_mlp(weights, x, y)

    def ggml_step():
        for w in ws:  # as PyTorch's step below: gradients are not accumulated across steps
            w.grad = None
        with g.with_grad_tape():
            loss = forward()
        g.backward(loss)

    fns = {"ggml": (ggml_step, 3)}
    if torch:
        tws, tforward = torch_mlp(torch, weights, x, y)

        def torch_step():
            for w in tws:
                w.grad = None
            tforward().backward()
        fns["torch"] = (torch_step, 3)
    t = interleaved(fns, repeats=9)  # the machine drifts: both sides see the same drift
    t_ggml, t_torch = t["ggml"], t.get("torch")
    flops = 12 * 3 * 2 * 256 ** 3
    print("(a) 12-layer 256x256 MLP, batch 256: forward + backward")
    if t_torch:
        row("PyTorch", t_torch)
    row("ggmlpy", t_ggml, t_torch)
    print(f"      ggmlpy matmul throughput: {flops / t_ggml / 1e9:.1f} GFLOP/s")

    a, b = g.ag_tensor(np.random.rand(64, 64)), g.ag_tensor(np.random.rand(64, 64))
    fns = {"ggml": (lambda: g.ag_add(a, b), 5000)}
    if torch:
        ta, tb = torch.rand(64, 64), torch.rand(64, 64)
        fns["torch"] = (lambda: ta + tb, 5000)
    t = interleaved(fns, repeats=7)
    t_add, t_tadd = t["ggml"], t.get("torch")
    print("(b) eager add, 64x64")
    if t_tadd:
        row("PyTorch (tensors)", t_tadd, unit="us")
    row("ggmlpy ag_add", t_add, t_tadd, unit="us")
    if t_torch:
        print(f"summary: mlp step {t_ggml / t_torch:.2f}x PyTorch; ag_add {t_add / t_tadd:.2f}x PyTorch")


if __name__ == "__main__":
    main()
