"""ONNX's own node test cases (shipped in the onnx wheel) run through onnx_load / onnx_run.

Each case is a small model (usually one node) with input data and expected
outputs. Two modes:
- run time (the default, as onnxruntime takes a model): every input is fed at
  run time; those that fix shapes or op parameters are read on the host and the
  graph is planned for their values (shaping.py). A case with no inputs at all
  (its outputs computed when planning: Constant...) is "folded".
- load time (`at_load=True`): inputs that fix shapes or op parameters (a
  Reshape's shape, a Slice's starts...) become initializers, as in a deployed
  model; a case whose outputs were all computed at load time (Shape...) is
  "folded", not a ggml pass.
NonMaxSuppression and RoiAlign, computed in numpy at run time between ggml
graphs (ops_host.py), count as passes.
"""
from __future__ import annotations

import warnings
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
from onnx import TensorProto, numpy_helper

from .graph import OnnxError, OnnxLimitation
from .graph import FLOAT8_TYPES, INT4_TYPES
from .model import onnx_load, supported_ops
from .shaping import value_inputs

# Element types ggml has no place for: the cases using them are skipped with this reason.
UNSUPPORTED_TYPES = {
    TensorProto.DOUBLE: "float64 (ggml computes in float32)",
    TensorProto.STRING: "string tensors",
    TensorProto.COMPLEX64: "complex numbers", TensorProto.COMPLEX128: "complex numbers",
    TensorProto.BFLOAT16: "bfloat16 (computed in float32; the reference rounds every step to bfloat16)",
    TensorProto.UINT64: "uint64 beyond float32's exact range", TensorProto.UINT32: "uint32 beyond float32's exact range",
}
for _n in ("FLOAT4E2M1", "FLOAT8E8M0", "INT2", "UINT2"):
    if hasattr(TensorProto, _n):
        UNSUPPORTED_TYPES[getattr(TensorProto, _n)] = "8/4/2-bit float or integer types"
for _t in FLOAT8_TYPES | INT4_TYPES:  # at the boundary only (a Cast or a quantization), see run_case
    UNSUPPORTED_TYPES[_t] = "float8/int4 beyond casts and quantization (the reference rounds every step)"
BOUNDARY_OPS = {"Cast", "CastLike", "QuantizeLinear", "DequantizeLinear"}


@dataclass
class Result:
    name: str
    op: str
    status: str  # pass, fail, skip, folded, unsupported
    detail: str = ""


def _types_in(model):
    g = model.graph
    for vi in list(g.input) + list(g.output):
        if vi.type.HasField("tensor_type"):
            yield vi.type.tensor_type.elem_type
        else:
            yield -1
    for n in g.node:
        for a in n.attribute:
            if a.name == "to":
                yield int(a.i)


def _array(x):
    """A case's input or expected output as numpy: some cases (the casts between float types) store
    them as TensorProtos, whose raw bytes onnx's numpy_helper decodes."""
    return numpy_helper.to_array(x) if isinstance(x, TensorProto) else np.asarray(x)


def _ml_dtype(dt) -> bool:
    """One of ml_dtypes' types (numpy has no bfloat16, float8 or int4)."""
    return dt.kind == "V" or dt.name.startswith("float8")


def case_op(case) -> str:
    nodes = case.model.graph.node
    return nodes[0].op_type if len(nodes) == 1 else "(multi-node)"


def run_case(case, device="cpu", verbose=False, at_load=False) -> Result:
    """One case: every input fed at run time, or (at_load) those that fix shapes or parameters as
    initializers."""
    model = case.model
    op = case_op(case)
    if verbose:
        print("...", case.name, flush=True)
    ops = {n.op_type for n in model.graph.node}
    known = set(supported_ops())
    if not ops <= known or any(n.domain not in ("", "ai.onnx") for n in model.graph.node):  # ONNX's own only
        return Result(case.name, op, "unsupported", ", ".join(sorted(ops - known)))
    casts_only = ops <= {"Cast", "CastLike"}  # one rounding to bfloat16, which ggml's BF16 type does exactly
    at_boundary = not at_load and ops <= BOUNDARY_OPS  # float8/int4 converted on the way in and out
    for t in _types_in(model):
        if t == -1:
            return Result(case.name, op, "skip", "sequence/optional values")
        if t == TensorProto.BFLOAT16 and (casts_only or at_boundary):
            continue
        if t in FLOAT8_TYPES | INT4_TYPES and at_boundary:
            continue
        if t in UNSUPPORTED_TYPES:
            return Result(case.name, op, "skip", UNSUPPORTED_TYPES[t])
    const_idx = value_inputs(model.graph.node, [vi.name for vi in model.graph.input]) if at_load else set()
    status, detail = "pass", ""
    folded = at_load or not model.graph.input
    for inputs, expected in case.data_sets:
        inputs, expected = [_array(x) for x in inputs], [_array(x) for x in expected]
        m = type(model)()
        m.CopyFrom(model)
        g = m.graph
        names = [vi.name for vi in model.graph.input]
        feeds = {}
        for vi, arr in zip(model.graph.input, inputs):
            if vi.name in const_idx:
                g.initializer.append(numpy_helper.from_array(arr, vi.name))
            else:
                feeds[vi.name] = arr
        keep = [vi for vi in g.input if vi.name not in const_idx]
        del g.input[:]
        g.input.extend(keep)
        del names
        try:
            mod = onnx_load(m, device=device)
            got = mod.run(feeds)
            plan = mod._any_plan()
            if at_load and (plan.n_nodes or plan.deferred):  # a ggml graph or a host step ran at onnx_run
                folded = False
        except OnnxLimitation as e:
            return Result(case.name, op, "skip", str(e))
        except OnnxError as e:
            return Result(case.name, op, "fail", f"OnnxError: {e}")
        except Exception as e:  # a builder bug: report it, keep going
            return Result(case.name, op, "fail", f"{type(e).__name__}: {e}")
        for vi, want in zip(model.graph.output, expected):
            y = got[vi.name]
            if _ml_dtype(want.dtype) or _ml_dtype(y.dtype):  # bfloat16, float8, int4: the type, then as float32
                if y.dtype != want.dtype:
                    return Result(case.name, op, "fail", f"{vi.name}: dtype {y.dtype}, expected {want.dtype}")
                y, want = y.astype(np.float32), want.astype(np.float32)
            if y.shape != want.shape:
                return Result(case.name, op, "fail", f"{vi.name}: shape {y.shape}, expected {want.shape}")
            if want.dtype.kind in "biu":
                if not np.array_equal(y, want):
                    return Result(case.name, op, "fail", f"{vi.name}: values differ")
            else:
                try:
                    np.testing.assert_allclose(y.astype(np.float64), want.astype(np.float64),
                                               rtol=case.rtol, atol=case.atol)
                except AssertionError as e:
                    lines = [ln for ln in str(e).splitlines() if "Max" in ln]
                    return Result(case.name, op, "fail", f"{vi.name}: " + "; ".join(lines))
    if folded:
        return Result(case.name, op, "folded", "computed at load time")
    return Result(case.name, op, status, detail)


@dataclass
class Table:
    results: list = field(default_factory=list)

    def by_op(self):
        rows = defaultdict(lambda: defaultdict(int))
        for r in self.results:
            rows[r.op][r.status] += 1
        return rows

    def totals(self):
        tot = defaultdict(int)
        for r in self.results:
            tot[r.status] += 1
        return tot


def collect(filter_ops=None):
    from onnx.backend.test.case.node import collect_testcases  # onnx's test data: loaded when run
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    if filter_ops:
        cases = [c for c in cases if case_op(c) in filter_ops]
    return cases
