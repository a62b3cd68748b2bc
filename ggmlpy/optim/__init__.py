"""Optimizers with ggmlR's update formulas, and gradient clipping."""
from .optimizers import clip_grad_norm, optimizer_adam, optimizer_adamw, optimizer_sgd

__all__ = ["clip_grad_norm", "optimizer_adam", "optimizer_adamw", "optimizer_sgd"]
