"""Graph mode: a whole training step (forward, backward, optimizer update) as one ggml graph.

Eager ops pay Python and ggml set-up costs per op; ggml is built for whole
graphs. `ag_compile(fn, example_inputs, optimizer)` traces `fn` once, then
emits into one ggml graph:

* the forward pass, with the same builders the eager ops use (prims.py);
* the backward pass, either ggml's own (`ggml_build_backward_expand`) when every
  forward op has a ggml backward, or ggmlpy's rule table: each tape op names
  its VJP rule, and the rules, written with primitives, emit graph nodes
  instead of running eagerly, walked by the one walker (engine.walk, with GraphBackward);
  a checkpointed segment is emitted again for the backward, so its activations are not kept;
* the optimizer update, the nodes the optimizer emits itself (its `graph_update`:
  ggml_opt_step_adamw / ggml_opt_step_sgd, or element-wise nodes), written in place
  into the parameters' own memory, after every other node.

The graph is allocated once with ggml's graph allocator (intermediates share
memory) and re-run while the input shapes stay the same; parameters stay where
they are, inputs are re-pointed per call, only the loss is read back.
`ag_backward_graph(loss)` emits the backward of a recorded tape the same way.
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from .._sigint import uninterruptible
from .. import random as grandom
from ..graph import CompiledGraph, GraphContext
from ..runtime.autograd_state import AUTOGRAD
from ..runtime.pool import shape_of
from ..runtime.state import DTYPE_NAMES, STATE
from ..bindings import ffi
from ..core.checked import lib  # ggml's shape rules checked before each op (no abort)
from ..errors import GGMLError
from ..kernels import enabled as kernels_enabled
from ..tensor import AGTensor, ag_tensor
from ..tensor import _ids as tensor_ids
from . import prims
from .call import SAVED_KEY
from .engine import (GradMap, Trace, _add_into_grad, as_f32, check_index_values, check_operands, keep_mask_values,
                     trace_into, walk)
from .rules import RULES
from .tape import Node, no_grad

if TYPE_CHECKING:
    from ..optim.graph_update import GraphUpdate
    from ..optim.optimizers import Optimizer

_NULL = ffi.NULL
F32 = lib.GGML_TYPE_F32

# What ggml_build_backward_expand can differentiate without tripping one of its assertions
# (which abort the process): ops with a ggml backward, under the conditions checked in
# _ggml_can_differentiate. Anything else makes ag_compile use ggmlpy's own rule table.
GGML_BACKWARD_OPS = {getattr(lib, "GGML_OP_" + n) for n in (
    "NONE ADD SUB MUL DIV SQR SQRT LOG SUM SUM_ROWS MEAN REPEAT MUL_MAT SCALE CONT RESHAPE TRANSPOSE").split()}
GGML_BACKWARD_UNARY = {getattr(lib, "GGML_UNARY_OP_" + n) for n in "ABS SGN NEG STEP RELU SILU EXP".split()}
_SAME_SHAPE_OPS = {lib.GGML_OP_SUB, lib.GGML_OP_MUL, lib.GGML_OP_DIV}  # no broadcast backward in ggml


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

    __slots__ = ("t", "shape", "dc")

    def __init__(self, t, dc):
        self.t = t
        self.shape = shape_of(t)
        self.dc = dc


class Builder(GraphContext):
    """An autograd graph under construction (graph.GraphContext: `room()` before anything is
    emitted, GraphFull when full, and the caller starts again with a bigger one). Every node is a
    tensor of this context or one of `n_external` tensors that live elsewhere (parameters,
    optimizer state), so a graph of n_tensors + n_external slots cannot overflow."""

    def __init__(self, dc, n_tensors: int = 4096, grads: bool = False, ggml_backward: bool = False,
                 n_external: int = 0):
        super().__init__(n_tensors, n_nodes=n_tensors + n_external + 64, grads=grads)
        self.dc = dc
        # ggml's own backward (ggml_build_backward_expand) has no rule for OUT_PROD or custom ops
        self.blas = not ggml_backward and dc.blas is not None
        self.kernels = not ggml_backward and dc.backend.is_cpu and kernels_enabled()  # custom ops: CPU only

    def emit(self, op: str, xs, params) -> Sym:
        self.room(64)  # more than any primitive makes (erf, with f32 casts, makes about 20)
        rule = RULES[op]
        ts = [x.t for x in xs]
        check_operands(op, ts, rule.index_inputs)
        blas = self.blas and all(t.type == F32 for t in ts)
        with prims.blas_products(blas), prims.cpu_kernels(self.kernels):  # _Plan: BLAS products by a scheduler
            return Sym(rule.fwd(self.ctx, *as_f32(self.ctx, ts), **params), self.dc)

    def placeholder(self, ggml_type: int, shape) -> Sym:
        t = self.new_tensor(ggml_type, shape)
        lib.ggml_set_input(t)
        return Sym(t, self.dc)


def _saved(in_syms, out_sym) -> dict:
    """A node's snapshots in symbolic form; an input's Sym may be None when its rule does not read it."""
    saved = {SAVED_KEY[i]: s for i, s in enumerate(in_syms) if s is not None}
    if out_sym is not None:
        saved["out"] = out_sym
    return saved


class GraphBackward:
    """How engine.walk computes when compiling: every primitive becomes a node of `builder`'s graph.

    With `in_order`, each gradient joins the graph as soon as it is made, so ggml computes in the
    walker's order: a checkpointed segment's recomputation lands right before the gradients that
    read it, and ggml's allocator (which frees a tensor after its last reader) never holds the
    first run's activations across the backward pass."""

    def __init__(self, builder: Builder, in_order: bool = False, on_final=None):
        self.b, self.in_order = builder, in_order
        self.on_final = on_final  # (id, gradient) for a wanted id once no node left adds to it
        self.readers: dict = {}  # wanted id -> outer nodes reading it that are still to be walked
        self.watched: set = set()  # those outer nodes (a segment's inner copies are not counted)

    def count_readers(self, nodes, wanted) -> None:
        for node in nodes:
            ids = {tid for tid, _, _ in node.inputs} & wanted
            if ids:
                self.watched.add(id(node))
                for tid in ids:
                    self.readers[tid] = self.readers.get(tid, 0) + 1

    def node_done(self, node, grads) -> None:
        """Every reader of a wanted id walked: its gradient is final, and every graph node that
        reads the id has joined the graph (in_order): it may be updated in place now."""
        if self.on_final is None or id(node) not in self.watched:
            return
        for tid in {tid for tid, _, _ in node.inputs}:
            left = self.readers.get(tid)
            if left is None:
                continue
            self.readers[tid] = left - 1
            if left == 1 and tid in grads:
                self.on_final(tid, grads[tid])

    def ap(self, op, *xs, **params) -> Sym:
        return self.b.emit(op, list(xs), params)

    @staticmethod
    def slice_fast_path(node) -> bool:
        return True

    def acc_into(self, cur: Sym, g: Sym, start) -> Sym:
        self.b.room(2)
        return Sym(prims.acc_into(self.b.ctx, cur.t, g.t, start), self.b.dc)

    def emitted(self, g: Sym) -> None:
        if self.in_order:
            lib.ggml_build_forward_expand(self.b.graph, g.t)


def emit_backward(builder: Builder, entries, seed: Sym, loss_id: int, wanted: set, segments=(),
                  on_final=None) -> dict:
    """ggmlpy's rule table as graph nodes, by the one walker (engine.walk): symbolic gradients of
    loss for the ids in `wanted`.

    `entries` are (op, input ids, input Syms, params, out id, out Sym, input shapes), in forward
    order; an input's Sym may be None when its rule does not read it. `segments`: (start, end)
    ranges of entries that ag_checkpoint ran; each becomes one node whose backward emits the
    segment's forward again from its inputs and walks that copy, so no gradient reads the first
    run's activations inside it. The last one is walked as it ran: its backward follows the loss's
    at once, so a replay would only recreate what the allocator still holds. `on_final(id, gradient)` hears of each wanted gradient as soon
    as it is final (the graph then computes in the walker's order), so an optimizer can update
    that parameter right away and its gradient need not wait for the others."""
    needs = set(wanted)
    for op, in_ids, _, _, out_id, _, _ in entries:  # which outputs lie on a path from a wanted input
        if any(i in needs for i in in_ids):
            needs.add(out_id)
    how = GraphBackward(builder, in_order=bool(segments) or on_final is not None, on_final=on_final)
    nodes, k = [], 0
    # The last segment's backward starts as soon as the loss's does: a replay would recreate what
    # the allocator still holds, for no memory saved, so it is walked as it ran.
    for start, end in _outermost(segments)[:-1]:
        nodes += [_node(e, needs) for e in entries[k:start]]
        nodes.append(_segment_node(entries[start:end], needs, how))
        k = end
    nodes += [_node(e, needs) for e in entries[k:]]
    how.count_readers(nodes, set(wanted))
    grads = {loss_id: seed}
    walk(nodes, grads, {}, how=how)
    return {tid: g for tid, g in grads.items() if tid in wanted}


def _node(entry, needs) -> Node:
    op, in_ids, in_syms, params, out_id, out_sym, in_shapes = entry
    return Node(op, out_id, [(i, i in needs, None) for i in in_ids], _saved(in_syms, out_sym), params, in_shapes)


def _outermost(segments) -> list:
    """The segments not inside another (an inner one is recomputed as part of its outer one)."""
    out: list = []
    for start, end in sorted(segments, key=lambda se: (se[0], -se[1])):
        if out and start < out[-1][1]:
            continue
        if end > start:
            out.append((start, end))
    return out


def _segment_node(seg, needs, how: GraphBackward) -> Node:
    """One node for a checkpointed segment: its inputs are what it reads from outside (the caller's
    tensors, parameters), its backward re-emits the segment from them and walks the copy."""
    made = {e[4] for e in seg}
    ext = list(dict.fromkeys(i for e in seg for i in e[1] if i not in made))

    def replay(g, grads, leaves):
        remap: dict = {}
        inner = []
        for op, in_ids, in_syms, params, out_id, _, in_shapes in seg:
            xs = [remap.get(i, x) for i, x in zip(in_ids, in_syms)]
            out = remap[out_id] = how.ap(op, *xs, **params)
            inner.append(Node(op, out_id, [(i, i in needs, None) for i in in_ids], _saved(xs, out), params,
                              in_shapes))
        seg_grads = {seg[-1][4]: g}
        walk(inner, seg_grads, {}, how=how)
        return [seg_grads.get(i) for i in ext]

    return Node(None, seg[-1][4], [(i, i in needs, None) for i in ext], {}, {}, (), backward_fn=replay)


# -- running a built graph -------------------------------------------------------------------------------
class _Plan:
    """A built graph placed for its device (graph.CompiledGraph): bind the inputs, compute, repeat.

    On the CPU, ggml's BLAS backend takes the OUT_PROD products (for MUL_MAT the CPU backend's own
    kernel is the faster one; docs/benchmarks.md) and a one-thread CPU backend the products of many
    small matrices (graph.batched_small: their per-matrix barriers stall on a busy machine). All
    work in host memory, so nothing is copied between them."""

    def __init__(self, builder: Builder, inputs: list, dc):
        self.builder = builder
        self.dc = dc  # its lock is held while computing: the backend keeps scratch state per compute
        self.inputs = inputs  # placeholder ggml tensors, in call order
        backend = dc.backend
        self.compiled = CompiledGraph(builder.graph, backend, blas=dc.blas, blas_ops=(lib.GGML_OP_OUT_PROD,),
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
        with self.dc.lock:
            self.dc.check_usable()  # a released device's backend is freed
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


def _read_scalar(t) -> float:
    out = np.empty(1, dtype=np.float32)
    lib.ggml_backend_tensor_get(t, ffi.from_buffer(out), 0, 4)
    return float(out[0])


def _check_no_checkpoint(nodes) -> None:
    if any(n.op is None for n in nodes):
        raise GGMLError("the graph backward path cannot emit a tape holding an ag_checkpoint node: its segment "
                        "is Python code, not a rule. Use backward() for this tape.")


def _sized(build, n_prims: int, n_inputs: int):
    """build(n_tensors, n_external) with a builder sized for n_prims primitives, four times
    bigger while it reports GraphFull (a rule that emits more than the estimate)."""
    return GraphContext.retrying(lambda n: build(n, 5 * n_inputs + 64), 48 * n_prims + 1024, "ag_compile: the graph")


# -- ag_backward_graph: the backward of a recorded tape, as one graph ---------------------------------------
def ag_backward_graph(loss: AGTensor) -> "GradMap":
    """Like backward(loss), but the whole backward pass runs as one ggml graph."""
    if not isinstance(loss, AGTensor):
        raise GGMLError(f"ag_backward_graph: expected an ag tensor, got {type(loss).__name__}")
    nodes = AUTOGRAD.tape_nodes
    _check_no_checkpoint(nodes)
    plan, outs, leaves = _sized(lambda n, ext: _backward_plan(loss, nodes, n, ext), len(nodes),
                                sum(len(n.inputs) for n in nodes))
    dc = loss.dc
    result = GradMap()
    for tid, st in outs.items():
        dict.__setitem__(result, tid, AGTensor(st, st.spec[1], dc, is_leaf=False))
    with no_grad():
        for tid, leaf in leaves.items():
            if tid in result:
                _add_into_grad(leaf, result[tid])
    return result


def _backward_plan(loss, nodes, n_tensors, n_external):
    """The backward graph of `nodes`, computed: (plan, {leaf id: gradient storage}, leaves)."""
    dc = loss.dc
    b = Builder(dc, n_tensors, n_external=n_external)
    syms, leaves, storages, placeholders = {}, {}, [], []

    def sym_of(t: AGTensor) -> Sym:  # a snapshot: bound as an input of the graph
        s = syms.get(t.id)
        if s is None:
            s = syms[t.id] = b.placeholder(t.st.type, t.shape)
            placeholders.append(s.t)
            storages.append(t.st)
        return s

    entries = []
    for n in nodes:
        in_syms = []
        for i, (tid, _, leaf) in enumerate(n.inputs):
            saved = n.saved.get(f"x{i}")
            in_syms.append(sym_of(saved) if saved is not None else None)
            if leaf is not None:
                leaves[tid] = leaf
        out_sym = sym_of(n.out) if "out" in n.saved else None
        entries.append((n.op, [tid for tid, _, _ in n.inputs], in_syms, n.params, n.out_id, out_sym, n.in_shapes))
    wanted = set(leaves)
    seed = b.emit("fill", [sym_of(loss)], {"value": 1.0})
    grads = emit_backward(b, entries, seed, loss.id, wanted)
    outs = {}
    for tid, gs in grads.items():
        b.room(2)
        st = dc.pass_pool.alloc(F32, gs.shape)
        final = lib.ggml_cpy(b.ctx, gs.t, st.t)  # into pass-pool memory the caller can keep
        lib.ggml_build_forward_expand(b.graph, final)
        outs[tid] = st
    if not outs:  # no leaf gets a gradient: an empty graph (ggml would compute it from freed memory)
        return None, outs, leaves
    plan = _Plan(b, placeholders, dc)
    plan.run(storages)
    return plan, outs, leaves


# -- ag_compile: forward, backward and the optimizer step as one graph --------------------------------------------
class CompiledStep:
    """A training (or evaluation) step compiled into one ggml graph per input signature."""

    def __init__(self, fn, example_inputs, optimizer=None, backward: str = "auto", clip_grad: float | None = None,
                 memory_budget: int | None = None):
        if not callable(fn):
            raise GGMLError("ag_compile: fn must be callable")
        if memory_budget is not None and (isinstance(memory_budget, bool) or not isinstance(memory_budget, int)
                                          or memory_budget <= 0):
            raise GGMLError(f"ag_compile: memory_budget must be a positive number of bytes or None, "
                            f"got {memory_budget!r}")
        self.memory_budget = memory_budget
        self.plan = None  # with memory_budget: what the planner chose (see _plan_checkpoints)
        if backward not in ("auto", "ggml", "rules"):
            raise GGMLError("ag_compile: backward must be 'auto', 'ggml' or 'rules'")
        if clip_grad is not None and (isinstance(clip_grad, bool) or not isinstance(clip_grad, (int, float))
                                      or not clip_grad > 0):
            raise GGMLError(f"ag_compile: clip_grad must be a positive number or None, got {clip_grad!r}")
        if clip_grad is not None and optimizer is None:
            raise GGMLError("ag_compile: clip_grad clips the gradients before an optimizer step; give the optimizer")
        self.fn, self.optimizer, self.backward_mode = fn, optimizer, backward
        self.clip_grad = None if clip_grad is None else float(clip_grad)
        self.plans: dict = {}
        self.last_backward = None
        self._updater = None  # one per step, not per graph: every graph reads its hyperparameters
        self.checkpoints = 0  # ag_checkpoint segments in fn: recomputed in the backward part of the graph
        self.segments: list = []  # their (start, end) ranges among the traced primitives
        self._lock = threading.RLock()  # calls from several threads run one after another
        if isinstance(example_inputs, AGTensor) or not isinstance(example_inputs, (list, tuple)):
            raise GGMLError("ag_compile: example_inputs must be a list of tensors (or numpy arrays)")
        self._build(_as_inputs(example_inputs))

    # public: call with AGTensors (or numpy arrays) of the example inputs' shapes
    def __call__(self, *inputs) -> float:
        ins = _as_inputs(inputs)
        with self._lock:
            plan = self.plan_for(ins)
            for pos, op, limit in plan.index_checks:  # ggml's gathers read out of range: check first
                check_index_values(op, ins[pos]._read(), limit)
            if self.optimizer is not None:
                self.optimizer.t += 1
                self._updater.write_hyper()
            for mask, shape, rate in plan.masks:  # in the eager forward's order: the same draws
                mask.data = keep_mask_values(shape, rate)
            plan.run([x.st for x in ins] + [m.st for m, _, _ in plan.masks])
            return _read_scalar(plan.loss)

    def plan_for(self, ins):
        """The graph for these inputs' shapes and types, traced and compiled on first use (a
        GGMLError, with nothing changed, where fn cannot be compiled)."""
        plan = self.plans.get(tuple((x.shape, x.st.type) for x in ins))
        return plan if plan is not None else self._build(ins)

    @property
    def buffer_bytes(self) -> int:
        """The compute buffer ggml allocated for the step (all backends summed; the largest, with
        several input shapes): what checkpointing saves."""
        return max((p.buffer_size for p in self.plans.values()), default=0)

    compute_buffer_bytes = buffer_bytes

    def _build(self, ins):
        # The same tensor passed twice is traced as two inputs: each argument its own placeholder.
        seen: set = set()
        ins = [x if x.id not in seen and not seen.add(x.id) else AGTensor(x.st, x.shape, x.dc, x.requires_grad)
               for x in ins]
        dc = ins[0].dc if ins else STATE.context()
        start_id = next(tensor_ids)  # tensors made from here on were created by fn while tracing
        rng = grandom.get_rng_state()
        try:
            with no_grad(), tracing() as trace:
                out = self.fn(*ins)
        finally:
            grandom.set_rng_state(rng)  # tracing is not a step: numbers a dropout drew go back
        self.checkpoints = len(trace.segments)
        self.segments = list(trace.segments)
        if trace.host_reads:
            raise GGMLError("ag_compile: fn reads tensor values on the host while being traced (.numpy(), "
                            ".item(), a check of indices?); what it does with them would be frozen into the "
                            "graph. Keep such code out of fn, or run it eagerly.")
        if not isinstance(out, AGTensor) or out.shape != (1, 1):
            raise GGMLError("ag_compile: fn must return a [1, 1] loss tensor")
        build = lambda: _sized(lambda n, ext: self._emit(ins, trace, out, start_id, dc, n, ext),  # noqa: E731
                               len(trace), sum(len(inputs) for _, inputs, _, _ in trace))
        plan = build() if self.memory_budget is None else self._plan_checkpoints(trace, ins, build)
        self.plans[tuple((x.shape, x.st.type) for x in ins)] = plan
        return plan

    def _plan_checkpoints(self, trace, ins, build):
        """The graph whose compute buffer fits memory_budget at the least recomputation.

        Candidates cut the traced primitives where one value alone crosses (a layer's output,
        a block's residual stream: _cuts), and recompute the first m of the segments j cuts
        long; each is built and ggml's allocator says its buffer (so the bytes reported are
        exact, not a model of them). They are tried cheapest first, the first that fits wins."""
        if self.segments:
            raise GGMLError("ag_compile: memory_budget plans the checkpoints itself; remove ag_checkpoint from fn, "
                            "or drop memory_budget")
        cuts = _cuts(trace)
        spans = list(zip(cuts, cuts[1:]))[:-1]  # the last span ends in the loss: nothing to free after it
        candidates = {(): 0}
        for j in range(1, len(spans) + 1):
            segs = [(spans[i][0], spans[min(i + j, len(spans)) - 1][1]) for i in range(0, len(spans), j)]
            for m in range(1, len(segs) + 1):
                chosen = tuple(segs[:m])
                candidates.setdefault(chosen, sum(e - s for s, e in chosen[:-1]))  # the last is not replayed
        smallest = None
        for segments, cost in sorted(candidates.items(), key=lambda kv: (kv[1], len(kv[0]))):
            self.segments = list(segments)
            plan = build()
            size = plan.buffer_size
            if size <= self.memory_budget:
                self.checkpoints = len(segments)
                self.plan = {"segments": list(segments), "recomputed_primitives": cost, "primitives": len(trace),
                             "predicted_bytes": size, "allocated_bytes": plan.buffer_size,
                             "budget": self.memory_budget}
                return plan
            smallest = size if smallest is None else min(smallest, size)
            plan.free()
        self.segments = []
        raise GGMLError(f"ag_compile: no checkpoint plan fits memory_budget={self.memory_budget} bytes; the "
                        f"smallest compute buffer reachable is {smallest} bytes")

    def _emit(self, ins, trace, out, start_id, dc, n_tensors, n_external):
        """The traced step as one graph: forward, backward, optimizer update."""
        self._updated: set = set()  # parameters whose update this graph already holds
        self._rows: dict = {}  # the hyper-parameters as rows, made once in this graph (fused.scalar_rows)
        in_ids = {x.id: i for i, x in enumerate(ins)}
        trained = {p.id for p in self.optimizer.params} if self.optimizer is not None else set()
        b = Builder(dc, n_tensors, grads=True, ggml_backward=self.backward_mode == "ggml",
                    n_external=n_external)
        placeholders = [b.placeholder(x.st.type, x.shape) for x in ins]
        # dropout masks: inputs too, drawn again at every call (engine.keep_mask)
        randoms = {t.id: (b.placeholder(t.st.type, t.shape), shape, rate) for t, shape, rate in trace.random_inputs}
        syms, params = {}, {}

        by_storage = {id(x.st): placeholders[i] for i, x in enumerate(ins)}  # for aliases (make_dual's)

        def sym_of(t: AGTensor) -> Sym:
            if t.id in syms:
                return syms[t.id]
            if t.id in in_ids:
                return placeholders[in_ids[t.id]]
            if id(t.st) in by_storage:  # a new tensor over a traced value's memory: that value
                return by_storage[id(t.st)]
            if t.id in randoms:
                return randoms[t.id][0]
            if t.id > start_id:
                raise GGMLError("ag_compile: fn made a tensor from host data while being traced (a dropout "
                                "mask, or class indices turned into one-hot targets?); such a tensor would be "
                                "frozen into the graph. Pass it as an input instead.")
            if t.st.pool.kind != "persistent":
                raise GGMLError("ag_compile: fn reads a tensor from the pass pool, which the next tape "
                                "would free; use persistent tensors (ag_tensor/ag_param) or inputs")
            s = syms[t.id] = Sym(t.st.t, dc)  # parameters and constants: used where they live
            if t.requires_grad and t.id in trained:  # parameters the optimizer does not own stay fixed
                params[t.id] = t
                # flagged before the forward graph is expanded: ggml's backward looks for
                # parameters among the graph's nodes, and only flagged tensors become nodes
                lib.ggml_set_param(t.st.t)
            return s

        entries, index_checks = [], []
        for op, inputs, prm, o in trace:
            rule = RULES[op]
            if rule.index_bound is not None:  # indices fed by an input are checked at every call
                limit = rule.index_bound(prm, [x.shape for x in inputs])
                index_checks += [(in_ids[inputs[i].id], op, limit) for i in rule.index_inputs if inputs[i].id in in_ids]
            in_syms = [sym_of(x) for x in inputs]
            out_sym = b.emit(op, in_syms, prm)
            syms[o.id] = by_storage[id(o.st)] = out_sym
            entries.append((op, [x.id for x in inputs], in_syms, prm, o.id, out_sym, tuple(x.shape for x in inputs)))
        if out.id not in syms:
            raise GGMLError("ag_compile: the loss was not computed by ag ops inside fn")
        loss = syms[out.id].t
        lib.ggml_set_output(loss)
        lib.ggml_build_forward_expand(b.graph, loss)
        grads = {}
        if self.optimizer is not None:
            if not params:
                raise GGMLError("ag_compile: fn uses no parameters (ag_param) to optimise")
            grads = self._emit_backward(b, entries, syms[out.id], out.id, params)
            self._emit_update(b, params, grads)
        plan = _Plan(b, [p.t for p in placeholders] + [r[0].t for r in randoms.values()], dc)
        plan.loss = loss
        plan.index_checks = index_checks
        # one persistent tensor per mask, refilled from the random stream before each run
        plan.masks = [(ag_tensor(np.zeros(ph.shape), device=dc.spec, dtype=DTYPE_NAMES[ph.t.type]), shape, rate)
                      for ph, shape, rate in randoms.values()]
        return plan

    def _emit_backward(self, b, entries, loss_sym, loss_id, params):
        # On the CPU backend, ggml's backward turns each weight gradient into OUT_PROD, whose
        # kernel is 2.3x slower than the rule table's transposes plus MUL_MAT (299 against
        # 129 us at 256^3; the whole 12-layer step 11.0 against 7.6 ms): "auto" keeps the rules there.
        prefer_ggml = self.backward_mode == "auto" and not b.dc.backend.is_cpu
        use_ggml = self.backward_mode == "ggml" or (prefer_ggml and _ggml_can_differentiate(b))
        if self.backward_mode == "ggml" and not _ggml_can_differentiate(b):
            raise GGMLError("ag_compile: ggml has no backward for some op of this graph; use backward='rules'")
        self.last_backward = "ggml" if use_ggml else "rules"
        if use_ggml:
            return _ggml_backward(b, loss_sym, params)
        seed = b.emit("fill", [loss_sym], {"value": 1.0})
        early = None
        if self.optimizer is not None and self.clip_grad is None:  # clipping needs every gradient first
            early = lambda tid, g: self._emit_param_update(b, tid, params[tid], g)  # noqa: E731
        return emit_backward(b, entries, seed, loss_id, set(params), self.segments, on_final=early)

    def _emit_param_update(self, b, tid, p, g) -> None:
        """p's optimizer step as graph nodes, expanded now: after every node that reads p."""
        if self._updater is None:
            self._updater = _graph_update(self.optimizer, b.dc)
        b.room(48)
        for t in self._updater.emit(b.ctx, p, g.t, self._rows):
            lib.ggml_build_forward_expand(b.graph, t)
        self._updated.add(tid)

    def _emit_update(self, b, params, grads):
        """The optimizer's step for the parameters not updated during the backward (all of them
        with clipping, or ggml's own backward), expanded after everything that reads a parameter."""
        updated = self._updated
        # Every gradient first: one computed after another parameter's in-place update
        # would read the new value.
        for tid, g in grads.items():
            if tid not in updated:
                lib.ggml_build_forward_expand(b.graph, g.t)
        if self.clip_grad is not None:
            grads = _clip_by_global_norm(b, grads, self.clip_grad)
        for tid, p in params.items():
            g = grads.get(tid)
            if g is not None and tid not in updated:
                self._emit_param_update(b, tid, p, g)


def _graph_update(optimizer, dc) -> GraphUpdate:
    """The optimizer's update as graph nodes: optim/ sits above autograd, so the compiler asks the
    optimizer it is handed for its graph form (optim.graph_update.GraphUpdate's two calls)."""
    make = getattr(optimizer, "graph_update", None)
    if make is None:
        raise GGMLError(f"ag_compile: no graph form for {type(optimizer).__name__}")
    return make(dc)


def _clip_by_global_norm(b: Builder, grads: dict, max_norm: float) -> dict:
    """The gradients clipped by their global L2 norm, as graph nodes (prims.clip_by_global_norm:
    the rule clip_grad_norm applies eagerly, and PyTorch's clip_grad_norm_)."""
    b.room(2 * len(grads) + 24)
    _, scaled = prims.clip_by_global_norm(b.ctx, [g.t for g in grads.values()], max_norm)
    return {tid: Sym(t, b.dc) for tid, t in zip(grads, scaled)}


def _as_inputs(xs) -> list:
    """Tensors as they are; numpy arrays (and numbers) uploaded once (in the default float dtype:
    pass indices as ag_tensor(..., dtype="i32"))."""
    return [x if isinstance(x, AGTensor) else ag_tensor(x) for x in xs]


def _ggml_can_differentiate(b: Builder) -> bool:
    n = lib.ggml_graph_n_nodes(b.graph)
    uses: dict = {}
    for i in range(n):
        p = lib.ggml_graph_node(b.graph, i)
        for j in range(10):
            src = p.src[j]
            if src != _NULL and src.flags & lib.GGML_TENSOR_FLAG_PARAM:
                key = int(ffi.cast("uintptr_t", src))
                uses[key] = uses.get(key, 0) + 1
                # ggml sums a parameter's gradients as transposed views, which its CPU add
                # kernel cannot read: a parameter used twice takes the rule-table path
                if uses[key] > 1:
                    return False
        if p.type != F32:
            return False
        if p.op == lib.GGML_OP_UNARY:
            if lib.ggml_get_unary_op(p) not in GGML_BACKWARD_UNARY:
                return False
        elif p.op not in GGML_BACKWARD_OPS:
            return False
        if p.op in _SAME_SHAPE_OPS and list(p.src[0].ne) != list(p.src[1].ne):
            return False
        if p.op == lib.GGML_OP_MUL_MAT and (p.src[0].ne[2] != 1 or p.src[1].ne[2] != 1 or p.src[0].ne[3] != 1):
            return False
        # CONT's backward asserts on non-contiguous gradients; the one safe pattern here is a
        # weight's cont(transpose(W)) feeding a matrix product.
        if p.op == lib.GGML_OP_CONT:
            src = p.src[0]
            if src.op != lib.GGML_OP_TRANSPOSE or src.src[0].op != lib.GGML_OP_NONE:
                return False
    return True


def _ggml_backward(b: Builder, loss_sym: Sym, params: dict) -> dict:
    """ggml's own reverse mode over the forward graph built so far."""
    lib.ggml_set_loss(loss_sym.t)
    n = lib.ggml_graph_n_nodes(b.graph)
    b.room(12 * n + 64)  # ggml's backward makes a few tensors per node (gradients, accumulators)
    accs = ffi.new("struct ggml_tensor *[]", n)
    one = b.dc.persistent.alloc(F32, (1, 1))  # d loss / d loss, kept alive by the builder
    b.dc.sync()  # a recycled buffer: queued ops may still read it
    lib.ggml_backend_tensor_set(one.t, ffi.new("float *", 1.0), 0, 4)
    b.keep = [one]
    for i in range(n):
        if lib.ggml_graph_node(b.graph, i) == loss_sym.t:
            accs[i] = _reshape_like(b, one.t, loss_sym.t)
    lib.ggml_build_backward_expand(b.ctx, b.graph, accs)
    out = {}
    for tid, p in params.items():
        g = lib.ggml_graph_get_grad(b.graph, p.st.t)
        if g != _NULL:
            if not lib.ggml_is_contiguous(g):  # e.g. a transposed view: the optimizer kernels need rows
                g = lib.ggml_cont(b.ctx, g)
            out[tid] = Sym(g, b.dc)
    return out


def _reshape_like(b, t, like):
    return t if list(t.ne) == list(like.ne) else lib.ggml_reshape_4d(b.ctx, t, *[int(x) for x in like.ne])


def ag_compile(fn: Callable[..., AGTensor], example_inputs: Sequence[AGTensor | np.ndarray],
               optimizer: Optimizer | None = None, backward: str = "auto",
               clip_grad: float | None = None, memory_budget: int | None = None) -> CompiledStep:
    """Compile fn (inputs -> [1,1] loss) into one ggml graph: forward, backward and, if an
    optimizer is given, its update (after clipping the gradients' global L2 norm to `clip_grad`,
    as clip_grad_norm does, when given). Returns a callable that runs a step and returns the loss.

    ag_checkpoint segments in fn are recomputed in the graph's backward part. `memory_budget`
    (bytes): choose the segments to recompute so that the step's compute buffer fits, at the least
    recomputation, with no ag_checkpoint written by hand; `step.plan` says what was chosen, and a
    budget below the smallest reachable buffer is a GGMLError naming it. `step.buffer_bytes` is
    the compute buffer ggml allocated."""
    return CompiledStep(fn, example_inputs, optimizer, backward, clip_grad, memory_budget)


def _cuts(trace) -> list:
    """Positions k in the trace (0 and len(trace) included) where exactly one value made before k
    is read at k or later, and it is the output of primitive k - 1: a checkpointed segment between
    two cuts has one input from the segments before and one output to those after."""
    last_read: dict = {}
    made_at: dict = {}
    for k, (_, inputs, _, out) in enumerate(trace):
        for x in inputs:
            last_read[x.id] = k
        made_at[out.id] = k
    crossing: dict = {}  # value id -> still read later, as k advances
    cuts = [0]
    for k, (_, _, _, out) in enumerate(trace[:-1]):
        if last_read.get(out.id, -1) > k:
            crossing[out.id] = last_read[out.id]
        for vid in [v for v, until in crossing.items() if until <= k]:
            del crossing[vid]
        if len(crossing) == 1 and out.id in crossing:
            cuts.append(k + 1)
    cuts.append(len(trace))
    return sorted(set(cuts))
