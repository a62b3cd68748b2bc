"""ag_dataloader: mini-batches of columns (samples), gathered on the device.

The whole data set is uploaded once. A batch is then one ggml_get_rows over
the columns of the stored matrix, with only the batch's column indices sent to
the device, into a fresh persistent tensor: a batch survives the
`with_grad_tape()` that follows it (that resets the pass pool), and a batch
kept from an earlier iteration is never overwritten by a later one.
"""
from __future__ import annotations

import math

import numpy as np

from .. import random as grandom
from ..bindings import lib
from ..errors import GGMLError
from ..tensor import AGTensor, ag_tensor

F32 = lib.GGML_TYPE_F32


def _gather_columns(ctx, x, ids):
    """Columns `ids` (0-based, i32 [n, 1]) of x [rows, cols] -> [rows, n], as f32."""
    return lib.ggml_get_rows(ctx, x, lib.ggml_reshape_1d(ctx, ids, ids.ne[0] * ids.ne[1]))


class _Labels:
    """Integer class labels: kept on the host, handed out as [1, batch] tensors of 0-based indices
    (the form ag_softmax_cross_entropy_loss reads as class indices)."""

    def __init__(self, labels: np.ndarray, device):
        self.labels, self.device = labels, device

    def batch(self, idx: np.ndarray) -> AGTensor:
        return ag_tensor(self.labels[idx].reshape(1, -1), device=self.device)


class _Columns:
    """A matrix [k, n] stored on the device once; batches are gathered columns."""

    def __init__(self, data, device, what: str):
        if isinstance(data, AGTensor):
            # a pass-pool tensor would go stale at the next with_grad_tape(): keep a persistent copy
            self.t = data if data.storage.pool.kind == "persistent" else ag_tensor(data)
        else:
            self.t = ag_tensor(_as_2d(data, what), device=device)

    @property
    def n(self) -> int:
        return self.t.ncol

    def batch(self, idx: np.ndarray) -> AGTensor:
        dc = self.t.device_context
        ids = ag_tensor(idx.reshape(-1, 1), device=dc.spec, dtype="i32")
        rows = self.t.nrow
        out = dc.persistent.alloc(F32, (rows, len(idx)))
        dc.executor.run(("dataloader_gather",), _gather_columns, [self.t.storage, ids.storage], None, out=[out])
        return AGTensor(out, (rows, len(idx)), dc)


def _as_2d(data, what: str) -> np.ndarray:
    arr = np.asarray(data)
    if arr.ndim != 2:
        raise GGMLError(f"ag_dataloader: {what} must be a matrix [features, n] (samples are columns), "
                        f"got shape {arr.shape}")
    return arr


def _is_label_vector(y) -> bool:
    if isinstance(y, AGTensor):
        return False
    arr = np.asarray(y)
    return arr.ndim == 1 and (arr.dtype.kind in "iub" or (arr.dtype.kind == "f" and np.all(arr == np.round(arr))))


class Batch(tuple):
    """One mini-batch: `x` and `y` (None without targets). Unpacks as `xb, yb = batch`, and
    answers by name as ggmlR's list does: `batch.x` or `batch["x"]` (R's `batch$x`)."""
    __slots__ = ()
    _fields = ("x", "y")

    def __new__(cls, x: AGTensor, y: AGTensor | None = None) -> "Batch":
        return super().__new__(cls, (x, y))

    @property
    def x(self) -> AGTensor:
        """The inputs [features, batch]."""
        return tuple.__getitem__(self, 0)

    @property
    def y(self) -> AGTensor | None:
        """The targets (None without them)."""
        return tuple.__getitem__(self, 1)

    def __getitem__(self, key):
        if isinstance(key, str):
            if key not in self._fields:
                raise KeyError(key)
            return getattr(self, key)
        return tuple.__getitem__(self, key)

    def __repr__(self) -> str:
        return f"Batch(x={self.x!r}, y={self.y!r})"


def _transposed(data):
    if data is None:
        return None
    if isinstance(data, AGTensor):
        return ag_tensor(data.numpy().T, device=data.device_context.spec, dtype=data.dtype)
    arr = np.asarray(data)
    return arr.T if arr.ndim == 2 else arr


class ag_dataloader:
    """Mini-batches `(xb, yb)` of the columns of `x` and `y`.

    x: numpy [features, n] (samples are columns, R's convention) or an ag tensor;
       with `col_major=False`, [n, features] (rows are samples; y likewise), transposed here.
    y: numpy [k, n] or an ag tensor (targets, batched like x), a 1-d vector of n
       integer class labels (0-based; each batch gets a [1, batch] tensor of them,
       usable directly as ag_softmax_cross_entropy_loss's target), a 1-d vector of
       real-valued targets (batched as [1, batch]), or None.
    Shuffled with ggmlpy's generator (`manual_seed`) at the start of every epoch.
    `len()` is the number of batches per epoch (the last one may be smaller unless drop_last).

    ggmlR's iterator API is there too: `n_batches()`, `has_next()`, `next_batch()`,
    `reset()` (a new order when shuffling), `epoch()` (reset, then the list of all batches)
    and `order` (this epoch's sample order, 0-based). As in ggmlR, these hand out complete
    batches only: `n_batches()` is n // batch_size."""

    def __init__(self, x, y=None, batch_size: int = 32, shuffle: bool = True, drop_last: bool = False,
                 device=None, col_major: bool = True):
        if int(batch_size) != batch_size or batch_size < 1:
            raise GGMLError(f"ag_dataloader: batch_size must be a positive integer, got {batch_size!r}")
        if not col_major:
            x, y = _transposed(x), (y if y is not None and np.ndim(y) == 1 else _transposed(y))
        self.col_major = bool(col_major)
        if device is None and isinstance(x, AGTensor):
            device = x.device_context.spec
        self.x = _Columns(x, device, "x")
        self.n = self.x.n
        if y is None:
            self.y = None
        elif _is_label_vector(y):
            labels = np.asarray(y).astype(np.int64)
            if labels.size and labels.min() < 0:
                raise GGMLError("ag_dataloader: class labels must be 0-based (non-negative)")
            self.y = _Labels(labels, self.x.t.device_context.spec)
            n_y = labels.size
        else:
            if not isinstance(y, AGTensor) and np.ndim(y) == 1:
                y = np.asarray(y).reshape(1, -1)  # one real-valued target per sample: a row
            self.y = _Columns(y, self.x.t.device_context.spec, "y")
            n_y = self.y.n
        if self.y is not None and n_y != self.n:
            hint = ""
            both_rows = isinstance(self.y, _Columns) and self.y.t.nrow == self.x.t.nrow
            if self.x.t.nrow == n_y or both_rows:  # x is [n, features]: PyTorch's layout
                hint = ("; x looks like [n, features] (rows as samples, PyTorch's layout): the ag_* API "
                        "takes samples as columns, [features, n], so pass x.T (and y.T for a [n, k] y), "
                        "or col_major=False")
            raise GGMLError(f"ag_dataloader: x has {self.n} samples (columns) but y has {n_y}{hint}")
        self.batch_size, self.shuffle, self.drop_last = int(batch_size), bool(shuffle), bool(drop_last)
        self._order: np.ndarray | None = None  # drawn on first use, so making a loader draws nothing
        self.pos = 0

    def __repr__(self) -> str:
        return (f"ag_dataloader | n={self.n} | batch_size={self.batch_size} | n_batches={self.n_batches()} | "
                f"shuffle={self.shuffle}")

    def __len__(self) -> int:
        if self.drop_last:
            return self.n // self.batch_size
        return math.ceil(self.n / self.batch_size)

    def _draw_order(self) -> np.ndarray:
        """A new sample order (draws from the generator when shuffling)."""
        return grandom.generator().permutation(self.n) if self.shuffle else np.arange(self.n)

    def _batch(self, idx: np.ndarray) -> Batch:
        return Batch(self.x.batch(idx), self.y.batch(idx) if self.y is not None else None)

    @property
    def order(self) -> np.ndarray:
        """This epoch's sample order, 0-based (ggmlR's `$order`, 1-based there)."""
        if self._order is None:
            self._order = self._draw_order()
        return self._order

    def __iter__(self):
        """One epoch of batches, in a new order; the last may be smaller unless drop_last."""
        order = self._order = self._draw_order()
        self.pos = self.n
        for b in range(len(self)):
            yield self._batch(order[b * self.batch_size:(b + 1) * self.batch_size])

    # -- ggmlR's iterator methods ------------------------------------------------------------------
    def n_batches(self) -> int:
        """The number of complete batches per epoch (ggmlR's n %/% batch_size)."""
        return self.n // self.batch_size

    def reset(self) -> None:
        """Start a new epoch: back to the first batch, with a new order when shuffling."""
        self._order = self._draw_order()
        self.pos = 0

    def has_next(self) -> bool:
        """Whether another complete batch is left in this epoch."""
        return self.pos + self.batch_size <= self.n

    def next_batch(self) -> Batch:
        """The next complete batch of this epoch (a GGMLError when none is left: call reset())."""
        if not self.has_next():
            raise GGMLError("ag_dataloader: no more batches; call reset() to start a new epoch")
        idx = self.order[self.pos:self.pos + self.batch_size]
        self.pos += self.batch_size
        return self._batch(idx)

    def epoch(self) -> list:
        """reset(), then every complete batch of the new epoch, as a list."""
        self.reset()
        out = []
        while self.has_next():
            out.append(self.next_batch())
        return out
