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
from .buffers import BackendBuffer  # noqa: F401
from .backend import (ggml_backend_cpu_init, ggml_backend_cpu_set_n_threads,  # noqa: F401
                      ggml_backend_free, ggml_backend_graph_compute, ggml_backend_init_best,
                      ggml_backend_init_by_name, ggml_backend_name, is_meta)
from .buffers import ggml_backend_alloc_ctx_tensors, ggml_backend_tensor_get, ggml_backend_tensor_set  # noqa: F401
from .device import Backend, get_backend
from .graph import *  # noqa: F401,F403  (graphs: building, computing, printing, views)
from .graph import Graph
from .graph_alloc import GraphAllocator, ggml_gallocr_alloc_graph, ggml_gallocr_get_buffer_size, ggml_gallocr_new  # noqa: F401
from .ggml_log import *  # noqa: F401,F403  (where ggml's log goes; ggml's abort handler)
from .handles import Context, Tensor
from .host_compute import *  # noqa: F401,F403  (ggml_cpu_add, ggml_cpu_mul, ggml_test, ggml_is_available)
from .op_params import *  # noqa: F401,F403  (a tensor's op parameters)
from .ops import *  # noqa: F401,F403  (every ggml_* op constructor, by family; the *_inplace table)
from .registry import backends, devices
from .registry_api import ggml_backend_dev_count  # noqa: F401
from .sched import Scheduler, ggml_backend_sched_graph_compute, ggml_backend_sched_new  # noqa: F401
from .tensor_api import *  # noqa: F401,F403  (contexts, tensors, values in and out, the type constants)
from .tensor_info import *  # noqa: F401,F403  (element sizes, op names, shapes, strides, layout predicates)
from .threads import *  # noqa: F401,F403  (ggmlR's thread setters)
from .timing import *  # noqa: F401,F403  (ggml's clock)
from .types import (ggml_blck_size, ggml_ftype_to_ggml_type, ggml_is_quantized, ggml_type_size,  # noqa: F401
                    ggml_type_sizef)  # (ggml's types: ids or names)

__all__ = sorted(n for n in dir() if n.startswith(("ggml_", "GGML_"))) + [
    "Context", "Tensor", "Graph", "Backend", "BackendBuffer", "GraphAllocator", "Scheduler", "devices", "backends", "get_backend"]
