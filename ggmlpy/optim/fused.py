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

from ..bindings import lib
from ..errors import GGMLError
from ..tensor import AGTensor, ag_tensor

F32 = lib.GGML_TYPE_F32
# Tensors per parameter in a group graph: at most 4 leaves + step + view + add + 3 velocity
# nodes (the executor's contexts hold 256 tensors and graphs of 256 nodes).
GROUP = 24


def fusable(p: AGTensor, g: AGTensor, *state: AGTensor) -> bool:
    """ggml's optimizer kernels are f32 only and abort on a shape mismatch: check first."""
    return all(t.st.type == F32 and t.shape == p.shape and t.dc is p.dc for t in (p, g, *state))


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
        lib.ggml_set_param(p)
        step = lib.ggml_opt_step_adamw(ctx, p, g, m, v, hyper)
        first = lib.ggml_view_2d(ctx, step, 1, 1, step.nb[1], 0)
        token = first if token is None else lib.ggml_add(ctx, token, first)
    return token


def adamw_step(items, hyper: AGTensor, token: AGTensor):
    """items: (p, g, m, v) ag tensors, all f32 on one device. Runs ceil(n / GROUP) graphs,
    yielding the number of items each one has updated."""
    ex = hyper.dc.executor
    for start in range(0, len(items), GROUP):
        group = items[start:start + GROUP]
        inputs = [hyper.st] + [t.st for quad in group for t in quad]
        ex.run(("opt_step_adamw", len(group)), _build_adamw, inputs, None, out=[token.st])
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
                g_eff = lib.ggml_add(ctx, g, lib.ggml_scale(ctx, p, weight_decay)) if weight_decay else g
                g = lib.ggml_add(ctx, lib.ggml_scale(ctx, items[k + 2], momentum), g_eff)  # -> v's memory
                outs.append(g)
            lib.ggml_set_param(p)
            step = lib.ggml_opt_step_sgd(ctx, p, g, hyper)
            first = lib.ggml_view_2d(ctx, step, 1, 1, step.nb[1], 0)
            token = first if token is None else lib.ggml_add(ctx, token, first)
        return outs + [token]
    return build


def sgd_hyper_values(lr, momentum, weight_decay) -> list:
    return [lr, 0.0 if momentum else weight_decay]


def sgd_step(items, hyper: AGTensor, token: AGTensor, momentum: float, weight_decay: float):
    """items: (p, g) or (p, g, v) ag tensors; p (and v) are overwritten with their new values.
    Yields the number of items each graph has updated."""
    ex = hyper.dc.executor
    build = _build_sgd(momentum, weight_decay)
    for start in range(0, len(items), GROUP):
        group = items[start:start + GROUP]
        inputs = [hyper.st] + [t.st for it in group for t in it]
        out = [it[2].st for it in group] if momentum else []
        ex.run(("opt_step_sgd", momentum, weight_decay, len(group)), build, inputs, None, out=out + [token.st])
        yield len(group)


def kernel_missing(err: GGMLError) -> bool:
    """The executor's error for a device without a kernel for one of the graph's ops."""
    return "has no kernel for" in str(err)
