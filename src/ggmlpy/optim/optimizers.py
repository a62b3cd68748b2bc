"""optimizer_sgd / optimizer_adam (ggmlR's exact updates), optimizer_adamw, clip_grad_norm.

State (momentum, moments) lives in the persistent pool; every update runs
through ggml and is written into the parameter's own memory, so every
reference to the parameter sees it.

Each optimizer's update is written three ways, all ggmlR's formula, because each serves
parameters the others cannot:

1. ggml's own kernels (`ggml_opt_step_adamw`, `ggml_opt_step_sgd`, fused.py): one cached graph
   per group of f32 parameters, one pass over p, g and the state. The fastest, f32 only.
2. element-wise nodes computed in f32 (fused.py's `adam_mixed_nodes`, `sgd_mixed_nodes`): for
   parameters stored in f16 or bf16, whose moments stay f32 and whose result is rounded once.
3. composed from ag_* ops (each class's `_update`): any dtype on any device, the path for a
   device without the kernels (it takes over for good once one is missing).

ag_compile's compiled step (graph_update.py) emits 1 or 2 into its graph. Where more than one
applies they give the same numbers: tests/test_train.py's
test_the_three_update_paths_give_the_same_numbers holds each optimizer's three paths to one
another and to numpy.
"""
from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Union

import numpy as np

from ..autograd import ops
from ..autograd import prims
from ..autograd.engine import as_f32, assign
from ..autograd.tape import no_grad
from ..bindings import lib
from ..errors import GGMLError
from ..params import ParamList
from ..tensor import AGTensor, ag_tensor, same_device
from . import fused
from .graph_update import GraphUpdate

if TYPE_CHECKING:
    from ..nn.module import Module

F32 = lib.GGML_TYPE_F32
# what optimizers take: a model (its parameters()), a list of ag tensors, or a dict of them
Params = Union["Module", Iterable[AGTensor], dict]


def _grad_of(grads, p: AGTensor):
    if grads is None:
        return p.grad
    g = grads.get(p) if hasattr(grads, "get") else None
    return g


class Optimizer:
    """Base optimizer. `params`: a model (its parameters() are taken), a list of ag tensors, or
    a dict of them (ggmlR's named list). `self.params` keeps the names: `opt.params["W"]`."""

    def __init__(self, params: Params, lr: float):
        self.params = _param_list(params)
        if lr <= 0:
            raise GGMLError(f"learning rate must be positive, got {lr}")
        self.lr = float(lr)
        self.t = 0
        self._fused_ok = True
        self._hyper: dict = {}  # kind of fused graph -> the f32 hyper-parameter vector it reads
        self._token = None
        self._stepping = threading.Lock()

    def step(self, grads: dict | None = None) -> None:
        """Update every parameter that has a gradient in `grads` (backward()'s result) or in `.grad`.

        One optimizer is stepped by one thread at a time: a second thread stepping it while a
        step runs gets a GGMLError (two interleaved steps would mix their moment updates)."""
        if not self._stepping.acquire(blocking=False):
            raise GGMLError(f"{type(self).__name__}.step() is already running in another thread; "
                            "step an optimizer from one thread at a time")
        try:
            self.t += 1
            with no_grad():
                todo = [(i, p, g) for i, p in enumerate(self.params) if (g := _grad_of(grads, p)) is not None]
                if todo:
                    self._step(todo)
        finally:
            self._stepping.release()

    def _step(self, todo) -> None:
        """The composed path: one parameter at a time. Subclasses fuse what they can."""
        for i, p, g in todo:
            self._update(i, p, g)

    def _fused_or_composed(self, todo, fusable, run_fused) -> None:
        """Run `run_fused` on the fusable part of `todo`, the composed update on the rest.
        A device without the fused kernel falls back for good (checked before anything runs)."""
        if self._fused_ok:
            fast = [item for item in todo if fusable(item)]
            done: list = []  # run_fused appends each group it has updated
            if fast:
                try:
                    run_fused(fast, done)
                except GGMLError as e:
                    if not fused.kernel_missing(e):
                        raise
                    self._fused_ok = False
                ids = {id(item) for item in done}
                todo = [item for item in todo if id(item) not in ids]
        for i, p, g in todo:
            self._update(i, p, g)

    def __repr__(self) -> str:
        kind = {"optimizer_sgd": "SGD", "optimizer_adam": "Adam", "optimizer_adamw": "AdamW"}.get(type(self).__name__,
                                                                                             type(self).__name__)
        extra = "".join(f" | {k} = {v:g}" for k, v in self._repr_fields())
        return f"{kind} optimizer | lr = {self.lr:g}{extra} | {len(self.params)} params | step {self.t}"

    def _repr_fields(self) -> list:
        return []

    def zero_grad(self) -> None:
        """Forget every parameter's `.grad` (the next backward() starts them afresh)."""
        for p in self.params:
            p.grad = None

    def _update(self, i, p, g):
        raise NotImplementedError

    def graph_update(self, device) -> GraphUpdate:
        """This optimizer's update as nodes of a compiled graph on `device` (ag_compile), sharing
        its state; a GGMLError for an optimizer that has no graph form."""
        raise GGMLError(f"ag_compile: no graph form for {type(self).__name__}")

    def _state(self, store: dict, i: int, p: AGTensor) -> AGTensor:
        """Optimizer state is f32 whatever the parameter's dtype (fused.mixed_fusable says why)."""
        if i not in store:
            store[i] = ag_tensor(np.zeros(p.shape), device=p.device_context.spec, dtype="f32")
        return store[i]

    def _token_for(self, device) -> AGTensor:
        """A [1, 1] f32 tensor the fused graphs write their (meaningless) output into: ggml's
        optimizer kernels update in place and return a view, but a graph needs an output."""
        if self._token is None or self._token.device_context is not device or not self._token.storage.alive:
            self._token = ag_tensor(np.zeros((1, 1)), device=device.spec, dtype="f32")
        return self._token

    def _hyper_for(self, device, values, kind: str = "kernel") -> AGTensor:
        """The f32 hyper-parameter vector a fused graph of this `kind` reads, set to `values`."""
        h = self._hyper.get(kind)
        if h is None or h.device_context is not device or not h.storage.alive or h.shape[0] != len(values):
            h = self._hyper[kind] = fused.hyper_tensor(values, device.spec)
        else:
            h.data = np.asarray(values, dtype=np.float64)
        return h


def _record(done: list, group: list, counts) -> None:
    """Run a fused step's graphs (`counts` yields how many items each updated), recording in
    `done` the items updated so far: a failing graph leaves the rest to the composed path."""
    for n in counts:
        done.extend(group[:n])
        group = group[n:]


def _group_by_device(items) -> dict:
    out: dict = {}
    for item in items:
        out.setdefault(item[1].device_context, []).append(item)
    return out


def _param_list(params) -> ParamList:
    """The ag tensors of a model (anything with .parameters()), a dict or an iterable, keeping
    their names where they have them (ggmlR's named list: `opt.params["W"]`)."""
    if callable(getattr(params, "parameters", None)):
        params = params.parameters()
    if isinstance(params, AGTensor) or not hasattr(params, "__iter__"):
        raise GGMLError(f"optimizer params must be a model or a list of ag tensors, got {type(params).__name__}")
    params = ParamList(params if isinstance(params, (dict, ParamList)) else list(params))
    for p in params:
        if not isinstance(p, AGTensor):
            raise GGMLError(f"optimizer params must be a model or ag tensors, got {type(p).__name__}")
    return params


class optimizer_sgd(Optimizer):
    """p -= lr * g; with momentum: v = momentum * v + g; p -= lr * v. Optional (coupled) weight_decay."""

    def __init__(self, params: Params, lr: float = 0.01, momentum: float = 0.0, weight_decay: float = 0.0):
        super().__init__(params, lr)
        self.momentum, self.weight_decay = float(momentum), float(weight_decay)
        self.velocity = {}

    def _update(self, i, p, g):
        if self.weight_decay:
            g = ops.ag_add(g, ops.ag_scale(p, self.weight_decay))
        if self.momentum:
            v = self._state(self.velocity, i, p)
            assign(v, ops.ag_add(ops.ag_scale(v, self.momentum), g))
            g = v
        assign(p, ops.ag_sub(p, ops.ag_scale(g, self.lr)))

    def graph_update(self, device) -> GraphUpdate:
        return GraphUpdate(self, device, adam=False)

    def _step(self, todo) -> None:
        def rows(group):
            return [(p, g, self._state(self.velocity, i, p)) if self.momentum else (p, g) for i, p, g in group]

        def run(items, done):
            for dc, group in _group_by_device(items).items():
                full = [it for it in group if fused.fusable(*rows([it])[0])]
                low = [it for it in group if fused.mixed_fusable(*rows([it])[0])]
                if full:
                    hyper = self._hyper_for(dc, fused.sgd_hyper_values(self.lr, self.momentum, self.weight_decay))
                    _record(done, full, fused.sgd_step(rows(full), hyper, self._token_for(dc), self.momentum,
                                                       self.weight_decay))
                if low:
                    hyper = self._hyper_for(dc, [self.lr], "mixed")
                    _record(done, low, fused.sgd_mixed_step(rows(low), hyper, self.momentum, self.weight_decay))
        self._fused_or_composed(todo, lambda it: fused.fusable(*rows([it])[0]) or fused.mixed_fusable(*rows([it])[0]),
                                run)

    def _repr_fields(self) -> list:
        return [("momentum", self.momentum)] + ([("weight_decay", self.weight_decay)] if self.weight_decay else [])


class optimizer_adam(Optimizer):
    """ggmlR's Adam: m, v moments; p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)."""

    decoupled = False

    def __init__(self, params: Params, lr: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8,
                 weight_decay: float = 0.0):
        super().__init__(params, lr)
        self.beta1, self.beta2, self.eps, self.weight_decay = float(beta1), float(beta2), float(eps), float(weight_decay)
        self.m, self.v = {}, {}

    def _update(self, i, p, g):
        b1, b2 = self.beta1, self.beta2
        m, v = self._state(self.m, i, p), self._state(self.v, i, p)
        assign(m, ops.ag_add(ops.ag_scale(m, b1), ops.ag_scale(g, 1 - b1)))
        assign(v, ops.ag_add(ops.ag_scale(v, b2), ops.ag_scale(ops.ag_mul(g, g), 1 - b2)))
        mhat = ops.ag_scale(m, 1 / (1 - b1 ** self.t))
        denom = ops.ag_add(ops.ag_sqrt(ops.ag_scale(v, 1 / (1 - b2 ** self.t))), self.eps)
        upd = ops.ag_scale(ops.ag_div(mhat, denom), self.lr)
        if self.weight_decay:  # AdamW: decoupled decay, applied to the weights directly
            upd = ops.ag_add(upd, ops.ag_scale(p, self.lr * self.weight_decay))
        assign(p, ops.ag_sub(p, upd))

    def graph_update(self, device) -> GraphUpdate:
        return GraphUpdate(self, device, adam=True)

    def _step(self, todo) -> None:
        def quad(item):
            i, p, g = item
            return p, g, self._state(self.m, i, p), self._state(self.v, i, p)

        def run(items, done):
            hyper_args = (self.lr, self.beta1, self.beta2, self.eps, self.weight_decay, self.t)
            for dc, group in _group_by_device(items).items():
                full = [it for it in group if fused.fusable(*quad(it))]
                low = [it for it in group if fused.mixed_fusable(*quad(it))]
                if full:
                    hyper = self._hyper_for(dc, fused.adam_hyper_values(*hyper_args))
                    _record(done, full, fused.adamw_step([quad(it) for it in full], hyper, self._token_for(dc)))
                if low:
                    hyper = self._hyper_for(dc, fused.adam_mixed_hyper_values(*hyper_args), "mixed")
                    _record(done, low, fused.adam_mixed_step([quad(it) for it in low], hyper, self.weight_decay))
        self._fused_or_composed(todo, lambda it: fused.fusable(*quad(it)) or fused.mixed_fusable(*quad(it)), run)

    def _repr_fields(self) -> list:
        return [("beta1", self.beta1), ("beta2", self.beta2), ("eps", self.eps)] + (
            [("weight_decay", self.weight_decay)] if self.weight_decay else [])


class optimizer_adamw(optimizer_adam):
    """Adam with decoupled weight decay (Loshchilov and Hutter): p -= lr * (adam_step + wd * p)."""

    def __init__(self, params: Params, lr: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8,
                 weight_decay: float = 0.01):
        super().__init__(params, lr, beta1, beta2, eps, weight_decay)


def clip_grad_norm(params: Params, grads: dict, max_norm: float) -> float:
    """Global L2 norm of the params' gradients; if above max_norm, scale every one by
    max_norm / (norm + 1e-6), in place in `grads`. Returns the norm before clipping.
    One cached graph computes the norm and the clipped gradients (prims.clip_by_global_norm,
    the rule compiled steps emit too), read once: one wait on a GPU, not one per tensor."""
    params = _param_list(params)
    with no_grad():
        present = [(p, grads[p]) for p in params if p in grads]
        if not present:
            return 0.0
        dc = same_device(*[g for _, g in present])
        max_norm = float(max_norm)
        outs = dc.executor.run(("clip_by_global_norm", max_norm), _clipper(max_norm), [g.storage for _, g in present],
                               dc.pass_pool.alloc)
        norm = AGTensor(outs[0], (1, 1), dc).item()
        if norm > max_norm:
            if all(g.storage.type == F32 for _, g in present):  # the graph's own results
                for (p, g), st in zip(present, outs[1:]):
                    dict.__setitem__(grads, p.id, AGTensor(st, g.shape, dc))
            else:  # f16/bf16 gradients keep their dtype
                c = max_norm / (norm + 1e-6)
                for p, g in present:
                    dict.__setitem__(grads, p.id, ops.ag_scale(g, c))
    return norm


def _clipper(max_norm: float):
    def build(ctx, *gs):
        norm, scaled = prims.clip_by_global_norm(ctx, as_f32(ctx, gs), max_norm)
        return [norm] + scaled
    return build
