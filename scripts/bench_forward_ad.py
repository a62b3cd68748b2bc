#!/usr/bin/env python3
"""Forward-mode AD cost, measured in one run.

Eagerly, on the 12-layer 256x256 relu MLP (batch 256):
  jvp(fn, x, v) as a ratio to one plain forward pass (target <= 3x);
  hvp(fn, x, v) (forward-over-reverse) as a ratio to one forward + backward.
Compiled (ag_compile tracing hvp: one ggml graph), on a 4-layer 256x256 tanh MLP (batch 256):
  the compiled v'Hv step as a ratio to the compiled forward + backward step (target <= 2.5x),
  timed interleaved.
"""
import numpy as np

from benchlib import g, ggml_mlp, interleaved, mlp_data, timed


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
    r = compiled_hvp_ratio()
    with open("/proc/loadavg") as f:
        print(f"load {f.read().split()[0]}")
    print(f"summary: jvp {t_jvp / t_fwd:.2f}x forward; hvp {t_hvp / t_fb:.2f}x forward+backward; "
          f"compiled hvp {r:.2f}x compiled forward+backward")


if __name__ == "__main__":
    main()
