"""ag tensors: ggmlR's `ag_tensor` / `ag_param`, an R matrix [nrow, ncol] (or an R array of up to
4 dims) living on a ggml device.

R's dims are ggml's ne (the first is the contiguous axis), so R's column-major
data is ggml's memory order, and samples are columns (features x batch). ggmlR's
tensors are matrices; ggmlpy's may also have batch and head axes after the first
two ([d, T, B], [d, T, H, B]), which every op treats as batches. A shape never
ends in 1s beyond its first two dims ([3, 4, 1] is [3, 4]), as ggml's specs.
Tensors have reference semantics: an optimizer's in-place update is seen
through every reference. The methods that are ag_* calls (the Python operators,
`.T`, `.backward()`, indexing) are set on AGTensor by the layer above that defines
those functions (autograd.tensor_methods.install); this module imports nothing above it.
"""
from __future__ import annotations

import itertools
import numbers
import warnings
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from ._arrays import numeric_array
from .runtime.autograd_state import AUTOGRAD
from .runtime.state import DTYPE_NAMES, DTYPES, STATE, DeviceContext, _has_gpu
from .bindings import ffi, lib
from .core.handles import NP_DTYPES, _from_storage, _to_storage
from .core.quants import dequantize, ggml_quantize_chunk
from .errors import DeviceError, GGMLError

if TYPE_CHECKING:
    from .autograd.engine import GradMap

_ids = itertools.count(1)
F32 = lib.GGML_TYPE_F32
I32 = lib.GGML_TYPE_I32


MAX_DIMS = 4  # ggml's


def norm_shape(shape) -> tuple:
    """A shape as tensors carry it: at least 2 dims, no trailing 1s beyond the first two."""
    shape = [int(d) for d in shape]
    while len(shape) > 2 and shape[-1] == 1:
        shape.pop()
    return tuple(shape + [1] * (2 - len(shape)))


def _as_array(data) -> np.ndarray:
    arr = numeric_array(data, "ag_tensor")
    if arr.ndim == 0:
        arr = arr.reshape(1, 1)
    elif arr.ndim == 1:
        arr = arr.reshape(-1, 1)  # as in ggmlR: a vector is a column
    elif arr.ndim > MAX_DIMS:
        raise GGMLError(f"ag_tensor: at most {MAX_DIMS} dims (ggml's limit), got {arr.ndim} dims {arr.shape}")
    if 0 in arr.shape:
        raise GGMLError(f"ag_tensor: empty shape {arr.shape}")
    return arr.reshape(norm_shape(arr.shape))


def _check_int32(arr) -> None:
    """i32 storage takes integers in int32's range: anything else would wrap or truncate silently."""
    a = np.asarray(arr)
    if a.dtype.kind == "f":
        if not np.isfinite(a).all() or (a != np.round(a)).any():
            raise GGMLError("i32 tensor: values must be whole numbers (got a fraction, NaN or infinity)")
    if a.size and (a.min() < -2**31 or a.max() > 2**31 - 1):
        raise GGMLError(f"i32 tensor: values must lie in [-2^31, 2^31 - 1], got {a.min()} .. {a.max()}")


class AGTensor:
    """A [nrow, ncol] (or up to 4-D) tensor on a device, optionally tracked by the gradient tape."""

    __slots__ = ("id", "storage", "shape", "device_context", "requires_grad", "grad", "is_leaf", "name", "fwd_grad",
                 "__weakref__")
    __array_priority__ = 100  # so numpy defers `ndarray @ AGTensor` to us

    def __init__(self, st, shape, dc: DeviceContext, requires_grad=False, is_leaf=True):
        self.id = next(_ids)
        self.storage = st
        self.shape = (int(shape[0]), int(shape[1])) if len(shape) == 2 else norm_shape(shape)
        self.device_context = dc
        self.requires_grad = bool(requires_grad)
        self.grad = None
        self.is_leaf = is_leaf
        self.name = None
        self.fwd_grad = None  # forward-mode tangents, per level (autograd.forward_ad)

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def from_numpy(cls, data: ArrayLike, device: str | None = None, dtype: str | None = None,
                   requires_grad: bool = False) -> "AGTensor":
        """A tensor holding `data` (numbers; a vector becomes a column) in the persistent pool;
        ag_tensor() is the usual way to make one."""
        arr = _as_array(data)
        dc = STATE.context(_fallback(device) if isinstance(device, str) else device)
        t = _storage_type(dtype, arr)
        if lib.ggml_is_quantized(t) and arr.ndim != 2:
            raise GGMLError(f"ag_tensor: a quantized tensor must be a matrix, got shape {arr.shape}")
        st = dc.persistent.alloc(t, arr.shape)
        out = cls(st, arr.shape, dc, requires_grad)
        out._write(arr)
        return out

    def _write(self, arr: np.ndarray) -> None:
        t = self.storage.ptr
        typ = self.storage.type
        if typ == I32:
            _check_int32(arr)
        if lib.ggml_is_quantized(typ):  # a frozen quantized weight (ag_quantize): each column quantized
            raw = ggml_quantize_chunk(typ, np.asarray(arr, np.float32).T, self.shape[1], self.shape[0])
            self.device_context.sync()
            lib.ggml_backend_tensor_set(t, ffi.from_buffer(raw), 0, raw.nbytes)
            self.device_context.backend.check()  # an RPC server lost on the way: the values did not arrive
            return
        # one pass to the element type in column-major (ggml) order; f16/bf16 go through f32
        flat = np.asarray(arr).astype(np.int32 if typ == I32 else np.float32, order="F").ravel(order="F")
        raw = np.ascontiguousarray(_to_storage(flat, typ))
        self.device_context.sync()  # queued ops may still read this memory
        lib.ggml_backend_tensor_set(t, ffi.from_buffer(raw), 0, raw.nbytes)
        self.device_context.backend.check()  # an RPC server lost on the way: the values did not arrive

    # -- reading -------------------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """A copy of the values as a numpy array of R shape (nrow, ncol, ...), in the tensor's own dtype:
        float32 for f32, float16 for f16, int32 for i32; bf16 (which numpy lacks) as float32.
        `.data` gives float64, as ggmlR's `$data` (an R double matrix) does."""
        reads = AUTOGRAD.host_reads  # this thread's, while ag_compile traces: it refuses host reads
        if reads is not None:
            reads.append(self)
        return self._read()

    def _read(self) -> np.ndarray:
        """The values (numpy()), read for the library's own checks: not recorded as a host read."""
        t = self.storage.ptr  # raises StaleTensorError for a tensor of a reset pool
        typ = self.storage.type
        quantized = bool(lib.ggml_is_quantized(typ))
        raw = np.empty(self.storage.nbytes if quantized else self.size,
                       dtype=np.uint8 if quantized else NP_DTYPES[typ])
        self.device_context.sync()  # queued ops may still be writing it
        lib.ggml_backend_tensor_get(t, ffi.from_buffer(raw), 0, raw.nbytes)
        self.device_context.backend.check()  # from a lost RPC server the read gives zeros: never return them
        if quantized:
            return dequantize(typ, raw).reshape(self.shape, order="F")  # float32, as ggml dequantizes
        return _from_storage(raw, typ).reshape(self.shape, order="F")

    @property
    def data(self) -> np.ndarray:
        """ggmlR's `$data`: the values as an R-shaped float64 numpy matrix. Assigning writes in place."""
        return self.numpy().astype(np.float64)

    @data.setter
    def data(self, values: ArrayLike) -> None:
        arr = _as_array(values)
        if arr.shape != self.shape:
            raise GGMLError(f"cannot assign {arr.shape} values to a {self.shape} tensor")
        if self.storage.pool is self.device_context.pass_pool:  # its memory may be shared with reshapes of it: write apart
            self.storage = self.device_context.pass_pool.alloc(self.storage.type, self.shape)
        self._write(arr)

    def item(self) -> float:
        """The value of a [1, 1] tensor as a Python float."""
        if self.shape != (1, 1):
            raise GGMLError(f"item() needs a [1, 1] tensor, got {list(self.shape)}")
        return float(self.numpy()[0, 0])

    @property
    def ndim(self) -> int:
        """The number of dims: 2 for ggmlR's matrices, up to 4."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """The number of elements."""
        n = 1
        for d in self.shape:
            n *= d
        return n

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        """np.asarray(t): the values, in the tensor's own dtype unless `dtype` is given."""
        a = self.numpy()
        return a.astype(dtype) if dtype is not None else a

    def __float__(self):
        return self.item()

    # -- attributes -------------------------------------------------------------------------------
    @property
    def device(self) -> str:
        """Where the tensor lives, labelled as ggmlR does: "cpu" or "gpu" (a Vulkan or CUDA device);
        an RPC device by its ggml name. `device_name` gives the ggml name ("CPU", "Vulkan0", ...)."""
        return device_label(self.device_context)

    @property
    def device_name(self) -> str:
        """The ggml name of the device the tensor lives on ("CPU", "Vulkan0", "CUDA0", "RPC0[...]")."""
        return self.device_context.name

    @property
    def dtype(self) -> str:
        """The storage type: "f32", "f16", "bf16" or "i32"."""
        t = self.storage.type
        if t == I32:
            return "i32"
        return DTYPE_NAMES.get(t) or ffi.string(lib.ggml_type_name(t)).decode()  # quantized: "q4_K"

    @property
    def nrow(self) -> int:
        """R's nrow(): the first dimension (features, for activations)."""
        return self.shape[0]

    @property
    def ncol(self) -> int:
        """R's ncol(): the second dimension (samples, for activations)."""
        return self.shape[1]

    def nbytes(self) -> int:
        """Bytes of device memory the values take."""
        return self.storage.nbytes

    # -- rows, indexing -------------------------------------------------------------------------------
    def __len__(self) -> int:
        """The number of rows, as for a numpy matrix."""
        return self.shape[0]

    def __iter__(self):
        """The rows, each a [1, ncol] tensor ([1, ncol, ...] for a batched tensor: no dim is dropped)."""
        for i in range(self.shape[0]):
            yield self[i]

    if TYPE_CHECKING:  # set by autograd.tensor_methods.install(): ag_* calls, declared here for type checkers
        T: AGTensor

        def backward(self, grad: AGTensor | None = None, retain_all: bool = False) -> GradMap: ...
        def __getitem__(self, key) -> AGTensor: ...
        def __add__(self, o: AGTensor | float | ArrayLike) -> AGTensor: ...
        def __radd__(self, o: AGTensor | float | ArrayLike) -> AGTensor: ...
        def __sub__(self, o: AGTensor | float | ArrayLike) -> AGTensor: ...
        def __rsub__(self, o: AGTensor | float | ArrayLike) -> AGTensor: ...
        def __mul__(self, o: AGTensor | float | ArrayLike) -> AGTensor: ...
        def __rmul__(self, o: AGTensor | float | ArrayLike) -> AGTensor: ...
        def __truediv__(self, o: AGTensor | float | ArrayLike) -> AGTensor: ...
        def __rtruediv__(self, o: AGTensor | float | ArrayLike) -> AGTensor: ...
        def __neg__(self) -> AGTensor: ...
        def __matmul__(self, o: AGTensor | ArrayLike) -> AGTensor: ...
        def __rmatmul__(self, o: AGTensor | ArrayLike) -> AGTensor: ...
        def __pow__(self, p: float) -> AGTensor: ...

    def __repr__(self) -> str:
        prefix = "ag_tensor("
        try:
            body = np.array2string(self.numpy(), prefix=prefix, separator=", ", precision=4)
        except Exception as e:  # stale or freed: say so rather than fail in repr
            body = f"<{type(e).__name__}: {e}>"
        grad = ", requires_grad=True" if self.requires_grad else ""
        return (f"{prefix}{body},\n{' ' * len(prefix)}shape={list(self.shape)}, "
                f"dtype={self.dtype}, device={self.device}{grad})")

def _is_number(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_))


def _like_dtype(t: AGTensor):
    return None if t.dtype == "i32" else t.dtype


def _operand(o, like: AGTensor | None):
    """An operand of an ag_* function or a Python operator, next to ag tensor `like` (or None).

    Rule: an ag tensor is used as it is; a real number stays a number (a constant); anything
    else array-like (numpy arrays of any real or bool dtype, lists, 0-d arrays) becomes a constant
    ag tensor on `like`'s device, stored in `like`'s dtype (with no `like`: the current device and
    dtype, as ag_tensor()): float64 values round to the nearest float32 (or f16/bf16), int64
    values convert to float (exact up to 2**24 in f32), a 1-D array becomes a column [n, 1] and a
    0-d array a [1, 1], as ag_tensor() does. It never needs a gradient. Shapes then broadcast by
    ggmlR's rules (a column [m, 1], a row [1, n] or a [1, 1])."""
    if isinstance(o, AGTensor) or _is_number(o):
        return o
    if isinstance(o, (np.ndarray, list, tuple, np.generic)):
        if like is None:
            return ag_tensor(np.asarray(o))
        return ag_tensor(np.asarray(o), device=like.device_context.spec, dtype=_like_dtype(like))
    return o  # let the ag_* function name the bad type


def _storage_type(dtype, arr: np.ndarray) -> int:
    if dtype is None:
        return STATE.dtype
    if dtype in ("i32", "int32", np.int32):
        return I32
    if dtype not in DTYPES:
        raise GGMLError(f"dtype must be one of {sorted(DTYPES)} or 'i32', got {dtype!r}")
    return DTYPES[dtype]


def ag_tensor(data: ArrayLike | AGTensor, device: str | None = None, dtype: str | None = None,
              requires_grad: bool = False) -> AGTensor:
    """A tensor holding `data` (a vector becomes a column [n, 1]), in the persistent pool."""
    if isinstance(data, AGTensor):
        data = data.numpy()
    return AGTensor.from_numpy(data, device, dtype, requires_grad)


def ag_param(data: ArrayLike | AGTensor, device: str | None = None, dtype: str | None = None) -> AGTensor:
    """A trainable tensor: ag_tensor with requires_grad=True."""
    if dtype in ("i32", "int32", np.int32):
        raise GGMLError("ag_param: parameters must be floating point (f32, f16 or bf16), not i32")
    return ag_tensor(data, device, dtype, requires_grad=True)


def device_label(dc: DeviceContext) -> str:
    """ggmlR's label for a device: "cpu", "gpu" for a local GPU (Vulkan, CUDA), else the ggml name."""
    if dc.backend.is_cpu:
        return "cpu"
    dev = dc.backend.dev
    if dev != ffi.NULL and lib.ggml_backend_dev_type(dev) in (lib.GGML_BACKEND_DEVICE_TYPE_GPU,
                                                             lib.GGML_BACKEND_DEVICE_TYPE_IGPU):
        return "gpu"
    return dc.name


def ag_to_device(x: AGTensor, device: str) -> AGTensor:
    """x on another device: a copy there, or x itself when it is already on that device (as ggmlR).
    Moving between devices is always explicit."""
    if not isinstance(x, AGTensor):
        raise GGMLError(f"ag_to_device: expected an ag tensor, got {type(x).__name__}")
    if isinstance(device, str) and STATE.context(_fallback(device)) is x.device_context:
        return x
    out = ag_tensor(x.numpy(), device=device, dtype=x.dtype if x.dtype != "i32" else "i32",
                    requires_grad=x.requires_grad)
    return out


def _fallback(spec: str) -> str:
    """ag_device("gpu")'s fallback: "gpu" names the CPU where there is no GPU."""
    if spec.strip().lower() == "gpu" and not _has_gpu():
        warnings.warn("device 'gpu': no GPU here; using the CPU", RuntimeWarning, stacklevel=3)
        return "cpu"
    return spec


def same_device(*xs: AGTensor) -> DeviceContext:
    dc = xs[0].device_context
    for x in xs[1:]:
        if x.device_context is not dc:
            raise DeviceError(f"tensors on different devices ({dc.name} and {x.device_context.name}) in one op; "
                              "move one with ag_to_device()")
    return dc
