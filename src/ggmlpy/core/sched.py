"""ggml's backend scheduler: one graph computed across several devices.

A model too big for one device can keep some of its weights on a GPU and the
rest in host memory; `ggml_backend_sched` runs each node on the device that
holds its inputs (or the first that supports it) and copies tensors between
devices at the splits. ggmlR names: ggml_backend_sched_new / _graph_compute.
"""
from __future__ import annotations

from collections.abc import Iterable

from ..bindings import ffi, lib
from ..errors import DeviceError, GGMLError, check
from .backend import ggml_backend_cpu_init
from .checked import index_arg
from .device import Backend, backend_arg
from .handles import OwnedPointer, Tensor
from .graph import Graph, _check_row_indices
from .openmp import openmp_count_kept

GGML_SCHED_MAX_BACKENDS = 16


class Scheduler(OwnedPointer):
    """Backends in priority order. ggml requires the last one to be a CPU backend: as in ggmlR,
    one is appended (and owned by the scheduler) when the list does not end with one. Freeing it
    frees its buffers."""

    RELEASE = "ggml_backend_sched_free"

    def __init__(self, backends: Iterable[Backend], graph_size: int = 2048, parallel: bool = False):
        backends = list(backends)
        if not 0 < len(backends) <= GGML_SCHED_MAX_BACKENDS:
            raise GGMLError(f"ggml_backend_sched_new: needs 1 to {GGML_SCHED_MAX_BACKENDS} backends")
        if any(b.dev != ffi.NULL and lib.ggml_backend_dev_type(b.dev) == lib.GGML_BACKEND_DEVICE_TYPE_META
               for b in backends):
            raise GGMLError("ggml_backend_sched_new: ggmlpy does not schedule over a meta device's backend "
                            "(its split checks cover ggml_backend_graph_compute only)")
        if len({id(b) for b in backends}) != len(backends):
            raise GGMLError("ggml_backend_sched_new: a backend is listed twice")
        if not backends[-1].is_cpu:
            if len(backends) == GGML_SCHED_MAX_BACKENDS:
                raise DeviceError(f"ggml_backend_sched_new: the last backend must be a CPU backend (got "
                                  f"{backends[-1].device_name}), and there is no room to add one")
            backends.append(ggml_backend_cpu_init())
        self.backends = backends  # kept alive as long as the scheduler
        self._arr = ffi.new("ggml_backend_t[]", [b.ptr for b in backends])
        self.ptr = lib.ggml_backend_sched_new(self._arr, ffi.NULL, len(backends), int(graph_size), bool(parallel), True)
        if self.ptr == ffi.NULL:
            raise MemoryError("ggml_backend_sched_new failed")
        self.graph_size = int(graph_size)

    def allocated(self, graph: Graph) -> bool:
        """Whether `graph`, as it is now, is the one ggml_backend_sched_alloc_graph last placed
        (its leaves then have the scheduler's memory, which the caller may have filled)."""
        return getattr(self, "graph", None) is graph and getattr(self, "alloc_nodes", None) == lib.ggml_graph_n_nodes(graph.ptr)

    def mark_allocated(self, graph: Graph) -> None:
        """Record that the scheduler placed `graph` (ggml_backend_sched_alloc_graph)."""
        self.graph, self.alloc_nodes = graph, lib.ggml_graph_n_nodes(graph.ptr)

    def fit_threads_to_load(self, planned: bool = False) -> None:
        """Before a compute: each backend's CPU (or BLAS) threads as the machine's load leaves
        cores for (Backend.fit_threads_to_load; `planned`: all of them, for a graph whose results
        its thread count decides, threads.count_decides_results)."""
        for b in self.backends:
            b.fit_threads_to_load(planned)

    def compute(self, graph: Graph) -> None:
        """Split `graph` across the backends, allocate what is unallocated, and compute it; a graph
        ggml_backend_sched_alloc_graph placed (leaves filled since, ggmlR's pattern) is computed
        where it is."""
        if self.allocated(graph):
            self.check(graph, leaves_placed=True)
        else:
            self.check(graph)
            lib.ggml_backend_sched_reset(self.ptr)
            if not lib.ggml_backend_sched_alloc_graph(self.ptr, graph.ptr):
                raise MemoryError("the scheduler could not allocate the graph")
        self.fit_threads_to_load(graph.count_decides_results())
        with openmp_count_kept():
            status = lib.ggml_backend_sched_graph_compute(self.ptr, graph.ptr)
        if status != lib.GGML_STATUS_SUCCESS:
            raise GGMLError(f"ggml_backend_sched_graph_compute failed (status {status})")
        lib.ggml_backend_sched_synchronize(self.ptr)
        for b in self.backends:  # a lost RPC server among them: DeviceLostError
            b.check()
        self.mark_allocated(graph)  # its intermediates live in the scheduler's buffers until the next compute

    def check(self, graph: Graph, leaves_placed: bool = False) -> None:
        """Raise for anything in `graph` that would make ggml's scheduler assert, or compute on
        leaves nobody filled (unless the scheduler places them: leaves_placed)."""
        if self.ptr is None:
            raise GGMLError("scheduler already freed")
        graph.ctx.ensure_alive()
        for t in graph._keep:
            t.ctx.check_deps()
        if len(graph.nodes) > self.graph_size or len(graph.leafs) > self.graph_size:
            raise GGMLError(f"graph has {len(graph.nodes)} nodes; the scheduler was made for {self.graph_size}")
        for p in graph.leafs if not leaves_placed else ():  # inputs and weights live somewhere already
            if p.buffer == ffi.NULL and p.view_src == ffi.NULL:
                raise GGMLError("a leaf of this graph is not in a backend buffer: allocate it on one of "
                                "the scheduler's devices (ggml_backend_alloc_ctx_tensors) first")
        for p in graph.nodes:
            if not any(lib.ggml_backend_supports_op(b.ptr, p) for b in self.backends):
                raise GGMLError(f"no backend of this scheduler has a kernel for {ffi.string(lib.ggml_op_desc(p)).decode()}")
            if p.op == lib.GGML_OP_GET_ROWS:
                _check_row_indices(graph, p.src[1], int(p.src[0].ne[1]), "ggml_get_rows", None)
            elif p.op == lib.GGML_OP_MUL_MAT_ID:
                _check_row_indices(graph, p.src[2], int(p.src[0].ne[2]), "ggml_mul_mat_id", None)

    def n_splits(self) -> int:
        """How many pieces the last computed graph was split into across the backends."""
        return int(lib.ggml_backend_sched_get_n_splits(self.ptr))

    def tensor_backend(self, t) -> str:
        """The name of the backend the scheduler placed tensor `t` on ("" if none)."""
        b = lib.ggml_backend_sched_get_tensor_backend(self.ptr, t.ptr)
        return ffi.string(lib.ggml_backend_name(b)).decode() if b != ffi.NULL else ""


def ggml_backend_sched_new(backends: Iterable[Backend], graph_size: int = 2048, parallel: bool = False) -> Scheduler:
    """A scheduler over `backends` for graphs of up to graph_size nodes; a CPU backend is
    appended when the list does not end with one (ggml needs it last; ggmlR adds it too)."""
    return Scheduler(backends, graph_size, parallel)


def ggml_backend_sched_graph_compute(sched: Scheduler, graph: Graph) -> None:
    """Compute the graph with the scheduler, each op on a backend that has its kernel."""
    sched.compute(graph)


# -- the scheduler (ggmlpy.core.sched.Scheduler) ----------------------------------------------------------------
def _sched(s, what):
    if not isinstance(s, Scheduler) or s.ptr is None:
        raise GGMLError(f"{what}: expected a live Scheduler (ggml_backend_sched_new)")
    return s


def _sched_graph(s, graph, what, leaves_placed=False):
    s = _sched(s, what)
    if not isinstance(graph, Graph):
        raise GGMLError(f"{what}: expected a Graph")
    s.check(graph, leaves_placed=leaves_placed)
    return s


def ggml_backend_sched_free(sched: Scheduler) -> None:
    """Free the scheduler (and the buffers it allocated graphs in)."""
    if isinstance(sched, Scheduler):
        sched.free()


def ggml_backend_sched_get_n_backends(sched: Scheduler) -> int:
    """How many backends the scheduler distributes over."""
    return int(lib.ggml_backend_sched_get_n_backends(_sched(sched, "ggml_backend_sched_get_n_backends").ptr))


def ggml_backend_sched_get_backend(sched: Scheduler, i: int) -> Backend:
    """Backend i (0-based, priority order) of the scheduler."""
    s = _sched(sched, "ggml_backend_sched_get_backend")
    return s.backends[index_arg(i, len(s.backends), "ggml_backend_sched_get_backend")]


def ggml_backend_sched_get_n_splits(sched: Scheduler) -> int:
    """Into how many per-backend pieces the last graph was split."""
    return int(lib.ggml_backend_sched_get_n_splits(_sched(sched, "ggml_backend_sched_get_n_splits").ptr))


def ggml_backend_sched_get_n_copies(sched: Scheduler) -> int:
    """How many copies of the inputs the scheduler keeps (more than 1 with parallel=True)."""
    return int(lib.ggml_backend_sched_get_n_copies(_sched(sched, "ggml_backend_sched_get_n_copies").ptr))


def ggml_backend_sched_get_tensor_backend(sched: Scheduler, t: Tensor) -> Backend | None:
    """The backend the scheduler assigned `t` to, or None."""
    s = _sched(sched, "ggml_backend_sched_get_tensor_backend")
    if not isinstance(t, Tensor):
        raise GGMLError("ggml_backend_sched_get_tensor_backend: expected a Tensor")
    p = lib.ggml_backend_sched_get_tensor_backend(s.ptr, t.ptr)
    return next((b for b in s.backends if b.ptr == p), None)


def ggml_backend_sched_set_tensor_backend(sched: Scheduler, t: Tensor, backend: Backend) -> None:
    """Pin `t` (a node of the next graph) to one of the scheduler's backends."""
    s = _sched(sched, "ggml_backend_sched_set_tensor_backend")
    if not isinstance(t, Tensor):
        raise GGMLError("ggml_backend_sched_set_tensor_backend: expected a Tensor")
    b = backend_arg(backend, "ggml_backend_sched_set_tensor_backend")
    check(any(x is b for x in s.backends), "ggml_backend_sched_set_tensor_backend: the backend is not one of the "
          "scheduler's")  # ggml asserts it
    check(b.supports_op(t.ptr) or t.ptr.op == lib.GGML_OP_NONE,
          f"ggml_backend_sched_set_tensor_backend: {b.name} has no kernel for this op")
    lib.ggml_backend_sched_set_tensor_backend(s.ptr, t.ptr, b.ptr)


def ggml_backend_sched_reserve(sched: Scheduler, graph: Graph) -> bool:
    """Size the scheduler's buffers for graphs like `graph` (nothing is computed)."""
    s = _sched_graph(sched, graph, "ggml_backend_sched_reserve", leaves_placed=True)
    return bool(lib.ggml_backend_sched_reserve(s.ptr, graph.ptr))


def ggml_backend_sched_alloc_graph(sched: Scheduler, graph: Graph) -> bool:
    """Split the graph across the backends and give its unallocated tensors (leaves included: fill
    the inputs afterwards, as ggmlR does) memory."""
    s = _sched_graph(sched, graph, "ggml_backend_sched_alloc_graph", leaves_placed=True)
    lib.ggml_backend_sched_reset(s.ptr)
    ok = bool(lib.ggml_backend_sched_alloc_graph(s.ptr, graph.ptr))
    if ok:
        s.mark_allocated(graph)
    return ok


def ggml_backend_sched_reset(sched: Scheduler) -> None:
    """Forget the last graph's placement (its intermediates' memory is reused by the next one)."""
    s = _sched(sched, "ggml_backend_sched_reset")
    lib.ggml_backend_sched_reset(s.ptr)
    s.graph = None


def ggml_backend_sched_graph_compute_async(sched: Scheduler, graph: Graph) -> int:
    """Start computing a graph (allocated first if needed); ggml_backend_sched_synchronize waits."""
    s = _sched(sched, "ggml_backend_sched_graph_compute_async")
    placed = isinstance(graph, Graph) and s.allocated(graph)
    s = _sched_graph(sched, graph, "ggml_backend_sched_graph_compute_async", leaves_placed=placed)
    if not placed:
        lib.ggml_backend_sched_reset(s.ptr)
        if not lib.ggml_backend_sched_alloc_graph(s.ptr, graph.ptr):
            raise MemoryError("the scheduler could not allocate the graph")
        s.mark_allocated(graph)
    status = lib.ggml_backend_sched_graph_compute_async(s.ptr, graph.ptr)
    if status != lib.GGML_STATUS_SUCCESS:
        raise GGMLError(f"ggml_backend_sched_graph_compute_async failed (status {status})")
    return int(status)


def ggml_backend_sched_synchronize(sched: Scheduler) -> None:
    """Wait for the scheduler's backends to finish."""
    lib.ggml_backend_sched_synchronize(_sched(sched, "ggml_backend_sched_synchronize").ptr)
