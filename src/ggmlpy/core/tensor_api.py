"""ggmlR's context and tensor functions: ggml_init and ggml_free, ggml_new_tensor_*, values in and
out (numpy), names, input/output flags and sizes; the type constants."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import numpy as np
from numpy.typing import ArrayLike

from ..bindings import ffi, lib
from ..errors import GGMLError, check
from .checked import context_arg, tensor_arg
from .handles import (NP_DTYPES, Context, Tensor, _from_storage, _require_data, _to_storage, get_data, meta_check,
                      numpy_view, set_data, type_name, wrap)
from .tensor5 import MAX_DIMS, five, merged
from .tensor_info import ggml_op_desc
from .types import GGML_TYPE_BF16, GGML_TYPE_F16, GGML_TYPE_F32, GGML_TYPE_I8, GGML_TYPE_I16, GGML_TYPE_I32, type_id

_NULL = ffi.NULL
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
    context_arg(ctx, "ggml_free", live=False).free()


def ggml_tensor_overhead() -> int:
    """Bytes of context memory one tensor's metadata takes."""
    return int(lib.ggml_tensor_overhead())


def ggml_used_mem(ctx: Context) -> int:
    """Bytes of the context's memory in use."""
    return context_arg(ctx, "ggml_used_mem", live=False).used_mem()


# -- tensors ----------------------------------------------------------------------------------------
def ggml_new_tensor(ctx: Context, type: int | str, n_dims: int, ne: Sequence[int]) -> Tensor:
    """A new tensor of `type` (an id, GGML_TYPE_*, or a name: "f32", "q4_K") with n_dims dims ne
    (ne[0] fastest-changing) in ctx."""
    context_arg(ctx, "ggml_new_tensor")
    type = type_id(type, "ggml_new_tensor")
    if type not in _CREATABLE and type not in _QUANTIZED:
        raise GGMLError(f"ggml_new_tensor: unsupported type {type} ({type_name(type)})")
    n_dims = int(n_dims)
    ne = [int(d) for d in ne]
    check(1 <= n_dims <= MAX_DIMS, f"ggml_new_tensor: n_dims must be 1..{MAX_DIMS}, got {n_dims}")
    check(len(ne) == n_dims, f"ggml_new_tensor: expected {n_dims} dims, got {len(ne)}")
    if n_dims == MAX_DIMS:  # ne3 and ne4 held merged in ggml's four dims (tensor5.py)
        check(all(d >= 0 for d in ne), f"ggml_new_tensor: dims must be >= 0, got {ne}")
        return five(ggml_new_tensor(ctx, type, 4, merged(ne, 3)), ne[4])
    check(all(d >= 0 for d in ne), f"ggml_new_tensor: dims must be >= 0, got {ne}")
    check(all(d < 2**40 for d in ne), f"ggml_new_tensor: dims too large: {ne}")
    blck = int(lib.ggml_blck_size(type))
    check(ne[0] % blck == 0, f"ggml_new_tensor: a {type_name(type)} row (ne0 = {ne[0]}) must be a whole number "
                             f"of blocks of {blck}")  # ggml asserts it
    ctx.reserve_tensor(type, ne, "ggml_new_tensor")
    return wrap(lib.ggml_new_tensor(ctx.ptr, type, n_dims, ffi.new("int64_t[]", ne)), ctx)


def ggml_new_tensor_1d(ctx: Context, type: int | str, ne0: int) -> Tensor:
    """A new tensor with ne = [ne0]."""
    return ggml_new_tensor(ctx, type, 1, [ne0])


def ggml_new_tensor_2d(ctx: Context, type: int | str, ne0: int, ne1: int) -> Tensor:
    """A new 2-d tensor [ne0, ne1] (an R matrix: ne0 rows, ne1 columns)."""
    return ggml_new_tensor(ctx, type, 2, [ne0, ne1])


def ggml_new_tensor_3d(ctx: Context, type: int | str, ne0: int, ne1: int, ne2: int) -> Tensor:
    """A new 3-d tensor [ne0, ne1, ne2]."""
    return ggml_new_tensor(ctx, type, 3, [ne0, ne1, ne2])


def ggml_new_tensor_4d(ctx: Context, type: int | str, ne0: int, ne1: int, ne2: int, ne3: int) -> Tensor:
    """A new 4-d tensor [ne0, ne1, ne2, ne3]."""
    return ggml_new_tensor(ctx, type, 4, [ne0, ne1, ne2, ne3])


def ggml_new_tensor_5d(ctx: Context, type: int, ne0: int, ne1: int, ne2: int, ne3: int, ne4: int) -> Tensor:
    """A new 5-d tensor [ne0, ne1, ne2, ne3, ne4] (ggmlR's ggml; ne3 and ne4 held merged, see
    ggmlpy.core.tensor5)."""
    return ggml_new_tensor(ctx, type, 5, [ne0, ne1, ne2, ne3, ne4])


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


# -- creating tensors ---------------------------------------------------------------------------------------
def ggml_new_f32(ctx: Context, value: float) -> Tensor:
    """A one-element f32 tensor holding `value`."""
    t = ggml_new_tensor_1d(ctx, lib.GGML_TYPE_F32, 1)
    if not ctx.no_alloc:
        set_data(t, [float(value)], np.float32, "ggml_new_f32")
    return t


def ggml_new_i32(ctx: Context, value: int) -> Tensor:
    """A one-element i32 tensor holding `value`."""
    v = int(value)
    check(v == value and -2**31 <= v < 2**31, f"ggml_new_i32: {value} is not an int32")
    t = ggml_new_tensor_1d(ctx, lib.GGML_TYPE_I32, 1)
    if not ctx.no_alloc:
        set_data(t, [v], np.int32, "ggml_new_i32")
    return t


def ggml_dup_tensor(ctx: Context, t: Tensor) -> Tensor:
    """A new tensor of t's type and shape in ctx (contents not copied)."""
    ctx, t = context_arg(ctx, "ggml_dup_tensor"), tensor_arg(t, "ggml_dup_tensor")
    ctx.reserve_tensor(t.type, t.ne, "ggml_dup_tensor")
    return five(wrap(lib.ggml_dup_tensor(ctx.ptr, t.ptr), ctx), getattr(t, "ne4", 1))


def ggml_view_tensor(ctx: Context, t: Tensor) -> Tensor:
    """A view of all of t (same type, shape, strides and memory), made in ctx."""
    ctx, t = context_arg(ctx, "ggml_view_tensor"), tensor_arg(t, "ggml_view_tensor")
    ctx.reserve_tensor(t.type, t.ne, "ggml_view_tensor", view=True)
    if t.ctx is not ctx:
        ctx._deps.add(t.ctx)
    return five(wrap(lib.ggml_view_tensor(ctx.ptr, t.ptr), ctx), getattr(t, "ne4", 1))


def ggml_set_param(t: Tensor) -> Tensor:
    """Mark t as a trainable parameter (GGML_TENSOR_FLAG_PARAM): ggml's backward pass makes its gradient."""
    t = tensor_arg(t, "ggml_set_param")
    check(t.ptr.op == lib.GGML_OP_NONE, "ggml_set_param: only leaf tensors (not op results) can be parameters")
    lib.ggml_set_param(t.ptr)
    return t


# -- reading and writing data --------------------------------------------------------------------------------
def ggml_set_zero(t: Tensor) -> Tensor:
    """Fill t with zeros."""
    t = tensor_arg(t, "ggml_set_zero")
    _require_data(t, "ggml_set_zero")
    if t.on_host:
        lib.ggml_set_zero(t.ptr)
    else:
        meta_check(t, "ggml_set_zero", 0, t.nbytes(), write=True)
        lib.ggml_backend_tensor_memset(t.ptr, 0, 0, t.nbytes())
    return t


def _nd_index(t: Tensor, idx, what):
    ne = t.ne
    idx = [int(i) for i in idx]
    for k, (i, n) in enumerate(zip(idx, ne)):
        if not 0 <= i < n:
            raise GGMLError(f"{what}: index i{k} = {i} is out of range 0..{n - 1} (0-based, ggml order)")
    if not t.is_allocated:
        _require_data(t, what)
    return idx


def _element(t: Tensor, idx, what):
    """Byte offset of one element (strides respected, so views work too)."""
    return sum(i * s for i, s in zip(idx, t.nb))


def _read_scalar(t: Tensor, idx, what):
    store = NP_DTYPES.get(t.type)
    if store is None:
        raise GGMLError(f"{what}: cannot read {t.type_name} tensors")
    raw = np.empty(1, store)
    off = _element(t, idx, what)
    if t.on_host:
        ffi.memmove(ffi.from_buffer(raw), ffi.cast("char *", t.ptr.data) + off, store.itemsize)
    else:
        meta_check(t, what, off, store.itemsize)
        lib.ggml_backend_tensor_get(t.ptr, ffi.from_buffer(raw), off, store.itemsize)
    return _from_storage(raw, t.type)[0]


def _write_scalar(t: Tensor, idx, value, what):
    store = NP_DTYPES.get(t.type)
    if store is None:
        raise GGMLError(f"{what}: cannot write {t.type_name} tensors")
    src = np.array([value], dtype=np.int64 if store.kind in "iu" else np.float32)
    raw = _to_storage(src.astype(np.float32) if t.type in (lib.GGML_TYPE_BF16,) else src, t.type)
    off = _element(t, idx, what)
    if t.on_host:
        ffi.memmove(ffi.cast("char *", t.ptr.data) + off, ffi.from_buffer(raw), store.itemsize)
    else:
        meta_check(t, what, off, store.itemsize, write=True)
        lib.ggml_backend_tensor_set(t.ptr, ffi.from_buffer(raw), off, store.itemsize)


def ggml_get_f32_nd(t: Tensor, i0: int, i1: int = 0, i2: int = 0, i3: int = 0) -> float:
    """One element of t as a float, at 0-based ggml indices (i0 fastest)."""
    t = tensor_arg(t, "ggml_get_f32_nd")
    return float(_read_scalar(t, _nd_index(t, (i0, i1, i2, i3), "ggml_get_f32_nd"), "ggml_get_f32_nd"))


def ggml_get_i32_nd(t: Tensor, i0: int, i1: int = 0, i2: int = 0, i3: int = 0) -> int | float:
    """One element of t as an int, at 0-based ggml indices (a non-finite f32 value comes back as that float)."""
    t = tensor_arg(t, "ggml_get_i32_nd")
    v = _read_scalar(t, _nd_index(t, (i0, i1, i2, i3), "ggml_get_i32_nd"), "ggml_get_i32_nd")
    return int(v) if np.isfinite(v) else v


def ggml_set_f32_nd(t: Tensor, i0: int, i1: int = 0, i2: int = 0, i3: int = 0, value: float | None = None) -> Tensor:
    """Write one element of t (0-based ggml indices); value is keyword-or-last, as in ggmlR."""
    t = tensor_arg(t, "ggml_set_f32_nd")
    check(value is not None, "ggml_set_f32_nd: value is missing")
    idx = _nd_index(t, (i0, i1, i2, i3), "ggml_set_f32_nd")
    _write_scalar(t, idx, float(value) if t.type != lib.GGML_TYPE_I32 else int(value), "ggml_set_f32_nd")
    return t


def ggml_set_i32_nd(t: Tensor, i0: int, i1: int = 0, i2: int = 0, i3: int = 0, value: float | None = None) -> Tensor:
    """Write one integer element of t (0-based ggml indices)."""
    t = tensor_arg(t, "ggml_set_i32_nd")
    check(value is not None, "ggml_set_i32_nd: value is missing")
    check(float(value) == int(value), f"ggml_set_i32_nd: {value} is not an integer")
    idx = _nd_index(t, (i0, i1, i2, i3), "ggml_set_i32_nd")
    _write_scalar(t, idx, int(value), "ggml_set_i32_nd")
    return t


def ggml_tensor_set_f32_scalar(t: Tensor, value: float) -> Tensor:
    """Set every element of t to `value`."""
    t = tensor_arg(t, "ggml_tensor_set_f32_scalar")
    set_data(t, np.full(t.nelements(), float(value)), np.float32 if t.type != lib.GGML_TYPE_I32 else np.int32,
             "ggml_tensor_set_f32_scalar")
    return t


def ggml_tensor_copy(dst: Tensor, src: Tensor) -> Tensor:
    """Copy src's data into dst (same type and size; both contiguous with data)."""
    dst, src = tensor_arg(dst, "ggml_tensor_copy"), tensor_arg(src, "ggml_tensor_copy")
    check(dst.type == src.type, f"ggml_tensor_copy: types differ ({dst.type_name} vs {src.type_name})")
    check(dst.nbytes() == src.nbytes(), f"ggml_tensor_copy: sizes differ ({dst.nbytes()} vs {src.nbytes()} bytes)")
    check(src.type in NP_DTYPES, f"ggml_tensor_copy: cannot copy {src.type_name} tensors")
    raw = get_data(src, NP_DTYPES[src.type] if src.type != lib.GGML_TYPE_BF16 else np.float32, "ggml_tensor_copy")
    set_data(dst, raw.reshape(-1), NP_DTYPES[src.type] if src.type != lib.GGML_TYPE_BF16 else np.float32,
             "ggml_tensor_copy")
    return dst


def ggml_backend_tensor_get_f32_first(t: Tensor) -> float:
    """t's first element as a float (a scalar result, e.g. a loss)."""
    t = tensor_arg(t, "ggml_backend_tensor_get_f32_first")
    check(t.nelements() > 0, "ggml_backend_tensor_get_f32_first: the tensor is empty")
    return float(_read_scalar(t, _nd_index(t, (0, 0, 0, 0), "ggml_backend_tensor_get_f32_first"),
                              "ggml_backend_tensor_get_f32_first"))


# -- contexts --------------------------------------------------------------------------------------------------
def ggml_reset(ctx: Context) -> Context:
    """Empty ctx for reuse (same memory). Tensors and graphs made in it before become unusable."""
    ctx = context_arg(ctx, "ggml_reset")
    if len(ctx._views):
        raise GGMLError("ggml_reset: numpy views (ggml_tensor_view) of this context's tensors are alive; "
                        "delete them first, or their memory would be reused under them")
    for buf in getattr(ctx, "_buffers", []):  # tensors in backend buffers would dangle
        raise GGMLError("ggml_reset: the context's tensors live in a backend buffer; free it instead")
    lib.ggml_reset(ctx.ptr)
    ctx.gen += 1
    return ctx


def ggml_get_mem_size(ctx: Context) -> int:
    """The context's arena size in bytes."""
    return int(lib.ggml_get_mem_size(context_arg(ctx, "ggml_get_mem_size").ptr))


def ggml_set_no_alloc(ctx: Context, no_alloc: bool) -> Context:
    """Whether tensors created from now on get data in the arena (False) or none (True)."""
    ctx = context_arg(ctx, "ggml_set_no_alloc")
    lib.ggml_set_no_alloc(ctx.ptr, bool(no_alloc))
    ctx.no_alloc = bool(no_alloc)
    return ctx


def ggml_get_no_alloc(ctx: Context) -> bool:
    """Whether new tensors in ctx get no data."""
    return bool(lib.ggml_get_no_alloc(context_arg(ctx, "ggml_get_no_alloc").ptr))


def ggml_get_max_tensor_size(ctx: Context) -> int:
    """Bytes of the largest tensor in ctx."""
    return int(lib.ggml_get_max_tensor_size(context_arg(ctx, "ggml_get_max_tensor_size").ptr))


def ggml_tensor_num(ctx: Context) -> int:
    """How many tensors ctx holds."""
    ctx = context_arg(ctx, "ggml_tensor_num")
    n, p = 0, lib.ggml_get_first_tensor(ctx.ptr)
    while p != _NULL:
        n += 1
        p = lib.ggml_get_next_tensor(ctx.ptr, p)
    return n


def ggml_get_first_tensor(ctx: Context) -> Tensor | None:
    """The first tensor created in ctx, or None."""
    ctx = context_arg(ctx, "ggml_get_first_tensor")
    p = lib.ggml_get_first_tensor(ctx.ptr)
    return None if p == _NULL else Tensor(p, ctx)


def ggml_get_next_tensor(ctx: Context, t: Tensor) -> Tensor | None:
    """The tensor created in ctx after t, or None."""
    ctx, t = context_arg(ctx, "ggml_get_next_tensor"), tensor_arg(t, "ggml_get_next_tensor")
    check(t.ctx is ctx, "ggml_get_next_tensor: t does not belong to ctx")
    p = lib.ggml_get_next_tensor(ctx.ptr, t.ptr)
    return None if p == _NULL else Tensor(p, ctx)


def ggml_print_objects(ctx: Context) -> None:
    """Print the context's tensors (ggml prints through its log; this prints through Python)."""
    ctx = context_arg(ctx, "ggml_print_objects")
    t = ggml_get_first_tensor(ctx)
    print(f"ggml context: {ggml_tensor_num(ctx)} tensors, {ctx.used_mem()} of {ctx.mem_size} bytes used")
    while t is not None:
        print(f"  {t.name or '(unnamed)'} {t.type_name} ne={list(t.ne)} {ggml_op_desc(t)}")
        t = ggml_get_next_tensor(ctx, t)


def ggml_estimate_memory(type: int = lib.GGML_TYPE_F32, ne0: int = 1, ne1: int = 1, ne2: int = 1,
                         ne3: int = 1) -> int:
    """Arena bytes one tensor of this type and shape needs: data + ggml's object overhead + alignment.
    (ggmlR counts 4 bytes per element whatever the type; this uses the type's real row size.)"""
    n = int(ne0) * int(ne1) * int(ne2) * int(ne3)
    check(n >= 0, "ggml_estimate_memory: dims must be >= 0")
    data = int(lib.ggml_row_size(type_id(type, "ggml_estimate_memory"), n)) if n else 0
    return data + int(lib.ggml_tensor_overhead()) + 256


def ggml_print_mem_status(ctx: Context) -> dict:
    """Print and return the context's total, used and free bytes."""
    ctx = context_arg(ctx, "ggml_print_mem_status")
    total, used = ctx.mem_size, ctx.used_mem()
    mb = 1024 * 1024
    print(f"GGML context memory: total {total / mb:.2f} MB, used {used / mb:.2f} MB "
          f"({100 * used / total:.1f}%), free {(total - used) / mb:.2f} MB")
    return {"total": total, "used": used, "free": total - used}


def ggml_init_auto(*shapes, extra_mb: float = 10, type: int = lib.GGML_TYPE_F32, no_alloc: bool = False,
                   **named_shapes) -> Context:
    """A context sized for tensors of the given shapes (each a number or a sequence of 1 to 4 dims,
    positional or named as in ggmlR's ggml_init_auto(vec = 1000, mat = c(100, 100))) plus extra_mb."""
    total = 0
    for s in list(shapes) + list(named_shapes.values()):
        dims = [int(d) for d in np.ravel(s)]
        check(1 <= len(dims) <= 4, f"ggml_init_auto: a shape has 1 to 4 dims, got {dims}")
        total += ggml_estimate_memory(type, *dims)
    return ggml_init(int(total + extra_mb * 1024 * 1024), no_alloc=no_alloc)


@contextlib.contextmanager
def ggml_with_temp_ctx(mem_size: int = 16 * 1024 * 1024, no_alloc: bool = False) -> Iterator[Context]:
    """`with ggml_with_temp_ctx(n) as ctx:` a context freed at the end of the block (ggmlR evaluates an
    expression with a temporary ctx; Python's form is a with-block)."""
    ctx = ggml_init(mem_size, no_alloc)
    try:
        yield ctx
    finally:
        ctx.free()


__all__ = sorted(n for n in dir() if n.startswith(("ggml_", "GGML_")))
