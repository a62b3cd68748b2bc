"""Backend buffers and the tensor data in them: `BackendBuffer` (a ggml_backend_buffer_t), ggmlR's
ggml_backend_buffer_* and multi-buffers, giving a no_alloc context's tensors backend memory
(ggml_backend_alloc_ctx_tensors), and values in and out of backend tensors, sync and async.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from .._sigint import uninterruptible
from ..bindings import c_str, enum_constants, ffi, lib
from ..errors import GGMLError, check
from .backend import ggml_backend_synchronize, is_meta
from .checked import handle_arg
from .device import Backend, backend_arg
from .handles import NP_DTYPES, Context, Tensor, _to_storage, _write_raw, get_data, on_meta, set_data
from .tensor_api import ggml_get_f32, ggml_set_f32

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

_NULL = ffi.NULL

_CONSTANTS = {  # ggmlR's function: (ggml's constant, what it means)
    "ggml_backend_buffer_usage_any": ("GGML_BACKEND_BUFFER_USAGE_ANY", "GGML_BACKEND_BUFFER_USAGE_ANY."),
    "ggml_backend_buffer_usage_weights": ("GGML_BACKEND_BUFFER_USAGE_WEIGHTS", "GGML_BACKEND_BUFFER_USAGE_WEIGHTS."),
    "ggml_backend_buffer_usage_compute": ("GGML_BACKEND_BUFFER_USAGE_COMPUTE", "GGML_BACKEND_BUFFER_USAGE_COMPUTE."),
}
globals().update(enum_constants(__name__, _CONSTANTS))


class BackendBuffer:
    """A backend buffer holding a context's tensors; freed with the object (or .free())."""

    def __init__(self, ptr, ctx: Context, backend: Backend):
        self.ptr, self.ctx, self.backend = ptr, ctx, backend

    def size(self) -> int:
        """The buffer's size in bytes (0 once freed)."""
        return int(lib.ggml_backend_buffer_get_size(self.ptr)) if self.ptr is not None else 0

    @uninterruptible
    def free(self):
        """Free the buffer now; the context whose tensors it holds is freed with it."""
        if self.ptr is not None:
            # Tensors pointing into this buffer would dangle: retire their context too.
            self.ctx.free()
            lib.ggml_backend_buffer_free(self.ptr)
            self.ptr = None

    @uninterruptible
    def __del__(self):
        if self.ptr is not None:
            lib.ggml_backend_buffer_free(self.ptr)
            self.ptr = None


_USAGES = (0, 1, 2)


# -- buffers ------------------------------------------------------------------------------------------------
def buffer_arg(buf, what) -> BackendBuffer:
    return handle_arg(buf, BackendBuffer, what, "buffer")


def ggml_backend_buffer_name(buf: BackendBuffer) -> str:
    """The buffer type's name ("CPU", "Vulkan0", ...)."""
    return c_str(lib.ggml_backend_buffer_name(buffer_arg(buf, "ggml_backend_buffer_name").ptr))


def ggml_backend_buffer_get_size(buf: BackendBuffer) -> int:
    """The buffer's size in bytes."""
    if isinstance(buf, MultiBuffer):
        return buf.size()
    return int(lib.ggml_backend_buffer_get_size(buffer_arg(buf, "ggml_backend_buffer_get_size").ptr))


def ggml_backend_buffer_is_host(buf: BackendBuffer) -> bool:
    """Whether the buffer is in host memory (readable with a plain copy)."""
    return bool(lib.ggml_backend_buffer_is_host(buffer_arg(buf, "ggml_backend_buffer_is_host").ptr))


def ggml_backend_buffer_get_usage(buf: BackendBuffer) -> int:
    """The buffer's usage code (ggml_backend_buffer_usage_*())."""
    return int(lib.ggml_backend_buffer_get_usage(buffer_arg(buf, "ggml_backend_buffer_get_usage").ptr))


def ggml_backend_buffer_set_usage(buf: BackendBuffer, usage: int) -> BackendBuffer:
    """Tell ggml what the buffer holds (weights or compute); the scheduler uses it."""
    buf = buffer_arg(buf, "ggml_backend_buffer_set_usage")
    check(int(usage) in _USAGES, f"ggml_backend_buffer_set_usage: unknown usage {usage}")
    if isinstance(buf, MultiBuffer):
        return ggml_backend_multi_buffer_set_usage(buf, usage)
    lib.ggml_backend_buffer_set_usage(buf.ptr, int(usage))
    return buf


def ggml_backend_buffer_clear(buf: BackendBuffer, value: int = 0) -> BackendBuffer:
    """Fill every byte of the buffer with `value` (0..255)."""
    buf = buffer_arg(buf, "ggml_backend_buffer_clear")
    v = int(value)
    check(0 <= v <= 255, f"ggml_backend_buffer_clear: value is a byte, 0..255, got {value}")
    if isinstance(buf, MultiBuffer):
        for b in buf.parts:
            lib.ggml_backend_buffer_clear(b.ptr, v)
        return buf
    lib.ggml_backend_buffer_clear(buf.ptr, v)
    return buf


def ggml_backend_buffer_reset(buf: BackendBuffer) -> BackendBuffer:
    """Reset the buffer's allocator state (backends that keep one: a no-op on the CPU)."""
    lib.ggml_backend_buffer_reset(buffer_arg(buf, "ggml_backend_buffer_reset").ptr)
    return buf


def ggml_backend_buffer_free(buf: BackendBuffer) -> None:
    """Free the buffer. The tensors in it can no longer be used: their context is retired."""
    if isinstance(buf, BackendBuffer) and buf.ptr is None:
        return
    buffer_arg(buf, "ggml_backend_buffer_free").free()


class MultiBuffer(BackendBuffer):
    """Several backend buffers handled as one: ggml's multi buffer (its entry points are not exported
    by libggml, so ggmlpy keeps the list itself). Size is the sum; usage and clear apply to each;
    freeing it frees them all."""

    def __init__(self, parts):
        self.parts = parts
        self.ptr, self.ctx, self.backend = parts[0].ptr, _NoContext(), parts[0].backend

    def size(self) -> int:
        return sum(b.size() for b in self.parts)

    @uninterruptible
    def free(self):
        for b in self.parts:
            b.free()
        self.ptr = None

    @uninterruptible
    def __del__(self):
        pass


def ggml_backend_buffer_is_multi_buffer(buf: BackendBuffer) -> bool:
    """Whether the buffer wraps several buffers (ggml_backend_multi_buffer_alloc_buffer)."""
    return isinstance(buffer_arg(buf, "ggml_backend_buffer_is_multi_buffer"), MultiBuffer)


class _NoContext:
    """Stands in for the context of a buffer that has none of its own (a multi buffer)."""

    @uninterruptible
    def free(self):
        pass


def ggml_backend_multi_buffer_alloc_buffer(buffers: Iterable[BackendBuffer]) -> MultiBuffer:
    """One buffer over several, so that set_usage, clear and free reach all of them."""
    parts = [buffer_arg(b, "ggml_backend_multi_buffer_alloc_buffer") for b in buffers]
    check(len(parts) > 0, "ggml_backend_multi_buffer_alloc_buffer: no buffers given")
    check(len({id(b) for b in parts}) == len(parts), "ggml_backend_multi_buffer_alloc_buffer: a buffer is listed twice")
    check(not any(isinstance(b, MultiBuffer) for b in parts), "ggml_backend_multi_buffer_alloc_buffer: buffers "
          "must be plain buffers")
    return MultiBuffer(parts)


def ggml_backend_multi_buffer_set_usage(buf: BackendBuffer, usage: int) -> BackendBuffer:
    """Set the usage of every buffer inside a multi buffer."""
    buf = buffer_arg(buf, "ggml_backend_multi_buffer_set_usage")
    check(isinstance(buf, MultiBuffer), "ggml_backend_multi_buffer_set_usage: not a multi buffer")
    for b in buf.parts:
        ggml_backend_buffer_set_usage(b, usage)
    return buf


# -- tensor data -----------------------------------------------------------------------------------------------
def _data_tensor(t, what, blocks: bool = False) -> Tensor:
    """t, checked to hold data this process can write; `blocks`: a quantized type is allowed too."""
    if not isinstance(t, Tensor):
        raise GGMLError(f"{what}: expected a Tensor, got {type(t).__name__}")
    p = t.ptr
    if p.buffer == _NULL and (p.view_src == _NULL or p.view_src.buffer == _NULL):
        if p.data == _NULL:
            raise GGMLError(f"{what}: tensor '{t.name or '<unnamed>'}' has no backend buffer; "
                            "allocate it with ggml_backend_alloc_ctx_tensors first")
    check(t.is_contiguous(), f"{what}: the tensor is a non-contiguous view; use ggml_cont() first")
    check(t.type in NP_DTYPES or (blocks and lib.ggml_is_quantized(t.type)),
          f"{what}: cannot move {t.type_name} data as numbers")
    return t


def _np_of(t) -> np.dtype:
    return np.dtype(np.int32) if t.type == lib.GGML_TYPE_I32 else np.dtype(np.float32)


def _range(t, offset, n, what):
    es = int(lib.ggml_type_size(t.type))
    offset = int(offset)
    check(offset >= 0 and offset % es == 0, f"{what}: offset is in bytes, a multiple of {es}, got {offset}")
    start = offset // es
    n = t.nelements() - start if n is None else int(n)
    check(n >= 0 and start + n <= t.nelements(),
          f"{what}: {n} elements from byte {offset} go past the tensor's {t.nelements()} elements")
    return start, n


def ggml_backend_tensor_set_data(tensor: Tensor, data: ArrayLike, offset: int = 0) -> Tensor:
    """Write numbers into a tensor on any backend, from byte `offset` on (ggmlR's form).

    A quantized tensor takes its encoded blocks (a uint8 array or bytes, as quantize_* return
    them), copied as they are: whole blocks from a block boundary on. Float values fill a whole
    quantized tensor, quantized row by row as ggml_backend_tensor_set does."""
    what = "ggml_backend_tensor_set_data"
    t = _data_tensor(tensor, what, blocks=True)
    if lib.ggml_is_quantized(t.type):
        return _set_blocks(t, data, offset, what)
    arr = np.ravel(np.asarray(data))
    check(arr.dtype.kind in "biuf", f"{what}: data must be numbers")
    start, n = _range(t, offset, arr.size, what)
    if start == 0 and n == t.nelements():
        set_data(t, arr, _np_of(t), what)
        return t
    _write_raw(t, _to_storage(arr.astype(_np_of(t)), t.type), what, start * int(lib.ggml_type_size(t.type)))
    return t


def _set_blocks(t: Tensor, data, offset, what: str) -> Tensor:
    """Write a quantized tensor's encoded blocks, whole blocks only (a cut block would decode to
    values nobody wrote)."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        data = np.frombuffer(data, dtype=np.uint8)
    arr = np.asarray(data)
    offset = int(offset)
    if arr.dtype != np.uint8:
        check(offset == 0, f"{what}: a {t.type_name} tensor takes float values only as a whole (offset 0); "
                           "write part of it as encoded blocks (uint8)")
        set_data(t, arr, np.float32, what)
        return t
    raw = np.ascontiguousarray(arr).ravel()
    bsize, blck = int(lib.ggml_type_size(t.type)), int(lib.ggml_blck_size(t.type))
    check(offset >= 0 and offset % bsize == 0,
          f"{what}: offset is in bytes, a multiple of the {bsize}-byte {t.type_name} block, got {offset}")
    check(raw.size % bsize == 0,
          f"{what}: {raw.size} bytes is not a whole number of {bsize}-byte {t.type_name} blocks")
    check(offset + raw.size <= t.nbytes(),
          f"{what}: {raw.size} bytes of {t.type_name} blocks from byte {offset} go past the tensor's "
          f"{t.nbytes()} bytes ({t.nelements()} elements {list(t.shape)}, {t.nbytes() // bsize} blocks of {blck})")
    _write_raw(t, raw, what, offset)
    return t


def ggml_backend_tensor_get_data(tensor: Tensor, offset: int = 0, n_elements: int | None = None) -> np.ndarray:
    """A tensor's numbers (flat, ggml memory order), from byte `offset`, n_elements of them (all by default)."""
    t = _data_tensor(tensor, "ggml_backend_tensor_get_data")
    start, n = _range(t, offset, n_elements, "ggml_backend_tensor_get_data")
    return get_data(t, _np_of(t), "ggml_backend_tensor_get_data").ravel()[start:start + n].copy()


def _async_check(backend, t, what):
    b = backend_arg(backend, what)
    t = _data_tensor(t, what)
    p = t.ptr
    if on_meta(p) or (p.view_src != _NULL and on_meta(p.view_src)):
        raise GGMLError(f"{what}: not available for tensors of a meta device; use "
                        "ggml_backend_tensor_set_data / ggml_backend_tensor_get_data")
    buf = p.view_src.buffer if p.view_src != _NULL else p.buffer  # the buffer ggml asserts on
    check(buf != _NULL and p.data != _NULL,
          f"{what}: the tensor is not in a backend buffer; allocate it with ggml_backend_alloc_ctx_tensors")
    return b, t


def ggml_backend_tensor_set_async(backend: Backend, tensor: Tensor, data: ArrayLike, offset: int = 0,
                                  size: int | None = None) -> None:
    """Queue a write of `data` into the tensor on `backend` (complete after ggml_backend_synchronize).
    offset and size in bytes; the data is kept alive until the next synchronize."""
    b, t = _async_check(backend, tensor, "ggml_backend_tensor_set_async")
    raw = np.ascontiguousarray(np.ravel(np.asarray(data)).astype(_np_of(t)))
    size = raw.nbytes if size is None else int(size)
    check(0 <= size <= raw.nbytes, f"ggml_backend_tensor_set_async: size {size} is more than the data's {raw.nbytes} bytes")
    check(0 <= int(offset) and int(offset) + size <= t.nbytes(),
          f"ggml_backend_tensor_set_async: bytes {offset}..{int(offset) + size} go past the tensor's {t.nbytes()}")
    b._pending = getattr(b, "_pending", []) + [raw]
    lib.ggml_backend_tensor_set_async(b.ptr, t.ptr, ffi.from_buffer(raw), int(offset), size)


def ggml_backend_tensor_get_async(backend: Backend, tensor: Tensor, offset: int = 0,
                                  size: int | None = None) -> np.ndarray:
    """Queue a read of the tensor; returns the numpy array it lands in (valid after ggml_backend_synchronize)."""
    b, t = _async_check(backend, tensor, "ggml_backend_tensor_get_async")
    size = t.nbytes() - int(offset) if size is None else int(size)
    es = int(lib.ggml_type_size(t.type))
    check(0 <= int(offset) and 0 <= size and int(offset) + size <= t.nbytes() and size % es == 0,
          f"ggml_backend_tensor_get_async: bytes {offset}..{int(offset) + size} do not fit the tensor's {t.nbytes()}")
    out = np.empty(size // es, _np_of(t))
    lib.ggml_backend_tensor_get_async(b.ptr, t.ptr, ffi.from_buffer(out), int(offset), size)
    return out


def ggml_backend_tensor_get_and_sync(backend: Backend, tensor: Tensor, offset: int = 0,
                                     size: int | None = None) -> np.ndarray:
    """ggml_backend_tensor_get_async followed by ggml_backend_synchronize: the numbers, flat."""
    out = ggml_backend_tensor_get_async(backend, tensor, offset, size)
    ggml_backend_synchronize(backend)
    return out.astype(np.float64) if out.dtype.kind == "f" else out


def ggml_backend_tensor_copy_async(backend_src: Backend, backend_dst: Backend, src: Tensor, dst: Tensor) -> None:
    """Queue a copy of src into dst (same layout) between backends."""
    bs, s = _async_check(backend_src, src, "ggml_backend_tensor_copy_async")
    bd, d = _async_check(backend_dst, dst, "ggml_backend_tensor_copy_async")
    check(s.type == d.type and s.ne == d.ne and s.nb == d.nb,
          "ggml_backend_tensor_copy_async: src and dst must have the same layout (type, shape and strides)")
    lib.ggml_backend_tensor_copy_async(bs.ptr, bd.ptr, s.ptr, d.ptr)


def _has_views(ctx: Context) -> bool:
    p = lib.ggml_get_first_tensor(ctx.ptr)
    while p != ffi.NULL:
        if p.view_src != ffi.NULL:
            return True
        p = lib.ggml_get_next_tensor(ctx.ptr, p)
    return False


def ggml_backend_alloc_ctx_tensors(ctx: Context, backend: Backend) -> BackendBuffer:
    """Allocate every tensor of a no_alloc context in one buffer of `backend`."""
    if not isinstance(ctx, Context) or not isinstance(backend, Backend):
        raise GGMLError("ggml_backend_alloc_ctx_tensors(ctx, backend) expects a Context and a Backend")
    ctx.ensure_alive()
    check(ctx.no_alloc, "ggml_backend_alloc_ctx_tensors: the context must be created with no_alloc=True")
    if lib.ggml_get_first_tensor(ctx.ptr) == ffi.NULL:
        raise GGMLError("ggml_backend_alloc_ctx_tensors: the context has no tensors")
    # ggml asserts that every view's source is, or is about to be, in a backend buffer
    own, p = set(), lib.ggml_get_first_tensor(ctx.ptr)
    while p != ffi.NULL:
        own.add(int(ffi.cast("uintptr_t", p)))
        src = p.view_src
        if src != ffi.NULL and src.buffer == ffi.NULL and int(ffi.cast("uintptr_t", src)) not in own:
            raise GGMLError("ggml_backend_alloc_ctx_tensors: the context holds a view of a tensor outside "
                            "any backend buffer (e.g. of a tensor in an ordinary context)")
        p = lib.ggml_get_next_tensor(ctx.ptr, p)
    if is_meta(backend):  # ggml derives a view's split from rules ggmlpy does not follow for weights
        check(not _has_views(ctx), "ggml_backend_alloc_ctx_tensors: a meta device's weights cannot include views")
    ptr = lib.ggml_backend_alloc_ctx_tensors(ctx.ptr, backend.ptr)
    if ptr == ffi.NULL:
        raise MemoryError(f"could not allocate the context's tensors on {backend.device_name}")
    buf = BackendBuffer(ptr, ctx, backend)
    ctx._buffers = getattr(ctx, "_buffers", []) + [buf]  # the buffer lives as long as the context
    return buf


def ggml_backend_tensor_set(t: Tensor, values: ArrayLike) -> None:
    """Write values into t, wherever its buffer lives (as ggml_set_f32)."""
    ggml_set_f32(t, values)


def ggml_backend_tensor_get(t: Tensor) -> np.ndarray:
    """A tensor's values as float32 numpy, from any backend (as ggml_get_f32)."""
    return ggml_get_f32(t)
