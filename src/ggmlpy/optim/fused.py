"""Optimizer steps as single cached ggml graphs, written in place.

The composed update (`assign(m, b1*m + (1-b1)*g)`, ...) costs about ten eager
ops per parameter per step, each a graph run plus a pass-pool allocation.
Here one graph updates a whole group of parameters:

* Adam/AdamW use ggml's own kernel, `ggml_opt_step_adamw`: one pass over
  p, g, m, v. Its formula is ggmlR's (`m*b1 + g*(1-b1)`, `v*b2 + g*g*(1-b2)`,
  `p*(1 - lr*wd) - lr * (m*b1h) / (sqrt(v*b2h) + eps)`, with b1h = 1/(1-b1^t),
  b2h = 1/(1-b2^t); eps outside the square root, as in ggmlR). It updates p, m
  and v in place and insists that p be flagged GGML_TENSOR_FLAG_PARAM.
* SGD uses `ggml_opt_step_sgd` (p = p * (1 - lr*wd) - lr*g, ggmlR's update with
  coupled decay); with momentum, the velocity is computed first by element-wise
  nodes whose output is v's own memory (`out=[v, ...]`).

Hyper-parameters (lr, betas, bias corrections) enter as a small f32 *input*
tensor, not as constants baked into the graph, so a learning-rate schedule does
not compile a new graph every step.

Writing outputs over inputs in one graph is safe here because every node that
reads an old value (p, m or v) is an ancestor of the node that overwrites it:
ggml computes nodes in topological order, and the overwriting nodes are
element-wise (each element is read before it is written, by the same thread).
tests/test_train.py checks the results against numpy.
"""
from __future__ import annotations

import numpy as np

from ..core.checked import checked_lib  # ggml's shape rules checked before each op (no abort)
from ..errors import GGMLError
from ..tensor import AGTensor, ag_tensor

F32 = checked_lib.GGML_TYPE_F32
LOW = (checked_lib.GGML_TYPE_F16, checked_lib.GGML_TYPE_BF16)
# Tensors per parameter in a group graph: at most 4 leaves + step + view + add + 3 velocity
# nodes (the executor's contexts hold 256 tensors and graphs of 256 nodes).
GROUP = 24


def fusable(p: AGTensor, g: AGTensor, *state: AGTensor) -> bool:
    """ggml's optimizer kernels are f32 only and abort on a shape mismatch: check first."""
    return all(t.storage.type == F32 and t.shape == p.shape and t.device_context is p.device_context for t in (p, g, *state))


def hyper_tensor(values, device) -> AGTensor:
    return ag_tensor(np.asarray(values, dtype=np.float64), device=device, dtype="f32")


# -- Adam / AdamW ---------------------------------------------------------------------------------------
def _build_adamw(ctx, hyper, *quads):
    """quads = p0, g0, m0, v0, p1, ... One ggml_opt_step_adamw per parameter.

    The kernel's result is a view of p; the graph needs one real output that
    depends on every step, so a [1, 1] "token" sums one element of each."""
    token = None
    for k in range(0, len(quads), 4):
        p, g, m, v = quads[k:k + 4]
        checked_lib.ggml_set_param(p)
        step = checked_lib.ggml_opt_step_adamw(ctx, p, g, m, v, hyper)
        first = checked_lib.ggml_view_2d(ctx, step, 1, 1, step.nb[1], 0)
        token = first if token is None else checked_lib.ggml_add(ctx, token, first)
    return token


def adamw_step(items, hyper: AGTensor, token: AGTensor):
    """items: (p, g, m, v) ag tensors, all f32 on one device. Runs ceil(n / GROUP) graphs,
    yielding the number of items each one has updated."""
    ex = hyper.device_context.executor
    for start in range(0, len(items), GROUP):
        group = items[start:start + GROUP]
        inputs = [hyper.storage] + [t.storage for quad in group for t in quad]
        ex.run(("opt_step_adamw", len(group)), _build_adamw, inputs, None, out=[token.storage])
        yield len(group)


def adam_hyper_values(lr, beta1, beta2, eps, wd, t) -> list:
    """The kernel's 7 parameters, with its float32 `1 - beta` folded back to ggmlR's.

    The kernel computes (1 - beta2) in float32 from float32 beta2: for 0.999 that
    is 0.000999987, 1.3e-5 off. The composed path (and ggmlR) scales by the exactly
    rounded 1 - beta. Every term of m (v) carries the same factor, so m and v are
    off by a constant ratio, which the bias-correction factors can take back:
    beta1h * c1 and beta2h * c2, with c = f32(1 - beta) / (1 - f32(beta))."""
    def ratio(beta):
        exact = np.float32(1.0 - beta)
        kernel = np.float32(1.0) - np.float32(beta)
        return float(exact) / float(kernel) if kernel else 1.0
    return [lr, beta1, beta2, eps, wd,
            ratio(beta1) / (1.0 - beta1 ** t), ratio(beta2) / (1.0 - beta2 ** t)]


# -- SGD --------------------------------------------------------------------------------------------------
def _build_sgd(momentum: float, weight_decay: float):
    """hyper = [lr, decay the kernel applies]; inputs per parameter: p, g (and v with momentum).

    Plain SGD is ggml_opt_step_sgd: p = p * (1 - lr * wd) - lr * g, which is
    p - lr * (g + wd * p), the coupled decay. With momentum the decay goes into
    the velocity first (v = momentum * v + g + wd * p, written into v's memory),
    then the kernel steps p by lr * v with no decay of its own. momentum and wd
    are constants of the graph; lr is read from `hyper`, so schedules are free."""
    def build(ctx, hyper, *items):
        per = 3 if momentum else 2
        outs, token = [], None
        for k in range(0, len(items), per):
            p, g = items[k], items[k + 1]
            if momentum:
                g_eff = checked_lib.ggml_add(ctx, g, checked_lib.ggml_scale(ctx, p, weight_decay)) if weight_decay else g
                g = checked_lib.ggml_add(ctx, checked_lib.ggml_scale(ctx, items[k + 2], momentum), g_eff)  # -> v's memory
                outs.append(g)
            checked_lib.ggml_set_param(p)
            step = checked_lib.ggml_opt_step_sgd(ctx, p, g, hyper)
            first = checked_lib.ggml_view_2d(ctx, step, 1, 1, step.nb[1], 0)
            token = first if token is None else checked_lib.ggml_add(ctx, token, first)
        return outs + [token]
    return build


def sgd_hyper_values(lr, momentum, weight_decay) -> list:
    return [lr, 0.0 if momentum else weight_decay]


def sgd_step(items, hyper: AGTensor, token: AGTensor, momentum: float, weight_decay: float):
    """items: (p, g) or (p, g, v) ag tensors; p (and v) are overwritten with their new values.
    Yields the number of items each graph has updated."""
    ex = hyper.device_context.executor
    build = _build_sgd(momentum, weight_decay)
    for start in range(0, len(items), GROUP):
        group = items[start:start + GROUP]
        inputs = [hyper.storage] + [t.storage for it in group for t in it]
        out = [it[2].storage for it in group] if momentum else []
        ex.run(("opt_step_sgd", momentum, weight_decay, len(group)), build, inputs, None, out=out + [token.storage])
        yield len(group)


# -- parameters stored in f16 or bf16 ----------------------------------------------------------------------
# ggml's optimizer kernels are f32 only. As in mixed-precision training, the moments (and SGD's
# velocity) stay f32 and the whole update is computed in f32; only the new parameter is rounded to
# its storage dtype. In f16, Adam's v = (1 - b2) g^2 underflows to 0 for small gradients and eps =
# 1e-8 rounds to 0, so a parameter with a zero gradient would become 0 / 0 = NaN.
def mixed_fusable(p: AGTensor, g: AGTensor, *state: AGTensor) -> bool:
    return (p.storage.type in LOW and g.storage.type in (F32, *LOW) and all(t.storage.type == F32 for t in state)
            and all(t.shape == p.shape and t.device_context is p.device_context for t in (g, *state)))


def scalar_rows(ctx, hyper, n0: int, rows: dict):
    """hyper[k] as a row of n0 equal values, made once per row length in a graph: ggml broadcasts
    a single element one call per element, but a row one call per row."""
    def row(k):
        if (n0, k) not in rows:
            one = checked_lib.ggml_view_1d(ctx, hyper, 1, k * 4)
            rows[(n0, k)] = checked_lib.ggml_repeat_4d(ctx, one, n0, 1, 1, 1)
        return rows[(n0, k)]
    return row


def _as_f32(ctx, t):
    return t if t.type == F32 else checked_lib.ggml_cast(ctx, t, F32)


def adam_mixed_nodes(ctx, h, p, g, m, v, weight_decay: bool) -> list:
    """New m, v (f32) and p (its own dtype) as nodes, h(k) being hyper value k as a row
    (adam_mixed_hyper_values). The formula is ggmlR's, as in ggml's kernel."""
    p32, g32 = _as_f32(ctx, p), _as_f32(ctx, g)
    m = checked_lib.ggml_add(ctx, checked_lib.ggml_mul(ctx, m, h(0)), checked_lib.ggml_mul(ctx, g32, h(1)))
    v = checked_lib.ggml_add(ctx, checked_lib.ggml_mul(ctx, v, h(2)), checked_lib.ggml_mul(ctx, checked_lib.ggml_sqr(ctx, g32), h(3)))
    denom = checked_lib.ggml_add(ctx, checked_lib.ggml_sqrt(ctx, checked_lib.ggml_mul(ctx, v, h(5))), h(6))
    step = checked_lib.ggml_mul(ctx, checked_lib.ggml_div(ctx, checked_lib.ggml_mul(ctx, m, h(4)), denom), h(7))
    if weight_decay:  # decoupled: p (1 - lr wd) - lr * adam step, as ggml's kernel
        step = checked_lib.ggml_add(ctx, step, checked_lib.ggml_mul(ctx, p32, h(8)))
    return [m, v, checked_lib.ggml_cast(ctx, checked_lib.ggml_sub(ctx, p32, step), p.type)]


def sgd_mixed_nodes(ctx, lr, p, g, v, momentum: float, weight_decay: float) -> list:
    """[new v (f32), new p] with momentum (v = momentum v + g + wd p; p = p - lr v), else
    [p - lr (g + wd p)]; `lr` is the learning rate as a row."""
    p32, step = _as_f32(ctx, p), _as_f32(ctx, g)
    if weight_decay:
        step = checked_lib.ggml_add(ctx, step, checked_lib.ggml_scale(ctx, p32, weight_decay))
    out = []
    if momentum:
        step = checked_lib.ggml_add(ctx, checked_lib.ggml_scale(ctx, v, momentum), step)
        out.append(step)
    return out + [checked_lib.ggml_cast(ctx, checked_lib.ggml_sub(ctx, p32, checked_lib.ggml_mul(ctx, step, lr)), p.type)]


def _build_adam_mixed(weight_decay: bool):
    """quads = p0, g0, m0, v0, ...: m and v are written in place (f32), p with its own dtype;
    every node reading an old value is an ancestor of its writer."""
    def build(ctx, hyper, *quads):
        rows, outs = {}, []
        for k in range(0, len(quads), 4):
            p, g, m, v = quads[k:k + 4]
            outs += adam_mixed_nodes(ctx, scalar_rows(ctx, hyper, int(p.ne[0]), rows), p, g, m, v, weight_decay)
        return outs
    return build


def adam_mixed_hyper_values(lr, beta1, beta2, eps, wd, t) -> list:
    return [beta1, 1.0 - beta1, beta2, 1.0 - beta2, 1.0 / (1.0 - beta1 ** t), 1.0 / (1.0 - beta2 ** t), eps,
            lr, lr * wd]


def adam_mixed_step(items, hyper: AGTensor, weight_decay: float):
    """items: (p, g, m, v) with p (and perhaps g) f16/bf16, m and v f32, on one device. Yields the
    number of items each graph has updated."""
    ex = hyper.device_context.executor
    build = _build_adam_mixed(bool(weight_decay))
    for start in range(0, len(items), GROUP):
        group = items[start:start + GROUP]
        inputs = [hyper.storage] + [t.storage for quad in group for t in quad]
        out = [s for p, g, m, v in group for s in (m.storage, v.storage, p.storage)]
        ex.run(("adam_mixed", bool(weight_decay), len(group)), build, inputs, None, out=out)
        yield len(group)


def _build_sgd_mixed(momentum: float, weight_decay: float):
    """items = p, g (, v) per parameter; hyper = [lr]."""
    def build(ctx, hyper, *items):
        per = 3 if momentum else 2
        rows, outs = {}, []
        for k in range(0, len(items), per):
            p, g = items[k], items[k + 1]
            lr = scalar_rows(ctx, hyper, int(p.ne[0]), rows)(0)
            outs += sgd_mixed_nodes(ctx, lr, p, g, items[k + 2] if momentum else None, momentum, weight_decay)
        return outs
    return build


def sgd_mixed_step(items, hyper: AGTensor, momentum: float, weight_decay: float):
    """items: (p, g) or (p, g, v) with p f16/bf16 (v f32); p and v are overwritten."""
    ex = hyper.device_context.executor
    build = _build_sgd_mixed(momentum, weight_decay)
    for start in range(0, len(items), GROUP):
        group = items[start:start + GROUP]
        inputs = [hyper.storage] + [t.storage for it in group for t in it]
        out = [s for it in group for s in ((it[2].storage, it[0].storage) if momentum else (it[0].storage,))]
        ex.run(("sgd_mixed", momentum, weight_decay, len(group)), build, inputs, None, out=out)
        yield len(group)


def kernel_missing(err: GGMLError) -> bool:
    """The executor's error for a device without a kernel for one of the graph's ops."""
    return "has no kernel for" in str(err)
