"""python -m ggmlpy info | demo | rpc-server"""
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
    from .backend.device import rpc_server_binary
    from .bindings import found
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ggmlpy")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("info", help="library path, ggml version, backends and devices")
    demo = sub.add_parser("demo", help="a small graph and a short autograd training run")
    demo.add_argument("--keras", action="store_true", help="a Sequential CNN on the digits, trained by ggml_fit")
    rpc = sub.add_parser("rpc-server", help="run ggml's RPC server (no authentication: loopback or a private "
                                            "network only); clients use ag_device('rpc://host:port')")
    rpc.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    rpc.add_argument("--port", type=int, default=50052, help="port (default 50052)")
    rpc.add_argument("--threads", type=int, default=None, help="CPU threads of the served CPU device")
    rpc.add_argument("--device", default=None,
                     help="comma-separated ggml device names to serve, e.g. CPU or Vulkan0 "
                          "(default: ggml's choice, accelerators first)")
    rpc.add_argument("--cache", action="store_true", help="ggml's local tensor cache (-c)")
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
    if getattr(args, "keras", False):
        from .keras.demo import run as run_keras
        return run_keras()
    from .demo import run
    return run()


if __name__ == "__main__":
    sys.exit(main())
