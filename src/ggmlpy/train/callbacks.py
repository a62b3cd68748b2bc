"""ag_fit callbacks: objects with `on_epoch_end(epoch, history) -> bool` (True stops training).

`epoch` is the number of epochs completed (1-based); `history` is the dict ag_fit
returns, filled up to this epoch.
"""
from __future__ import annotations

import math

from ..errors import GGMLError


class Plateau:
    """The one test of "has not improved" behind every early stop and plateau schedule: a value
    improves when it beats the best so far by more than `min_delta` (below it for mode "min",
    above for "max"); `stalled(value)` is True once `patience` values in a row did not."""

    def __init__(self, patience: int, min_delta: float, mode: str):
        self.patience, self.min_delta, self.mode = int(patience), float(min_delta), mode
        self.best = math.inf if mode == "min" else -math.inf
        self.wait = 0

    def improved(self, value: float) -> bool:
        """Whether `value` beats the best by more than min_delta; if so it becomes the best."""
        better = value < self.best - self.min_delta if self.mode == "min" else value > self.best + self.min_delta
        if better:
            self.best, self.wait = value, 0
        return better

    def stalled(self, value: float) -> bool:
        """Record `value`; True once `patience` values in a row did not improve."""
        if self.improved(value):
            return False
        self.wait += 1
        return self.wait >= self.patience


class early_stopping:
    """Stop when `monitor` has not improved by more than `min_delta` for `patience` epochs.

    mode "min" (losses) or "max" (accuracies). After training, `best`,
    `best_epoch` and `stopped_epoch` (0 if it never stopped) tell what happened."""

    def __init__(self, monitor: str = "val_loss", patience: int = 3, min_delta: float = 0.0, mode: str = "min"):
        if mode not in ("min", "max"):
            raise GGMLError(f"early_stopping: mode must be 'min' or 'max', got {mode!r}")
        if patience < 0 or min_delta < 0:
            raise GGMLError("early_stopping: patience and min_delta must be non-negative")
        self.monitor = monitor
        self.plateau = Plateau(patience, min_delta, mode)
        self.best_epoch = self.stopped_epoch = 0

    @property
    def best(self) -> float:
        """The best value of `monitor` so far."""
        return self.plateau.best

    @property
    def wait(self) -> int:
        """Epochs since the last improvement."""
        return self.plateau.wait

    def on_epoch_end(self, epoch: int, history: dict) -> bool:
        """Record the epoch's value; True (stop training) after `patience` epochs without improvement."""
        values = history.get(self.monitor)
        if not values:
            raise GGMLError(f"early_stopping: monitors {self.monitor!r}, but the history has only "
                            f"{sorted(k for k, v in history.items() if v)}"
                            f"{' (pass val_loader= to ag_fit)' if self.monitor.startswith('val_') else ''}")
        if self.plateau.stalled(values[-1]):
            self.stopped_epoch = epoch
            return True
        if self.plateau.wait == 0:  # this epoch improved
            self.best_epoch = epoch
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
