"""Eager ggml ops on numpy arrays, zero-copy, on the CPU backend.

    ggmlpy.eager_numpy.add(x, y)   # numpy in, numpy out, computed by ggml

For a small op the cost of ggml is the set-up, not the arithmetic. Each op
runs a graph built once per (op, parameters, shapes) whose leaf tensors are
pointed at the numpy inputs' own memory and whose output is pointed at a fresh
numpy array: no copies in or out. This is safe because the CPU backend reads
tensors through their data pointers only, and the arrays are held for exactly
the duration of the call. Layout rule: numpy shape (d1, d0) is ggml ne [d0, d1].

Each thread has its own engine (cached graphs and a CPU backend): a cached graph
is re-pointed per call, so two threads sharing one would compute on each
other's arrays.
"""
from __future__ import annotations

import threading

import numpy as np

from ..bindings import ffi
from ..core.checked import checked_lib  # ggml's shape rules checked before each op (no abort)
from ..errors import GGMLError
from .._naming import public_function
from ..core.device import Backend
from ..graph import PlacedGraph
from ..runtime.state import lease
from .rules import DERIVATIVE_RULES

_NULL = ffi.NULL
_F32 = np.dtype(np.float32)


class _OneOpGraph(PlacedGraph):
    """One op's graph: leaves and output re-pointed at numpy memory per call (graph.CompiledGraph
    places any intermediates)."""

    __slots__ = ("graph", "leaves", "out", "out_shape")

    def __init__(self, build, shapes, backend):
        super().__init__(64)
        self.leaves = [self.gctx.new_tensor(checked_lib.GGML_TYPE_F32, s[::-1]) for s in shapes]
        out = build(self.gctx.ctx, *self.leaves)
        if out.view_src != _NULL or out.op == checked_lib.GGML_OP_NONE:
            out = checked_lib.ggml_cont(self.gctx.ctx, out)
        if out.type != checked_lib.GGML_TYPE_F32:
            raise GGMLError("eager_numpy: only f32 results are supported")
        self.out = out
        n = checked_lib.ggml_n_dims(out)
        self.out_shape = tuple(int(out.ne[i]) for i in reversed(range(n)))
        self.gctx.expand([out])
        nodes = self.gctx.nodes()
        if any(p.view_src != _NULL for p in nodes):
            raise GGMLError("eager_numpy: this op needs views, which the CPU fast path does not handle")
        # intermediates (if any) get their own buffer; inputs and output are pointed per call
        scratch = [np.empty(1, np.float32) for _ in self.leaves]
        for leaf, a in zip(self.leaves, scratch):
            leaf.data = ffi.from_buffer(a)
        self.out.data = ffi.from_buffer(np.empty(1, np.float32))
        self.graph = self.gctx.graph  # read by _binary's inlined compute
        self.place(backend, nodes)


class EagerNumpy:
    """A cache of compiled one-op graphs on a single-threaded CPU backend."""

    def __init__(self):
        # small ops: a second thread costs more than it saves
        self.backend = Backend(checked_lib.ggml_backend_init_by_type(checked_lib.GGML_BACKEND_DEVICE_TYPE_CPU, _NULL),
                               "CPU").single_threaded()
        self.plans: dict = {}

    def run(self, op: str, arrays, **params) -> np.ndarray:
        arrs = [a if (type(a) is np.ndarray and a.dtype == _F32 and a.flags.c_contiguous)
                else np.ascontiguousarray(a, dtype=np.float32) for a in arrays]
        key = (op, tuple(params.items()), *[a.shape for a in arrs])
        plan = self.plans.get(key)
        if plan is None:
            plan = self.plans[key] = self._compile(op, arrs, params)
        for leaf, a in zip(plan.leaves, arrs):
            leaf.data = ffi.from_buffer(a)
        out = np.empty(plan.out_shape, np.float32)
        plan.out.data = ffi.from_buffer(out)
        plan.run.compute()
        return out

    def _compile(self, op, arrs, params):
        if op not in DERIVATIVE_RULES:
            raise GGMLError(f"eager_numpy: unknown op {op!r}")
        if any(a.ndim not in (1, 2) or a.size == 0 for a in arrs):
            raise GGMLError("eager_numpy: inputs must be non-empty 1-d or 2-d arrays")
        shapes = [a.shape for a in arrs]
        _check_shapes(op, shapes)
        fwd = DERIVATIVE_RULES[op].fwd
        return _OneOpGraph(lambda ctx, *xs: fwd(ctx, *xs, **params), shapes, self.backend)


def _check_shapes(op: str, shapes) -> None:
    """ggml broadcasts only the second operand of element-wise ops: check before building."""
    if op in ("add", "sub", "mul", "div") and len(shapes) == 2:
        a, b = (tuple(reversed(s)) + (1,) * (4 - len(s)) for s in shapes)
        if not all(db and da % db == 0 for da, db in zip(a, b)):
            raise GGMLError(f"eager_numpy.{op}: shape {shapes[1]} does not broadcast to {shapes[0]}")


_local = threading.local()  # .engine: this thread's EagerNumpy
_free: list = []  # engines of threads that have ended, for the next new thread


def run(op: str, *arrays, **params) -> np.ndarray:
    eng = getattr(_local, "engine", None)
    if eng is None:
        eng = lease(_local, "engine", _free, EagerNumpy)
    return eng.run(op, arrays, **params)


def _binary(op: str):
    """A two-array op with the common case (f32, C-contiguous, graph cached) inlined:
    at this size the Python around the one compute call is most of the cost."""
    from_buffer, empty, f32 = ffi.from_buffer, np.empty, np.float32
    compute = checked_lib.ggml_backend_graph_compute

    def f(x, y) -> np.ndarray:
        eng = getattr(_local, "engine", None)
        if (eng is not None and type(x) is np.ndarray and type(y) is np.ndarray and x.dtype is _F32
                and y.dtype is _F32 and x.flags.c_contiguous and y.flags.c_contiguous):
            plan = eng.plans.get((op, (), x.shape, y.shape))
            if plan is not None:
                a, b = plan.leaves
                a.data = from_buffer(x)
                b.data = from_buffer(y)
                out = empty(plan.out_shape, f32)
                plan.out.data = from_buffer(out)
                if compute(eng.backend.ptr, plan.graph) == 0:
                    return out
        return run(op, x, y)
    return public_function(f, op, f"x {op} y by ggml on the CPU (y broadcasts to x's shape, ggml's rule), zero-copy.")


add, sub, mul = _binary("add"), _binary("sub"), _binary("mul")
