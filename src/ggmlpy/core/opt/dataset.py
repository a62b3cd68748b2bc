"""ggml-opt's datasets: samples as columns of `data [ne_datapoint, ndata]` and `labels [ne_label,
ndata]` in host memory, also readable and writable as numpy `[ndata, ne]` (samples as rows)."""
from __future__ import annotations

from typing import Any, NoReturn

import numpy as np

from ...bindings import ffi, lib
from ...errors import GGMLError
from ..handles import OwnedPointer, Tensor
from .context import OptContext, opt_ptr

_TYPES = {lib.GGML_TYPE_F32: np.float32, lib.GGML_TYPE_I32: np.int32}


class OptDataset(OwnedPointer):
    """A ggml_opt dataset (freed by ggml_opt_dataset_free or garbage collection)."""

    RELEASE = "ggml_opt_dataset_free"

    def __init__(self, type_data, type_label, ne_datapoint, ne_label, ndata, ndata_shard):
        for name, v, lo in (("ne_datapoint", ne_datapoint, 1), ("ne_label", ne_label, 0), ("ndata", ndata, 1),
                            ("ndata_shard", ndata_shard, 1)):
            if int(v) < lo:
                raise GGMLError(f"ggml_opt_dataset_init: {name} must be >= {lo}, got {v}")
        if int(ndata) % int(ndata_shard):
            raise GGMLError("ggml_opt_dataset_init: ndata must be a multiple of ndata_shard")
        if type_data not in _TYPES or type_label not in _TYPES:
            raise GGMLError("ggml_opt_dataset_init: types must be GGML_TYPE_F32 or GGML_TYPE_I32")
        self.ptr = lib.ggml_opt_dataset_init(type_data, type_label, int(ne_datapoint), int(ne_label), int(ndata),
                                             int(ndata_shard))
        self.shape = (int(ndata), int(ne_datapoint), int(ne_label))
        self.types = (type_data, type_label)
        self.shard = int(ndata_shard)

    def _live(self):
        if self.ptr is None:
            raise GGMLError("the dataset was freed")
        return self.ptr

    def _view(self, t, ne, dtype):
        buf = ffi.buffer(t.data, self.shape[0] * ne * np.dtype(dtype).itemsize)
        return np.frombuffer(buf, dtype=dtype).reshape(self.shape[0], ne)


def ggml_opt_dataset_init(type_data: int, type_label: int, ne_datapoint: int, ne_label: int, ndata: int,
                          ndata_shard: int = 1) -> OptDataset:
    """A dataset of `ndata` samples of `ne_datapoint` values and `ne_label` labels."""
    return OptDataset(type_data, type_label, ne_datapoint, ne_label, ndata, ndata_shard)


def ggml_opt_dataset_free(dataset: OptDataset) -> None:
    """Free the dataset now."""
    dataset.free()


def ggml_opt_dataset_ndata(dataset: OptDataset) -> int:
    """Number of samples."""
    return int(lib.ggml_opt_dataset_ndata(dataset._live()))


def ggml_opt_dataset_data(dataset: OptDataset) -> np.ndarray:
    """The data as a writable numpy view [ndata, ne_datapoint] (samples as rows)."""
    return dataset._view(lib.ggml_opt_dataset_data(dataset._live()), dataset.shape[1], _TYPES[dataset.types[0]])


def ggml_opt_dataset_labels(dataset: OptDataset) -> np.ndarray:
    """The labels as a writable numpy view [ndata, ne_label]; None when the dataset has none
    (ne_label = 0), as ggmlR's NULL."""
    if dataset.shape[2] == 0:
        return None
    return dataset._view(lib.ggml_opt_dataset_labels(dataset._live()), dataset.shape[2], _TYPES[dataset.types[1]])


def ggml_opt_dataset_shuffle(opt_ctx: OptContext, dataset: OptDataset, idata: int = -1) -> None:
    """Shuffle the first `idata` samples (all for -1) with the optimizer context's RNG."""
    n = dataset.shape[0]
    idata = int(idata)
    if idata > n or (idata >= 0 and idata % dataset.shard):
        raise GGMLError(f"ggml_opt_dataset_shuffle: idata must be -1 or a multiple of {dataset.shard} <= {n}")
    lib.ggml_opt_dataset_shuffle(opt_ptr(opt_ctx), dataset._live(), idata)


def _bind(names, args, kw, what):
    if len(args) > len(names):
        raise TypeError(f"{what}: too many arguments")
    out = dict(zip(names, args))
    for k, v in kw.items():
        if k not in names or k in out:
            raise TypeError(f"{what}: unexpected or repeated argument {k!r}")
        out[k] = v
    return out


def ggml_opt_dataset_get_batch(dataset: OptDataset, *args: Any,
                               **kw: Any) -> tuple[np.ndarray, np.ndarray | None] | None:
    """ggml_opt_dataset_get_batch(dataset, batch_size, ibatch): batch `ibatch` of `batch_size`
    samples in the current (shuffled) order, as (data, labels) numpy [batch_size, ne] (labels
    None when the dataset has none).

    ggmlR's form, ggml_opt_dataset_get_batch(dataset, data_batch, labels_batch, ibatch), copies
    the batch into two allocated tensors (data [ne_datapoint, batch], labels [ne_label, batch] or
    None) instead, and returns None."""
    first = args[0] if args else kw.get("data_batch", kw.get("batch_size"))
    if isinstance(first, Tensor):
        a = _bind(("data_batch", "labels_batch", "ibatch"), args, kw, "ggml_opt_dataset_get_batch")
        return _get_batch_into(dataset, a["data_batch"], a.get("labels_batch"), a.get("ibatch", 0))
    a = _bind(("batch_size", "ibatch"), args, kw, "ggml_opt_dataset_get_batch")
    batch_size, ibatch = a["batch_size"], a["ibatch"]
    n, ne, nl = dataset.shape
    batch_size, ibatch = int(batch_size), int(ibatch)
    if batch_size < 1 or batch_size % dataset.shard or ibatch < 0 or (ibatch + 1) * batch_size > n:
        raise GGMLError(f"ggml_opt_dataset_get_batch: batch {ibatch} of {batch_size} is outside the {n} samples")
    data = np.empty((batch_size, ne), _TYPES[dataset.types[0]])
    labels = np.empty((batch_size, nl), _TYPES[dataset.types[1]]) if nl else None
    lib.ggml_opt_dataset_get_batch_host(dataset._live(), ffi.from_buffer(data), data.nbytes,
                                        ffi.from_buffer(labels) if nl else ffi.NULL, ibatch)
    return data, labels


def _get_batch_into(dataset, data_batch, labels_batch, ibatch):
    """ggml_opt_dataset_get_batch's tensor form, with every assertion of ggml's checked first."""
    n, ne, nl = dataset.shape
    ibatch = int(ibatch)
    d = data_batch.ptr
    if d.data == ffi.NULL or not lib.ggml_is_contiguous(d) or d.type != dataset.types[0]:
        raise GGMLError("ggml_opt_dataset_get_batch: data_batch must be an allocated, contiguous tensor of the data's type")
    if int(lib.ggml_nelements(d)) % ne:
        raise GGMLError(f"ggml_opt_dataset_get_batch: data_batch's size is not a multiple of ne_datapoint {ne}")
    bs = int(lib.ggml_nelements(d)) // ne
    if bs % dataset.shard or ibatch < 0 or (ibatch + 1) * bs > n:
        raise GGMLError(f"ggml_opt_dataset_get_batch: batch {ibatch} of {bs} is outside the {n} samples")
    lp = ffi.NULL
    if labels_batch is None and nl:
        raise GGMLError("ggml_opt_dataset_get_batch: the dataset has labels: give a labels_batch tensor too")
    if labels_batch is not None:
        lp = labels_batch.ptr
        if nl == 0:
            raise GGMLError("ggml_opt_dataset_get_batch: the dataset has no labels")
        if lp.data == ffi.NULL or not lib.ggml_is_contiguous(lp) or lp.type != dataset.types[1] \
                or int(lib.ggml_nelements(lp)) != nl * bs:
            raise GGMLError(f"ggml_opt_dataset_get_batch: labels_batch must be an allocated, contiguous "
                            f"[{nl}, {bs}] tensor of the labels' type")
    lib.ggml_opt_dataset_get_batch(dataset._live(), d, lp, ibatch)


def ggml_opt_dataset_weights(dataset: OptDataset) -> NoReturn:
    """Per-sample weights exist only in ggmlR's patched ggml; use ggml_fit(sample_weight=...)."""
    raise GGMLError("ggml_opt_dataset_weights exists only in ggmlR's patched ggml; "
                    "use ggml_fit(sample_weight=...)")


__all__ = [n for n in dir() if n.startswith("ggml_opt_")]
