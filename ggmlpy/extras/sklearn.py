"""scikit-learn estimators: ggmlR's mlr3 learners (LearnerClassifGGML, LearnerRegrGGML) and
parsnip engine as Python users meet them, GGMLClassifier and GGMLRegressor.

Each fit builds ggmlR's default MLP (ggml_default_mlp: dense layers with `activation`, dropout
after each, a softmax or linear output), compiles it with ggmlR's loss for the task
(categorical cross-entropy or mse) and trains it on ggml's ggml_opt loop (ggml_fit), as
ggmlR's learners do. The hyper-parameters are the learners': hidden_layers, activation,
dropout, epochs, batch_size, optimizer, learning_rate, validation_split, callbacks, device,
verbose; ggmlR's `seed` is scikit-learn's `random_state`.

Divergences from ggmlR, for scikit-learn's contracts: a batch larger than the data is cut to
the data (ggml_fit refuses it), and predictions are computed in batches of one fixed size
(zero-padded), so a sample's prediction does not depend on which others are predicted with it.
The same random_state gives the same model on a quiet and on a busy machine: the load never
changes a result (docs/reproducibility.md).
ggml_opt drops the remainder of the data that does not fill a batch; the rows are shuffled by
`random_state` first, and ggml_opt reshuffles every epoch, so each epoch drops others.
"""
from __future__ import annotations

import time

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, column_or_1d, validate_data

from ..keras.api import ggml_compile, ggml_default_mlp

PREDICT_BATCH = 256  # the one graph shape every prediction runs in


class _GGMLEstimator(BaseEstimator):
    """What the classifier and the regressor share: the parameters, fitting, predicting."""

    _task = ""   # "classif" or "regr" (ggml_default_mlp's task_type)
    _loss = ""

    def __init__(self, hidden_layers=(128, 64), activation="relu", dropout=0.2, epochs=10, batch_size=32,
                 optimizer="adam", learning_rate=None, validation_split=0.0, callbacks=(), device="cpu",
                 random_state=None, verbose=0):
        self.hidden_layers = hidden_layers
        self.activation = activation
        self.dropout = dropout
        self.epochs = epochs
        self.batch_size = batch_size
        self.optimizer = optimizer
        self.learning_rate = learning_rate
        self.validation_split = validation_split
        self.callbacks = callbacks
        self.device = device
        self.random_state = random_state
        self.verbose = verbose

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = self.random_state is None
        return tags

    # -- fitting -----------------------------------------------------------------------------------
    def _check_params(self) -> None:
        """scikit-learn validates parameters at fit, not in __init__ (its set_params contract)."""
        def whole(name, low):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
                raise ValueError(f"{type(self).__name__}: {name} must be an integer >= {low}, got {v!r}")
        whole("epochs", 1)
        whole("batch_size", 1)
        if self.optimizer not in ("adam", "sgd"):
            raise ValueError(f"{type(self).__name__}: optimizer must be 'adam' or 'sgd', got {self.optimizer!r}")
        if self.learning_rate is not None and not (np.isscalar(self.learning_rate) and
                                                   np.isfinite(self.learning_rate) and self.learning_rate > 0):
            raise ValueError(f"{type(self).__name__}: learning_rate must be a positive number or None "
                             f"(ggmlR's 1e-3), got {self.learning_rate!r}")

    def _fit(self, x: np.ndarray, targets: np.ndarray, sample_weight, n_out: int):
        self._check_params()
        n = x.shape[0]
        model = ggml_default_mlp(x.shape[1], n_out, self._task, hidden_layers=tuple(self.hidden_layers),
                                 activation=self.activation, dropout=self.dropout)
        if self.random_state is not None:
            # two streams, so that the data's size changes the order but not the initial weights
            seed = check_random_state(self.random_state).randint(0, 2 ** 31 - 1)
            init, shuffle = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
            model._rng = init   # this estimator's initialisation and dropout masks
            order = shuffle.permutation(n)   # the first epoch's order; ggml_opt reshuffles the later ones
            x, targets = x[order], targets[order]
            sample_weight = None if sample_weight is None else sample_weight[order]
        ggml_compile(model, optimizer=self.optimizer, loss=self._loss, backend=self.device,
                     lr=self.learning_rate, metrics=())
        t0 = time.perf_counter()
        model.fit(x, targets, epochs=int(self.epochs), batch_size=min(int(self.batch_size), n),
                  validation_split=float(self.validation_split), sample_weight=sample_weight,
                  callbacks=list(self.callbacks or ()), verbose=self.verbose)
        self.fit_time_ = time.perf_counter() - t0
        self.model_ = model
        self.history_ = model.history
        return self

    def _check_weights(self, sample_weight, x):
        if sample_weight is None:
            return None
        w = _check_sample_weight(sample_weight, x, dtype=np.float64)
        if not np.any(w > 0):
            raise ValueError(f"{type(self).__name__}: every sample weight is zero; nothing to fit")
        return w

    # -- predicting --------------------------------------------------------------------------------
    def _outputs(self, X) -> np.ndarray:
        check_is_fitted(self, "model_")
        x = validate_data(self, X, reset=False, dtype=np.float32)
        n = x.shape[0]
        padded = -(-n // PREDICT_BATCH) * PREDICT_BATCH
        if padded != n:
            x = np.concatenate([x, np.zeros((padded - n, x.shape[1]), np.float32)])
        return np.asarray(self.model_.predict(x, batch_size=PREDICT_BATCH))[:n]


class GGMLClassifier(ClassifierMixin, _GGMLEstimator):
    """A multilayer perceptron classifier trained by ggml (ggmlR's LearnerClassifGGML).

    hidden_layers: widths of the hidden layers (ggmlR's default (128, 64)); activation: theirs
    ("relu"); dropout: the rate after each (0.2); epochs (10), batch_size (32); optimizer "adam"
    (ggml's AdamW) or "sgd"; learning_rate (None: ggmlR's 1e-3); validation_split: the fraction
    of batches ggml_fit keeps out for validation (history_'s val_loss); callbacks: ggml_fit's;
    device: "cpu", "gpu", "vulkan", ... ; random_state: None (ggmlpy's generator, seeded by
    ggml_set_seed), an int or a RandomState; verbose: ggml_fit's progress.

    After fit: classes_ (the labels, sorted; any type np.unique sorts, strings included),
    n_features_in_ (and feature_names_in_ for a DataFrame), model_ (the trained Keras-like
    model), history_ (ggml_fit's history) and fit_time_ (seconds)."""

    _task, _loss = "classif", "categorical_crossentropy"

    def fit(self, X, y, sample_weight=None):
        """Train on X [n_samples, n_features] and labels y [n_samples]; returns self."""
        x, y = validate_data(self, X, y, dtype=np.float32)
        y = column_or_1d(y, warn=True)
        check_classification_targets(y)
        w = self._check_weights(sample_weight, x)
        self.classes_, codes = np.unique(y, return_inverse=True)
        onehot = np.eye(len(self.classes_), dtype=np.float32)[codes]
        return self._fit(x, onehot, w, len(self.classes_))

    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities [n_samples, n_classes], columns in the order of classes_."""
        return self._outputs(X).astype(np.float64)

    def predict(self, X) -> np.ndarray:
        """The most probable class of each sample (the first, on a tie)."""
        best = np.argmax(self.predict_proba(X), axis=1)
        return self.classes_[best]


class GGMLRegressor(RegressorMixin, _GGMLEstimator):
    """A multilayer perceptron regressor trained by ggml with the mse loss (ggmlR's
    LearnerRegrGGML); parameters as GGMLClassifier's. y may have several columns (one output
    each); predict returns y's shape."""

    _task, _loss = "regr", "mse"

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

    def fit(self, X, y, sample_weight=None):
        """Train on X [n_samples, n_features] and y [n_samples] or [n_samples, n_outputs]; returns self."""
        x, y = validate_data(self, X, y, dtype=np.float32, multi_output=True, y_numeric=True)
        w = self._check_weights(sample_weight, x)
        self._y_1d = y.ndim == 1
        y2 = np.asarray(y, dtype=np.float32).reshape(x.shape[0], -1)
        return self._fit(x, y2, w, y2.shape[1])

    def predict(self, X) -> np.ndarray:
        """Predictions, [n_samples] for a 1-D y at fit, else [n_samples, n_outputs]."""
        out = self._outputs(X).astype(np.float64)
        return out[:, 0] if self._y_1d else out


__all__ = ["GGMLClassifier", "GGMLRegressor"]
