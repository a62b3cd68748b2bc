"""Eager execution of small ggml graphs, built once per signature and re-run.

An eager op (`ag_add`, a backward rule, an optimizer step) is a tiny ggml
graph. Building it costs many ggml calls; running it costs one. So each graph
is built once per (op, parameters, input shapes and types) and cached. A run
only re-points the graph's leaf tensors at the inputs' memory, points the
outputs at fresh pool memory (or at a given destination, for in-place
updates), and computes. Intermediates live in the graph's own allocator buffer.

Re-pointing a cached graph and computing it must not interleave with another
thread doing the same: an executor is used by one thread (the CPU device gives
each thread its own), or holds `lock` for the whole of a run (other devices).
"""
from __future__ import annotations

import contextlib
import os

from .._sigint import uninterruptible
from ..bindings import ffi, lib
from ..core import threads
from ..errors import GGMLError
from ..graph import ByteCache, GraphContext, PlacedGraph, batched_small, one_thread_is_best
from .pool import Storage, shape_of as _shape

_NULL = ffi.NULL


class _Compiled(PlacedGraph):
    """One cached graph: leaf headers to re-point, output headers, placed by graph/'s allocator."""

    __slots__ = ("leaves", "outs", "out_specs", "backend_ptr", "nbytes", "all_threads_when_quiet")

    def __init__(self, backend, build, in_specs, inputs, outs_into):
        super().__init__(graph_room(len(in_specs)))
        self.leaves = [self.gctx.new_tensor(t, ne) for t, ne in in_specs]
        for leaf, s in zip(self.leaves, inputs):
            _point(leaf, s)
            lib.ggml_set_input(leaf)
        outs = build(self.gctx.ctx, *self.leaves)
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        # An output must own its memory: a view of an input would alias the caller's tensor. A
        # reshape of a node computed here instead has that node write into the output's memory
        # (no copy, no intermediate buffer: a batched product's result is reshaped every time).
        self.out_specs = [(int(o.type), _shape(o)) for o in outs]
        self.outs = [o if _in_place(o, self.leaves, inputs, s) else _writer(self.gctx.ctx, o)
                     for o, s in zip(outs, outs_into)]
        for o in self.outs:
            lib.ggml_set_output(o)
        self.gctx.expand(self.outs)
        for o, s in zip(self.outs, outs_into):
            _point(o, s)
        self.all_threads_when_quiet = False  # a graph on one thread that takes every thread on a quiet machine
        self.place(backend)  # raises when a kernel is missing
        self.nbytes = int(lib.ggml_get_mem_size(self.gctx.ctx)) + self.run.buffer_bytes

    @property
    def nodes(self):
        return self.run.nodes


def machine_quiet() -> bool:
    """Whether no other thread on the machine was runnable a moment ago (threads.others_runnable;
    this process's pool threads sleep between ops). Then products of many small matrices may use
    every thread: their per-matrix barriers only stall when a thread is descheduled. Unknown (no
    /proc): False, which a busy machine survives."""
    return threads.others_runnable() == 0


def graph_room(n_inputs: int) -> int:
    """Tensor (and node) slots for an op graph over n_inputs tensors: ggml aborts the process when a
    context or graph runs out. Builders over many tensors (the fused optimizer steps, the squared
    norms for clipping) make a few nodes per input; the others stay far below 256."""
    return 256 + 8 * n_inputs


def _in_place(o, leaves, inputs, dest) -> bool:
    """Whether output `o` is an in-place op's view of the input whose storage is its destination
    (ggml_acc_inplace into a gradient being accumulated): then it writes there itself."""
    return (o.view_src != _NULL and o.view_offs == 0 and o.op != lib.GGML_OP_RESHAPE
            and lib.ggml_nbytes(o) == lib.ggml_nbytes(o.view_src)
            and any(o.view_src == leaf and s is dest for leaf, s in zip(leaves, inputs)))


def _writer(ctx, o):
    """The node that writes output `o`'s memory: o, the computed source of a whole-tensor
    reshape, or a copy (o a view of an input, or an input itself)."""
    src = o.view_src
    if src == _NULL and o.op != lib.GGML_OP_NONE:
        return o
    if (src != _NULL and o.op == lib.GGML_OP_RESHAPE and src.op != lib.GGML_OP_NONE and o.view_offs == 0
            and src.type == o.type and lib.ggml_nbytes(src) == lib.ggml_nbytes(o) and lib.ggml_is_contiguous(src)):
        return src
    return lib.ggml_cont(ctx, o)


def _point(dst, s) -> None:
    """Make header `dst` describe the memory of storage `s`."""
    dst.data = s.data
    dst.buffer = s.buffer


GRAPH_CACHE_BYTES = int(os.environ.get("GGMLPY_GRAPH_CACHE_BYTES", 32 << 20))


class Executor:
    """A cache of compiled op graphs, bounded by the bytes they hold (GGMLPY_GRAPH_CACHE_BYTES,
    default 32 MiB, or ggmlpy.set_cache_limits): the least recently used are freed first."""

    def __init__(self, backend, small_backend=None, blas=None, asynchronous: bool = False, lock=None):
        self.backend = backend
        self.lock = lock  # None: one thread uses this executor (the CPU device's, per thread)
        self.small_backend = small_backend or backend
        self.blas = blas  # ggml's BLAS backend, which runs graphs of OUT_PROD products
        self.cache = ByteCache(lambda: GRAPH_CACHE_BYTES)  # signature -> _Compiled
        self.runs = 0
        # Asynchronous: an op is queued on the device's stream and the next one follows without
        # waiting; sync() waits, and every host read or write of device memory calls it first.
        # Freeing a buffer needs no sync: cudaFree waits for the device itself.
        self.asynchronous = asynchronous
        self.pending = False

    @property
    def bytes(self) -> int:
        """Held by the cached graphs: metadata and intermediates."""
        return self.cache.bytes

    def sync(self) -> None:
        """Wait for the ops queued so far (asynchronous devices; a no-op elsewhere)."""
        if self.pending:
            with self.lock or contextlib.nullcontext():
                lib.ggml_backend_synchronize(self.backend.ptr)
                self.pending = False
                self.backend.check()

    def run(self, key, build, inputs: list[Storage], alloc, out=None) -> list[Storage]:
        """Run `build(ctx, *leaf_tensors) -> ggml tensor(s)` on `inputs`.

        `alloc(type, ne) -> Storage` provides output memory, unless `out` (a list
        of Storages) says where to write: that is how in-place updates are done.
        """
        for s in inputs:
            if s.gen != s.pool.gen:
                s.check()  # raises StaleTensorError
        self.backend.check()  # a lost RPC device: nothing is sent any more
        try:
            if self.lock is None:
                return self._run(key, build, inputs, alloc, out)
            with self.lock:
                return self._run(key, build, inputs, alloc, out)
        except Exception:
            self.backend.check()  # whatever failed on a device lost meanwhile failed of that loss
            raise

    def _run(self, key, build, inputs, alloc, out):
        sig = (key, *[s.spec for s in inputs])
        if out is not None:  # an in-place destination's type and shape are part of the graph
            sig += tuple(("out",) + s.spec for s in out)
        c = self.cache.get(sig)
        if c is None:
            c, outs = self._compile(sig, build, [s.t for s in inputs], inputs, alloc, out)
        else:
            outs = out if out is not None else [alloc(t, ne) for t, ne in c.out_specs]
            for o, s in zip(c.outs, outs):
                o.data = s.data
                o.buffer = s.buffer
            c.run.bind(c.leaves, inputs)  # the views of leaves follow them
        # backend_ptr None: the executor's own backend, on the threads the load leaves
        c.run.compute(None if c.all_threads_when_quiet and machine_quiet() else c.backend_ptr, self.asynchronous)
        self.pending = self.asynchronous
        self.runs += 1
        return outs

    def _compile(self, sig, build, ts, inputs, alloc, out):
        # Output shapes are only known once the graph is built, so build once to learn them.
        in_specs = [(int(t.type), _shape(t)) for t in ts]
        specs = _output_specs(build, in_specs)
        outs = out if out is not None else [alloc(t, ne) for t, ne in specs]
        if out is not None:
            for s, (t, ne) in zip(out, specs):
                if (int(s.t.type), _shape(s.t)) != (t, ne):
                    raise GGMLError(f"in-place destination {_shape(s.t)} does not match the op's output {ne}")
        c = _Compiled(self.backend, build, in_specs, inputs, outs)
        chosen = self._backend_for(c)
        c.backend_ptr = None if chosen is self.backend else chosen.ptr
        if chosen is self.small_backend and self.small_backend is not self.backend and \
                any(p.op == lib.GGML_OP_MUL_MAT and batched_small(p) for p in c.nodes):
            c.all_threads_when_quiet = True  # every thread while nothing else runs (machine_quiet)
        self.cache.put(sig, c, c.nbytes)
        return c, outs

    def _backend_for(self, c: _Compiled):
        if (self.blas is not None and any(p.op == lib.GGML_OP_OUT_PROD for p in c.nodes)
                and all(lib.ggml_backend_supports_op(self.blas.ptr, p) for p in c.nodes)):
            return self.blas
        return self.small_backend if one_thread_is_best(c.nodes) else self.backend

    @uninterruptible
    def clear(self) -> None:
        self.cache.clear()


def _output_specs(build, in_specs):
    """Build the graph in a scratch context only to read its output types and shapes."""
    scratch = GraphContext(graph_room(len(in_specs)))
    try:
        leaves = [scratch.new_tensor(t, ne) for t, ne in in_specs]
        outs = build(scratch.ctx, *leaves)
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        return [(int(o.type), _shape(o)) for o in outs]
    finally:
        scratch.free()
