"""ggmlR's helpers that compute at once on the CPU, each in a small context of its own:
ggml_cpu_add and ggml_cpu_mul (numpy out), and ggml_test (2 + 3, and what ggmlR prints);
ggml_is_available.
"""
from __future__ import annotations

import numpy as np

from ..bindings import lib
from ..errors import check
from . import graph, ops, tensor_api
from .checked import tensor_arg
from .handles import Tensor, get_data


def ggml_is_available() -> bool:
    """Whether libggml is loaded (always true once ggmlpy imported)."""
    return True


def ggml_test() -> bool:
    """ggmlR's self-test: ggml computes 2 + 3, and what ggmlR prints is printed (the library
    loaded, its version, the bytes of one tensor's metadata). Returns whether the sum was 5."""
    with tensor_api.ggml_init(1024 * 1024) as ctx:
        a = tensor_api.ggml_set_f32(tensor_api.ggml_new_tensor_1d(ctx, lib.GGML_TYPE_F32, 1), [2.0])
        b = tensor_api.ggml_set_f32(tensor_api.ggml_new_tensor_1d(ctx, lib.GGML_TYPE_F32, 1), [3.0])
        y = ops.ggml_add(ctx, a, b)
        graph.ggml_graph_compute(ctx, graph.ggml_build_forward_expand(ctx, y))
        ok = bool(tensor_api.ggml_get_f32(y)[0] == 5.0)
    print("GGML library loaded successfully!" if ok else "GGML self-test FAILED: 2 + 3 != 5")
    print(f"GGML version: {tensor_api.ggml_version()}")
    print(f"Tensor overhead: {tensor_api.ggml_tensor_overhead()} bytes")
    return ok


def _host_binary(a, b, what, op):
    a, b = tensor_arg(a, what), tensor_arg(b, what)
    check(a.type == lib.GGML_TYPE_F32 and b.type == lib.GGML_TYPE_F32, f"{what}: Both tensors must be F32")
    check(a.nelements() == b.nelements(), f"{what}: Tensors must have same number of elements")
    xa, xb = get_data(a, np.float32, what).ravel(), get_data(b, np.float32, what).ravel()
    with tensor_api.ggml_init(4 * (xa.size * 3) + 8 * int(lib.ggml_tensor_overhead()) + int(lib.ggml_graph_overhead()) + (1 << 16)) as ctx:
        ta, tb = tensor_api.ggml_new_from_numpy(ctx, xa), tensor_api.ggml_new_from_numpy(ctx, xb)
        y = (ops.ggml_add if op == "add" else ops.ggml_mul)(ctx, ta, tb)
        graph.ggml_graph_compute(ctx, graph.ggml_build_forward_expand(ctx, y), n_threads=1)
        return tensor_api.ggml_get_f32(y).astype(np.float64)


def ggml_cpu_add(a: Tensor, b: Tensor) -> np.ndarray:
    """a + b of two f32 tensors with the same number of elements, computed now on the CPU: a flat vector."""
    return _host_binary(a, b, "ggml_cpu_add", "add")


def ggml_cpu_mul(a: Tensor, b: Tensor) -> np.ndarray:
    """a * b of two f32 tensors with the same number of elements, computed now on the CPU: a flat vector."""
    return _host_binary(a, b, "ggml_cpu_mul", "mul")


__all__ = sorted(n for n in globals() if n.startswith("ggml_"))
