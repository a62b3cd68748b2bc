"""ggmlR's matrix-multiply drop-ins: ggml_matmul, ggml_crossprod, ggml_tcrossprod, ggml_matmul_f64
and as_gpu_matrix. Plain matrices in, a float64 numpy matrix out.

Dispatch as in ggmlR: device="cpu" multiplies on the host in float64 (numpy's BLAS, R's %*%);
"gpu" runs ggml's mul_mat on the first Vulkan device with f32 accumulation requested
(GGML_PREC_F32), falling back to the host silently when there is no Vulkan device or the
device fails; "auto" (the default) uses the GPU only from 2e7 multiply-adds on, below which
the host<->device copy costs more than it saves, and never a software Vulkan device
(lavapipe is far slower than numpy's BLAS on the same CPU). The GPU path is an f32 approximation of the
float64 product: 3e-4 relative on lavapipe (ggml's Vulkan kernels there round the operands to
f16, whatever `prec` asks), ggmlR documents up to 1e-3 on drivers that accumulate in f16.

Layout: a numpy array X of shape (r, c) is ggml ne = [c, r], and ggml_mul_mat(Y, X) of
ne [k, n] and [k, m] is numpy X @ Y.T, shape (m, n); every product below is arranged into
that one form, so no operand is copied twice.
"""
from __future__ import annotations

import threading

import numpy as np
from numpy.typing import ArrayLike

from ..bindings import lib
from ..core.api import (GGML_TYPE_F32, ggml_backend_alloc_ctx_tensors, ggml_backend_graph_compute, ggml_free,
                        ggml_init, ggml_new_tensor_2d)
from ..core.buffers import ggml_backend_tensor_get_data, ggml_backend_tensor_set_data
from ..core.registry import is_software_device
from ..core.graph import ggml_build_forward_expand
from ..core.ops import ggml_mul_mat
from ..core.vulkan import ggml_vulkan_available, ggml_vulkan_init
from ..errors import GGMLError

__all__ = ["ggml_matmul", "ggml_matmul_f64", "ggml_crossprod", "ggml_tcrossprod", "as_gpu_matrix", "GGMLMatrix"]

# Below this many multiply-adds (m * n * k), device="auto" stays on the host (ggmlR's gate).
GPU_MIN_FLOP = 2e7
_DEVICES = ("auto", "gpu", "cpu")
_PRECS = ("f32", "f16")


def _as_matrix(x, what: str) -> np.ndarray:
    """ggmlR's coercion: a GGMLMatrix's data, a matrix, or a vector as a one-column matrix."""
    if isinstance(x, GGMLMatrix):
        x = x.data
    a = np.asarray(x)
    if a.dtype.kind not in "biuf":
        raise TypeError(f"{what} must be a numeric matrix, got dtype {a.dtype}")
    if a.ndim == 0:
        a = a.reshape(1, 1)
    elif a.ndim == 1:
        a = a.reshape(-1, 1)
    elif a.ndim != 2:
        raise GGMLError(f"{what} must be a matrix (2 dims), got {a.ndim} dims")
    return a.astype(np.float64, copy=False)


def _check_choice(value, choices, what):
    if value not in choices:
        raise ValueError(f"{what} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


class _VulkanRunner:
    """One Vulkan backend for the process (making one costs milliseconds), used under a lock,
    that runs small one-off ggml graphs on numpy matrices in f32."""

    def __init__(self):
        self.lock = threading.Lock()
        self.backend = None

    def usable(self) -> bool:
        try:
            return ggml_vulkan_available()
        except GGMLError:
            return False

    def software(self) -> bool:
        """Whether the first Vulkan device is a CPU rasteriser (lavapipe, SwiftShader)."""
        return is_software_device("Vulkan0")

    def run(self, build, arrays, prepare=None) -> np.ndarray:
        """build(ctx, tensors) -> output tensor, over 2-D f32 tensors holding `arrays` (numpy
        (r, c) is ggml ne [c, r]); `prepare(out)` may set op parameters. The output comes back
        as float64 numpy, its ggml ne reversed."""
        with self.lock:
            if self.backend is None:
                self.backend = ggml_vulkan_init(0)
            ctx = ggml_init(8 * 1024 * 1024, no_alloc=True)
            try:
                tensors = [ggml_new_tensor_2d(ctx, GGML_TYPE_F32, a.shape[1], a.shape[0]) for a in arrays]
                out = build(ctx, tensors)
                if prepare is not None:
                    prepare(out)
                graph = ggml_build_forward_expand(ctx, out)
                buf = ggml_backend_alloc_ctx_tensors(ctx, self.backend)
                try:
                    for t, a in zip(tensors, arrays):
                        ggml_backend_tensor_set_data(t, np.ascontiguousarray(a, dtype=np.float32))
                    ggml_backend_graph_compute(self.backend, graph)
                    res = ggml_backend_tensor_get_data(out)
                    ne = [n for n in out.ne]
                finally:
                    buf.free()
            finally:
                ggml_free(ctx)
        return res.reshape(ne[3], ne[2], ne[1], ne[0]).reshape(-1, ne[0]).astype(np.float64)

    def abt(self, x: np.ndarray, y: np.ndarray, prec: str) -> np.ndarray:
        """x @ y.T in f32 on the Vulkan device; x (m, k), y (n, k)."""

        def f32_accumulation(out):
            lib.ggml_mul_mat_set_prec(out.ptr, lib.GGML_PREC_F32)
        return self.run(lambda ctx, t: ggml_mul_mat(ctx, t[1], t[0]), [x, y],
                        f32_accumulation if prec == "f32" else None)


_VULKAN = _VulkanRunner()


def _on_gpu(device: str, flop: float) -> bool:
    """ggmlR's choice of backend for one multiply: "cpu" never, "gpu" whenever a Vulkan
    device exists, "auto" when one exists, is a real GPU (not lavapipe or SwiftShader, which
    run on the CPU far slower than numpy) and the product is large enough."""
    _check_choice(device, _DEVICES, "device")
    if device == "cpu" or not _VULKAN.usable():
        return False
    if device == "gpu":
        return True
    return flop >= GPU_MIN_FLOP and not _VULKAN.software()


def _product(x, y_t, host, device, prec):
    """x @ y_t.T on the GPU when chosen (host() if it is not, or if it fails), as float64."""
    _check_choice(prec, _PRECS, "prec")
    (m, k), n = x.shape, y_t.shape[0]
    if m and n and k and _on_gpu(device, float(m) * n * k):
        try:
            return _VULKAN.abt(x, y_t, prec)
        except (GGMLError, MemoryError):
            pass  # ggmlR's fallback: a failing GPU gives the host's (exact) result, never an error
    return host()


def ggml_matmul(A: ArrayLike, B: ArrayLike, device: str = "auto", prec: str = "f32") -> np.ndarray:
    """A @ B as ggmlR's ggml_matmul: on a Vulkan GPU in f32 when `device` says so (see the module
    docstring), otherwise on the host in float64 (exactly numpy's A @ B). A vector is a
    one-column matrix. Raises ValueError ("non-conformable") when A's columns are not B's rows."""
    A, B = _as_matrix(A, "A"), _as_matrix(B, "B")
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"non-conformable: ncol(A)={A.shape[1]} != nrow(B)={B.shape[0]}")
    return _product(A, B.T, lambda: A @ B, device, prec)


def ggml_crossprod(A: ArrayLike, B: ArrayLike | None = None, device: str = "auto", prec: str = "f32") -> np.ndarray:
    """R's crossprod: A.T @ B (A.T @ A when B is None), on the GPU or host as ggml_matmul."""
    A = _as_matrix(A, "A")
    B = A if B is None else _as_matrix(B, "B")
    if A.shape[0] != B.shape[0]:
        raise ValueError(f"non-conformable: nrow(A)={A.shape[0]} != nrow(B)={B.shape[0]}")
    return _product(A.T, B.T, lambda: A.T @ B, device, prec)


def ggml_tcrossprod(A: ArrayLike, B: ArrayLike | None = None, device: str = "auto", prec: str = "f32") -> np.ndarray:
    """R's tcrossprod: A @ B.T (A @ A.T when B is None), on the GPU or host as ggml_matmul."""
    A = _as_matrix(A, "A")
    B = A if B is None else _as_matrix(B, "B")
    if A.shape[1] != B.shape[1]:
        raise ValueError(f"non-conformable: ncol(A)={A.shape[1]} != ncol(B)={B.shape[1]}")
    return _product(A, B, lambda: A @ B.T, device, prec)


def ggml_matmul_f64(A: ArrayLike, B: ArrayLike, device: str = "auto") -> np.ndarray:
    """A @ B accurate to float64, whatever `device` says.

    ggml has no float64 matrix multiply: ggmlR's GPU path is a Vulkan shader of its own ggml
    fork, run only on devices with shaderFloat64, and everywhere else it falls back to R's
    %*%. The pinned ggml 0.25.3 has no such kernel, so this always takes that fallback: the
    product is computed on the host in float64 (numpy's BLAS), for device "auto", "gpu" and
    "cpu" alike. It never hands back an f32 result under the f64 name."""
    _check_choice(device, _DEVICES, "device")
    A, B = _as_matrix(A, "A"), _as_matrix(B, "B")
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"non-conformable: ncol(A)={A.shape[1]} != nrow(B)={B.shape[0]}")
    return A @ B


class GGMLMatrix:
    """ggmlR's ggml_matrix: a float64 matrix tagged so that `@` (R's %*%), `.crossprod()` and
    `.tcrossprod()` run through ggml_matmul / ggml_crossprod / ggml_tcrossprod with its
    `device` and `prec`. Only one operand of `@` needs to be one; the result is a plain array."""

    __array_priority__ = 100  # numpy defers `ndarray @ GGMLMatrix` to __rmatmul__

    def __init__(self, data, device: str = "auto", prec: str = "f32"):
        self.data = _as_matrix(data, "x")
        self.device = _check_choice(device, _DEVICES, "device")
        self.prec = _check_choice(prec, _PRECS, "prec")

    @property
    def shape(self) -> tuple:
        """The matrix's (nrow, ncol), R's dim()."""
        return self.data.shape

    def __array__(self, dtype=None, copy=None):
        return self.data if dtype is None else self.data.astype(dtype)

    def __matmul__(self, other):
        return ggml_matmul(self.data, other, device=self.device, prec=self.prec)

    def __rmatmul__(self, other):
        return ggml_matmul(other, self.data, device=self.device, prec=self.prec)

    def crossprod(self, y=None) -> np.ndarray:
        """t(x) %*% y (t(x) %*% x without y) with this matrix's device and precision."""
        return ggml_crossprod(self.data, y, device=self.device, prec=self.prec)

    def tcrossprod(self, y=None) -> np.ndarray:
        """x %*% t(y) (x %*% t(x) without y) with this matrix's device and precision."""
        return ggml_tcrossprod(self.data, y, device=self.device, prec=self.prec)

    def __repr__(self):
        r, c = self.data.shape
        return f"<ggml_matrix> {r} x {c}  device={self.device} prec={self.prec}"


def as_gpu_matrix(x: ArrayLike, device: str = "auto", prec: str = "f32") -> GGMLMatrix:
    """Wrap a matrix so that `as_gpu_matrix(A) @ B` multiplies through ggml_matmul (ggmlR's
    as_gpu_matrix; R's as.matrix() is `.data` or np.asarray())."""
    return GGMLMatrix(x, device, prec)
