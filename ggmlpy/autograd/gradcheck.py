"""ag_gradcheck: analytic gradients against central finite differences."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..errors import GGMLError
from ..tensor import AGTensor
from .engine import backward
from .tape import no_grad, with_grad_tape

# float32 cannot resolve a 1e-5 step (ggmlR's default, meant for R's doubles): its rounding
# error divided by the step would swamp the derivative. The step is raised to this floor,
# relative to |x|, and Richardson extrapolation keeps the truncation error at O(h^4). Not
# higher: a wider step crosses more relu kinks.
F32_STEP = 4e-3
# ggml's CUDA kernels are built with --use_fast_math: tanh and exp there are ~10x less exact
# (measured on an H200: a small MLP's loss differs from the CPU's by 1.1e-6 relative; its
# finite differences by 1.2e-4 at the CPU's step), so the step must be wider there.
F32_STEP_ON = {"CUDA": 2e-2}


def _step_floor(x) -> float:
    return next((s for prefix, s in F32_STEP_ON.items() if x.dc.name.startswith(prefix)), F32_STEP)


def ag_gradcheck(fn: Callable[[], AGTensor], inputs: Sequence[AGTensor], eps: float = 1e-5, atol: float = 1e-4,
                 return_errors: bool = False) -> bool | tuple[bool, dict[int, float]]:
    """True iff max |analytic - numeric| < atol for every input with requires_grad.

    `fn()` runs the computation and returns a scalar loss; `inputs` lists the
    tensors to check. Each element is perturbed in place and restored."""
    if not callable(fn) or isinstance(inputs, AGTensor) or not all(isinstance(x, AGTensor) for x in inputs):
        raise GGMLError("ag_gradcheck: expected a function fn() and a list of ag tensors")
    with with_grad_tape():
        loss = fn()
    if not isinstance(loss, AGTensor) or loss.shape != (1, 1):
        raise GGMLError(f"ag_gradcheck: fn() must return a [1, 1] loss tensor, got {getattr(loss, 'shape', loss)!r}")
    grads = backward(loss)
    analytic = {x.id: (grads[x].data if x in grads else np.zeros(x.shape)) for x in inputs if x.requires_grad}
    errors = {}
    with no_grad():
        for x in inputs:
            if not x.requires_grad:
                continue
            base = x.data  # float64, so finite differences are not rounded to the storage type
            num = np.zeros_like(base)
            floor = _step_floor(x)
            for idx in np.ndindex(base.shape):
                h = max(eps, floor * max(1.0, abs(base[idx]))) if x.dtype != "f64" else eps
                num[idx] = _richardson(lambda d: _loss_at(fn, x, base, idx, d), h)
            x.data = base
            errors[x.id] = float(np.max(np.abs(analytic[x.id] - num)))
    ok = all(e < atol for e in errors.values())
    return (ok, errors) if return_errors else ok


def _loss_at(fn, x, base, idx, delta):
    moved = base.copy()
    moved[idx] += delta
    x.data = moved
    return float(fn().item())


def _richardson(f, h):
    d1 = (f(h) - f(-h)) / (2 * h)
    d2 = (f(h / 2) - f(-h / 2)) / h
    return (4 * d2 - d1) / 3
