"""Backends themselves: making one (ggml_backend_cpu_init, _init_by_name, _init_best), its name,
threads and freeing, computing a graph on it (sync, async, or through a graph plan prepared once),
and waiting for its queue (ggml_backend_synchronize). Buffers and tensor data: buffers.py."""
from __future__ import annotations


from .._sigint import uninterruptible
from ..bindings import ffi, lib
from ..errors import GGMLError, check
from .device import Backend, backend_arg
from .registry import devices
from .graph import Graph, check_graph
from .meta_split import check_graph as check_meta_graph
from .openmp import openmp_count_kept

_NULL = ffi.NULL


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


def is_meta(backend: Backend) -> bool:
    """Whether `backend` runs on a meta device (ggml_backend_meta_device)."""
    return backend.dev != ffi.NULL and lib.ggml_backend_dev_type(backend.dev) == lib.GGML_BACKEND_DEVICE_TYPE_META


def ggml_backend_synchronize(backend: Backend) -> None:
    """Wait until the backend has finished its queued work."""
    lib.ggml_backend_synchronize(backend_arg(backend, "ggml_backend_synchronize").ptr)


def ggml_backend_graph_compute(backend: Backend, graph: Graph) -> None:
    """Compute the graph on the backend (its tensors must be in buffers the backend can use)."""
    if not isinstance(backend, Backend) or not isinstance(graph, Graph):
        raise GGMLError("ggml_backend_graph_compute(backend, graph) expects a Backend and a Graph")
    if is_meta(backend):  # first: ggml's meta backend aborts on splits it has no rule for
        check_meta_graph(graph, backend.dev)
    check_graph(graph, device=backend.dev, need_buffers=not backend.is_host,
                run=lambda sub: ggml_backend_graph_compute(backend, sub))
    with openmp_count_kept():
        status = lib.ggml_backend_graph_compute(backend.ptr, graph.ptr)
    backend.check()  # a lost RPC server: DeviceLostError, not a compute that did not happen
    if status != lib.GGML_STATUS_SUCCESS:
        raise GGMLError(f"ggml_backend_graph_compute failed with status {status}")
    return int(status)


def ggml_backend_graph_compute_async(backend: Backend, graph: Graph) -> int:
    """Start computing the graph; ggml_backend_synchronize waits for it. Returns ggml's status (0: success)."""
    b = backend_arg(backend, "ggml_backend_graph_compute_async")
    if not isinstance(graph, Graph):
        raise GGMLError("ggml_backend_graph_compute_async: expected a Graph")
    if is_meta(b):  # first: ggml's meta backend aborts on splits it has no rule for
        check_meta_graph(graph, b.dev)
    check_graph(graph, device=b.dev, need_buffers=not b.is_host)
    status = lib.ggml_backend_graph_compute_async(b.ptr, graph.ptr)
    if status != lib.GGML_STATUS_SUCCESS:
        raise GGMLError(f"ggml_backend_graph_compute_async failed with status {status}")
    return int(status)


# -- graph plans ----------------------------------------------------------------------------------------------------
class GraphPlan:
    """A graph prepared once for repeated compute on one backend (the CPU backend supports plans)."""

    def __init__(self, ptr, backend: Backend, graph: Graph):
        self.ptr, self.backend, self.graph = ptr, backend, graph

    @uninterruptible
    def free(self) -> None:
        """Free the plan now (otherwise when it is garbage-collected)."""
        if self.ptr is not None and self.backend.ptr is not None:
            lib.ggml_backend_graph_plan_free(self.backend.ptr, self.ptr)
        self.ptr = None

    @uninterruptible
    def __del__(self):
        self.free()


def ggml_backend_graph_plan_create(backend: Backend, graph: Graph) -> GraphPlan:
    """Prepare the graph for the backend (checked as for compute)."""
    b = backend_arg(backend, "ggml_backend_graph_plan_create")
    if not isinstance(graph, Graph):
        raise GGMLError("ggml_backend_graph_plan_create: expected a Graph")
    # only the CPU backend implements plans; ggml asserts on the others
    check(b.is_cpu, f"ggml_backend_graph_plan_create: backend {b.name} has no graph plans (only the CPU backend has)")
    check_graph(graph, device=b.dev, need_buffers=not b.is_host)
    p = lib.ggml_backend_graph_plan_create(b.ptr, graph.ptr)
    if p == _NULL:
        raise GGMLError(f"ggml_backend_graph_plan_create: backend {b.name} does not support graph plans")
    return GraphPlan(p, b, graph)


def ggml_backend_graph_plan_compute(backend: Backend, plan: GraphPlan) -> None:
    """Run a prepared plan."""
    b = backend_arg(backend, "ggml_backend_graph_plan_compute")
    if not isinstance(plan, GraphPlan) or plan.ptr is None:
        raise GGMLError("ggml_backend_graph_plan_compute: expected a live GraphPlan")
    check(plan.backend is b and b.is_cpu, "ggml_backend_graph_plan_compute: the plan was made for another backend")
    check_graph(plan.graph, device=b.dev, need_buffers=not b.is_host)
    status = lib.ggml_backend_graph_plan_compute(b.ptr, plan.ptr)
    if status != lib.GGML_STATUS_SUCCESS:
        raise GGMLError(f"ggml_backend_graph_plan_compute failed with status {status}")


def ggml_backend_graph_plan_free(backend: Backend, plan: GraphPlan) -> None:
    """Free a plan."""
    if isinstance(plan, GraphPlan):
        plan.free()
