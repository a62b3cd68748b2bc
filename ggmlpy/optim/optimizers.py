"""optimizer_sgd / optimizer_adam (ggmlR's exact updates), optimizer_adamw, clip_grad_norm.

State (momentum, moments) lives in the persistent pool; every update runs
through ggml and is written into the parameter's own memory, so every
reference to the parameter sees it.
"""
from __future__ import annotations

import math

import numpy as np

from ..autograd import ops as F
from ..autograd.tape import no_grad
from ..errors import GGMLError
from ..nn.layers import _assign
from ..tensor import AGTensor, ag_tensor


def _grad_of(grads, p: AGTensor):
    if grads is None:
        return p.grad
    g = grads.get(p) if hasattr(grads, "get") else None
    return g


class Optimizer:
    def __init__(self, params, lr: float):
        self.params = _param_list(params)
        if lr <= 0:
            raise GGMLError(f"learning rate must be positive, got {lr}")
        self.lr = float(lr)
        self.t = 0

    def step(self, grads=None) -> None:
        """Update every parameter that has a gradient in `grads` (backward()'s result) or in `.grad`."""
        self.t += 1
        with no_grad():
            for i, p in enumerate(self.params):
                g = _grad_of(grads, p)
                if g is not None:
                    self._update(i, p, g)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def _update(self, i, p, g):
        raise NotImplementedError

    def _state(self, store: dict, i: int, p: AGTensor) -> AGTensor:
        if i not in store:
            store[i] = ag_tensor(np.zeros(p.shape), device=p.dc.spec)
        return store[i]


def _param_list(params):
    if isinstance(params, dict):
        params = list(params.values())
    params = list(params)
    for p in params:
        if not isinstance(p, AGTensor):
            raise GGMLError(f"optimizer params must be ag tensors, got {type(p).__name__}")
    return params


class optimizer_sgd(Optimizer):
    """p -= lr * g; with momentum: v = momentum * v + g; p -= lr * v. Optional (coupled) weight_decay."""

    def __init__(self, params, lr: float = 0.01, momentum: float = 0.0, weight_decay: float = 0.0):
        super().__init__(params, lr)
        self.momentum, self.weight_decay = float(momentum), float(weight_decay)
        self.velocity = {}

    def _update(self, i, p, g):
        if self.weight_decay:
            g = F.ag_add(g, F.ag_scale(p, self.weight_decay))
        if self.momentum:
            v = self._state(self.velocity, i, p)
            _assign(v, F.ag_add(F.ag_scale(v, self.momentum), g))
            g = v
        _assign(p, F.ag_sub(p, F.ag_scale(g, self.lr)))


class optimizer_adam(Optimizer):
    """ggmlR's Adam: m, v moments; p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)."""

    decoupled = False

    def __init__(self, params, lr: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8,
                 weight_decay: float = 0.0):
        super().__init__(params, lr)
        self.beta1, self.beta2, self.eps, self.weight_decay = float(beta1), float(beta2), float(eps), float(weight_decay)
        self.m, self.v = {}, {}

    def _update(self, i, p, g):
        b1, b2 = self.beta1, self.beta2
        m, v = self._state(self.m, i, p), self._state(self.v, i, p)
        _assign(m, F.ag_add(F.ag_scale(m, b1), F.ag_scale(g, 1 - b1)))
        _assign(v, F.ag_add(F.ag_scale(v, b2), F.ag_scale(F.ag_mul(g, g), 1 - b2)))
        mhat = F.ag_scale(m, 1 / (1 - b1 ** self.t))
        denom = F.ag_add(F.ag_sqrt(F.ag_scale(v, 1 / (1 - b2 ** self.t))), self.eps)
        upd = F.ag_scale(F.ag_div(mhat, denom), self.lr)
        if self.weight_decay:  # AdamW: decoupled decay, applied to the weights directly
            upd = F.ag_add(upd, F.ag_scale(p, self.lr * self.weight_decay))
        _assign(p, F.ag_sub(p, upd))


class optimizer_adamw(optimizer_adam):
    """Adam with decoupled weight decay (Loshchilov and Hutter): p -= lr * (adam_step + wd * p)."""

    def __init__(self, params, lr: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8,
                 weight_decay: float = 0.01):
        super().__init__(params, lr, beta1, beta2, eps, weight_decay)


def clip_grad_norm(params, grads, max_norm: float) -> float:
    """Global L2 norm of the params' gradients; if above max_norm, scale every one by
    max_norm / (norm + 1e-6), in place in `grads`. Returns the norm before clipping."""
    params = _param_list(params)
    with no_grad():
        present = [(p, grads[p]) for p in params if p in grads]
        sq = [F.ag_sum(F.ag_mul(g, g)) for _, g in present]
        norm = math.sqrt(sum(s.item() for s in sq))
        if norm > max_norm:
            c = max_norm / (norm + 1e-6)
            for p, g in present:
                dict.__setitem__(grads, p.id, F.ag_scale(g, c))
    return norm
