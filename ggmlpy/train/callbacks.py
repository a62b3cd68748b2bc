"""ag_fit callbacks: objects with `on_epoch_end(epoch, history) -> bool` (True stops training).

`epoch` is the number of epochs completed (1-based); `history` is the dict ag_fit
returns, filled up to this epoch.
"""
from __future__ import annotations

import math

from ..errors import GGMLError


class early_stopping:
    """Stop when `monitor` has not improved by more than `min_delta` for `patience` epochs.

    mode "min" (losses) or "max" (accuracies). After training, `best`,
    `best_epoch` and `stopped_epoch` (0 if it never stopped) tell what happened."""

    def __init__(self, monitor: str = "val_loss", patience: int = 3, min_delta: float = 0.0, mode: str = "min"):
        if mode not in ("min", "max"):
            raise GGMLError(f"early_stopping: mode must be 'min' or 'max', got {mode!r}")
        if patience < 0 or min_delta < 0:
            raise GGMLError("early_stopping: patience and min_delta must be non-negative")
        self.monitor, self.patience, self.min_delta, self.mode = monitor, int(patience), float(min_delta), mode
        self.best = math.inf if mode == "min" else -math.inf
        self.best_epoch = self.stopped_epoch = 0
        self.wait = 0

    def _improved(self, value: float) -> bool:
        if self.mode == "min":
            return value < self.best - self.min_delta
        return value > self.best + self.min_delta

    def on_epoch_end(self, epoch: int, history: dict) -> bool:
        """Record the epoch's value; True (stop training) after `patience` epochs without improvement."""
        values = history.get(self.monitor)
        if not values:
            raise GGMLError(f"early_stopping: monitors {self.monitor!r}, but the history has only "
                            f"{sorted(k for k, v in history.items() if v)}"
                            f"{' (pass val_loader= to ag_fit)' if self.monitor.startswith('val_') else ''}")
        value = values[-1]
        if self._improved(value):
            self.best, self.best_epoch, self.wait = value, epoch, 0
            return False
        self.wait += 1
        if self.wait >= self.patience:
            self.stopped_epoch = epoch
            return True
        return False


class scheduler_step:
    """Step a learning-rate scheduler at the end of every epoch."""

    def __init__(self, scheduler):
        if not hasattr(scheduler, "step"):
            raise GGMLError(f"scheduler_step: expected a scheduler with .step(), got {type(scheduler).__name__}")
        self.scheduler = scheduler

    def on_epoch_end(self, epoch: int, history: dict) -> bool:
        """Step the scheduler; never stops training."""
        self.scheduler.step()
        return False
