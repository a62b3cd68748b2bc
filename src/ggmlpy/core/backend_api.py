"""ggmlR's backend API, loaded on first use of one of its names (ggmlpy/__init__.py's lazy families):
devices and registries (registry_api.py), buffers and tensor data (buffers.py), events (events.py),
graph plans and async compute (backend.py), the allocator's and the scheduler's functions
(graph_alloc.py, sched.py), the CPU's features (cpu_features.py) and Vulkan's (vulkan.py).

Nothing is defined here: each name lives in the module of what it is. Handles are small Python
objects around ggml's pointers (`Device`, `Registry`, `Event`, `GraphPlan`); a lookup that finds
nothing returns None, as ggmlR returns NULL. Every call that would reach a ggml assertion (wrong
sizes, freed objects, unallocated tensors, RPC servers that are gone) is checked first.
"""
from __future__ import annotations

from ..bindings import lib

# Resolve now the C functions that __del__ methods call. cffi resolves a library attribute under a
# lock on first use; a garbage collection that runs a __del__ in the middle of such a first use
# (it allocates) and needs another unresolved function waits on that same lock forever.
for _fn in ("ggml_backend_buffer_free", "ggml_gallocr_free", "ggml_free", "ggml_backend_free",
            "ggml_threadpool_free", "ggml_backend_event_free", "ggml_backend_graph_plan_free",
            "ggml_backend_sched_free"):
    try:
        getattr(lib, _fn)
    except AttributeError:  # not in this build
        pass

from .backend import (GraphPlan, ggml_backend_graph_compute_async, ggml_backend_graph_plan_compute, ggml_backend_graph_plan_create,
                      ggml_backend_graph_plan_free, ggml_backend_synchronize)  # noqa: F401
from .buffers import (MultiBuffer, ggml_backend_buffer_clear, ggml_backend_buffer_free, ggml_backend_buffer_get_size,
                      ggml_backend_buffer_get_usage, ggml_backend_buffer_is_host,
                      ggml_backend_buffer_is_multi_buffer, ggml_backend_buffer_name,
                      ggml_backend_buffer_reset, ggml_backend_buffer_set_usage, ggml_backend_buffer_usage_any,
                      ggml_backend_buffer_usage_compute, ggml_backend_buffer_usage_weights,
                      ggml_backend_multi_buffer_alloc_buffer, ggml_backend_multi_buffer_set_usage,
                      ggml_backend_tensor_copy_async, ggml_backend_tensor_get_and_sync,
                      ggml_backend_tensor_get_async, ggml_backend_tensor_get_data,
                      ggml_backend_tensor_set_async, ggml_backend_tensor_set_data)  # noqa: F401
from .events import (Event, ggml_backend_event_free, ggml_backend_event_new, ggml_backend_event_record,
                     ggml_backend_event_synchronize, ggml_backend_event_wait)  # noqa: F401
from .graph_alloc import (ggml_gallocr_free, ggml_gallocr_reserve)  # noqa: F401
from .registry_api import (Device, Registry, ggml_backend_dev_by_name, ggml_backend_dev_by_type, ggml_backend_dev_description,
                           ggml_backend_dev_get, ggml_backend_dev_get_props, ggml_backend_dev_init,
                           ggml_backend_dev_memory, ggml_backend_dev_name, ggml_backend_dev_offload_op,
                           ggml_backend_dev_supports_buft, ggml_backend_dev_supports_op,
                           ggml_backend_dev_type, ggml_backend_device_register,
                           ggml_backend_device_type_accel, ggml_backend_device_type_cpu,
                           ggml_backend_device_type_gpu, ggml_backend_device_type_igpu,
                           ggml_backend_get_device, ggml_backend_init_by_type, ggml_backend_load,
                           ggml_backend_load_all, ggml_backend_reg_by_name, ggml_backend_reg_count,
                           ggml_backend_reg_dev_count, ggml_backend_reg_dev_get, ggml_backend_reg_get,
                           ggml_backend_reg_name, ggml_backend_register, ggml_backend_unload)  # noqa: F401
from .sched import (ggml_backend_sched_alloc_graph, ggml_backend_sched_free, ggml_backend_sched_get_backend,
                    ggml_backend_sched_get_n_backends, ggml_backend_sched_get_n_copies,
                    ggml_backend_sched_get_n_splits, ggml_backend_sched_get_tensor_backend,
                    ggml_backend_sched_graph_compute_async, ggml_backend_sched_reserve,
                    ggml_backend_sched_reset, ggml_backend_sched_set_tensor_backend,
                    ggml_backend_sched_synchronize)  # noqa: F401
from .cpu_features import *  # noqa: F401,F403
from .vulkan import *  # noqa: F401,F403  (ggml_vulkan_*: device information through the registry)

__all__ = sorted(n for n in globals() if n.startswith("ggml_")) + ["Device", "Registry", "Event", "GraphPlan", "MultiBuffer"]
