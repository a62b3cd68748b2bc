"""No-alloc ggml contexts that cannot overflow.

ggml aborts the process when a context has no room for one more tensor header, or a graph no
free node slot. So every context here is made for a stated number of headers, a builder asks
`room(n)` before it emits n more, and a full one raises GraphFull: the caller builds again in a
bigger one (`GraphContext.retrying`). Tensors of a no_alloc context own no memory: an allocator,
a scheduler or the caller points them at some.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from .._sigint import uninterruptible
from ..bindings import ffi, lib
from ..core.checked import GraphFull
from ..core.handles import arena
from ..errors import GGMLError

TENSOR_OVERHEAD = int(lib.ggml_tensor_overhead())
_SLACK = 4096  # bytes ggml's context keeps for its own bookkeeping beyond the objects
T = TypeVar("T")


_ARENAS: dict = {}  # context address -> the memory it was given (new_context), released by free_context


def new_context(n_tensors: int, extra_bytes: int = 0):
    """A no_alloc ggml context with room for `n_tensors` headers and `extra_bytes` more (a graph);
    free it with free_context. Its memory is allocated here (core.handles.arena): a size from a
    hostile model file that cannot be allocated is a MemoryError, where ggml's malloc would abort."""
    mem_size = int(n_tensors) * TENSOR_OVERHEAD + int(extra_bytes) + _SLACK
    try:
        owner, buf = arena(mem_size)
    except MemoryError:
        raise MemoryError(f"could not allocate {mem_size} bytes for a ggml context of {n_tensors} tensors") from None
    params = ffi.new("struct ggml_init_params *", {"mem_size": mem_size, "mem_buffer": buf, "no_alloc": True})
    ctx = lib.ggml_init(params[0])
    _ARENAS[int(ffi.cast("uintptr_t", ctx))] = owner
    return ctx


def header_context(n_tensors: int):
    """A no_alloc ggml context of ggml's own memory for exactly `n_tensors` headers, freed with
    lib.ggml_free: the memory pools make one per chunk, and one per persistent tensor, where
    new_context's arena and slack would cost more than the headers."""
    params = ffi.new("struct ggml_init_params *", {"mem_size": int(n_tensors) * TENSOR_OVERHEAD + 256,
                                                   "mem_buffer": ffi.NULL, "no_alloc": True})
    ctx = lib.ggml_init(params[0])
    if ctx == ffi.NULL:
        raise MemoryError("ggml_init failed for tensor metadata")
    return ctx


@uninterruptible
def free_context(ctx) -> None:
    """Free a context of new_context, then its memory."""
    lib.ggml_free(ctx)
    _ARENAS.pop(int(ffi.cast("uintptr_t", ctx)), None)


class GraphContext:
    """A no_alloc context for `capacity` tensor headers, and (with `n_nodes`) one graph of that many
    node slots in it. A graph node is a tensor of this context or one of the tensors that live
    elsewhere (parameters, weights), so n_nodes = capacity + those can never overflow."""

    def __init__(self, capacity: int, n_nodes: int = 0, grads: bool = False, reserve_bytes: int = 0):
        """`reserve_bytes`: room kept past the headers for graphs others make in this context
        (ggml_opt_init builds its static graphs in the caller's compute context)."""
        self.capacity = int(capacity)
        self.n_nodes = int(n_nodes)
        graph_bytes = int(lib.ggml_graph_overhead_custom(self.n_nodes, grads)) if self.n_nodes else 0
        self._limit = self.capacity * TENSOR_OVERHEAD + graph_bytes
        self.ctx = new_context(self.capacity, graph_bytes + int(reserve_bytes))
        self.graph = lib.ggml_new_graph_custom(self.ctx, self.n_nodes, grads) if self.n_nodes else None

    def headroom(self) -> int:
        """Tensor headers the context still holds."""
        return (self._limit - int(lib.ggml_used_mem(self.ctx))) // TENSOR_OVERHEAD

    def room(self, n_tensors: int) -> None:
        """Raise GraphFull unless `n_tensors` more headers fit."""
        if self.headroom() < n_tensors:
            raise GraphFull(f"the graph needs more than {self.capacity} tensors")

    def new_tensor(self, ggml_type: int, ne) -> object:
        self.room(1)
        return lib.ggml_new_tensor(self.ctx, ggml_type, len(ne), ffi.new("int64_t[]", [int(d) for d in ne]))

    def expand(self, outputs) -> None:
        """Add every output and what it depends on to the graph, in order."""
        for t in outputs:
            lib.ggml_build_forward_expand(self.graph, t)

    def nodes(self) -> list:
        return [lib.ggml_graph_node(self.graph, i) for i in range(lib.ggml_graph_n_nodes(self.graph))]

    @uninterruptible
    def free(self) -> None:
        if getattr(self, "ctx", None) is not None:
            free_context(self.ctx)
            self.ctx = self.graph = None

    __del__ = free

    @staticmethod
    def retrying(build: Callable[[int], T], capacity: int, what: str = "the graph", attempts: int = 6,
                 growth: int = 4) -> T:
        """build(capacity), with a `growth` times bigger capacity while it raises GraphFull."""
        for _ in range(attempts):
            try:
                return build(capacity)
            except GraphFull:
                capacity *= growth
        raise GGMLError(f"{what} needs more than {capacity // growth} tensors")


class Weights:
    """A graph's constants and parameters: tensors of a no_alloc context of their own, given their
    values while the graph is built and written into one buffer of the backend (`upload`) before
    it is placed. The compute context never holds them, so its allocator never reuses them."""

    def __init__(self, capacity: int):
        self.capacity = int(capacity)
        self.ctx = new_context(self.capacity)
        self.values: list = []  # (tensor, contiguous numpy array of the tensor's type), in creation order
        self.buffer = None

    def __len__(self) -> int:
        return len(self.values)

    def headroom(self) -> int:
        return (self.capacity * TENSOR_OVERHEAD - int(lib.ggml_used_mem(self.ctx))) // TENSOR_OVERHEAD

    def new(self, ggml_type: int, ne, values=None):
        """A weight tensor of ggml shape `ne`; `values` (numpy, in the tensor's type and ne reversed)
        are written at upload. Without values it holds what the caller writes after upload."""
        if self.headroom() < 1:
            raise GraphFull(f"the graph has more than {self.capacity} weight and constant tensors")
        t = lib.ggml_new_tensor(self.ctx, ggml_type, len(ne), ffi.new("int64_t[]", [int(d) for d in ne]))
        if values is not None:
            self.values.append((t, values))
        return t

    def upload(self, backend) -> None:
        """Allocate every weight in one buffer of `backend` and write the values given."""
        if lib.ggml_get_first_tensor(self.ctx) == ffi.NULL:
            return  # ggml allocates no buffer for an empty context
        self.buffer = lib.ggml_backend_alloc_ctx_tensors(self.ctx, backend.ptr)
        if self.buffer == ffi.NULL:
            self.buffer = None
            raise MemoryError(f"could not allocate the graph's weights on {backend.device_name}")
        for t, arr in self.values:
            lib.ggml_backend_tensor_set(t, ffi.from_buffer(arr), 0, arr.nbytes)

    @uninterruptible
    def free(self) -> None:
        if getattr(self, "buffer", None) is not None:
            lib.ggml_backend_buffer_free(self.buffer)
            self.buffer = None
        if getattr(self, "ctx", None) is not None:
            free_context(self.ctx)
            self.ctx = None

    __del__ = free
