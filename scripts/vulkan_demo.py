#!/usr/bin/env python3
"""Vulkan demo and CI smoke test: list the Vulkan devices, then on the first one run a matmul and
a few steps of MLP training, each checked against the CPU backend, with timings.

    GGMLPY_SOFTWARE_VULKAN=1 python scripts/vulkan_demo.py     # include Mesa's lavapipe (CI)
    python scripts/vulkan_demo.py --device Vulkan1 --steps 5

Exit status: 0 when every check passes, or when there is no Vulkan device (it prints
"skipped: no Vulkan device" and why); 1 on a mismatch; 2 with --require when there is no
Vulkan device (CI uses --require: lavapipe must be there).

Tolerances: Vulkan's matmul converts f32 inputs to f16 in some kernels (lavapipe included), so
results agree with the CPU backend to about 1e-4..1e-3 relative, not to float32 rounding. The
checks allow 1e-2 of each array's largest magnitude (the losses: 1e-3), and for Adam's
parameters also lr per step (where a gradient is near zero Adam's step can flip sign).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

import ggmlpy as g
from ggmlpy.core import registry

RTOL = 1e-2
LR = {"sgd": 0.05, "adam": 1e-3}


def close(a, b, rtol=RTOL, atol=0.0) -> tuple[bool, float]:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    scale = max(float(np.max(np.abs(a))), 1e-12)
    err = float(np.max(np.abs(a - b)))
    return err <= rtol * scale + atol, err / scale


def on(device, fn):
    """Run fn() with `device` selected; back to the CPU afterwards."""
    g.ag_device(device)
    try:
        return fn()
    finally:
        g.ag_device("cpu")


def matmul_case(n: int):
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(n, n)), rng.normal(size=(n, n))

    def fn():
        A, B = g.ag_tensor(a), g.ag_tensor(b)
        g.ag_matmul(A, B).numpy()  # warm-up: the first compute builds the pipelines
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            C = g.ag_matmul(A, B).numpy()
            times.append(time.perf_counter() - t0)
        return C, float(np.median(times))
    return fn


def mlp_case(steps: int, opt_name: str):
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(32, 128)), rng.normal(size=(8, 128))

    def fn():
        g.manual_seed(0)
        model = g.ag_sequential(g.ag_linear(32, 64, "relu"), g.ag_linear(64, 64, "tanh"), g.ag_linear(64, 8))
        params = model.parameters()
        opt = g.optimizer_sgd(params, lr=LR[opt_name]) if opt_name == "sgd" else g.optimizer_adam(params, lr=LR[opt_name])
        X, Y = g.ag_tensor(x), g.ag_tensor(y)
        losses, times = [], []
        for _ in range(steps):
            t0 = time.perf_counter()
            with g.with_grad_tape():
                loss = g.ag_mse_loss(model(X), Y)
            losses.append(loss.item())
            opt.step(g.backward(loss))
            opt.zero_grad()
            times.append(time.perf_counter() - t0)
        return losses, [p.numpy() for p in params], times
    return fn


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default=None, help="Vulkan device (default: the first, Vulkan0)")
    ap.add_argument("--n", type=int, default=256, help="matmul size")
    ap.add_argument("--steps", type=int, default=3, help="MLP training steps")
    ap.add_argument("--require", action="store_true", help="exit 2 when there is no Vulkan device")
    args = ap.parse_args(argv)

    print(f"libggml: {g.found.lib_dir}")
    print(f"backends: {', '.join(registry.backends())}")
    phys = registry.vulkan_physical_devices()
    print("Vulkan physical devices (system loader): "
          + (", ".join(f"{d.index}={d.name} [{d.type}]" for d in phys) or "none"))
    vk = [d for d in g.devices() if d.backend == "Vulkan"]
    for d in vk:
        print(f"  {d.name}: {d.description} ({d.type}, {d.memory_total / 2**30:.1f} GiB)")
    if not vk:
        why = ("this libggml has no Vulkan backend (python build_ggml.py --backend vulkan --backend rpc)"
               if "Vulkan" not in registry.backends() else
               "ggml found no Vulkan device; for Mesa's lavapipe install mesa-vulkan-drivers and set "
               "GGMLPY_SOFTWARE_VULKAN=1" if not os.environ.get("GGML_VK_VISIBLE_DEVICES") else
               f"none of GGML_VK_VISIBLE_DEVICES={os.environ['GGML_VK_VISIBLE_DEVICES']} is usable")
        print(f"skipped: no Vulkan device ({why})")
        return 2 if args.require else 0
    dev = args.device or vk[0].name
    print(f"using {dev}\n")

    failures = 0
    t0 = time.perf_counter()
    c_cpu, t_cpu = on("cpu", matmul_case(args.n))
    t1 = time.perf_counter()
    c_vk, t_vk = on(dev, matmul_case(args.n))
    first = time.perf_counter() - t1
    ok, rel = close(c_cpu, c_vk)
    failures += not ok
    print(f"matmul {args.n}x{args.n} (median of 5, numpy out): CPU {t_cpu * 1e3:.2f} ms, {dev} {t_vk * 1e3:.2f} ms "
          f"(6 calls incl. the first, which builds the pipelines: {first:.2f} s); max rel diff {rel:.1e} {'OK' if ok else 'MISMATCH'}")

    for opt_name in ("sgd", "adam"):
        l_cpu, p_cpu, tc = on("cpu", mlp_case(args.steps, opt_name))
        l_vk, p_vk, tv = on(dev, mlp_case(args.steps, opt_name))
        ok_l, rel_l = close(l_cpu, l_vk, rtol=1e-3)
        # Adam divides by sqrt(v): where a gradient is near 0, its 1e-3 difference can flip a
        # step's sign, so Adam's parameters may differ by up to lr per step, by design
        atol = LR[opt_name] * args.steps if opt_name == "adam" else 0.0
        checks = [close(a, b, atol=atol) for a, b in zip(p_cpu, p_vk)]
        ok_p, rel_p = all(c[0] for c in checks), max(c[1] for c in checks)
        failures += not (ok_l and ok_p)
        print(f"MLP 32-64-64-8, batch 128, {opt_name}, {args.steps} steps: "
              f"CPU {np.median(tc) * 1e3:.1f} ms/step, {dev} {np.median(tv[1:] or tv) * 1e3:.1f} ms/step "
              f"(first {tv[0]:.2f} s); losses {['%.5f' % v for v in l_vk]}; "
              f"max rel diff loss {rel_l:.1e}, params {rel_p:.1e} {'OK' if ok_l and ok_p else 'MISMATCH'}")
    print(f"\ntotal {time.perf_counter() - t0:.1f} s; {'all checks passed' if not failures else f'{failures} MISMATCH(ES)'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
