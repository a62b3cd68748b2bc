"""ag tensors: ggmlR's `ag_tensor` / `ag_param`, an R matrix [nrow, ncol] living on a ggml device.

R's [nrow, ncol] is ggml's ne = [nrow, ncol] (nrow is the contiguous axis), so
R's column-major data is ggml's memory order, and samples are columns
(features x batch). Tensors have reference semantics: an optimizer's in-place
update is seen through every reference.
"""
from __future__ import annotations

import contextlib
import itertools
import threading

import numpy as np

from .backend.state import DTYPE_NAMES, DTYPES, STATE, DeviceContext
from .bindings import ffi, lib
from .core.context import NP_DTYPES, _from_storage, _to_storage
from .errors import DeviceError, GGMLError

_ids = itertools.count(1)
F32 = lib.GGML_TYPE_F32
I32 = lib.GGML_TYPE_I32


def _as_matrix(data) -> np.ndarray:
    arr = np.asarray(data)
    if arr.dtype.kind not in "biuf":
        raise GGMLError(f"ag_tensor: expected numbers, got dtype {arr.dtype}")
    if arr.ndim == 0:
        arr = arr.reshape(1, 1)
    elif arr.ndim == 1:
        arr = arr.reshape(-1, 1)  # as in ggmlR: a vector is a column
    elif arr.ndim != 2:
        raise GGMLError(f"ag_tensor: expected a vector or a matrix, got {arr.ndim} dims {arr.shape}")
    if 0 in arr.shape:
        raise GGMLError(f"ag_tensor: empty shape {arr.shape}")
    return arr


_reads = threading.local()  # .list while graph mode traces in this thread: values read on the host


@contextlib.contextmanager
def reads_into(lst: list):
    """Record the tensors whose values this thread reads on the host (ag_compile refuses those)."""
    prev = getattr(_reads, "list", None)
    _reads.list = lst
    try:
        yield lst
    finally:
        _reads.list = prev


def _check_int32(arr) -> None:
    """i32 storage takes integers in int32's range: anything else would wrap or truncate silently."""
    a = np.asarray(arr)
    if a.dtype.kind == "f":
        if not np.isfinite(a).all() or (a != np.round(a)).any():
            raise GGMLError("i32 tensor: values must be whole numbers (got a fraction, NaN or infinity)")
    if a.size and (a.min() < -2**31 or a.max() > 2**31 - 1):
        raise GGMLError(f"i32 tensor: values must lie in [-2^31, 2^31 - 1], got {a.min()} .. {a.max()}")


class AGTensor:
    """A [nrow, ncol] tensor on a device, optionally tracked by the gradient tape."""

    __slots__ = ("id", "st", "shape", "dc", "requires_grad", "grad", "is_leaf", "name", "fwd_grad",
                 "__weakref__")
    __array_priority__ = 100  # so numpy defers `ndarray @ AGTensor` to us

    def __init__(self, st, shape, dc: DeviceContext, requires_grad=False, is_leaf=True):
        self.id = next(_ids)
        self.st = st
        self.shape = (int(shape[0]), int(shape[1]))
        self.dc = dc
        self.requires_grad = bool(requires_grad)
        self.grad = None
        self.is_leaf = is_leaf
        self.name = None
        self.fwd_grad = None  # forward-mode tangents, per level (autograd.forward_ad)

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def from_numpy(cls, data, device=None, dtype=None, requires_grad=False) -> "AGTensor":
        arr = _as_matrix(data)
        dc = STATE.context(device)
        t = _storage_type(dtype, arr)
        st = dc.persistent.alloc(t, (arr.shape[0], arr.shape[1]))
        out = cls(st, arr.shape, dc, requires_grad)
        out._write(arr)
        return out

    def _write(self, arr: np.ndarray) -> None:
        t = self.st.ptr
        typ = self.st.type
        if typ == I32:
            _check_int32(arr)
        # one pass to the element type in column-major (ggml) order; f16/bf16 go through f32
        flat = np.asarray(arr).astype(np.int32 if typ == I32 else np.float32, order="F").ravel(order="F")
        raw = np.ascontiguousarray(_to_storage(flat, typ))
        self.dc.sync()  # queued ops may still read this memory
        lib.ggml_backend_tensor_set(t, ffi.from_buffer(raw), 0, raw.nbytes)

    # -- reading -------------------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """The values as a float64 numpy array of R shape (nrow, ncol)."""
        t = self.st.ptr  # raises StaleTensorError for a tensor of a reset pool
        reads = getattr(_reads, "list", None)
        if reads is not None:
            reads.append(self)
        typ = self.st.type
        raw = np.empty(self.shape[0] * self.shape[1], dtype=NP_DTYPES[typ])
        self.dc.sync()  # queued ops may still be writing it
        lib.ggml_backend_tensor_get(t, ffi.from_buffer(raw), 0, raw.nbytes)
        vals = _from_storage(raw, typ).astype(np.float64)
        return vals.reshape(self.shape, order="F")

    @property
    def data(self) -> np.ndarray:
        """ggmlR's `$data`: the values as an R-shaped numpy matrix. Assigning writes in place."""
        return self.numpy()

    @data.setter
    def data(self, values) -> None:
        arr = _as_matrix(values)
        if arr.shape != self.shape:
            raise GGMLError(f"cannot assign {arr.shape} values to a {self.shape} tensor")
        self._write(arr)

    def item(self) -> float:
        if self.shape != (1, 1):
            raise GGMLError(f"item() needs a [1, 1] tensor, got {list(self.shape)}")
        return float(self.numpy()[0, 0])

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a.astype(dtype) if dtype is not None else a

    def __float__(self):
        return self.item()

    # -- attributes -------------------------------------------------------------------------------
    @property
    def device(self) -> str:
        return self.dc.name

    @property
    def dtype(self) -> str:
        t = self.st.type
        return "i32" if t == I32 else DTYPE_NAMES[t]

    @property
    def nrow(self) -> int:
        return self.shape[0]

    @property
    def ncol(self) -> int:
        return self.shape[1]

    @property
    def T(self) -> "AGTensor":
        from .autograd.ops import ag_transpose
        return ag_transpose(self)

    def nbytes(self) -> int:
        return self.st.nbytes

    def __len__(self):
        return self.shape[0]

    def __repr__(self):
        flags = " requires_grad" if self.requires_grad else ""
        try:
            body = np.array2string(self.numpy(), precision=4, threshold=20, edgeitems=2)
        except Exception as e:  # stale or freed: say so rather than fail in repr
            body = f"<{type(e).__name__}>"
        return f"ag_tensor [{self.shape[0]}, {self.shape[1]}] {self.dtype} on {self.device}{flags}\n{body}"

    # -- Python operators, on top of the ag_* functions -------------------------------------------------
    def __add__(self, o):
        return _ops().ag_add(self, o)

    __radd__ = __add__

    def __sub__(self, o):
        return _ops().ag_sub(self, o)

    def __rsub__(self, o):
        F = _ops()
        return F.ag_add(F.ag_neg(self), o)

    def __mul__(self, o):
        F = _ops()
        return F.ag_scale(self, o) if isinstance(o, (int, float)) else F.ag_mul(self, o)

    __rmul__ = __mul__

    def __truediv__(self, o):
        F = _ops()
        return F.ag_scale(self, 1.0 / o) if isinstance(o, (int, float)) else F.ag_div(self, o)

    def __neg__(self):
        return _ops().ag_neg(self)

    def __matmul__(self, o):
        return _ops().ag_matmul(self, o)

    def __rmatmul__(self, o):
        return _ops().ag_matmul(o, self)

    def __pow__(self, p):
        return _ops().ag_pow(self, p)


def _ops():
    """The ag_* functions: imported on first use, since autograd imports this module."""
    from .autograd import ops
    return ops


def _storage_type(dtype, arr: np.ndarray) -> int:
    if dtype is None:
        return STATE.dtype
    if dtype in ("i32", "int32", np.int32):
        return I32
    if dtype not in DTYPES:
        raise GGMLError(f"dtype must be one of {sorted(DTYPES)} or 'i32', got {dtype!r}")
    return DTYPES[dtype]


def ag_tensor(data, device=None, dtype=None, requires_grad=False) -> AGTensor:
    """A tensor holding `data` (a vector becomes a column [n, 1]), in the persistent pool."""
    if isinstance(data, AGTensor):
        data = data.numpy()
    return AGTensor.from_numpy(data, device, dtype, requires_grad)


def ag_param(data, device=None, dtype=None) -> AGTensor:
    """A trainable tensor: ag_tensor with requires_grad=True."""
    if dtype in ("i32", "int32", np.int32):
        raise GGMLError("ag_param: parameters must be floating point (f32, f16 or bf16), not i32")
    return ag_tensor(data, device, dtype, requires_grad=True)


def ag_to_device(x: AGTensor, device: str) -> AGTensor:
    """A copy of x on another device (moving between devices is always explicit)."""
    out = ag_tensor(x.numpy(), device=device, dtype=x.dtype if x.dtype != "i32" else "i32",
                    requires_grad=x.requires_grad)
    return out


def same_device(*xs: AGTensor) -> DeviceContext:
    dc = xs[0].dc
    for x in xs[1:]:
        if x.dc is not dc:
            raise DeviceError(f"tensors on different devices ({dc.name} and {x.dc.name}) in one op; "
                              "move one with ag_to_device()")
    return dc
