"""AGTensor's methods that are ag_* calls: the Python operators, `.T`, `.backward()` and indexing.

tensor.py sits below autograd (the ag_* functions take and make AGTensors), so these methods are
set on the class by the layer that defines the ag_* functions, through one hook, install(), which
the autograd package runs once when it is imported (as jax's array_methods sets its Array's
operators). Every AGTensor is made after `import ggmlpy`, which imports autograd, so a tensor
always has them; tensor.py declares them for type checkers.
"""
from __future__ import annotations

import numpy as np

from ..errors import GGMLError
from ..tensor import AGTensor, _is_number, _like_dtype, _operand, ag_tensor
from . import ops
from .engine import backward as _backward


# -- Python operators, on top of the ag_* functions -------------------------------------------------
# The other operand may be an ag tensor, a number or a numpy array (see tensor._operand for the rule).
def __add__(self, o):
    return ops.ag_add(self, _operand(o, self))


def __sub__(self, o):
    return ops.ag_sub(self, _operand(o, self))


def __rsub__(self, o):
    return ops.ag_add(ops.ag_neg(self), _operand(o, self))


def __mul__(self, o):
    o = _operand(o, self)
    return ops.ag_scale(self, o) if _is_number(o) else ops.ag_mul(self, o)


def __truediv__(self, o):
    o = _operand(o, self)
    return ops.ag_scale(self, 1.0 / o) if _is_number(o) else ops.ag_div(self, o)


def __rtruediv__(self, o):
    o = _operand(o, self)
    if _is_number(o):  # c / t: a constant tensor of c's, divided element-wise
        o = ag_tensor(np.full(self.shape, float(o)), device=self.device_context.spec, dtype=_like_dtype(self))
    return ops.ag_div(o, self)


def __neg__(self):
    return ops.ag_neg(self)


def __matmul__(self, o):
    return ops.ag_matmul(self, _operand(o, self))


def __rmatmul__(self, o):
    return ops.ag_matmul(_operand(o, self), self)


def __pow__(self, p):
    return ops.ag_pow(self, p)


# -- attributes and methods -----------------------------------------------------------------------------
def T(self) -> AGTensor:
    """The transpose (ag_transpose), tracked by the tape."""
    return ops.ag_transpose(self)


def backward(self, grad: AGTensor | None = None, retain_all: bool = False):
    """`loss.backward()`: gradients into the leaves' `.grad` (returns the gradient map), with
    PyTorch's rule where ggmlR has none: a loss of more than one element needs `grad`, the
    gradient of what it feeds (a GGMLError otherwise). ggmlR's `backward(loss)` keeps its
    own rule: every element of a non-scalar loss is seeded with 1."""
    if grad is None and self.size != 1:
        raise GGMLError(f"backward: grad can be implicitly created only for a loss of one element; this one "
                        f"has shape {list(self.shape)}. Pass grad= (a tensor of that shape), reduce the loss "
                        "first (ag_sum, ag_mean), or call backward(loss), ggmlR's form, which seeds every "
                        "element with 1")
    return _backward(self, grad, retain_all)


# -- indexing ---------------------------------------------------------------------------------------------
def __getitem__(self, key) -> AGTensor:
    """`t[i]` (row i, as [1, ncol]), `t[i, j]` ([1, 1]), `t[:, 1:3]`, `t[-1]`, `t[:, :, b]`: numpy's
    rules for ints and step-1 slices, but no dim is dropped (an int keeps a dim of 1, so a
    matrix stays a matrix). Tracked by the tape (ag_slice)."""
    if not isinstance(key, tuple):
        key = (key,)
    if len(key) > self.ndim:
        raise IndexError(f"an ag tensor of {self.ndim} dims got {len(key)} indices")
    key = key + (slice(None),) * (self.ndim - len(key))
    names = ("row", "column", "dim-3", "dim-4")
    sl = [_index(k, n, axis) for k, n, axis in zip(key, self.shape, names)]
    if all(s == slice(0, n) for s, n in zip(sl, self.shape)):
        return self
    return ops.ag_slice(self, *sl)


def _index(k, n: int, axis: str) -> slice:
    """One index of t[rows, cols] as a step-1 slice within range (numpy's rules)."""
    if isinstance(k, (bool, np.bool_)):
        raise IndexError(f"boolean {axis} index: ag tensors take ints and step-1 slices")
    if isinstance(k, (int, np.integer)):
        i = int(k)
        if not -n <= i < n:
            raise IndexError(f"{axis} index {i} is out of range for {n} {axis}s")
        i %= n
        return slice(i, i + 1)
    if isinstance(k, slice):
        lo, hi, step = k.indices(n)
        if step != 1:
            raise IndexError(f"{axis} slice {k}: only step 1 is supported")
        if hi <= lo:
            raise IndexError(f"{axis} slice {k} selects nothing from {n} {axis}s")
        return slice(lo, hi)
    raise IndexError(f"{axis} index of type {type(k).__name__}: ag tensors take ints and step-1 slices "
                     "(use ag_slice, or gather with ag_embedding for index lists)")


# name on AGTensor -> its implementation; a + b == b + a and a * b == b * a (ag_add broadcasts its
# second argument, ag_mul either), so the reflected forms are the forward ones
METHODS = {
    "__add__": __add__, "__radd__": __add__, "__sub__": __sub__, "__rsub__": __rsub__,
    "__mul__": __mul__, "__rmul__": __mul__, "__truediv__": __truediv__, "__rtruediv__": __rtruediv__,
    "__neg__": __neg__, "__matmul__": __matmul__, "__rmatmul__": __rmatmul__, "__pow__": __pow__,
    "__getitem__": __getitem__, "T": property(T), "backward": backward,
}


def install(cls: type = AGTensor) -> None:
    """Set METHODS on the tensor class (the autograd package does, once, at import)."""
    for name, fn in METHODS.items():
        setattr(cls, name, fn)
