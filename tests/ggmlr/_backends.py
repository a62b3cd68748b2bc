"""Shared by the ported Vulkan-vs-CPU tests: run one small graph on the CPU or the first Vulkan device."""
import numpy as np
import pytest

import ggmlpy as g


def vulkan_available() -> bool:
    """ggmlR's ggml_vulkan_available(): a Vulkan device is listed (software Vulkan counts when
    GGMLPY_SOFTWARE_VULKAN=1 or `--devices vulkan` switched it on before devices were listed)."""
    return any(d.name.startswith("Vulkan") for d in g.devices())


def skip_without_vulkan(fn):
    """ggmlR's skip_if_not(ggml_vulkan_available()), checked when the test runs (listing devices at
    collection would fix the device list before a later test may switch software Vulkan on)."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if not vulkan_available():
            pytest.skip("Vulkan GPU not available")
        return fn(*args, **kwargs)
    return wrapper


def run_graph(use_gpu: bool, make, inputs: dict) -> np.ndarray:
    """make(ctx) -> (output tensor, {name: input tensor}); inputs: name -> values, or a quantized
    tensor's blocks (uint8, as quantize_* return them)."""
    ctx = g.ggml_init(16 * 1024 * 1024, no_alloc=True)
    out, tensors = make(ctx)
    if use_gpu:
        backend = g.ggml_backend_init_by_name(next(d.name for d in g.devices() if d.name.startswith("Vulkan")))
    else:
        backend = g.ggml_backend_cpu_init()
        g.ggml_backend_cpu_set_n_threads(backend, 2)
    missing_kernel = None
    try:
        g.ggml_backend_alloc_ctx_tensors(ctx, backend)
        for name, values in inputs.items():
            g.ggml_backend_tensor_set_data(tensors[name], values)  # ggmlR's setter: blocks pass as they are
        gf = g.ggml_build_forward_expand(ctx, out)
        try:
            g.ggml_backend_graph_compute(backend, gf)
        except g.GGMLError as e:
            # ggmlR ships patched Vulkan shaders; the pinned ggml 0.25.3 lacks some quantized kernels
            # (flash attention with q4_K K/V). ggmlpy refuses such a graph before ggml would abort.
            if not (use_gpu and "has no kernel" in str(e)):
                raise
            missing_kernel = str(e)
        else:
            return g.ggml_backend_tensor_get(out).ravel()
    finally:
        g.ggml_free(ctx)
        g.ggml_backend_free(backend)
    pytest.skip(f"the pinned ggml's Vulkan backend: {missing_kernel}")
