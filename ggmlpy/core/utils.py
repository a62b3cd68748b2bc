"""ggmlR's tensor, context, graph, threading and timing utilities (the low-level `ggml_*` helpers).

Queries read ggml's own answers (ggml_is_transposed, ggml_type_size, ...); the ones
that touch data check indices and types first, since ggml's accessors assert.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import numpy as np

from ..bindings import ffi, lib
from ..errors import GGMLError, check
from . import device as _device
from . import graph as _graph
from . import ops as _ops
from . import tensors as _tensors
from . import threads as _threads
from .context import NP_DTYPES, Context, Tensor, _from_storage, _require_data, _to_storage, get_data, meta_check, set_data, wrap
from .graph import Graph

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

_NULL = ffi.NULL
_N_TYPES = int(lib.GGML_TYPE_COUNT)


def _tensor(t, what) -> Tensor:
    if not isinstance(t, Tensor):
        raise GGMLError(f"{what}: expected a ggml Tensor, got {type(t).__name__}")
    t.ptr  # raises for a freed or reset context
    return t


def _context(ctx, what) -> Context:
    if not isinstance(ctx, Context):
        raise GGMLError(f"{what}: expected a ggml Context, got {type(ctx).__name__}")
    ctx.ensure_alive()
    return ctx


def _graph_arg(g, what) -> Graph:
    if not isinstance(g, Graph):
        raise GGMLError(f"{what}: expected a Graph, got {type(g).__name__}")
    g.check_alive()
    return g


def _type_arg(t, what) -> int:
    t = int(t)
    # removed types (4, 5, ...) keep a slot with block size 0: ggml divides by it
    check(0 <= t < _N_TYPES and lib.ggml_blck_size(t) > 0, f"{what}: unknown ggml type {t}")
    return t


# -- types ------------------------------------------------------------------------------------------------
def ggml_type_size(type: int) -> int:
    """Bytes of one block of `type` (one element for f32/f16/i32)."""
    return int(lib.ggml_type_size(_type_arg(type, "ggml_type_size")))


def ggml_type_sizef(type: int) -> float:
    """Bytes per element of `type` (fractional for quantized types)."""
    return float(lib.ggml_type_sizef(_type_arg(type, "ggml_type_sizef")))


def ggml_blck_size(type: int) -> int:
    """Elements per block of `type` (1 for plain types)."""
    return int(lib.ggml_blck_size(_type_arg(type, "ggml_blck_size")))


def ggml_is_quantized(type: int) -> bool:
    """Whether `type` is a block-quantized type."""
    return bool(lib.ggml_is_quantized(_type_arg(type, "ggml_is_quantized")))


def ggml_ftype_to_ggml_type(ftype: int) -> int:
    """The tensor type of a model file type (GGML_FTYPE_*); -1 (GGML_TYPE_COUNT-style unknown) when none."""
    return int(lib.ggml_ftype_to_ggml_type(int(ftype)))


def ggml_element_size(t: Tensor) -> int:
    """Bytes per element of t (its type's block size)."""
    return int(lib.ggml_element_size(_tensor(t, "ggml_element_size").ptr))


def ggml_op_name(op: int) -> str:
    """ggml's name of an op code (GGML_OP_*), e.g. "ADD"."""
    op = int(op)
    check(0 <= op < int(lib.GGML_OP_COUNT), f"ggml_op_name: unknown op {op}")
    return ffi.string(lib.ggml_op_name(op)).decode()


def ggml_op_symbol(op: int) -> str:
    """ggml's symbol for an op code, e.g. "x+y"."""
    op = int(op)
    check(0 <= op < int(lib.GGML_OP_COUNT), f"ggml_op_symbol: unknown op {op}")
    return ffi.string(lib.ggml_op_symbol(op)).decode()


def ggml_unary_op_name(op: int) -> str:
    """ggml's name of a unary op code (GGML_UNARY_OP_*), e.g. "RELU"."""
    op = int(op)
    check(0 <= op < int(lib.GGML_UNARY_OP_COUNT), f"ggml_unary_op_name: unknown unary op {op}")
    return ffi.string(lib.ggml_unary_op_name(op)).decode()


def ggml_glu_op_name(op: int) -> str:
    """ggml's name of a GLU op code (GGML_GLU_OP_*), e.g. "SWIGLU"."""
    op = int(op)
    check(0 <= op < int(lib.GGML_GLU_OP_COUNT), f"ggml_glu_op_name: unknown GLU op {op}")
    return ffi.string(lib.ggml_glu_op_name(op)).decode()


def ggml_op_desc(t: Tensor) -> str:
    """The op that computes t, by name (a unary op's own name for UNARY, "NONE" for a leaf)."""
    return ffi.string(lib.ggml_op_desc(_tensor(t, "ggml_op_desc").ptr)).decode()


def ggml_get_unary_op(t: Tensor) -> int:
    """t's unary op code (GGML_UNARY_OP_*), or -1 when t is not a UNARY node."""
    t = _tensor(t, "ggml_get_unary_op")
    if t.ptr.op != lib.GGML_OP_UNARY:  # ggml asserts this
        return -1
    return int(lib.ggml_get_unary_op(t.ptr))


# ggml-alloc.c's list of ops whose result may reuse an input's memory (ggml_op_can_inplace is not in
# the public headers)
_CAN_INPLACE = frozenset(getattr(lib, f"GGML_OP_{n}") for n in (
    "FILL", "SCALE", "DIAG_MASK_ZERO", "DIAG_MASK_INF", "ADD", "ADD_ID", "ADD1", "SUB", "MUL", "DIV", "SQR",
    "SQRT", "LOG", "UNARY", "ROPE", "ROPE_BACK", "SILU_BACK", "RMS_NORM", "RMS_NORM_BACK", "CLAMP", "SOFT_MAX",
    "SOFT_MAX_BACK") if hasattr(lib, f"GGML_OP_{n}"))


def ggml_op_can_inplace(op: int) -> bool:
    """Whether ggml's graph allocator may compute `op` into one of its inputs' memory."""
    return int(op) in _CAN_INPLACE


# -- tensor shape and layout queries ----------------------------------------------------------------------
def ggml_tensor_shape(t: Tensor) -> list:
    """All four of t's ne (ggml order, trailing ones kept): ggmlR's shape vector."""
    return list(_tensor(t, "ggml_tensor_shape").ne)


def ggml_tensor_nb(t: Tensor) -> list:
    """t's four byte strides nb."""
    return list(_tensor(t, "ggml_tensor_nb").nb)


def ggml_tensor_type(t: Tensor) -> int:
    """t's type code (GGML_TYPE_*)."""
    return _tensor(t, "ggml_tensor_type").type


def _pred(cname: str, doc: str, n_args: int = 1) -> Callable[..., bool]:
    fn = getattr(lib, cname)

    if n_args == 1:
        def q(t: Tensor) -> bool:
            return bool(fn(_tensor(t, cname).ptr))
    else:
        def q(a: Tensor, b: Tensor) -> bool:
            return bool(fn(_tensor(a, cname).ptr, _tensor(b, cname).ptr))
    q.__name__ = q.__qualname__ = cname
    q.__doc__ = doc
    return q


_PREDICATES = {
    "ggml_is_transposed": "Whether t's first two axes are swapped (nb0 > nb1).",
    "ggml_is_permuted": "Whether t's strides are not in increasing order (a permuted view).",
    "ggml_is_contiguous_0": "Whether t is contiguous (same as ggml_is_contiguous).",
    "ggml_is_contiguous_1": "Whether t is contiguous from dim 1 on (rows may be padded).",
    "ggml_is_contiguous_2": "Whether t is contiguous from dim 2 on.",
    "ggml_is_contiguous_channels": "Whether t is laid out channels-first in memory (a [W, H, C] permuted from [C, W, H]).",
    "ggml_is_contiguous_rows": "Whether each of t's rows is packed (nb0 = element size).",
    "ggml_is_contiguously_allocated": "Whether t's elements occupy one gap-free block (in any order).",
    "ggml_is_empty": "Whether t has no elements.",
    "ggml_is_scalar": "Whether t has exactly one element in every dim.",
    "ggml_is_vector": "Whether t is 1-d.",
    "ggml_is_matrix": "Whether t is at most 2-d.",
    "ggml_is_3d": "Whether t is at most 3-d.",
}
for _n, _d in _PREDICATES.items():
    globals()[_n] = _pred(_n, _d)
for _n, _d in {"ggml_are_same_shape": "Whether a and b have the same ne.",
               "ggml_are_same_stride": "Whether a and b have the same nb."}.items():
    globals()[_n] = _pred(_n, _d, 2)


def ggml_are_same_layout(a: Tensor, b: Tensor) -> bool:
    """Whether a and b have the same type, ne and nb (so one's bytes read as the other)."""
    a, b = _tensor(a, "ggml_are_same_layout"), _tensor(b, "ggml_are_same_layout")
    return a.type == b.type and a.ne == b.ne and a.nb == b.nb


def ggml_can_repeat(a: Tensor, b: Tensor) -> bool:
    """Whether a tiles b (each of a's dims divides b's): ggml's broadcasting rule."""
    return _ops.can_repeat(_tensor(a, "ggml_can_repeat"), _tensor(b, "ggml_can_repeat"))


# -- creating tensors ---------------------------------------------------------------------------------------
def ggml_new_f32(ctx: Context, value: float) -> Tensor:
    """A one-element f32 tensor holding `value`."""
    t = _tensors.ggml_new_tensor_1d(ctx, lib.GGML_TYPE_F32, 1)
    if not ctx.no_alloc:
        set_data(t, [float(value)], np.float32, "ggml_new_f32")
    return t


def ggml_new_i32(ctx: Context, value: int) -> Tensor:
    """A one-element i32 tensor holding `value`."""
    v = int(value)
    check(v == value and -2**31 <= v < 2**31, f"ggml_new_i32: {value} is not an int32")
    t = _tensors.ggml_new_tensor_1d(ctx, lib.GGML_TYPE_I32, 1)
    if not ctx.no_alloc:
        set_data(t, [v], np.int32, "ggml_new_i32")
    return t


def ggml_dup_tensor(ctx: Context, t: Tensor) -> Tensor:
    """A new tensor of t's type and shape in ctx (contents not copied)."""
    ctx, t = _context(ctx, "ggml_dup_tensor"), _tensor(t, "ggml_dup_tensor")
    ctx.reserve_tensor(t.type, t.ne, "ggml_dup_tensor")
    return wrap(lib.ggml_dup_tensor(ctx.ptr, t.ptr), ctx)


def ggml_view_tensor(ctx: Context, t: Tensor) -> Tensor:
    """A view of all of t (same type, shape, strides and memory), made in ctx."""
    ctx, t = _context(ctx, "ggml_view_tensor"), _tensor(t, "ggml_view_tensor")
    ctx.reserve_tensor(t.type, t.ne, "ggml_view_tensor", view=True)
    if t.ctx is not ctx:
        ctx._deps.add(t.ctx)
    return wrap(lib.ggml_view_tensor(ctx.ptr, t.ptr), ctx)


def ggml_set_param(t: Tensor) -> Tensor:
    """Mark t as a trainable parameter (GGML_TENSOR_FLAG_PARAM): ggml's backward pass makes its gradient."""
    t = _tensor(t, "ggml_set_param")
    check(t.ptr.op == lib.GGML_OP_NONE, "ggml_set_param: only leaf tensors (not op results) can be parameters")
    lib.ggml_set_param(t.ptr)
    return t


# -- reading and writing data --------------------------------------------------------------------------------
def ggml_set_zero(t: Tensor) -> Tensor:
    """Fill t with zeros."""
    t = _tensor(t, "ggml_set_zero")
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
    t = _tensor(t, "ggml_get_f32_nd")
    return float(_read_scalar(t, _nd_index(t, (i0, i1, i2, i3), "ggml_get_f32_nd"), "ggml_get_f32_nd"))


def ggml_get_i32_nd(t: Tensor, i0: int, i1: int = 0, i2: int = 0, i3: int = 0) -> int | float:
    """One element of t as an int, at 0-based ggml indices (a non-finite f32 value comes back as that float)."""
    t = _tensor(t, "ggml_get_i32_nd")
    v = _read_scalar(t, _nd_index(t, (i0, i1, i2, i3), "ggml_get_i32_nd"), "ggml_get_i32_nd")
    return int(v) if np.isfinite(v) else v


def ggml_set_f32_nd(t: Tensor, i0: int, i1: int = 0, i2: int = 0, i3: int = 0, value: float | None = None) -> Tensor:
    """Write one element of t (0-based ggml indices); value is keyword-or-last, as in ggmlR."""
    t = _tensor(t, "ggml_set_f32_nd")
    check(value is not None, "ggml_set_f32_nd: value is missing")
    idx = _nd_index(t, (i0, i1, i2, i3), "ggml_set_f32_nd")
    _write_scalar(t, idx, float(value) if t.type != lib.GGML_TYPE_I32 else int(value), "ggml_set_f32_nd")
    return t


def ggml_set_i32_nd(t: Tensor, i0: int, i1: int = 0, i2: int = 0, i3: int = 0, value: float | None = None) -> Tensor:
    """Write one integer element of t (0-based ggml indices)."""
    t = _tensor(t, "ggml_set_i32_nd")
    check(value is not None, "ggml_set_i32_nd: value is missing")
    check(float(value) == int(value), f"ggml_set_i32_nd: {value} is not an integer")
    idx = _nd_index(t, (i0, i1, i2, i3), "ggml_set_i32_nd")
    _write_scalar(t, idx, int(value), "ggml_set_i32_nd")
    return t


def ggml_tensor_set_f32_scalar(t: Tensor, value: float) -> Tensor:
    """Set every element of t to `value`."""
    t = _tensor(t, "ggml_tensor_set_f32_scalar")
    set_data(t, np.full(t.nelements(), float(value)), np.float32 if t.type != lib.GGML_TYPE_I32 else np.int32,
             "ggml_tensor_set_f32_scalar")
    return t


def ggml_tensor_copy(dst: Tensor, src: Tensor) -> Tensor:
    """Copy src's data into dst (same type and size; both contiguous with data)."""
    dst, src = _tensor(dst, "ggml_tensor_copy"), _tensor(src, "ggml_tensor_copy")
    check(dst.type == src.type, f"ggml_tensor_copy: types differ ({dst.type_name} vs {src.type_name})")
    check(dst.nbytes() == src.nbytes(), f"ggml_tensor_copy: sizes differ ({dst.nbytes()} vs {src.nbytes()} bytes)")
    check(src.type in NP_DTYPES, f"ggml_tensor_copy: cannot copy {src.type_name} tensors")
    raw = get_data(src, NP_DTYPES[src.type] if src.type != lib.GGML_TYPE_BF16 else np.float32, "ggml_tensor_copy")
    set_data(dst, raw.reshape(-1), NP_DTYPES[src.type] if src.type != lib.GGML_TYPE_BF16 else np.float32,
             "ggml_tensor_copy")
    return dst


def ggml_backend_tensor_get_f32_first(t: Tensor) -> float:
    """t's first element as a float (a scalar result, e.g. a loss)."""
    t = _tensor(t, "ggml_backend_tensor_get_f32_first")
    check(t.nelements() > 0, "ggml_backend_tensor_get_f32_first: the tensor is empty")
    return float(_read_scalar(t, _nd_index(t, (0, 0, 0, 0), "ggml_backend_tensor_get_f32_first"),
                              "ggml_backend_tensor_get_f32_first"))


# -- contexts --------------------------------------------------------------------------------------------------
def ggml_reset(ctx: Context) -> Context:
    """Empty ctx for reuse (same memory). Tensors and graphs made in it before become unusable."""
    ctx = _context(ctx, "ggml_reset")
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
    return int(lib.ggml_get_mem_size(_context(ctx, "ggml_get_mem_size").ptr))


def ggml_set_no_alloc(ctx: Context, no_alloc: bool) -> Context:
    """Whether tensors created from now on get data in the arena (False) or none (True)."""
    ctx = _context(ctx, "ggml_set_no_alloc")
    lib.ggml_set_no_alloc(ctx.ptr, bool(no_alloc))
    ctx.no_alloc = bool(no_alloc)
    return ctx


def ggml_get_no_alloc(ctx: Context) -> bool:
    """Whether new tensors in ctx get no data."""
    return bool(lib.ggml_get_no_alloc(_context(ctx, "ggml_get_no_alloc").ptr))


def ggml_get_max_tensor_size(ctx: Context) -> int:
    """Bytes of the largest tensor in ctx."""
    return int(lib.ggml_get_max_tensor_size(_context(ctx, "ggml_get_max_tensor_size").ptr))


def ggml_tensor_num(ctx: Context) -> int:
    """How many tensors ctx holds."""
    ctx = _context(ctx, "ggml_tensor_num")
    n, p = 0, lib.ggml_get_first_tensor(ctx.ptr)
    while p != _NULL:
        n += 1
        p = lib.ggml_get_next_tensor(ctx.ptr, p)
    return n


def ggml_get_first_tensor(ctx: Context) -> Tensor | None:
    """The first tensor created in ctx, or None."""
    ctx = _context(ctx, "ggml_get_first_tensor")
    p = lib.ggml_get_first_tensor(ctx.ptr)
    return None if p == _NULL else Tensor(p, ctx)


def ggml_get_next_tensor(ctx: Context, t: Tensor) -> Tensor | None:
    """The tensor created in ctx after t, or None."""
    ctx, t = _context(ctx, "ggml_get_next_tensor"), _tensor(t, "ggml_get_next_tensor")
    check(t.ctx is ctx, "ggml_get_next_tensor: t does not belong to ctx")
    p = lib.ggml_get_next_tensor(ctx.ptr, t.ptr)
    return None if p == _NULL else Tensor(p, ctx)


def ggml_print_objects(ctx: Context) -> None:
    """Print the context's tensors (ggml prints through its log; this prints through Python)."""
    ctx = _context(ctx, "ggml_print_objects")
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
    data = int(lib.ggml_row_size(_type_arg(type, "ggml_estimate_memory"), n)) if n else 0
    return data + int(lib.ggml_tensor_overhead()) + 256


def ggml_print_mem_status(ctx: Context) -> dict:
    """Print and return the context's total, used and free bytes."""
    ctx = _context(ctx, "ggml_print_mem_status")
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
    return _tensors.ggml_init(int(total + extra_mb * 1024 * 1024), no_alloc=no_alloc)


@contextlib.contextmanager
def ggml_with_temp_ctx(mem_size: int = 16 * 1024 * 1024, no_alloc: bool = False) -> Iterator[Context]:
    """`with ggml_with_temp_ctx(n) as ctx:` a context freed at the end of the block (ggmlR evaluates an
    expression with a temporary ctx; Python's form is a with-block)."""
    ctx = _tensors.ggml_init(mem_size, no_alloc)
    try:
        yield ctx
    finally:
        ctx.free()


# -- op parameters -------------------------------------------------------------------------------------------
_N_OP_PARAMS = 16  # GGML_MAX_OP_PARAMS / sizeof(int32_t)


def _op_index(index, what) -> int:
    i = int(index)
    check(0 <= i < _N_OP_PARAMS, f"{what}: index must be in 0..{_N_OP_PARAMS - 1}, got {index}")
    return i


def ggml_get_op_params(t: Tensor) -> bytes:
    """t's raw op parameters: GGML_MAX_OP_PARAMS (64) bytes, as ggmlR's raw vector."""
    t = _tensor(t, "ggml_get_op_params")
    return bytes(ffi.buffer(t.ptr.op_params))


def ggml_set_op_params(t: Tensor, params: bytes | bytearray | memoryview | ArrayLike) -> Tensor:
    """Overwrite t's first len(params) op-parameter bytes (bytes, or ints 0..255 as R's as.raw)."""
    t = _tensor(t, "ggml_set_op_params")
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
    t = _tensor(t, "ggml_get_op_params_i32")
    return int(t.ptr.op_params[_op_index(index, "ggml_get_op_params_i32")])


def ggml_set_op_params_i32(t: Tensor, index: int, value: int) -> Tensor:
    """Set op parameter `index` of t to an int32."""
    t = _tensor(t, "ggml_set_op_params_i32")
    t.ptr.op_params[_op_index(index, "ggml_set_op_params_i32")] = int(value)
    return t


def ggml_get_op_params_f32(t: Tensor, index: int) -> float:
    """Op parameter `index` of t read as float32."""
    t = _tensor(t, "ggml_get_op_params_f32")
    return float(ffi.cast("float *", t.ptr.op_params)[_op_index(index, "ggml_get_op_params_f32")])


def ggml_set_op_params_f32(t: Tensor, index: int, value: float) -> Tensor:
    """Set op parameter `index` of t to a float32."""
    t = _tensor(t, "ggml_set_op_params_f32")
    ffi.cast("float *", t.ptr.op_params)[_op_index(index, "ggml_set_op_params_f32")] = float(value)
    return t


# -- graphs ------------------------------------------------------------------------------------------------------
def ggml_graph_overhead() -> int:
    """Arena bytes a graph of the default size (2048 nodes) takes."""
    return int(lib.ggml_graph_overhead())


def ggml_graph_node(graph: Graph, i: int) -> Tensor:
    """Node i of the graph in execution order; negative i counts from the end (-1: the last)."""
    graph = _graph_arg(graph, "ggml_graph_node")
    n, i = graph.n_nodes(), int(i)
    check(-n <= i < n, f"ggml_graph_node: index {i} is out of range for a graph of {n} nodes")
    return Tensor(lib.ggml_graph_node(graph.ptr, i), graph.ctx)


def ggml_graph_get_tensor(graph: Graph, name: str) -> Tensor | None:
    """The graph's node or leaf named `name`, or None."""
    graph = _graph_arg(graph, "ggml_graph_get_tensor")
    p = lib.ggml_graph_get_tensor(graph.ptr, str(name).encode())
    return None if p == _NULL else Tensor(p, graph.ctx)


def _graph_lines(graph: Graph) -> list:
    lines = ["=== GRAPH ===", f"n_nodes = {graph.n_nodes()}"]
    for k, p in enumerate(graph.nodes):
        ne = [int(p.ne[d]) for d in range(4)]
        lines.append(f" - {k:3d}: [{ne[0]:5d}, {ne[1]:5d}, {ne[2]:5d}] {ffi.string(lib.ggml_op_desc(p)).decode():>16} "
                     f"{ffi.string(p.name).decode()}")
    lines.append(f"n_leafs = {len(graph.leafs)}")
    for k, p in enumerate(graph.leafs):
        ne = [int(p.ne[d]) for d in range(2)]
        lines.append(f" - {k:3d}: [{ne[0]:5d}, {ne[1]:5d}] {ffi.string(lib.ggml_op_name(p.op)).decode():>8} "
                     f"{ffi.string(p.name).decode()}")
    lines.append("========================================")
    return lines


def ggml_graph_print(graph: Graph) -> None:
    """Print the graph's nodes and leafs (ggml prints to its log; this prints to stdout)."""
    print("\n".join(_graph_lines(_graph_arg(graph, "ggml_graph_print"))))


def ggml_graph_dump_dot(graph: Graph, leafs: Graph | None = None, filename: str = "graph.dot") -> str:
    """Write the graph in Graphviz dot format (ggml's own writer); returns the file name."""
    graph = _graph_arg(graph, "ggml_graph_dump_dot")
    gb = _NULL if leafs is None else _graph_arg(leafs, "ggml_graph_dump_dot").ptr
    with open(filename, "w"):  # ggml asserts that it can open the file: fail here, as OSError, if not
        pass
    lib.ggml_graph_dump_dot(graph.ptr, gb, str(filename).encode())
    return str(filename)


def ggml_graph_reset(graph: Graph) -> Graph:
    """Zero the gradients of a graph built with grads (ggml_new_graph(ctx, size, grads=True))."""
    graph = _graph_arg(graph, "ggml_graph_reset")
    check(graph.grads, "ggml_graph_reset: the graph has no gradients; build it with ggml_new_graph(ctx, size, grads=True)")
    lib.ggml_graph_reset(graph.ptr)
    return graph


def ggml_graph_compute_with_ctx(ctx: Context, graph: Graph, n_threads: int = 0) -> None:
    """ggml_graph_compute with a thread count (0: the default, ggml_get_n_threads())."""
    n = int(n_threads)
    check(n >= 0, "ggml_graph_compute_with_ctx: n_threads must be >= 0")
    _graph.ggml_graph_compute(ctx, graph, n_threads=n or None)


# -- threads and time ---------------------------------------------------------------------------------------------
def ggml_set_n_threads(n_threads: int) -> int:
    """ggmlR's name for set_num_threads(): the threads every CPU computation uses from now on
    (ggml_graph_compute, ag_*, the Keras-like models, ONNX models); returns it."""
    return _threads.set_num_threads(_threads.checked_count(n_threads, "ggml_set_n_threads"))


def ggml_get_n_threads() -> int:
    """ggmlR's name for get_num_threads()."""
    return _threads.get_num_threads()


def ggml_set_omp_threads(n: int) -> int:
    """ggmlR's thread setter (its ggml is built with OpenMP): the thread setting (set_num_threads),
    and OMP_NUM_THREADS for OpenMP runtimes started from now on (OpenBLAS's, with its OpenMP build;
    ggml's own CPU threads are its thread pool, sized by the setting)."""
    n = int(n)
    check(n >= 1, "ggml_set_omp_threads: Number of threads must be at least 1")
    os.environ["OMP_NUM_THREADS"] = str(n)
    return ggml_set_n_threads(n)


# -- ggml's log and abort handlers ----------------------------------------------------------------------------------
def ggml_log_set_default() -> None:
    """Send ggml's log to stderr, ggml's own default (ggmlpy normally routes it into Python's logging,
    logger "ggmlpy.ggml"; ggml_log_set_python() restores that)."""
    lib.ggml_log_set(_NULL, _NULL)
    _LOG["python"] = False


def ggml_log_set_python() -> None:
    """Route ggml's log into Python's logging (logger "ggmlpy.ggml"): ggmlpy's default, ggmlR's
    ggml_log_set_r() in Python."""
    check(_device._LOG_CALLBACK is not None, "ggml_log_set_python: this system gives cffi no callbacks")
    lib.ggml_log_set(_device._LOG_CALLBACK, _NULL)
    _LOG["python"] = True


def ggml_log_is_python_enabled() -> bool:
    """Whether ggml's log goes into Python's logging (ggmlR's ggml_log_is_r_enabled())."""
    return _LOG["python"]


def _initial_log_state() -> bool:
    return _device._LOG_CALLBACK is not None


_LOG = {"python": _initial_log_state()}


def ggml_set_abort_callback_default() -> None:
    """ggml's default abort handler (print and abort). ggmlpy installs no other: it validates every
    call so that ggml never aborts, rather than trying to survive an abort."""
    lib.ggml_set_abort_callback(_NULL)


def ggml_time_init() -> None:
    """Start ggml's clock (ggml_time_ms/us count from the first call)."""
    lib.ggml_time_init()


def ggml_time_ms() -> int:
    """ggml's monotonic clock in milliseconds."""
    return int(lib.ggml_time_ms())


def ggml_time_us() -> int:
    """ggml's monotonic clock in microseconds."""
    return int(lib.ggml_time_us())


def ggml_cycles() -> int:
    """ggml's clock() value (CPU ticks of this process)."""
    return int(lib.ggml_cycles())


def ggml_cycles_per_ms() -> int:
    """Ticks of ggml_cycles() per millisecond."""
    return int(lib.ggml_cycles_per_ms())


def ggml_is_available() -> bool:
    """Whether libggml is loaded (always true once ggmlpy imported)."""
    return True


def ggml_test() -> bool:
    """ggmlR's self-test: ggml computes 2 + 3, and what ggmlR prints is printed (the library
    loaded, its version, the bytes of one tensor's metadata). Returns whether the sum was 5."""
    with _tensors.ggml_init(1024 * 1024) as ctx:
        a = _tensors.ggml_set_f32(_tensors.ggml_new_tensor_1d(ctx, lib.GGML_TYPE_F32, 1), [2.0])
        b = _tensors.ggml_set_f32(_tensors.ggml_new_tensor_1d(ctx, lib.GGML_TYPE_F32, 1), [3.0])
        y = _ops.ggml_add(ctx, a, b)
        _graph.ggml_graph_compute(ctx, _graph.ggml_build_forward_expand(ctx, y))
        ok = bool(_tensors.ggml_get_f32(y)[0] == 5.0)
    print("GGML library loaded successfully!" if ok else "GGML self-test FAILED: 2 + 3 != 5")
    print(f"GGML version: {_tensors.ggml_version()}")
    print(f"Tensor overhead: {_tensors.ggml_tensor_overhead()} bytes")
    return ok


__all__ = sorted(n for n in globals() if n.startswith("ggml_"))


def ggml_graph_view(graph: Graph, i0: int, i1: int) -> Graph:
    """The graph's nodes i0..i1-1 as a graph of their own (their inputs stay where they are): computing
    it runs only those nodes, e.g. to run a graph in parts."""
    graph = _graph_arg(graph, "ggml_graph_view")
    n, i0, i1 = graph.n_nodes(), int(i0), int(i1)
    check(0 <= i0 <= i1 <= n, f"ggml_graph_view: need 0 <= i0 <= i1 <= {n}, got {i0}, {i1}")
    view = Graph(graph.ctx, max(1, i1 - i0))
    for p in graph.nodes[i0:i1]:
        lib.ggml_graph_add_node(view.ptr, p)
    view.nodes = list(graph.nodes[i0:i1])
    view._seen = {int(ffi.cast("uintptr_t", p)) for p in view.nodes}
    view._keep = list(graph._keep)
    return view


def _host_binary(a, b, what, op):
    a, b = _tensor(a, what), _tensor(b, what)
    check(a.type == lib.GGML_TYPE_F32 and b.type == lib.GGML_TYPE_F32, f"{what}: Both tensors must be F32")
    check(a.nelements() == b.nelements(), f"{what}: Tensors must have same number of elements")
    xa, xb = get_data(a, np.float32, what).ravel(), get_data(b, np.float32, what).ravel()
    with _tensors.ggml_init(4 * (xa.size * 3) + 8 * int(lib.ggml_tensor_overhead()) + int(lib.ggml_graph_overhead()) + (1 << 16)) as ctx:
        ta, tb = _tensors.ggml_new_from_numpy(ctx, xa), _tensors.ggml_new_from_numpy(ctx, xb)
        y = (_ops.ggml_add if op == "add" else _ops.ggml_mul)(ctx, ta, tb)
        _graph.ggml_graph_compute(ctx, _graph.ggml_build_forward_expand(ctx, y), n_threads=1)
        return _tensors.ggml_get_f32(y).astype(np.float64)


def ggml_cpu_add(a: Tensor, b: Tensor) -> np.ndarray:
    """a + b of two f32 tensors with the same number of elements, computed now on the CPU: a flat vector."""
    return _host_binary(a, b, "ggml_cpu_add", "add")


def ggml_cpu_mul(a: Tensor, b: Tensor) -> np.ndarray:
    """a * b of two f32 tensors with the same number of elements, computed now on the CPU: a flat vector."""
    return _host_binary(a, b, "ggml_cpu_mul", "mul")


__all__ = sorted(n for n in globals() if n.startswith("ggml_"))
