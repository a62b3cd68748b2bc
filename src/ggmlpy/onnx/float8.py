"""ONNX's float8 types inside a float32 graph: values carried in float32, rounded to the type's grid
where ONNX rounds (Cast, CastLike, QuantizeLinear), and converted to ml_dtypes' types at the boundary.

The rounding, in float32 arithmetic that ggml's element-wise ops do exactly (IEEE, one rounding per op):
- normal range: Veltkamp's split, hi = p - (p - x) with p = x * (2**(23 - m) + 1), rounds x to m
  mantissa bits, to nearest, ties to even;
- below the smallest normal number: adding and removing 1.5 * 2**(23 + emin - m) rounds to the
  subnormal spacing 2**(emin - m);
- saturate (ONNX's default): clamped to +-max first; otherwise a value rounding beyond max becomes
  inf (e5m2, the one type with infinities) or NaN.
NaN stays NaN (ggml's clamp would not keep it: it is added back as 0 / 0).
Checked against ml_dtypes for every float8 value, every midpoint and its neighbours (tests).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
from onnx import TensorProto, numpy_helper

from .graph import FLOAT8_TYPES, boundary_dtype
from .onnx_lib import onnx_lib


def _params(to: int):
    fi = ml_dtypes.finfo(boundary_dtype(to))
    return int(fi.nmant), int(fi.minexp), float(fi.max), to == TensorProto.FLOAT8E5M2


def round_const(arr: np.ndarray, to: int, saturate: bool) -> np.ndarray:
    """A constant cast to float8 type `to` as ONNX's Cast does, carried back in float32."""
    dt = boundary_dtype(to)
    a = np.asarray(arr)
    if a.dtype.kind not in "fiub":
        a = a.astype(np.float32)
    with np.errstate(all="ignore"):
        y = numpy_helper.saturate_cast(a, dt) if saturate else a.astype(dt)
    return y.astype(np.float32)


def round_in_graph(b, t, to: int, saturate: bool):
    """The F32 tensor t rounded to float8 type `to` (kept in F32)."""
    assert to in FLOAT8_TYPES
    c = b.ctx
    m, emin, mx, has_inf = _params(to)
    alive = onnx_lib.ggml_step(c, onnx_lib.ggml_scale_bias(c, onnx_lib.ggml_abs(c, t), 1.0, 1.0))  # 0 for NaN only
    # beyond max but finite when not saturating, so that the overflow test below sees it
    x = onnx_lib.ggml_clamp(c, t, -mx, mx) if saturate else onnx_lib.ggml_clamp(c, t, -2 * mx, 2 * mx)
    p = onnx_lib.ggml_scale(c, x, float(2.0 ** (23 - m) + 1))
    hi = onnx_lib.ggml_sub(c, p, onnx_lib.ggml_sub(c, p, x))
    magic = float(1.5 * 2.0 ** (23 + emin - m))
    sub = onnx_lib.ggml_scale_bias(c, onnx_lib.ggml_scale_bias(c, x, 1.0, magic), 1.0, -magic)
    small = onnx_lib.ggml_step(c, onnx_lib.ggml_scale_bias(c, onnx_lib.ggml_abs(c, x), -1.0, float(2.0 ** emin)))
    y = onnx_lib.ggml_add(c, hi, onnx_lib.ggml_mul(c, small, onnx_lib.ggml_sub(c, sub, hi)))
    if not saturate:
        over = onnx_lib.ggml_step(c, onnx_lib.ggml_scale_bias(c, onnx_lib.ggml_abs(c, y), 1.0, -mx))
        room = onnx_lib.ggml_scale_bias(c, over, -1.0, 1.0)  # 1, or 0 where y overflowed
        if has_inf:
            y = onnx_lib.ggml_div(c, y, room)  # y / 0 = +-inf
        else:
            y = onnx_lib.ggml_add(c, y, onnx_lib.ggml_div(c, onnx_lib.ggml_sub(c, over, over), room))  # + 0 / 0 = NaN
    return onnx_lib.ggml_add(c, y, onnx_lib.ggml_div(c, onnx_lib.ggml_sub(c, alive, alive), alive))
