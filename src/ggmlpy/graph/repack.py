"""Copies of quantized weights in ggml's CPU repacking buffer type ("CPU_REPACK", an extra buffer
type of the CPU device), as llama.cpp places its weights: ggml rearranges the blocks of the types
it has interleaved kernels for on this CPU (q4_0, q4_K, iq4_nl, ... on AVX2; which ones, and for
which shapes, ggml decides) so that one product step reads several rows at once.

Invariant: only ggml_mul_mat on the CPU backend reads such a copy (its bytes are no longer the
type's layout), so a copy serves graphs that only multiply by the weight (inference); everything
else (gathers, a backward's out_prod, other backends) keeps the original.
"""
from __future__ import annotations

import numpy as np

from .._sigint import uninterruptible
from ..bindings import c_str, ffi, lib
from .graph_context import free_context, header_context, new_context

_NULL = ffi.NULL


def repack_buffer_type(backend):
    """The CPU device's repacking buffer type, or None (another backend, or a build without it)."""
    if not backend.is_cpu:
        return None
    reg = lib.ggml_backend_dev_backend_reg(backend.dev)
    fn = lib.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_dev_get_extra_bufts")
    if fn == _NULL:
        return None
    bufts = ffi.cast("ggml_backend_dev_get_extra_bufts_t", fn)(backend.dev)
    i = 0
    while bufts != _NULL and bufts[i] != _NULL:
        if c_str(lib.ggml_backend_buft_name(bufts[i])) == "CPU_REPACK":
            return bufts[i]
        i += 1
    return None


class RepackedWeights:
    """Repacked copies of weights for one CPU backend, made on first request and kept (each in a
    buffer of its own) until this object is freed. `get(t)` gives t's copy, or t itself where
    ggml does not repack it."""

    def __init__(self, backend):
        self.backend = backend
        self.buft = repack_buffer_type(backend)
        self.copies: dict = {}  # address of the original -> the tensor to multiply by
        self.owned: list = []  # (header context, buffer) of each copy

    def get(self, t):
        key = int(ffi.cast("uintptr_t", t))
        if key not in self.copies:
            self.copies[key] = self._copy(t)
        return self.copies[key]

    def _copy(self, t):
        if self.buft is None or not lib.ggml_is_quantized(t.type) or lib.ggml_n_dims(t) != 2:
            return t
        meta = header_context(1)
        c = lib.ggml_new_tensor_2d(meta, t.type, t.ne[0], t.ne[1])
        buf = lib.ggml_backend_buft_alloc_buffer(self.buft, lib.ggml_backend_buft_get_alloc_size(self.buft, c))
        if buf == _NULL:  # no memory for a copy: the original serves
            lib.ggml_free(meta)
            return t
        lib.ggml_backend_tensor_alloc(buf, c, lib.ggml_backend_buffer_get_base(buf))
        if not self._multiplies(c):
            lib.ggml_backend_buffer_free(buf)
            lib.ggml_free(meta)
            return t
        self.owned.append((meta, buf))
        host = np.empty(int(lib.ggml_nbytes(t)), dtype=np.uint8)
        lib.ggml_backend_tensor_get(t, ffi.from_buffer(host), 0, host.nbytes)
        lib.ggml_backend_tensor_set(c, ffi.from_buffer(host), 0, host.nbytes)  # ggml repacks as it writes
        return c

    def _multiplies(self, c) -> bool:
        """Whether the CPU backend multiplies by c where it lies (ggml has a repacked kernel for its
        type, shape and this CPU): asked of a product node made for the question."""
        ctx = new_context(2)
        try:
            x = lib.ggml_new_tensor_2d(ctx, lib.GGML_TYPE_F32, c.ne[0], 1)
            return bool(lib.ggml_backend_dev_supports_op(self.backend.dev, lib.ggml_mul_mat(ctx, c, x)))
        finally:
            free_context(ctx)

    @uninterruptible
    def free(self) -> None:
        for meta, buf in getattr(self, "owned", ()):
            lib.ggml_backend_buffer_free(buf)
            lib.ggml_free(meta)
        self.owned, self.copies = [], {}

    __del__ = free
