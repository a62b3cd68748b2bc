#!/usr/bin/env python3
"""Run ggmlR's recorded parity cases against ggmlpy.

    python scripts/parity.py [FIXTURE_DIR ...] [--suite ggml|ag|train] [-v]

FIXTURE_DIR defaults to ../shared/parity. Every case is a small program; this
interprets it by mapping each op name to ggmlpy's function of the same name
(the format is in FIXTURE_DIR/README.md). Prints one line per failing case and
a closing line `N passed, M failed`; exits 0 only if all pass.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
import traceback

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import ggmlpy  # noqa: E402

DEFAULT_DIR = ROOT.parent / "shared" / "parity"


class CaseFailure(Exception):
    pass


def as_array(t: dict) -> np.ndarray:
    """A fixture tensor as numpy, in R's shape (column-major data)."""
    data = np.array([_num(v) for v in t["data"]], dtype=np.float64)
    dim = t["dim"]
    return data.reshape(dim, order="F") if len(dim) > 1 else data


def _num(v):
    return {"Inf": np.inf, "-Inf": -np.inf, "NaN": np.nan}.get(v, v) if isinstance(v, str) else v


def compare(name: str, got, want: dict, tol: dict) -> None:
    """`got` in memory (column-major) order: ggml arrays ravel() to it, R-shaped ones ravel('F')."""
    ref = np.array([_num(v) for v in want["data"]], dtype=np.float64)
    got = np.asarray(got, dtype=np.float64).ravel()
    if got.size != ref.size:
        raise CaseFailure(f"{name}: {got.size} values, expected {ref.size} {want['dim']}")
    if not np.allclose(got, ref, rtol=tol["rtol"], atol=tol["atol"], equal_nan=True):
        err = np.max(np.abs(got - ref))
        raise CaseFailure(f"{name}: max abs error {err:.3g} (rtol {tol['rtol']}, atol {tol['atol']})")


# -- suite: ggml (low-level graph ops) ----------------------------------------------------------------
VIEW_OPS = {"ggml_transpose", "ggml_reshape_1d", "ggml_reshape_2d", "ggml_reshape_3d", "ggml_reshape_4d",
            "ggml_permute", "ggml_view_1d", "ggml_view_2d"}


def run_ggml_case(case: dict, tol: dict) -> None:
    backend_api = case.get("api") == "backend"
    ctx = ggmlpy.ggml_init(64 * 1024 * 1024, no_alloc=backend_api)
    env, values = {}, {}
    for name, spec in case["inputs"].items():
        dim = spec["dim"]
        env[name] = (ggmlpy.ggml_new_tensor_1d(ctx, ggmlpy.GGML_TYPE_F32, dim[0]) if len(dim) == 1 else
                     ggmlpy.ggml_new_tensor_2d(ctx, ggmlpy.GGML_TYPE_F32, dim[0], dim[1]))
        values[name] = [_num(v) for v in spec["data"]]
    backend = None
    if backend_api:
        backend = ggmlpy.ggml_backend_cpu_init()
        ggmlpy.ggml_backend_alloc_ctx_tensors(ctx, backend)
    for name, vals in values.items():
        ggmlpy.ggml_set_f32(env[name], vals)
    for step in case["program"]:
        fn = getattr(ggmlpy, step["op"])
        args = [env[a] if isinstance(a, str) else a for a in step["args"]]
        kwargs = {k: _num(v) for k, v in (step.get("kwargs") or {}).items()}
        out = fn(ctx, *args, **kwargs)
        env[step["out"]] = out
        if step["op"] in VIEW_OPS:
            continue
        if backend is None:
            ggmlpy.ggml_graph_compute(ctx, ggmlpy.ggml_build_forward_expand(ctx, out), n_threads=1)
    if backend is not None:
        graph = ggmlpy.ggml_new_graph(ctx)
        for step in case["program"]:
            if step["op"] not in VIEW_OPS:
                ggmlpy.ggml_set_output(env[step["out"]])
                ggmlpy.ggml_build_forward_expand(graph, env[step["out"]])
        # Outputs of a no_alloc context live in a graph allocator's buffer, as ggmlR does it.
        with ggmlpy.backend.graph_alloc.GraphAllocator(backend) as galloc:
            galloc.alloc(graph)
            ggmlpy.ggml_backend_graph_compute(backend, graph)
            _check_outputs(case, env, tol)
        return
    _check_outputs(case, env, tol)


def _check_outputs(case, env, tol):
    for name, want in case["outputs"].items():
        compare(name, ggmlpy.ggml_get_f32(env[name]), want, tol)


# -- driver -------------------------------------------------------------------------------------------
RUNNERS = {"ggml": run_ggml_case}


def load_cases(dirs, suites):
    for d in dirs:
        for suite in suites:
            path = pathlib.Path(d) / f"{suite}.json"
            if path.exists():
                for case in json.loads(path.read_text())["cases"]:
                    yield suite, case


def run_case(suite: str, case: dict) -> str | None:
    """None on success, else a one-line reason."""
    runner = RUNNERS.get(suite)
    if runner is None:
        return f"suite {suite!r} is not implemented yet"
    try:
        runner(case, case["tolerance"])
    except CaseFailure as e:
        return str(e)
    except Exception as e:  # a crash in one case must not hide the others
        return f"{type(e).__name__}: {e}"
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="*", default=[str(DEFAULT_DIR)])
    ap.add_argument("--suite", action="append", choices=["ggml", "ag", "train"])
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    suites = args.suite or ["ggml", "ag", "train"]
    passed = failed = 0
    for suite, case in load_cases(args.dirs, suites):
        why = run_case(suite, case)
        if why is None:
            passed += 1
            if args.verbose:
                print(f"ok   {suite}/{case['name']}")
        else:
            failed += 1
            print(f"FAIL {suite}/{case['name']}: {why}")
            if args.verbose:
                traceback.print_exc()
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
