"""A built graph, placed in memory and ready to compute again and again.

Placement, decided once per graph:
- one backend runs every node: ggml's graph allocator places the intermediates in one buffer
  of that backend's type;
- otherwise ggml's scheduler splits the graph: the products a BLAS backend takes (`blas_ops`),
  the products of many small matrices on a one-thread CPU backend (batched_small), the ops the
  device has no kernel for on the CPU (`fallback`), everything else on the backend.

Inputs are bound by re-pointing leaf headers at memory that already holds them (no copy; views
of them then follow) or written with `write`; outputs are read with `read`, or were pointed at
their destination before placement. Invariant: from binding to the end of `compute`, no other
thread binds or computes the same graph (the front ends hold their device's or model's lock).
"""
from __future__ import annotations

import numpy as np

from .._sigint import uninterruptible
from .. import kernels
from ..bindings import ffi, lib
from ..core.openmp import openmp_count_kept
from ..core import threads
from ..core.sched import Scheduler
from ..errors import GGMLError

_NULL = ffi.NULL
# Resolve now what the finalizers call: cffi resolves a symbol under a lock of its own, and a
# finalizer run by the garbage collector during another resolution would wait on it forever.
for _sym in ("ggml_gallocr_free", "ggml_backend_sched_free"):
    getattr(lib, _sym)


def batched_small(p) -> bool:
    """A product of many small matrices (attention's, per head and sequence). ggml's CPU kernel
    runs one tiled product per matrix with two thread barriers each; on a busy machine a barrier
    waits for a descheduled thread's whole time slice, so two threads can take twenty times as
    long as one (docs/benchmarks.md, "Threads")."""
    batches = int(p.ne[2] * p.ne[3])
    return batches >= 16 and int(p.ne[0] * p.ne[1] * p.src[0].ne[0]) < (1 << 19)


# A graph this small runs on one thread: waking a second costs more than it saves, and on a
# busy machine two threads that wait on each other stall for a whole scheduling slice (the
# figures behind both bounds: docs/benchmarks.md).
SMALL = 32768            # output elements of an element-wise node
SMALL_MATMUL = 1 << 21   # multiply-adds of a matrix product


def node_work(p) -> int:
    """A node's work in multiply-adds (an element-wise node's outputs weighted so that SMALL of
    them count as SMALL_MATMUL)."""
    if p.op == lib.GGML_OP_MUL_MAT:
        return lib.ggml_nelements(p) * p.src[0].ne[0]
    if p.op == lib.GGML_OP_OUT_PROD:
        return lib.ggml_nelements(p) * p.src[0].ne[1]
    if p.op == lib.GGML_OP_CUSTOM and p.src[1] != _NULL:  # ggmlpy.kernels' gemm: m x k by k x n
        return lib.ggml_nelements(p) * (p.src[0].ne[0] * p.src[0].ne[1] // p.ne[0])
    return lib.ggml_nelements(p) * (SMALL_MATMUL // SMALL)


def one_thread_is_best(nodes) -> bool:
    """Whether a graph of these nodes computes fastest on one CPU thread: ggml synchronises its
    threads after every node, so nodes this small pay more in barriers than they save."""
    if any(p.op == lib.GGML_OP_MUL_MAT and batched_small(p) for p in nodes):
        return True  # many small products: one thread (see batched_small)
    return all(node_work(p) < SMALL_MATMUL for p in nodes)


def unsupported_ops(nodes, backend) -> list:
    """The nodes (ops, not leaves) `backend` has no kernel for."""
    return [p for p in nodes if p.op != lib.GGML_OP_NONE and not lib.ggml_backend_supports_op(backend.ptr, p)]


def op_desc(p) -> str:
    return ffi.string(lib.ggml_op_desc(p)).decode()


def no_kernel_error(backend, p) -> GGMLError:
    return GGMLError(f"{backend.device_name} has no kernel for {op_desc(p)} "
                     f"on {ffi.string(lib.ggml_type_name(p.type)).decode()}")


_NOT_INTERMEDIATE = lib.GGML_TENSOR_FLAG_INPUT | lib.GGML_TENSOR_FLAG_OUTPUT | lib.GGML_TENSOR_FLAG_PARAM


def _addr(p) -> int:
    return int(ffi.cast("uintptr_t", p))


def compute_in_place(graph, elsewhere=frozenset()) -> int:
    """Turn each kernel node that may overwrite its input (kernels.overwrites_input) into a view of
    that input where ggml's allocator would compute one of its own in-place ops over it: the input
    is an intermediate of this graph (an op's result, not a view, not flagged input, output or
    parameter, not given memory by the caller), read by that node alone, of the same layout, and
    both run on the same backend (`elsewhere`: addresses of nodes placed on another one). The view
    keeps the input's memory alive exactly as long as the node's own would have lived: ggml's
    allocator frees a tensor after its last reader and last view. Returns how many were turned."""
    nodes = [lib.ggml_graph_node(graph, i) for i in range(lib.ggml_graph_n_nodes(graph))]
    candidates = [p for p in nodes if p.view_src == _NULL and p.data == _NULL and kernels.overwrites_input(p)]
    if not candidates:
        return 0
    readers: dict = {}
    for p in nodes:
        for s in p.src:
            if s != _NULL:
                readers[_addr(s)] = readers.get(_addr(s), 0) + 1
        if p.view_src != _NULL:
            readers[_addr(p.view_src)] = readers.get(_addr(p.view_src), 0) + 1
    ops = {_addr(p) for p in nodes if p.op != lib.GGML_OP_NONE}
    turned = 0
    for p in candidates:
        x = p.src[0]
        if (_addr(x) not in ops or readers.get(_addr(x)) != 1 or x.view_src != _NULL or x.data != _NULL
                or x.flags & _NOT_INTERMEDIATE or x.type != p.type or _addr(x) in elsewhere or _addr(p) in elsewhere
                or any(x.ne[i] != p.ne[i] or x.nb[i] != p.nb[i] for i in range(4))):
            continue
        p.view_src, p.view_offs = x, 0
        readers[_addr(x)] += 1  # now also its view's
        turned += 1
    return turned


class CompiledGraph:
    """`graph` (a ggml_cgraph whose nodes are `nodes`) placed for `backend`; see the module's
    docstring for the placement. `one_thread`: a function giving the one-thread CPU backend, called
    only when the graph has products for it. `sched`: a scheduler the caller owns, to place it
    with instead."""

    __slots__ = ("graph", "backend", "nodes", "views", "galloc", "sched", "_own_sched", "fallback_ops",
                 "buffer_bytes", "planned_count", "__weakref__")

    def __init__(self, graph, backend, nodes=None, *, blas=None, blas_ops=(), fallback=None, one_thread=None,
                 sched: Scheduler | None = None):
        self.graph, self.backend = graph, backend
        self.galloc = self.sched = None
        self._own_sched = False
        self.nodes = nodes if nodes is not None else [lib.ggml_graph_node(graph, i)
                                                      for i in range(lib.ggml_graph_n_nodes(graph))]
        missing = unsupported_ops(self.nodes, backend)
        self.fallback_ops = sorted({op_desc(p) for p in missing})
        if missing and (fallback is None or fallback is backend):
            raise no_kernel_error(backend, missing[0])
        to_blas = [p for p in self.nodes if p.op in blas_ops and lib.ggml_backend_supports_op(blas.ptr, p)] \
            if blas is not None and not missing else []
        single = [p for p in self.nodes if p.op == lib.GGML_OP_MUL_MAT and batched_small(p)] \
            if one_thread is not None and not missing else []
        if not missing:
            compute_in_place(graph, frozenset(map(_addr, to_blas + single)))
        self.views = [p for p in self.nodes if p.view_src != _NULL]
        self.planned_count = threads.count_decides_results(self.nodes)  # then never fewer threads under load
        if sched is not None:
            self.sched = sched
            self._allocate_scheduled()
            self.buffer_bytes = sum(int(lib.ggml_backend_sched_get_buffer_size(sched.ptr, b.ptr))
                                    for b in sched.backends)
        elif missing or to_blas or single:
            self._schedule(backend, blas if to_blas else None, fallback if missing else None,
                           one_thread() if single else None, to_blas, single)
        else:
            self.galloc = lib.ggml_gallocr_new(backend.buft)
            if not lib.ggml_gallocr_alloc_graph(self.galloc, graph):
                lib.ggml_gallocr_free(self.galloc)
                self.galloc = None
                raise MemoryError(f"could not allocate a graph's intermediates on {backend.device_name}")
            self.buffer_bytes = int(lib.ggml_gallocr_get_buffer_size(self.galloc, 0))

    def _schedule(self, backend, blas, fallback, one_thread, to_blas, single) -> None:
        backends = [b for b in (blas, backend, fallback, one_thread) if b is not None]
        self.sched, self._own_sched = Scheduler(backends, graph_size=max(2048, 2 * len(self.nodes))), True
        if blas is not None or one_thread is not None:
            # BLAS comes first in the scheduler's priority order: only the chosen products go to it
            chosen = {int(ffi.cast("uintptr_t", p)): blas.ptr for p in to_blas}
            chosen.update((int(ffi.cast("uintptr_t", p)), one_thread.ptr) for p in single)
            for p in self.nodes:
                if p.op != lib.GGML_OP_NONE:
                    lib.ggml_backend_sched_set_tensor_backend(
                        self.sched.ptr, p, chosen.get(int(ffi.cast("uintptr_t", p)), backend.ptr))
        self._allocate_scheduled()
        self.buffer_bytes = sum(int(lib.ggml_backend_sched_get_buffer_size(self.sched.ptr, b.ptr))
                                for b in self.sched.backends)

    def _allocate_scheduled(self) -> None:
        if not lib.ggml_backend_sched_alloc_graph(self.sched.ptr, self.graph):
            raise MemoryError(f"the scheduler could not allocate a graph on {self.backend.device_name}")

    # -- running ------------------------------------------------------------------------------------
    def bind(self, leaves, storages) -> None:
        """Point each leaf header at its storage's memory (anything with .data and .buffer); the
        views in the graph then follow their sources."""
        for leaf, s in zip(leaves, storages):
            leaf.data = s.data
            leaf.buffer = s.buffer
        for v in self.views:
            src = v.view_src
            v.data = ffi.cast("char *", src.data) + v.view_offs
            v.buffer = src.buffer

    @staticmethod
    def write(t, array: np.ndarray) -> None:
        """Copy a contiguous array of t's type into tensor t (which has memory)."""
        lib.ggml_backend_tensor_set(t, ffi.from_buffer(array), 0, array.nbytes)

    @staticmethod
    def read(t, shape, dtype=np.float32) -> np.ndarray:
        out = np.empty(shape, dtype=dtype)
        lib.ggml_backend_tensor_get(t, ffi.from_buffer(out), 0, out.nbytes)
        return out

    def compute(self, backend_ptr=None, asynchronous: bool = False) -> None:
        """Compute the graph (on `backend_ptr` instead of its backend: another backend of the same
        memory, such as a one-thread CPU backend for a small graph). On its own backends, the
        graph computes on as many CPU (and BLAS) threads as the machine's load leaves cores for
        (Backend.fit_threads_to_load), or on all of them where the count decides a result
        (planned_count)."""
        with openmp_count_kept():
            if self.sched is not None:
                self.sched.fit_threads_to_load(self.planned_count)
                status = lib.ggml_backend_sched_graph_compute(self.sched.ptr, self.graph)
            else:
                if backend_ptr is None:
                    self.backend.fit_threads_to_load(self.planned_count)
                compute = lib.ggml_backend_graph_compute_async if asynchronous else lib.ggml_backend_graph_compute
                status = compute(backend_ptr or self.backend.ptr, self.graph)
        self.backend.check()  # a lost RPC server: nothing was computed
        if status != lib.GGML_STATUS_SUCCESS:
            raise GGMLError(f"graph compute failed on {self.backend.device_name} (status {status})")

    @uninterruptible
    def free(self) -> None:
        if getattr(self, "galloc", None) is not None:
            lib.ggml_gallocr_free(self.galloc)
            self.galloc = None
        if getattr(self, "sched", None) is not None:
            if self._own_sched:
                self.sched.free()
            self.sched = None

    __del__ = free
