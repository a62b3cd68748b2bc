"""Learning-rate schedules that set `optimizer.lr`, as PyTorch's StepLR and CosineAnnealingLR.

Call `.step()` once per epoch (or once per batch, counting T_max / step_size in
batches). Each uses the closed form of its schedule from the optimizer's lr at
construction, so the sequence does not drift with rounding:

* step:   lr_e = lr_0 * gamma ** floor(e / step_size)
* cosine: lr_e = eta_min + (lr_0 - eta_min) * (1 + cos(pi * e / T_max)) / 2
"""
from __future__ import annotations

import math

from ..errors import GGMLError


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

    def _lr_at(self, epoch: int) -> float:
        return self.base_lr * self.gamma ** (epoch // self.step_size)


class lr_scheduler_cosine(_Scheduler):
    """Cosine annealing from the initial lr down to `eta_min` over `T_max` steps (then back up,
    as PyTorch's closed form does past T_max)."""

    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0):
        super().__init__(optimizer)
        if T_max <= 0:
            raise GGMLError(f"lr_scheduler_cosine: T_max must be positive, got {T_max!r}")
        if eta_min < 0 or eta_min > self.base_lr:
            raise GGMLError(f"lr_scheduler_cosine: eta_min must be in [0, lr={self.base_lr}], got {eta_min}")
        self.T_max, self.eta_min = T_max, float(eta_min)

    def _lr_at(self, epoch: int) -> float:
        return self.eta_min + (self.base_lr - self.eta_min) * (1 + math.cos(math.pi * epoch / self.T_max)) / 2
