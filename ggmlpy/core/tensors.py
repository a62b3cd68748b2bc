"""ggmlR's context and tensor functions: ggml_init and ggml_free, ggml_new_tensor_*, values in and
out (numpy), names, input/output flags and sizes; the type constants."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from ..bindings import ffi, lib
from ..errors import GGMLError, check
from .checked import context_arg, tensor_arg
from .context import Context, Tensor, get_data, numpy_view, set_data, type_name, wrap

GGML_TYPE_F32 = lib.GGML_TYPE_F32
GGML_TYPE_F16 = lib.GGML_TYPE_F16
GGML_TYPE_BF16 = lib.GGML_TYPE_BF16
GGML_TYPE_I32 = lib.GGML_TYPE_I32
GGML_TYPE_I8 = lib.GGML_TYPE_I8
GGML_TYPE_I16 = lib.GGML_TYPE_I16
GGML_OP_POOL_MAX = lib.GGML_OP_POOL_MAX
GGML_OP_POOL_AVG = lib.GGML_OP_POOL_AVG
GGML_SORT_ORDER_ASC = 0
GGML_SORT_ORDER_DESC = 1
_CREATABLE = (GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_I32, GGML_TYPE_I16, GGML_TYPE_I8)
# block-quantized types (q4_0, q4_K, iq2_xxs, ...): rows must be whole blocks
_QUANTIZED = tuple(t for t in range(int(lib.GGML_TYPE_COUNT))
                   if lib.ggml_type_size(t) and lib.ggml_is_quantized(t))


def ggml_version() -> str:
    """The version string of the loaded libggml ("0.25.3")."""
    return ffi.string(lib.ggml_version()).decode()


def ggml_init(mem_size: int = 16 * 1024 * 1024, no_alloc: bool = False) -> Context:
    """A new context: `mem_size` bytes for tensor metadata and (unless no_alloc) data."""
    return Context(mem_size, no_alloc)


def ggml_free(ctx: Context) -> None:
    """Free a context and its memory; its tensors can no longer be used."""
    _context(ctx, "ggml_free").free()


def ggml_tensor_overhead() -> int:
    """Bytes of context memory one tensor's metadata takes."""
    return int(lib.ggml_tensor_overhead())


def ggml_used_mem(ctx: Context) -> int:
    """Bytes of the context's memory in use."""
    return _context(ctx, "ggml_used_mem").used_mem()


# -- tensors ----------------------------------------------------------------------------------------
def ggml_new_tensor(ctx: Context, type: int, n_dims: int, ne: Sequence[int]) -> Tensor:
    """A new tensor of `type` with n_dims dims ne (ne[0] fastest-changing) in ctx."""
    context_arg(ctx, "ggml_new_tensor")
    if type not in _CREATABLE and type not in _QUANTIZED:
        raise GGMLError(f"ggml_new_tensor: unsupported type {type} ({type_name(type) if 0 <= type < 43 else '?'})")
    n_dims = int(n_dims)
    ne = [int(d) for d in ne]
    check(1 <= n_dims <= 4, f"ggml_new_tensor: n_dims must be 1..4, got {n_dims}")
    check(len(ne) == n_dims, f"ggml_new_tensor: expected {n_dims} dims, got {len(ne)}")
    check(all(d >= 0 for d in ne), f"ggml_new_tensor: dims must be >= 0, got {ne}")
    check(all(d < 2**40 for d in ne), f"ggml_new_tensor: dims too large: {ne}")
    blck = int(lib.ggml_blck_size(type))
    check(ne[0] % blck == 0, f"ggml_new_tensor: a {type_name(type)} row (ne0 = {ne[0]}) must be a whole number "
                             f"of blocks of {blck}")  # ggml asserts it
    ctx.reserve_tensor(type, ne, "ggml_new_tensor")
    return wrap(lib.ggml_new_tensor(ctx.ptr, type, n_dims, ffi.new("int64_t[]", ne)), ctx)


def ggml_new_tensor_1d(ctx: Context, type: int, ne0: int) -> Tensor:
    """A new tensor with ne = [ne0]."""
    return ggml_new_tensor(ctx, type, 1, [ne0])


def ggml_new_tensor_2d(ctx: Context, type: int, ne0: int, ne1: int) -> Tensor:
    """A new 2-d tensor [ne0, ne1] (an R matrix: ne0 rows, ne1 columns)."""
    return ggml_new_tensor(ctx, type, 2, [ne0, ne1])


def ggml_new_tensor_3d(ctx: Context, type: int, ne0: int, ne1: int, ne2: int) -> Tensor:
    """A new 3-d tensor [ne0, ne1, ne2]."""
    return ggml_new_tensor(ctx, type, 3, [ne0, ne1, ne2])


def ggml_new_tensor_4d(ctx: Context, type: int, ne0: int, ne1: int, ne2: int, ne3: int) -> Tensor:
    """A new 4-d tensor [ne0, ne1, ne2, ne3]."""
    return ggml_new_tensor(ctx, type, 4, [ne0, ne1, ne2, ne3])


def ggml_new_from_numpy(ctx: Context, array: ArrayLike, type: int | None = None) -> Tensor:
    """A tensor holding `array`: numpy shape (d3, d2, d1, d0) becomes ggml ne [d0, d1, d2, d3]."""
    arr = np.asarray(array)
    check(1 <= arr.ndim <= 4, f"ggml_new_from_numpy: need 1 to 4 dims, got {arr.ndim}")
    if type is None:
        type = GGML_TYPE_I32 if arr.dtype.kind in "iub" else GGML_TYPE_F32
    t = ggml_new_tensor(ctx, type, arr.ndim, list(reversed(arr.shape)))
    if not ctx.no_alloc:
        set_data(t, arr, np.float32 if type != GGML_TYPE_I32 else np.int32, "ggml_new_from_numpy")
    return t


def ggml_set_name(t: Tensor, name: str) -> Tensor:
    """Name the tensor (at most 63 bytes); returns it."""
    _tensor(t, "ggml_set_name")
    raw = str(name).encode()
    check(len(raw) < 64, "ggml_set_name: names are at most 63 bytes")
    lib.ggml_set_name(t.ptr, raw)
    return t


def ggml_get_name(t: Tensor) -> str:
    """The tensor's name ("" if none)."""
    return _tensor(t, "ggml_get_name").name


def ggml_set_input(t: Tensor) -> Tensor:
    """Mark t as a graph input (the graph allocator gives it its own memory first)."""
    _tensor(t, "ggml_set_input")
    lib.ggml_set_input(t.ptr)
    return t


def ggml_set_output(t: Tensor) -> Tensor:
    """Mark t as a graph output: the graph allocator never reuses its memory."""
    _tensor(t, "ggml_set_output")
    lib.ggml_set_output(t.ptr)
    return t


def ggml_set_f32(t: Tensor, values: ArrayLike) -> Tensor:
    """Write values (numpy or a sequence) into t, casting to t's type. Memory order = ggml order.

    A quantized tensor takes either float values (quantized row by row with ggml_quantize_chunk)
    or its encoded blocks: a uint8 array (or bytes) of exactly ggml_nbytes(t)."""
    _tensor(t, "ggml_set_f32")
    set_data(t, values, np.float32 if t.type != GGML_TYPE_I32 else np.int32, "ggml_set_f32")
    return t


def ggml_get_f32(t: Tensor) -> np.ndarray:
    """t's values as float32, numpy shape = ggml ne reversed (quantized tensors dequantized)."""
    _tensor(t, "ggml_get_f32")
    return get_data(t, np.float32, "ggml_get_f32")


def ggml_set_i32(t: Tensor, values: ArrayLike) -> Tensor:
    """Write integer values into t (numpy or a sequence, in ggml order); returns t."""
    _tensor(t, "ggml_set_i32")
    arr = np.asarray(values)
    if arr.dtype.kind == "f" and not np.all(np.isfinite(arr) & (arr == np.round(arr))):
        raise GGMLError("ggml_set_i32: values must be integers")
    set_data(t, arr, np.int32, "ggml_set_i32")
    return t


def ggml_get_i32(t: Tensor) -> np.ndarray:
    """t's values as int32, numpy shape = ggml ne reversed."""
    _tensor(t, "ggml_get_i32")
    return get_data(t, np.int32, "ggml_get_i32")


def ggml_tensor_view(t: Tensor) -> np.ndarray:
    """Zero-copy numpy view of a host tensor (writes go straight into ggml's memory).
    A quantized tensor shows its encoded blocks: uint8, numpy shape (..., ne1, bytes per row)."""
    _tensor(t, "ggml_tensor_view")
    return numpy_view(t)


_tensor = tensor_arg


def _context(ctx, what) -> Context:
    return context_arg(ctx, what, live=False)


def ggml_nelements(t: Tensor) -> int:
    """The number of elements of t."""
    return _tensor(t, "ggml_nelements").nelements()


def ggml_nbytes(t: Tensor) -> int:
    """The bytes t's data takes."""
    return _tensor(t, "ggml_nbytes").nbytes()


def ggml_n_dims(t: Tensor) -> int:
    """The number of dims of t, ignoring trailing dims of size 1 (at least 1)."""
    return _tensor(t, "ggml_n_dims").n_dims


def ggml_nrows(t: Tensor) -> int:
    """The number of rows of t in ggml's sense: ne1 * ne2 * ne3."""
    return int(lib.ggml_nrows(_tensor(t, "ggml_nrows").ptr))


def ggml_is_contiguous(t: Tensor) -> bool:
    """True if t's elements are packed in ggml order without gaps."""
    return _tensor(t, "ggml_is_contiguous").is_contiguous()


def ggml_type_name(type: int) -> str:
    """ggml's name of a type constant ("f32", "f16", "q4_0", ...)."""
    return type_name(type)


__all__ = sorted(n for n in dir() if n.startswith(("ggml_", "GGML_")))
