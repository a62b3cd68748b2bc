"""ONNX's pooling (MaxPool, AveragePool, LpPool, the global pools) and Pad.
"""
from __future__ import annotations

import numpy as np

from .onnx_lib import onnx_lib
from .graph import Val
from .layout import (cont, pad_zero, reshape, slice_axis, take)
from .op_table import FLT_MAX, I64, cscalar, cval, norm_axis, op
from .ops_reduce import POOL_AVG, POOL_MAX, _row_max, arg_rows


def _conv_pads(b, at, in_sizes, k_sizes, strides, dils):
    nd = len(in_sizes)
    for name, v in (("strides", strides), ("dilations", dils), ("kernel_shape", k_sizes)):
        b.need(len(v) == nd and all(int(d) >= 1 for d in v), f"{name} must be {nd} values >= 1, got {list(v)}")
    auto = at.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads_b, pads_e = [], []
        for i in range(nd):
            out = -(-in_sizes[i] // strides[i])
            total = max(0, (out - 1) * strides[i] + (k_sizes[i] - 1) * dils[i] + 1 - in_sizes[i])
            small, big = total // 2, total - total // 2
            pads_b.append(small if auto == "SAME_UPPER" else big)
            pads_e.append(big if auto == "SAME_UPPER" else small)
        return pads_b, pads_e
    if auto == "VALID":
        return [0] * nd, [0] * nd
    pads = [int(p) for p in at.get("pads", [0] * (2 * nd))]
    return pads[:nd], pads[nd:]


def _as_2d(b, x: Val):
    """(N, C, L) as (N, C, 1, L); 2-D spatial as it is."""
    b.need(x.rank in (3, 4), f"only 1-D and 2-D convolution and pooling are supported (input rank {x.rank})")
    if x.rank == 3:
        return reshape(b, b.tensor(x), (x.shape[0], x.shape[1], 1, x.shape[2])), (x.shape[0], x.shape[1], 1, x.shape[2])
    return b.tensor(x), x.shape




# -- pooling --------------------------------------------------------------------------------------------
def _pool_attrs(b, x, at):
    """kernel_shape, strides, dilations, pads (begin, end) of a pooling node, checked."""
    nd = x.rank - 2
    b.need(nd >= 1, f"pooling needs (N, C, spatial...), got rank {x.rank}")
    b.need("kernel_shape" in at, "kernel_shape is required")
    ks = [int(k) for k in at["kernel_shape"]]
    strides = [int(s) for s in at.get("strides", [1] * nd)]
    dils = [int(d) for d in at.get("dilations", [1] * nd)]
    for name, v in (("kernel_shape", ks), ("strides", strides), ("dilations", dils)):
        b.need(len(v) == nd and all(d >= 1 for d in v), f"{name} must be {nd} positive integers, got {v}")
    if "pads" in at:
        pads = [int(p) for p in at["pads"]]
        b.need(len(pads) == 2 * nd and all(p >= 0 for p in pads), f"pads must be {2 * nd} non-negative integers, "
                                                                   f"got {pads}")
    ceil = int(at.get("ceil_mode", 0))
    b.need(ceil in (0, 1), f"ceil_mode must be 0 or 1, got {ceil}")
    pb, pe = _conv_pads(b, at, list(x.shape[2:]), ks, strides, dils)
    return ks, strides, dils, pb, pe, ceil


def _pool_windows(b, x, at, kind, ks, strides, dils, pb, pe, ceil, indices=False):
    """1-, 2- or 3-D pooling with dilations (and MaxPool's Indices) through ggml_im2col_3d: the input as
    ggml [W, H, D, N*C] (every plane pooled alike, so N and C merge), padded by hand, each output cell's
    window gathered into one row of K = KD*KH*KW taps, then the row's max (and the first tap reaching it),
    or its sum over the window's cell count. Returns the output Vals."""
    nd = x.rank - 2
    N, C = x.shape[:2]
    lead = 3 - nd  # missing leading spatial axes: size one, one tap
    sizes = [1] * lead + list(x.shape[2:])
    ks3, st3, dl3 = [1] * lead + ks, [1] * lead + strides, [1] * lead + dils
    pb3, pe3 = [0] * lead + list(pb), [0] * lead + list(pe)
    outs, ends = [], []
    for i in range(3):
        keff = (ks3[i] - 1) * dl3[i] + 1
        span = sizes[i] + pb3[i] + pe3[i] - keff
        b.need(span >= 0, f"the window ({keff} cells with dilation) is larger than the padded input "
                          f"({sizes[i] + pb3[i] + pe3[i]})")
        o = (-(-span // st3[i]) if ceil else span // st3[i]) + 1
        if ceil and (o - 1) * st3[i] >= sizes[i] + pb3[i]:
            o -= 1  # the last window must start inside the input or the left padding
        outs.append(o)
        ends.append((o - 1) * st3[i] + keff - pb3[i])  # input cells the windows reach, padding included
    shape4 = (N * C, *sizes)
    t = reshape(b, b.tensor(x), shape4)
    if kind == "lp":  # (sum |x|^p)^(1/p) over the window; padding adds zeros
        t = _abs_pow(b, cont(b, t), float(at.get("p", 2)))
    for i in range(3):
        if ends[i] < sizes[i]:  # the last cells are in no window
            t, shape4 = slice_axis(b, t, shape4, i + 1, 0, ends[i])
    t, padded = pad_zero(b, t, shape4, [0] + pb3, [0] + [max(0, ends[i] - sizes[i]) for i in range(3)])
    if kind == "max" and padded != shape4:  # padding never wins a max
        mask = np.full(padded[1:], -np.inf, dtype=np.float32)
        mask[pb3[0]:pb3[0] + shape4[1], pb3[1]:pb3[1] + shape4[2], pb3[2]:pb3[2] + shape4[3]] = 0
        t = onnx_lib.ggml_add(b.ctx, t, b.weight(mask))
    K = int(np.prod(ks3))
    taps = b.weight(np.zeros((1, *ks3), np.float32))  # only its shape matters: ne [KW, KH, KD, 1]
    cols = onnx_lib.ggml_im2col_3d(b.ctx, taps, cont(b, t), 1, st3[2], st3[1], st3[0], 0, 0, 0, dl3[2], dl3[1], dl3[0],
                              onnx_lib.GGML_TYPE_F32)  # ne [K, OW, OH, OD * N * C]
    R = N * C * int(np.prod(outs))
    rows = reshape(b, cols, (R, K))
    shape = (N, C) + tuple(outs[lead:])
    if kind == "max":
        y = _row_max(b, rows)
    elif kind == "lp":
        y = _abs_pow(b, onnx_lib.ggml_sum_rows(b.ctx, rows), 1.0 / float(at.get("p", 2)))
    else:
        y = onnx_lib.ggml_sum_rows(b.ctx, rows)
        incl = int(at.get("count_include_pad", 0))
        counts = []
        for i in range(3):  # taps inside the input (or its pads too), per axis: the window is a box
            lo, hi = (-pb3[i], sizes[i] + pe3[i]) if incl else (0, sizes[i])
            pos = np.arange(outs[i])[:, None] * st3[i] - pb3[i] + np.arange(ks3[i])[None, :] * dl3[i]
            counts.append(((pos >= lo) & (pos < hi)).sum(axis=1))
        div = np.einsum("i,j,k->ijk", *counts).astype(np.float64)
        y = onnx_lib.ggml_mul(b.ctx, reshape(b, y, (N * C, *outs)), b.weight((1.0 / np.maximum(div, 1)).astype(np.float32)))
    res = [b.out(reshape(b, y, shape), shape, x.dtype)]
    if indices:
        res.append(_pool_indices(b, rows, at, nd, N * C, sizes, outs, ks3, st3, dl3, pb3, shape))
    return res


def _pool_indices(b, rows, at, nd, planes, sizes, outs, ks3, st3, dl3, pb3, shape):
    """MaxPool's Indices: the flat index in the input (N, C, spatial) of each maximum, the first in window
    order; spatial axes row-major (storage_order 0) or column-major (1). Computed in float32, exact below
    2**24."""
    order = int(at.get("storage_order", 0))
    b.need(order in (0, 1), f"storage_order must be 0 or 1, got {order}")
    step = int(np.prod(sizes))
    b.limit(planes * step < 2 ** 24, "MaxPool's Indices above 2**24 (computed in float32)")
    c = b.ctx
    if order == 0:
        mult = [sizes[1] * sizes[2], sizes[2], 1]
    else:  # column-major over the real spatial axes (the leading padded ones have one cell)
        mult = [0, 0, 0]
        acc = 1
        for i in range(3 - nd, 3):
            mult[i] = acc
            acc *= sizes[i]
    k = arg_rows(b, rows)  # the tap, k = k0 * K1 * K2 + k1 * K2 + k2
    K12, K2 = ks3[1] * ks3[2], ks3[2]
    cf = [mult[i] * dl3[i] for i in range(3)]
    k0 = onnx_lib.ggml_floor(c, onnx_lib.ggml_scale_bias(c, k, 1.0 / K12, 0.5 / K12))
    rem = onnx_lib.ggml_sub(c, k, onnx_lib.ggml_scale(c, k0, float(K12)))
    k1 = onnx_lib.ggml_floor(c, onnx_lib.ggml_scale_bias(c, rem, 1.0 / K2, 0.5 / K2))
    # offset = k2 cf2 + k1 cf1 + k0 cf0 with k2 = rem - k1 K2
    off = onnx_lib.ggml_add(c, onnx_lib.ggml_scale(c, rem, float(cf[2])), onnx_lib.ggml_scale(c, k1, float(cf[1] - K2 * cf[2])))
    off = onnx_lib.ggml_add(c, off, onnx_lib.ggml_scale(c, k0, float(cf[0])))
    grid = np.meshgrid(*[np.arange(outs[i]) * st3[i] - pb3[i] for i in range(3)], indexing="ij")
    base = sum(mult[i] * grid[i] for i in range(3)).astype(np.float32)  # window origins, (OD, OH, OW)
    off = onnx_lib.ggml_add(c, reshape(b, off, (planes, *outs)), b.weight(base))
    plane = (np.arange(planes, dtype=np.float32) * step).reshape(planes, 1, 1, 1)
    off = onnx_lib.ggml_add(c, off, b.weight(plane))
    return b.out(reshape(b, off, shape), shape, I64)


def _abs_pow(b, t, p):
    """|t| ** p: sqr, sqrt and abs for the usual exponents, exp(p log|t|) otherwise (log 0 = -inf gives 0)."""
    c = b.ctx
    a = onnx_lib.ggml_abs(c, t)
    if p == 1.0:
        return a
    if p == 2.0:
        return onnx_lib.ggml_sqr(c, t)
    if p == 0.5:
        return onnx_lib.ggml_sqrt(c, a)
    return onnx_lib.ggml_exp(c, onnx_lib.ggml_scale(c, onnx_lib.ggml_log(c, a), p))


@op("LpPool")
def _lppool(b, node, ins, at):
    x = ins[0]
    b.need(x.rank in (3, 4, 5), f"only 1-, 2- and 3-D pooling are supported (input rank {x.rank})")
    p = at.get("p", 2)
    b.need(float(p) > 0, f"p must be positive, got {p}")
    ks, strides, dils, pb, pe, ceil = _pool_attrs(b, x, at)
    return _pool_windows(b, x, at, "lp", ks, strides, dils, pb, pe, ceil)


def _pool_outs(sizes, ks, strides, pb, pe, ceil):
    """(outs, pad_e) of a 2-D pooling of planes `sizes`: its output's sizes, and the end pads that make
    every window whole (ceil_mode's windows that pass the end pads)."""
    outs, pad_e = [], []
    for i in range(2):
        span = sizes[i] + pb[i] + pe[i] - ks[i]
        o = (-(-span // strides[i]) if ceil else span // strides[i]) + 1
        if ceil and (o - 1) * strides[i] >= sizes[i] + pb[i]:
            o -= 1  # the last window must start inside the input or the left padding
        outs.append(o)
        pad_e.append(pe[i] + max(0, (o - 1) * strides[i] + ks[i] - (sizes[i] + pb[i] + pe[i])))
    return outs, pad_e


def _pool(b, node, ins, at, kind):
    x = ins[0]
    b.need(x.rank in (3, 4, 5), f"only 1-, 2- and 3-D pooling are supported (input rank {x.rank})")
    nd = x.rank - 2
    ks, strides, dils, pb, pe, _ = _pool_attrs(b, x, at)
    want_idx = kind == "max" and len(node.output) > 1 and bool(node.output[1])
    if nd == 3 or want_idx or any(d != 1 for d in dils):
        return _pool_windows(b, x, at, kind, ks, strides, dils, pb, pe, int(at.get("ceil_mode", 0)), want_idx)
    xt, xs = _as_2d(b, x)
    if nd == 1:
        ks, strides, pb, pe = [1] + ks, [1] + strides, [0] + pb, [0] + pe
    sizes = list(xs[2:])
    outs, pad_e = _pool_outs(sizes, ks, strides, pb, pe, int(at.get("ceil_mode", 0)))
    k = b.kernels
    if kind == "max" and k is not None and k.maxpool2d is not None:
        y = b.kernel_node(k.maxpool2d(b.ctx, cont(b, xt), tuple(ks), tuple(strides), tuple(pb), tuple(outs)),
                          "maxpool2d")
        shape = (xs[0], xs[1], outs[0], outs[1]) if nd == 2 else (xs[0], xs[1], outs[1])
        return [b.out(reshape(b, y, shape), shape, x.dtype)]
    if pb == pad_e and kind == "max":  # ggml's own padding: out-of-range cells never enter a max
        y = onnx_lib.ggml_pool_2d(b.ctx, cont(b, xt), POOL_MAX, ks[1], ks[0], strides[1], strides[0],
                             float(pb[1]), float(pb[0]))
        shape = (xs[0], xs[1], outs[0], outs[1])
        if nd == 1:
            shape = (xs[0], xs[1], outs[1])
            y = reshape(b, y, shape)
        return [b.out(y, shape, x.dtype)]
    t, shape = pad_zero(b, xt, xs, [0, 0] + pb, [0, 0] + pad_e)
    Hp, Wp = shape[2], shape[3]
    if kind == "max" and (any(pb) or any(pad_e)):
        mask = np.zeros((Hp, Wp), dtype=np.float32)  # padding never wins a max
        mask[:pb[0], :] = mask[Hp - pad_e[0]:, :] = -FLT_MAX
        mask[:, :pb[1]] = mask[:, Wp - pad_e[1]:] = -FLT_MAX
        t = onnx_lib.ggml_add(b.ctx, t, b.weight(mask))
    y = onnx_lib.ggml_pool_2d(b.ctx, cont(b, t), POOL_MAX if kind == "max" else POOL_AVG,
                         ks[1], ks[0], strides[1], strides[0], 0.0, 0.0)
    if kind == "avg":
        # ggml divides by the window size; ONNX by the cells inside the input (and its pads if asked)
        incl = int(at.get("count_include_pad", 0))
        counts = []
        for i in range(2):
            lo, hi = (-pb[i], sizes[i] + pe[i]) if incl else (0, sizes[i])
            st = np.arange(outs[i]) * strides[i] - pb[i]
            counts.append(np.minimum(st + ks[i], hi) - np.maximum(st, lo))
        div = np.outer(counts[0], counts[1]).astype(np.float64)
        scale = (ks[0] * ks[1] / div).astype(np.float32)
        if not np.all(scale == 1.0):
            y = onnx_lib.ggml_mul(b.ctx, y, b.weight(scale))
    shape = (xs[0], xs[1], outs[0], outs[1])
    if nd == 1:
        shape = (xs[0], xs[1], outs[1])
        y = reshape(b, y, shape)
    return [b.out(y, shape, x.dtype)]


@op("MaxPool")
def _maxpool(b, node, ins, at):
    return _pool(b, node, ins, at, "max")


@op("AveragePool")
def _avgpool(b, node, ins, at):
    return _pool(b, node, ins, at, "avg")


def _global(b, x, kind):
    b.need(x.rank >= 3, "global pooling needs (N, C, spatial...)")
    N, C = x.shape[:2]
    S = int(np.prod(x.shape[2:], dtype=np.int64))
    t = reshape(b, b.tensor(x), (N * C, S))
    if kind == "avg" and b.kernels is not None and t.type == onnx_lib.GGML_TYPE_F32:
        # ggmlpy's row sums (the rows shared among the threads, several accumulators a row) then the
        # scale: ggml's mean sums a row in one chain of dependent adds, on one thread
        y = onnx_lib.ggml_scale(b.ctx, b.kernel_node(b.kernels.sum_rows(b.ctx, t), "sum_rows"), 1.0 / S)
    elif kind == "avg":
        y = onnx_lib.ggml_mean(b.ctx, t)
    else:
        y = onnx_lib.ggml_pool_1d(b.ctx, t, POOL_MAX, S, S, 0)
    shape = (N, C) + (1,) * (x.rank - 2)
    return [b.out(reshape(b, y, shape), shape, x.dtype)]


@op("GlobalAveragePool")
def _gap(b, node, ins, at):
    return _global(b, ins[0], "avg")


@op("GlobalMaxPool")
def _gmp(b, node, ins, at):
    return _global(b, ins[0], "max")


# -- pad ------------------------------------------------------------------------------------------------
@op("Pad", const_inputs=(1, 2, 3))
def _pad(b, node, ins, at):
    x = ins[0]
    r = x.rank
    if len(ins) > 1 and ins[1] is not None:
        pads = [int(p) for p in cval(b, ins[1], "pads")]
        value = cscalar(b, ins[2], "constant_value") if len(ins) > 2 and ins[2] is not None else 0.0
        axes = [norm_axis(b, a, r) for a in cval(b, ins[3], "axes")] if len(ins) > 3 and ins[3] is not None else list(range(r))
    else:
        pads = [int(p) for p in at["pads"]]
        value = float(at.get("value", 0.0))
        axes = list(range(r))
    mode = at.get("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    na = len(axes)
    pb, pe = [0] * r, [0] * r
    for i, a in enumerate(axes):
        pb[a], pe[a] = pads[i], pads[na + i]
    t, shape = b.tensor(x), x.shape
    if mode == "constant":
        for a in range(r):  # negative pads crop
            if pb[a] < 0 or pe[a] < 0:
                t, shape = slice_axis(b, t, shape, a, max(0, -pb[a]), shape[a] - max(0, -pe[a]))
        pbp, pep = [max(0, p) for p in pb], [max(0, p) for p in pe]
        inner = shape
        t, shape = pad_zero(b, t, shape, pbp, pep)
        if value != 0.0 and (any(pbp) or any(pep)):
            mask = np.full(shape, value, dtype=np.float32)
            mask[tuple(slice(p, p + s) for p, s in zip(pbp, inner))] = 0.0
            t = onnx_lib.ggml_add(b.ctx, t, b.weight(mask))
        return [b.out(t, shape, x.dtype)]
    npmode = {"reflect": "reflect", "edge": "edge", "wrap": "wrap"}.get(mode)
    b.need(npmode is not None, f"pad mode '{mode}'")
    for a in range(r):
        if pb[a] or pe[a]:
            b.need(pb[a] >= 0 and pe[a] >= 0, "negative pads with mode " + mode)
            idx = np.pad(np.arange(shape[a]), (pb[a], pe[a]), mode=npmode)
            t, shape = take(b, t, shape, a, idx)
    return [b.out(t, shape, x.dtype)]
