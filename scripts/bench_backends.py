#!/usr/bin/env python3
"""One MLP training step (Adam) on every available device, as a ratio to the CPU backend.

The model: 4 linear layers 256x256 (ReLU between), batch 256, MSE loss, Adam; one step is the
forward pass, backward() and the optimizer update: eager, as a user writes it, and compiled into
one ggml graph (ag_compile: "graph ms"). Each device gets the same initial weights and data; the
time is the median of --steps steps after --warmup (the first steps build the device's
pipelines: seconds on lavapipe, cached afterwards).

    python scripts/bench_backends.py                      # CPU + every Vulkan/CUDA device
    python scripts/bench_backends.py --software-vulkan    # also Mesa's lavapipe (a CPU-run Vulkan)
    python scripts/bench_backends.py --local-rpc          # also a loopback rpc-server (serving the CPU)
    python scripts/bench_backends.py --rpc 10.0.0.5:50052 # also a remote rpc-server
    python scripts/bench_backends.py --torch              # also PyTorch's step on its CPU and CUDA devices
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
    ap.add_argument("--torch", action="store_true", help="also time the same step in PyTorch on the CPU and CUDA devices")
    return ap.parse_args(argv)


ARGS = parse(sys.argv[1:])
if ARGS.software_vulkan:
    os.environ["GGMLPY_SOFTWARE_VULKAN"] = "1"  # before ggmlpy's first device query

import numpy as np  # noqa: E402

import ggmlpy as g  # noqa: E402
from ggmlpy.core import rpc  # noqa: E402
from ggmlpy.runtime.state import release_device  # noqa: E402


def timed_steps(step, a) -> tuple[float, float, float]:
    """(first step s, median ms of the timed steps, last loss); each step reads its loss back,
    so it is complete when timed."""
    times, loss_v = [], None
    for _ in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        loss_v = step()
        times.append(time.perf_counter() - t0)
    return times[0], float(np.median(times[a.warmup:])) * 1e3, loss_v


def mlp_steps(dev: str, a) -> dict:
    """The step on `dev`, eager (ag_* ops, backward, optimizer.step) and compiled (ag_compile:
    one ggml graph), each from the same initial weights."""
    g.ag_device(dev)
    try:
        rng = np.random.default_rng(0)
        x, y = rng.normal(size=(a.width, a.batch)), rng.normal(size=(a.width, a.batch))

        def fresh():
            g.manual_seed(0)
            layers = [g.ag_linear(a.width, a.width, "relu" if i < a.layers - 1 else None) for i in range(a.layers)]
            model = g.ag_sequential(*layers)
            return model, g.optimizer_adam(model.parameters(), lr=1e-3), g.ag_tensor(x), g.ag_tensor(y)

        model, opt, X, Y = fresh()

        def eager():
            with g.with_grad_tape():
                loss = g.ag_mse_loss(model(X), Y)
            opt.step(g.backward(loss))
            opt.zero_grad()
            return loss.item()
        first, ms, loss_v = timed_steps(eager, a)
        out = {"first_s": first, "median_ms": ms, "loss": loss_v}
        try:
            cmodel, copt, CX, CY = fresh()
            compiled = g.ag_compile(lambda xx, yy: g.ag_mse_loss(cmodel(xx), yy), [CX, CY], optimizer=copt)
            _, out["graph_ms"], out["graph_loss"] = timed_steps(lambda: compiled(CX, CY), a)
        except g.GGMLError as e:
            out["graph_error"] = str(e).splitlines()[0]
        return out
    finally:
        g.ag_device("cpu")


def torch_steps(name: str, a) -> dict | None:
    """The same eager step in PyTorch (nn.Linear layers, Adam), on the torch device matching a
    ggml device (CPU, CUDAn); None where torch has no such device."""
    try:
        import torch
    except ImportError:
        return None
    dev = "cpu" if name == "CPU" else f"cuda:{name[4:]}" if name.startswith("CUDA") else None
    if dev is None or (dev != "cpu" and not torch.cuda.is_available()):
        return None
    torch.set_num_threads(g.get_backend("cpu").n_threads)
    torch.manual_seed(0)
    layers = []
    for i in range(a.layers):
        layers += [torch.nn.Linear(a.width, a.width)] + ([torch.nn.ReLU()] if i < a.layers - 1 else [])
    model = torch.nn.Sequential(*layers).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(a.batch, a.width, device=dev), torch.randn(a.batch, a.width, device=dev)

    def step():
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()  # synchronises, as ggmlpy's step does
    _, ms, _ = timed_steps(step, a)
    return {"torch_ms": ms, "torch": torch.__version__}


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
    env = {k: v for k, v in os.environ.items() if k != "GGML_VK_VISIBLE_DEVICES"}
    proc = subprocess.Popen([sys.executable, "-m", "ggmlpy", "rpc-server", "--port", str(port), "--device", "CPU"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:
        try:
            rpc.rpc_probe("127.0.0.1", port, timeout=2)
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
        if a.torch:
            for spec in results:
                results[spec].update(torch_steps(spec, a) or {})
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=10)
    print(f"{'device':<28} {'ms/step':>9} {'x CPU time':>11} {'speedup':>8} {'first step':>11} {'loss rel diff':>14}"
          f" {'graph ms':>9} {'x CPU graph':>12}" + (f" {'torch ms':>9}" if a.torch else ""))
    for spec, r in results.items():
        if "error" in r:
            print(f"{spec:<28} error: {r['error']}")
            continue
        ratio = r["median_ms"] / ref["median_ms"]
        diff = abs(r["loss"] - ref["loss"]) / max(abs(ref["loss"]), 1e-12)
        desc = next((d.description for d in g.devices() if d.name == spec), "")
        label = f"{spec} ({desc[:14]})" if desc and not spec.startswith("rpc") else spec
        graph = f" {r['graph_ms']:>9.2f} {r['graph_ms'] / ref['graph_ms']:>12.2f}" if "graph_ms" in r and "graph_ms" in ref \
            else f" graph: {r.get('graph_error', 'n/a')}"
        torch_ms = f" {r['torch_ms']:>9.2f}" if "torch_ms" in r else ""
        print(f"{label:<28} {r['median_ms']:>9.2f} {ratio:>11.2f} {1 / ratio:>8.2f} {r['first_s']:>10.2f}s {diff:>14.1e}"
              f"{graph}{torch_ms}")
        r["ratio_to_cpu"] = ratio
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"config": vars(a), "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
