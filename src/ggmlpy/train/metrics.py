"""Predictions and accuracy for the common case: a model on [features, n] data, samples as columns."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike

from ..autograd.ops import ag_slice
from ..autograd.tape import no_grad
from ..errors import GGMLError
from ..tensor import AGTensor, ag_tensor


def _columns(x, what: str):
    if isinstance(x, AGTensor):
        return x, x.ncol
    arr = np.asarray(x)
    if arr.ndim == 1:
        arr = arr.reshape(-1, 1)
    if arr.ndim != 2 or arr.dtype.kind not in "biuf":
        raise GGMLError(f"{what}: x must be an ag tensor or a numeric [features, n] matrix, got {arr.shape} "
                        f"of {arr.dtype}")
    return arr, arr.shape[1]


def ag_predict(model: Callable[[AGTensor], AGTensor], x: ArrayLike | AGTensor, batch_size: int = 1024) -> np.ndarray:
    """The model's outputs for `x` ([features, n]: samples are columns; a numpy array or an ag
    tensor), as a numpy array [outputs, n] in the output's dtype. Runs in eval mode (no
    dropout, batch norm's running statistics) without recording, `batch_size` columns at a
    time; the model's mode is restored afterwards."""
    if int(batch_size) < 1:
        raise GGMLError(f"ag_predict: batch_size must be at least 1, got {batch_size}")
    data, n = _columns(x, "ag_predict")
    was_training = getattr(model, "training", None)
    if was_training is not None:
        model.set_training(False)
    try:
        outs = []
        with no_grad():
            for lo in range(0, n, int(batch_size)):
                hi = min(n, lo + int(batch_size))
                xb = (ag_slice(data, None, slice(lo, hi)) if isinstance(data, AGTensor)
                      else ag_tensor(data[:, lo:hi]))
                out = model(xb)
                if not isinstance(out, AGTensor) or out.ncol != hi - lo:
                    raise GGMLError(f"ag_predict: the model must map [features, {hi - lo}] to [outputs, "
                                    f"{hi - lo}] (samples as columns), got {getattr(out, 'shape', type(out))}")
                outs.append(out.numpy())
    finally:
        if was_training is not None:
            model.set_training(was_training)
    return np.concatenate(outs, axis=1)


def ag_accuracy(model: Callable[[AGTensor], AGTensor], x: ArrayLike | AGTensor, y: ArrayLike | AGTensor,
                batch_size: int = 1024) -> float:
    """The fraction of samples (columns of `x`) the model classifies correctly.

    `y`: 0-based class labels (n integers, or a [1, n] matrix or ag tensor), or one-hot
    [classes, n]. The predicted class is the row with the largest output; a model with one
    output row is read as a probability, class 1 when above 0.5."""
    out = ag_predict(model, x, batch_size)
    labels = y.numpy() if isinstance(y, AGTensor) else np.asarray(y)
    if labels.ndim == 2 and labels.shape[0] > 1 and labels.shape == out.shape:
        labels = labels.argmax(axis=0)  # one-hot
    labels = labels.ravel()
    if labels.size != out.shape[1]:
        raise GGMLError(f"ag_accuracy: {labels.size} labels for {out.shape[1]} samples (columns of x)")
    pred = (out[0] > 0.5).astype(np.int64) if out.shape[0] == 1 else out.argmax(axis=0)
    return float(np.mean(pred == labels))
