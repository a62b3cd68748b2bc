"""Run ONNX's own node test cases through ggmlpy's ONNX import and print a per-operator table.

    python scripts/onnx_conformance.py [--device cpu] [--op Conv --op Relu] [--failures] [--mode both]

Modes (ggmlpy.onnx.conformance): "run-time" (the default, as onnxruntime takes a model: every
input fed at run time), "load-time" (inputs that fix shapes or op parameters become initializers,
as in a deployed model), or "both" (the table for run time, then the counts of both).
Columns: passed / run (run = passed + failed), then skipped (a documented ggml limitation:
float64, strings, more than 4 dimensions...) and folded (the outputs were computed at load
time, so ggml ran nothing). Operators ggmlpy does not support are listed at the end.
The last line is `N passed, M failed` (the run-time mode's unless only load-time was asked);
with --mode both, the line before it is the load-time mode's, `load time: N passed, M failed`.
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import Counter


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--op", action="append", help="only cases of this operator (repeatable)")
    ap.add_argument("--verbose", action="store_true", help="name each case before running it")
    ap.add_argument("--failures", action="store_true", help="print every failed or skipped case with its reason")
    ap.add_argument("--mode", choices=("run-time", "load-time", "both"), default="both",
                    help="feed every input at run time, make shape-giving inputs initializers, or both (default)")
    args = ap.parse_args(argv)
    from ggmlpy.onnx.conformance import Table, collect, run_case
    t0 = time.time()
    cases = collect(set(args.op) if args.op else None)
    if args.verbose:  # a case that hangs shows where
        import faulthandler
        faulthandler.dump_traceback_later(60, repeat=True)
    main_mode = "load-time" if args.mode == "load-time" else "run-time"
    other = None
    if args.mode == "both":
        other = Table()
        other.results = [run_case(c, args.device, args.verbose, at_load=True) for c in cases]
    table = Table()
    for c in cases:
        table.results.append(run_case(c, args.device, args.verbose, at_load=main_mode == "load-time"))
    print(f"mode: {main_mode} (" + ("every input fed at run time" if main_mode == "run-time"
                                    else "inputs that fix shapes or parameters as initializers") + ")")
    rows = table.by_op()
    print(f"{'operator':<28} {'passed/run':>10} {'skipped':>8} {'folded':>7}")
    unsupported = Counter()
    for op in sorted(rows):
        r = rows[op]
        run = r["pass"] + r["fail"]
        if run == 0 and r["skip"] == 0 and r["folded"] == 0:
            unsupported[op] += r["unsupported"]
            continue
        flag = "" if r["fail"] == 0 else "  <-"
        print(f"{op:<28} {r['pass']:>4}/{run:<5} {r['skip']:>8} {r['folded']:>7}{flag}")
    if args.failures:
        print()
        for res in table.results:
            if res.status in ("fail", "skip"):
                print(f"{res.status:5} {res.name}: {res.detail[:200]}")
    tot = table.totals()
    if unsupported:
        print(f"\nnot supported ({sum(unsupported.values())} cases): " + ", ".join(sorted(unsupported)))
    what = "both modes" if other is not None else main_mode
    print(f"\n{len(cases)} cases ({what}) in {time.time() - t0:.0f} s: {tot['skip']} skipped (ggml limitation), "
          f"{tot['folded']} folded at load time, {tot['unsupported']} of unsupported operators")
    if other is not None:
        lt = other.totals()
        print(f"load time: {lt['pass']} passed, {lt['fail']} failed ({lt['skip']} skipped, {lt['folded']} folded)")
    print(f"{tot['pass']} passed, {tot['fail']} failed")
    return 1 if tot["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
