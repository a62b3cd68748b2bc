#!/usr/bin/env python3
"""One MLP training step (Adam) on every available device, as a ratio to the CPU backend.

The model: 4 linear layers 256x256 (ReLU between), batch 256, MSE loss, Adam; one step is the
forward pass, backward() and the optimizer update, eager, as a user writes it. Each device gets
the same initial weights and data; the time is the median of --steps steps after --warmup
(the first steps build the device's pipelines: seconds on lavapipe, cached afterwards).

    python scripts/bench_backends.py                      # CPU + every Vulkan/CUDA device
    python scripts/bench_backends.py --software-vulkan    # also Mesa's lavapipe (a CPU-run Vulkan)
    python scripts/bench_backends.py --local-rpc          # also a loopback rpc-server (serving the CPU)
    python scripts/bench_backends.py --rpc 10.0.0.5:50052 # also a remote rpc-server
    python scripts/bench_backends.py --json out.json

A ratio below 1 is faster than the CPU backend. Loss after the timed steps is compared with the
CPU's as a sanity check (Vulkan's f16 matmul inputs: about 1e-3 relative).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=10, help="timed steps per device")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--software-vulkan", action="store_true", help="GGMLPY_SOFTWARE_VULKAN=1: lavapipe too")
    ap.add_argument("--rpc", action="append", default=[], metavar="HOST:PORT", help="an rpc-server to include")
    ap.add_argument("--local-rpc", action="store_true", help="start a loopback rpc-server and include it")
    ap.add_argument("--devices", default=None, help="comma-separated ggml device names (default: all)")
    ap.add_argument("--json", default=None, help="write the results here")
    return ap.parse_args(argv)


ARGS = parse(sys.argv[1:])
if ARGS.software_vulkan:
    os.environ["GGMLPY_SOFTWARE_VULKAN"] = "1"  # before ggmlpy's first device query

import numpy as np  # noqa: E402

import ggmlpy as g  # noqa: E402
from ggmlpy.backend import device as D  # noqa: E402
from ggmlpy.backend.state import release_device  # noqa: E402


def mlp_steps(dev: str, a) -> dict:
    g.ag_device(dev)
    try:
        rng = np.random.default_rng(0)
        x, y = rng.normal(size=(a.width, a.batch)), rng.normal(size=(a.width, a.batch))
        g.manual_seed(0)
        layers = []
        for i in range(a.layers):
            layers.append(g.ag_linear(a.width, a.width, "relu" if i < a.layers - 1 else None))
        model = g.ag_sequential(*layers)
        opt = g.optimizer_adam(model.parameters(), lr=1e-3)
        X, Y = g.ag_tensor(x), g.ag_tensor(y)
        times, loss_v = [], None
        for i in range(a.warmup + a.steps):
            t0 = time.perf_counter()
            with g.with_grad_tape():
                loss = g.ag_mse_loss(model(X), Y)
            opt.step(g.backward(loss))
            opt.zero_grad()
            loss_v = loss.item()  # reads back: the step is complete
            times.append(time.perf_counter() - t0)
        return {"first_s": times[0], "median_ms": float(np.median(times[a.warmup:])) * 1e3, "loss": loss_v}
    finally:
        g.ag_device("cpu")


def drop_rpc(spec: str) -> None:
    """Free everything held on an RPC server before it may go away: ggml aborts the process
    when a buffer's server is gone. The tape still holds the last step's tensors: clear it."""
    with g.with_grad_tape():
        pass
    gc.collect()
    release_device(spec)


def start_local_rpc() -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("GGML_VK_VISIBLE_DEVICES", None)
    proc = subprocess.Popen([sys.executable, "-m", "ggmlpy", "rpc-server", "--port", str(port), "--device", "CPU"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:
        try:
            D.rpc_probe("127.0.0.1", port, timeout=2)
            return proc, f"127.0.0.1:{port}"
        except g.DeviceError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise SystemExit("could not start a local rpc-server (python build_ggml.py --backend rpc?)")
            time.sleep(0.2)


def main() -> int:
    a = ARGS
    names = [d.name for d in g.devices() if d.backend in ("CPU", "Vulkan", "CUDA")]
    if a.devices:
        names = [n for n in a.devices.split(",") if n]
    server = None
    endpoints = list(a.rpc)
    if a.local_rpc:
        server, ep = start_local_rpc()
        endpoints.append(ep)
    print(f"MLP {a.layers}x{a.width}x{a.width}, batch {a.batch}, Adam; median of {a.steps} steps after "
          f"{a.warmup} warm-up; CPU threads {g.get_backend('cpu').n_threads}; libggml {g.found.lib_dir}")
    results = {}
    try:
        ref = results["CPU"] = mlp_steps("cpu", a)
        for spec in [n for n in names if n != "CPU"] + ["rpc://" + e for e in endpoints]:
            try:
                results[spec] = mlp_steps(spec, a)
            except g.GGMLError as e:  # e.g. a device without a kernel the step needs
                results[spec] = {"error": str(e).splitlines()[0]}
            if spec.startswith("rpc://"):
                drop_rpc(spec)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=10)
    print(f"{'device':<28} {'ms/step':>9} {'x CPU time':>11} {'speedup':>8} {'first step':>11} {'loss rel diff':>14}")
    for spec, r in results.items():
        if "error" in r:
            print(f"{spec:<28} error: {r['error']}")
            continue
        ratio = r["median_ms"] / ref["median_ms"]
        diff = abs(r["loss"] - ref["loss"]) / max(abs(ref["loss"]), 1e-12)
        desc = next((d.description for d in g.devices() if d.name == spec), "")
        label = f"{spec} ({desc[:14]})" if desc and not spec.startswith("rpc") else spec
        print(f"{label:<28} {r['median_ms']:>9.2f} {ratio:>11.2f} {1 / ratio:>8.2f} {r['first_s']:>10.2f}s {diff:>14.1e}")
        r["ratio_to_cpu"] = ratio
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"config": vars(a), "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
