"""Optimizers with ggmlR's update formulas, gradient clipping, and learning-rate schedules."""
from .optimizers import clip_grad_norm, optimizer_adam, optimizer_adamw, optimizer_sgd
from .schedulers import lr_scheduler_cosine, lr_scheduler_step

__all__ = ["clip_grad_norm", "lr_scheduler_cosine", "lr_scheduler_step", "optimizer_adam", "optimizer_adamw",
           "optimizer_sgd"]
