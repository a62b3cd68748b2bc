"""ggml-opt's optimizer contexts (ggml-opt.h): the loss and optimizer types, the checked optimizer
settings ggml reads each step, the context with its static or per-step graphs, and the step by
hand (ggml_opt_prepare_alloc, ggml_opt_alloc, ggml_opt_eval)."""
from __future__ import annotations

import math
from typing import NoReturn

import numpy as np

from ...bindings import enum_constants, ffi, lib
from ...errors import GGMLError
from ..handles import Context, OwnedPointer, Tensor, wrap
from ..graph import Graph
from .. import threads
from ..sched import Scheduler
from .result import OptResult

_CONSTANTS = {  # ggmlR's function: (ggml's constant, what it means)
    "ggml_opt_loss_type_mean": ("GGML_OPT_LOSS_TYPE_MEAN", "GGML_OPT_LOSS_TYPE_MEAN: the loss is the mean of the outputs."),
    "ggml_opt_loss_type_sum": ("GGML_OPT_LOSS_TYPE_SUM", "GGML_OPT_LOSS_TYPE_SUM: the loss is the sum of the outputs."),
    "ggml_opt_loss_type_cross_entropy": ("GGML_OPT_LOSS_TYPE_CROSS_ENTROPY", "GGML_OPT_LOSS_TYPE_CROSS_ENTROPY: -(1/B) sum labels * log_softmax(outputs)."),
    "ggml_opt_loss_type_mse": ("GGML_OPT_LOSS_TYPE_MEAN_SQUARED_ERROR", "GGML_OPT_LOSS_TYPE_MEAN_SQUARED_ERROR: sum((outputs - labels)^2) / (B K)."),
    "ggml_opt_optimizer_type_adamw": ("GGML_OPT_OPTIMIZER_TYPE_ADAMW", "GGML_OPT_OPTIMIZER_TYPE_ADAMW."),
    "ggml_opt_optimizer_type_sgd": ("GGML_OPT_OPTIMIZER_TYPE_SGD", "GGML_OPT_OPTIMIZER_TYPE_SGD."),
}
globals().update(enum_constants(__name__, _CONSTANTS))


def ggml_opt_loss_type_weighted_mse() -> NoReturn:
    """ggmlR's patched ggml has a weighted-MSE loss type; the pinned ggml does not. ggml_fit
    builds the weighted loss in the graph instead (sample_weight with mse)."""
    raise GGMLError("GGML_OPT_LOSS_TYPE_WEIGHTED_MSE exists only in ggmlR's patched ggml; use "
                    "ggml_fit(sample_weight=...) with loss='mse'")


def ggml_opt_optimizer_name(optimizer: int) -> str:
    """"adamw" or "sgd"."""
    if optimizer not in (lib.GGML_OPT_OPTIMIZER_TYPE_ADAMW, lib.GGML_OPT_OPTIMIZER_TYPE_SGD):
        raise GGMLError(f"unknown optimizer type {optimizer}")
    return ffi.string(lib.ggml_opt_optimizer_name(optimizer)).decode()


def _reaches_a_param(outputs) -> bool:
    """Whether a trainable tensor (ggml_set_param) feeds `outputs`: ggml's backward pass aborts
    without one."""
    seen, stack = set(), [outputs.ptr]
    while stack:
        t = stack.pop()
        key = int(ffi.cast("uintptr_t", t))
        if t == ffi.NULL or key in seen:
            continue
        seen.add(key)
        if t.flags & lib.GGML_TENSOR_FLAG_PARAM:
            return True
        stack.extend(t.src[i] for i in range(len(t.src)))
        if t.view_src != ffi.NULL:
            stack.append(t.view_src)
    return False


def _setting(what: str, name: str, v) -> float:
    """A hyper-parameter as the float32 ggml_opt reads (bools and non-numbers refused)."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise GGMLError(f"{what}: {name} must be a number, got {v!r}")
    v32 = float(np.float32(v))
    if not math.isfinite(v32):
        raise GGMLError(f"{what}: {name} must be finite as a float32, got {v!r}")
    return v32


def optimizer_settings(what: str, lr, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0) -> dict:
    """The AdamW and SGD settings checked, as the float32 values ggml_opt reads each step.

    ggml_opt_eval aborts the process when alpha <= 0, a beta lies outside [0, 1], eps < 0 or
    wd outside [0, 1] (ggml-opt.cpp's asserts); each is refused here with its name, so misuse is a
    GGMLError at compile (and fit) time. Stricter than ggml, which ggmlR passes them to: a beta of 1
    makes Adam's bias correction 1 / (1 - beta^t) infinite, and eps = 0 divides 0 by 0 for a weight
    whose gradient has been exactly zero so far; both turn parameters into NaN without an error.
    An lr that rounds to 0 in float32 (1e-50) is refused like 0."""
    lr, b1, b2, eps, wd = (_setting(what, n, v) for n, v in (("lr", lr), ("beta1", beta1), ("beta2", beta2),
                                                                ("eps", eps), ("weight_decay", weight_decay)))
    if not lr > 0:
        raise GGMLError(f"{what}: lr must be > 0, got {lr}")
    for name, b in (("beta1", b1), ("beta2", b2)):
        if not 0 <= b < 1:
            why = " (1 gives NaN weights: Adam's bias correction divides by 1 - beta^t = 0)" if b >= 1 else ""
            raise GGMLError(f"{what}: {name} must be in [0, 1), got {b}{why}")
    if not eps > 0:
        raise GGMLError(f"{what}: eps must be > 0, got {eps} (0 gives NaN weights where a gradient is zero)")
    if not 0 <= wd <= 1:
        raise GGMLError(f"{what}: weight_decay must be in [0, 1] (ggml's decoupled decay), got {wd}")
    return {"lr": lr, "beta1": b1, "beta2": b2, "eps": eps, "wd": wd}


def checked_rate(name: str, v) -> float:
    """A learning rate ggml_opt accepts: finite and > 0 as a float32 (a schedule's or a callback's)."""
    v = _setting("ggml_opt", name, v)
    if not v > 0:
        raise GGMLError(f"{name} must be > 0, got {v}")
    return v


class OptParams:
    """The struct ggml_opt reads its optimizer settings from each step
    (`ggml_opt_get_constant_optimizer_params`): changing `lr` between epochs is a schedule.
    Every value is checked first (optimizer_settings): ggml asserts on them mid-fit."""

    def __init__(self, optimizer: str, lr: float, beta1=0.9, beta2=0.999, eps=1e-8, wd=0.0):
        s = optimizer_settings("ggml_opt", lr, beta1, beta2, eps, wd)
        self.struct = ffi.new("struct ggml_opt_optimizer_params *")
        self.optimizer = optimizer
        a = self.struct.adamw
        a.alpha, a.beta1, a.beta2, a.eps, a.wd = s["lr"], s["beta1"], s["beta2"], s["eps"], s["wd"]
        self.struct.sgd.alpha, self.struct.sgd.wd = s["lr"], s["wd"]

    @property
    def lr(self) -> float:
        return float(self.struct.adamw.alpha if self.optimizer == "adamw" else self.struct.sgd.alpha)

    @lr.setter
    def lr(self, v: float) -> None:
        v = checked_rate("learning rate", v)
        self.struct.adamw.alpha = v
        self.struct.sgd.alpha = v


class OptContext(OwnedPointer):
    """A ggml_opt context: with static graphs over (inputs, outputs) in ctx_compute, or, made
    without them (ggmlR's ggml_opt_init(sched, loss_type, ...)), one whose graphs are given
    before every step by ggml_opt_prepare_alloc.

    ggmlR's ggml_opt_init_for_fit returns list(opt_ctx, lr_ud): `ctx["opt_ctx"]` is the
    context itself and `ctx["lr_ud"]` its learning-rate holder (ggml_opt_get_lr/set_lr)."""

    RELEASE = "ggml_opt_free"

    def __init__(self, sched: Scheduler, ctx_compute: Context | None, inputs: Tensor | None,
                 outputs: Tensor | None, loss_type: int, optimizer: int, opt_period=1, lr=1e-3, build_type=None):
        if not isinstance(sched, Scheduler):
            raise GGMLError("ggml_opt_init: sched must be a backend scheduler (ggml_backend_sched_new)")
        if ctx_compute is None:
            if inputs is not None or outputs is not None:
                raise GGMLError("ggml_opt_init: inputs and outputs need ctx_compute (static graphs)")
            self._init_dynamic(sched, loss_type, optimizer, opt_period, lr)
            return
        for t, what in ((inputs, "inputs"), (outputs, "outputs")):
            if not isinstance(t, Tensor):
                raise GGMLError(f"ggml_opt_init: {what} must be a tensor")
        if inputs.ptr.buffer == ffi.NULL and inputs.ptr.data == ffi.NULL:
            raise GGMLError("ggml_opt_init: with static graphs the inputs must already be allocated "
                            "(ggml_backend_alloc_ctx_tensors on their context)")
        if loss_type not in (0, 1, 2, 3) or optimizer not in (0, 1) or int(opt_period) < 1:
            raise GGMLError("ggml_opt_init: bad loss type, optimizer or opt_period")
        if lib.ggml_n_dims(outputs.ptr) > 2:
            raise GGMLError("ggml_opt_init: outputs must be [values, batch]")
        if not _reaches_a_param(outputs):
            raise GGMLError("ggml_opt_init: no trainable parameter feeds the outputs (ggml_set_param)")
        self.sched, self.ctx, self.inputs, self.outputs = sched, ctx_compute, inputs, outputs
        self.pars = OptParams("sgd" if optimizer == lib.GGML_OPT_OPTIMIZER_TYPE_SGD else "adamw", lr)
        p = lib.ggml_opt_default_params(sched.ptr, loss_type)
        p.ctx_compute = ctx_compute.ptr
        p.inputs, p.outputs = inputs.ptr, outputs.ptr
        p.opt_period = int(opt_period)
        p.get_opt_pars = lib.ggml_opt_get_constant_optimizer_params
        p.get_opt_pars_ud = self.pars.struct
        p.optimizer = optimizer
        if build_type is not None:
            p.build_type = build_type
        self.static, self.loss_type = True, loss_type
        self.ptr = lib.ggml_opt_init(p)

    def _init_dynamic(self, sched, loss_type, optimizer, opt_period, lr):
        if loss_type not in (0, 1, 2, 3) or optimizer not in (0, 1) or int(opt_period) < 1:
            raise GGMLError("ggml_opt_init: bad loss type, optimizer or opt_period")
        self.sched, self.ctx, self.inputs, self.outputs = sched, None, None, None
        self.static, self.prepared, self.loss_type = False, False, loss_type
        self.pars = OptParams("sgd" if optimizer == lib.GGML_OPT_OPTIMIZER_TYPE_SGD else "adamw", lr)
        p = lib.ggml_opt_default_params(sched.ptr, loss_type)
        p.opt_period = self.opt_period = int(opt_period)
        p.get_opt_pars = lib.ggml_opt_get_constant_optimizer_params
        p.get_opt_pars_ud = self.pars.struct
        p.optimizer = optimizer
        self.ptr = lib.ggml_opt_init(p)

    def count_decides_results(self) -> bool:
        """Whether the thread count decides a result of this context's graphs (ggml's cross-entropy
        loss, threads.count_decides_results): they then compute on all their threads, whatever the
        load. Read from the loss and its forward graph once built, else from the loss type."""
        loss = lib.ggml_opt_loss(self.ptr)
        key = int(ffi.cast("uintptr_t", loss))
        if getattr(self, "_decides", (None,))[0] != key:
            self._decides = (key, self.loss_type == lib.GGML_OPT_LOSS_TYPE_CROSS_ENTROPY or (
                loss != ffi.NULL and threads.count_decides_results_below(loss)))
        return self._decides[1]

    def __getitem__(self, key):
        if key == "opt_ctx":
            return self
        if key == "lr_ud":
            return self.pars
        raise KeyError(key)

    def keys(self):
        """ggmlR's names for ggml_opt_init_for_fit's result: opt_ctx and lr_ud."""
        return ["opt_ctx", "lr_ud"]

    def __contains__(self, key):
        return key in self.keys()


def opt_ptr(o):
    """The live ggml_opt context behind an OptContext (GGMLError for anything else or a freed one)."""
    if not isinstance(o, OptContext) or o.ptr is None:
        raise GGMLError("expected a live ggml_opt context (ggml_opt_init)")
    return o.ptr


def ggml_opt_init(sched: Scheduler, ctx_compute: Context | int | None = None, inputs: Tensor | int | None = None,
                  outputs: Tensor | int | None = None, loss_type: int | None = None, optimizer: int | None = None,
                  opt_period: int | None = 1, lr: float = 1e-3) -> OptContext:
    """An optimizer context. With ctx_compute, inputs (allocated) and outputs: static graphs,
    built once. Without them, ggmlR's form ggml_opt_init(sched, loss_type, optimizer,
    opt_period) (positionally too): a context whose graph is given before every step with
    ggml_opt_prepare_alloc (ggml_opt_static_graphs() is False)."""
    if isinstance(ctx_compute, (int, np.integer)) and not isinstance(ctx_compute, bool):
        # ggmlR's positional order (sched, loss_type, optimizer, opt_period): shift the three back
        if loss_type is not None:
            raise GGMLError("ggml_opt_init: give either (sched, ctx_compute, inputs, outputs, loss_type, ...) "
                            "or ggmlR's (sched, loss_type, optimizer, opt_period)")
        loss_type = ctx_compute
        optimizer = inputs if inputs is not None else optimizer
        opt_period = outputs if outputs is not None else opt_period
        ctx_compute = inputs = outputs = None
    loss_type = lib.GGML_OPT_LOSS_TYPE_MEAN if loss_type is None else loss_type
    optimizer = lib.GGML_OPT_OPTIMIZER_TYPE_ADAMW if optimizer is None else optimizer
    opt_period = 1 if opt_period is None else opt_period
    return OptContext(sched, ctx_compute, inputs, outputs, loss_type, optimizer, opt_period, lr)


def ggml_opt_free(opt_ctx: OptContext) -> None:
    """Free the context now."""
    opt_ctx.free()


def ggml_opt_reset(opt_ctx: OptContext, optimizer: bool = True) -> None:
    """Zero the gradients (and with optimizer=True the Adam moments and step counter)."""
    lib.ggml_opt_reset(opt_ptr(opt_ctx), bool(optimizer))


def ggml_opt_static_graphs(opt_ctx: OptContext) -> bool:
    """True: the graphs were built once, at init."""
    return bool(lib.ggml_opt_static_graphs(opt_ptr(opt_ctx)))


def ggml_opt_context_optimizer_type(opt_ctx: OptContext) -> int:
    """The optimizer type of the context."""
    return int(lib.ggml_opt_context_optimizer_type(opt_ptr(opt_ctx)))


def ggml_opt_get_lr(opt_ctx: OptContext | OptParams) -> float | dict[str, float]:
    """The current learning rate of an optimizer context (a float); of ggmlR's lr_ud (a context's
    ["lr_ud"]), both rates it holds, {"adamw": ..., "sgd": ...}."""
    if isinstance(opt_ctx, OptParams):
        return {"adamw": float(opt_ctx.struct.adamw.alpha), "sgd": float(opt_ctx.struct.sgd.alpha)}
    if not isinstance(opt_ctx, OptContext):
        raise GGMLError("ggml_opt_get_lr: expected an optimizer context or its lr_ud")
    return opt_ctx.pars.lr


def _rate(v, what):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None                               # ggmlR's NA: leave that rate alone
    return checked_rate(f"ggml_opt_set_lr: {what}", v)


def ggml_opt_set_lr(opt_ctx: OptContext | OptParams, lr: float | None = None, adamw_lr: float | None = None,
                    sgd_lr: float | None = None) -> None:
    """Set the learning rate, used from the next optimizer step: `lr` sets the context's rate;
    ggmlR's form ggml_opt_set_lr(lr_ud, adamw_lr=, sgd_lr=) sets the AdamW and SGD rates one by
    one (None or NaN leaves a rate as it is)."""
    if not isinstance(opt_ctx, (OptContext, OptParams)):
        raise GGMLError("ggml_opt_set_lr: expected an optimizer context or its lr_ud")
    pars = opt_ctx if isinstance(opt_ctx, OptParams) else opt_ctx.pars
    lr, adamw_lr, sgd_lr = _rate(lr, "lr"), _rate(adamw_lr, "adamw_lr"), _rate(sgd_lr, "sgd_lr")
    if lr is not None:
        pars.lr = lr
    if adamw_lr is not None:
        pars.struct.adamw.alpha = adamw_lr
    if sgd_lr is not None:
        pars.struct.sgd.alpha = sgd_lr


def _tensor_of(opt_ctx, fn):
    p = fn(opt_ptr(opt_ctx))
    if p == ffi.NULL:
        return None
    if opt_ctx.ctx is None:
        raise GGMLError("this optimizer context has no graph yet (ggml_opt_prepare_alloc)")
    return wrap(p, opt_ctx.ctx)


def ggml_opt_inputs(opt_ctx: OptContext) -> Tensor | None:
    """The inputs tensor."""
    return _tensor_of(opt_ctx, lib.ggml_opt_inputs)


def ggml_opt_outputs(opt_ctx: OptContext) -> Tensor | None:
    """The outputs tensor."""
    return _tensor_of(opt_ctx, lib.ggml_opt_outputs)


def ggml_opt_labels(opt_ctx: OptContext) -> Tensor | None:
    """The labels tensor (None for mean/sum losses)."""
    return _tensor_of(opt_ctx, lib.ggml_opt_labels)


def ggml_opt_loss(opt_ctx: OptContext) -> Tensor | None:
    """The scalar loss tensor."""
    return _tensor_of(opt_ctx, lib.ggml_opt_loss)


def ggml_opt_pred(opt_ctx: OptContext) -> Tensor | None:
    """The argmax tensor (cross-entropy only)."""
    return _tensor_of(opt_ctx, lib.ggml_opt_pred)


def ggml_opt_ncorrect(opt_ctx: OptContext) -> Tensor | None:
    """The count of correct predictions (cross-entropy only)."""
    return _tensor_of(opt_ctx, lib.ggml_opt_ncorrect)


def ggml_opt_default_params(sched: Scheduler | None = None, loss_type: int | None = None) -> dict:
    """ggml's defaults for ggml_opt_init: loss type, build type (optimizer step), opt_period 1,
    AdamW, and the optimizer settings (lr 1e-3, betas 0.9/0.999, eps 1e-8, no weight decay)."""
    return {"loss_type": lib.GGML_OPT_LOSS_TYPE_MEAN if loss_type is None else int(loss_type),
            "build_type": int(lib.GGML_OPT_BUILD_TYPE_OPT), "opt_period": 1,
            "optimizer": int(lib.GGML_OPT_OPTIMIZER_TYPE_ADAMW),
            "adamw": {"alpha": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "wd": 0.0},
            "sgd": {"alpha": 1e-3, "wd": 0.0}}


def ggml_opt_init_for_fit(sched: Scheduler, loss_type: int, optimizer: int | None = None, opt_period: int = 1,
                          ctx_compute: Context | None = None, inputs: Tensor | None = None,
                          outputs: Tensor | None = None, lr: float = 1e-3) -> OptContext:
    """ggmlR's ggml_opt_init_for_fit: an optimizer context over (inputs, outputs) in ctx_compute."""
    if ctx_compute is None or inputs is None or outputs is None:
        raise GGMLError("ggml_opt_init_for_fit: ggmlpy's optimizer contexts use static graphs: give "
                        "ctx_compute, inputs (allocated) and outputs")
    return ggml_opt_init(sched, ctx_compute, inputs, outputs, loss_type, optimizer, opt_period, lr)


def ggml_opt_prepare_alloc(opt_ctx: OptContext, ctx_compute: Context | None = None, gf: Graph | None = None,
                           inputs: Tensor | None = None, outputs: Tensor | None = None) -> None:
    """Give a context without static graphs (ggml_opt_init(sched, loss_type, ...)) the forward
    graph `gf` for its next step: `inputs` and `outputs` in it, built in the no_alloc context
    `ctx_compute`, which must have room for the backward and optimizer graphs ggml adds. ggml
    forgets the graph after each ggml_opt_eval, so call it before every ggml_opt_alloc."""
    opt = opt_ptr(opt_ctx)
    if opt_ctx.static:
        raise GGMLError("ggml_opt_prepare_alloc is for contexts without static graphs; this one was made with "
                        "ctx_compute, inputs and outputs")
    if getattr(opt_ctx, "eval_ready", False):
        raise GGMLError("ggml_opt_prepare_alloc: the previous allocation was not evaluated (ggml_opt_eval)")
    if not isinstance(ctx_compute, Context) or not isinstance(gf, Graph):
        raise GGMLError("ggml_opt_prepare_alloc(opt_ctx, ctx_compute, gf, inputs, outputs): a Context and a Graph")
    ctx_compute.ensure_alive()
    if not ctx_compute.no_alloc:
        raise GGMLError("ggml_opt_prepare_alloc: ctx_compute must be a no_alloc context (the scheduler allocates)")
    for t, what in ((inputs, "inputs"), (outputs, "outputs")):
        if not isinstance(t, Tensor):
            raise GGMLError(f"ggml_opt_prepare_alloc: {what} must be a tensor")
    if lib.ggml_n_dims(outputs.ptr) > 2:
        raise GGMLError("ggml_opt_prepare_alloc: outputs must be [values, batch]")
    n_nodes = int(lib.ggml_graph_n_nodes(gf.ptr))
    if n_nodes == 0 or lib.ggml_graph_node(gf.ptr, -1) != outputs.ptr:
        raise GGMLError("ggml_opt_prepare_alloc: gf must end with outputs (ggml_build_forward_expand(ctx, outputs))")
    if not _reaches_a_param(outputs):
        raise GGMLError("ggml_opt_prepare_alloc: no trainable parameter feeds the outputs (ggml_set_param)")
    need = 2 * int(lib.ggml_graph_overhead_custom(gf.size, True)) + (4 * n_nodes + 16) * int(lib.ggml_tensor_overhead())
    free = int(lib.ggml_get_mem_size(ctx_compute.ptr)) - int(lib.ggml_used_mem(ctx_compute.ptr))
    if free < need:
        raise GGMLError(f"ggml_opt_prepare_alloc: ctx_compute has {free} bytes free; the backward and optimizer "
                        f"graphs need about {need}")
    lib.ggml_opt_prepare_alloc(opt, ctx_compute.ptr, gf.ptr, inputs.ptr, outputs.ptr)
    opt_ctx.ctx, opt_ctx.inputs, opt_ctx.outputs, opt_ctx.prepared = ctx_compute, inputs, outputs, True
    opt_ctx._graph = gf                       # ggml holds the graph until the next eval


def ggml_opt_alloc(opt_ctx: OptContext, backward: bool = True) -> None:
    """Allocate the graph for the next ggml_opt_eval (backward: a training step)."""
    opt = opt_ptr(opt_ctx)
    if getattr(opt_ctx, "eval_ready", False):
        raise GGMLError("ggml_opt_alloc: the previous allocation was not evaluated (ggml_opt_eval)")
    if not opt_ctx.static and not opt_ctx.prepared:
        raise GGMLError("ggml_opt_alloc: a context without static graphs needs ggml_opt_prepare_alloc before each step")
    lib.ggml_opt_alloc(opt, bool(backward))
    if backward and not opt_ctx.static and opt_ctx.opt_period == 1:
        # ggml keeps this context's gradient accumulators across steps and clears them only when
        # opt_period > 1: without this every step would add all earlier gradients again
        lib.ggml_opt_reset(opt, False)
    opt_ctx.eval_ready = True


def ggml_opt_eval(opt_ctx: OptContext, result: OptResult | None = None) -> None:
    """Run the allocated graph on the current inputs (one optimizer step after a backward alloc)."""
    opt = opt_ptr(opt_ctx)
    if not getattr(opt_ctx, "eval_ready", False):
        raise GGMLError("ggml_opt_eval: call ggml_opt_alloc first")
    opt_ctx.sched.fit_threads_to_load(opt_ctx.count_decides_results())
    lib.ggml_opt_eval(opt, result.ptr if result is not None else ffi.NULL)
    opt_ctx.eval_ready = False
    if not opt_ctx.static:
        opt_ctx.prepared = False              # ggml dropped the graph: prepare the next step anew


def ggml_opt_grad_acc(opt_ctx: OptContext, node: Tensor) -> Tensor | None:
    """The gradient accumulator of a forward-graph node (None when it has none)."""
    p = lib.ggml_opt_grad_acc(opt_ptr(opt_ctx), node.ptr)
    return None if p == ffi.NULL else wrap(p, opt_ctx.ctx)


__all__ = [n for n in dir() if n.startswith("ggml_opt_")]
