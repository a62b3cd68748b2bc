#!/usr/bin/env python3
"""Run ggmlR's recorded parity cases against ggmlpy.

    python scripts/parity.py [FIXTURE_DIR ...] [--suite ggml|ag|train|keras] [-v]

FIXTURE_DIR defaults to tests/parity (the reference outputs recorded from ggmlR 0.8.2). Every case is a small program; this
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

import ggmlpy  # noqa: E402

DEFAULT_DIR = ROOT / "tests" / "parity"


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
        with ggmlpy.core.graph_alloc.GraphAllocator(backend) as galloc:
            galloc.alloc(graph)
            ggmlpy.ggml_backend_graph_compute(backend, graph)
            _check_outputs(case, env, tol)
        return
    _check_outputs(case, env, tol)


def _check_outputs(case, env, tol):
    for name, want in case["outputs"].items():
        compare(name, ggmlpy.ggml_get_f32(env[name]), want, tol)


# -- suites: ag and train (autograd programs) ---------------------------------------------------------------
# ggmlR defects ggmlpy does not copy (docs/divergences.md). For these the
# recorded value is not compared; ggmlpy's own value is checked by finite differences instead.
DIVERGENCES = {
    "grad_fields": "ggmlR adds a gradient into $grad once per use of a tensor; ggmlpy's .grad is the true gradient",
    "batch_norm_train_x": "ggmlR's batch-norm input gradient in training mode omits the batch statistics (grad/std)",
}
LAYERS = {"ag_linear", "ag_batch_norm", "ag_embedding", "ag_dropout", "ag_multihead_attention", "ag_sequential"}


class Program:
    """Interprets a case's setup and program with ggmlpy's functions of the same names."""

    def __init__(self, case):
        self.case = case
        self.env = {}
        self.layers = {}
        self.params = []
        for name, spec in case["inputs"].items():
            arr = as_array(spec)
            if len(spec["dim"]) == 1:
                arr = arr.reshape(-1, 1)
            self.env[name] = (ggmlpy.ag_param(arr) if spec.get("param") else ggmlpy.ag_tensor(arr))
            if spec.get("param"):
                self.params.append(name)
        for step in case.get("setup") or []:
            self.step(step)

    def value(self, a):
        return self.env[a] if isinstance(a, str) else a

    def step(self, step):
        op, args = step["op"], [self.value(a) for a in step["args"]]
        kwargs = {k: _num(v) for k, v in (step.get("kwargs") or {}).items()}
        if op in LAYERS:
            layer = getattr(ggmlpy, op)(*args, **kwargs)
            for field, inp in (step.get("bind") or {}).items():
                getattr(layer, field).data = self.env[inp].numpy()
                self.env[inp] = getattr(layer, field)
            self.env[step["out"]] = layer
            return None
        if op == "forward":
            out = args[0].forward(*args[1:], **kwargs)
        elif op == "layer_state":
            out = getattr(args[0], kwargs["field"])
        else:
            out = getattr(ggmlpy, op)(*args, **kwargs)
        if step.get("out"):
            self.env[step["out"]] = out
        return out

    def run(self):
        for step in self.case["program"]:
            self.step(step)
        loss = self.case.get("loss")
        return self.env[loss] if loss else None


DEVICE = None  # --device: where ag and train programs run (default: the default device)


def _on_device(device, run, case) -> None:
    """run(case) with `device` selected (None: the default device), restoring the default after."""
    if device is None:
        return run(case)
    previous = ggmlpy.ag_device()
    ggmlpy.ag_device(device)
    try:
        run(case)
    finally:
        ggmlpy.ag_device(previous)


def run_ag_case(case: dict, tol: dict) -> None:
    device = DEVICE
    if device is None and case.get("device") == "gpu":
        # ag_device("gpu") is the best device; ggmlR's build fell back to its CPU backend
        device = "gpu" if any(d.type in ("gpu", "igpu") for d in ggmlpy.devices()) else "cpu"
    _on_device(device, _run_ag_program, case)


def _run_ag_program(case: dict) -> None:
    prog = Program(case)
    if case.get("expect_error"):
        try:
            with ggmlpy.with_grad_tape():
                prog.run()
        except (ggmlpy.GGMLError, ValueError, TypeError):
            return
        raise CaseFailure(f"expected an error ({case.get('error')}), got none")
    with ggmlpy.with_grad_tape():
        loss = prog.run()
    for name, want in case["outputs"].items():
        compare(name, _values(prog.env[name]), want, TOL_F32)
    if loss is None:
        return
    grads = ggmlpy.backward(loss)
    divergent = []
    for name, want in (case.get("grads") or {}).items():
        t = prog.env[name]
        if want is None:
            if t in grads:
                raise CaseFailure(f"grad {name}: ggmlR gives none, ggmlpy gives one")
            continue
        try:
            compare(f"grad {name}", grads[t].numpy().ravel(order="F"), want, TOL_F32)
        except CaseFailure:
            if not _trains_batch_norm(case):
                raise
            divergent.append(name)  # ggmlR's batch-norm defect may explain it: verified below
            continue
        # `.grad` is the true gradient, not ggmlR's over-counted `$grad` (case["grad_fields"])
        compare(f".grad {name}", t.grad.numpy().ravel(order="F"), want, TOL_F32)
    # Last: these re-run the program, which resets the pass pool and so retires `grads`.
    for name in divergent:
        _check_by_finite_differences(prog, name)
    if case.get("gradcheck"):
        _run_gradcheck(case, prog)


# float32 results against R's doubles: rtol 1e-4, atol 1e-5.
TOL_F32 = {"rtol": 1e-4, "atol": 1e-5}


def _values(x):
    return x.numpy().ravel(order="F") if hasattr(x, "numpy") else np.asarray(x, dtype=float).ravel()


def _check_by_finite_differences(prog, name):
    """A known ggmlR defect: check ggmlpy's gradient of `name` by central differences instead."""
    ok, errs = ggmlpy.ag_gradcheck(prog.run, [prog.env[name]], atol=1e-3, return_errors=True)
    if not ok:
        raise CaseFailure(f"grad {name} (divergence: {DIVERGENCES['batch_norm_train_x']}): "
                          f"finite differences disagree by {max(errs.values()):.3g}")


def _run_gradcheck(case, prog):
    spec = case["gradcheck"]
    inputs = [prog.env[n] for n in spec["inputs"]]
    got = ggmlpy.ag_gradcheck(prog.run, inputs, eps=spec["eps"], atol=spec["atol"])
    want = spec["result"]
    if got != want:
        if got and not want and _trains_batch_norm(case):
            return  # ggmlpy's batch-norm gradient is right, so its gradcheck passes: the known divergence
        raise CaseFailure(f"ag_gradcheck returned {got}, ggmlR {want}")


def run_train_case(case: dict, tol: dict) -> None:
    _on_device(DEVICE, _run_train_program, case)


def _run_train_program(case: dict) -> None:
    prog = Program(case)
    params = [prog.env[n] for n in case["optimizer"]["params"]]
    eff = {k: v for k, v in case["optimizer_effective"].items() if k != "type"}
    opt = (ggmlpy.optimizer_sgd if case["optimizer"]["type"] == "sgd" else ggmlpy.optimizer_adam)(params, **eff)
    clip = case.get("clip_grad_norm")
    if _trains_batch_norm(case):
        return _divergent_train_case(case, prog)
    losses, norms = [], []
    for k in range(case["steps"]):
        with ggmlpy.with_grad_tape():
            loss = prog.run()
        losses.append(loss.item())
        grads = ggmlpy.backward(loss)
        if k == 0:
            _compare_grads("step-1 grad", case["first_step_grads"], prog, grads)
        if clip:
            norms.append(ggmlpy.clip_grad_norm(params, grads, clip["max_norm"]))
            if k == 0 and case.get("first_step_clipped_grads"):
                _compare_grads("step-1 clipped grad", case["first_step_clipped_grads"], prog, grads)
        opt.step(grads)
        opt.zero_grad()
        for name, want in case["params_after_step"][k].items():
            compare(f"{name} after step {k + 1}", _values(prog.env[name]), want, TOL_F32)
    with ggmlpy.with_grad_tape():
        losses.append(prog.run().item())
    compare("losses", losses, {"data": case["losses"], "dim": [len(case["losses"])]}, TOL_F32)
    if clip:
        compare("grad_norms", norms, {"data": case["grad_norms"], "dim": [len(norms)]}, TOL_F32)
    for name, want in case["final_params"].items():
        compare(f"final {name}", _values(prog.env[name]), want, TOL_F32)
    for key, want in (case.get("final_state") or {}).items():
        layer, field = key.split(".")
        compare(f"final {key}", _values(getattr(prog.env[layer], field)), want, TOL_F32)


def _trains_batch_norm(case) -> bool:
    """Does a batch-norm layer run a forward pass in training mode (where ggmlR's input gradient
    is wrong)? Layers start in training mode; ag_eval/ag_train switch a layer and what it holds."""
    training, children = {}, {}
    for st in (case.get("setup") or []) + case["program"]:
        op, args = st["op"], [a for a in st["args"] if isinstance(a, str)]
        if op == "ag_batch_norm":
            training[st["out"]] = True
        elif op == "ag_sequential":
            children[st["out"]] = args
        elif op in ("ag_eval", "ag_train"):
            stack = list(args)
            while stack:
                name = stack.pop()
                stack += children.get(name, [])
                if name in training:
                    training[name] = op == "ag_train"
        elif op == "forward":
            stack = args[:1]
            while stack:
                name = stack.pop()
                if training.get(name):
                    return True
                stack += children.get(name, [])
    return False


def _divergent_train_case(case, prog):
    """Batch norm in training mode: ggmlR's input gradient is wrong, so its trajectory is too.
    Check the first forward pass exactly, and every first-step gradient either against ggmlR
    or, where ggmlR is wrong, against finite differences."""
    with ggmlpy.with_grad_tape():
        loss = prog.run()
    compare("loss[0]", [loss.item()], {"data": case["losses"][:1], "dim": [1]}, TOL_F32)
    grads = ggmlpy.backward(loss)
    wrong = []
    for name, want in case["first_step_grads"].items():
        try:
            compare(name, grads[prog.env[name]].numpy().ravel(order="F"), want, TOL_F32)
        except CaseFailure:
            wrong.append(name)
    for name in wrong:
        _check_by_finite_differences(prog, name)


def _compare_grads(label, wants, prog, grads):
    for name, want in wants.items():
        compare(f"{label} {name}", grads[prog.env[name]].numpy().ravel(order="F"), want, TOL_F32)


# -- driver -------------------------------------------------------------------------------------------
from parity_keras import run_keras_case  # noqa: E402  (the keras suite lives in its own module)

RUNNERS = {"ggml": run_ggml_case, "ag": run_ag_case, "train": run_train_case, "keras": run_keras_case}


def load_cases(dirs, suites):
    for d in dirs:
        d = pathlib.Path(d)
        if not d.is_dir() or not any(d.glob("*.json")):
            raise SystemExit(f"parity.py: no fixture files (*.json) in {d}")
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
    ap.add_argument("--suite", action="append", choices=["ggml", "ag", "train", "keras"])
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--f32-tol", nargs=2, type=float, metavar=("RTOL", "ATOL"),
                    help="tolerance for ggmlpy's float32 against ggmlR's doubles (default 1e-4 1e-5)")
    ap.add_argument("--device", help="run the ag and train programs on this device (e.g. vulkan; "
                    "set GGMLPY_SOFTWARE_VULKAN=1 for lavapipe) instead of the default device")
    args = ap.parse_args(argv)
    global DEVICE
    DEVICE = args.device
    if args.device:
        import parity_keras
        parity_keras.DEVICE = args.device
    if args.f32_tol:
        TOL_F32.update(rtol=args.f32_tol[0], atol=args.f32_tol[1])
    suites = args.suite or ["ggml", "ag", "train", "keras"]
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
