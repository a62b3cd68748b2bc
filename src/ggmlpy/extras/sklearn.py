"""scikit-learn estimators: ggmlR's mlr3 learners (LearnerClassifGGML, LearnerRegrGGML) and
parsnip engine as Python users meet them, GGMLClassifier and GGMLRegressor.

Each fit builds ggmlR's default MLP (ggml_default_mlp: dense layers with `activation`, dropout
after each, a softmax or linear output), compiles it with ggmlR's loss for the task
(categorical cross-entropy or mse) and trains it on ggml's ggml_opt loop (ggml_fit), as
ggmlR's learners do. The hyper-parameters are the learners': hidden_layers, activation,
dropout, epochs, batch_size, optimizer, learning_rate, validation_split, callbacks, device,
verbose; ggmlR's `seed` is scikit-learn's `random_state`.

ggmlR's learner options: `model_fn(task, n_features, n_out, params)` builds the model instead
(task: the training data (X, y); params: get_params()). An uncompiled Keras-like model (Sequential
or Functional) is compiled and trained as above; an autograd module (ag_sequential or any
ggmlpy.nn Module, mapping [features, batch] to raw outputs [n_out, batch]: logits for the
classifier) is trained by an autograd loop (ag_fit: the task's loss, softmax cross-entropy or
mse, with `optimizer` at `learning_rate`, gradients clipped to `max_grad_norm` when finite), or by
`training_fn(model, x, y, params)` (x [rows, features], y one-hot [rows, classes] or [rows,
outputs]) when given, which returns the trained module.

Divergences from ggmlR, for scikit-learn's contracts: a batch larger than the data is cut to
the data (ggml_fit refuses it), and predictions are computed in batches of one fixed size
(zero-padded), so a sample's prediction does not depend on which others are predicted with it.
The same random_state gives the same model on a quiet and on a busy machine: the load never
changes a result (docs/reproducibility.md).
ggml_opt drops the remainder of the data that does not fill a batch; the rows are shuffled by
`random_state` first, and ggml_opt reshuffles every epoch, so each epoch drops others.
"""
from __future__ import annotations

import contextlib
import time
import warnings

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, column_or_1d, validate_data

from .. import random as ggml_random
from ..autograd.ops import ag_mse_loss, ag_softmax_cross_entropy_loss
from ..keras.api import ggml_compile, ggml_default_mlp
from ..keras.model import _Model
from ..nn.module import Module
from ..optim.optimizers import optimizer_adam, optimizer_sgd
from ..train.data import ag_dataloader
from ..train.fit import ag_fit
from ..train.metrics import ag_predict

PREDICT_BATCH = 256  # the one graph shape every prediction runs in
AG_LEARNING_RATE = 1e-3  # ggmlR's learners' learning_rate default


@contextlib.contextmanager
def _seeded(seed):
    """ggmlpy's generator seeded with `seed` inside the block (None: left as it is), and restored
    after it: an autograd module draws its weights, dropout masks and batch order from it."""
    if seed is None:
        yield
        return
    state = ggml_random.get_rng_state()
    ggml_random.manual_seed(seed)
    try:
        yield
    finally:
        ggml_random.set_rng_state(state)


class _AutogradWeights:
    """A fitted autograd module in a pickle: its state_dict (numpy). ggmlR's learners marshal the
    same way: the module is rebuilt by model_fn with task None (a model_fn that reads the task
    cannot be rebuilt), then given these weights."""

    def __init__(self, state: dict):
        self.state = state


class _GGMLEstimator(BaseEstimator):
    """What the classifier and the regressor share: the parameters, fitting, predicting."""

    _task = ""   # "classif" or "regr" (ggml_default_mlp's task_type)
    _loss = ""

    def __init__(self, hidden_layers=(128, 64), activation="relu", dropout=0.2, epochs=10, batch_size=32,
                 optimizer="adam", learning_rate=None, validation_split=0.0, callbacks=(), device="cpu",
                 random_state=None, verbose=0, model_fn=None, training_fn=None, max_grad_norm=float("inf")):
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
        self.model_fn = model_fn
        self.training_fn = training_fn
        self.max_grad_norm = max_grad_norm

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
        m = self.max_grad_norm
        if isinstance(m, (bool, np.bool_)) or not isinstance(m, (int, float, np.integer, np.floating)) or not m >= 0:
            raise ValueError(f"{type(self).__name__}: max_grad_norm must be a number >= 0 (inf: no clipping), "
                             f"got {m!r}")
        for name in ("model_fn", "training_fn"):
            if getattr(self, name) is not None and not callable(getattr(self, name)):
                raise ValueError(f"{type(self).__name__}: {name} must be a function or None, "
                                 f"got {getattr(self, name)!r}")

    def _seed(self):
        """The int this fit's random numbers derive from, or None (random_state None)."""
        if self.random_state is None:
            return None
        return int(check_random_state(self.random_state).randint(0, 2 ** 31 - 1))

    def _build(self, x, y, n_out: int, seed):
        """ggmlR's builder: model_fn(task, n_features, n_out, params), or the default MLP."""
        if self.model_fn is None:
            return ggml_default_mlp(x.shape[1], n_out, self._task, hidden_layers=tuple(self.hidden_layers),
                                    activation=self.activation, dropout=self.dropout)
        with _seeded(seed):  # an autograd module draws its initial weights as it is built
            model = self.model_fn((x, y), x.shape[1], n_out, self.get_params(deep=False))
        if isinstance(model, _Model):
            if model.compiled:
                raise ValueError(f"{type(self).__name__}: model_fn must return an uncompiled model; the "
                                 "estimator compiles it with its task's loss")
            return model
        if isinstance(model, Module):
            return model
        raise ValueError(f"{type(self).__name__}: model_fn must return an uncompiled Keras-like model "
                         "(Sequential or Functional) or an autograd module (ag_sequential), got "
                         f"{type(model).__name__}")

    def _fit(self, x: np.ndarray, y, targets: np.ndarray, sample_weight, n_out: int):
        """x [rows, features]; y as given (the task's labels or values); targets: the model's
        outputs to learn, [rows, n_out]."""
        self._check_params()
        seed = self._seed()
        # two streams for an autograd module too: its initial weights, then its batches and masks
        init_seed, train_seed = (None, None) if seed is None else \
            (int(s.generate_state(1)[0]) for s in np.random.SeedSequence(seed).spawn(2))
        model = self._build(x, y, n_out, init_seed)
        if isinstance(model, Module):
            return self._fit_autograd(model, x, targets, sample_weight, train_seed)
        # ggmlR's learners ignore both here; refused, so that a setting is never silently without effect
        for name, unset in (("training_fn", self.training_fn is None), ("max_grad_norm", np.isinf(self.max_grad_norm))):
            if not unset:
                raise ValueError(f"{type(self).__name__}: {name} applies to an autograd module (a model_fn "
                                 "returning an ag_sequential); this model trains on ggml_fit")
        n = x.shape[0]
        if seed is not None:
            # two streams, so that the data's size changes the order but not the initial weights
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

    def _fit_autograd(self, model: Module, x, targets, sample_weight, seed):
        """ggmlR's autograd path: training_fn(model, x, y, params), or the default loop."""
        if sample_weight is not None:
            warnings.warn(f"{type(self).__name__}: sample_weight is ignored by an autograd module's training "
                          "loop (as by ggmlR's learners); only a Keras-like model_fn applies it", stacklevel=4)
        if self.callbacks:
            raise ValueError(f"{type(self).__name__}: callbacks are ggml_fit's; an autograd module's loop takes "
                             "none (a training_fn can run ag_fit with its own)")
        if self.device != "cpu":
            raise ValueError(f"{type(self).__name__}: device chooses ggml_fit's backend; an autograd module "
                             "computes where its parameters live (set ag_device before fit)")
        t0 = time.perf_counter()
        with _seeded(seed):
            if self.training_fn is not None:
                trained = self.training_fn(model, x, targets, self.get_params(deep=False))
                if not isinstance(trained, Module):
                    raise ValueError(f"{type(self).__name__}: training_fn must return the trained autograd "
                                     f"module, got {type(trained).__name__}")
                model, history = trained, None
            else:
                history = self._train_autograd(model, x, targets)
        self.fit_time_ = time.perf_counter() - t0
        self.model_ = model
        self.history_ = history
        # what rebuilds the module when the estimator is unpickled (its tensors live in ggml's memory)
        self._rebuild_ = (x.shape[1], targets.shape[1], self.get_params(deep=False))
        return self

    def __getstate__(self):
        state = super().__getstate__()
        if isinstance(state.get("model_"), Module):  # a copy: the state may be this object's own __dict__
            state = dict(state, model_=_AutogradWeights(state["model_"].state_dict()))
        return state

    def __setstate__(self, state):
        weights = state.get("model_")
        if isinstance(weights, _AutogradWeights):
            n_features, n_out, params = state["_rebuild_"]
            with _seeded(0):  # the draws of the rebuild are overwritten: they leave the generator alone
                model = params["model_fn"](None, n_features, n_out, params)
            if not isinstance(model, Module):
                raise ValueError(f"{type(self).__name__}: unpickling rebuilds the autograd module with "
                                 f"model_fn(None, {n_features}, {n_out}, params), which returned "
                                 f"{type(model).__name__}")
            model.load_state_dict(weights.state)
            state = dict(state, model_=model)
        super().__setstate__(state)

    def _train_autograd(self, model: Module, x, targets):
        """The default loop: minibatches of the columns (samples as columns, the ag_* convention),
        the task's loss on the module's raw outputs, optimizer at learning_rate, clipping."""
        params = model.parameters()
        lr = AG_LEARNING_RATE if self.learning_rate is None else float(self.learning_rate)
        opt = (optimizer_sgd if self.optimizer == "sgd" else optimizer_adam)(params, lr=lr)
        n = x.shape[0]
        n_val = int(n * float(self.validation_split))
        if n_val and n - n_val < 1:
            raise ValueError(f"{type(self).__name__}: validation_split {self.validation_split} leaves no rows "
                             f"to train on ({n} rows)")
        order = ggml_random.generator().permutation(n) if n_val else np.arange(n)
        train, val = order[:n - n_val], order[n - n_val:]
        bs = min(int(self.batch_size), len(train))
        loader = ag_dataloader(x[train].T, targets[train].T, batch_size=bs, shuffle=True)
        val_loader = ag_dataloader(x[val].T, targets[val].T, batch_size=bs, shuffle=False) if n_val else None
        loss = ag_softmax_cross_entropy_loss if self._task == "classif" else ag_mse_loss
        clip = None if np.isinf(self.max_grad_norm) else float(self.max_grad_norm)
        return ag_fit(model, loss, opt, loader, int(self.epochs), val_loader=val_loader,
                      progress=bool(self.verbose), clip_grad=clip)

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
        if isinstance(self.model_, Module):  # samples as columns in and out
            return ag_predict(self.model_, x.T, batch_size=PREDICT_BATCH).T.astype(np.float64)[:n]
        return np.asarray(self.model_.predict(x, batch_size=PREDICT_BATCH))[:n]


class GGMLClassifier(ClassifierMixin, _GGMLEstimator):
    """A multilayer perceptron classifier trained by ggml (ggmlR's LearnerClassifGGML).

    hidden_layers: widths of the hidden layers (ggmlR's default (128, 64)); activation: theirs
    ("relu"); dropout: the rate after each (0.2); epochs (10), batch_size (32); optimizer "adam"
    (ggml's AdamW) or "sgd"; learning_rate (None: ggmlR's 1e-3); validation_split: the fraction
    of batches ggml_fit keeps out for validation (history_'s val_loss); callbacks: ggml_fit's;
    device: "cpu", "gpu", "vulkan", ... ; random_state: None (ggmlpy's generator, seeded by
    ggml_set_seed), an int or a RandomState; verbose: ggml_fit's progress. model_fn,
    training_fn, max_grad_norm (inf: no clipping): ggmlR's learner options, see the module's
    documentation; with an autograd module, learning_rate and max_grad_norm tune its loop.

    After fit: classes_ (the labels, sorted; any type np.unique sorts, strings included),
    n_features_in_ (and feature_names_in_ for a DataFrame), model_ (the trained Keras-like
    model or autograd module), history_ (ggml_fit's or ag_fit's history; None after a
    training_fn) and fit_time_ (seconds)."""

    _task, _loss = "classif", "categorical_crossentropy"

    def fit(self, X, y, sample_weight=None):
        """Train on X [n_samples, n_features] and labels y [n_samples]; returns self."""
        x, y = validate_data(self, X, y, dtype=np.float32)
        y = column_or_1d(y, warn=True)
        check_classification_targets(y)
        w = self._check_weights(sample_weight, x)
        self.classes_, codes = np.unique(y, return_inverse=True)
        onehot = np.eye(len(self.classes_), dtype=np.float32)[codes]
        return self._fit(x, y, onehot, w, len(self.classes_))

    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities [n_samples, n_classes], columns in the order of classes_."""
        out = self._outputs(X).astype(np.float64)
        if isinstance(self.model_, Module):  # an autograd module's raw outputs are logits
            e = np.exp(out - out.max(axis=1, keepdims=True))
            out = e / e.sum(axis=1, keepdims=True)
        return out

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
        return self._fit(x, y, y2, w, y2.shape[1])

    def predict(self, X) -> np.ndarray:
        """Predictions, [n_samples] for a 1-D y at fit, else [n_samples, n_outputs]."""
        out = self._outputs(X).astype(np.float64)
        return out[:, 0] if self._y_1d else out


__all__ = ["GGMLClassifier", "GGMLRegressor"]
