"""ggml contexts and tensors: the objects behind ggmlR's ggml_init / ggml_new_tensor_*.

A `Context` owns a ggml_context. A `Tensor` is a thin handle on a
`struct ggml_tensor *` that keeps its context alive and refuses to be used once
that context has been freed: ggml would read freed memory, or abort.

Layout rule: ggml's ne0 is the fastest axis, so a C-contiguous numpy array of
shape (d3, d2, d1, d0) is ggml ne = [d0, d1, d2, d3] with no copy.
"""
from __future__ import annotations

import weakref

import numpy as np

from .._sigint import uninterruptible
from ..bindings import ffi, lib
from ..errors import GGMLError, check
from .rpc import check_tensor_device
from .meta_split import META_BUFTS, check_access
from .quants import dequantize, ggml_quantize_chunk

GGML_MEM_ALIGN = 16

# ggml type id -> numpy dtype, for the element types ggmlpy reads and writes.
NP_DTYPES = {
    lib.GGML_TYPE_F32: np.dtype(np.float32),
    lib.GGML_TYPE_F16: np.dtype(np.float16),
    lib.GGML_TYPE_I32: np.dtype(np.int32),
    lib.GGML_TYPE_I16: np.dtype(np.int16),
    lib.GGML_TYPE_I8: np.dtype(np.int8),
    lib.GGML_TYPE_F64: np.dtype(np.float64),
    lib.GGML_TYPE_I64: np.dtype(np.int64),
    lib.GGML_TYPE_BF16: np.dtype(np.uint16),  # raw bits; converted on the way in and out
}
TYPE_NAMES = {t: ffi.string(lib.ggml_type_name(t)).decode() for t in NP_DTYPES}


def type_name(t: int) -> str:
    return TYPE_NAMES.get(t) or ffi.string(lib.ggml_type_name(t)).decode()


class OwnedPointer:
    """A handle that owns what ggml made at `ptr`: released once, by the ggml function the subclass
    names in RELEASE, at free() or when the handle is garbage-collected, never half-way through
    by Ctrl-C. `ptr` is None until ggml has made it (a failed __init__ leaves nothing to free)
    and after it is freed."""

    ptr = None
    RELEASE: str

    @uninterruptible
    def free(self) -> None:
        """Free it now (otherwise when the handle is garbage-collected)."""
        if self.ptr is not None:
            getattr(lib, self.RELEASE)(self.ptr)
            self.ptr = None

    @uninterruptible
    def __del__(self):
        self.free()  # the subclass's free, where it has its own


_MEM_ALIGN = 64  # >= ggml's GGML_MEM_ALIGN (16), and a cache line
_alloc_uncleared = ffi.new_allocator(should_clear_after_alloc=False)


def arena(mem_size: int):
    """(owner, aligned pointer) of `mem_size` bytes for a ggml context's mem_buffer. ggml asserts
    (aborting the process) when its own malloc of an arena fails; here a failure is a MemoryError.
    Not cleared: pages are only touched when tensors are written, as with ggml's malloc. The
    owner must outlive the context (ggml_free leaves memory it was given alone)."""
    owner = _alloc_uncleared("char[]", int(mem_size) + _MEM_ALIGN)
    return owner, owner + (-int(ffi.cast("uintptr_t", owner)) % _MEM_ALIGN)


class Context:
    """A ggml context: a fixed arena for tensor metadata and, unless no_alloc, their data."""

    def __init__(self, mem_size: int = 16 * 1024 * 1024, no_alloc: bool = False):
        mem_size = int(mem_size)
        check(mem_size > 0, f"ggml_init: mem_size must be positive, got {mem_size}")
        self._arena, buf = arena(mem_size)
        params = ffi.new("struct ggml_init_params *", {"mem_size": mem_size, "mem_buffer": buf,
                                                       "no_alloc": bool(no_alloc)})
        ptr = lib.ggml_init(params[0])
        if ptr == ffi.NULL:
            raise MemoryError(f"ggml_init could not allocate {mem_size} bytes")
        self.ptr = ptr
        self.mem_size = mem_size
        self.no_alloc = bool(no_alloc)
        self.alive = True
        self.gen = 0  # bumped by ggml_reset(): tensors made before a reset are unusable after it
        # numpy views into this context's memory; the C arena is released only when
        # free() was asked for *and* no view is left, so a view never dangles.
        self._views = weakref.WeakSet()
        self._free_requested = False
        # contexts whose tensors ops in this one read: they must outlive it (see check_deps)
        self._deps: set = set()
        self._finalizer = weakref.finalize(self, lib.ggml_free, ptr)

    # -- lifetime -----------------------------------------------------------------
    @uninterruptible
    def free(self) -> None:
        """Free the context now. Its tensors become unusable (GGMLError on use)."""
        if not self.alive:
            return
        self.alive = False
        self._free_requested = True
        if not len(self._views):
            self._finalizer()

    @uninterruptible
    def _view_released(self) -> None:
        if self._free_requested and not len(self._views):
            self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    def ensure_alive(self) -> None:
        """Raise GGMLError if the context has been freed."""
        if not self.alive:
            raise GGMLError("this ggml context has been freed; its tensors can no longer be used")

    def check_deps(self) -> None:
        """Raise if this context, or any context its ops read tensors from, has been freed."""
        seen, todo = set(), [self]
        while todo:
            c = todo.pop()
            if id(c) not in seen:
                seen.add(id(c))
                c.ensure_alive()
                todo.extend(c._deps)

    # -- memory accounting (ggml aborts when the arena runs out, so we check first) --
    def used_mem(self) -> int:
        """Bytes of the context's memory in use."""
        self.ensure_alive()
        return int(lib.ggml_used_mem(self.ptr))

    def reserve(self, nbytes: int, what: str) -> None:
        """Raise unless `nbytes` more fit in the arena."""
        need = self.used_mem() + nbytes
        if need > self.mem_size:
            raise GGMLError(f"{what}: the ggml context is out of memory: needs {need} bytes, "
                            f"has {self.mem_size}. Pass a larger mem_size to ggml_init().")

    def reserve_tensor(self, ggml_type: int, ne, what: str, view: bool = False) -> None:
        """Check, before ggml would assert, that a tensor of this type and shape fits in the context."""
        n = int(ne[0])
        for d in ne[1:]:  # as ggml counts: a later 0 does not excuse an overflow before it
            n *= int(d) if int(d) > 1 else 1
        if n >= 2**62:  # ggml asserts the element count (and byte size) fit in 64 bits, no_alloc or not
            raise GGMLError(f"{what}: a tensor of ne={list(ne)} has too many elements")
        size = int(lib.ggml_tensor_overhead())
        if not (view or self.no_alloc):
            size += _nbytes(ggml_type, ne) + GGML_MEM_ALIGN
        self.reserve(size, what)

    def __repr__(self):
        state = f"{self.used_mem()}/{self.mem_size} bytes used" if self.alive else "freed"
        return f"<ggml Context {state}{', no_alloc' if self.no_alloc else ''}>"


def _nbytes(ggml_type: int, ne) -> int:
    n = 1
    for d in ne:
        n *= int(d)
    return int(lib.ggml_row_size(ggml_type, n)) if n else 0


class Tensor:
    """A handle on a ggml tensor. Keeps its context alive; refuses use after the context is freed."""

    __slots__ = ("_ptr", "ctx", "_gen", "__weakref__")

    def __init__(self, ptr, ctx: Context):
        self._ptr = ptr
        self.ctx = ctx
        self._gen = ctx.gen

    @property
    def ptr(self):
        """The cffi pointer to the ggml tensor (raises if its context was freed)."""
        if not self.ctx.alive:
            raise GGMLError("tensor belongs to a freed ggml context")
        if self._gen != self.ctx.gen:
            raise GGMLError("tensor was created before ggml_reset() of its context; its memory has been reused")
        return self._ptr

    # -- introspection --------------------------------------------------------------
    @property
    def ne(self) -> tuple:
        """Elements per dim, ggml order (ne[0] fastest-changing), 4 entries."""
        return tuple(int(x) for x in self.ptr.ne)

    @property
    def nb(self) -> tuple:
        """Byte strides per dim, ggml order, 4 entries."""
        return tuple(int(x) for x in self.ptr.nb)

    @property
    def n_dims(self) -> int:
        """The number of dims, ignoring trailing dims of size 1 (at least 1)."""
        return int(lib.ggml_n_dims(self.ptr))

    @property
    def shape(self) -> tuple:
        """ggml order (ne0, ne1, ...), trailing ones dropped; numpy's shape is the reverse."""
        return self.ne[: self.n_dims]

    @property
    def type(self) -> int:
        """The ggml type constant (GGML_TYPE_F32, ...)."""
        return int(self.ptr.type)

    @property
    def type_name(self) -> str:
        """ggml's name of the type ("f32", ...)."""
        return type_name(self.type)

    @property
    def name(self) -> str:
        """The tensor's name ("" if none)."""
        return ffi.string(self.ptr.name).decode()

    @property
    def op(self) -> int:
        """The ggml op constant that computes it (GGML_OP_NONE for data)."""
        return int(self.ptr.op)

    def nelements(self) -> int:
        """The number of elements."""
        return int(lib.ggml_nelements(self.ptr))

    def nbytes(self) -> int:
        """The bytes the tensor's data takes."""
        return int(lib.ggml_nbytes(self.ptr))

    def is_contiguous(self) -> bool:
        """True if the elements are packed in ggml order without gaps."""
        return bool(lib.ggml_is_contiguous(self.ptr))

    @property
    def is_allocated(self) -> bool:
        """True if the tensor has memory for its data."""
        return self.ptr.data != ffi.NULL

    @property
    def on_host(self) -> bool:
        """True when the data can be read with a plain memory copy."""
        p = self.ptr
        return p.buffer == ffi.NULL or (bool(lib.ggml_backend_buffer_is_host(p.buffer)) and not on_meta(p))

    def __repr__(self):
        if not self.ctx.alive:
            return "<ggml Tensor (freed context)>"
        name = f" {self.name!r}" if self.name else ""
        return f"<ggml Tensor{name} {self.type_name} ne={list(self.shape)}>"

    def __eq__(self, other):
        return isinstance(other, Tensor) and self._ptr == other._ptr

    def __hash__(self):
        return hash(int(ffi.cast("uintptr_t", self._ptr)))


def wrap(ptr, ctx: Context) -> Tensor:
    if ptr == ffi.NULL:
        raise GGMLError("ggml returned NULL")
    return Tensor(ptr, ctx)


# -- data in and out --------------------------------------------------------------------
def _np_shape(t: Tensor) -> tuple:
    return tuple(reversed(t.shape)) or (1,)


def on_meta(p) -> bool:
    """Whether tensor pointer p lives in a meta device's buffer."""
    return bool(META_BUFTS) and p.buffer != ffi.NULL and \
        int(ffi.cast("uintptr_t", lib.ggml_backend_buffer_get_type(p.buffer))) in META_BUFTS


def meta_check(t, what: str, offset: int = 0, size: int | None = None, write: bool = False) -> None:
    """Raise GGMLError for a data access that ggml's meta buffer would abort on (no-op elsewhere)."""
    if META_BUFTS:
        check_access(t, what, offset, size, write)


def _require_data(t: Tensor, what: str) -> None:
    if not t.is_allocated and t.nelements():  # ggml gives empty tensors no data pointer
        raise GGMLError(f"{what}: tensor has no data yet (no_alloc context: allocate it on a backend first, "
                        "e.g. ggml_backend_alloc_ctx_tensors)")
    if not t.is_contiguous():
        raise GGMLError(f"{what}: tensor is a non-contiguous view; use ggml_cont() first")


def _squeeze_lead(shape: tuple) -> tuple:
    """Leading 1s of a numpy shape are ggml's trailing ne = 1: (1, 3, 2) and (3, 2) are the same tensor."""
    i = 0
    while i < len(shape) and shape[i] == 1:
        i += 1
    return tuple(shape[i:])


def set_data(t: Tensor, values, np_dtype, what: str) -> None:
    _require_data(t, what)
    if lib.ggml_is_quantized(t.type):
        return _write_raw(t, _quantized_storage(t, values, np_dtype, what), what)
    if NP_DTYPES.get(t.type) is None:
        raise GGMLError(f"{what}: cannot write {t.type_name} tensors")
    arr = np.asarray(values)
    if arr.dtype.kind not in "biuf":
        raise GGMLError(f"{what}: expected numbers, got an array of dtype {arr.dtype}")
    n = t.nelements()
    if arr.size != n:
        raise GGMLError(f"{what}: data length ({arr.size}) does not match tensor size ({n} elements, "
                        f"ne={list(t.shape)})")
    if arr.ndim > 1 and _squeeze_lead(arr.shape) != _squeeze_lead(_np_shape(t)):
        raise GGMLError(f"{what}: array shape {arr.shape} does not match the tensor's numpy shape "
                        f"{_np_shape(t)} (ggml ne={list(t.shape)}, reversed)")
    src = np.ascontiguousarray(arr, dtype=np_dtype).ravel()
    _write_raw(t, _to_storage(src, t.type), what)


def _write_raw(t: Tensor, raw: np.ndarray, what: str = "writing tensor data", offset: int = 0) -> None:
    """Copy raw's bytes into t from byte `offset` on (the caller has checked that they fit)."""
    if t.on_host:
        ffi.memmove(ffi.cast("char *", t.ptr.data) + offset, ffi.from_buffer(raw), raw.nbytes)
    else:
        meta_check(t, what, offset, raw.nbytes, write=True)
        lib.ggml_backend_tensor_set(t.ptr, ffi.from_buffer(raw), offset, raw.nbytes)
        check_tensor_device(t.ptr)


def _quantized_storage(t: Tensor, values, np_dtype, what: str) -> np.ndarray:
    """A quantized tensor's bytes: given as its encoded blocks, or quantized from float values."""
    nbytes = t.nbytes()
    if isinstance(values, (bytes, bytearray, memoryview)):
        values = np.frombuffer(values, dtype=np.uint8)
    arr = np.asarray(values)
    if arr.dtype == np.uint8 and arr.size == nbytes:  # no quantized type has as many bytes as values
        return np.ascontiguousarray(arr).ravel()
    if np.dtype(np_dtype).kind != "f":
        raise GGMLError(f"{what}: a {t.type_name} tensor holds floats")
    n, ne0 = t.nelements(), t.ne[0]
    if arr.dtype.kind not in "biuf" or arr.size != n:
        raise GGMLError(f"{what}: a {t.type_name} tensor of {n} elements {list(t.shape)} takes {n} float values "
                        f"or its {nbytes} bytes of blocks (uint8); got {arr.size} values of dtype {arr.dtype}")
    if arr.ndim > 1 and _squeeze_lead(arr.shape) != _squeeze_lead(_np_shape(t)):
        raise GGMLError(f"{what}: array shape {arr.shape} does not match the tensor's numpy shape {_np_shape(t)}")
    return ggml_quantize_chunk(t.type, arr, n // ne0, ne0)


def get_data(t: Tensor, np_dtype, what: str) -> np.ndarray:
    _require_data(t, what)
    if lib.ggml_is_quantized(t.type):
        if np.dtype(np_dtype).kind != "f":
            raise GGMLError(f"{what}: a {t.type_name} tensor holds floats")
        raw = np.empty(t.nbytes(), dtype=np.uint8)
        _read_raw(t, raw, what)
        return dequantize(t.type, raw).astype(np_dtype, copy=False).reshape(_np_shape(t))
    store = NP_DTYPES.get(t.type)
    if store is None:
        raise GGMLError(f"{what}: cannot read {t.type_name} tensors")
    raw = np.empty(t.nelements(), dtype=store)
    _read_raw(t, raw, what)
    return _from_storage(raw, t.type).astype(np_dtype, copy=False).reshape(_np_shape(t))


def _read_raw(t: Tensor, raw: np.ndarray, what: str = "reading tensor data") -> None:
    if not raw.nbytes:
        return
    if t.on_host:
        ffi.memmove(ffi.from_buffer(raw), t.ptr.data, raw.nbytes)
    else:
        meta_check(t, what, 0, raw.nbytes)
        lib.ggml_backend_tensor_get(t.ptr, ffi.from_buffer(raw), 0, raw.nbytes)
        check_tensor_device(t.ptr)  # from a lost RPC server the read gives zeros


def _to_storage(src: np.ndarray, ggml_type: int) -> np.ndarray:
    if ggml_type == lib.GGML_TYPE_BF16:  # round to nearest even, as ggml does
        bits = src.astype(np.float32).view(np.uint32)
        return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return src.astype(NP_DTYPES[ggml_type], copy=False)


def _from_storage(raw: np.ndarray, ggml_type: int) -> np.ndarray:
    if ggml_type == lib.GGML_TYPE_BF16:
        return (raw.astype(np.uint32) << 16).view(np.float32)
    return raw


def numpy_view(t: Tensor) -> np.ndarray:
    """Zero-copy numpy view of a host tensor. The view keeps the context's memory alive."""
    _require_data(t, "ggml_tensor_view")
    if not t.on_host:
        raise GGMLError("ggml_tensor_view: tensor lives in device memory; use ggml_get_f32() to copy it")
    store = NP_DTYPES.get(t.type)
    shape = None
    if lib.ggml_is_quantized(t.type):  # the encoded blocks, one row of bytes per ggml row
        store, shape = np.dtype(np.uint8), _np_shape(t)[:-1] + (int(t.ptr.nb[1]),)
    elif store is None or t.type == lib.GGML_TYPE_BF16:
        raise GGMLError(f"ggml_tensor_view: no numpy dtype for {t.type_name}")
    holder = _ViewHolder(t, store, shape)
    t.ctx._views.add(holder)
    # numpy keeps `holder` as the array's base, and with it the context's memory.
    return np.asarray(holder)


class _ViewHolder:
    """Owner of a zero-copy view's memory; tells the context when the last view is gone."""

    __slots__ = ("ctx", "__array_interface__", "__weakref__")

    def __init__(self, t: Tensor, store: np.dtype, shape=None):
        self.ctx = t.ctx
        self.__array_interface__ = {
            "version": 3, "shape": shape or _np_shape(t), "typestr": store.str,
            "data": (int(ffi.cast("uintptr_t", t.ptr.data)), False),
        }

    @uninterruptible
    def __del__(self):
        ctx = self.ctx
        ctx._views.discard(self)
        ctx._view_released()
