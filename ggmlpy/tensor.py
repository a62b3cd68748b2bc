"""ag tensors: ggmlR's `ag_tensor` / `ag_param`, an R matrix [nrow, ncol] living on a ggml device.

R's [nrow, ncol] is ggml's ne = [nrow, ncol] (nrow is the contiguous axis), so
R's column-major data is ggml's memory order, and samples are columns
(features x batch). Tensors have reference semantics: an optimizer's in-place
update is seen through every reference.
"""
from __future__ import annotations

import itertools

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


TRACE_READS = None  # a list while graph mode traces: values read on the host (see ag_compile)


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
        if lib.ggml_is_quantized(typ):  # a frozen quantized weight (ag_quantize): each column quantized
            from .quant.kernels import ggml_quantize_chunk
            raw = ggml_quantize_chunk(typ, np.asarray(arr, np.float32).T, self.shape[1], self.shape[0])
            self.dc.sync()
            lib.ggml_backend_tensor_set(t, ffi.from_buffer(raw), 0, raw.nbytes)
            return
        # one pass to the element type in column-major (ggml) order; f16/bf16 go through f32
        flat = np.asarray(arr).astype(np.int32 if typ == I32 else np.float32, order="F").ravel(order="F")
        raw = np.ascontiguousarray(_to_storage(flat, typ))
        self.dc.sync()  # queued ops may still read this memory
        lib.ggml_backend_tensor_set(t, ffi.from_buffer(raw), 0, raw.nbytes)

    # -- reading -------------------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """The values as a float64 numpy array of R shape (nrow, ncol)."""
        t = self.st.ptr  # raises StaleTensorError for a tensor of a reset pool
        if TRACE_READS is not None:
            TRACE_READS.append(self)
        typ = self.st.type
        quantized = bool(lib.ggml_is_quantized(typ))
        raw = np.empty(self.st.nbytes if quantized else self.shape[0] * self.shape[1],
                       dtype=np.uint8 if quantized else NP_DTYPES[typ])
        self.dc.sync()  # queued ops may still be writing it
        lib.ggml_backend_tensor_get(t, ffi.from_buffer(raw), 0, raw.nbytes)
        if quantized:
            from .quant.kernels import dequantize
            return dequantize(typ, raw).astype(np.float64).reshape(self.shape, order="F")
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
        if t == I32:
            return "i32"
        return DTYPE_NAMES.get(t) or ffi.string(lib.ggml_type_name(t)).decode()  # quantized: "q4_K"

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
