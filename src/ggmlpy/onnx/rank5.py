"""Rank-5 ONNX values on ggml's four dimensions.

ggml 0.25.3 has GGML_MAX_DIMS 4. A value with five axes above size one (a [16, 8, 8, 8, 8] block
of a bilinear attention transform, a relative-position logit expanded over a window, a grouped
query's keys repeated over the heads) is held in four: its two outermost axes merged into ggml's
ne3, which is the same row-major memory (graph.ne_of). A node that reads or makes such a value is
built here: a pair of adjacent axes that the op treats alike in every operand is merged (a reshape,
no copy for a contiguous value), the op's own builder runs on four axes, and its result is reshaped
to its five. Merging commutes with the op exactly when the pair is treated alike, so the result is
the op's on five axes, element for element:

- element-wise ops with broadcasting: a pair where each operand has both of the output's sizes or
  ones in both (ONNX's broadcasting then holds for the merged axis); an operand alike in no pair is
  expanded first, one axis at a time;
- Expand: the same rule for its input against the target shape;
- Transpose: a pair that the permutation keeps side by side and in order; a permutation that keeps
  none (timm's relative-position permute (0, 3, 1, 4, 2)) runs as a chain of ones that do, found by
  a breadth-first search over the 120 permutations;
- an axis (Softmax, Concat, Split, Gather, ArgMax, BatchNormalization's channels...): a pair without it;
- reductions: a pair reduced together or kept together;
- MatMul: a pair of batch axes that broadcasts alike; Slice, Pad, Tile, Resize: a pair they leave alone;
- 3-D pooling: N and C merged (every plane alike); 3-D ConvTranspose: sample by sample.

Element-wise ops of one input and the pure reshapes (Reshape, Flatten, Squeeze, Unsqueeze) see the
merged value as it is. Every other op given or making a five-axis value raises OnnxLimitation naming
the op and the shapes, as does an op here for which no pair qualifies: never a value computed on the
wrong axes. Six or more axes above size one are refused.
"""
from __future__ import annotations

import functools
import itertools
from collections import deque

import numpy as np
from onnx import TensorProto

from .graph import FOLDED_RANK, MAX_RANK, OnnxLimitation, Val, compact, const, op_key
from .layout import broadcast_shape, reshape, slice_axis
from .op_table import OPS, cval, norm_axis
from .ops_elementwise import UNARY
from .ops_reduce import ROW_REDUCE, reduce_axes
from .ops_shape import slice_args

I64, F32_TYPE = TensorProto.INT64, TensorProto.FLOAT

# ops that read their operand's elements one by one, whatever its shape
ELEMENTWISE = frozenset(UNARY) | {"Identity", "Dropout", "Clip", "Cast", "CastLike", "Not", "IsNaN", "IsInf",
                                  "Sinh", "Cosh", "Tan"}
# ops that keep the row-major order of the elements (or read only the shape), and If, whose values
# its branch's nodes make (each built through here)
LAYOUT = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Shape", "Size", "If"})
BROADCAST = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean", "Where", "PRelu",
                       "Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "And", "Or", "Xor"})


def big(v) -> bool:
    """Whether v (a Val or None) has more than four axes above size one."""
    return v is not None and len(compact(v.shape)) > MAX_RANK


def _merge(shape, k: int) -> tuple:
    """shape with axes k and k + 1 merged."""
    shape = tuple(shape)
    return shape[:k] + (shape[k] * shape[k + 1],) + shape[k + 2:]


def _as(b, v: Val, shape) -> Val:
    """v's elements (row-major) under another shape: a reshape, no copy for a contiguous tensor."""
    shape = tuple(int(d) for d in shape)
    if v is None or v.shape == shape:
        return v
    if v.is_const:
        return const(v.const.reshape(shape), v.dtype)
    return b.out(reshape(b, v.t, shape), shape, v.dtype)


def _refuse(b, key: str, shapes, why: str = "") -> OnnxLimitation:
    shapes = [list(s) for s in shapes]
    rank = max(len(s) for s in shapes)
    return OnnxLimitation(b.where() + f"{key} of rank {rank} values with five axes above size one is not "
                          f"supported: shapes {shapes} (ggml has at most {MAX_RANK} dimensions; ggmlpy holds five "
                          f"by merging two adjacent axes, {why or f'which {key} does not treat alike'})")


def _pick(b, key, shapes, ok, why):
    """The first k in 0..3 for which ok(k) holds (axes k and k + 1 merge), or OnnxLimitation."""
    k = next((k for k in range(FOLDED_RANK - 1) if ok(k)), None)
    if k is None:
        raise _refuse(b, key, shapes, why)
    return k


def _plain(ins, *shapes) -> bool:
    """No input and no output shape has five axes above size one: the builder's own path (size-one
    axes dropped above rank 4)."""
    return not any(big(v) for v in ins) and all(len(compact(s)) <= MAX_RANK for s in shapes)


def _need_rank5(b, key, *vals):
    """These folders work on exactly five axes (size-one axes included)."""
    for v in vals:
        if v is not None and v.rank != FOLDED_RANK:
            raise _refuse(b, key, [v.shape for v in vals if v is not None],
                          f"and {key} is built for exactly five axes here, not {v.rank}")


# -- the builders ------------------------------------------------------------------------------------
def _alike(s, out, k) -> bool:
    """Operand shape s (aligned to out) broadcasts over the merged pair (k, k + 1) as over the two: it
    has both of the output's sizes there or ones in both (ONNX's rule then holds for the merged axis)."""
    return (s[k], s[k + 1]) in ((out[k], out[k + 1]), (1, 1))


def _expand_once(b, v: Val, k: int, shape):
    """v (aligned to shape, alike over the pair k) expanded to shape: ONNX's Expand on four axes."""
    fn = OPS["Expand"]
    y = fn(b, b.node, [_as(b, v, _merge(v.shape, k)), const(np.array(_merge(shape, k), dtype=np.int64), I64)], {})
    return _as(b, y[0], shape)


def _broadcast_to(b, v: Val, shape):
    """v expanded to shape (five axes, v aligned to them): over a pair that is alike, or one axis at a
    time (every other axis is then alike, so any pair without that axis merges)."""
    shape = tuple(shape)
    v = _as(b, v, (1,) * (len(shape) - v.rank) + v.shape)
    if v.shape == shape:
        return v
    k = next((k for k in range(len(shape) - 1) if _alike(v.shape, shape, k)), None)
    if k is not None:
        return _expand_once(b, v, k, shape)
    for a in range(len(shape)):
        if v.shape[a] != shape[a]:
            step = v.shape[:a] + (shape[a],) + v.shape[a + 1:]
            v = _expand_once(b, v, 0 if a > 1 else 3, step)
    return v


def _broadcast(b, node, ins, at, fn):
    """An element-wise op with broadcasting: a pair alike in every operand (operands that are alike in
    none are expanded first, which copies them)."""
    operands = [v for v in ins if v is not None]
    shape = broadcast_shape(b, *(v.shape for v in operands))
    keep = [i for i in range(len(shape)) if shape[i] != 1]
    if len(keep) <= MAX_RANK:
        return fn(b, node, ins, at)
    if len(keep) > FOLDED_RANK:
        raise _refuse(b, op_key(node), [v.shape for v in operands], "and more than five axes are above size one")
    work = tuple(shape[i] for i in keep)
    r = len(shape)

    def aligned(v):  # v's sizes on the output's axes above one
        full = (1,) * (r - v.rank) + v.shape
        return tuple(full[i] for i in keep)
    k = max(range(FOLDED_RANK - 1), key=lambda k: sum(_alike(aligned(v), work, k) for v in operands))
    vs = [None if v is None else _as(b, v, aligned(v)) for v in ins]
    vs = [v if v is None or _alike(v.shape, work, k) else _broadcast_to(b, v, work) for v in vs]
    return [_as(b, o, shape) for o in fn(b, node, [None if v is None else _as(b, v, _merge(v.shape, k)) for v in vs],
                                              at)]


def _expand(b, node, ins, at, fn):
    x = ins[0]
    target = tuple(int(d) for d in cval(b, ins[1], "shape").reshape(-1))
    shape = broadcast_shape(b, x.shape, target)
    keep = [i for i in range(len(shape)) if shape[i] != 1]
    if len(keep) <= MAX_RANK:
        return fn(b, node, ins, at)
    if len(keep) > FOLDED_RANK:
        raise _refuse(b, "Expand", [x.shape, target], "and more than five axes are above size one")
    full = (1,) * (len(shape) - x.rank) + x.shape
    y = _broadcast_to(b, _as(b, x, tuple(full[i] for i in keep)), tuple(shape[i] for i in keep))
    return [_as(b, y, shape)]


def _keeps_pair(perm) -> int | None:
    """The position i where perm keeps a pair of input axes side by side in order (perm[i + 1] ==
    perm[i] + 1), or None."""
    return next((i for i in range(len(perm) - 1) if perm[i + 1] == perm[i] + 1), None)


@functools.lru_cache(maxsize=None)
def _chain(perm: tuple) -> tuple:
    """Permutations that each keep a pair together and compose to perm (Transpose by Transpose:
    out[i] = x[q1[q2[i]]]): the shortest such chain."""
    ident = tuple(range(len(perm)))
    moves = [q for q in itertools.permutations(ident) if _keeps_pair(q) is not None]
    seen, todo = {ident: ()}, deque([ident])
    while todo:
        s = todo.popleft()
        if s == perm:
            return seen[s]
        for q in moves:
            t = tuple(s[q[i]] for i in range(len(q)))
            if t not in seen:
                seen[t] = seen[s] + (q,)
                todo.append(t)
    raise AssertionError(f"no chain for {perm}")  # every permutation is a product of adjacent swaps


def _transpose(b, node, ins, at, fn):
    x = ins[0]
    perm = [int(p) for p in at.get("perm", list(range(x.rank))[::-1])]
    b.need(sorted(perm) == list(range(x.rank)), f"perm {perm} is not a permutation of rank {x.rank}")
    out_shape = tuple(x.shape[p] for p in perm)
    if not big(x):
        return fn(b, node, ins, at)
    kept = [a for a in range(x.rank) if x.shape[a] != 1]  # size-one axes move for free
    if len(kept) > FOLDED_RANK:
        raise _refuse(b, "Transpose", [x.shape], "and more than five axes are above size one")
    y = _as(b, x, tuple(x.shape[a] for a in kept))
    for q in _chain(tuple(kept.index(p) for p in perm if p in kept)):
        i = _keeps_pair(q)
        k = q[i]
        q4 = [p if p <= k else p - 1 for j, p in enumerate(q) if j != i + 1]
        shape = tuple(y.shape[p] for p in q)
        y = _as(b, fn(b, node, [_as(b, y, _merge(y.shape, k))], {"perm": q4})[0], shape)
    return [_as(b, y, out_shape)]


def _axis_attr(b, key, x, at):
    if key in ("Softmax", "LogSoftmax", "Hardmax"):
        default = -1 if b.opset >= 13 else 1
    elif key in ("BatchNormalization", "InstanceNormalization"):
        return 1  # the channels
    elif key == "LayerNormalization":
        default = -1
    else:
        default = 0
    return norm_axis(b, at.get("axis", default), x.rank)


def _remap(axis: int, k: int) -> int:
    """Axis `axis` (not k + 1) once axes k and k + 1 are merged."""
    return axis if axis <= k else axis - 1


def _one_axis(b, node, ins, at, fn):
    """Ops along one axis, with every other axis treated alike: a pair without it."""
    key = op_key(node)
    x = ins[0]
    if key == "Concat":
        vals = [v for v in ins if v is not None]
        axis = norm_axis(b, at["axis"], x.rank)
        out = list(x.shape)
        out[axis] = sum(v.shape[axis] for v in vals)
        if _plain(vals, out):
            return fn(b, node, ins, at)
        _need_rank5(b, key, *vals)
        k = _pick(b, key, [v.shape for v in vals], lambda k: axis not in (k, k + 1), "")
        y = fn(b, node, [None if v is None else _as(b, v, _merge(v.shape, k)) for v in ins],
               {**at, "axis": _remap(axis, k)})[0]
        return [_as(b, y, out)]
    if not big(x):
        return fn(b, node, ins, at)
    _need_rank5(b, key, x)
    axis = _axis_attr(b, key, x, at)
    if key == "LayerNormalization":  # normalizes axis..end: a pair before it leaves scale and bias alone
        ok = lambda k: k + 1 < axis  # noqa: E731
    else:
        ok = lambda k: axis not in (k, k + 1)  # noqa: E731
    k = _pick(b, key, [v.shape for v in ins if v is not None], ok, "")
    at2 = {**at, "axis": _remap(axis, k)} if key not in ("BatchNormalization", "InstanceNormalization") else at
    outs = fn(b, node, [_as(b, x, _merge(x.shape, k))] + list(ins[1:]), at2)
    if key == "Split":
        return [o if o is None else _as(b, o, x.shape[:axis] + (o.shape[_remap(axis, k)],) + x.shape[axis + 1:])
                for o in outs]
    if key in ("ArgMax", "ArgMin"):
        keepdims = int(at.get("keepdims", 1))
        shape = tuple(1 if a == axis else d for a, d in enumerate(x.shape)) if keepdims else \
            tuple(d for a, d in enumerate(x.shape) if a != axis)
        return [_as(b, outs[0], shape)]
    if key == "LayerNormalization":  # Mean and InvStdDev: [..., 1, ..., 1] from the axis on
        stat = x.shape[:axis] + (1,) * (x.rank - axis)
        return [_as(b, outs[0], x.shape)] + [o if o is None else _as(b, o, stat) for o in outs[1:]]
    return [_as(b, outs[0], x.shape)] + list(outs[1:])


def _gather(b, node, ins, at, fn):
    """Gather: the indices flattened (the output's memory is the same), the data's pair one without the axis."""
    x, ind = ins
    axis = norm_axis(b, at.get("axis", 0), x.rank)
    shape = x.shape[:axis] + ind.shape + x.shape[axis + 1:]
    if not big(x) and len(compact(shape)) <= MAX_RANK:
        return fn(b, node, ins, at)
    b.note_index_input(ind, x.shape[axis])  # a graph input of indices, range-checked at run time
    ind1 = _as(b, ind, (ind.size,)) if ind.rank > 1 else ind
    if big(x):
        _need_rank5(b, "Gather", x)
        k = _pick(b, "Gather", [x.shape, ind.shape], lambda k: axis not in (k, k + 1), "")
        x, at = _as(b, x, _merge(x.shape, k)), {**at, "axis": _remap(axis, k)}
    return [_as(b, fn(b, node, [x, ind1], at)[0], shape)]


# reductions over axes A and B as one over A (keeping it) then one over A and B: (first, then)
_TWO_STEPS = {"ReduceSum": ("ReduceSum", "ReduceSum"), "ReduceMean": ("ReduceMean", "ReduceMean"),
              "ReduceMax": ("ReduceMax", "ReduceMax"), "ReduceMin": ("ReduceMin", "ReduceMin"),
              "ReduceProd": ("ReduceProd", "ReduceProd"), "ReduceL1": ("ReduceL1", "ReduceSum"),
              "ReduceL2": ("ReduceL2", "ReduceL2"), "ReduceSumSquare": ("ReduceSumSquare", "ReduceSum"),
              "ReduceLogSum": ("ReduceSum", "ReduceLogSum"), "ReduceLogSumExp": ("ReduceLogSumExp", "ReduceLogSumExp")}


def _reduce(b, node, ins, at, fn):
    key = op_key(node)
    x = ins[0]
    if not big(x):
        return fn(b, node, ins, at)
    _need_rank5(b, key, x)
    axes = reduce_axes(b, ins, at, x.rank)
    if axes is None:
        return [x]
    keep = int(at.get("keepdims", 1))
    k = next((k for k in range(FOLDED_RANK - 1) if (k in axes) == (k + 1 in axes)), None)
    if k is None:  # every pair has an axis reduced and one kept: one axis first, kept, leaves four
        first, then = _TWO_STEPS[key]
        at1 = {"keepdims": 1}
        y = _reduce(b, node, [x, const(np.array(axes[:1], dtype=np.int64), I64)], at1, OPS[first])[0]
        return OPS[then](b, node, [y, const(np.array(axes, dtype=np.int64), I64)], {"keepdims": keep})
    new = sorted({_remap(a, k) for a in axes})
    if len(ins) > 1 and ins[1] is not None:  # axes as an input (opset 13 on), else as the attribute
        ins2, at2 = [ins[0], const(np.array(new, dtype=np.int64), I64)] + list(ins[2:]), at
    else:
        ins2, at2 = list(ins), {**at, "axes": new}
    ins2[0] = _as(b, x, _merge(x.shape, k))
    shape = tuple(1 if a in axes else d for a, d in enumerate(x.shape)) if keep else \
        tuple(d for a, d in enumerate(x.shape) if a not in axes)
    return [_as(b, fn(b, node, ins2, at2)[0], shape)]


def _matmul(b, node, ins, at, fn):
    """MatMul with three batch axes: a pair of them alike in both operands (an operand alike in
    neither is expanded over its batch axes first)."""
    a, w = ins
    if a.rank < 2 or w.rank < 2:
        raise _refuse(b, "MatMul", [a.shape, w.shape], "and a one-axis operand is not handled with five axes")
    batch = broadcast_shape(b, a.shape[:-2], w.shape[:-2])
    if len(batch) + 2 <= MAX_RANK or _plain(ins, batch + (a.shape[-2], w.shape[-1])):
        return fn(b, node, ins, at)
    if len(batch) + 2 != FOLDED_RANK:
        raise _refuse(b, "MatMul", [a.shape, w.shape], "and more than five axes are above size one")
    vs = [_as(b, v, (1,) * (3 - (v.rank - 2)) + v.shape) if v.rank > 2 else v for v in (a, w)]
    k = max((0, 1), key=lambda k: sum(v.rank == 2 or _alike(v.shape[:3], batch, k) for v in vs))
    vs = [v if v.rank == 2 or _alike(v.shape[:3], batch, k) else _broadcast_to(b, v, batch + v.shape[3:])
          for v in vs]
    vs = [v if v.rank == 2 else _as(b, v, _merge(v.shape, k)) for v in vs]
    return [_as(b, fn(b, node, vs, at)[0], batch + (a.shape[-2], w.shape[-1]))]


def _untouched(b, node, ins, at, fn):
    """Slice, Pad and Tile: a pair of axes they leave as they are."""
    key = op_key(node)
    x = ins[0]
    r = x.rank
    if key == "Slice":
        starts, ends, axes, steps = slice_args(b, ins, at, r)
        shape = list(x.shape)
        for a, s, e, st in zip(axes, starts, ends, steps):
            shape[a] = len(range(*slice(s, e, st).indices(x.shape[a])))
        if _plain([x]):
            return fn(b, node, ins, at)
        _need_rank5(b, key, x)
        k = _pick(b, key, [x.shape], lambda k: k not in axes and k + 1 not in axes, "")
        new_axes = [_remap(a, k) for a in axes]
        if len(ins) > 1:
            i64 = lambda v: const(np.array(v, dtype=np.int64), I64)  # noqa: E731
            ins2, at2 = [None, i64(starts), i64(ends), i64(new_axes), i64(steps)], at
        else:
            ins2, at2 = [None], {**at, "axes": new_axes}
    elif key == "Pad":
        if len(ins) > 1 and ins[1] is not None:
            pads = [int(p) for p in cval(b, ins[1], "pads")]
            axes = [norm_axis(b, a, r) for a in cval(b, ins[3], "axes")] if len(ins) > 3 and ins[3] is not None \
                else list(range(r))
        else:
            pads, axes = [int(p) for p in at["pads"]], list(range(r))
        pb, pe = [0] * r, [0] * r
        for i, a in enumerate(axes):
            pb[a], pe[a] = pads[i], pads[len(axes) + i]
        shape = [d + p + q for d, p, q in zip(x.shape, pb, pe)]
        if _plain([x], shape):
            return fn(b, node, ins, at)
        _need_rank5(b, key, x)
        k = _pick(b, key, [x.shape], lambda k: not (pb[k] or pe[k] or pb[k + 1] or pe[k + 1]), "")
        new = [p for a, p in enumerate(pb) if a != k + 1] + [p for a, p in enumerate(pe) if a != k + 1]
        if len(ins) > 1 and ins[1] is not None:
            ins2, at2 = [None, const(np.array(new, dtype=np.int64), I64)] + list(ins[2:3]), at
        else:
            ins2, at2 = [None], {**at, "pads": new}
    elif key in ("Resize", "Upsample"):  # every axis resized on its own: a pair it leaves as they are
        old = key == "Upsample" or b.opset < 11
        scales = cval(b, ins[1] if old else (ins[2] if len(ins) > 2 else None), "scales")
        scales = None if scales is None or np.asarray(scales).size == 0 else [float(s) for s in np.ravel(scales)]
        if scales is None and key == "Upsample" and "scales" in at:
            scales = [float(s) for s in at["scales"]]
        sizes = None if old or len(ins) < 4 or ins[3] is None else [int(s) for s in np.ravel(cval(b, ins[3], "sizes"))]
        roi = None if old or len(ins) < 2 or ins[1] is None else np.ravel(cval(b, ins[1], "roi"))
        if "axes" in at or (scales is None and sizes is None):
            raise _refuse(b, key, [x.shape], f"and {key} with axes or without scales and sizes is not handled")
        shape = list(sizes) if sizes is not None else [int(np.floor(d * s)) for d, s in zip(x.shape, scales)]
        if _plain([x], shape):
            return fn(b, node, ins, at)
        _need_rank5(b, key, x)
        same = [shape[a] == x.shape[a] and (scales is None or scales[a] == 1.0) for a in range(r)]
        k = _pick(b, key, [x.shape], lambda k: same[k] and same[k + 1], "")
        drop = lambda v: None if v is None else [s for a, s in enumerate(v) if a != k + 1]  # noqa: E731
        if sizes is not None:
            sizes = [s * shape[k + 1] if a == k else s for a, s in enumerate(drop(sizes))]
        f32 = lambda v: None if v is None else const(np.array(v, dtype=np.float32), F32_TYPE)  # noqa: E731
        if old:
            ins2, at2 = [None, f32(drop(scales))], {**at, "scales": drop(scales)} if "scales" in at else at
        else:
            roi4 = None if roi is None or roi.size == 0 else f32(list(roi[:r][np.arange(r) != k + 1]) +
                                                              list(roi[r:][np.arange(r) != k + 1]))
            ins2 = [None, roi4, f32(drop(scales)),
                    None if sizes is None else const(np.array(sizes, dtype=np.int64), I64)]
            at2 = at
    else:  # Tile
        reps = [int(v) for v in cval(b, ins[1], "repeats").reshape(-1)]
        b.need(len(reps) == r, f"repeats {reps} do not match rank {r}")
        shape = [d * n for d, n in zip(x.shape, reps)]
        if _plain([x], shape):
            return fn(b, node, ins, at)
        _need_rank5(b, key, x)
        k = _pick(b, key, [x.shape], lambda k: reps[k] == 1 and reps[k + 1] == 1, "")
        ins2, at2 = [None, const(np.array([n for a, n in enumerate(reps) if a != k + 1], dtype=np.int64), I64)], at
    ins2[0] = _as(b, x, _merge(x.shape, k))
    return [_as(b, fn(b, node, ins2, at2)[0], shape)]


def _planes(b, node, ins, at, fn):
    """Pooling over three spatial axes treats every (n, c) plane alike: N and C merged into the
    channels, N one (the flat indices of MaxPool's second output are the same)."""
    x = ins[0]
    if not big(x):
        return fn(b, node, ins, at)
    _need_rank5(b, op_key(node), x)
    N, C = x.shape[:2]
    outs = fn(b, node, [_as(b, x, (1, N * C) + x.shape[2:])] + list(ins[1:]), at)
    return [o if o is None else _as(b, o, (N, C) + o.shape[2:]) for o in outs]


def _per_sample(b, node, ins, at, fn):
    """A 3-D transposed convolution of a batch: each sample alone (four axes above one), the results joined
    along N. The samples are consecutive rows of the input merged at (N, C)."""
    x = ins[0]
    if not big(x):
        return fn(b, node, ins, at)
    _need_rank5(b, op_key(node), x)
    N, C = x.shape[:2]
    rows = reshape(b, b.tensor(x), (N * C,) + x.shape[2:])
    outs = []
    for n in range(N):
        xn, _ = slice_axis(b, rows, (N * C,) + x.shape[2:], 0, n * C, (n + 1) * C)
        y = fn(b, node, [b.out(reshape(b, xn, (1, C) + x.shape[2:]), (1, C) + x.shape[2:], x.dtype)] + list(ins[1:]),
               at)[0]
        outs.append(_as(b, y, y.shape[1:]))  # [M, D', H', W']: the samples joined along the first axis
    y = OPS["Concat"](b, node, outs, {"axis": 0})[0]
    return [_as(b, y, (N, y.shape[0] // N) + y.shape[1:])]


FOLDERS = {**{n: _broadcast for n in BROADCAST}, **{n: _reduce for n in ROW_REDUCE},
           **{n: _one_axis for n in ("Softmax", "LogSoftmax", "Hardmax", "Concat", "Split", "ArgMax",
                                     "ArgMin", "BatchNormalization", "InstanceNormalization",
                                     "LayerNormalization")},
           **{n: _untouched for n in ("Slice", "Pad", "Tile", "Resize", "Upsample")},
           **{n: _planes for n in ("MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool")},
           "ConvTranspose": _per_sample,
           "Expand": _expand, "Transpose": _transpose, "MatMul": _matmul, "Gather": _gather}


# ops that can make five axes above size one out of inputs of four axes (their folders check)
_RAISING = frozenset({"Expand", "Gather"})


def build(b, node, ins, attrs, fn):
    """fn(b, node, ins, attrs), the node's builder, with rank-5 values handled as this module says."""
    key = op_key(node)
    present = [v for v in ins if v is not None]
    folder = FOLDERS.get(key)
    if folder is not None and (key in _RAISING or any(v.rank > MAX_RANK for v in present)):
        return folder(b, node, ins, attrs, fn)
    if key in ELEMENTWISE or key in LAYOUT:
        return fn(b, node, ins, attrs)
    if any(big(v) and not v.is_const for v in present):
        raise _refuse(b, key, [v.shape for v in present])
    b.five_axes = False  # a five-axis constant read on the host is fine, made a ggml tensor it is not
    try:
        outs = fn(b, node, ins, attrs)
    finally:
        b.five_axes = True
    made = [v for v in outs if big(v) and not v.is_const]
    if made:  # a builder's reshape would take any shape: only those above know their five axes
        raise _refuse(b, key, [v.shape for v in present] + [v.shape for v in made])
    return outs
