"""Compute graphs: build them, check them, run them.

ggml aborts on a graph that is too small, on tensors that were never
allocated, on ops the backend has no kernel for, and on out-of-range row
indices. `check_graph` looks for all of these before any compute call.
"""
from __future__ import annotations

import numpy as np

from ..bindings import ffi, lib
from ..errors import GGMLError, check
from .handles import Context, Tensor, meta_check, on_meta
from .device import Backend
from .rpc import check_tensor_device
from .openmp import openmp_count_kept
from . import threads
from .threads import get_num_threads

GGML_DEFAULT_GRAPH_SIZE = 2048
_NULL = ffi.NULL


class Graph:
    """A ggml_cgraph plus the Python-side record of what it holds (ggml's leaf list is private)."""

    def __init__(self, ctx: Context, size: int = GGML_DEFAULT_GRAPH_SIZE, grads: bool = False):
        ctx.ensure_alive()
        size = int(size)
        check(size > 0, f"ggml_new_graph: size must be positive, got {size}")
        ctx.reserve(int(lib.ggml_graph_overhead_custom(size, bool(grads))) + 16, "ggml_new_graph")
        self.ptr = lib.ggml_new_graph_custom(ctx.ptr, size, bool(grads))
        self.ctx = ctx
        self.grads = bool(grads)
        self.gen = ctx.gen  # a ggml_reset() of ctx reuses the graph's memory
        self.size = size
        self.nodes: list = []   # cdata pointers, in ggml's order
        self.leafs: list = []
        self._seen: set = set()
        self._keep: list = []   # Tensor handles, so their contexts outlive the graph's use
        self._decides = (0, False)  # (node count, count_decides_results) when last asked

    def count_decides_results(self) -> bool:
        """Whether the thread count decides a node's result here (threads.count_decides_results):
        the graph then computes on its planned count, whatever the load."""
        if self._decides[0] != len(self.nodes):
            self._decides = (len(self.nodes), threads.count_decides_results(self.nodes))
        return self._decides[1]

    def n_nodes(self) -> int:
        """The number of nodes (computed tensors) in the graph."""
        return int(lib.ggml_graph_n_nodes(self.ptr))

    def expand(self, t: Tensor) -> None:
        """ggml_build_forward_expand, after checking the graph has room for what it adds."""
        self.check_alive()
        t.ptr  # raises for a tensor of a freed or reset context
        t.ctx.check_deps()  # walking t's sources reads every context they live in
        new_nodes, new_leafs = _collect(t._ptr, self._seen)
        if any(lib.ggml_nelements(p) == 0 for p in new_nodes + new_leafs):
            # ggml gives empty tensors no memory: computing or graph-allocating them fails or aborts
            raise GGMLError("the graph would hold an empty tensor (a dim of 0); ggml cannot compute those")
        if len(self.nodes) + len(new_nodes) > self.size or len(self.leafs) + len(new_leafs) > self.size:
            raise GGMLError(f"graph too small: it holds {self.size} nodes, and this tensor needs "
                            f"{len(self.nodes) + len(new_nodes)} nodes and {len(self.leafs) + len(new_leafs)} "
                            "leafs; create it with a larger size (ggml_new_graph(ctx, size))")
        lib.ggml_build_forward_expand(self.ptr, t._ptr)
        for p in new_nodes + new_leafs:
            self._seen.add(_addr(p))
        self.nodes += new_nodes
        self.leafs += new_leafs
        self._keep.append(t)

    def check_alive(self) -> None:
        """Raise GGMLError if the graph's context was freed or reset since the graph was built."""
        self.ctx.ensure_alive()
        if self.gen != self.ctx.gen:
            raise GGMLError("this graph was built before ggml_reset() of its context; build it again")

    def __repr__(self):
        return f"<ggml Graph {len(self.nodes)} nodes, {len(self.leafs)} leafs, size {self.size}>"


def _addr(p) -> int:
    return int(ffi.cast("uintptr_t", p))


def _collect(root, seen: set):
    """Nodes and leafs that ggml_visit_parents would add, in its post-order."""
    nodes, leafs, visiting = [], [], set()
    stack = [(root, False)]
    while stack:
        p, done = stack.pop()
        a = _addr(p)
        if done:
            if p.op == lib.GGML_OP_NONE and not (p.flags & lib.GGML_TENSOR_FLAG_PARAM):
                leafs.append(p)
            else:
                nodes.append(p)
            continue
        if a in seen or a in visiting:
            continue
        visiting.add(a)
        stack.append((p, True))
        for i in reversed(range(10)):
            s = p.src[i]
            if s != _NULL and _addr(s) not in seen and _addr(s) not in visiting:
                stack.append((s, False))
    return nodes, leafs


def ggml_new_graph(ctx: Context, size: int = GGML_DEFAULT_GRAPH_SIZE, grads: bool = False) -> Graph:
    """A new graph in ctx with room for `size` nodes (`grads`: room for a backward pass)."""
    return Graph(ctx, size, grads)


def ggml_build_forward_expand(ctx_or_graph: Context | Graph, tensor: Tensor) -> Graph:
    """ggmlR style `ggml_build_forward_expand(ctx, t)` returns a new graph sized to fit;
    C style `ggml_build_forward_expand(graph, t)` expands an existing one."""
    if not isinstance(tensor, Tensor):
        raise GGMLError(f"ggml_build_forward_expand: expected a Tensor, got {type(tensor).__name__}")
    if isinstance(ctx_or_graph, Graph):
        ctx_or_graph.expand(tensor)
        return ctx_or_graph
    if not isinstance(ctx_or_graph, Context):
        raise GGMLError("ggml_build_forward_expand: first argument must be a Context or a Graph")
    tensor.ctx.check_deps()
    nodes, leafs = _collect(tensor.ptr, set())
    g = Graph(ctx_or_graph, max(GGML_DEFAULT_GRAPH_SIZE, len(nodes), len(leafs)))
    g.expand(tensor)
    return g


# -- pre-compute checks ---------------------------------------------------------------------------
def _cpu_device():
    global _CPU_DEV
    if _CPU_DEV is None:
        _CPU_DEV = lib.ggml_backend_dev_by_type(lib.GGML_BACKEND_DEVICE_TYPE_CPU)
    return _CPU_DEV


_CPU_DEV = None


def check_graph(graph: Graph, device=None, need_buffers: bool = False, run=None) -> None:
    """Raise GGMLError for anything in `graph` that would make ggml abort or read garbage.

    `run(subgraph)` computes a part of the graph: row indices computed by the graph itself can
    only be range-checked after the nodes that compute them have run."""
    graph.check_alive()
    for t in graph._keep:
        t.ptr
        t.ctx.check_deps()  # every context the graph reaches into is still alive
    dev = device if device is not None else _cpu_device()
    for p in graph.leafs + graph.nodes:
        if p.data == _NULL and p.view_src == _NULL:
            raise GGMLError(f"tensor '{ffi.string(p.name).decode()}' ({_op_name(p)}) has no memory: "
                            "allocate the context's tensors (no_alloc=False, or ggml_backend_alloc_ctx_tensors)")
        if p.data == _NULL and p.view_src.data != _NULL:  # ggml would write through a NULL pointer
            raise GGMLError(f"tensor '{ffi.string(p.name).decode()}' ({_op_name(p)}) is a view made before its "
                            "source had memory; create the view after allocating the source")
        if need_buffers and p.buffer == _NULL and p.view_src == _NULL:
            raise GGMLError("a tensor of this graph is not in a backend buffer: "
                            "call ggml_backend_alloc_ctx_tensors(ctx, backend) first")
    for p in graph.nodes:
        if not lib.ggml_backend_dev_supports_op(dev, p):
            name = ffi.string(lib.ggml_backend_dev_name(dev)).decode()
            raise GGMLError(f"device {name} has no kernel for {_op_name(p)} with these types")
        if p.op == lib.GGML_OP_GET_ROWS:
            _check_row_indices(graph, p.src[1], int(p.src[0].ne[1]), "ggml_get_rows", run)
        elif p.op == lib.GGML_OP_GET_ROWS_BACK:  # its kernel asserts the same
            _check_row_indices(graph, p.src[1], int(p.ne[1]), "ggml_get_rows_back", run)
        elif p.op == lib.GGML_OP_MUL_MAT_ID:  # expert ids must name one of src0's ne2 matrices
            _check_row_indices(graph, p.src[2], int(p.src[0].ne[2]), "ggml_mul_mat_id", run)


def _op_name(p) -> str:
    return ffi.string(lib.ggml_op_desc(p)).decode()


# ops whose i32 results index their source's ne0: in range without looking at them
_BOUNDED = (lib.GGML_OP_ARGSORT, lib.GGML_OP_TOP_K, lib.GGML_OP_ARGMAX)


def _check_row_indices(graph: Graph, idx, n_rows: int, what: str, run) -> None:
    """get_rows(_back) kernels assert every index is in range (an abort): check the values first."""
    if idx.type != lib.GGML_TYPE_I32:
        return
    root = idx.view_src if idx.view_src != _NULL else idx
    if root.op in _BOUNDED:
        if int(root.src[0].ne[0]) > n_rows:
            raise GGMLError(f"{what}: indices from {_op_name(root)} reach {int(root.src[0].ne[0]) - 1}, "
                            f"past the {n_rows} rows")
        return
    if root.op != lib.GGML_OP_NONE:  # computed by this graph: run the nodes that compute them first
        if run is None:
            raise GGMLError(f"{what}: the row indices are computed in this graph and cannot be range-checked")
        sub = Graph(Context(int(lib.ggml_graph_overhead_custom(graph.size, False)) + 4096), graph.size)
        sub.expand(Tensor(idx, graph.ctx))
        run(sub)
    vals = _read_i32(idx)
    if vals.size and (vals.min() < 0 or vals.max() >= n_rows):
        raise GGMLError(f"{what}: index out of range 0..{n_rows - 1} (got {vals.min()}..{vals.max()})")


def _read_i32(t) -> np.ndarray:
    """The values of an i32 tensor, following its strides (a view need not be contiguous)."""
    if t.data == _NULL or lib.ggml_nelements(t) == 0:
        return np.empty(0, np.int32)
    nbytes = int(lib.ggml_nbytes(t))
    raw = np.empty(nbytes, np.uint8)
    if t.buffer == _NULL or (lib.ggml_backend_buffer_is_host(t.buffer) and not on_meta(t)):
        ffi.memmove(ffi.from_buffer(raw), t.data, nbytes)
    else:
        meta_check(t, "reading row indices", 0, nbytes)
        lib.ggml_backend_tensor_get(t, ffi.from_buffer(raw), 0, nbytes)
        check_tensor_device(t)
    return np.ndarray([int(t.ne[i]) for i in range(3, -1, -1)], np.int32, buffer=raw,
                      strides=[int(t.nb[i]) for i in range(3, -1, -1)])


# -- compute ------------------------------------------------------------------------------------------
def ggml_graph_compute(ctx_or_graph: Context | Graph, graph: Graph | None = None, n_threads: int | None = None) -> None:
    """Compute a graph of host tensors on the CPU. ggmlR: ggml_graph_compute(ctx, graph)."""
    if graph is None:
        graph = ctx_or_graph
    if not isinstance(graph, Graph):
        raise GGMLError(f"ggml_graph_compute: expected a Graph, got {type(graph).__name__}")
    n_threads = get_num_threads() if n_threads is None else int(n_threads)
    check(n_threads > 0, "ggml_graph_compute: n_threads must be positive")
    check_graph(graph, run=lambda sub: ggml_graph_compute(sub, n_threads=n_threads))
    for p in graph.leafs + graph.nodes:
        if p.buffer != _NULL and not lib.ggml_backend_buffer_is_host(p.buffer):
            raise GGMLError("ggml_graph_compute: the graph holds device tensors; "
                            "use ggml_backend_graph_compute(backend, graph)")
    # Through a CPU backend rather than ggml_graph_compute(): in GGML_BACKEND_DL builds the
    # CPU entry points live in a variant module that only the backend registry knows.
    backend = _cpu_backend(n_threads)
    with openmp_count_kept():
        status = lib.ggml_backend_graph_compute(backend.ptr, graph.ptr)
    if status != lib.GGML_STATUS_SUCCESS:
        raise GGMLError(f"ggml_graph_compute failed with status {status}")


_CPU_BACKEND = None


def _cpu_backend(n_threads: int):
    global _CPU_BACKEND
    if _CPU_BACKEND is None:
        _CPU_BACKEND = Backend(lib.ggml_backend_init_by_type(lib.GGML_BACKEND_DEVICE_TYPE_CPU, _NULL), "CPU")
    if _CPU_BACKEND.n_threads != n_threads:
        _CPU_BACKEND.set_n_threads(n_threads)
    return _CPU_BACKEND


def ggml_graph_n_nodes(graph: Graph) -> int:
    """The number of nodes (computed tensors) in the graph."""
    if not isinstance(graph, Graph):
        raise GGMLError(f"ggml_graph_n_nodes: expected a Graph, got {type(graph).__name__}")
    return graph.n_nodes()


def _graph_arg(g, what) -> Graph:
    if not isinstance(g, Graph):
        raise GGMLError(f"{what}: expected a Graph, got {type(g).__name__}")
    g.check_alive()
    return g


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
    ggml_graph_compute(ctx, graph, n_threads=n or None)


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


__all__ = sorted(n for n in globals() if n.startswith("ggml_"))
