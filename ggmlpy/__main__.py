"""python -m ggmlpy info | demo"""
from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ggmlpy")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("info", help="library path, ggml version, backends and devices")
    sub.add_parser("demo", help="a small graph and a short autograd training run")
    args = ap.parse_args(argv)
    try:
        import ggmlpy
    except ImportError as e:  # GGMLLoadError: say how to fix it, without a traceback
        print(f"ggmlpy: {e}", file=sys.stderr)
        return 1
    if args.cmd == "info":
        ggmlpy.info()
        return 0
    from .demo import run
    return run()


if __name__ == "__main__":
    sys.exit(main())
