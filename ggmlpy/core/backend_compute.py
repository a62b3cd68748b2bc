"""ggmlR's first backend functions: making a backend, giving a no_alloc context's tensors backend
memory, values in and out, and computing a graph on a backend (the rest of ggml's backend API is
backend_api.py)."""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from .._sigint import uninterruptible
from ..bindings import ffi, lib
from ..errors import GGMLError, check
from .context import Context, Tensor
from .device import Backend, devices
from .graph import Graph, check_graph
from .meta_split import check_graph as check_meta_graph
from .tensors import ggml_get_f32, ggml_set_f32


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
        check_meta_graph(graph, backend.dev)
    check_graph(graph, device=backend.dev, need_buffers=not backend.is_host,
                run=lambda sub: ggml_backend_graph_compute(backend, sub))
    status = lib.ggml_backend_graph_compute(backend.ptr, graph.ptr)
    backend.check()  # a lost RPC server: DeviceLostError, not a compute that did not happen
    if status != lib.GGML_STATUS_SUCCESS:
        raise GGMLError(f"ggml_backend_graph_compute failed with status {status}")
    return int(status)


def ggml_backend_dev_count() -> int:
    """The number of devices the loaded backends report."""
    return len(devices())


__all__ = sorted(n for n in dir() if n.startswith("ggml_backend_")) + ["BackendBuffer"]
