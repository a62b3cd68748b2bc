"""The low-level API: ggmlR's ggml_* functions, same names, numpy in and out.

    ctx = ggml_init(16 * 1024 * 1024)
    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 3, 4)      # ne0 = 3 (R rows), ne1 = 4
    ggml_set_f32(a, np.arange(12))
    y = ggml_soft_max(ctx, a)
    gf = ggml_build_forward_expand(ctx, y)
    ggml_graph_compute(ctx, gf)
    ggml_get_f32(y)                                        # numpy (4, 3): shape is ne reversed
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from .device import Backend, backends, devices, get_backend
from .sched import Scheduler, ggml_backend_sched_graph_compute, ggml_backend_sched_new
from .graph_alloc import GraphAllocator, ggml_gallocr_alloc_graph, ggml_gallocr_get_buffer_size, ggml_gallocr_new
from ..bindings import ffi, lib
from ..errors import GGMLError, check
from .context import Context, Tensor, get_data, numpy_view, set_data, type_name, wrap
from .graph import Graph, check_graph, ggml_build_forward_expand, ggml_graph_compute, ggml_graph_n_nodes, ggml_new_graph
from .ops import *  # noqa: F401,F403  (every ggml_* op constructor)
from .ops_ext import *  # noqa: F401,F403  (GLU, RoPE variants, more convolutions, the *_inplace table)
from .utils import *  # noqa: F401,F403  (tensor, context, graph, thread and time utilities)

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
    if not isinstance(ctx, Context):
        raise GGMLError("ggml_new_tensor: first argument must be a Context")
    ctx.ensure_alive()
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


def _tensor(t, what) -> Tensor:
    if not isinstance(t, Tensor):
        raise GGMLError(f"{what}: expected a ggml Tensor, got {type(t).__name__}")
    t.ptr
    return t


def _context(ctx, what) -> Context:
    if not isinstance(ctx, Context):
        raise GGMLError(f"{what}: expected a ggml Context, got {type(ctx).__name__}")
    return ctx


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


# -- backends ------------------------------------------------------------------------------------------
def ggml_backend_cpu_init() -> Backend:
    """A private CPU backend (not the shared one ggmlpy's pools use)."""
    return Backend(lib.ggml_backend_cpu_init(), "CPU")


def ggml_backend_init_by_name(name: str, params: str | None = None) -> Backend:
    """A backend for the device named `name` (see devices()), e.g. "CPU" or "Vulkan0"."""
    names = [d.name for d in devices()]
    if name not in names:
        raise GGMLError(f"ggml_backend_init_by_name: no device {name!r}; available: {', '.join(names)}")
    return Backend(lib.ggml_backend_init_by_name(name.encode(), params.encode() if params else ffi.NULL), name)


def ggml_backend_init_best() -> Backend:
    """A backend for the best device ggml finds (a GPU if there is one, else the CPU)."""
    return Backend(lib.ggml_backend_init_best(), "best")


def ggml_backend_cpu_set_n_threads(backend: Backend, n_threads: int) -> None:
    """Set how many threads a CPU backend computes with."""
    backend.set_n_threads(n_threads)


def ggml_backend_name(backend: Backend) -> str:
    """The backend's name."""
    return backend.name


def ggml_backend_free(backend: Backend) -> None:
    """Free a backend (also done when the object is collected)."""
    backend.free()


class BackendBuffer:
    """A backend buffer holding a context's tensors; freed with the object (or .free())."""

    def __init__(self, ptr, ctx: Context, backend: Backend):
        self.ptr, self.ctx, self.backend = ptr, ctx, backend

    def size(self) -> int:
        """The buffer's size in bytes (0 once freed)."""
        return int(lib.ggml_backend_buffer_get_size(self.ptr)) if self.ptr is not None else 0

    def free(self):
        """Free the buffer now; the context whose tensors it holds is freed with it."""
        if self.ptr is not None:
            # Tensors pointing into this buffer would dangle: retire their context too.
            self.ctx.free()
            lib.ggml_backend_buffer_free(self.ptr)
            self.ptr = None

    def __del__(self):
        if self.ptr is not None:
            lib.ggml_backend_buffer_free(self.ptr)
            self.ptr = None


def is_meta(backend: Backend) -> bool:
    """Whether `backend` runs on a meta device (ggml_backend_meta_device)."""
    return backend.dev != ffi.NULL and lib.ggml_backend_dev_type(backend.dev) == lib.GGML_BACKEND_DEVICE_TYPE_META


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


def ggml_backend_graph_compute(backend: Backend, graph: Graph) -> None:
    """Compute the graph on the backend (its tensors must be in buffers the backend can use)."""
    if not isinstance(backend, Backend) or not isinstance(graph, Graph):
        raise GGMLError("ggml_backend_graph_compute(backend, graph) expects a Backend and a Graph")
    if is_meta(backend):  # first: ggml's meta backend aborts on splits it has no rule for
        from .meta_backend import check_graph as check_meta_graph
        check_meta_graph(graph, backend.dev)
    check_graph(graph, device=backend.dev, need_buffers=not backend.is_host,
                run=lambda sub: ggml_backend_graph_compute(backend, sub))
    status = lib.ggml_backend_graph_compute(backend.ptr, graph.ptr)
    if status != lib.GGML_STATUS_SUCCESS:
        raise GGMLError(f"ggml_backend_graph_compute failed with status {status}")
    return int(status)


def ggml_backend_dev_count() -> int:
    """The number of devices the loaded backends report."""
    return len(devices())


__all__ = sorted(n for n in dir() if n.startswith(("ggml_", "GGML_"))) + [
    "Context", "Tensor", "Graph", "Backend", "BackendBuffer", "GraphAllocator", "Scheduler", "devices", "backends", "get_backend"]
