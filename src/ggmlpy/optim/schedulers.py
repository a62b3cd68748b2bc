"""Learning-rate schedules that set `optimizer.lr`: ggmlR's, close to PyTorch's StepLR and CosineAnnealingLR.

Call `.step()` once per epoch (or once per batch, counting T_max / step_size in
batches). Each uses the closed form of its schedule from the optimizer's lr at
construction, so the sequence does not drift with rounding:

* step:   lr_e = lr_0 * gamma ** floor(e / step_size)
* cosine: lr_e = lr_min + (lr_0 - lr_min) * (1 + cos(pi * t / T_max)) / 2, t = min(e, T_max)
  (held after T_max as in ggmlR; see lr_scheduler_cosine for restarts and PyTorch's form)
"""
from __future__ import annotations

import math

from ..errors import GGMLError


def cosine_lr(lr_max: float, lr_min: float, t: float, T_max: float) -> float:
    """The cosine curve at step t of T_max: lr_min + (lr_max - lr_min) * (1 + cos(pi * t / T_max)) / 2.
    The one formula of every cosine schedule (lr_scheduler_cosine, the Keras-like ggml_schedule_cosine_decay)."""
    return lr_min + (lr_max - lr_min) * (1 + math.cos(math.pi * t / T_max)) / 2


class _Scheduler:
    def __init__(self, optimizer):
        if not hasattr(optimizer, "lr"):
            raise GGMLError(f"a scheduler needs an optimizer with an `lr`, got {type(optimizer).__name__}")
        self.optimizer = optimizer
        self.base_lr = float(optimizer.lr)
        self.last_epoch = 0

    def step(self) -> float:
        """Advance one epoch (or batch) and set the optimizer's lr. Returns the new lr."""
        self.last_epoch += 1
        self.optimizer.lr = self._lr_at(self.last_epoch)
        return self.optimizer.lr

    def __repr__(self) -> str:
        fields = " | ".join(f"{k}={v}" for k, v in self._repr_fields())
        return f"{type(self).__name__} | {fields} | epoch={self.last_epoch} | lr={self.get_lr():.6g}"

    def _repr_fields(self) -> list:
        return []

    def get_lr(self) -> float:
        """The learning rate now in force."""
        return float(self.optimizer.lr)

    def _lr_at(self, epoch: int) -> float:
        raise NotImplementedError

    def state_dict(self) -> dict:
        return {"base_lr": self.base_lr, "last_epoch": self.last_epoch}

    def load_state_dict(self, state: dict) -> None:
        self.base_lr, self.last_epoch = float(state["base_lr"]), int(state["last_epoch"])
        self.optimizer.lr = self._lr_at(self.last_epoch)


class lr_scheduler_step(_Scheduler):
    """Multiply the learning rate by `gamma` every `step_size` steps."""

    def __init__(self, optimizer, step_size: int, gamma: float = 0.1):
        super().__init__(optimizer)
        if int(step_size) != step_size or step_size < 1:
            raise GGMLError(f"lr_scheduler_step: step_size must be a positive integer, got {step_size!r}")
        if gamma <= 0:
            raise GGMLError(f"lr_scheduler_step: gamma must be positive, got {gamma}")
        self.step_size, self.gamma = int(step_size), float(gamma)

    def _repr_fields(self) -> list:
        return [("step_size", self.step_size), ("gamma", self.gamma)]

    def _lr_at(self, epoch: int) -> float:
        return self.base_lr * self.gamma ** (epoch // self.step_size)


class lr_scheduler_cosine(_Scheduler):
    """Cosine annealing from the initial lr (`lr_max`) down to `lr_min` over `T_max` steps:
    after k steps, lr = lr_min + (lr_max - lr_min) * (1 + cos(pi * t / T_max)) / 2 with

    * t = min(k, T_max) by default: the lr reaches lr_min at step T_max and stays there, as
      ggmlR's scheduler does;
    * t = ((k - 1) mod T_max) + 1 with `restart=True` (SGDR-style warm restarts, as ggmlR's):
      each cycle ends at lr_min and the next step starts again near lr_max;
    * t = k with `hold=False`: PyTorch's CosineAnnealingLR, which rises again after T_max.

    `eta_min` is PyTorch's name for `lr_min`. ggmlR differs by one step: its k-th step sets the
    value of step k - 1, so its first step leaves the lr at lr_max and, without restarts, it
    holds the value of step T_max - 1 and never reaches lr_min, which its documentation
    promises (docs/divergences.md)."""

    def __init__(self, optimizer, T_max: int, lr_min: float = 0.0, restart: bool = False,
                 eta_min: float | None = None, hold: bool = True):
        super().__init__(optimizer)
        if int(T_max) != T_max or T_max <= 0:
            raise GGMLError(f"lr_scheduler_cosine: T_max must be a positive integer, got {T_max!r}")
        lr_min = float(lr_min if eta_min is None else eta_min)
        if lr_min < 0 or lr_min > self.base_lr:
            raise GGMLError(f"lr_scheduler_cosine: lr_min (eta_min) must be in [0, lr={self.base_lr}], got {lr_min}")
        if restart and not hold:
            raise GGMLError("lr_scheduler_cosine: restart=True and hold=False ask for two different "
                            "schedules after T_max; choose one")
        self.T_max, self.lr_min, self.restart, self.hold = int(T_max), lr_min, bool(restart), bool(hold)

    @property
    def eta_min(self) -> float:
        """PyTorch's name for lr_min."""
        return self.lr_min

    @property
    def lr_max(self) -> float:
        """The lr the optimizer had when the scheduler was made: the top of the curve."""
        return self.base_lr

    def _repr_fields(self) -> list:
        return [("T_max", self.T_max), ("lr_max", self.lr_max), ("lr_min", self.lr_min), ("restart", self.restart)]

    def _lr_at(self, epoch: int) -> float:
        if self.restart:
            t = (epoch - 1) % self.T_max + 1 if epoch > 0 else 0
        elif self.hold:
            t = min(epoch, self.T_max)
        else:
            t = epoch
        return cosine_lr(self.base_lr, self.lr_min, t, self.T_max)
