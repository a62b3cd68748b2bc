"""ONNX operators on shapes: reading, changing, splitting and assembling them, and constants."""
from __future__ import annotations

import numpy as np
from onnx import numpy_helper

from .onnx_lib import onnx_lib
from .graph import Val, const, np_dtype
from .layout import broadcast_shape, cont, permute, repeat_to, reshape, slice_axis, squeeze_for, take
from .op_table import FLOAT, I64, cval, f, norm_axis, op


# -- shapes -----------------------------------------------------------------------------------------------
@op("Shape")
def _shape(b, node, ins, at):
    s = np.array(ins[0].shape, dtype=np.int64)
    r = len(s)
    start, end = int(at.get("start", 0)), at.get("end", None)
    start = min(max(start + r if start < 0 else start, 0), r)
    end = r if end is None else int(end)
    end = min(max(end + r if end < 0 else end, 0), r)
    return [const(s[start:end], I64)]


@op("Size")
def _size(b, node, ins, at):
    return [const(np.array(ins[0].size, dtype=np.int64), I64)]


def _relayout(b, x: Val, shape):
    """The same elements under another shape (row-major order kept)."""
    if x.is_const:
        return const(x.const.reshape(shape), x.dtype)
    return b.out(reshape(b, b.tensor(x), shape), tuple(shape), x.dtype)


@op("Reshape", const_inputs=(1,))
def _reshape(b, node, ins, at):
    x = ins[0]
    target = [int(d) for d in cval(b, ins[1], "shape").reshape(-1)]
    allowzero = int(at.get("allowzero", 0))
    out = []
    for i, d in enumerate(target):
        if d == 0 and not allowzero:
            b.need(i < x.rank, f"shape {target}: a 0 at position {i} copies a dimension the input lacks")
            d = x.shape[i]
        out.append(d)
    if out.count(-1):
        b.need(out.count(-1) == 1, f"shape {target} has more than one -1")
        known = int(np.prod([d for d in out if d != -1], dtype=np.int64))
        b.need(known > 0 and x.size % known == 0, f"cannot reshape {list(x.shape)} to {target}")
        out[out.index(-1)] = x.size // known
    b.need(int(np.prod(out, dtype=np.int64)) == x.size, f"cannot reshape {list(x.shape)} to {target}")
    return [_relayout(b, x, tuple(out))]


@op("Flatten")
def _flatten(b, node, ins, at):
    x = ins[0]
    axis = int(at.get("axis", 1))
    axis = axis + x.rank if axis < 0 else axis
    b.need(0 <= axis <= x.rank, f"axis {axis} out of range")
    return [_relayout(b, x, (int(np.prod(x.shape[:axis], dtype=np.int64)), int(np.prod(x.shape[axis:], dtype=np.int64))))]


def _axes(b, node, ins, at, idx=1):
    if len(ins) > idx and ins[idx] is not None:
        return [int(a) for a in cval(b, ins[idx], "axes").reshape(-1)]
    if "axes" in at:
        return [int(a) for a in at["axes"]]
    return None


@op("Squeeze", const_inputs=(1,))
def _squeeze(b, node, ins, at):
    x = ins[0]
    axes = _axes(b, node, ins, at)
    if axes is None:
        axes = [k for k, d in enumerate(x.shape) if d == 1]
    axes = [norm_axis(b, a, x.rank) for a in axes]
    for a in axes:
        b.need(x.shape[a] == 1, f"cannot squeeze axis {a} of size {x.shape[a]}")
    return [_relayout(b, x, tuple(d for k, d in enumerate(x.shape) if k not in axes))]


@op("Unsqueeze", const_inputs=(1,))
def _unsqueeze(b, node, ins, at):
    x = ins[0]
    axes = _axes(b, node, ins, at)
    r = x.rank + len(axes)
    axes = sorted(norm_axis(b, a, r) for a in axes)
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return [_relayout(b, x, tuple(shape))]


@op("Transpose")
def _transpose(b, node, ins, at):
    x = ins[0]
    perm = [int(p) for p in at.get("perm", list(range(x.rank))[::-1])]
    b.need(sorted(perm) == list(range(x.rank)), f"perm {perm} is not a permutation of rank {x.rank}")
    shape = tuple(x.shape[p] for p in perm)
    # axes of size one move for free: a reshape when the order of the others is kept
    moved = [p for p in perm if x.shape[p] != 1]
    if moved == sorted(moved):
        return [_relayout(b, x, shape)]
    return [b.out(permute(b, b.tensor(x), perm, x.shape), shape, x.dtype)]


@op("Concat")
def _concat(b, node, ins, at):
    vals = [v for v in ins if v is not None and v.size > 0]
    r = vals[0].rank
    axis = norm_axis(b, at["axis"], r)
    others = [k for k in range(r) if k != axis]
    if any(v.rank != r or any(v.shape[k] != vals[0].shape[k] for k in others) for v in vals):
        raise b.fail(f"cannot concatenate shapes {[list(v.shape) for v in vals]} along axis {axis}")
    shape = list(vals[0].shape)
    shape[axis] = sum(v.shape[axis] for v in vals)
    small, (ax,), kept = squeeze_for(b, shape, [axis])

    def piece(v):  # above rank 4: the same compacted layout for every piece
        return reshape(b, b.tensor(v), tuple(v.shape[k] for k in kept)) if r > 4 else f(b, v)
    # pairwise, as a balanced tree: a chain would copy the growing result once per input (quadratic
    # in time and memory for a Concat of thousands of inputs)
    ts = [piece(v) for v in vals]
    while len(ts) > 1:
        ts = [onnx_lib.ggml_concat(b.ctx, ts[i], ts[i + 1], len(small) - 1 - ax) if i + 1 < len(ts) else ts[i]
              for i in range(0, len(ts), 2)]
    return [b.out(ts[0], tuple(shape), vals[0].dtype)]


@op("Split", const_inputs=(1,))
def _split(b, node, ins, at):
    x = ins[0]
    axis = norm_axis(b, at.get("axis", 0), x.rank)
    n = len(node.output)
    sizes = None
    if len(ins) > 1 and ins[1] is not None:
        sizes = [int(s) for s in cval(b, ins[1], "split")]
    elif "split" in at:
        sizes = [int(s) for s in at["split"]]
    L = x.shape[axis]
    if sizes is None:
        k = int(at.get("num_outputs", n))
        chunk = -(-L // k)
        sizes = [chunk] * (k - 1) + [L - chunk * (k - 1)]
    b.need(sum(sizes) == L and len(sizes) == n, f"split sizes {sizes} do not fit axis {axis} of size {L}")
    outs, start = [], 0
    t = None if x.is_const else b.tensor(x)
    for s in sizes:
        if x.is_const or s == 0:  # an empty part is known by its shape alone: a constant
            outs.append(const(np.take(x.const, np.arange(start, start + s), axis=axis), x.dtype) if x.is_const else
                        const(np.zeros(x.shape[:axis] + (0,) + x.shape[axis + 1:], np_dtype(x.dtype)), x.dtype))
        else:
            tt, shape = slice_axis(b, t, x.shape, axis, start, start + s)
            outs.append(b.out(tt, shape, x.dtype))
        start += s
    return outs


def slice_args(b, ins, at, rank: int):
    """Slice's starts, ends, axes (normalized) and steps, from its inputs (opset 10 on) or its
    attributes (opset 1-9, no steps); a step of 0 is refused."""
    if len(ins) > 1:
        starts = [int(v) for v in cval(b, ins[1], "starts")]
        ends = [int(v) for v in cval(b, ins[2], "ends")]
        axes = [int(v) for v in cval(b, ins[3], "axes")] if len(ins) > 3 and ins[3] is not None else None
        steps = [int(v) for v in cval(b, ins[4], "steps")] if len(ins) > 4 and ins[4] is not None else None
    else:
        starts, ends, axes, steps = list(at["starts"]), list(at["ends"]), at.get("axes"), None
    axes = list(range(len(starts))) if axes is None else [norm_axis(b, a, rank) for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    b.need(all(st != 0 for st in steps), "slice step 0")
    return starts, ends, axes, steps


@op("Slice", const_inputs=(1, 2, 3, 4))
def _slice(b, node, ins, at):
    x = ins[0]
    starts, ends, axes, steps = slice_args(b, ins, at, x.rank)
    # numpy's clamping is ONNX's: starts/ends beyond the axis clamp, negatives count from the end
    sizes = list(x.shape)
    for a, s, e, st in zip(axes, starts, ends, steps):
        sizes[a] = len(range(*slice(s, e, st).indices(x.shape[a])))
    if 0 in sizes:  # an empty value is known by its shape alone: a constant (ggml has no empty tensors)
        return [const(np.zeros(sizes, dtype=np_dtype(x.dtype)), x.dtype)]
    t, shape = b.tensor(x), x.shape
    for a, s, e, st in zip(axes, starts, ends, steps):
        idx = np.arange(shape[a])[slice(*slice(s, e, st).indices(shape[a]))]
        if st == 1:
            t, shape = slice_axis(b, t, shape, a, int(idx[0]), int(idx[-1]) + 1)
        else:
            t, shape = take(b, t, shape, a, idx)
    return [b.out(t, shape, x.dtype)]


@op("Gather")
def _gather(b, node, ins, at):
    x, ind = ins
    axis = norm_axis(b, at.get("axis", 0), x.rank)
    L = x.shape[axis]
    out_shape = x.shape[:axis] + ind.shape + x.shape[axis + 1:]
    if ind.is_const:
        idx = np.asarray(ind.const, dtype=np.int64)
        b.need(((idx >= -L) & (idx < L)).all(), f"indices out of range [-{L}, {L})")
        idx = np.where(idx < 0, idx + L, idx)
        t, shape = take(b, b.tensor(x), x.shape, axis, idx.reshape(-1))
        return [b.out(reshape(b, t, out_shape), out_shape, x.dtype)]
    b.note_index_input(ind, L)
    pre, post = x.shape[:axis], x.shape[axis + 1:]
    P, Q = int(np.prod(pre, dtype=np.int64)), int(np.prod(post, dtype=np.int64))
    xt = reshape(b, b.tensor(x), (P, L, Q))
    if P > 1:
        xt = permute(b, xt, (1, 0, 2))
    xt = reshape(b, xt, (L, P * Q))
    idx = reshape(b, b.indices(ind), (ind.size,))
    rows = onnx_lib.ggml_get_rows(b.ctx, xt, idx)
    y = reshape(b, rows, (ind.size, P, Q))
    if P > 1:
        y = permute(b, y, (1, 0, 2))
    return [b.out(reshape(b, y, out_shape), out_shape, x.dtype)]


@op("Expand", const_inputs=(1,))
def _expand(b, node, ins, at):
    x = ins[0]
    target = tuple(int(d) for d in cval(b, ins[1], "shape").reshape(-1))
    shape = broadcast_shape(b, x.shape, target)
    src = (1,) * (len(shape) - x.rank) + x.shape
    work = shape
    if len(shape) > 4:  # keep the axes where the result is not one (the input has one there too)
        keep = [k for k in range(len(shape)) if shape[k] != 1]
        b.limit(len(keep) <= 4, f"rank {len(shape)} tensors are not supported (ggml has at most 4 dimensions)")
        src, work = tuple(src[k] for k in keep), tuple(shape[k] for k in keep)
    t = reshape(b, b.tensor(x), src)
    return [b.out(repeat_to(b, t, work), shape, x.dtype)]


@op("Tile", const_inputs=(1,))
def _tile(b, node, ins, at):
    x = ins[0]
    reps = [int(r) for r in cval(b, ins[1], "repeats").reshape(-1)]
    b.need(len(reps) == x.rank, f"repeats {reps} do not match rank {x.rank}")
    shape = tuple(d * r for d, r in zip(x.shape, reps))
    return [b.out(repeat_to(b, cont(b, b.tensor(x)), shape), shape, x.dtype)]


@op("Constant")
def _constant(b, node, ins, at):
    if "value" in at:
        et = at["value"].data_type
        arr = numpy_helper.to_array(at["value"])
        return [const(arr if arr.dtype.kind in "fiub" else arr.astype(np_dtype(et)), et)]
    for key, dt in (("value_float", np.float32), ("value_floats", np.float32), ("value_int", np.int64),
                    ("value_ints", np.int64)):
        if key in at:
            return [const(np.array(at[key], dtype=dt))]
    raise b.fail("Constant without a supported value attribute (sparse and string values are not supported)")


@op("ConstantOfShape", const_inputs=(0,))
def _constant_of_shape(b, node, ins, at):
    shape = tuple(int(d) for d in cval(b, ins[0], "input").reshape(-1))
    val = numpy_helper.to_array(at["value"]).reshape(-1) if "value" in at else np.zeros(1, np.float32)
    dt = at["value"].data_type if "value" in at else FLOAT
    return [const(np.full(shape, val[0], dtype=val.dtype), dt)]


@op("EyeLike")
def _eyelike(b, node, ins, at):
    x = ins[0]
    dt = int(at.get("dtype", x.dtype))
    b.need(x.rank == 2, "EyeLike needs a 2-D input")
    b.limit(np_dtype(dt).kind in "fiub", f"EyeLike of type {dt}")
    return [const(np.eye(x.shape[0], x.shape[1], k=int(at.get("k", 0)), dtype=np_dtype(dt)), dt)]
