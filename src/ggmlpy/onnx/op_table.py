"""The table of ONNX operator builders, one per op type in OPS, the decorator that fills it, and
what every builder shares.

A builder gets (b, node, ins, at): the graph OnnxGraphBuilder, the NodeProto, the input
values (None for an omitted optional input) and the attributes as a dict, and
returns the output values. `CONST_INPUTS[op]` names the inputs that must be
known at load time (they fix shapes or ggml op parameters).
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

from .graph import Val
from .layout import cont

OPS: dict = {}
CONST_INPUTS: dict = {}
BOOL, I64, FLOAT = TensorProto.BOOL, TensorProto.INT64, TensorProto.FLOAT
FLT_MAX = float(np.finfo(np.float32).max)


def op(*names, const_inputs=()):
    def deco(fn):
        for n in names:
            OPS[n] = fn
            if const_inputs:
                CONST_INPUTS[n] = tuple(const_inputs)
        return fn
    return deco


def cval(b, v: Val, what: str):
    """A value that must be known on the host when the graph is planned (a shape, axes, a scale...):
    a constant, or computed from graph inputs (the model then plans for their values, see shaping.py)."""
    if v is None:
        return None
    b.need_value(v.is_const, f"input '{what}' must be known at load time (an initializer, a constant, or "
                             f"computed from graph inputs only: ggml graphs have static shapes and parameters)", v)
    return v.const


def cscalar(b, v: Val, what: str, kind=float):
    """A one-element value known when planning (cval), as a Python number: ONNX declares such
    parameters (Clip's bounds, TopK's K...) as scalars, and exporters often write one-element 1-D
    tensors, which numpy 2 no longer converts with float() or int()."""
    a = np.asarray(cval(b, v, what))
    b.need(a.size == 1, f"input '{what}' must hold one value, got shape {list(a.shape)}")
    return kind(a.reshape(-1)[0])


def norm_axis(b, axis, rank):
    axis = int(axis)
    b.need(-rank <= axis < max(rank, 1), f"axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def ctx(b):
    return b.ctx


def f(b, v):
    """A value's contiguous F32 ggml tensor."""
    return cont(b, b.tensor(v))
