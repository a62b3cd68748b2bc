#!/usr/bin/env python3
"""Forward-mode AD cost on the 12-layer 256x256 relu MLP (batch 256), measured in one run.

  jvp(fn, x, v) as a ratio to one plain forward pass (target <= 3x);
  hvp(fn, x, v) (forward-over-reverse) as a ratio to one forward + backward.
"""
import numpy as np

from benchlib import g, ggml_mlp, mlp_data, timed


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

    t_fwd, t_fb = timed(forward, repeats=9), timed(forward_backward, repeats=9)
    t_jvp, t_hvp = timed(jvp, repeats=9), timed(lambda: g.hvp(fn, xt, v), repeats=9)
    print("12-layer 256x256 relu MLP, batch 256")
    print(f"  forward            {t_fwd * 1e3:8.1f} ms")
    print(f"  jvp                {t_jvp * 1e3:8.1f} ms   {t_jvp / t_fwd:5.2f}x forward (target <= 3)")
    print(f"  forward+backward   {t_fb * 1e3:8.1f} ms")
    print(f"  hvp                {t_hvp * 1e3:8.1f} ms   {t_hvp / t_fb:5.2f}x forward+backward")
    print(f"summary: jvp {t_jvp / t_fwd:.2f}x forward; hvp {t_hvp / t_fb:.2f}x forward+backward")


if __name__ == "__main__":
    main()
