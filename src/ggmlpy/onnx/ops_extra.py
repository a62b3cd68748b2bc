"""ONNX operators: quantization (QuantizeLinear, DequantizeLinear, QLinearMatMul, QLinearConv),
cumulative sums, triangles, a few more element-wise functions, and data-dependent shapes
(Range, NonZero...), which ggml graphs can only hold as load-time constants."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

from . import float8
from .graph import FLOAT8_TYPES, NeedsValue, Val, const, np_dtype
from .layout import binary, binary_value, permute, reshape, take, to_rows
from .op_table import OPS, cscalar, cval, f, norm_axis, op
from .ops_elementwise import _round_even, _unary
from .ops_shape import _concat
from .ops_conv import _conv
from .ops_pool import _global
from .ops_products import _gemm, _matmul_op
from .ops_reduce import _softmax_rows, arg_rows
from .onnx_lib import onnx_lib

QRANGE = {TensorProto.UINT8: (0, 255), TensorProto.INT8: (-128, 127), TensorProto.UINT16: (0, 65535),
          TensorProto.INT16: (-32768, 32767), TensorProto.INT32: (-2 ** 31, 2 ** 31 - 1),
          TensorProto.UINT4: (0, 15), TensorProto.INT4: (-8, 7)}


def _along(b, v: Val, axis, rank):
    """A per-axis (1-D) or per-tensor parameter, shaped to broadcast against a rank-`rank` tensor."""
    if v is None:
        return None
    if v.size == 1 or v.rank == rank:
        return v
    shape = [1] * rank
    shape[axis] = v.size
    return const(v.const.reshape(shape), v.dtype) if v.is_const else Val(tuple(shape), v.dtype,
                                                                        t=reshape(b, b.tensor(v), tuple(shape)))


def dequantize(b, x, scale, zp, axis, out_type=TensorProto.FLOAT):
    axis = norm_axis(b, axis, x.rank) if scale.size > 1 else 0  # the axis matters for per-axis scales only
    scale, zp = _along(b, scale, axis, x.rank), _along(b, zp, axis, x.rank)
    if x.is_const and scale.is_const and (zp is None or zp.is_const):
        y = (x.const.astype(np.float64) - (0 if zp is None else zp.const.astype(np.float64))) * scale.const
        return const(y.astype(np.float32), out_type)
    v = x if zp is None else binary_value(b, onnx_lib.ggml_sub, Val(x.shape, TensorProto.FLOAT, t=f(b, x)), zp)
    y = binary_value(b, onnx_lib.ggml_mul, Val(v.shape, TensorProto.FLOAT, t=f(b, v) if v.t is None else v.t),
                     scale, True)
    return b.out(y.t, y.shape, out_type)


def quantize(b, x, scale, zp, axis, out_type, saturate=True):
    axis = norm_axis(b, axis, x.rank) if scale.size > 1 else 0
    scale, zp = _along(b, scale, axis, x.rank), _along(b, zp, axis, x.rank)
    q = binary_value(b, onnx_lib.ggml_div, Val(x.shape, x.dtype, t=f(b, x)), scale)
    if out_type in FLOAT8_TYPES:  # x / scale (+ a zero point, 0 for these types) rounded to the type
        if zp is not None:
            q = binary_value(b, onnx_lib.ggml_add, q, zp, True)
        return b.out(float8.round_in_graph(b, q.t, out_type, saturate), q.shape, out_type)
    lo, hi = QRANGE.get(out_type, (None, None))
    b.need(lo is not None, f"quantization to {TensorProto.DataType.Name(out_type)}")
    # saturation takes an infinity to the type's bound: made the largest finite float first, which
    # the rounding keeps (an infinity would round to NaN there)
    fmax = float(np.finfo(np.float32).max)
    t = _round_even(b, onnx_lib.ggml_clamp(b.ctx, q.t, -fmax, fmax))
    v = Val(q.shape, x.dtype, t=t)
    if zp is not None:
        v = binary_value(b, onnx_lib.ggml_add, v, zp, True)
    return b.out(onnx_lib.ggml_clamp(b.ctx, v.t, float(lo), float(hi)), v.shape, out_type)


def _blocks(b, x, scale, zp, at):
    """Blocked quantization (block_size > 0): scale and zero point have x's shape but ceil(D / block_size)
    entries along `axis`, each for a block of that many consecutive elements. They are expanded to x's
    shape (np.repeat for constants, ggml_get_rows over the axis otherwise); then the element-wise path runs."""
    bs = int(at.get("block_size", 0))
    b.need(bs >= 0, f"block_size must be non-negative, got {bs}")
    if bs == 0:
        return scale, zp
    axis = norm_axis(b, at.get("axis", 1), x.rank)
    D = x.shape[axis]
    want = tuple(-(-D // bs) if k == axis else d for k, d in enumerate(x.shape))
    for name, v in (("scale", scale), ("zero point", zp)):
        b.need(v is None or v.shape == want, f"blocked quantization: {name} has shape {list(v.shape) if v else None}, "
                                             f"expected {list(want)} (block_size {bs} along axis {axis})")
    idx = np.arange(D) // bs

    def expand(v):
        if v is None:
            return None
        if v.is_const:
            return const(np.take(v.const, idx, axis=axis), v.dtype)
        t, shape = take(b, b.tensor(v), v.shape, axis, idx)
        return Val(shape, v.dtype, t=t)
    return expand(scale), expand(zp)


@op("DequantizeLinear")
def _dequantize(b, node, ins, at):
    x, scale = ins[0], ins[1]
    zp = ins[2] if len(ins) > 2 else None
    out_type = int(at.get("output_dtype", 0)) or scale.dtype
    scale, zp = _blocks(b, x, scale, zp, at)
    return [dequantize(b, x, scale, zp, at.get("axis", 1), out_type)]


@op("QuantizeLinear")
def _quantize(b, node, ins, at):
    x, scale = ins[0], ins[1]
    zp = ins[2] if len(ins) > 2 else None
    out_type = zp.dtype if zp is not None else int(at.get("output_dtype", 0)) or TensorProto.UINT8
    scale, zp = _blocks(b, x, scale, zp, at)
    return [quantize(b, x, scale, zp, at.get("axis", 1), out_type, bool(at.get("saturate", 1)))]


@op("QLinearMatMul")
def _qlinear_matmul(b, node, ins, at):
    a, sa, za, w, sw, zw, sy, zy = ins
    if a.rank == 2 and _exact_product(a, za, w, sw, zw, (sa, sy)):  # onnxruntime's: sa * sw / sy
        m = np.float32(sa.const.reshape(-1)[0]) * sw.const.astype(np.float32).reshape(-1) / np.float32(sy.const.reshape(-1)[0])
        return [requantize(b, _integer_product(b, node, a, za, w, zw, None, {}), m, zy, 1)]
    A = dequantize(b, a, sa, za, -2 if a.rank > 1 else 0)  # per-row scales for a, per-column for b
    W = dequantize(b, w, sw, zw, -1)
    y = _matmul_op(b, node, [A, W], {})[0]
    return [quantize(b, y, sy, zy, -1, zy.dtype)]


def requantize(b, acc, multiplier, zy, axis):
    """An integer-valued float32 accumulator to zy's type as onnxruntime's requantization (MLAS) does it:
    round half to even of float32(acc) * multiplier (one product in float32), plus the zero point,
    saturated. `multiplier` (per-tensor or per-`axis`) is float32(x_scale * w_scale) / y_scale."""
    m = multiplier.reshape(-1)
    if m.size > 1:
        shape = [1] * acc.rank
        shape[axis] = m.size
        m = m.reshape(shape)
    y = binary_value(b, onnx_lib.ggml_mul, acc, const(m.astype(np.float32)))
    t = _round_even(b, y.t)
    if zy is not None:
        t = binary_value(b, onnx_lib.ggml_add, Val(y.shape, TensorProto.FLOAT, t=t), zy).t
    lo, hi = QRANGE[zy.dtype if zy is not None else TensorProto.UINT8]
    return b.out(onnx_lib.ggml_clamp(b.ctx, t, float(lo), float(hi)), y.shape,
                 zy.dtype if zy is not None else TensorProto.UINT8)


def _integer_conv(b, node, x, zx, w, zw, bias, multiplier, zy, at):
    """QLinearConv as onnxruntime computes it: the convolution of x - x_zero_point by w - w_zero_point
    plus the int32 bias, all integers (exact in float32 below 2**24, so any summation order gives
    onnxruntime's int32 sum), then one requantization: no rounding of dequantized values to differ by."""
    X = x if zx is None else binary_value(b, onnx_lib.ggml_sub, Val(x.shape, TensorProto.FLOAT, t=f(b, x)), zx)
    W = w.const.astype(np.float32)
    if zw is not None:
        W = W - zw.const.astype(np.float32).reshape((-1,) + (1,) * (w.rank - 1))
    args = [Val(X.shape, TensorProto.FLOAT, t=f(b, X) if X.t is None else X.t), const(W)]
    if bias is not None:
        args.append(const(bias.const.astype(np.float32)))
    acc = _conv(b, node, args, at)[0]
    return requantize(b, acc, multiplier, zy, 1)


@op("QLinearConv")
def _qlinear_conv(b, node, ins, at):
    x, sx, zx, w, sw, zw, sy, zy = ins[:8]
    bias = ins[8] if len(ins) > 8 else None
    if all(v is None or v.is_const for v in (sx, w, sw, zw, sy, bias)) and (
            zx is None or zx.size == 1) and (zw is None or zw.size in (1, w.shape[0])):
        multiplier = (np.float32(sx.const.reshape(-1)[0]) * sw.const.astype(np.float32).reshape(-1)
                      / np.float32(sy.const.reshape(-1)[0]))
        return [_integer_conv(b, node, x, zx, w, zw, bias, multiplier, zy, at)]
    X = dequantize(b, x, sx, zx, 1)
    W = dequantize(b, w, sw, zw, 0)
    args = [X, W]
    if bias is not None:  # int32 bias in units of x_scale * w_scale
        b.need_value(bias.is_const and sx.is_const and sw.is_const, "QLinearConv's bias and scales must be constant", bias, sx, sw)
        args.append(const((bias.const.astype(np.float64) * sx.const.reshape(-1) * sw.const.reshape(-1))
                          .astype(np.float32)))
    y = _conv(b, node, args, at)[0]
    return [quantize(b, y, sy, zy, 1, zy.dtype)]


@op("CumSum", const_inputs=(1,))
def _cumsum(b, node, ins, at):
    x = ins[0]
    axis = norm_axis(b, cscalar(b, ins[1], "axis", int), x.rank)
    rev, excl = int(at.get("reverse", 0)), int(at.get("exclusive", 0))
    t, shape = b.tensor(x), x.shape
    L = shape[axis]
    if rev:
        t, shape = take(b, t, shape, axis, np.arange(L)[::-1])
    rows, keep, perm = to_rows(b, t, shape, [axis])
    y = onnx_lib.ggml_cumsum(b.ctx, rows)
    if excl:  # shift by one: the running sum before each element
        y = onnx_lib.ggml_sub(b.ctx, y, rows)
    moved = tuple(shape[p] for p in perm)
    y = permute(b, reshape(b, y, moved), list(np.argsort(perm)))
    if rev:
        y, shape = take(b, y, shape, axis, np.arange(L)[::-1])
    return [b.out(y, x.shape, x.dtype)]


@op("Trilu", const_inputs=(1,))
def _trilu(b, node, ins, at):
    x = ins[0]
    k = cscalar(b, ins[1], "k", int) if len(ins) > 1 and ins[1] is not None else 0
    upper = int(at.get("upper", 1))
    n, m = x.shape[-2:]
    mask = np.triu(np.ones((n, m), np.float32), k) if upper else np.tril(np.ones((n, m), np.float32), k)
    return [b.out(onnx_lib.ggml_mul(b.ctx, f(b, x), b.weight(mask)), x.shape, x.dtype)]


def _exp_pair(b, x, sign):
    c = b.ctx
    e, en = onnx_lib.ggml_exp(c, x), onnx_lib.ggml_exp(c, onnx_lib.ggml_neg(c, x))
    return onnx_lib.ggml_scale(c, onnx_lib.ggml_add(c, e, en) if sign > 0 else onnx_lib.ggml_sub(c, e, en), 0.5)


OPS["Sinh"] = _unary(lambda b, x, at: _exp_pair(b, x, -1))
OPS["Cosh"] = _unary(lambda b, x, at: _exp_pair(b, x, 1))
OPS["Tan"] = _unary(lambda b, x, at: onnx_lib.ggml_div(b.ctx, onnx_lib.ggml_sin(b.ctx, x), onnx_lib.ggml_cos(b.ctx, x)))


@op("MeanVarianceNormalization")
def _mvn(b, node, ins, at):
    x = ins[0]
    axes = sorted({norm_axis(b, a, x.rank) for a in at.get("axes", [0, 2, 3])})
    rows, keep, perm = to_rows(b, b.tensor(x), x.shape, axes)
    c = b.ctx
    mean = onnx_lib.ggml_mean(c, rows)
    d = onnx_lib.ggml_sub(c, rows, mean)
    sd = onnx_lib.ggml_sqrt(c, onnx_lib.ggml_mean(c, onnx_lib.ggml_sqr(c, d)))
    y = onnx_lib.ggml_div(c, d, onnx_lib.ggml_scale_bias(c, sd, 1.0, 1e-9))
    moved = tuple(x.shape[p] for p in perm)
    return [b.out(permute(b, reshape(b, y, moved), list(np.argsort(perm))), x.shape, x.dtype)]


@op("DepthToSpace", "SpaceToDepth")
def _depth_space(b, node, ins, at):
    """The six-dimensional reshape-transpose of these ops, as one constant gather over the flat tensor."""
    x = ins[0]
    bs = int(at["blocksize"])
    N, C, H, W = x.shape
    idx = np.arange(x.size).reshape(x.shape)
    if node.op_type == "DepthToSpace":
        mode = at.get("mode", b"DCR")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        if mode == "DCR":
            t = idx.reshape(N, bs, bs, C // bs ** 2, H, W).transpose(0, 3, 4, 1, 5, 2)
        else:
            t = idx.reshape(N, C // bs ** 2, bs, bs, H, W).transpose(0, 1, 4, 2, 5, 3)
        out = (N, C // bs ** 2, H * bs, W * bs)
    else:
        mode = at.get("mode", b"DCR")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        perm = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
        t = idx.reshape(N, C, H // bs, bs, W // bs, bs).transpose(*perm)
        out = (N, C * bs * bs, H // bs, W // bs)
    flat = reshape(b, b.tensor(x), (x.size, 1))
    y, _ = take(b, flat, (x.size, 1), 0, t.reshape(-1))
    return [b.out(reshape(b, y, out), out, x.dtype)]


def _gather_elements_computed(b, x, ind, axis):
    """GatherElements with indices computed in the graph: each output's flat index into x (its own
    position with the axis coordinate replaced, in float32, exact below 2**24), then ggml_get_rows over
    x's elements. An index out of range cannot raise inside a graph: it is clamped and its output is NaN."""
    c = b.ctx
    b.need(ind.rank == x.rank and all(i <= d for k, (i, d) in enumerate(zip(ind.shape, x.shape)) if k != axis),
           f"indices of shape {list(ind.shape)} do not fit data of shape {list(x.shape)} (axis {axis})")
    b.limit(x.size < 2 ** 24, "GatherElements with computed indices into more than 2**24 elements")
    L = x.shape[axis]
    stride = int(np.prod(x.shape[axis + 1:], dtype=np.int64))
    i = f(b, ind)
    i = onnx_lib.ggml_add(c, i, onnx_lib.ggml_scale(c, onnx_lib.ggml_step(c, onnx_lib.ggml_neg(c, i)), float(L)))  # negatives wrap
    ok = onnx_lib.ggml_mul(c, onnx_lib.ggml_step(c, onnx_lib.ggml_scale_bias(c, i, 1.0, 1.0)),  # 0 <= i < L
                      onnx_lib.ggml_step(c, onnx_lib.ggml_scale_bias(c, i, -1.0, float(L))))
    i = onnx_lib.ggml_clamp(c, i, 0.0, float(L - 1))
    grid = list(np.indices(ind.shape))
    grid[axis] = np.zeros(ind.shape, np.int64)
    base = np.ravel_multi_index(tuple(grid), x.shape).astype(np.float32)
    flat = onnx_lib.ggml_add(c, onnx_lib.ggml_scale(c, i, float(stride)), b.weight(base))
    rows = reshape(b, b.tensor(x), (x.size, 1))
    y = onnx_lib.ggml_get_rows(c, rows, onnx_lib.ggml_cast(c, reshape(b, flat, (ind.size,)), onnx_lib.GGML_TYPE_I32))
    y = onnx_lib.ggml_mul(c, reshape(b, y, ind.shape), onnx_lib.ggml_div(c, ok, ok))  # 1, or 0/0 = NaN out of range
    return [b.out(y, ind.shape, x.dtype)]


@op("GatherElements")
def _gather_elements(b, node, ins, at):
    x, ind = ins
    axis = norm_axis(b, at.get("axis", 0), x.rank)
    if not ind.is_const:
        return _gather_elements_computed(b, x, ind, axis)
    idx = np.asarray(ind.const, dtype=np.int64)
    L = x.shape[axis]
    b.need(((idx >= -L) & (idx < L)).all(), f"indices out of range [-{L}, {L})")
    idx = np.where(idx < 0, idx + L, idx)
    grid = list(np.indices(idx.shape))
    grid[axis] = idx
    flat_idx = np.ravel_multi_index(tuple(grid), x.shape)
    flat = reshape(b, b.tensor(x), (x.size, 1))
    y, _ = take(b, flat, (x.size, 1), 0, flat_idx.reshape(-1))
    return [b.out(reshape(b, y, idx.shape), idx.shape, x.dtype)]


def _needs_constants(name):
    def build(b, node, ins, at):
        raise NeedsValue(b.where() + f"{name}'s output shape depends on its input values: ggml graphs have static "
                         "shapes, so its inputs must be known at load time (constants, or computed from graph inputs)")
    return build


for _name, _idx in (("Range", (0, 1, 2)), ("Unique", (0,)), ("Compress", (0, 1)),
                    ("OneHot", (0, 1, 2))):
    op(_name, const_inputs=_idx)(_needs_constants(_name))

del np_dtype


@op("IsNaN")
def _isnan(b, node, ins, at):
    x = ins[0]  # NaN is the one value whose |x| + 1 is not positive
    c = b.ctx
    t = onnx_lib.ggml_scale_bias(c, onnx_lib.ggml_step(c, onnx_lib.ggml_scale_bias(c, onnx_lib.ggml_abs(c, f(b, x)), 1.0, 1.0)), -1.0, 1.0)
    return [b.out(t, x.shape, TensorProto.BOOL)]


@op("IsInf")
def _isinf(b, node, ins, at):
    x = ins[0]
    c = b.ctx
    fmax = float(np.finfo(np.float32).max)
    t = f(b, x)
    pos, neg = int(at.get("detect_positive", 1)), int(at.get("detect_negative", 1))
    src = onnx_lib.ggml_abs(c, t) if pos and neg else (t if pos else onnx_lib.ggml_neg(c, t))
    y = onnx_lib.ggml_step(c, onnx_lib.ggml_scale_bias(c, src, 1.0, -fmax))
    if not pos and not neg:
        y = onnx_lib.ggml_scale(c, y, 0.0)
    return [b.out(y, x.shape, TensorProto.BOOL)]


@op("TopK", const_inputs=(1,))
def _topk(b, node, ins, at):
    x = ins[0]
    k = cscalar(b, ins[1], "K", int)
    axis = norm_axis(b, at.get("axis", -1), x.rank)
    largest = int(at.get("largest", 1))
    L = x.shape[axis]
    b.need(0 < k <= L, f"K={k} for an axis of {L}")
    rows, keep, perm = to_rows(b, b.tensor(x), x.shape, [axis])
    R = int(rows.ne[1])
    kern = b.kernels
    if kern is not None and kern.topk is not None:  # equal values by index, lower first, as ONNX orders them
        idx = b.kernel_node(kern.topk(b.ctx, onnx_lib.ggml_cont(b.ctx, rows), k, bool(largest)), "topk")
    else:  # ggml's argsort (other devices): equal values in the order its sort leaves them
        key = rows if largest else onnx_lib.ggml_neg(b.ctx, rows)
        idx = onnx_lib.ggml_argsort_top_k(b.ctx, onnx_lib.ggml_cont(b.ctx, key), k)  # I32 ne [k, R], descending
        idx = onnx_lib.ggml_cont(b.ctx, idx)
    vals = onnx_lib.ggml_get_rows(b.ctx, onnx_lib.ggml_reshape_3d(b.ctx, rows, 1, L, R), idx)  # ne [1, k, R]
    moved = tuple(x.shape[p] for p in perm[:-1]) + (k,)
    inv = list(np.argsort(perm))
    out_shape = tuple(k if d == axis else x.shape[d] for d in range(x.rank))
    v = permute(b, reshape(b, vals, moved), inv)
    i = permute(b, reshape(b, onnx_lib.ggml_cast(b.ctx, idx, onnx_lib.GGML_TYPE_F32), moved), inv)
    return [b.out(v, out_shape, x.dtype), b.out(i, out_shape, TensorProto.INT64)]


def _scatter(b, x, updates, positions, reduction):
    """data with updates written at flat `positions` (constant). Duplicated positions are applied in
    rounds, in order, each round a gather of the updates and a masked combine."""
    b.need(reduction in ("none", "add", "mul", "max", "min"), f"reduction '{reduction}'")
    positions = np.asarray(positions, dtype=np.int64)
    seen: dict = {}
    rounds: list = []  # rounds[r][position] = update index of that position's r-th occurrence
    for u, p in enumerate(positions.tolist()):
        r = seen.get(p, 0)
        seen[p] = r + 1
        if r == len(rounds):
            rounds.append({})
        rounds[r][p] = u
    n = int(np.prod(x.shape, dtype=np.int64))
    flat_u = reshape(b, b.tensor(updates), (updates.size, 1))
    acc = f(b, x)
    c = b.ctx
    for rnd in rounds:
        src = np.zeros(n, dtype=np.int64)
        hit = np.zeros(n, dtype=np.float32)
        for p, u in rnd.items():
            src[p], hit[p] = u, 1.0
        g, _ = take(b, flat_u, (updates.size, 1), 0, src)
        g = reshape(b, g, x.shape)
        h = b.weight(hit.reshape(x.shape))
        if reduction == "none":
            new = g
        elif reduction == "add":
            new = onnx_lib.ggml_add(c, acc, g)
        elif reduction == "mul":
            new = onnx_lib.ggml_mul(c, acc, g)
        elif reduction == "max":
            new = onnx_lib.ggml_add(c, acc, onnx_lib.ggml_relu(c, onnx_lib.ggml_sub(c, g, acc)))
        else:
            new = onnx_lib.ggml_sub(c, acc, onnx_lib.ggml_relu(c, onnx_lib.ggml_sub(c, acc, g)))
        keep = onnx_lib.ggml_mul(c, acc, b.weight(1.0 - hit.reshape(x.shape)))
        acc = onnx_lib.ggml_add(c, keep, onnx_lib.ggml_mul(c, new, h))
    return b.out(acc, x.shape, x.dtype)


@op("ScatterElements", "Scatter", const_inputs=(1,))
def _scatter_elements(b, node, ins, at):
    x, ind, upd = ins
    axis = norm_axis(b, at.get("axis", 0), x.rank)
    idx = np.asarray(cval(b, ind, "indices"), dtype=np.int64)
    L = x.shape[axis]
    b.need(((idx >= -L) & (idx < L)).all(), f"indices out of range [-{L}, {L})")
    grid = list(np.indices(idx.shape))
    grid[axis] = np.where(idx < 0, idx + L, idx)
    pos = np.ravel_multi_index(tuple(grid), x.shape).reshape(-1)
    red = at.get("reduction", b"none")
    return [_scatter(b, x, upd, pos, red.decode() if isinstance(red, bytes) else red)]


@op("ScatterND", const_inputs=(1,))
def _scatter_nd(b, node, ins, at):
    x, ind, upd = ins
    idx = np.asarray(cval(b, ind, "indices"), dtype=np.int64)
    q = idx.shape[-1]
    lead = idx.reshape(-1, q)
    lead = np.where(lead < 0, lead + np.array(x.shape[:q]), lead)
    inner = int(np.prod(x.shape[q:], dtype=np.int64))
    base = np.ravel_multi_index(tuple(lead.T), x.shape[:q]) * inner
    pos = (base[:, None] + np.arange(inner)[None, :]).reshape(-1)
    red = at.get("reduction", b"none")
    return [_scatter(b, x, upd, pos, red.decode() if isinstance(red, bytes) else red)]


@op("Hardmax")
def _hardmax(b, node, ins, at):
    x = ins[0]
    axis = norm_axis(b, at.get("axis", -1), x.rank)
    L = x.shape[axis]
    rows, keep, perm = to_rows(b, b.tensor(x), x.shape, [axis])
    first = arg_rows(b, rows)
    R = int(rows.ne[1])
    ar = b.weight(np.tile(np.arange(L, dtype=np.float32), (R, 1)))  # ne [L, R]
    d = onnx_lib.ggml_sub(b.ctx, ar, onnx_lib.ggml_reshape_2d(b.ctx, first, 1, R))
    one = onnx_lib.ggml_scale_bias(b.ctx, onnx_lib.ggml_add(b.ctx, onnx_lib.ggml_step(b.ctx, d),
                                                  onnx_lib.ggml_step(b.ctx, onnx_lib.ggml_neg(b.ctx, d))), -1.0, 1.0)
    moved = tuple(x.shape[p] for p in perm)
    return [b.out(permute(b, reshape(b, one, moved), list(np.argsort(perm))), x.shape, x.dtype)]


# -- onnxruntime's quantized contrib operators (domain com.microsoft), as written by its static quantizer ----
MS = "com.microsoft:"


def _qbinary(fn):
    def build(b, node, ins, at):
        a, sa, za, x, sx, zx, sy, zy = (list(ins) + [None] * 8)[:8]
        A = dequantize(b, a, sa, za, 0)
        X = dequantize(b, x, sx, zx, 0)
        t, shape = binary(b, fn, A, X, True)
        return [quantize(b, Val(shape, TensorProto.FLOAT, t=t), sy, zy, 0, zy.dtype if zy is not None else TensorProto.UINT8)]
    return build


def _qlinear_add(b, node, ins, at):
    """QLinearAdd; with ggmlpy's kernels and per-tensor parameters, onnxruntime's arithmetic (its
    fused multiply-add: kernels.c), else the sum of the dequantized values, quantized."""
    a, sa, za, x, sx, zx, sy, zy = (list(ins) + [None] * 8)[:8]
    kern = b.kernels
    params = (sa, za, sx, zx, sy, zy)
    if kern is None or not all(v is None or (v.is_const and v.size == 1) for v in params):
        return _qbinary(lambda c, p, q: onnx_lib.ggml_add(c, p, q))(b, node, ins, at)
    out_type = zy.dtype if zy is not None else TensorProto.UINT8
    lo, hi = QRANGE[out_type]
    z = [0 if v is None else int(np.asarray(v.const).reshape(-1)[0]) for v in (za, zx, zy)]
    s_a, s_x, s_y = (np.float32(np.asarray(v.const).reshape(-1)[0]) for v in (sa, sx, sy))
    t, shape = binary(b, lambda c, p, q: b.kernel_node(kern.qlinear_add(c, p, q, z[0], z[1], z[2], float(s_a / s_y),
                                                                          float(s_x / s_y), lo, hi), "qlinear_add"),
                      Val(a.shape, TensorProto.FLOAT, t=f(b, a)), Val(x.shape, TensorProto.FLOAT, t=f(b, x)))
    return [b.out(t, shape, out_type)]


OPS[MS + "QLinearAdd"] = _qlinear_add
OPS[MS + "QLinearMul"] = _qbinary(lambda c, p, q: onnx_lib.ggml_mul(c, p, q))


def _qunary(fn):
    def build(b, node, ins, at):
        x, sx, zx, sy, zy = (list(ins) + [None] * 5)[:5]
        X = dequantize(b, x, sx, zx, 0)
        y = fn(b, f(b, X), at)
        return [quantize(b, Val(x.shape, TensorProto.FLOAT, t=y), sy, zy, 0,
                         zy.dtype if zy is not None else TensorProto.UINT8)]
    return build


OPS[MS + "QLinearSigmoid"] = _qunary(lambda b, t, at: onnx_lib.ggml_sigmoid(b.ctx, t))
OPS[MS + "QLinearLeakyRelu"] = _qunary(lambda b, t, at: onnx_lib.ggml_leaky_relu(b.ctx, t, float(at.get("alpha", 0.01)), False))


def _qsoftmax(b, node, ins, at):
    """Softmax of dequantized X, quantized to y's scale and zero point. `opset` (required) says whose
    Softmax: below 13 the input is coerced to 2-D at `axis` (default 1 there, -1 from 13)."""
    x, sx, zx, sy, zy = (list(ins) + [None] * 5)[:5]
    b.need("opset" in at, "QLinearSoftmax needs its 'opset' attribute")
    opset = int(at["opset"])
    axis = norm_axis(b, at.get("axis", -1 if opset >= 13 else 1), x.rank)
    X = dequantize(b, x, sx, zx, 0)
    y = _softmax_rows(b, X, axis, opset, False)
    return [quantize(b, Val(x.shape, TensorProto.FLOAT, t=y), sy, zy, 0,
                     zy.dtype if zy is not None else TensorProto.UINT8)]


OPS[MS + "QLinearSoftmax"] = _qsoftmax


def _qgap(b, node, ins, at):
    x, sx, zx, sy, zy = ins[:5]
    b.need(not int(at.get("channels_last", 0)), "QLinearGlobalAveragePool with channels_last")
    y = _global(b, dequantize(b, x, sx, zx, 0), "avg")[0]
    return [quantize(b, y, sy, zy, 0, zy.dtype)]


OPS[MS + "QLinearGlobalAveragePool"] = _qgap


def _qconcat(b, node, ins, at):
    sy, zy = ins[0], ins[1]
    parts = [dequantize(b, ins[k], ins[k + 1], ins[k + 2], 0) for k in range(2, len(ins), 3)]
    y = _concat(b, node, parts, at)[0]
    return [quantize(b, y, sy, zy, 0, zy.dtype)]


OPS[MS + "QLinearConcat"] = _qconcat


def _integer_product(b, node, a, za, w, zw, bias, at):
    """(a - a_zero_point) times the constant (w - w_zero_point), plus the int32 bias, as Gemm with
    `at`'s transA and transB: integers, exact in float32 below 2**24 in any summation order, as
    onnxruntime's int32 product. w's zero point is per tensor or per output column."""
    trans_b = int(at.get("transB", 0))
    A = a if za is None else binary_value(b, onnx_lib.ggml_sub, Val(a.shape, TensorProto.FLOAT, t=f(b, a)), za)
    W = w.const.astype(np.float32)
    if zw is not None:
        z = zw.const.astype(np.float32).reshape(-1)
        W = W - (z.reshape(-1, 1) if trans_b else z.reshape(1, -1)) if z.size > 1 else W - z[0]
    args = [Val(A.shape, TensorProto.FLOAT, t=f(b, A) if A.t is None else A.t), const(W)]
    if bias is not None:
        args.append(const(bias.const.astype(np.float32)))
    return _gemm(b, node, args, {"transA": int(at.get("transA", 0)), "transB": trans_b})[0]


def _exact_product(a, za, w, sw, zw, scales) -> bool:
    """Whether a quantized product can run as integers: constant weights, parameters and scales, and
    per-tensor activation parameters (onnxruntime's own requirement)."""
    return (w.is_const and all(v is None or v.is_const for v in (sw, zw) + tuple(scales))
            and all(v is None or v.size == 1 for v in (za,) + tuple(scales[:1])) and w.rank == 2)


def _qgemm(b, node, ins, at):
    a, sa, za, w, sw, zw = ins[:6]
    C = ins[6] if len(ins) > 6 else None
    sy = ins[7] if len(ins) > 7 else None
    zy = ins[8] if len(ins) > 8 else None
    if _exact_product(a, za, w, sw, zw, (sa, sy, C)):  # onnxruntime's QGemm: alpha * sa * sw / sy
        m = np.float32(at.get("alpha", 1.0)) * np.float32(sa.const.reshape(-1)[0]) * sw.const.astype(np.float32).reshape(-1)
        if sy is not None:
            m = m / np.float32(sy.const.reshape(-1)[0])
        acc = _integer_product(b, node, a, za, w, zw, C, at)
        if sy is None:
            return [binary_value(b, onnx_lib.ggml_mul, acc, const(m.reshape(1, -1) if m.size > 1 else m.reshape(())))]
        return [requantize(b, acc, m, zy, 1)]
    A = dequantize(b, a, sa, za, 0)
    W = dequantize(b, w, sw, zw, 0 if int(at.get("transB", 0)) else 1)
    args = [A, W]
    if C is not None:  # int32 bias in units of a_scale * b_scale * alpha
        b.need_value(C.is_const and sa.is_const and sw.is_const, "QGemm's bias and scales must be constant", C, sa, sw)
        args.append(const((C.const.astype(np.float64) * sa.const.reshape(-1) * sw.const.reshape(-1)
                           * float(at.get("alpha", 1.0))).astype(np.float32)))
    y = _gemm(b, node, args, {k: v for k, v in at.items() if k != "beta"})[0]
    if sy is None:
        return [y]
    return [quantize(b, y, sy, zy, 0, zy.dtype if zy is not None else TensorProto.UINT8)]


OPS[MS + "QGemm"] = _qgemm
