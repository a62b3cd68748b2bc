"""The model base class shared by Sequential and Functional: compile, fit (ggml_opt),
evaluate, predict, weights and summary.

Data have samples as rows (R's Keras convention): x `[N, F]`, sequences `[N, T, C]`,
images `[N, H, W, C]`, y `[N, K]` (one-hot for classification).
"""
from __future__ import annotations

import math
import warnings
import weakref

import numpy as np

from .. import random as grandom
from .._arrays import numeric_array
from ..bindings import lib
from ..core.device import Backend, get_backend, new_backend
from ..core.opt.context import OptParams, optimizer_settings
from ..core.opt.epoch import n_train_opt_fit
from ..core.sched import Scheduler
from ..core.types import _count as count
from ..errors import GGMLError
from ..runtime.state import ag_default_device
from . import engine
from .callbacks import run_callbacks
from .history import ggml_history
from .layers import Embedding, check_trainable_activations, ggml_to_r_shape

CE_LOSSES = {"categorical_crossentropy", "crossentropy"}   # ggmlR's names, as its evaluate knows them
MSE_LOSSES = {"mse", "mean_squared_error"}

METRICS = {"accuracy", "mae", "mse", "rmse"}  # what evaluate computes (accuracy also in fit)

# Models holding a backend of their own (compilation["backend"]), for release_model_backends.
_HOLDERS: "weakref.WeakSet[_Model]" = weakref.WeakSet()


def release_model_backends(device_prefix: str = "") -> None:
    """Free the backends and schedulers that compiled models hold on devices whose ggml name
    starts with `device_prefix` ("Vulkan"; "" for all). A model makes them again when it next
    trains or predicts."""
    for m in list(_HOLDERS):
        b = m.__dict__.get("_own_backend")
        if b is not None and b.device_name.startswith(device_prefix):
            m._drop_backend()


def rows_to_ggml(x: np.ndarray, shape: tuple) -> np.ndarray:
    """Samples-as-rows data for one input of ggml per-sample shape `shape` -> [N, prod(shape)]
    in ggml memory order (images [N, H, W, C] -> ggml [W, H, C, N])."""
    x = np.asarray(x)
    r_shape = ggml_to_r_shape(shape)
    if x.ndim == 1 and len(shape) == 1 and shape[0] == 1:
        x = x.reshape(-1, 1)
    if tuple(x.shape[1:]) != tuple(r_shape):
        if x.ndim == 2 and x.shape[1] == int(np.prod(shape)) and len(shape) > 1:
            return x  # already flat, ggml order
        raise GGMLError(f"x has sample shape {tuple(x.shape[1:])}; the model's input is {r_shape}")
    if x.ndim == 4:
        x = x.transpose(0, 3, 1, 2)
    return x.reshape(x.shape[0], -1)


class _Model:
    functional = False

    def __init__(self):
        self.compiled = False
        self.history = None
        self.optimizer = "adam"
        self.loss = "categorical_crossentropy"
        self.metrics = ["accuracy"]
        self.device = "cpu"
        self.seed = None

    @property
    def _rng(self) -> np.random.Generator:
        """The generator for initialisation and dropout masks: ggmlpy's own, so that ggml_set_seed
        (manual_seed) before building, compiling and fitting makes them repeat, as in ggmlR;
        or one given to this model alone (model._rng = np.random.default_rng(seed))."""
        own = getattr(self, "_own_rng", None)
        return own if own is not None else grandom.generator()

    @_rng.setter
    def _rng(self, generator: np.random.Generator | None) -> None:
        self._own_rng = generator

    # -- compile -----------------------------------------------------------------------------------
    def compile(self, optimizer="adam", loss="categorical_crossentropy", metrics=("accuracy",), backend="cpu",
                lr=None, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, softmax_ce="exact", loss_weights=None):
        """ggmlR's ggml_compile. `optimizer`: "sgd", or anything else = ggml's AdamW (ggmlR's rule).
        `loss`: categorical_crossentropy (also crossentropy) or mse (mean_squared_error);
        another name raises, as in Keras, unless softmax_ce="ggmlr" asks for ggmlR's handling of
        it: trained as cross-entropy, with `evaluate` scoring its loss NaN (ggmlR's NA). ggmlR fixes lr = 1e-3, beta1 .9, beta2 .999, eps 1e-8, no weight
        decay; the keyword arguments change them. `backend`: "cpu", "auto" or a ggmlpy device.
        `softmax_ce`: "exact" (the default) trains a dense softmax output layer with
        cross-entropy on the true CE(softmax(z)), by handing ggml's loss (which applies
        log-softmax itself) the logits, and weights samples (sample_weight, class_weight) in
        the loss. "ggmlr" reproduces ggmlR's training: CE(softmax(softmax(z))), weights as
        scaled labels, whose gradient in ggml is wrong (ggml assumes labels summing to 1), and
        unknown loss names.

        Multi-output models (Keras' rules): `loss` is one name for every output, a list (one
        per output) or a dict by output name (an output left out is not trained);
        `loss_weights` (list or dict, default 1) weight each output's loss in the total that
        fit minimises and evaluate reports: sum_i loss_weights[i] * loss_i."""
        if softmax_ce not in ("ggmlr", "exact"):
            raise GGMLError(f"softmax_ce must be 'ggmlr' or 'exact', got {softmax_ce!r}")
        metrics = [metrics] if isinstance(metrics, str) else list(metrics) if metrics is not None else []
        bad = [m for m in metrics if not isinstance(m, str) or m not in METRICS]
        if bad:
            raise GGMLError(f"ggml_compile: unknown metrics {bad}; the metrics are {sorted(METRICS)}")
        settings = optimizer_settings("ggml_compile", 1e-3 if lr is None else lr, beta1, beta2, eps,
                                      weight_decay)  # ggml_opt would abort on a bad one mid-fit
        self.softmax_ce = softmax_ce
        self._build()
        losses = self._per_output(loss, "loss", None)
        for name in losses:
            if name is not None and (not isinstance(name, str) or name not in CE_LOSSES | MSE_LOSSES):
                if isinstance(name, str) and softmax_ce == "ggmlr":
                    continue  # ggmlR trains any other name with ggml's cross-entropy
                raise GGMLError(f"unknown loss {name!r}: one of {sorted(CE_LOSSES | MSE_LOSSES)} "
                                "(softmax_ce='ggmlr' trains an unknown name as ggmlR does: cross-entropy, "
                                "with evaluate's loss NaN)")
        if all(name is None for name in losses):
            raise GGMLError("loss: no output has a loss")
        weights = self._per_output(1.0 if loss_weights is None else loss_weights, "loss_weights", 1.0)
        try:
            weights = [float(w) for w in weights]
        except (TypeError, ValueError):
            raise GGMLError(f"loss_weights must be numbers, got {loss_weights!r}") from None
        if not all(math.isfinite(w) and w >= 0 for w in weights):
            raise GGMLError(f"loss_weights must be finite and >= 0, got {weights}")
        self.output_losses, self.loss_weights = losses, weights
        self.optimizer = str(optimizer)
        self.loss = loss
        self.metrics = metrics
        self.device = "cpu" if backend in ("cpu", None) else backend
        if backend == "auto":
            self.device = ag_default_device() if callable(ag_default_device) else "cpu"
        get_backend(self.device)  # fail here, not in fit, on a bad device
        self._drop_backend()  # a new compile, perhaps for another device: its own backend
        self.opt_settings = settings
        self.compiled = True
        return self

    @property
    def fit_loss(self) -> str:
        """The kind of loss fit trains the last output with: "mse" or "cross_entropy"."""
        losses = getattr(self, "output_losses", None) or [self.loss]
        return "mse" if losses[-1] in MSE_LOSSES else "cross_entropy"

    # -- outputs -----------------------------------------------------------------------------------
    def _output_names(self) -> list:
        """The outputs' names (their layers' names; numbered where one appears twice)."""
        names = [getattr(l, "name", None) or f"output_{i + 1}" for i, l in enumerate(self._output_layers())]
        return [n if names.count(n) == 1 else f"{n}_{i + 1}" for i, n in enumerate(names)]

    def _per_output(self, value, what, default) -> list:
        """A setting given once, as a list (one entry per output) or as a dict by output name."""
        names = self._output_names()
        if isinstance(value, dict):
            bad = [k for k in value if k not in names]
            if bad:
                raise GGMLError(f"{what}: no output named {bad}; the outputs are {names}")
            return [value.get(n, default) for n in names]
        if isinstance(value, (list, tuple)):
            if len(value) != len(names):
                raise GGMLError(f"{what}: {len(value)} entries for {len(names)} outputs {names}")
            return list(value)
        return [value] * len(names)

    def _targets(self, y, n, what="y") -> list:
        """One target array [N, K] (or None: not trained/scored) per output. A multi-output
        model takes a list or a dict by output name; a single array is ggmlR's convention, the
        last output only, with a warning (the other outputs are then not trained)."""
        names = self._output_names()
        if isinstance(y, dict):
            ys = self._per_output(y, what, None)
        elif isinstance(y, (list, tuple)) and len(y) == len(names) and \
                any(v is None or isinstance(v, np.ndarray) or np.ndim(v) >= 2 for v in y):
            ys = list(y)
        else:
            if len(names) > 1:
                warnings.warn(f"{what} is one array for a model with {len(names)} outputs: only the last "
                              f"output ({names[-1]!r}) is trained and scored (ggmlR's rule); give a list "
                              "or a dict with one target per output to use every output", stacklevel=3)
            ys = [None] * (len(names) - 1) + [y]
        losses = self.output_losses
        out = []
        for name, loss, t in zip(names, losses, ys):
            if t is not None and loss is None:
                raise GGMLError(f"{what}: output {name!r} has a target but no loss (compile's loss)")
            out.append(None if t is None else self._pack_y(t, n))
        if all(t is None for t in out):
            raise GGMLError(f"{what}: no output has both a target and a loss")
        return out

    @property
    def ggml_optimizer(self) -> str:
        return "sgd" if self.optimizer == "sgd" else "adamw"

    def _need_compiled(self, what):
        if not self.compiled:
            raise GGMLError(f"{what}: the model is not compiled; call ggml_compile first")

    @property
    def compilation(self) -> dict | None:
        """ggmlR's model$compilation (None before compile): optimizer, loss, metrics, loss_weights,
        the optimizer settings, device (the device spelling given to compile), and as in ggmlR
        the `backend` and the `sched` (scheduler) the model trains and predicts with. A script
        may free them (ggml_backend_sched_free, ggml_backend_free) as ggmlR's do: the model then
        makes new ones when it next trains or predicts."""
        if not self.compiled:
            return None
        return {"optimizer": self.optimizer, "loss": self.loss, "metrics": list(self.metrics),
                "device": self.device, "backend": self._backend(), "sched": self._scheduler(),
                "loss_weights": list(self.loss_weights), **self.opt_settings}

    # -- the backend and schedulers fit and predict run on --------------------------------------
    def _backend(self) -> Backend:
        """The model's own backend on its device; one freed by the user is made again (with the
        scheduler over it: it must not run on a freed backend)."""
        b = self.__dict__.get("_own_backend")
        if b is None or b.freed:
            self._drop_backend()
            b = self._own_backend = new_backend(self.device)
            _HOLDERS.add(self)
        return b

    def _scheduler(self, graph_size: int = 0) -> Scheduler:
        """The scheduler fit's ggml_opt runs on (on the CPU with ggml's BLAS backend for the
        weight-gradient products), for graphs of up to `graph_size` nodes. Kept between calls,
        reset before each use; made again when freed or too small."""
        backend = self._backend()
        s = self.__dict__.get("_sched")
        if s is None or s.ptr is None or s.graph_size < graph_size:
            if s is not None:
                s.free()
            s = self._sched = engine.make_scheduler(backend, blas=True, graph_size=graph_size)
        else:
            lib.ggml_backend_sched_reset(s.ptr)
        return s

    def _drop_backend(self) -> None:
        """Free the model's scheduler and backend now (the scheduler first: it runs on it)."""
        s = self.__dict__.pop("_sched", None)
        if s is not None:
            s.free()
        b = self.__dict__.pop("_own_backend", None)
        if b is not None:
            b.free()
        _HOLDERS.discard(self)

    # -- data --------------------------------------------------------------------------------------
    def _pack_x(self, x) -> np.ndarray:
        specs = self._input_specs()
        xs = list(x) if isinstance(x, (list, tuple)) else [x]
        if len(xs) != len(specs):
            raise GGMLError(f"the model has {len(specs)} inputs; got {len(xs)} arrays")
        cols = []
        for xi, (shape, dtype) in zip(xs, specs):
            xi = numeric_array(xi, "x")
            if dtype == "int32":
                if not np.all(np.asarray(xi) == np.round(xi)):
                    raise GGMLError("token ids must be integers")
                xi = xi.astype(np.int64)
            cols.append(rows_to_ggml(xi, shape))
        n = {c.shape[0] for c in cols}
        if len(n) != 1:
            raise GGMLError(f"inputs have different numbers of samples: {sorted(n)}")
        if specs[0][1] == "int32":
            if any(d != "int32" for _, d in specs):
                raise GGMLError("a model mixing integer and float inputs is not supported")
            packed = np.concatenate(cols, axis=1)
            self._check_ids(packed)
            return packed.astype(np.int32)
        return np.ascontiguousarray(np.concatenate(cols, axis=1), dtype=np.float32)

    def _check_ids(self, packed):
        vocab = min((l.vocab_size for l in self._all_layers() if isinstance(l, Embedding)), default=None)
        if vocab is not None and (packed.min() < 0 or packed.max() >= vocab):
            raise GGMLError(f"token ids must be in [0, {vocab}); got {packed.min()}..{packed.max()}")

    def _pack_y(self, y, n) -> np.ndarray:
        y = numeric_array(y, "y").astype(np.float64)
        if y.ndim == 1:
            y = y.reshape(-1, 1)
        if y.ndim != 2 or y.shape[0] != n:
            raise GGMLError(f"y must be [N, K] with N = {n} samples, got shape {y.shape}")
        return y

    # -- predict -----------------------------------------------------------------------------------
    def predict(self, x, batch_size=32):
        """Outputs for x, samples as rows ([N, units]; a list for multi-output models)."""
        self._need_compiled("ggml_predict")
        packed = self._pack_x(x)
        n = packed.shape[0]
        batch_size = count(batch_size, "ggml_predict: batch_size")
        if n == 0:
            raise GGMLError("x has no samples")
        if self.functional and n < batch_size:
            raise GGMLError(f"Not enough samples ({n}) for batch_size={batch_size}")
        batch = min(batch_size, n)
        outs = engine.predict_packed(self, packed, batch, self._backend())
        res = [self._out_rows(o, s) for o, s in zip(outs, self._output_shapes())]
        return res if len(res) > 1 else res[0]

    @staticmethod
    def _out_rows(o, shape):
        if len(shape) == 1:
            return o.astype(np.float64)
        g = o.reshape((o.shape[0],) + tuple(shape[::-1]))
        if len(shape) == 3:
            g = g.transpose(0, 2, 3, 1)
        return g.astype(np.float64)

    def predict_classes(self, x, batch_size=32):
        """1-based index of each row's largest output (ggmlR's which.max), first maximum wins."""
        p = self.predict(x, batch_size)
        if isinstance(p, list):
            p = p[0]
        return np.argmax(p.reshape(p.shape[0], -1), axis=1) + 1

    # -- evaluate ----------------------------------------------------------------------------------
    def evaluate(self, x, y, batch_size=32, sample_weight=None, class_weight=None, verbose=False):
        """Loss and accuracy (plus mae/mse/rmse when listed in the metrics), in double precision
        from the predictions. Sample and class weights weight each sample's loss. With targets
        for several outputs (a list or dict, see fit), `loss` is the weighted sum of the
        outputs' losses and each output adds <name>_loss, <name>_accuracy and its metrics.
        `verbose` (ggmlR takes it and prints nothing) prints the scores on one line, as Keras."""
        scores = self._evaluate(x, y, batch_size, sample_weight, class_weight)
        if verbose:
            print(" - ".join(f"{k}: {v:.4f}" if isinstance(v, float) else f"{k}: {v}"
                             for k, v in scores.items() if v is not None))
        return scores

    def _evaluate(self, x, y, batch_size, sample_weight, class_weight):
        p = self.predict(x, batch_size)
        ps = p if isinstance(p, list) else [p]
        n = ps[0].shape[0]
        targets = self._targets(y, n)
        heads = [j for j, t in enumerate(targets) if t is not None]
        if len(heads) > 1 and class_weight is not None:
            raise GGMLError("class_weight is for single-output models; give sample_weight")
        names = self._output_names()
        scores = {}
        for j in heads:
            pj = ps[j].reshape(n, -1)
            if targets[j].shape[1] != pj.shape[1]:
                raise GGMLError(f"y for output {names[j]!r} has {targets[j].shape[1]} columns; "
                                f"the output has {pj.shape[1]}")
            w = self._sample_weights(targets[j], sample_weight, class_weight)
            scores[j] = self._score(pj, targets[j], self.output_losses[j], w)
        if len(heads) == 1:
            return scores[heads[0]]
        out = {"loss": float(sum(self.loss_weights[j] * scores[j]["loss"] for j in heads)), "n_samples": n}
        for j in heads:
            for k, v in scores[j].items():
                if k != "n_samples":
                    out[f"{names[j]}_{k}"] = v
        return out

    def _score(self, p, y, loss, w) -> dict:
        """One output's loss, accuracy and listed metrics (predictions p, targets y, weights w)."""
        if loss in CE_LOSSES:
            per = -np.sum(y * np.log(np.clip(p, 1e-7, 1 - 1e-7)), axis=1)
        elif loss in MSE_LOSSES:
            per = np.sum((y - p) ** 2, axis=1) / y.shape[1]
        else:  # an unknown name, accepted in ggmlR's mode: its evaluate scores NA
            per = np.full(y.shape[0], np.nan)
        out = {"loss": float(np.mean(per * w)),
               "accuracy": float(np.mean(np.argmax(p, 1) == np.argmax(y, 1))) if y.shape[1] > 1 else None,
               "n_samples": int(p.shape[0])}
        for m in self.metrics:
            if m == "mae":
                out["mae"] = float(np.mean(np.abs(y - p)))
            elif m == "mse":
                out["mse"] = float(np.mean((y - p) ** 2))
            elif m == "rmse":
                out["rmse"] = float(np.sqrt(np.mean((y - p) ** 2)))
        return out

    @staticmethod
    def _sample_weights(y, sample_weight, class_weight):
        w = np.ones(y.shape[0])
        if sample_weight is not None:
            if class_weight is not None:
                raise GGMLError("give sample_weight or class_weight, not both")
            sw = np.asarray(sample_weight, dtype=np.float64).ravel()
            if sw.size != y.shape[0]:
                raise GGMLError(f"sample_weight has length {sw.size}; there are {y.shape[0]} samples")
            w = w * sw
        if class_weight is not None:
            cw = {int(k): float(v) for k, v in dict(class_weight).items()}
            cls = np.argmax(y, axis=1)
            w = w * np.array([cw.get(int(c), 1.0) for c in cls])
        if np.any(w < 0) or not np.all(np.isfinite(w)):
            raise GGMLError("sample and class weights must be finite and >= 0")
        return w

    # -- fit ---------------------------------------------------------------------------------------
    def fit(self, x, y, epochs=1, batch_size=32, validation_split=0.0, validation_data=None,
            class_weight=None, sample_weight=None, callbacks=(), verbose=0, dropout_masks=None,
            record_batch_order=False, shuffle=True):
        """Train on ggml's ggml_opt loop: one optimizer step per batch of `batch_size` rows (a
        remainder smaller than a batch is dropped, as ggml_opt does), a fresh optimizer per call.
        `y` is [N, K]; for several outputs a list (one target per output, None for an output
        not trained) or a dict by output name: the loss is then the loss_weights-weighted sum of
        the outputs' losses (see compile) and the history adds each output's curves.
        Returns the ggml_history (also kept as `model.history`).
        `shuffle` (Keras'): True (the default) orders the rows as ggmlR does: where ggml_opt
        trains the model (no stochastic dropout, one input) it shuffles them before every
        epoch with its own generator, seeded afresh by every fit, so the order is ggmlR's
        whatever ggml_set_seed says; False keeps the given order. `dropout_masks(name, epoch,
        shape)` supplies stochastic dropout masks (default: ggmlpy's generator, under
        ggml_set_seed);
        `record_batch_order` keeps each epoch's sample order in `history.batch_order`."""
        self._need_compiled("ggml_fit")
        for layer in self._all_layers():
            check_trainable_activations(layer)
        epochs, batch = count(epochs, "ggml_fit: epochs"), count(batch_size, "ggml_fit: batch_size")
        try:
            v = float(validation_split)
        except (TypeError, ValueError):
            raise GGMLError(f"validation_split must be a number in [0, 1), got {validation_split!r}") from None
        if not 0 <= v < 1:
            raise GGMLError(f"validation_split must be in [0, 1), got {validation_split}")
        packed = self._pack_x(x)
        n = packed.shape[0]
        targets = self._targets(y, n)
        heads = self._heads(targets)
        yy = np.concatenate([targets[j] for j, _, _, _ in heads], axis=1)
        multi = len(heads) > 1 or heads[0][2] != 1.0
        if multi and class_weight is not None:
            raise GGMLError("class_weight is for single-output models; give sample_weight")
        w = self._sample_weights(targets[heads[0][0]], sample_weight, class_weight)
        loss = heads[0][1]
        weighted = sample_weight is not None or class_weight is not None
        if multi:
            loss = "multi"
        elif loss == "cross_entropy" and weighted:
            if self.softmax_ce == "ggmlr":
                yy = yy * w[:, None]  # ggmlR scales the labels (ggml's gradient then assumes they sum to 1)
            else:
                loss = "weighted_ce"
        elif weighted:
            loss = "weighted_mse"
        path = self._fit_path()
        if validation_data is not None:
            if v:
                raise GGMLError("give validation_split or validation_data, not both")
            if not isinstance(validation_data, (list, tuple)) or len(validation_data) != 2:
                raise GGMLError("validation_data must be a list (or tuple) of (x, y)")
            xv, yv = validation_data
            pv = self._pack_x(xv)
            tv = self._targets(yv, pv.shape[0], "validation_data's y")
            if [j for j, t in enumerate(tv) if t is not None] != [j for j, *_ in heads]:
                raise GGMLError("validation_data's y must have targets for the same outputs as y")
            yv = np.concatenate([tv[j] for j, *_ in heads], axis=1)
            n_train = (n // batch) * batch
            n_val = (pv.shape[0] // batch) * batch
            if n_train == 0:
                raise GGMLError(f"batch_size {batch} is larger than the {n} training samples")
            packed = np.concatenate([packed[:n_train], pv[:n_val]])
            yy = np.concatenate([yy[:n_train], yv[:n_val]])
            w = np.concatenate([w[:n_train], np.ones(n_val)])
            n_used, shuffle_all = n_train + n_val, False
        else:
            n_used = (n // batch) * batch
            if n_used == 0:
                raise GGMLError(f"batch_size {batch} is larger than the {n} samples")
            nb = n_used // batch
            if path == "opt_fit":
                n_train = n_train_opt_fit(nb, v) * batch
            else:
                n_train = int(np.floor((1 - v) * nb)) * batch
                if path == "multi_input" and n_train == 0:
                    n_train = n_used
            if n_train == 0:
                raise GGMLError(f"validation_split {v} leaves no training batch")
            shuffle_all = path == "opt_fit" and bool(shuffle)
        shuffle_train = path == "opt_fit" and bool(shuffle)
        opt = OptParams(self.ggml_optimizer, self.opt_settings["lr"], self.opt_settings["beta1"],
                               self.opt_settings["beta2"], self.opt_settings["eps"], self.opt_settings["wd"])
        rng = self._rng

        def masks(layer, epoch, shape):
            if dropout_masks is not None:
                return dropout_masks(layer.name, epoch, shape)
            return (rng.random(shape) < 1 - layer.rate).astype(np.float32)

        hooks = run_callbacks(list(callbacks or ()), epochs)
        hist, orders = engine.train(self, packed[:n_used], yy[:n_used], w[:n_used], batch, n_train, n_used,
                                    epochs, shuffle_all, shuffle_train, opt, self._backend(), loss,
                                    bool(verbose), masks, hooks,
                                    record_batch_order or getattr(self, "_record_order", False), heads=heads)
        names = self._output_names()
        self.history = ggml_history(hist, n_used=n_used, n_train=n_train, fit_path=path, batch_order=orders,
                                    outputs=[names[j] for j, *_ in heads] if multi else ())
        return self.history

    def _heads(self, targets) -> list:
        """The outputs fit trains: (output index, "mse" | "cross_entropy", loss weight, columns)."""
        heads = []
        shapes = self._output_shapes()
        names = self._output_names()
        for j, t in enumerate(targets):
            if t is None:
                continue
            k = int(np.prod(shapes[j]))
            if t.shape[1] != k:
                raise GGMLError(f"y has {t.shape[1]} columns but the model's output {names[j]!r} has {k} values "
                                "per sample")
            kind = "mse" if self.output_losses[j] in MSE_LOSSES else "cross_entropy"
            heads.append((j, kind, self.loss_weights[j], k))
        return heads

    def _fit_path(self):
        return "opt_fit"

    # -- weights -----------------------------------------------------------------------------------
    def get_weights(self) -> dict:
        """{layer name: {param: numpy array (ggml ne reversed)}} (copies)."""
        self._build()
        return {l.name: {k: v.copy() for k, v in l.weights.items()} for l in self._all_layers() if l.weights}

    def set_weights(self, weights: dict) -> None:
        """Install weights by layer name; every array must have the layer's shape."""
        self._build()
        layers = {l.name: l for l in self._all_layers()}
        for name, params in weights.items():
            if name not in layers:
                raise GGMLError(f"no layer named {name!r}")
            layer = layers[name]
            for k, arr in params.items():
                if k not in layer.weights:
                    raise GGMLError(f"layer {name!r} has no weight {k!r} (it has {sorted(layer.weights)})")
                arr = np.asarray(arr, dtype=np.float32)
                if arr.size != layer.weights[k].size:
                    raise GGMLError(f"{name}.{k}: {arr.size} values, expected {layer.weights[k].shape}")
                layer.weights[k] = arr.reshape(layer.weights[k].shape).copy()

    def count_params(self) -> int:
        """Total number of weight values."""
        self._build()
        return sum(l.n_params() for l in self._all_layers())

    def summary(self, print_fn=print) -> str | None:
        """A table of layers, output shapes (R order, batch first) and parameter counts: printed
        (by `print_fn`), as Keras' summary(), which then returns None (so a REPL shows it once);
        `print_fn=None` returns the text instead."""
        self._build()
        rows = [("Layer (type)", "Output shape", "Param #", "Trainable")]
        for l in self._summary_layers():
            rows.append((f"{l.name} ({l.kind})", str((None,) + tuple(ggml_to_r_shape(l.out_shape))),
                         str(l.n_params()), "yes" if l.trainable else "no"))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines = ["  ".join(c.ljust(wd) for c, wd in zip(r, widths)) for r in rows]
        total = self.count_params()
        trainable = sum(l.n_params() for l in self._all_layers() if l.trainable)
        ins = [tuple(ggml_to_r_shape(s)) for s, _ in self._input_specs()]
        lines.insert(1, "-" * len(lines[0]))
        lines = [f"Model Summary ({type(self).__name__})", f"Input shape: {ins[0] if len(ins) == 1 else ins}"] + lines
        lines += ["-" * len(lines[2]), f"Total params: {total}", f"Trainable params: {trainable}",
                  f"Non-trainable params: {total - trainable}",
                  f"Weight memory: {total * 4} bytes (float32)"]
        text = "\n".join(lines)
        if print_fn is None:
            return text
        print_fn(text)
        return None

    def _summary_layers(self):
        return self._all_layers()

    def __call__(self, x, batch_size=32):
        return self.predict(x, batch_size)
