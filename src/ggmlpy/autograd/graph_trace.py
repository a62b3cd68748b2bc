"""Graph mode's building blocks: tracing a function's primitives (`tracing`), emitting them as ggml
graph nodes (`Sym`, `AutogradGraphBuilder`: the same builders the eager ops use, prims.py), and
running a built graph placed for its device (`CompiledAutogradGraph`). graph_backward.py emits the
backward, graph_mode.py compiles whole training steps.
"""
from __future__ import annotations

import contextlib

import numpy as np

from .._sigint import uninterruptible
from ..graph import CompiledGraph, GraphContext
from ..runtime.pool import shape_of
from ..bindings import ffi
from ..core.checked import checked_lib  # ggml's shape rules checked before each op (no abort)
from ..errors import GGMLError
from ..kernels import enabled as kernels_enabled
from . import prims
from .call import SAVED_KEY
from .engine import Trace, as_f32, check_operands, trace_into
from .rules import DERIVATIVE_RULES

F32 = checked_lib.GGML_TYPE_F32


# -- tracing -------------------------------------------------------------------------------------------
@contextlib.contextmanager
def tracing():
    """Record every primitive applied in the block (recorded or not): (op, inputs, params, out),
    and the tensors read on the host."""
    trace = Trace()
    with trace_into(trace):
        yield trace


# -- emission: primitives build graph nodes instead of running -------------------------------------------
class Sym:
    """A tensor of a graph under construction (its ggml tensor lives in the builder's context)."""

    __slots__ = ("t", "shape", "device_context")

    def __init__(self, t, dc):
        self.t = t
        self.shape = shape_of(t)
        self.device_context = dc


class AutogradGraphBuilder(GraphContext):
    """An autograd graph under construction (graph.GraphContext: `room()` before anything is
    emitted, GraphFull when full, and the caller starts again with a bigger one). Every node is a
    tensor of this context or one of `n_external` tensors that live elsewhere (parameters,
    optimizer state), so a graph of n_tensors + n_external slots cannot overflow."""

    def __init__(self, dc, n_tensors: int = 4096, grads: bool = False, ggml_backward: bool = False,
                 n_external: int = 0):
        super().__init__(n_tensors, n_nodes=n_tensors + n_external + 64, grads=grads)
        self.device_context = dc
        # ggml's own backward (ggml_build_backward_expand) has no rule for OUT_PROD or custom ops
        self.blas = not ggml_backward and dc.blas is not None
        self.kernels = not ggml_backward and dc.backend.is_cpu and kernels_enabled()  # custom ops: CPU only

    def emit(self, op: str, xs, params) -> Sym:
        self.room(64)  # more than any primitive makes (erf, with f32 casts, makes about 20)
        rule = DERIVATIVE_RULES[op]
        ts = [x.t for x in xs]
        check_operands(op, ts, rule.index_inputs)
        blas = self.blas and all(t.type == F32 for t in ts)
        with prims.blas_products(blas), prims.cpu_kernels(self.kernels):  # CompiledAutogradGraph: BLAS products by a scheduler
            return Sym(rule.fwd(self.ctx, *as_f32(self.ctx, ts, rule.stored_inputs), **params), self.device_context)

    def placeholder(self, ggml_type: int, shape) -> Sym:
        t = self.new_tensor(ggml_type, shape)
        checked_lib.ggml_set_input(t)
        return Sym(t, self.device_context)


def saved_of(in_syms, out_sym) -> dict:
    """A node's snapshots in symbolic form; an input's Sym may be None when its rule does not read it."""
    saved = {SAVED_KEY[i]: s for i, s in enumerate(in_syms) if s is not None}
    if out_sym is not None:
        saved["out"] = out_sym
    return saved


# -- running a built graph -------------------------------------------------------------------------------
class CompiledAutogradGraph:
    """A built graph placed for its device (graph.CompiledGraph): bind the inputs, compute, repeat.

    On the CPU, ggml's BLAS backend takes the OUT_PROD products (for MUL_MAT the CPU backend's own
    kernel is the faster one; docs/benchmarks.md) and a one-thread CPU backend the products of many
    small matrices (graph.batched_small: their per-matrix barriers stall on a busy machine). All
    work in host memory, so nothing is copied between them."""

    def __init__(self, builder: AutogradGraphBuilder, inputs: list, dc):
        self.builder = builder
        self.device_context = dc  # its lock is held while computing: the backend keeps scratch state per compute
        self.inputs = inputs  # placeholder ggml tensors, in call order
        backend = dc.backend
        self.compiled = CompiledGraph(builder.graph, backend, blas=dc.blas, blas_ops=(checked_lib.GGML_OP_OUT_PROD,),
                                      one_thread=dc.single_thread_backend if backend.is_cpu else None)
        self.n_nodes = len(self.compiled.nodes)

    @property
    def sched(self):
        return self.compiled.sched

    @property
    def buffer_size(self) -> int:
        """Bytes of the compute buffers ggml allocated for the graph, all backends summed."""
        return self.compiled.buffer_bytes

    def run(self, storages) -> None:
        """Bind the inputs and compute, holding the device's lock throughout."""
        with self.device_context.lock:
            self.device_context.check_usable()  # a released device's backend is freed
            self.bind(storages)
            self.compute()

    def bind(self, storages) -> None:
        self.compiled.bind(self.inputs, storages)

    def compute(self) -> None:
        self.compiled.compute()

    @uninterruptible
    def free(self):
        if getattr(self, "compiled", None) is not None:
            self.compiled.free()
            self.compiled = None

    __del__ = free


def read_scalar(t) -> float:
    out = np.empty(1, dtype=np.float32)
    checked_lib.ggml_backend_tensor_get(t, ffi.from_buffer(out), 0, 4)
    return float(out[0])


def check_no_checkpoint(nodes) -> None:
    if any(n.op is None for n in nodes):
        raise GGMLError("the graph backward path cannot emit a tape holding an ag_checkpoint node: its segment "
                        "is Python code, not a rule. Use backward() for this tape.")


def sized(build, n_prims: int, n_inputs: int):
    """build(n_tensors, n_external) with a builder sized for n_prims primitives, four times
    bigger while it reports GraphFull (a rule that emits more than the estimate)."""
    return GraphContext.retrying(lambda n: build(n, 5 * n_inputs + 64), 48 * n_prims + 1024, "ag_compile: the graph")
