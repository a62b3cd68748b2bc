"""ggml-opt's results: loss, accuracy and predictions accumulated over batches."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..._sigint import uninterruptible
from ...bindings import ffi, lib
from ..handles import OwnedPointer


class OptResult(OwnedPointer):
    """Loss, accuracy and predictions accumulated over batches."""

    RELEASE = "ggml_opt_result_free"

    def __init__(self):
        self.ptr = lib.ggml_opt_result_init()


def ggml_opt_result_init() -> OptResult:
    """A new, empty result."""
    return OptResult()


def ggml_opt_result_free(result: OptResult) -> None:
    """Free the result now."""
    result.free()


def ggml_opt_result_reset(result: OptResult) -> None:
    """Forget every batch."""
    lib.ggml_opt_result_reset(result.ptr)


def ggml_opt_result_ndata(result: OptResult) -> int:
    """Samples seen."""
    v = ffi.new("int64_t *")
    lib.ggml_opt_result_ndata(result.ptr, v)
    return int(v[0])


class OptLoss(NamedTuple):
    """ggml_opt_result_loss's (loss, uncertainty), named as ggmlR's vector."""
    loss: float
    uncertainty: float


class OptAccuracy(NamedTuple):
    """ggml_opt_result_accuracy's (accuracy, uncertainty), named as ggmlR's vector."""
    accuracy: float
    uncertainty: float


def ggml_opt_result_loss(result: OptResult) -> OptLoss:
    """(loss, uncertainty): the mean loss and its uncertainty, a named tuple."""
    a, b = ffi.new("double *"), ffi.new("double *")
    lib.ggml_opt_result_loss(result.ptr, a, b)
    return OptLoss(float(a[0]), float(b[0]))


def ggml_opt_result_accuracy(result: OptResult) -> OptAccuracy:
    """(accuracy, uncertainty), a named tuple; NaN without a cross-entropy loss."""
    a, b = ffi.new("double *"), ffi.new("double *")
    lib.ggml_opt_result_accuracy(result.ptr, a, b)
    return OptAccuracy(float(a[0]), float(b[0]))


def ggml_opt_result_pred(result: OptResult) -> np.ndarray:
    """The predicted class (0-based argmax) of every sample seen (cross-entropy only)."""
    n = ggml_opt_result_ndata(result)
    out = np.zeros(n, np.int32)
    if n:
        lib.ggml_opt_result_pred(result.ptr, ffi.cast("int32_t *", ffi.from_buffer(out)))
    return out


class BorrowedResult(OptResult):
    """An OptResult over a result ggml_opt_epoch owns (handed to an epoch callback): never freed here."""

    def __init__(self, ptr):
        self.ptr = ptr

    @uninterruptible
    def free(self):
        pass


__all__ = [n for n in dir() if n.startswith("ggml_opt_")]
