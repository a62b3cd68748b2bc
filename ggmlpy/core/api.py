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

from ..bindings import ffi, lib  # noqa: F401  (ggmlpy.core.api.lib)
from .context import Context, Tensor
from .device import Backend, backends, devices, get_backend
from .graph import Graph, ggml_build_forward_expand, ggml_graph_compute, ggml_graph_n_nodes, ggml_new_graph  # noqa: F401
from .graph_alloc import GraphAllocator, ggml_gallocr_alloc_graph, ggml_gallocr_get_buffer_size, ggml_gallocr_new  # noqa: F401
from .sched import Scheduler, ggml_backend_sched_graph_compute, ggml_backend_sched_new  # noqa: F401
from .ops import *  # noqa: F401,F403  (every ggml_* op constructor)
from .ops_ext import *  # noqa: F401,F403  (GLU, RoPE variants, more convolutions, the *_inplace table)
from .utils import *  # noqa: F401,F403  (tensor, context, graph, thread and time utilities)
# last: where a name is also one of the modules above, these are the ones ggmlR's API means
from .tensors import *  # noqa: F401,F403,E402  (contexts, tensors, values in and out, the type constants)
from .backend_compute import *  # noqa: F401,F403,E402  (making backends, backend memory, values, computing)
from .backend_compute import BackendBuffer, is_meta  # noqa: F401,E402

__all__ = sorted(n for n in dir() if n.startswith(("ggml_", "GGML_"))) + [
    "Context", "Tensor", "Graph", "Backend", "BackendBuffer", "GraphAllocator", "Scheduler", "devices", "backends", "get_backend"]
