"""An optimizer's update as nodes of a graph someone else builds (ag_compile's compiled step).

autograd's compiler sits below optim/, so it does not know the optimizers: it asks the optimizer
it is handed for `graph_update(device)` and drives the object it gets through two calls,
`write_hyper()` before every run and `emit(ctx, p, g, rows)` once per parameter while building.
The update shares the eager optimizer's state (m, v, velocity), so eager and compiled steps
can be mixed, and computes ggmlR's formulas: ggml's own kernels for f32 parameters, fused.py's
mixed-precision nodes for f16/bf16 ones.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..core.checked import checked_lib  # ggml's shape rules checked before each op (no abort)
from ..errors import GGMLError
from ..tensor import AGTensor, ag_tensor
from . import fused

if TYPE_CHECKING:
    from .optimizers import Optimizer

F32 = checked_lib.GGML_TYPE_F32


class GraphUpdate:
    """Adam (`adam=True`) or SGD as graph nodes, reading its hyper-parameters from two small f32
    inputs that write_hyper() sets before every run (a schedule compiles nothing new)."""

    def __init__(self, opt: Optimizer, dc, adam: bool):
        self.opt = opt
        self.adam = adam
        # hyper-parameters are f32 inputs whatever ag_dtype() is: ggml's kernels abort on others
        self.hyper = ag_tensor(np.zeros((7 if adam else 2, 1)), device=dc.spec, dtype="f32")
        self.mixed_hyper = ag_tensor(np.zeros((9 if adam else 1, 1)), device=dc.spec, dtype="f32")
        self.index = {p.id: i for i, p in enumerate(opt.params)}

    def write_hyper(self) -> None:
        """Set the hyper-parameter inputs for the optimizer's current step (opt.t)."""
        o = self.opt
        if self.adam:  # with the kernel's float32 (1 - beta) folded back to ggmlR's values
            vals = fused.adam_hyper_values(o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.t)
            mixed = fused.adam_mixed_hyper_values(o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.t)
        else:
            vals, mixed = [o.lr, 0.0 if o.momentum else o.weight_decay], [o.lr]
        self.hyper.data = np.array(vals).reshape(-1, 1)
        self.mixed_hyper.data = np.array(mixed).reshape(-1, 1)

    def emit(self, ctx, p: AGTensor, g, rows: dict) -> list:
        """The ggml nodes (in `ctx`) that update p and its optimizer state in place from the
        gradient `g` (a ggml tensor of the same graph); `rows` caches the hyper-parameters
        widened to rows, once per graph (fused.scalar_rows)."""
        o = self.opt
        i = self.index.get(p.id)
        if i is None:
            raise GGMLError("ag_compile: a parameter fn uses is not in the optimizer's list")
        if p.storage.type != F32:  # ggml's kernels are f32 only: fused.py's mixed-precision update
            return self._emit_mixed(ctx, p, g, i, rows)
        checked_lib.ggml_set_param(p.storage.t)  # the fused optimizer kernels insist on it
        if self.adam:
            m, v = o._state(o.m, i, p), o._state(o.v, i, p)
            return [checked_lib.ggml_opt_step_adamw(ctx, p.storage.t, g, m.storage.t, v.storage.t, self.hyper.storage.t)]
        if not o.momentum:
            return [checked_lib.ggml_opt_step_sgd(ctx, p.storage.t, g, self.hyper.storage.t)]
        # momentum: v = momentum * v + g (+ wd * p); p -= lr * v, written back into both
        vel = o._state(o.velocity, i, p)
        v_new = checked_lib.ggml_add(ctx, checked_lib.ggml_scale(ctx, vel.storage.t, o.momentum), g)
        if o.weight_decay:
            v_new = checked_lib.ggml_add(ctx, v_new, checked_lib.ggml_scale(ctx, p.storage.t, o.weight_decay))
        v_new = checked_lib.ggml_cpy(ctx, v_new, vel.storage.t)
        lr = checked_lib.ggml_view_1d(ctx, self.hyper.storage.t, 1, 0)
        step = checked_lib.ggml_mul(ctx, v_new, checked_lib.ggml_repeat(ctx, lr, v_new))
        return [checked_lib.ggml_cpy(ctx, checked_lib.ggml_sub(ctx, p.storage.t, step), p.storage.t)]

    def _emit_mixed(self, ctx, p: AGTensor, g, i: int, rows: dict) -> list:
        o = self.opt
        h = fused.scalar_rows(ctx, self.mixed_hyper.storage.t, int(p.storage.t.ne[0]), rows)
        if self.adam:
            state = [o._state(o.m, i, p), o._state(o.v, i, p)]
            new = fused.adam_mixed_nodes(ctx, h, p.storage.t, g, *(s.storage.t for s in state), bool(o.weight_decay))
        else:
            state = [o._state(o.velocity, i, p)] if o.momentum else []
            new = fused.sgd_mixed_nodes(ctx, h(0), p.storage.t, g, state[0].storage.t if state else None, o.momentum,
                                        o.weight_decay)
        return [checked_lib.ggml_cpy(ctx, n, t.storage.t) for n, t in zip(new, state + [p])]
