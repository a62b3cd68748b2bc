"""A ggml tensor's op parameters (ggmlR's ggml_get_op_params / ggml_set_op_params and their
_i32 / _f32 forms): 64 raw bytes, indices checked before ggml's accessors assert.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..bindings import ffi
from ..errors import check
from .checked import tensor_arg
from .handles import Tensor

if TYPE_CHECKING:
    from numpy.typing import ArrayLike


_N_OP_PARAMS = 16  # GGML_MAX_OP_PARAMS / sizeof(int32_t)


def _op_index(index, what) -> int:
    i = int(index)
    check(0 <= i < _N_OP_PARAMS, f"{what}: index must be in 0..{_N_OP_PARAMS - 1}, got {index}")
    return i


def ggml_get_op_params(t: Tensor) -> bytes:
    """t's raw op parameters: GGML_MAX_OP_PARAMS (64) bytes, as ggmlR's raw vector."""
    t = tensor_arg(t, "ggml_get_op_params")
    return bytes(ffi.buffer(t.ptr.op_params))


def ggml_set_op_params(t: Tensor, params: bytes | bytearray | memoryview | ArrayLike) -> Tensor:
    """Overwrite t's first len(params) op-parameter bytes (bytes, or ints 0..255 as R's as.raw)."""
    t = tensor_arg(t, "ggml_set_op_params")
    if isinstance(params, (bytes, bytearray, memoryview)):
        raw = bytes(params)
    else:
        vals = [int(v) for v in np.ravel(params)]
        check(all(0 <= v <= 255 for v in vals), "ggml_set_op_params: params are raw bytes, 0..255")
        raw = bytes(vals)
    check(len(raw) <= 4 * _N_OP_PARAMS, f"ggml_set_op_params: at most {4 * _N_OP_PARAMS} bytes, got {len(raw)}")
    ffi.memmove(t.ptr.op_params, raw, len(raw))
    return t


def ggml_get_op_params_i32(t: Tensor, index: int) -> int:
    """Op parameter `index` of t as int32."""
    t = tensor_arg(t, "ggml_get_op_params_i32")
    return int(t.ptr.op_params[_op_index(index, "ggml_get_op_params_i32")])


def ggml_set_op_params_i32(t: Tensor, index: int, value: int) -> Tensor:
    """Set op parameter `index` of t to an int32."""
    t = tensor_arg(t, "ggml_set_op_params_i32")
    t.ptr.op_params[_op_index(index, "ggml_set_op_params_i32")] = int(value)
    return t


def ggml_get_op_params_f32(t: Tensor, index: int) -> float:
    """Op parameter `index` of t read as float32."""
    t = tensor_arg(t, "ggml_get_op_params_f32")
    return float(ffi.cast("float *", t.ptr.op_params)[_op_index(index, "ggml_get_op_params_f32")])


def ggml_set_op_params_f32(t: Tensor, index: int, value: float) -> Tensor:
    """Set op parameter `index` of t to a float32."""
    t = tensor_arg(t, "ggml_set_op_params_f32")
    ffi.cast("float *", t.ptr.op_params)[_op_index(index, "ggml_set_op_params_f32")] = float(value)
    return t


__all__ = sorted(n for n in globals() if n.startswith("ggml_"))
