"""ONNX's reductions (ReduceSum, ReduceMean, ..., ArgMax, ArgMin) and softmax (Softmax, LogSoftmax).
"""
from __future__ import annotations

import numpy as np

from .onnx_lib import onnx_lib
from .layout import (cont, permute, reshape, to_rows)
from .op_table import I64, cval, norm_axis, op

POOL_MAX, POOL_AVG = onnx_lib.GGML_OP_POOL_MAX, onnx_lib.GGML_OP_POOL_AVG


# -- reductions -----------------------------------------------------------------------------------------
def _row_max(b, t):
    R = int(t.ne[0])
    return onnx_lib.ggml_pool_1d(b.ctx, cont(b, t), POOL_MAX, R, R, 0)


def _row_prod(b, t):
    """Each row's product (ggml has no product reduction): the row's halves multiplied, halving the
    width each pass; an odd width's last column is set aside and multiplied in at the end."""
    c = b.ctx
    t = cont(b, t)
    w, K = int(t.ne[0]), int(t.ne[1]) * int(t.ne[2]) * int(t.ne[3])
    t = onnx_lib.ggml_reshape_2d(c, t, w, K)
    extra = []
    while w > 1:
        if w % 2:
            w -= 1
            extra.append(onnx_lib.ggml_view_2d(c, t, 1, K, t.nb[1], w * int(t.nb[0])))
        h = w // 2
        t = onnx_lib.ggml_mul(c, onnx_lib.ggml_cont(c, onnx_lib.ggml_view_2d(c, t, h, K, t.nb[1], 0)),
                              onnx_lib.ggml_cont(c, onnx_lib.ggml_view_2d(c, t, h, K, t.nb[1], h * int(t.nb[0]))))
        w = h
    for e in extra:
        t = onnx_lib.ggml_mul(c, t, onnx_lib.ggml_cont(c, e))
    return t


ROW_REDUCE = {
    "ReduceProd": _row_prod,
    "ReduceSum": lambda b, t: onnx_lib.ggml_sum_rows(b.ctx, t),
    "ReduceMean": lambda b, t: onnx_lib.ggml_mean(b.ctx, t),
    "ReduceMax": _row_max,
    "ReduceMin": lambda b, t: onnx_lib.ggml_neg(b.ctx, _row_max(b, onnx_lib.ggml_neg(b.ctx, t))),
    "ReduceSumSquare": lambda b, t: onnx_lib.ggml_sum_rows(b.ctx, onnx_lib.ggml_sqr(b.ctx, t)),
    "ReduceL1": lambda b, t: onnx_lib.ggml_sum_rows(b.ctx, onnx_lib.ggml_abs(b.ctx, t)),
    "ReduceL2": lambda b, t: onnx_lib.ggml_sqrt(b.ctx, onnx_lib.ggml_sum_rows(b.ctx, onnx_lib.ggml_sqr(b.ctx, t))),
    "ReduceLogSum": lambda b, t: onnx_lib.ggml_log(b.ctx, onnx_lib.ggml_sum_rows(b.ctx, t)),
    "ReduceLogSumExp": lambda b, t: _logsumexp(b, t),
}


def _logsumexp(b, t):
    m = _row_max(b, t)
    s = onnx_lib.ggml_sum_rows(b.ctx, onnx_lib.ggml_exp(b.ctx, onnx_lib.ggml_sub(b.ctx, t, m)))
    return onnx_lib.ggml_add(b.ctx, onnx_lib.ggml_log(b.ctx, s), m)


def reduce_axes(b, ins, at, rank: int) -> list | None:
    """A Reduce node's axes, normalized and sorted, from its input (opset 13/18 on) or its
    attribute; none given means all, or None where noop_with_empty_axes makes the node the identity."""
    axes = None
    if len(ins) > 1 and ins[1] is not None:
        axes = [int(a) for a in cval(b, ins[1], "axes").reshape(-1)]
    elif "axes" in at:
        axes = [int(a) for a in at["axes"]]
    if not axes:
        if int(at.get("noop_with_empty_axes", 0)):
            return None
        axes = list(range(rank))
    return sorted({norm_axis(b, a, rank) for a in axes})


def _reduce(name):
    def build(b, node, ins, at):
        x = ins[0]
        axes = reduce_axes(b, ins, at, x.rank)
        if axes is None:
            return [x]
        keep = int(at.get("keepdims", 1))
        rows, kept, _ = to_rows(b, b.tensor(x), x.shape, axes)
        y = ROW_REDUCE[name](b, rows)
        shape = tuple(1 if k in axes else d for k, d in enumerate(x.shape)) if keep else \
            tuple(d for k, d in enumerate(x.shape) if k not in axes)
        return [b.out(reshape(b, y, shape), shape, x.dtype)]
    return build


for _name in ROW_REDUCE:
    op(_name, const_inputs=(1,))(_reduce(_name))


def arg_rows(b, rows, last=False):
    """Index of the maximum of each row (ggml ne0), the first (or last) of equal maxima, as F32 ne [1, R].
    Computed from the row maximum and a mask, not with ggml_argmax, whose choice among equal maxima
    differs between backends (the CPU keeps the last, Vulkan the first)."""
    c = b.ctx
    L = int(rows.ne[0])
    rows = cont(b, rows)
    m = _row_max(b, rows)
    d = onnx_lib.ggml_sub(c, rows, m)  # 0 at the maxima, negative elsewhere
    eq = onnx_lib.ggml_scale_bias(c, onnx_lib.ggml_step(c, onnx_lib.ggml_neg(c, d)), -1.0, 1.0)
    if last:  # max over (i + 1) * eq, minus one
        w = np.arange(1, L + 1, dtype=np.float32)
        return onnx_lib.ggml_scale_bias(c, _row_max(b, onnx_lib.ggml_mul(c, eq, b.weight(w))), 1.0, -1.0)
    w = np.arange(L, 0, -1, dtype=np.float32)  # L - i: the first maximum scores highest
    return onnx_lib.ggml_scale_bias(c, _row_max(b, onnx_lib.ggml_mul(c, eq, b.weight(w))), -1.0, float(L))


def _argext(sign):
    def build(b, node, ins, at):
        x = ins[0]
        axis = norm_axis(b, at.get("axis", 0), x.rank)
        rows, kept, _ = to_rows(b, b.tensor(x), x.shape, [axis])
        if sign < 0:
            rows = onnx_lib.ggml_neg(b.ctx, rows)
        y = arg_rows(b, rows, bool(int(at.get("select_last_index", 0))))
        shape = tuple(1 if k == axis else d for k, d in enumerate(x.shape)) if int(at.get("keepdims", 1)) else \
            tuple(d for k, d in enumerate(x.shape) if k != axis)
        return [b.out(reshape(b, y, shape), shape, I64)]
    return build


op("ArgMax")(_argext(1))
op("ArgMin")(_argext(-1))


# -- softmax --------------------------------------------------------------------------------------------
def _softmax_rows(b, x, axis, opset, log):
    if opset < 13:  # the input is coerced to 2-D at axis
        R = int(np.prod(x.shape[axis:], dtype=np.int64))
        rows = reshape(b, b.tensor(x), (x.size // R, R))
        perm = None
    else:
        rows, _, perm = to_rows(b, b.tensor(x), x.shape, [axis])
    if log:
        m = _row_max(b, rows)
        z = onnx_lib.ggml_sub(b.ctx, rows, m)
        y = onnx_lib.ggml_sub(b.ctx, z, onnx_lib.ggml_log(b.ctx, onnx_lib.ggml_sum_rows(b.ctx, onnx_lib.ggml_exp(b.ctx, z))))
    else:
        y = onnx_lib.ggml_soft_max(b.ctx, rows)
    if perm is None:
        return reshape(b, y, x.shape)
    moved = tuple(x.shape[p] for p in perm)
    inv = list(np.argsort(perm))
    return permute(b, reshape(b, y, moved), inv, moved)  # moved: the size-one axes dropped above rank 4


def _softmax(log):
    def build(b, node, ins, at):
        x = ins[0]
        opset = b.opset
        axis = norm_axis(b, at.get("axis", -1 if opset >= 13 else 1), x.rank)
        return [b.out(_softmax_rows(b, x, axis, opset, log), x.shape, x.dtype)]
    return build


op("Softmax")(_softmax(False))
op("LogSoftmax")(_softmax(True))
