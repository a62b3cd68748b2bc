"""ggml_fit callbacks (ggmlR's callbacks.R): early stopping and learning-rate schedules.

A callback is any object with `on_epoch_begin(epoch, logs, state)` and/or
`on_epoch_end(epoch, logs, state)`. `logs` holds train_loss, train_accuracy, val_loss,
val_accuracy (and the Keras names loss, accuracy); `state` has `lr` (read/write: the
optimizer's learning rate, applied from the next step), `nepoch` and `stop` (set True to end
training after this epoch). ggmlR accepts but ignores callbacks for Sequential models; here
they run for every model.
"""
from __future__ import annotations

import math

from ..core.opt import ggml_opt_get_lr, ggml_opt_set_lr
from ..errors import GGMLError
from ..optim.schedulers import cosine_lr
from ..train.callbacks import Plateau


class FitState:
    """What callbacks see: nepoch, stop, lr (read/write) and ggmlR's lr_ud (the optimizer's
    learning-rate holder, for ggml_opt_get_lr / ggml_opt_set_lr)."""

    def __init__(self, nepoch, opt):
        self.nepoch, self.stop, self._opt = nepoch, False, opt

    @property
    def lr(self):
        return self._opt.lr

    @lr.setter
    def lr(self, v):
        self._opt.lr = float(v)

    @property
    def lr_ud(self):
        return self._opt


def _get_lr(state) -> float:
    """The rate a schedule starts from: state.lr, or ggmlR's state$lr_ud (its AdamW rate, as ggmlR reads)."""
    if hasattr(state, "lr"):
        return state.lr
    return ggml_opt_get_lr(state.lr_ud)["adamw"]


def _set_lr(state, v: float) -> None:
    """Set the rate through state.lr, or through ggmlR's state$lr_ud. ggmlR's schedules change
    only the AdamW rate, so under SGD they do nothing; here both rates change."""
    if hasattr(state, "lr"):
        state.lr = v
    else:
        ggml_opt_set_lr(state.lr_ud, adamw_lr=v, sgd_lr=v)


def _mode(mode, monitor):
    if mode == "auto":
        return "min" if "loss" in monitor else "max"
    if mode not in ("min", "max"):
        raise GGMLError(f"mode must be 'auto', 'min' or 'max', got {mode!r}")
    return mode


class _Monitor(Plateau):
    """train.callbacks.Plateau on one entry of the epoch's logs; an epoch without it (or NaN) is skipped."""

    def __init__(self, monitor, min_delta, mode, patience):
        super().__init__(patience, min_delta, _mode(mode, monitor))
        self.monitor = monitor

    def _stalled(self, logs) -> bool:
        val = logs.get(self.monitor)
        if val is None or (isinstance(val, float) and math.isnan(val)):
            return False
        return self.stalled(val)


class ggml_callback_early_stopping(_Monitor):
    """Stop when `monitor` has not improved by more than min_delta for `patience` epochs."""

    def __init__(self, monitor="val_loss", patience=5, min_delta=0, mode="auto"):
        super().__init__(monitor, min_delta, mode, patience)
        self.stopped_epoch = None

    def on_epoch_end(self, epoch, logs, state):
        """Ask ggml_fit to stop when the monitored value stalled for `patience` epochs."""
        if self._stalled(logs):
            state.stop = True
            self.stopped_epoch = epoch


class ggml_schedule_step_decay:
    """Multiply the learning rate by `gamma` every `step_size` epochs."""

    def __init__(self, step_size=10, gamma=0.1):
        self.step_size, self.gamma = int(step_size), float(gamma)
        if self.step_size < 1:
            raise GGMLError("step_size must be >= 1")

    def on_epoch_begin(self, epoch, logs, state):
        """Decay the learning rate at every step_size-th epoch."""
        if epoch > 1 and (epoch - 1) % self.step_size == 0:
            _set_lr(state, _get_lr(state) * self.gamma)


class ggml_schedule_cosine_decay:
    """lr = eta_min + (eta_max - eta_min)(1 + cos(pi (epoch - 1) / T_max)) / 2, eta_max the initial lr."""

    def __init__(self, eta_min=0.0, T_max=None):
        self.eta_min, self.T_max, self.eta_max = float(eta_min), T_max, None

    def on_epoch_begin(self, epoch, logs, state):
        """Set this epoch's learning rate on the cosine curve."""
        if self.eta_max is None:
            self.eta_max = _get_lr(state)
        t_max = self.T_max if self.T_max is not None else state.nepoch
        lr = cosine_lr(self.eta_max, self.eta_min, epoch - 1, t_max)
        _set_lr(state, max(lr, 1e-12))  # ggml_opt asserts a positive rate


class ggml_schedule_reduce_on_plateau(_Monitor):
    """Multiply the learning rate by `factor` (not below min_lr) after `patience` epochs without improvement."""

    def __init__(self, monitor="val_loss", factor=0.5, patience=5, min_lr=1e-7, min_delta=1e-4, mode="auto"):
        super().__init__(monitor, min_delta, mode, patience)
        self.factor, self.min_lr = float(factor), float(min_lr)

    def on_epoch_end(self, epoch, logs, state):
        """Reduce the learning rate when the monitored value stalled for `patience` epochs."""
        if self._stalled(logs):
            _set_lr(state, max(_get_lr(state) * self.factor, self.min_lr))
            self.wait = 0


def logs_of(row):
    """A history row (train_loss, train_accuracy, val_loss, val_accuracy[, per-output dict])."""
    tl, ta, vl, va = row[:4]
    logs = {"train_loss": tl, "train_accuracy": ta, "val_loss": vl, "val_accuracy": va,
            "loss": tl, "accuracy": ta}
    if len(row) > 4:
        logs.update(row[4])   # multi-output fits: train_<output>_loss, val_<output>_loss, ...
    return logs


def _hook(cb, name):
    """A callback's on_epoch_begin / on_epoch_end: a method, or an entry of ggmlR's list form
    (a dict {"on_epoch_end": f, ...})."""
    f = cb.get(name) if isinstance(cb, dict) else getattr(cb, name, None)
    return f if callable(f) else None


def run_callbacks(callbacks, nepoch):
    """Hooks for engine.train: (begin(epoch, opt) -> stop, end(epoch, row, opt) -> stop); as in
    ggmlR, a callback that sets state.stop ends training before the next callback runs."""
    state = {}

    def st(opt):
        if "s" not in state:
            state["s"] = FitState(nepoch, opt)
        return state["s"]

    def run(name, epoch, logs, opt):
        s = st(opt)
        for cb in callbacks:
            f = _hook(cb, name)
            if f is not None:
                f(epoch, logs, s)
            if s.stop:
                break
        return s.stop

    def begin(epoch, opt):
        return run("on_epoch_begin", epoch, {}, opt)

    def end(epoch, row, opt):
        return run("on_epoch_end", epoch, logs_of(row), opt)
    return begin, end
