"""python -m ggmlpy info | demo | rpc-server | onnx

Each command imports what it runs when it runs (onnx, a demo and its optional dependencies), so
parsing the arguments and --help load none of them; the imports inside the functions below are
that dispatch."""
from __future__ import annotations

import argparse
import ipaddress
import os
import sys

RPC_WARNING = ("ggmlpy rpc-server: WARNING: ggml's RPC protocol has no authentication and no encryption: "
               "anyone who can reach {host}:{port} can use this machine's devices and memory through it. "
               "Bind it to loopback (127.0.0.1) or a private network only.")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def rpc_server(args) -> int:
    """exec ggml's own rpc-server binary, from the same build as the libggml ggmlpy loads."""
    from ..core.rpc import rpc_server_binary
    from ..bindings import found
    binary = rpc_server_binary()
    if binary is None:
        print(f"ggmlpy rpc-server: no rpc-server binary next to the libggml in {found.lib_dir} "
              f"(looked in {found.bin_dir or found.lib_dir.parent / 'bin'}). Build one with:\n"
              "    python build_ggml.py --backend vulkan --backend rpc    (or just --backend rpc)",
              file=sys.stderr)
        return 1
    if not _is_loopback(args.host):
        print(RPC_WARNING.format(host=args.host, port=args.port), file=sys.stderr)
    argv = [str(binary), "--host", args.host, "--port", str(args.port)]
    if args.threads is not None:
        argv += ["--threads", str(args.threads)]
    if args.device is not None:
        argv += ["--device", args.device]
    if args.cache:
        argv.append("--cache")
    print(f"ggmlpy rpc-server: exec {' '.join(argv)}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os.execv(argv[0], argv)  # replaces this process: its pid is the server's, signals go straight to it
    return 1  # not reached


def _usage(msg: str) -> int:
    print(f"ggmlpy onnx: {msg}", file=sys.stderr)
    return 2


def _check_cli_inputs(path, given: dict, shapes: dict) -> str | None:
    """What is wrong with --input / --shape for this model, in the CLI's words (None: nothing, or the
    file cannot be parsed here: onnx_load then says why). Only the graph is read, not external weights."""
    try:
        import onnx
        g = onnx.load(path, load_external_data=False).graph
    except Exception:
        return None
    inits = {i.name for i in g.initializer}
    inputs = {vi.name: vi for vi in g.input if vi.name not in inits}
    names = ", ".join(inputs) or "none"
    for flag, items in (("--input", given), ("--shape", shapes)):
        bad = [n for n in items if n not in inputs]
        if bad:
            return f"{flag} names {', '.join(repr(n) for n in bad)}, which is not an input of the model (its inputs: {names})"
    for name, vi in inputs.items():
        dims = vi.type.tensor_type.shape.dim if vi.type.tensor_type.HasField("shape") else None
        if name not in shapes and (dims is None or any(not d.HasField("dim_value") for d in dims)):
            shown = "no shape" if dims is None else "a dynamic shape [" + "x".join(
                str(d.dim_value) if d.HasField("dim_value") else "?" for d in dims) + "]"
            return (f"input '{name}' has {shown}: fix it with --shape {name}=1x... "
                    f"or give its data with --input {name}=file.npy")
    return None


def onnx_cmd(args) -> int:
    """Summary of an ONNX model, then a run on random (or given) inputs: output shapes and timings."""
    import time

    import numpy as np

    from ..errors import DeviceError, GGMLError
    from ..onnx import onnx_inputs, onnx_load, onnx_run, onnx_summary
    given = {}
    for item in args.input or []:
        name, sep, file = item.partition("=")
        if not sep or not name:
            return _usage(f"--input takes name=file.npy, got {item!r}")
        try:
            given[name] = np.load(file, allow_pickle=False)
        except (OSError, ValueError, EOFError) as e:  # missing, unreadable, not an .npy file
            return _usage(f"--input {name}: cannot read {file!r}: {e}")
    shapes = {k: v.shape for k, v in given.items()}
    for item in args.shape or []:
        name, sep, dims = item.partition("=")
        try:
            shape = tuple(int(d) for d in dims.replace("x", ",").split(",") if d)
        except ValueError:
            shape = ()
        if not sep or not name or not shape or min(shape) < 1:
            return _usage(f"--shape takes name=1x3x224x224 (positive sizes), got {item!r}")
        shapes[name] = shape
    problem = _check_cli_inputs(args.model, given, shapes)
    if problem:
        return _usage(problem)
    try:
        t0 = time.perf_counter()
        model = onnx_load(args.model, device=args.device, input_shapes=shapes or None, n_threads=args.threads,
                          dtype=args.dtype)
        t_load = time.perf_counter() - t0
    except (GGMLError, DeviceError, OSError) as e:  # OnnxError, a device that is not there, a missing file
        print(f"ggmlpy onnx: {e}", file=sys.stderr)
        return 1
    s = onnx_summary(model)
    print(f"ONNX model: {s['graph_name']}  (producer {s['producer'] or '?'}, IR {s['ir_version']}, "
          f"opset {s['opset_version']})")
    planned = s["ggml_nodes"] if s["planned"] else f"planned at the first run (for {', '.join(s['value_inputs'])})"
    print(f"  nodes: {s['n_nodes']}  weights: {s['n_initializers']}  ggml graph nodes: {planned}  "
          f"device: {s['device']}  dtype: {s['dtype']}")
    print("  ops: " + ", ".join(f"{k} x{v}" for k, v in sorted(s["op_counts"].items(), key=lambda kv: -kv[1])))
    if s["cpu_fallback_ops"]:
        print("  on the CPU (no kernel on the device): " + ", ".join(s["cpu_fallback_ops"]))
    if s["host_ops"]:
        print("  host steps between ggml graphs (numpy): " + ", ".join(s["host_ops"]))
    rng = np.random.default_rng(0)
    feeds = {}
    for name, shape in onnx_inputs(model).items():
        et = model.input_info[name][0]
        if name in given:
            feeds[name] = given[name]
        elif et in (6, 7, 2, 3, 4, 5, 12, 13):  # integer inputs: small non-negative values (ids, masks)
            feeds[name] = rng.integers(0, 2, size=shape)
        elif et == 9:
            feeds[name] = rng.integers(0, 2, size=shape).astype(bool)
        else:
            feeds[name] = rng.standard_normal(shape).astype(np.float32)
        print(f"  input  {name}: {list(shape)}" + ("" if name in given else " (random)"))
    times = []
    try:
        for _ in range(max(1, args.runs)):
            t0 = time.perf_counter()
            out = onnx_run(model, feeds)
            times.append(time.perf_counter() - t0)
    except GGMLError as e:  # an --input of the wrong shape or type, a failed compute
        print(f"ggmlpy onnx: {e}", file=sys.stderr)
        return 1
    for name, y in out.items():
        mean = f"  mean {float(np.mean(y)):.6g}" if y.size else ""
        print(f"  output {name}: {list(y.shape)} {y.dtype}{mean}")
    print(f"  load {t_load * 1e3:.1f} ms; run: first {times[0] * 1e3:.2f} ms"
          + (f", best of {len(times) - 1} more {min(times[1:]) * 1e3:.2f} ms" if len(times) > 1 else ""))
    if args.profile:
        from ..onnx import onnx_profile
        prof = onnx_profile(model, feeds)
        total = sum(r[1] for r in prof) or 1.0
        print("  time per ggml op (each node timed alone):")
        for op, ms, n in prof[:12]:
            print(f"    {op:<16} {ms:9.3f} ms  {n:5d} nodes  {100 * ms / total:5.1f}%")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ggmlpy")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("info", help="library path, ggml version, backends and devices")
    demo = sub.add_parser("demo", help="a small graph and a short autograd training run")
    demo.add_argument("--keras", action="store_true", help="a Sequential CNN on the digits, trained by ggml_fit")
    demo.add_argument("--gpt", action="store_true", help="a character-level GPT trained on Python's standard library")
    demo.add_argument("--minutes", type=float, default=3.0, help="--gpt: training time (default 3)")
    demo.add_argument("--steps", type=int, default=None, help="--gpt: train this many steps instead")
    demo.add_argument("--device", default=None, help="--gpt: cpu, gpu, vulkan, cuda (default: the current device)")
    demo.add_argument("--out", default=".", help="--gpt: folder for char_gpt.gguf and char_gpt_loss.png")
    rpc = sub.add_parser("rpc-server", help="run ggml's RPC server (no authentication: loopback or a private "
                                            "network only); clients use ag_device('rpc://host:port')")
    rpc.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    rpc.add_argument("--port", type=int, default=50052, help="port (default 50052)")
    rpc.add_argument("--threads", type=int, default=None, help="CPU threads of the served CPU device")
    rpc.add_argument("--device", default=None,
                     help="comma-separated ggml device names to serve, e.g. CPU or Vulkan0 "
                          "(default: ggml's choice, accelerators first)")
    rpc.add_argument("--cache", action="store_true", help="ggml's local tensor cache (-c)")
    ox = sub.add_parser("onnx", help="load an ONNX model, print its summary, run it and time it")
    ox.add_argument("model", help="path to a .onnx file")
    ox.add_argument("--device", default=None, help="cpu, vulkan, cuda, gpu, rpc://host:port (default: a GPU if any)")
    ox.add_argument("--input", action="append", metavar="NAME=FILE.npy", help="an input from a .npy file (repeatable)")
    ox.add_argument("--shape", action="append", metavar="NAME=1x3x224x224", help="fix an input's dynamic shape")
    ox.add_argument("--threads", type=int, default=None, help="CPU threads")
    ox.add_argument("--dtype", default="f32", choices=["f32", "f16"], help="weight precision")
    ox.add_argument("--runs", type=int, default=5, help="timed runs (default 5)")
    ox.add_argument("--profile", action="store_true", help="also print the time per ggml op type")
    args = ap.parse_args(argv)
    try:
        import ggmlpy
    except ImportError as e:  # GGMLLoadError: say how to fix it, without a traceback
        print(f"ggmlpy: {e}", file=sys.stderr)
        return 1
    if args.cmd == "info":
        ggmlpy.info()
        return 0
    if args.cmd == "rpc-server":
        return rpc_server(args)
    if args.cmd == "onnx":
        return onnx_cmd(args)
    if getattr(args, "keras", False):
        from .keras_demo import run as run_keras
        return run_keras()
    if getattr(args, "gpt", False):
        from .demo_gpt import run as run_gpt
        return run_gpt(minutes=args.minutes, steps=args.steps, device=args.device, out_dir=args.out)
    from .demo import run
    return run()
