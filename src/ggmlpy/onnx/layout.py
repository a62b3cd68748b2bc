"""Layout helpers shared by the operator builders: reshape, permute, broadcast, take along an axis.

Every helper takes and returns ggml tensors together with their ONNX shapes;
ONNX axis k of a rank-r value is ggml axis r-1-k.
"""
from __future__ import annotations

import numpy as np

from ..bindings import ffi
from .onnx_lib import onnx_lib
from .graph import F32, MAX_RANK, Val, folded, ne_of


def squeeze_for(b, shape, axes=()):
    """Above rank 4: drop the size-one axes not in `axes`. Returns (shape, axes remapped, kept)."""
    shape = tuple(shape)
    if len(shape) <= MAX_RANK:
        return shape, list(axes), list(range(len(shape)))
    kept = [k for k, d in enumerate(shape) if d != 1 or k in axes]
    b.limit(len(kept) <= MAX_RANK, f"rank {len(shape)} tensors are not supported (ggml has at most "
                                   f"{MAX_RANK} dimensions); shape {list(shape)}")
    return tuple(shape[k] for k in kept), [kept.index(a) for a in axes], kept


def packed(t) -> bool:
    """Whether t's strides are exactly those of a fresh tensor of its shape. ggml_is_contiguous also
    accepts a view whose size-one axes carry other strides (a permutation of a [1, 2] plane), but
    ggml_mul_mat asserts that its second operand's first stride is the element size."""
    nb = onnx_lib.ggml_type_size(t.type)
    for i in range(MAX_RANK):
        if int(t.nb[i]) != nb:
            return False
        nb *= int(t.ne[i])
    return True


def cont(b, t):
    """t with packed strides: t itself, a reshaping view of a contiguous t, or a copy."""
    if not onnx_lib.ggml_is_contiguous(t):
        return onnx_lib.ggml_cont(b.ctx, t)
    return t if packed(t) else onnx_lib.ggml_reshape_4d(b.ctx, t, *(int(t.ne[i]) for i in range(MAX_RANK)))


def reshape(b, t, shape):
    b.limit(len(ne_of(shape)) == MAX_RANK, f"rank {len(shape)} tensors are not supported (ggml has at most "
                                           f"{MAX_RANK} dimensions); shape {list(shape)}")
    t = cont(b, t)
    ne = ne_of(shape)
    if [int(t.ne[i]) for i in range(MAX_RANK)] == ne:
        return t
    return onnx_lib.ggml_reshape_4d(b.ctx, t, *ne)


def permuted_view(b, t, perm, shape=None):
    """ONNX Transpose as a view of t (out.shape[i] = in.shape[perm[i]]), t itself for the identity.
    Give `shape` above rank 4."""
    if len(perm) > MAX_RANK:
        _, _, kept = squeeze_for(b, shape)
        perm = [kept.index(p) for p in perm if p in kept]
    r = len(perm)
    if list(perm) == list(range(r)):
        return t
    pos = list(range(MAX_RANK))
    for i, p in enumerate(perm):
        pos[r - 1 - p] = r - 1 - i  # ggml axis r-1-p of the source lands at ggml axis r-1-i
    return onnx_lib.ggml_permute(b.ctx, t, *pos)


def permute(b, t, perm, shape=None):
    """ONNX Transpose: out.shape[i] = in.shape[perm[i]] (contiguous result). Give `shape` above rank 4."""
    return cont(b, permuted_view(b, t, perm, shape))  # already in order (a view built for it): no copy


def permuted_source(t):
    """(src, axes) when t is ggml_cont(ggml_permute(src, *axes)), the copy a Transpose makes; else None.
    A consumer that can read src directly (a product in another orientation, an element-wise op
    applied before the permutation) leaves the copy out of the graph: ggml computes only what the
    outputs depend on."""
    if t.op != onnx_lib.GGML_OP_CONT or t.src[0] == ffi.NULL or t.src[0].op != onnx_lib.GGML_OP_PERMUTE:
        return None
    p = t.src[0]
    return p.src[0], tuple(int(p.op_params[i]) for i in range(MAX_RANK))


def broadcast_shape(b, *shapes):
    r = max(len(s) for s in shapes)
    out = []
    for i in range(r):
        dims = {s[len(s) - r + i] for s in shapes if len(s) - r + i >= 0} - {1}
        b.need(len(dims) <= 1, f"shapes {[list(s) for s in shapes]} do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def repeat_to(b, t, shape):
    ne = ne_of(shape)
    if len(ne) == MAX_RANK and [int(t.ne[i]) for i in range(MAX_RANK)] == ne:
        return t
    # ggml repeats each of its axes on its own; of a merged pair (rank5.py) it would repeat the
    # whole pair: rank5's builders fold a pair that repeats alike before they come here
    b.limit(len(ne) == MAX_RANK and not folded(shape), f"rank {len(shape)} tensors are not supported here (ggml "
                                                       f"has at most {MAX_RANK} dimensions); shape {list(shape)}")
    return onnx_lib.ggml_repeat_4d(b.ctx, cont(b, t), *ne)


def binary(b, fn, va, vb, commutative=False):
    """fn(ctx, x, y) with ONNX (numpy) broadcasting. ggml broadcasts only its second operand,
    so the first is repeated to the output shape when it is the smaller one."""
    shape = broadcast_shape(b, va.shape, vb.shape)
    r = len(shape)
    sa, sb = (1,) * (r - va.rank) + va.shape, (1,) * (r - vb.rank) + vb.shape
    work = shape
    if r > MAX_RANK:  # drop the axes where the result has size one (both operands do too)
        keep = [k for k in range(r) if shape[k] != 1]
        b.limit(len(keep) <= MAX_RANK, f"rank {r} tensors are not supported (ggml has at most {MAX_RANK} "
                                       f"dimensions); shape {list(shape)}")
        sa, sb, work = (tuple(s[k] for k in keep) for s in (sa, sb, shape))
    ta, tb = reshape(b, b.tensor(va), sa), reshape(b, b.tensor(vb), sb)
    if sa != work:
        if commutative and sb == work:
            ta, tb = tb, ta
        else:
            ta = repeat_to(b, ta, work)
    return fn(b.ctx, ta, tb), shape


def binary_value(b, fn, va, vb, commutative=False) -> Val:
    """binary(), its result a value of va's type."""
    t, shape = binary(b, fn, va, vb, commutative)
    return Val(shape, va.dtype, t=t)


def take(b, t, shape, axis, idx):
    """t.take(idx, axis) for constant indices: ggml_get_rows over the axis moved to rows (a view for a
    run of consecutive indices of the outermost axis)."""
    idx = np.asarray(idx, dtype=np.int64).reshape(-1)
    shape = tuple(shape)
    L = shape[axis]
    if len(idx) == L and np.array_equal(idx, np.arange(L)):
        return t, shape
    pre, post = shape[:axis], shape[axis + 1:]
    P, Q = int(np.prod(pre, dtype=np.int64)), int(np.prod(post, dtype=np.int64))
    n = len(idx)
    if P == 1 and n and np.array_equal(idx, np.arange(idx[0], idx[0] + n)):
        # a run of the outermost axis (an attention's q, k or v out of a stacked projection) is
        # contiguous: a view, no copy
        t = cont(b, t)
        out_shape = pre + (n,) + post
        return reshape(b, onnx_lib.ggml_view_1d(b.ctx, t, n * Q, int(idx[0]) * Q * int(t.nb[0])), out_shape), out_shape
    x = reshape(b, t, (P, L, Q))
    if P > 1:
        x = permute(b, x, (1, 0, 2))
    x = reshape(b, x, (L, P * Q))
    rows = onnx_lib.ggml_get_rows(b.ctx, x, b.weight(idx, onnx_lib.GGML_TYPE_I32))  # ne [P*Q, n]
    y = reshape(b, rows, (n, P, Q))
    if P > 1:
        y = permute(b, y, (1, 0, 2))
    out_shape = pre + (n,) + post
    return reshape(b, y, out_shape), out_shape


def slice_axis(b, t, shape, axis, start, stop):
    """A contiguous range [start, stop) of one axis, as a view then a copy."""
    full = tuple(shape)
    if start == 0 and stop == full[axis]:
        return t, full
    b.limit(stop > start, "slices to an empty tensor are not supported (ggml has no empty tensors)")
    t = cont(b, t)
    small, (ax,), _ = squeeze_for(b, full, [axis])
    r = len(small)
    g = r - 1 - ax
    ne = ne_of(small)
    ne[g] = stop - start
    offs = start * int(t.nb[g])
    v = onnx_lib.ggml_view_4d(b.ctx, t, ne[0], ne[1], ne[2], ne[3], t.nb[1], t.nb[2], t.nb[3], offs)
    out = full[:axis] + (stop - start,) + full[axis + 1:]
    # above rank 4 the view keeps the sliced axis; a slice of one then drops it like any size-one axis
    return reshape(b, onnx_lib.ggml_cont(b.ctx, v), out), out


def pad_zero(b, t, shape, pads_begin, pads_end):
    """Zero padding of every axis (non-negative amounts) with ggml_pad_ext."""
    r = len(shape)
    if not any(pads_begin) and not any(pads_end):
        return t, tuple(shape)
    lp, rp = [0] * MAX_RANK, [0] * MAX_RANK
    for k in range(r):
        lp[r - 1 - k], rp[r - 1 - k] = int(pads_begin[k]), int(pads_end[k])
    args = [x for pair in zip(lp, rp) for x in pair]
    out = tuple(s + pb + pe for s, pb, pe in zip(shape, pads_begin, pads_end))
    return onnx_lib.ggml_pad_ext(b.ctx, cont(b, t), *args), out


def to_rows(b, t, shape, axes):
    """Move `axes` last and flatten: ggml [prod(axes), prod(rest)], plus the kept shape."""
    r = len(shape)
    keep = [k for k in range(r) if k not in axes]
    perm = keep + sorted(axes)
    x = permute(b, t, perm, shape)
    R = int(np.prod([shape[k] for k in axes], dtype=np.int64))
    K = int(np.prod([shape[k] for k in keep], dtype=np.int64))
    return reshape(b, x, (K, R)), keep, perm


def scalar_f32(b, value, shape=(1,)):
    return b.weight(np.full(shape, value, dtype=np.float32))


def fill_like(b, t, value):
    """A tensor shaped like t, filled with value (a broadcast constant)."""
    one = scalar_f32(b, value)
    return onnx_lib.ggml_repeat(b.ctx, one, t)


__all__ = ["cont", "reshape", "permute", "broadcast_shape", "repeat_to", "binary", "take", "slice_axis",
           "pad_zero", "to_rows", "scalar_f32", "fill_like", "F32", "ffi", "permuted_view"]
