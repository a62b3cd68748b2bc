"""Graph mode: a whole training step (forward, backward, optimizer update) as one ggml graph
(`ag_compile`; the tracing and emission it uses: graph_trace.py, the backward: graph_backward.py).

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
`ag_backward_graph(loss)` (graph_backward.py) emits the backward of a recorded tape the same way.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from .. import random as grandom
from ..runtime.state import DTYPE_NAMES, STATE
from ..core.checked import checked_lib  # ggml's shape rules checked before each op (no abort)
from ..errors import GGMLError
from ..tensor import AGTensor, ag_tensor
from ..tensor import _ids as tensor_ids
from . import prims
from .engine import check_index_values, keep_mask_values
from .rules import DERIVATIVE_RULES
from .tape import no_grad
from .graph_backward import emit_backward, ggml_backward, ggml_can_differentiate
from .graph_trace import AutogradGraphBuilder, CompiledAutogradGraph, Sym, read_scalar, sized, tracing

if TYPE_CHECKING:
    from ..optim.graph_update import GraphUpdate
    from ..optim.optimizers import Optimizer



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
            plan.run([x.storage for x in ins] + [m.storage for m, _, _ in plan.masks])
            return read_scalar(plan.loss)

    def plan_for(self, ins):
        """The graph for these inputs' shapes and types, traced and compiled on first use (a
        GGMLError, with nothing changed, where fn cannot be compiled)."""
        plan = self.plans.get(tuple((x.shape, x.storage.type) for x in ins))
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
        ins = [x if x.id not in seen and not seen.add(x.id) else AGTensor(x.storage, x.shape, x.device_context, x.requires_grad)
               for x in ins]
        dc = ins[0].device_context if ins else STATE.context()
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
        build = lambda: sized(lambda n, ext: self._emit(ins, trace, out, start_id, dc, n, ext),  # noqa: E731
                               len(trace), sum(len(inputs) for _, inputs, _, _ in trace))
        plan = build() if self.memory_budget is None else self._plan_checkpoints(trace, ins, build)
        self.plans[tuple((x.shape, x.storage.type) for x in ins)] = plan
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
        b = AutogradGraphBuilder(dc, n_tensors, grads=True, ggml_backward=self.backward_mode == "ggml",
                    n_external=n_external)
        placeholders = [b.placeholder(x.storage.type, x.shape) for x in ins]
        # dropout masks: inputs too, drawn again at every call (engine.keep_mask)
        randoms = {t.id: (b.placeholder(t.storage.type, t.shape), shape, rate) for t, shape, rate in trace.random_inputs}
        syms, params = {}, {}

        by_storage = {id(x.storage): placeholders[i] for i, x in enumerate(ins)}  # for aliases (make_dual's)

        def sym_of(t: AGTensor) -> Sym:
            if t.id in syms:
                return syms[t.id]
            if t.id in in_ids:
                return placeholders[in_ids[t.id]]
            if id(t.storage) in by_storage:  # a new tensor over a traced value's memory: that value
                return by_storage[id(t.storage)]
            if t.id in randoms:
                return randoms[t.id][0]
            if t.id > start_id:
                raise GGMLError("ag_compile: fn made a tensor from host data while being traced (a dropout "
                                "mask, or class indices turned into one-hot targets?); such a tensor would be "
                                "frozen into the graph. Pass it as an input instead.")
            if t.storage.pool.kind != "persistent":
                raise GGMLError("ag_compile: fn reads a tensor from the pass pool, which the next tape "
                                "would free; use persistent tensors (ag_tensor/ag_param) or inputs")
            s = syms[t.id] = Sym(t.storage.t, dc)  # parameters and constants: used where they live
            if t.requires_grad and t.id in trained:  # parameters the optimizer does not own stay fixed
                params[t.id] = t
                # flagged before the forward graph is expanded: ggml's backward looks for
                # parameters among the graph's nodes, and only flagged tensors become nodes
                checked_lib.ggml_set_param(t.storage.t)
            return s

        entries, index_checks = [], []
        for op, inputs, prm, o in trace:
            rule = DERIVATIVE_RULES[op]
            if rule.index_bound is not None:  # indices fed by an input are checked at every call
                limit = rule.index_bound(prm, [x.shape for x in inputs])
                index_checks += [(in_ids[inputs[i].id], op, limit) for i in rule.index_inputs if inputs[i].id in in_ids]
            in_syms = [sym_of(x) for x in inputs]
            out_sym = b.emit(op, in_syms, prm)
            syms[o.id] = by_storage[id(o.storage)] = out_sym
            entries.append((op, [x.id for x in inputs], in_syms, prm, o.id, out_sym, tuple(x.shape for x in inputs)))
        if out.id not in syms:
            raise GGMLError("ag_compile: the loss was not computed by ag ops inside fn")
        loss = syms[out.id].t
        checked_lib.ggml_set_output(loss)
        checked_lib.ggml_build_forward_expand(b.graph, loss)
        grads = {}
        if self.optimizer is not None:
            if not params:
                raise GGMLError("ag_compile: fn uses no parameters (ag_param) to optimise")
            grads = self._emit_backward(b, entries, syms[out.id], out.id, params)
            self._emit_update(b, params, grads)
        plan = CompiledAutogradGraph(b, [p.t for p in placeholders] + [r[0].t for r in randoms.values()], dc)
        plan.loss = loss
        plan.index_checks = index_checks
        # one persistent tensor per mask, refilled from the random stream before each run
        plan.masks = [(ag_tensor(np.zeros(ph.shape), device=dc.spec, dtype=DTYPE_NAMES[ph.t.type]), shape, rate)
                      for ph, shape, rate in randoms.values()]
        return plan

    def _emit_backward(self, b, entries, loss_sym, loss_id, params):
        # On the CPU backend, ggml's backward turns each weight gradient into OUT_PROD, whose kernel
        # is slower than the rule table's transposes plus MUL_MAT (docs/benchmarks.md): "auto" keeps
        # the rules there.
        prefer_ggml = self.backward_mode == "auto" and not b.device_context.backend.is_cpu
        use_ggml = self.backward_mode == "ggml" or (prefer_ggml and ggml_can_differentiate(b))
        if self.backward_mode == "ggml" and not ggml_can_differentiate(b):
            raise GGMLError("ag_compile: ggml has no backward for some op of this graph; use backward='rules'")
        self.last_backward = "ggml" if use_ggml else "rules"
        if use_ggml:
            return ggml_backward(b, loss_sym, params)
        seed = b.emit("fill", [loss_sym], {"value": 1.0})
        early = None
        if self.optimizer is not None and self.clip_grad is None:  # clipping needs every gradient first
            early = lambda tid, g: self._emit_param_update(b, tid, params[tid], g)  # noqa: E731
        return emit_backward(b, entries, seed, loss_id, set(params), self.segments, on_final=early)

    def _emit_param_update(self, b, tid, p, g) -> None:
        """p's optimizer step as graph nodes, expanded now: after every node that reads p."""
        if self._updater is None:
            self._updater = _graph_update(self.optimizer, b.device_context)
        b.room(48)
        for t in self._updater.emit(b.ctx, p, g.t, self._rows):
            checked_lib.ggml_build_forward_expand(b.graph, t)
        self._updated.add(tid)

    def _emit_update(self, b, params, grads):
        """The optimizer's step for the parameters not updated during the backward (all of them
        with clipping, or ggml's own backward), expanded after everything that reads a parameter."""
        updated = self._updated
        # Every gradient first: one computed after another parameter's in-place update
        # would read the new value.
        for tid, g in grads.items():
            if tid not in updated:
                checked_lib.ggml_build_forward_expand(b.graph, g.t)
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


def _clip_by_global_norm(b: AutogradGraphBuilder, grads: dict, max_norm: float) -> dict:
    """The gradients clipped by their global L2 norm, as graph nodes (prims.clip_by_global_norm:
    the rule clip_grad_norm applies eagerly, and PyTorch's clip_grad_norm_)."""
    b.room(2 * len(grads) + 24)
    _, scaled = prims.clip_by_global_norm(b.ctx, [g.t for g in grads.values()], max_norm)
    return {tid: Sym(t, b.device_context) for tid, t in zip(grads, scaled)}


def _as_inputs(xs) -> list:
    """Tensors as they are; numpy arrays (and numbers) uploaded once (in the default float dtype:
    pass indices as ag_tensor(..., dtype="i32"))."""
    return [x if isinstance(x, AGTensor) else ag_tensor(x) for x in xs]


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
