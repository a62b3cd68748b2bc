"""Constant folding: a node whose inputs are all known when planning, evaluated on the host.

The ops below are folded by numpy folders of ggmlpy's own, equal to the ONNX definition on every
valid input, including those onnx's reference implementation refuses (GatherElements whose indices
are smaller than the data along another axis, OneHot's depth as a one-element 1-D tensor), and
vectorized where it loops in Python (ScatterElements, ScatterND). Every other
op is evaluated with onnx's reference implementation. A folder that raises gives a FoldError; the
plan then builds the node in the graph from its constant inputs instead (model._Plan), so a model
never fails to load only because a folder does.
"""
from __future__ import annotations

import numpy as np
from onnx import helper

from .graph import OnnxError, const

FOLDERS: dict = {}  # op type (default domain) -> fn(inputs as numpy arrays, attributes) -> outputs


class FoldError(OnnxError):
    """A node whose constant inputs no folder could evaluate (the node is then built in the graph)."""


def folder(name):
    def deco(fn):
        FOLDERS[name] = fn
        return fn
    return deco


def _axis(axis, rank):
    axis = int(axis)
    if not -rank <= axis < max(rank, 1):
        raise ValueError(f"axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def _wrapped(idx, L):
    idx = np.asarray(idx, dtype=np.int64)
    if idx.size and (idx.min() < -L or idx.max() >= L):
        raise ValueError(f"indices out of range [-{L}, {L})")
    return np.where(idx < 0, idx + L, idx)


@folder("GatherElements")
def gather_elements(ins, at):
    """out[i][j][k] = data[index[i][j][k]][j][k] (axis 0, likewise for others): indices may be smaller
    than data along every axis."""
    data, idx = np.asarray(ins[0]), np.asarray(ins[1])
    axis = _axis(at.get("axis", 0), data.ndim)
    if idx.ndim != data.ndim:
        raise ValueError(f"indices of rank {idx.ndim} for data of rank {data.ndim}")
    grid = list(np.indices(idx.shape, sparse=True))
    grid[axis] = _wrapped(idx, data.shape[axis])
    return [data[tuple(grid)]]


@folder("GatherND")
def gather_nd(ins, at):
    data, idx = np.asarray(ins[0]), np.asarray(ins[1], dtype=np.int64)
    bd = int(at.get("batch_dims", 0))
    q = idx.shape[-1]
    if bd + q > data.ndim or idx.shape[:bd] != data.shape[:bd]:
        raise ValueError(f"indices of shape {list(idx.shape)} for data of shape {list(data.shape)} "
                         f"(batch_dims {bd})")
    B = int(np.prod(data.shape[:bd], dtype=np.int64))
    d = data.reshape((B,) + data.shape[bd:])
    ix = idx.reshape(B, -1, q)
    out = np.stack([d[k][tuple(_wrapped(ix[k][:, j], data.shape[bd + j]) for j in range(q))] for k in range(B)])
    return [out.reshape(idx.shape[:-1] + data.shape[bd + q:])]


def _scatter(data, pos, upd, at):
    """data with the updates `upd` written (or combined by the reduction) at the flat positions `pos`, in
    order: of repeated positions without a reduction the last update stays (as onnx's reference), with
    one each is combined in turn (ufunc.at)."""
    red = at.get("reduction", b"none")
    red = red.decode() if isinstance(red, bytes) else red
    combine = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}.get(red)
    if combine is None and red != "none":
        raise ValueError(f"reduction '{red}'")
    if upd.size != pos.size:
        raise ValueError(f"{upd.size} updates for {pos.size} positions")
    out = np.array(data, copy=True)
    flat, u = out.reshape(-1), upd.reshape(-1).astype(out.dtype)
    if combine is None:
        order = np.arange(pos.size)
        last = np.full(flat.size, -1, dtype=order.dtype)
        np.maximum.at(last, pos, order)  # each position's last update
        won = last[pos] == order
        flat[pos[won]] = u[won]
    else:
        combine.at(flat, pos, u)
    return out


@folder("ScatterND")
def scatter_nd(ins, at):
    data, idx, upd = np.asarray(ins[0]), np.asarray(ins[1], dtype=np.int64), np.asarray(ins[2])
    q = idx.shape[-1]
    if q > data.ndim:
        raise ValueError(f"indices of last axis {q} for data of rank {data.ndim}")
    lead = idx.reshape(-1, q)
    rows = np.ravel_multi_index(tuple(_wrapped(lead[:, j], data.shape[j]) for j in range(q)), data.shape[:q])
    inner = int(np.prod(data.shape[q:], dtype=np.int64))
    return [_scatter(data, (rows[:, None] * inner + np.arange(inner)[None, :]).reshape(-1), np.asarray(upd), at)]


@folder("ScatterElements")
@folder("Scatter")
def scatter_elements(ins, at):
    """out[index[i][j]][j] = updates[i][j] (axis 0, likewise for others), vectorized: onnx's reference
    loops in Python over every element, which made it most of the int8 Mask R-CNN's host time."""
    data, idx, upd = np.asarray(ins[0]), np.asarray(ins[1], dtype=np.int64), np.asarray(ins[2])
    axis = _axis(at.get("axis", 0), data.ndim)
    if idx.ndim != data.ndim or idx.shape != upd.shape:
        raise ValueError(f"indices {list(idx.shape)} and updates {list(upd.shape)} for data of rank {data.ndim}")
    strides = np.cumprod((data.shape[1:] + (1,))[::-1])[::-1]  # in elements
    pos = _wrapped(idx, data.shape[axis]) * strides[axis]
    for k, g in enumerate(np.indices(idx.shape, sparse=True)):
        if k != axis:
            pos = pos + g * strides[k]
    return [_scatter(data, pos.reshape(-1), upd, at)]


@folder("OneHot")
def one_hot(ins, at):
    """depth and values as ONNX declares them (a scalar, a pair) or as exporters write them (a
    one-element 1-D depth)."""
    idx, depth, values = np.asarray(ins[0]), np.asarray(ins[1]), np.asarray(ins[2])
    if depth.size != 1 or values.size != 2:
        raise ValueError(f"depth must hold one value and values two, got shapes {list(depth.shape)} and "
                         f"{list(values.shape)}")
    D = int(depth.reshape(-1)[0])
    axis = int(at.get("axis", -1))
    r = idx.ndim + 1
    axis = _axis(axis, r)
    i = np.asarray(idx, dtype=np.int64)
    i = np.where(i < 0, i + D, i)
    hot = np.arange(D).reshape([D if k == axis else 1 for k in range(r)]) == np.expand_dims(i, axis)
    off, on = values.reshape(-1)
    return [np.where(hot, on, off).astype(values.dtype)]


@folder("ReduceProd")
def reduce_prod(ins, at):
    x = np.asarray(ins[0])
    axes = ins[1] if len(ins) > 1 and ins[1] is not None else at.get("axes")
    keep = bool(int(at.get("keepdims", 1)))
    if axes is None or np.size(axes) == 0:
        if int(at.get("noop_with_empty_axes", 0)):
            return [x]
        axes = range(x.ndim)
    axes = tuple(sorted({_axis(a, x.ndim) for a in np.asarray(axes).reshape(-1)}))
    return [np.prod(x, axis=axes, keepdims=keep).astype(x.dtype)]


def _reference(node, ins, types, opset_imports, ir_version):
    from onnx.reference import ReferenceEvaluator  # loaded when a node is folded: some 60 modules
    vis = [helper.make_tensor_value_info(n, t if t is not None else helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype),
                                         None) for n, v, t in zip(node.input, ins, types) if n]
    outs = [helper.make_empty_tensor_value_info(o) for o in node.output if o]
    g = helper.make_graph([node], "fold", vis, outs)
    m = helper.make_model(g, opset_imports=opset_imports, ir_version=ir_version)
    feeds = {n: v for n, v in zip(node.input, ins) if n}
    return ReferenceEvaluator(m).run(None, feeds)


def fold_arrays(node, ins, opset_imports, ir_version, types=None) -> list:
    """The outputs (numpy arrays) of `node` on the constant inputs `ins` (numpy arrays, None for an
    omitted optional input; `types` their ONNX types where the numpy type does not say it, e.g.
    bfloat16 carried in float32). FoldError when no folder can evaluate it."""
    fn = FOLDERS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
    try:
        if fn is not None:
            return [np.asarray(r) for r in fn(ins, {a.name: helper.get_attribute_value(a) for a in node.attribute})]
        return [np.asarray(r) for r in _reference(node, ins, types or [None] * len(ins), opset_imports, ir_version)]
    except Exception as e:  # noqa: BLE001 - any failure of a folder: the node is then built in the graph
        raise FoldError(f"{type(e).__name__}: {e}") from None


def fold(node, ins, opset_imports, ir_version) -> list:
    """fold_arrays on constant values (graph.Val), giving constant values."""
    arrays = [None if v is None else v.const for v in ins]
    types = [None if v is None else v.dtype for v in ins]
    return [const(a) for a in fold_arrays(node, arrays, opset_imports, ir_version, types)]
