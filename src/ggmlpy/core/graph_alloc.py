"""ggml's graph allocator (ggml_gallocr): one buffer per backend, intermediates reuse each other's memory."""
from __future__ import annotations

import weakref

from .._sigint import uninterruptible
from ..bindings import ffi, lib
from ..errors import GGMLError
from .device import Backend, get_backend
from .graph import Graph
from .meta_split import check_graph as check_meta_graph


class GraphAllocator:
    """ggml's graph allocator for one backend: computed tensors of a graph get memory in one
    buffer, reused between tensors whose lifetimes do not overlap. A context manager."""

    def __init__(self, backend: Backend):
        self.backend = backend
        self.contexts = weakref.WeakSet()
        self.ptr = lib.ggml_gallocr_new(backend.buft)
        if self.ptr == ffi.NULL:
            raise MemoryError("ggml_gallocr_new failed")

    def alloc(self, graph: Graph) -> None:
        """Give every unallocated tensor of `graph` memory in this allocator's buffer.

        The graph's context now depends on this buffer: it keeps the allocator alive, and
        an explicit free() retires the context, so no tensor can point into freed memory."""
        if self.ptr is None:
            raise GGMLError("graph allocator already freed")
        graph.ctx.ensure_alive()
        if self.backend.dev != ffi.NULL and \
                lib.ggml_backend_dev_type(self.backend.dev) == lib.GGML_BACKEND_DEVICE_TYPE_META:
            check_meta_graph(graph, self.backend.dev, allocating=True)  # ggml's meta buffer aborts on splits it has no rule for
        if not lib.ggml_gallocr_alloc_graph(self.ptr, graph.ptr):
            raise MemoryError(f"could not allocate the graph's buffer on {self.backend.device_name}")
        self.contexts.add(graph.ctx)
        graph.ctx._allocators = getattr(graph.ctx, "_allocators", []) + [self]

    def buffer_size(self) -> int:
        """The size in bytes of the allocator's buffer (0 once freed)."""
        return int(lib.ggml_gallocr_get_buffer_size(self.ptr, 0)) if self.ptr is not None else 0

    @uninterruptible
    def free(self) -> None:
        """Free the buffer now; the contexts whose tensors live in it are retired first."""
        if self.ptr is not None:
            for ctx in list(self.contexts):
                ctx.free()
            lib.ggml_gallocr_free(self.ptr)
            self.ptr = None

    @uninterruptible
    def __del__(self):  # only once no context holds it: nothing points into the buffer any more
        if self.ptr is not None:
            lib.ggml_gallocr_free(self.ptr)
            self.ptr = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()


def ggml_gallocr_new(backend: Backend | None = None) -> GraphAllocator:
    """A graph allocator for `backend`'s buffer type (default: the CPU, as ggmlR's ggml_gallocr_new())."""
    if backend is None:
        backend = get_backend("cpu")
    return GraphAllocator(backend)


def ggml_gallocr_alloc_graph(galloc: GraphAllocator, graph: Graph) -> bool:
    """Give every unallocated tensor of `graph` memory in the allocator's buffer; True on success."""
    galloc.alloc(graph)
    return True


def ggml_gallocr_get_buffer_size(galloc: GraphAllocator, buffer_id: int = 0) -> int:
    """The size in bytes of the allocator's buffer (there is one: buffer_id is ggml's, always 0)."""
    return galloc.buffer_size()


# -- graph allocator helpers ggmlR adds -------------------------------------------------------------------------------
def ggml_gallocr_reserve(galloc: GraphAllocator, graph: Graph) -> bool:
    """Size the allocator's buffer for `graph` without assigning memory."""
    if not isinstance(galloc, GraphAllocator) or galloc.ptr is None:
        raise GGMLError("ggml_gallocr_reserve: expected a live graph allocator")
    if not isinstance(graph, Graph):
        raise GGMLError("ggml_gallocr_reserve: expected a Graph")
    graph.check_alive()
    return bool(lib.ggml_gallocr_reserve(galloc.ptr, graph.ptr))


def ggml_gallocr_free(galloc: GraphAllocator) -> None:
    """Free the allocator (tensors it placed become unusable: their contexts are retired)."""
    if isinstance(galloc, GraphAllocator):
        galloc.free()
