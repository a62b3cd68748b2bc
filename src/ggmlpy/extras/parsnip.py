"""ggmlR's parsnip engine functions (ggmlr_parsnip_fit_classif / _regr), over the scikit-learn
estimators: each returns a fitted GGMLClassifier or GGMLRegressor. ggmlR's object fields map to
the estimator's: class_names -> classes_, n_features -> n_features_in_, fit_time -> fit_time_,
model -> model_. scikit-learn is optional, so it is imported at the first call, not with ggmlpy.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ..errors import GGMLError


def _estimator(kind: str, hidden_layers, epochs, dropout, activation, learn_rate, batch_size, verbose,
               validation_split, callbacks, optimizer, backend, seed):
    try:
        from . import sklearn as estimators
    except ImportError as e:
        raise ImportError(f"ggmlr_parsnip_fit_{kind} trains a scikit-learn estimator; scikit-learn is not "
                          "installed (pip install ggmlpy[sklearn])") from e
    cls = estimators.GGMLClassifier if kind == "classif" else estimators.GGMLRegressor
    try:
        widths = tuple(int(h) for h in np.atleast_1d(hidden_layers))
    except (TypeError, ValueError):
        raise GGMLError(f"hidden_layers must be integers, got {hidden_layers!r}") from None
    return cls(hidden_layers=widths, epochs=epochs, dropout=dropout, activation=activation,
               learning_rate=learn_rate, batch_size=batch_size, verbose=verbose,
               validation_split=validation_split, callbacks=tuple(callbacks or ()), optimizer=optimizer,
               device="auto" if backend is None else backend, random_state=seed)


def ggmlr_parsnip_fit_classif(x: ArrayLike, y: ArrayLike, hidden_layers: int | Sequence[int] = (128, 64),
                              epochs: int = 10, dropout: float = 0.2, activation: str | None = "relu",
                              learn_rate: float | None = None, batch_size: int = 32, verbose: int = 0,
                              validation_split: float = 0.0, callbacks: Sequence = (), optimizer: str = "adam",
                              backend: str | None = "auto", seed: int | None = None, **_ignored: Any) -> Any:
    """ggmlR's parsnip classification engine: a GGMLClassifier (ggmlpy.sklearn) fitted on x [n, features] and
    labels y. learn_rate None keeps ggmlR's 1e-3; backend "auto" (the default device), "cpu",
    "gpu", "vulkan", ...; seed: the estimator's random_state."""
    return _estimator("classif", hidden_layers, epochs, dropout, activation, learn_rate, batch_size, verbose,
                      validation_split, callbacks, optimizer, backend, seed).fit(x, y)


def ggmlr_parsnip_fit_regr(x: ArrayLike, y: ArrayLike, hidden_layers: int | Sequence[int] = (128, 64),
                           epochs: int = 10, dropout: float = 0.2, activation: str | None = "relu",
                           learn_rate: float | None = None, batch_size: int = 32, verbose: int = 0,
                           validation_split: float = 0.0, callbacks: Sequence = (), optimizer: str = "adam",
                           backend: str | None = "auto", seed: int | None = None, **_ignored: Any) -> Any:
    """ggmlR's parsnip regression engine: a GGMLRegressor (mse loss) fitted on x and numeric y."""
    return _estimator("regr", hidden_layers, epochs, dropout, activation, learn_rate, batch_size, verbose,
                      validation_split, callbacks, optimizer, backend, seed).fit(x, y)


__all__ = ["ggmlr_parsnip_fit_classif", "ggmlr_parsnip_fit_regr"]
